//! API keys and tenants: a request needs a valid key; a tenant sees only its own responses,
//! everywhere one response can be named; a key's policy (models, tool servers and tools,
//! request rate, concurrent runs) holds; usage is recorded per key.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchyard::auth::{self, KeyPolicy};
use switchyard::config::{AuthMode, Config};
use switchyard::store::RunStore;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{ConfigFile, Database, TestApp, Turn, backends};

/// Keys mode: every request needs an API key.
fn keys(config: &mut Config) {
    config.auth.mode = AuthMode::Keys;
}

async fn key(store: &Arc<dyn RunStore>, tenant: &str, policy: KeyPolicy) -> String {
    auth::create_key(&**store, tenant, "test", &policy)
        .await
        .unwrap()
        .1
}

/// Requests as one caller.
struct As<'a> {
    app: &'a TestApp,
    key: Option<String>,
}

impl As<'_> {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.app.client.request(method, self.app.url(path));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (
            status,
            response.json().await.unwrap_or(Value::Null),
            headers,
        )
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, body, _) = self
            .send(self.request(reqwest::Method::POST, path).json(body))
            .await;
        (status, body)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let (status, body, _) = self.send(self.request(reqwest::Method::GET, path)).await;
        (status, body)
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        let (status, body, _) = self.send(self.request(reqwest::Method::DELETE, path)).await;
        (status, body)
    }
}

fn weather() -> Value {
    json!({"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

#[tokio::test]
async fn a_request_without_a_valid_key_is_a_401_in_the_openai_envelope() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let good = key(&store, "acme", KeyPolicy::default()).await;
    let body = json!({"model": "gpt-4o-mini", "input": "hi"});
    for (who, key) in [
        ("no key", None),
        (
            "a wrong key",
            Some("sk-sy-0123456789abcdef0123456789abcdef".to_string()),
        ),
        ("garbage", Some("x".to_string())),
    ] {
        let (status, reply) = As { app: &app, key }.post("/v1/responses", &body).await;
        assert_eq!(status, 401, "{who}: {reply}");
        assert_eq!(reply["error"]["type"], "authentication_error");
        assert_eq!(reply["error"]["code"], "invalid_api_key");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains("0123456789abcdef0123"),
            "the key is not echoed: {message}"
        );
    }
    let (status, _) = As {
        app: &app,
        key: None,
    }
    .get("/v1/models")
    .await;
    assert_eq!(status, 401, "every /v1 route needs a key");
    assert_eq!(app.get("/healthz").await.0, 200, "health needs none");
    assert_eq!(app.get("/readyz").await.0, 200);
    assert!(app.llm.requests().is_empty());

    app.llm.push(Turn::text("hello"));
    let (status, reply) = As {
        app: &app,
        key: Some(good.clone()),
    }
    .post("/v1/responses", &body)
    .await;
    assert_eq!(status, 200, "{reply}");

    // Revoked: refused within the cache's 5 seconds.
    let id = store.list_keys(Some("acme")).await.unwrap()[0].id.clone();
    assert!(
        store
            .revoke_key(&id, switchyard::time::UnixMillis::now())
            .await
            .unwrap()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    loop {
        let (status, _) = As {
            app: &app,
            key: Some(good.clone()),
        }
        .get("/v1/models")
        .await;
        if status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a revoked key still works"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The isolation matrix: tenant B, with its own valid key, names tenant A's responses and
/// items everywhere a request can, and gets what it would get for ids that do not exist.
#[tokio::test]
async fn a_tenant_sees_only_its_own_responses_wherever_it_names_one() {
    for db in backends().await {
        isolation_matrix(&db.url).await;
    }
}

async fn isolation_matrix(url: &str) {
    let app = TestApp::builder().database(url).config(keys).start().await;
    let store = app.store().await;
    let a = As {
        app: &app,
        key: Some(key(&store, "tenant-a", KeyPolicy::default()).await),
    };
    let b = As {
        app: &app,
        key: Some(key(&store, "tenant-b", KeyPolicy::default()).await),
    };

    // A: a finished run, a run paused on a client call, a run paused on an approval.
    app.llm.push(Turn::text("A's secret answer"));
    let (_, done) = a
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "A's question"}),
        )
        .await;
    let done_id = done["id"].as_str().unwrap().to_string();
    let message_id = done["output"][0]["id"].as_str().unwrap().to_string();
    app.llm.push(Turn::tool_call(
        "call_a",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let (_, paused) = a
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "w?", "tools": [weather()]}),
        )
        .await;
    let paused_id = paused["id"].as_str().unwrap().to_string();
    let call_item = paused["output"][0].clone();
    let approval_tools =
        json!([{"type": "mcp", "server_label": "builtin", "require_approval": "always"}]);
    app.llm.push(Turn::tool_call(
        "call_c",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    let (_, asking) = a
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "1+1?", "tools": approval_tools}),
        )
        .await;
    let request = asking["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap()
        .clone();
    let asking_id = asking["id"].as_str().unwrap().to_string();
    let upstream_before = app.llm.requests().len();

    // What B gets for A's ids must equal what it gets for ids nobody has.
    let unknown = "resp_0199aaaa0000700080000000000000a0".to_string();
    let reads = |id: &str| {
        vec![
            ("GET", format!("/v1/responses/{id}"), Value::Null),
            (
                "GET",
                format!("/v1/responses/{id}?stream=true"),
                Value::Null,
            ),
            (
                "GET",
                format!("/v1/responses/{id}/input_items"),
                Value::Null,
            ),
            ("POST", format!("/v1/responses/{id}/cancel"), json!({})),
            (
                "POST",
                format!("/v1/responses/{id}/submit_tool_outputs"),
                json!({"tool_outputs": [{"tool_call_id": "call_a", "output": "forged"}]}),
            ),
            ("DELETE", format!("/v1/responses/{id}"), Value::Null),
            (
                "POST",
                "/v1/responses".to_string(),
                json!({"model": "gpt-4o-mini", "input": "more", "previous_response_id": id}),
            ),
            (
                "POST",
                "/v1/responses/compact".to_string(),
                json!({"model": "gpt-4o-mini", "previous_response_id": id}),
            ),
        ]
    };
    let mut matrix = Vec::new();
    for (id, which) in [
        (&done_id, "finished"),
        (&paused_id, "paused on a client call"),
        (&asking_id, "paused on an approval"),
    ] {
        for ((method, path, body), (_, unknown_path, unknown_body)) in
            reads(id).into_iter().zip(reads(&unknown))
        {
            let call = |path: String, body: Value| {
                let b = &b;
                async move {
                    match method {
                        "GET" => b.get(&path).await,
                        "DELETE" => b.delete(&path).await,
                        _ => b.post(&path, &body).await,
                    }
                }
            };
            let (status, reply) = call(path.clone(), body.clone()).await;
            let (unknown_status, unknown_reply) = call(unknown_path, unknown_body).await;
            let scrub = |v: &Value| {
                v.to_string()
                    .replace(id.as_str(), "ID")
                    .replace(&unknown, "ID")
            };
            assert_eq!(
                (status, scrub(&reply)),
                (unknown_status, scrub(&unknown_reply)),
                "{method} {path} ({url})"
            );
            assert!(matches!(status, 400 | 404), "{method} {path}: {status}");
            matrix.push(format!(
                "{method} {} (A's run {which}{}): {status} {}, as for an unknown id",
                path.replace(id.as_str(), "{A's id}"),
                if body.is_null() || path.contains(id.as_str()) {
                    ""
                } else {
                    ", named in the body"
                },
                reply["error"]["code"]
                    .as_str()
                    .or(reply["error"]["type"].as_str())
                    .unwrap_or("")
            ));
        }
    }
    // A's items by reference, A's pause answered by replay, A's approval answered by replay.
    let (status, reply) = b
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
            {"role": "user", "content": "x"}, {"type": "item_reference", "id": message_id}]}),
        )
        .await;
    assert_eq!(
        (status, reply["error"]["param"].as_str()),
        (400, Some("input[1].id"))
    );
    matrix.push(format!(
        "POST /v1/responses with an item_reference to A's message: {status}, param input[1].id"
    ));
    app.llm.push(Turn::text("B's answer"));
    let (status, reply) = b
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "tools": [weather()], "input": [
            {"role": "user", "content": "w?"}, call_item,
            {"type": "function_call_output", "call_id": "call_a", "output": "forged"}]}),
        )
        .await;
    assert_eq!(status, 200, "B may replay any history it likes: {reply}");
    let (status, reply) = b
        .post("/v1/responses", &json!({"model": "gpt-4o-mini", "tools": approval_tools, "input": [
            {"role": "user", "content": "1+1?"},
            {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": true}]}))
        .await;
    assert_eq!(status, 400, "A's approval request is unknown to B: {reply}");
    matrix.push(format!(
        "POST /v1/responses replaying an approval of A's request: {status} ({})",
        reply["error"]["message"].as_str().unwrap_or("")
    ));
    // ... and none of it touched A's runs.
    let (_, a_paused) = a.get(&format!("/v1/responses/{paused_id}")).await;
    assert!(a_paused["required_action"].is_object(), "{a_paused}");
    let (_, a_asking) = a.get(&format!("/v1/responses/{asking_id}")).await;
    assert!(a_asking["required_action"].is_object(), "{a_asking}");
    let (status, _) = a.get(&format!("/v1/responses/{done_id}")).await;
    assert_eq!(status, 200, "B's DELETE did not delete A's run");
    assert_eq!(
        app.llm.requests().len(),
        upstream_before + 1,
        "only B's own replay ran"
    );

    // An Idempotency-Key is the tenant's own: the same key from B makes B's run.
    app.llm.push(Turn::text("A once"));
    app.llm.push(Turn::text("B once"));
    let keyed = |who: &As| {
        who.request(reqwest::Method::POST, "/v1/responses")
            .header("Idempotency-Key", "order-1")
            .json(&json!({"model": "gpt-4o-mini", "input": "same"}))
    };
    let (_, from_a, _) = a.send(keyed(&a)).await;
    let (_, from_b, _) = b.send(keyed(&b)).await;
    assert_ne!(from_a["id"], from_b["id"]);
    assert_eq!(from_b["output"][0]["content"][0]["text"], "B once");

    // The WebSocket transport is scoped alike.
    let url_ws = app.url("/v1/responses").replacen("http://", "ws://", 1);
    let request = socket_request(url_ws, b.key.as_deref().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket
        .send(Message::text(
            json!({"type": "response.create", "model": "gpt-4o-mini",
                   "previous_response_id": done_id, "input": "x"})
            .to_string(),
        ))
        .await
        .unwrap();
    let Some(Ok(Message::Text(text))) = socket.next().await else {
        panic!("no answer")
    };
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["code"], "previous_response_not_found");
    matrix.push("the same Idempotency-Key from A and B: two runs, each its own".to_string());
    matrix.push("WebSocket response.create with A's previous_response_id: error previous_response_not_found".to_string());
    eprintln!("isolation matrix ({url}):\n{}", matrix.join("\n"));
}

/// A WebSocket handshake with the key.
fn socket_request(
    url: String,
    key: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    request
}

#[tokio::test]
async fn a_keys_policy_limits_its_models_tool_servers_and_tools() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let policy = KeyPolicy {
        tool_servers: Some(vec!["builtin".into()]),
        denied_tools: vec!["fetch_url".into()],
        models: Some(vec!["gpt-4o-mini".into()]),
        ..KeyPolicy::default()
    };
    let limited = As {
        app: &app,
        key: Some(key(&store, "acme", policy).await),
    };
    let (status, reply) = limited
        .post("/v1/responses", &json!({"model": "gpt-4o", "input": "hi"}))
        .await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("model_not_found"))
    );
    // The models listed are those it may use.
    let (status, listed) = limited.get("/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-4o-mini"]);
    let (status, reply) = limited
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
            {"type": "mcp", "server_label": "builtin", "allowed_tools": ["fetch_url"]}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "tools[0].allowed_tools");
    app.llm.push(Turn::text("ok"));
    let (status, reply) = limited
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
            {"type": "mcp", "server_label": "builtin", "require_approval": "never"}]}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let offered: Vec<String> = app.llm.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        offered,
        ["current_time", "calculator"],
        "fetch_url is not shown"
    );
    let listed: Vec<&str> = reply["output"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["current_time", "calculator"]);
}

#[tokio::test]
async fn a_keys_request_rate_and_concurrent_runs_are_limited_with_retry_after() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let policy = KeyPolicy {
        requests_per_minute: Some(3),
        ..KeyPolicy::default()
    };
    let rated = As {
        app: &app,
        key: Some(key(&store, "acme", policy).await),
    };
    for _ in 0..3 {
        assert_eq!(rated.get("/v1/models").await.0, 200);
    }
    let (status, reply, headers) = rated
        .send(rated.request(reqwest::Method::GET, "/v1/models"))
        .await;
    assert_eq!(status, 429, "{reply}");
    assert_eq!(reply["error"]["code"], "rate_limit_exceeded");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let other = As {
        app: &app,
        key: Some(key(&store, "acme", KeyPolicy::default()).await),
    };
    assert_eq!(
        other.get("/v1/models").await.0,
        200,
        "the limit is the key's"
    );

    let policy = KeyPolicy {
        max_concurrent_runs: Some(1),
        ..KeyPolicy::default()
    };
    let single = As {
        app: &app,
        key: Some(key(&store, "acme", policy).await),
    };
    app.llm.push(Turn::text("slow").delayed(1_500));
    let first = single
        .request(reqwest::Method::POST, "/v1/responses")
        .json(&json!({"model": "gpt-4o-mini", "input": "one", "background": true}))
        .send();
    let first = first.await.unwrap().json::<Value>().await.unwrap();
    // Until a worker runs it, a queued run is not executing; wait until it is.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, reply, headers) = single
        .send(
            single
                .request(reqwest::Method::POST, "/v1/responses")
                .json(&json!({"model": "gpt-4o-mini", "input": "two"})),
        )
        .await;
    assert_eq!(status, 429, "{reply}");
    assert_eq!(headers["retry-after"], "1");
    // Once it has stopped (its task lets go of its slot as it ends), the next one may run.
    app.llm.push(Turn::text("now"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, reply) = single
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "three"}),
            )
            .await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429, "{reply}");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was not given back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, first) = single
        .get(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(first["status"], "completed");
}

#[tokio::test]
async fn token_usage_is_recorded_per_tenant_key_and_model() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let caller = As {
        app: &app,
        key: Some(key(&store, "acme", KeyPolicy::default()).await),
    };
    app.llm.push(Turn::text("one two three"));
    app.llm.push(Turn::text("four"));
    for input in ["a", "b"] {
        let (status, _) = caller
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": input}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let key_id = store.list_keys(Some("acme")).await.unwrap()[0].id.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let row = loop {
        let rows = store.usage(Some("acme")).await.unwrap();
        if let Some(row) = rows.into_iter().find(|r| r.runs == 2) {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "usage was not recorded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (row.key_id.as_str(), row.model.as_str()),
        (key_id.as_str(), "gpt-4o-mini")
    );
    // Turn::text reports 10 prompt tokens and a completion token per word.
    assert_eq!((row.input_tokens, row.output_tokens), (20, 4));
}

#[test]
fn open_mode_listens_on_loopback_only_unless_the_operator_says_otherwise() {
    let load = |host: &str, any: bool| {
        let file = ConfigFile::new(&format!(
            "[server]\nhost = \"{host}\"\n[auth]\nmode = \"open\"\nopen_on_any_address = {any}\n"
        ));
        let path = std::path::Path::new(&file.path);
        let config =
            Config::load_with_env(Some(path), figment::providers::Env::raw().only(&[])).unwrap();
        // Only auth's own errors: the default provider has no key in a test's environment.
        let errors = config.validate().errors;
        errors
            .into_iter()
            .filter(|e| e.starts_with("auth."))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let refused = load("0.0.0.0", false);
    assert!(refused.contains("auth.open_on_any_address"), "{refused}");
    assert_eq!(load("0.0.0.0", true), "");
    assert_eq!(load("127.0.0.1", false), "");
    assert_eq!(load("::1", false), "");
}

/// Two instances on one PostgreSQL database: a key made while they run works on both at once,
/// and once revoked both refuse it within the cache's 5 seconds.
#[tokio::test]
async fn a_key_works_on_every_instance_at_once_and_is_refused_by_all_once_revoked() {
    let Some(db) = Database::postgres().await else {
        return; // One instance serves an SQLite file.
    };
    let first = TestApp::builder()
        .database(&db.url)
        .config(keys)
        .start()
        .await;
    let second = TestApp::builder()
        .database(&db.url)
        .config(keys)
        .start()
        .await;
    let store = first.store().await;
    let secret = key(&store, "acme", KeyPolicy::default()).await;
    for app in [&first, &second] {
        let (status, _) = As {
            app,
            key: Some(secret.clone()),
        }
        .get("/v1/models")
        .await;
        assert_eq!(status, 200, "usable at once on every instance");
    }
    let id = store.list_keys(Some("acme")).await.unwrap()[0].id.clone();
    assert!(
        store
            .revoke_key(&id, switchyard::time::UnixMillis::now())
            .await
            .unwrap()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    for app in [&first, &second] {
        loop {
            let (status, _) = As {
                app,
                key: Some(secret.clone()),
            }
            .get("/v1/models")
            .await;
            if status == 401 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a revoked key still works"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test]
async fn a_key_names_tool_servers_by_url_only_when_its_tool_servers_list_says_request() {
    let app = TestApp::builder()
        .config(|c: &mut switchyard::config::Config| {
            c.auth.mode = AuthMode::Keys;
            c.tools.request_mcp.allowed_hosts = vec!["127.0.0.1".into()];
            c.tools.request_mcp.allow_private = true;
        })
        .start()
        .await;
    let store = app.store().await;
    // Nothing listens there: a key allowed to name it gets a run whose listing failed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let body = json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
        {"type": "mcp", "server_label": "mine", "server_url": format!("http://127.0.0.1:{port}/mcp"),
         "require_approval": "never"}]});
    for (servers, expected) in [
        (Some(vec!["builtin".to_string()]), 400),
        (
            Some(vec!["builtin".to_string(), "@request".to_string()]),
            200,
        ),
        (None, 200),
    ] {
        let policy = KeyPolicy {
            tool_servers: servers.clone(),
            ..KeyPolicy::default()
        };
        let caller = As {
            app: &app,
            key: Some(key(&store, "acme", policy).await),
        };
        if expected == 200 {
            app.llm.push(Turn::text("ok"));
        }
        let (status, reply) = caller.post("/v1/responses", &body).await;
        assert_eq!(status, expected, "{servers:?}: {reply}");
        if expected == 400 {
            assert_eq!(reply["error"]["param"], "tools[0].server_url");
            assert_eq!(
                reply["error"]["message"],
                "This API key may not name tool servers by 'server_url'."
            );
        }
    }
}
