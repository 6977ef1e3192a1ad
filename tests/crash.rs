//! A real switchyard process killed with SIGKILL mid-run: another instance (PostgreSQL) or the
//! restarted process (SQLite) takes the run over and completes it — no event lost or
//! repeated, and the tool that was running is not run again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::post;
use common::*;
use serde_json::{Value, json};

/// A tool endpoint with a side effect: counts its calls, then takes its time.
async fn side_effect_endpoint(calls: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().route(
        "/charge",
        post(move || {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(10)).await;
                "charged"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/charge")
}

fn tool_config(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("tools.toml");
    std::fs::write(
        &path,
        format!(
            "[tool_servers.payments]\n[[tool_servers.payments.tools]]\nname = \"charge_card\"\n\
             description = \"Charges the card\"\nparameters = {{ type = \"object\" }}\nurl = \"{url}\"\n\
             timeout_ms = 30000\n"
        ),
    )
    .unwrap();
    path
}

/// The switchyard binary as instance A; returns it with its address.
fn spawn_binary(database_url: &str, llm_url: &str, config: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--config", config.to_str().unwrap()])
        .env("SWITCHYARD__SERVER__PORT", "0")
        .env("SWITCHYARD__DATABASE__URL", database_url)
        .env("SWITCHYARD__LLM__BASE_URL", llm_url)
        .env("SWITCHYARD__LLM__API_KEY", "test")
        .env("SWITCHYARD__RUNS__LEASE_TTL_MS", "1000")
        .env("SWITCHYARD__RUNS__SWEEP_INTERVAL_MS", "200")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            let at = line.find("address=")?;
            Some(line[at + 8..].split_whitespace().next()?.to_string())
        })
        .unwrap();
    // Keep reading so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    (child, address)
}

/// Reads a stream until it ends or its connection breaks; keeps what arrived.
async fn read_until_cut(response: reqwest::Response) -> Sse {
    use futures_util::StreamExt;
    let status = response.status().as_u16();
    let mut body = response.bytes_stream();
    let mut raw = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        raw.push_str(&String::from_utf8_lossy(&chunk));
    }
    // A frame cut in half is not an event the client saw.
    let whole = raw.rfind("\n\n").map_or(0, |end| end + 2);
    raw.truncate(whole);
    parse_sse(status, "text/event-stream".into(), raw)
}

fn kill(child: &mut Child) {
    assert!(
        Command::new("kill")
            .args(["-KILL", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let _ = child.wait();
}

/// A streamed run on A that calls the side-effect tool; A is killed while the tool runs; B
/// finishes it. Returns the timeline.
async fn kill_mid_run(database_url: &str, b_is_restart: bool) -> String {
    let llm = fake_llm::FakeLlm::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let tool_url = side_effect_endpoint(calls.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = tool_config(dir.path(), &tool_url);
    llm.push(Turn::tool_call("call_pay", "charge_card", "{}"));
    llm.push(Turn::text(
        "The payment may not have gone through; I will not retry it.",
    ));

    let (mut a, address) = spawn_binary(database_url, &llm.base_url(), &config);
    let client = reqwest::Client::new();
    let response = client
        .post(format!("http://{address}/v1/responses"))
        .json(
            &json!({"model": "gpt-4o-mini", "input": "Pay the invoice", "stream": true,
                      "tools": [{"type": "mcp", "server_label": "payments"}]}),
        )
        .send()
        .await
        .unwrap();
    let live = tokio::spawn(read_until_cut(response));
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    kill(&mut a);
    let killed_at = started.elapsed();
    let seen_by_client = live.await.unwrap();
    let id = seen_by_client.response_id();

    // B: another instance, or the same process restarted, on the same database.
    let tool = tool_url.clone();
    let llm_url = llm.base_url();
    let b = spawn_app_on(database_url, move |c| {
        c.runs.lease_ttl_ms = 1_000;
        c.runs.sweep_interval_ms = 100;
        c.llm.provider.base_url = Some(llm_url);
        c.tool_servers.insert(
            "payments".into(),
            switchyard::config::ToolServerConfig {
                tools: vec![switchyard::config::HttpToolConfig {
                    name: "charge_card".into(),
                    description: "Charges the card".into(),
                    parameters: json!({"type": "object"}),
                    url: tool,
                    method: "POST".into(),
                    headers: Default::default(),
                    timeout_ms: Some(30_000),
                    kind: switchyard::tools::ToolKind::Executed,
                    return_direct: false,
                    hidden: false,
                }],
                ..Default::default()
            },
        );
    })
    .await;
    let up_at = started.elapsed();
    // The takeover shows as the first event after those A wrote.
    let store = switchyard::store::connect(database_url, 1).await.unwrap();
    let written_by_a = store.last_sequence_number(&id).await.unwrap();
    let mut done = Value::Null;
    let mut taken_over_at = None;
    for _ in 0..300 {
        if taken_over_at.is_none() && store.last_sequence_number(&id).await.unwrap() > written_by_a
        {
            taken_over_at = Some(started.elapsed());
        }
        let (_, body) = b.get(&format!("/v1/responses/{id}")).await;
        if body["status"] == "completed" {
            done = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let completed_at = started.elapsed();
    assert_eq!(done["status"], "completed", "{database_url}: {done}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the tool with side effects ran once"
    );
    let call = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap();
    assert_eq!(call["status"], "failed");
    assert!(
        call["error"]["content"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{call}"
    );
    assert_eq!(
        done["output"].as_array().unwrap().last().unwrap()["content"][0]["text"],
        "The payment may not have gone through; I will not retry it."
    );
    // The model was told, once.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let tool_message = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool_message["content"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );

    // The whole log, from B: every number once, in order, what A streamed first.
    let log = b.replay(&id, "").await;
    assert_numbering(&log);
    assert!(log.done);
    assert!(
        log.raw.starts_with(&seen_by_client.raw),
        "A's events are kept as they were sent"
    );
    assert!(!b_is_restart || log.events.len() > seen_by_client.events.len());

    let taken_over = taken_over_at.map_or("during B's start-up".to_string(), |t| {
        format!("at {} ms", t.as_millis())
    });
    format!(
        "{}: SIGKILL at {} ms (tool running); B serving at {} ms; first event after A's taken over {taken_over}; \
         run completed at {} ms; lease {} ms; {} events, contiguous; side-effect tool calls: {}",
        if database_url.starts_with("postgres") {
            "postgres"
        } else {
            "sqlite"
        },
        killed_at.as_millis(),
        up_at.as_millis(),
        completed_at.as_millis(),
        1_000,
        log.events.len(),
        calls.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn a_run_of_an_instance_killed_mid_tool_call_is_completed_by_another_on_postgres() {
    let Some(url) = fresh_postgres_url().await else {
        eprintln!("TEST_DATABASE_URL is not set: skipping");
        return;
    };
    let timeline = kill_mid_run(&url, false).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_run_of_a_process_killed_mid_tool_call_is_completed_after_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/crash.db", dir.path().display());
    let timeline = kill_mid_run(&url, true).await;
    eprintln!("{timeline}");
}
