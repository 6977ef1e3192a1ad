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

/// A response's `conversation` and its items, and what the model was shown.
async fn conversation_texts(app: &TestApp, id: &str) -> Vec<(String, String)> {
    let (status, page) = app
        .get(&format!("/v1/conversations/{id}/items?order=asc&limit=100"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let kind = item["type"].as_str().unwrap().to_string();
            let text = match kind.as_str() {
                "message" => item["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                "function_call" => item["name"].as_str().unwrap().to_string(),
                "function_call_output" => item["output"].as_str().unwrap_or("").to_string(),
                _ => String::new(),
            };
            (kind, text)
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test]
async fn responses_in_a_conversation_read_it_and_add_their_items_at_each_stop_on_every_backend() {
    for db in backends().await {
        let app = TestApp::builder().database(&db.url).start().await;
        let (_, created) = app
            .post(
                "/v1/conversations",
                &json!({"items": [message("I am Ada.")]}),
            )
            .await;
        let id = created["id"].as_str().unwrap().to_string();

        app.llm.push(crate::support::Turn::text("Hello Ada."));
        let (status, first) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Hi!"}),
            )
            .await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(first["conversation"], json!({"id": id}));
        let shown = &app.llm.requests()[0]["messages"];
        assert_eq!(
            shown,
            &json!([{"role": "user", "content": "I am Ada."}, {"role": "user", "content": "Hi!"}])
        );
        assert_eq!(
            conversation_texts(&app, &id).await,
            pairs(&[
                ("message", "I am Ada."),
                ("message", "Hi!"),
                ("message", "Hello Ada.")
            ])
        );
        // The output items are the Response's, ids and all.
        let (_, page) = app
            .get(&format!("/v1/conversations/{id}/items?limit=1"))
            .await;
        assert_eq!(page["data"][0], first["output"][0]);

        // A client function pauses the next response: its call is in the conversation, and the
        // next request answers it with only the output.
        let weather = json!({"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
        app.llm.push(crate::support::Turn::tool_call(
            "call_w",
            "get_weather",
            r#"{"city":"Paris"}"#,
        ));
        let (status, paused) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": {"id": id},
                    "input": "Weather in Paris?", "tools": [weather]}),
            )
            .await;
        assert_eq!(status, 200, "{paused}");
        assert_eq!(paused["output"][0]["type"], "function_call");
        assert_eq!(
            conversation_texts(&app, &id).await[3..],
            pairs(&[
                ("message", "Weather in Paris?"),
                ("function_call", "get_weather")
            ])
        );
        app.llm.push(crate::support::Turn::text("Sunny."));
        let (status, answered) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "tools": [weather],
                    "input": [{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24C"}]}),
            )
            .await;
        assert_eq!(status, 200, "{answered}");
        assert_eq!(answered["output"][0]["content"][0]["text"], "Sunny.");
        let requests = app.llm.requests();
        let roles: Vec<&str> = requests[2]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["user", "user", "assistant", "user", "assistant", "tool"]
        );
        assert_eq!(
            conversation_texts(&app, &id).await[5..],
            pairs(&[
                ("function_call_output", "sunny, 24C"),
                ("message", "Sunny.")
            ])
        );
        // The paused response was completed by the answer, as a continuation completes it.
        let (_, before) = app
            .get(&format!("/v1/responses/{}", paused["id"].as_str().unwrap()))
            .await;
        assert_eq!(before["status"], "completed");
    }
}

#[tokio::test]
async fn one_response_at_a_time_holds_a_conversation_on_every_backend() {
    for db in backends().await {
        let app = TestApp::builder().database(&db.url).start().await;
        let (_, created) = app.post("/v1/conversations", &json!({})).await;
        let id = created["id"].as_str().unwrap().to_string();
        app.llm
            .push(crate::support::Turn::text("slow answer").delayed(1_500));
        let (status, running) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "first",
                    "background": true}),
            )
            .await;
        assert_eq!(status, 200, "{running}");
        // While it runs, a second request on the conversation is refused with OpenAI's error;
        // the items API is not locked.
        let (status, locked) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "second"}),
            )
            .await;
        assert_eq!(status, 400, "{locked}");
        assert_eq!(
            locked["error"],
            json!({"type": "invalid_request_error", "param": "conversation",
                "code": "conversation_locked",
                "message": "Another process is currently operating on this conversation. Please retry in a few seconds."})
        );
        // Once it stops, the conversation is free again.
        let run = format!("/v1/responses/{}", running["id"].as_str().unwrap());
        for _ in 0..200 {
            if app.get(&run).await.1["status"] == "completed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        app.llm.push(crate::support::Turn::text("ok"));
        let (status, next) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "third"}),
            )
            .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(
            conversation_texts(&app, &id).await,
            pairs(&[
                ("message", "first"),
                ("message", "slow answer"),
                ("message", "third"),
                ("message", "ok")
            ])
        );
    }
}

#[tokio::test]
async fn a_conversation_parameter_that_cannot_work_is_refused_naming_it() {
    let app = TestApp::start().await;
    let (_, created) = app
        .post("/v1/conversations", &json!({"items": [message("kept")]}))
        .await;
    let id = created["id"].as_str().unwrap();
    let (_, items) = app.get(&format!("/v1/conversations/{id}/items")).await;
    let kept = items["data"][0].clone();
    let cases = [
        (
            json!({"conversation": id, "previous_response_id": "resp_1", "input": "x"}),
            400,
            "conversation",
        ),
        (
            json!({"conversation": id, "store": false, "input": "x"}),
            400,
            "store",
        ),
        (
            json!({"conversation": 7, "input": "x"}),
            400,
            "conversation",
        ),
        (
            json!({"conversation": {"name": "x"}, "input": "x"}),
            400,
            "conversation.id",
        ),
        (json!({"conversation": id, "input": [kept]}), 400, "input"),
        (
            json!({"conversation": "conv_nowhere", "input": "x"}),
            404,
            "",
        ),
    ];
    for (mut body, status, param) in cases {
        body["model"] = json!("gpt-4o-mini");
        let (got, reply) = app.post("/v1/responses", &body).await;
        assert_eq!(got, status, "{body}: {reply}");
        if status == 400 {
            assert_eq!(reply["error"]["param"], param, "{body}: {reply}");
        }
    }
    // Nothing was added by the refused requests.
    let (_, after) = app.get(&format!("/v1/conversations/{id}/items")).await;
    assert_eq!(after["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn two_concurrent_creates_on_one_conversation_give_one_run_and_one_refusal_on_every_backend()
{
    for db in backends().await {
        let app = TestApp::builder().database(&db.url).start().await;
        let (_, created) = app.post("/v1/conversations", &json!({})).await;
        let id = created["id"].as_str().unwrap().to_string();
        app.llm
            .push(crate::support::Turn::text("the one").delayed(300));
        app.llm
            .push(crate::support::Turn::text("a second one").delayed(300));
        let body = json!({"model": "gpt-4o-mini", "conversation": id, "input": "go"});
        let (a, b) = tokio::join!(
            app.post("/v1/responses", &body),
            app.post("/v1/responses", &body)
        );
        let mut statuses = [a.0, b.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 400], "{a:?} {b:?}");
        let refused = if a.0 == 400 { &a.1 } else { &b.1 };
        assert_eq!(refused["error"]["code"], "conversation_locked");
        assert_eq!(
            conversation_texts(&app, &id).await,
            pairs(&[("message", "go"), ("message", "the one")])
        );
    }
}

#[tokio::test]
async fn a_killed_holders_run_keeps_the_conversation_until_it_is_taken_over_and_finished() {
    use crate::support::{Binary, FakeLlm, Turn, read_until_cut};
    for db in backends().await {
        let llm = FakeLlm::start().await.unwrap();
        // A's turn never ends before A is killed. The one asked again after the takeover takes
        // 5 s, so that B's start and its request for a second response come before the run is
        // finished even on a loaded machine; B waits up to 30 s for its first byte.
        llm.push(Turn::text("never sent").delayed(60_000));
        llm.push(Turn::text("Finished after the takeover.").delayed(5_000));
        let mut a = Binary::new().database(&db.url).upstream(&llm).spawn();
        let client = reqwest::Client::new();
        let created: Value = client
            .post(a.url("/v1/conversations"))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = created["id"].as_str().unwrap().to_string();
        let response = client
            .post(a.url("/v1/responses"))
            .json(
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "go",
                "stream": true}),
            )
            .send()
            .await
            .unwrap();
        let (first, first_seen) = tokio::sync::oneshot::channel();
        let live = tokio::spawn(read_until_cut(response, first));
        first_seen.await.unwrap();
        // A asked the upstream for its turn: otherwise B's request would get that 60 s turn.
        for _ in 0..1000 {
            if !llm.requests().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(llm.requests().len(), 1, "A never asked the upstream");
        a.kill();
        let run = live.await.unwrap().response_id();

        // B: another instance (PostgreSQL) or the restarted process (SQLite).
        let b = TestApp::builder()
            .database(&db.url)
            .upstream(llm)
            .config(|c| {
                c.runs.lease_ttl_ms = 1_000;
                c.runs.sweep_interval_ms = 100;
                c.llm.first_byte_timeout_ms = 30_000;
            })
            .start()
            .await;
        let body = json!({"model": "gpt-4o-mini", "conversation": id, "input": "meanwhile"});
        let (status, refused) = b.post("/v1/responses", &body).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "conversation_locked");
        // The takeover waits for the lease to run out (1 s), then the model's turn (5 s).
        let done = b
            .wait_until_stopped_within(&run, std::time::Duration::from_secs(30))
            .await;
        assert_eq!(done["status"], "completed", "{}: {done}", db.url);
        assert_eq!(
            conversation_texts(&b, &id).await,
            pairs(&[
                ("message", "go"),
                ("message", "Finished after the takeover.")
            ])
        );
        b.llm.push(Turn::text("ok"));
        let (status, next) = b.post("/v1/responses", &body).await;
        assert_eq!(status, 200, "{next}");
    }
}

#[tokio::test]
async fn a_resumed_response_takes_the_conversation_again_and_adds_only_what_is_new_on_every_backend()
 {
    use crate::support::Turn;
    for db in backends().await {
        let app = TestApp::builder().database(&db.url).start().await;
        let (_, created) = app.post("/v1/conversations", &json!({})).await;
        let id = created["id"].as_str().unwrap().to_string();
        let weather = json!({"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
        app.llm.push(Turn::tool_call(
            "call_p",
            "get_weather",
            r#"{"city":"Oslo"}"#,
        ));
        let (status, paused) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Oslo?",
                    "tools": [weather]}),
            )
            .await;
        assert_eq!(status, 200, "{paused}");
        let paused_id = paused["id"].as_str().unwrap().to_string();

        // Another response holds the conversation meanwhile: resuming is refused as a second
        // response would be, and the paused response stays paused.
        app.llm.push(Turn::text("busy").delayed(1_000));
        let (status, busy) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Meanwhile?",
                    "background": true}),
            )
            .await;
        assert_eq!(status, 200, "{busy}");
        let submit = json!({"tool_outputs": [{"tool_call_id": "call_p", "output": "cold"}]});
        let path = format!("/v1/responses/{paused_id}/submit_tool_outputs");
        let (status, refused) = app.post(&path, &submit).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "conversation_locked");
        let (_, still) = app.get(&format!("/v1/responses/{paused_id}")).await;
        assert!(still["required_action"].is_object(), "{still}");

        // Once it is free, the resumed response takes it and adds its output once.
        let busy_path = format!("/v1/responses/{}", busy["id"].as_str().unwrap());
        for _ in 0..200 {
            if app.get(&busy_path).await.1["status"] == "completed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        app.llm.push(Turn::text("Cold in Oslo."));
        let (status, done) = app.post(&path, &submit).await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["status"], "completed");
        assert_eq!(done["conversation"], json!({"id": id}));
        assert_eq!(
            conversation_texts(&app, &id).await,
            pairs(&[
                ("message", "Oslo?"),
                ("function_call", "get_weather"),
                ("message", "Meanwhile?"),
                ("message", "busy"),
                ("function_call_output", "cold"),
                ("message", "Cold in Oslo.")
            ])
        );
        // The resumed turn saw the conversation up to its own items, then them.
        let requests = app.llm.requests();
        let last = requests.last().unwrap()["messages"].as_array().unwrap();
        let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool"]);

        // A failed response adds nothing; a cancelled one adds what it had.
        app.llm.push(Turn::error(500, "boom"));
        let (status, failed) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Fail?"}),
            )
            .await;
        assert!(status == 200 || status == 502, "{failed}");
        assert_eq!(conversation_texts(&app, &id).await.len(), 6);
        app.llm.push(Turn::text("never").delayed(5_000));
        let (_, background) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Cancel me.",
                    "background": true}),
            )
            .await;
        let cancel = format!(
            "/v1/responses/{}/cancel",
            background["id"].as_str().unwrap()
        );
        let mut cancelled = Value::Null;
        for _ in 0..100 {
            let (status, body) = app.post(&cancel, &json!({})).await;
            if status == 200 && body["status"] == "cancelled" {
                cancelled = body;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(
            conversation_texts(&app, &id).await.last().unwrap(),
            &("message".to_string(), "Cancel me.".to_string())
        );
    }
}

#[tokio::test]
async fn a_conversation_works_over_the_websocket() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let app = TestApp::start().await;
    let (_, created) = app.post("/v1/conversations", &json!({})).await;
    let id = created["id"].as_str().unwrap().to_string();
    let url = app.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut socket = tokio_tungstenite::connect_async(url).await.unwrap().0;
    for (input, answer) in [("One?", "One."), ("Two?", "Two.")] {
        app.llm.push(crate::support::Turn::text(answer));
        let request = json!({"type": "response.create", "model": "gpt-4o-mini",
            "conversation": id, "input": input});
        socket
            .send(Message::text(request.to_string()))
            .await
            .unwrap();
        let mut last = Value::Null;
        while let Some(message) = socket.next().await {
            let Message::Text(text) = message.unwrap() else {
                continue;
            };
            last = serde_json::from_str(&text).unwrap();
            if last["type"] == "response.completed" || last["type"] == "error" {
                break;
            }
        }
        assert_eq!(last["type"], "response.completed", "{last}");
        assert_eq!(last["response"]["conversation"], json!({"id": id}));
    }
    let requests = app.llm.requests();
    let second: Vec<&str> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(second, ["One?", "One.", "Two?"]);
    assert_eq!(
        conversation_texts(&app, &id).await,
        pairs(&[
            ("message", "One?"),
            ("message", "One."),
            ("message", "Two?"),
            ("message", "Two.")
        ])
    );
}

#[tokio::test]
async fn deleting_the_response_that_holds_a_conversation_lets_go_of_it() {
    let app = TestApp::start().await;
    let (_, created) = app.post("/v1/conversations", &json!({})).await;
    let id = created["id"].as_str().unwrap().to_string();
    app.llm
        .push(crate::support::Turn::text("slow").delayed(1_500));
    let (_, running) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "conversation": id, "input": "first",
                "background": true}),
        )
        .await;
    let (status, deleted) = app
        .delete(&format!(
            "/v1/responses/{}",
            running["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{deleted}");
    app.llm.push(crate::support::Turn::text("ok"));
    let (status, next) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "conversation": id, "input": "second"}),
        )
        .await;
    assert_eq!(status, 200, "{next}");
}

#[tokio::test]
async fn a_paused_response_whose_conversation_was_deleted_resumes_in_none() {
    use crate::support::Turn;
    let app = TestApp::start().await;
    let (_, created) = app.post("/v1/conversations", &json!({})).await;
    let id = created["id"].as_str().unwrap().to_string();
    let weather = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    app.llm.push(Turn::tool_call(
        "call_d",
        "get_weather",
        r#"{"city":"Lima"}"#,
    ));
    let (status, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "conversation": id, "input": "Lima?",
                "tools": [weather]}),
        )
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(app.delete(&format!("/v1/conversations/{id}")).await.0, 200);
    app.llm.push(Turn::text("Mild in Lima."));
    let submit = json!({"tool_outputs": [{"tool_call_id": "call_d", "output": "mild"}]});
    let path = format!(
        "/v1/responses/{}/submit_tool_outputs",
        paused["id"].as_str().unwrap()
    );
    let (status, done) = app.post(&path, &submit).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed");
    // It was shown its own items: the question, its call and the output.
    let requests = app.llm.requests();
    let roles: Vec<&str> = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
}
