//! The Conversations API over HTTP, on every backend: the eight endpoints, their errors, the
//! order of items, and tenants.

use serde_json::{Value, json};
use switchyard::auth::{self, KeyPolicy};
use switchyard::config::{AuthMode, Config};

use crate::support::{TestApp, backends};

fn message(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// The texts of a page of message items.
fn texts(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"][0]["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn every_endpoint_keeps_a_conversation_and_its_items_in_order_on_every_backend() {
    for db in backends().await {
        let app = TestApp::builder().database(&db.url).start().await;
        let (status, created) = app
            .post(
                "/v1/conversations",
                &json!({"metadata": {"topic": "demo"}, "items": [message("one"), message("two")]}),
            )
            .await;
        assert_eq!(status, 200, "{created}");
        let id = created["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("conv_") && id.len() == 5 + 48, "{id}");
        assert!(id[5..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(created["object"], "conversation");
        assert_eq!(created["metadata"], json!({"topic": "demo"}));
        assert!(created["created_at"].as_i64().unwrap() > 1_700_000_000);
        let base = format!("/v1/conversations/{id}");
        assert_eq!(app.get(&base).await, (200, created.clone()));

        // Items: added after the last, listed newest first by default.
        let (status, added) = app
            .post(
                &format!("{base}/items"),
                &json!({"items": [message("three"), {"role": "assistant", "content": "four"}]}),
            )
            .await;
        assert_eq!(status, 200, "{added}");
        assert_eq!(added["object"], "list");
        assert_eq!(added["data"].as_array().unwrap().len(), 2);
        let four = added["data"][1].clone();
        assert_eq!(four["type"], "message");
        assert_eq!(four["role"], "assistant");
        assert_eq!(four["status"], "completed");
        assert_eq!(four["content"][0]["type"], "output_text");
        assert!(four["id"].as_str().unwrap().starts_with("msg_"));
        let (status, page) = app.get(&format!("{base}/items")).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(texts(&page), ["four", "three", "two", "one"]);
        assert_eq!(page["has_more"], false);
        assert_eq!(page["first_id"], four["id"]);
        // Pages both ways.
        let (_, first) = app.get(&format!("{base}/items?order=asc&limit=3")).await;
        assert_eq!(texts(&first), ["one", "two", "three"]);
        assert_eq!(first["has_more"], true);
        let after = first["last_id"].as_str().unwrap();
        let (_, rest) = app
            .get(&format!("{base}/items?order=asc&limit=3&after={after}"))
            .await;
        assert_eq!(texts(&rest), ["four"]);
        assert_eq!(rest["has_more"], false);
        let (_, newest) = app
            .get(&format!(
                "{base}/items?limit=1&after={}",
                four["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(texts(&newest), ["three"]);

        // One item; taking it out answers the conversation.
        let item_path = format!("{base}/items/{}", four["id"].as_str().unwrap());
        assert_eq!(app.get(&item_path).await, (200, four.clone()));
        assert_eq!(app.delete(&item_path).await, (200, created.clone()));
        let (status, gone) = app.get(&item_path).await;
        assert_eq!(status, 404);
        assert_eq!(
            gone["error"]["message"],
            format!("Item with id '{}' not found.", four["id"].as_str().unwrap())
        );
        let (_, page) = app.get(&format!("{base}/items?order=asc")).await;
        assert_eq!(texts(&page), ["one", "two", "three"]);

        // An id the conversation has is refused, and nothing of that request is added; the
        // same item may be in another conversation.
        let three = page["data"][2].clone();
        let (status, refused) = app
            .post(
                &format!("{base}/items"),
                &json!({"items": [message("five"), three]}),
            )
            .await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(
            refused["error"]["message"],
            format!(
                "Duplicate item found with id {}.",
                three["id"].as_str().unwrap()
            )
        );
        let (_, page) = app.get(&format!("{base}/items?order=asc")).await;
        assert_eq!(texts(&page), ["one", "two", "three"]);
        let (status, other) = app
            .post("/v1/conversations", &json!({"items": [three]}))
            .await;
        assert_eq!(status, 200, "{other}");
        assert_eq!(other["metadata"], json!({}));

        // Metadata is replaced; deleting takes the items along.
        let (status, updated) = app
            .post(&base, &json!({"metadata": {"topic": "changed"}}))
            .await;
        assert_eq!(status, 200, "{updated}");
        assert_eq!(updated["metadata"], json!({"topic": "changed"}));
        assert_eq!(
            app.delete(&base).await,
            (
                200,
                json!({"id": id, "object": "conversation.deleted", "deleted": true})
            )
        );
        for path in [base.clone(), format!("{base}/items")] {
            let (status, body) = app.get(&path).await;
            assert_eq!(status, 404);
            assert_eq!(
                body["error"]["message"],
                format!("Conversation with id '{id}' not found.")
            );
        }
        let (_, still) = app
            .get(&format!(
                "/v1/conversations/{}/items",
                other["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(still["data"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_changes_nothing() {
    let app = TestApp::start().await;
    let many: Vec<Value> = (0..21).map(|i| message(&i.to_string())).collect();
    let cases = [
        (json!({"items": many}), "items", "array too long"),
        (
            json!({"items": [{"type": "message", "role": "pirate", "content": "arr"}]}),
            "items[0].role",
            "",
        ),
        (
            json!({"items": [{"type": "item_reference", "id": "msg_1"}]}),
            "items[0]",
            "Item references are not supported",
        ),
        (
            json!({"metadata": {"k": 1}}),
            "metadata.k",
            "expected a string",
        ),
        (json!({"colour": "blue"}), "colour", ""),
    ];
    for (body, param, fragment) in cases {
        let (status, reply) = app.post("/v1/conversations", &body).await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["param"], param, "{body}: {reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(fragment), "{message}");
    }
    let (_, created) = app.post("/v1/conversations", &json!({})).await;
    let base = format!("/v1/conversations/{}", created["id"].as_str().unwrap());
    for query in ["limit=0", "limit=101", "order=up", "after=msg_nowhere"] {
        let (status, reply) = app.get(&format!("{base}/items?{query}")).await;
        assert_eq!(status, 400, "{query}: {reply}");
    }
    let (status, reply) = app.post(&base, &json!({})).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "metadata");
    let (status, _) = app.get("/v1/conversations/conv_nowhere").await;
    assert_eq!(status, 404);
    let (status, _) = app
        .post(
            "/v1/conversations/conv_nowhere/items",
            &json!({"items": [message("x")]}),
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn another_tenants_conversation_is_answered_as_an_unknown_one() {
    let app = TestApp::builder()
        .config(|config: &mut Config| config.auth.mode = AuthMode::Keys)
        .start()
        .await;
    let store = app.store().await;
    let mut keys = Vec::new();
    for tenant in ["tenant-a", "tenant-b"] {
        let (_, secret) = auth::create_key(&*store, tenant, "test", &KeyPolicy::default())
            .await
            .unwrap();
        keys.push(secret);
    }
    let send = |method: reqwest::Method, path: &str, key: &str, body: Option<Value>| {
        let mut request = app.client.request(method, app.url(path)).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, created) = send(
        reqwest::Method::POST,
        "/v1/conversations",
        &keys[0],
        Some(json!({"items": [message("secret")]})),
    )
    .await;
    assert_eq!(status, 200);
    let id = created["id"].as_str().unwrap();
    let (_, items) = send(
        reqwest::Method::GET,
        &format!("/v1/conversations/{id}/items"),
        &keys[0],
        None,
    )
    .await;
    let item = items["data"][0]["id"].as_str().unwrap();
    let unknown = format!("Conversation with id '{id}' not found.");
    for (method, path, body) in [
        (
            reqwest::Method::GET,
            format!("/v1/conversations/{id}"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/conversations/{id}"),
            Some(json!({"metadata": {}})),
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/conversations/{id}"),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/conversations/{id}/items"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/conversations/{id}/items"),
            Some(json!({"items": [message("x")]})),
        ),
        (
            reqwest::Method::GET,
            format!("/v1/conversations/{id}/items/{item}"),
            None,
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/conversations/{id}/items/{item}"),
            None,
        ),
    ] {
        let (status, reply) = send(method.clone(), &path, &keys[1], body).await;
        assert_eq!(status, 404, "{method} {path}: {reply}");
        assert_eq!(reply["error"]["message"], unknown, "{method} {path}");
    }
    // The owner still has it all.
    let (status, items) = send(
        reqwest::Method::GET,
        &format!("/v1/conversations/{id}/items"),
        &keys[0],
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(texts(&items), ["secret"]);
}
