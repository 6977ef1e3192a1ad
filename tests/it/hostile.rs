//! Facing the internet: every limit a clear 400 naming the field, hostile text never a 5xx,
//! slow clients timed out and connections capped, log lines that cannot be forged, secrets kept
//! out of what is shown, and an upstream that fails retried (before its first byte only),
//! limited, and replaced by a fallback; a database that cannot be reached a quick 503.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Database, FakeLlm, Step, TestApp, Turn, backends, http_tool, serve};

fn ask(extra: Value) -> Value {
    let mut body = json!({"model": "gpt-4o-mini", "input": "hi"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn deep(levels: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..levels {
        schema = json!({"type": "object", "properties": {"x": schema}});
    }
    schema
}

#[tokio::test]
async fn every_limit_is_a_400_naming_the_field() {
    let app = TestApp::builder()
        .config(|c| {
            c.limits.max_tools = 3;
            c.limits.max_schema_bytes = 2_000;
            c.limits.max_schema_depth = 5;
            c.limits.max_input_items = 4;
            c.limits.max_input_bytes = 10_000;
            c.limits.max_instructions_bytes = 100;
        })
        .start()
        .await;
    let function = |name: &str, parameters: Value| json!({"type": "function", "name": name, "parameters": parameters});
    let items: Vec<Value> = (0..5)
        .map(|n| json!({"role": "user", "content": format!("m{n}")}))
        .collect();
    let many: Vec<Value> = (0..4)
        .map(|n| function(&format!("f{n}"), json!({"type": "object"})))
        .collect();
    let cases = [
        ("tools", ask(json!({"tools": many})), "tools[3]"),
        (
            "a namespace's tools count",
            ask(
                json!({"tools": [function("a", json!({"type": "object"})), {"type": "namespace", "name": "n", "tools": [
                function("b", json!({"type": "object"})), function("c", json!({"type": "object"}))]},
                function("d", json!({"type": "object"}))]}),
            ),
            "tools[2]",
        ),
        (
            "schema size",
            ask(
                json!({"tools": [function("f", json!({"type": "object", "description": "x".repeat(3_000)}))]}),
            ),
            "tools[0].parameters",
        ),
        (
            "schema depth",
            ask(json!({"tools": [function("f", deep(6))]})),
            "tools[0].parameters",
        ),
        ("input items", ask(json!({"input": items})), "input"),
        (
            "input size",
            ask(json!({"input": "x".repeat(10_001)})),
            "input",
        ),
        (
            "instructions",
            ask(json!({"instructions": "x".repeat(101)})),
            "instructions",
        ),
        (
            "metadata pairs",
            ask(
                json!({"metadata": (0..17).map(|n| (format!("k{n}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            ),
            "metadata",
        ),
        (
            "metadata key",
            ask(json!({"metadata": {"k".repeat(65): "v"}})),
            "metadata",
        ),
        (
            "metadata value",
            ask(json!({"metadata": {"k": "v".repeat(513)}})),
            "metadata.k",
        ),
    ];
    for (what, body, param) in cases {
        let (status, reply) = app.post("/v1/responses", &body).await;
        assert_eq!(status, 400, "{what}: {reply}");
        assert_eq!(reply["error"]["param"], param, "{what}: {reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
    }
    assert!(app.llm.requests().is_empty(), "nothing reached the model");
}

async fn big_output_tool(bytes: usize) -> String {
    let app = axum::Router::new().route(
        "/big",
        axum::routing::post(move || async move { "é".repeat(bytes / 2) }),
    );
    format!("{}/big", serve(app).await)
}

#[tokio::test]
async fn a_tool_output_over_the_limit_is_cut_with_a_marker() {
    let url = big_output_tool(50_000).await;
    let app = TestApp::builder()
        .config(move |c| {
            c.limits.max_tool_output_bytes = 1_001;
            c.tool_servers.insert(
                "big".into(),
                switchyard::config::ToolServerConfig {
                    tools: vec![http_tool("big", url, None)],
                    ..Default::default()
                },
            );
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call("c1", "big", "{}"));
    app.llm.push(Turn::text("ok"));
    let (status, body) = app
        .post("/v1/responses", &ask(json!({"tools": [{"type": "mcp", "server_label": "big", "require_approval": "never"}]})))
        .await;
    assert_eq!(status, 200, "{body}");
    let output = body["output"][1]["output"].as_str().unwrap();
    let (kept, marker) = output.split_once("\n[… ").unwrap();
    assert!(kept.len() <= 1_001 && kept.len() >= 999, "{}", kept.len());
    assert!(marker.contains("more bytes of output were cut"), "{marker}");
    let sent = &app.llm.requests()[1]["messages"];
    let result = sent
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(result["content"].as_str().unwrap().len() < 1_100);
}

/// A run of hostile requests on both backends: NUL characters in every text field, ids and
/// queries; malformed JSON, wrong types, absurd numbers. Each answer is checked: never a 5xx.
#[tokio::test]
async fn a_run_of_hostile_requests_never_gets_a_server_error() {
    for db in backends().await {
        let url = &db.url;
        let app = TestApp::builder().database(url).start().await;
        app.llm
            .push(Turn::tool_call("call_n", "get_weather", r#"{"city": "x"}"#));
        let (_, paused) = app
            .post(
                "/v1/responses",
                &ask(json!({"tools": [{"type": "function", "name": "get_weather"}]})),
            )
            .await;
        let paused_id = paused["id"].as_str().unwrap().to_string();
        let nul = "a\u{0}b";
        let bodies = vec![
            ask(json!({"input": nul})),
            ask(json!({"instructions": nul})),
            ask(json!({"metadata": {"k": nul}})),
            ask(json!({"metadata": {nul: "v"}})),
            ask(json!({"user": nul, "safety_identifier": nul, "prompt_cache_key": nul})),
            ask(json!({"model": nul})),
            ask(json!({"previous_response_id": nul})),
            ask(json!({"tools": [{"type": "function", "name": "f", "description": nul}]})),
            ask(json!({"tools": [{"type": "function", "name": nul}]})),
            ask(json!({"tools": [{"type": "mcp", "server_label": nul}]})),
            ask(json!({"input": [{"type": "item_reference", "id": nul}]})),
            ask(
                json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": nul}]}]}),
            ),
            ask(
                json!({"input": [{"type": "function_call_output", "call_id": nul, "output": nul}]}),
            ),
            ask(
                json!({"input": [{"type": "mcp_approval_response", "approval_request_id": nul, "approve": true}]}),
            ),
            ask(json!({"temperature": 1e308, "top_p": -1, "max_output_tokens": -5})),
            ask(json!({"input": 42})),
            ask(json!({"tools": "everything"})),
            ask(json!({"metadata": [1, 2]})),
            ask(json!({"text": {"format": {"type": nul}}})),
            ask(json!({"tool_choice": {"type": "function", "name": nul}})),
        ];
        let mut sent = 0;
        let mut server_errors = Vec::new();
        for body in &bodies {
            app.llm.push(Turn::text("fine"));
            let (status, reply) = app.post("/v1/responses", body).await;
            sent += 1;
            if status >= 500 {
                server_errors.push(format!("{body} -> {status} {reply}"));
            }
        }
        let paths = [
            format!("/v1/responses/{}", "resp_%00"),
            format!("/v1/responses/{}/input_items?after=%00", paused_id),
            format!("/v1/responses/{}?stream=true&starting_after=%00", paused_id),
            "/v1/responses/resp_x%00y/input_items".to_string(),
        ];
        for path in &paths {
            let (status, reply) = app.get(path).await;
            sent += 1;
            if status >= 500 {
                server_errors.push(format!("GET {path} -> {status} {reply}"));
            }
        }
        for raw in [
            "{",
            "[]",
            "{\"model\": \"gpt-4o-mini\", \"input\": \"\\u0000\"",
            "\u{0}",
            "null",
        ] {
            let response = app
                .client
                .post(app.url("/v1/responses"))
                .header("content-type", "application/json")
                .body(raw.to_string())
                .send()
                .await
                .unwrap();
            sent += 1;
            if response.status().as_u16() >= 500 {
                server_errors.push(format!("{raw:?} -> {}", response.status()));
            }
        }
        let (status, reply) = app
            .post(
                &format!("/v1/responses/{paused_id}/submit_tool_outputs"),
                &json!({"tool_outputs": [{"tool_call_id": "call_n", "output": nul}]}),
            )
            .await;
        sent += 1;
        assert_eq!(
            status, 200,
            "a NUL in a tool output is stored escaped: {reply}"
        );
        assert!(server_errors.is_empty(), "{url}: {server_errors:#?}");
        eprintln!("hostile run on {url}: {sent} requests, 0 server errors");
    }
}

/// A raw connection to the app.
async fn connect(app: &TestApp) -> tokio::net::TcpStream {
    let addr = app.base.trim_start_matches("http://");
    tokio::net::TcpStream::connect(addr).await.unwrap()
}

/// Reads what the server sends until it closes, within `limit`.
async fn read_to_close(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut received)).await;
    read.ok()
        .map(|_| String::from_utf8_lossy(&received).into_owned())
}

#[tokio::test]
async fn slow_clients_are_timed_out_and_connections_capped() {
    let app = TestApp::builder()
        .config(|c| {
            c.server.header_read_timeout_seconds = 1;
            c.server.body_read_timeout_seconds = 1;
            c.server.max_connections = 4;
        })
        .start()
        .await;
    // Headers that never end: closed.
    let mut stalled = connect(&app).await;
    stalled
        .write_all(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(
        read_to_close(&mut stalled, Duration::from_secs(5))
            .await
            .is_some()
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    // A body that never comes: a 408.
    let mut slow = connect(&app).await;
    slow.write_all(
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mo",
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut slow, Duration::from_secs(5))
        .await
        .unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    // Four idle connections fill the cap; a fifth request is served once they are reaped.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(connect(&app).await);
    }
    let started = Instant::now();
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "the cap made it wait: {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "{waited:?}");
}

#[tokio::test]
async fn a_tool_url_secret_never_reaches_the_client_or_the_model() {
    // Nothing listens there: the error names the URL, which carries a key.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("http://127.0.0.1:{port}/search?api_key=sk-SECRET-123");
    let app = TestApp::builder()
        .config(move |c| {
            c.tool_servers.insert(
                "search".into(),
                switchyard::config::ToolServerConfig {
                    tools: vec![http_tool("search", url, Some(1_000))],
                    ..Default::default()
                },
            );
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call("c1", "search", "{}"));
    app.llm.push(Turn::text("sorry"));
    let (status, body) = app
        .post("/v1/responses", &ask(json!({"tools": [{"type": "mcp", "server_label": "search", "require_approval": "never"}]})))
        .await;
    assert_eq!(status, 200, "{body}");
    let error = body["output"][1]["error"].to_string();
    assert!(error.contains("could not be reached"), "{error}");
    assert!(error.contains("api_key=***"), "{error}");
    assert!(!body.to_string().contains("sk-SECRET"), "{body}");
    assert!(
        !serde_json::to_string(&app.llm.requests())
            .unwrap()
            .contains("sk-SECRET")
    );
}

#[tokio::test]
async fn an_upstream_that_fails_before_streaming_is_retried_and_never_after() {
    let app = TestApp::builder()
        .config(|c| {
            c.llm.retries = 2;
            c.llm.retry_initial_ms = 50;
        })
        .start()
        .await;
    app.llm.push(Turn::error(503, "overloaded"));
    app.llm.push(Turn::error(500, "oops"));
    app.llm.push(Turn::text("third time lucky"));
    let (status, body) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["content"][0]["text"], "third time lucky");
    assert_eq!(app.llm.requests().len(), 3);

    // A 400 is the request's fault: not retried, and the client's 400.
    app.llm.push(Turn::error(400, "bad"));
    let (status, _) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 400);
    assert_eq!(app.llm.requests().len(), 4);

    // Cut after the first byte: never asked again (the output would be duplicated).
    app.llm.push(Turn {
        steps: vec![
            Step::Text {
                text: "Half".into(),
            },
            Step::Cut,
        ],
    });
    app.llm.push(Turn::text("must not be asked"));
    let sse = app.stream(&ask(json!({}))).await;
    assert_eq!(sse.last().event, "response.failed");
    assert_eq!(app.llm.requests().len(), 5);
    assert_eq!(app.llm.pending(), 1);
}

#[tokio::test]
async fn an_upstream_429_honours_retry_after_and_is_a_429_once_retries_are_spent() {
    let app = TestApp::builder()
        .config(|c| {
            c.llm.retries = 1;
            c.llm.retry_initial_ms = 10;
            c.llm.retry_max_ms = 2_000;
        })
        .start()
        .await;
    let limited = |after: u64| Turn {
        steps: vec![Step::Status {
            status: 429,
            body: json!({"error": {"message": "slow down"}}),
            retry_after: Some(after),
        }],
    };
    app.llm.push(limited(1));
    app.llm.push(Turn::text("after waiting"));
    let started = Instant::now();
    let (status, body) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After: 1 was honoured: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // A wait longer than this service waits (retry_max_ms) is not waited for: a 429 at once.
    app.llm.push(limited(30));
    let started = Instant::now();
    let (status, _) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 429);
    assert!(started.elapsed() < Duration::from_secs(1));

    app.llm.push(limited(1));
    app.llm.push(limited(1));
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .json(&ask(json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429, "not a 502");
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(
        !body.to_string().contains("slow down"),
        "the upstream's words stay in the log"
    );
}

#[tokio::test]
async fn a_model_falls_back_to_another_provider_when_its_own_fails() {
    let backup = FakeLlm::start().await.unwrap();
    let backup_url = backup.base_url();
    let app = TestApp::builder()
        .config(move |c| {
            c.providers.insert(
                "backup".into(),
                switchyard::config::ProviderConfig {
                    base_url: Some(backup_url),
                    models: vec!["llama3".into()],
                    ..Default::default()
                },
            );
            c.fallbacks.insert(
                "gpt-4o-mini".into(),
                switchyard::config::FallbackConfig {
                    model: "llama3".into(),
                },
            );
        })
        .start()
        .await;
    app.llm.push(Turn::error(500, "primary down"));
    backup.push(Turn::text("from the backup"));
    let (status, body) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["content"][0]["text"], "from the backup");
    assert_eq!(backup.requests()[0]["model"], "llama3");
    assert_eq!(
        body["model"], "gpt-4o-mini",
        "the response keeps the model asked for"
    );
}

#[tokio::test]
async fn a_provider_serves_at_most_its_concurrent_requests() {
    let app = TestApp::builder()
        .config(|c| c.llm.provider.max_concurrent_requests = Some(1))
        .start()
        .await;
    app.llm.push(Turn::text("first").delayed(600));
    app.llm.push(Turn::text("second"));
    let started = Instant::now();
    let one = ask(json!({"input": "one"}));
    let (a, b) = tokio::join!(app.post("/v1/responses", &one), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = app
            .post("/v1/responses", &ask(json!({"input": "two"})))
            .await;
        (answer, started.elapsed())
    });
    assert_eq!(a.0, 200);
    let ((status, _), elapsed) = b;
    assert_eq!(status, 200);
    assert!(
        elapsed >= Duration::from_millis(550),
        "the second waited for the first: {elapsed:?}"
    );
}

/// A TCP proxy that can be cut: connections through it fail while it is cut, or, stalled,
/// are accepted and never answered.
struct Proxy {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn to(target: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accepting = open.clone();
        let stalling = stalled.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut client, _)) = listener.accept().await {
                if stalling.load(Ordering::SeqCst) {
                    held.push(client);
                    continue;
                }
                if !accepting.load(Ordering::SeqCst) {
                    continue;
                }
                let target = target.clone();
                let mut cuts = cuts.clone();
                // Only a cut after this connection was made ends it.
                cuts.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            open,
            stalled,
            cut,
        }
    }

    /// Cuts open connections; new ones are accepted and left unanswered.
    fn stall(&self) {
        self.stalled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn set(&self, open: bool) {
        self.open.store(open, std::sync::atomic::Ordering::SeqCst);
        if !open {
            self.cut.send_modify(|n| *n += 1);
        }
    }
}

#[tokio::test]
async fn a_database_that_cannot_be_reached_is_a_quick_503_and_work_resumes_when_it_is_back() {
    let Some(db) = Database::postgres().await else {
        return; // PostgreSQL only: an SQLite file is always there.
    };
    let url = &db.url;
    let target = url
        .split("://")
        .nth(1)
        .unwrap()
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let proxy = Proxy::to(target.clone()).await;
    let proxied = url.replacen(&target, &proxy.addr.to_string(), 1);
    let app = TestApp::builder().database(&proxied).start().await;
    app.llm.push(Turn::text("up"));
    assert_eq!(app.post("/v1/responses", &ask(json!({}))).await.0, 200);

    proxy.set(false);
    let started = Instant::now();
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .json(&ask(json!({})))
        .send()
        .await
        .unwrap();
    let first = started.elapsed();
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert!(first < Duration::from_secs(20), "{first:?}");
    let started = Instant::now();
    let (status, _) = app.post("/v1/responses", &ask(json!({}))).await;
    assert_eq!(status, 503);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the next one fails fast: {:?}",
        started.elapsed()
    );
    eprintln!(
        "database cut: first 503 after {first:?}, the next after {:?}",
        started.elapsed()
    );

    proxy.set(true);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        app.llm.push(Turn::text("back"));
        let (status, _) = app.post("/v1/responses", &ask(json!({}))).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still {status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn readiness_answers_within_a_second_when_the_database_does_not() {
    let Some(db) = Database::postgres().await else {
        return; // PostgreSQL only: an SQLite file always answers.
    };
    let url = &db.url;
    let target = url
        .split("://")
        .nth(1)
        .unwrap()
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let proxy = Proxy::to(target.clone()).await;
    let proxied = url.replacen(&target, &proxy.addr.to_string(), 1);
    let app = TestApp::builder().database(&proxied).start().await;
    assert_eq!(app.get("/readyz").await.0, 200);
    proxy.stall();
    for _ in 0..3 {
        let started = Instant::now();
        let (status, body) = app.get("/readyz").await;
        let took = started.elapsed();
        assert_eq!(status, 503, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("database not ready"),
            "{body}"
        );
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }
}
