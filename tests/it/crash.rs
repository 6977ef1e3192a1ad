//! A real switchyard process killed with SIGKILL mid-run: another instance (PostgreSQL) or the
//! restarted process (SQLite) takes the run over and completes it — no event lost or
//! repeated. A tool with side effects that was running is not run again; a read-only one runs
//! again with its turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::post;
use serde_json::{Value, json};
use switchyard::config::HttpToolConfig;
use tokio::sync::oneshot;

use crate::support::{
    Binary, ConfigFile, Database, FakeLlm, TestApp, Turn, assert_numbering, http_tool,
    read_until_cut, serve,
};

/// A tool endpoint at `path` answering `answer`: counts its calls; the first takes its time
/// (the instance is killed during it), later ones answer at once.
async fn tool_endpoint(
    path: &'static str,
    answer: &'static str,
    calls: Arc<AtomicUsize>,
) -> String {
    let app = axum::Router::new().route(
        path,
        post(move || {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
                answer
            }
        }),
    );
    format!("{}{path}", serve(app).await)
}

/// A tool of `payments`, with the timeout the tests' killed calls stay within.
fn payments_tool(name: &str, url: String, read_only: bool) -> HttpToolConfig {
    HttpToolConfig {
        read_only,
        ..http_tool(name, url, Some(30_000))
    }
}

/// A configuration file with the `payments` tool server.
fn tool_config(tools: &[Tool]) -> ConfigFile {
    let server = switchyard::config::ToolServerConfig {
        tools: tools.iter().map(|(tool, _)| tool.clone()).collect(),
        ..Default::default()
    };
    let file = std::collections::BTreeMap::from([(
        "tool_servers",
        std::collections::BTreeMap::from([("payments", server)]),
    )]);
    ConfigFile::new(&toml::to_string(&file).unwrap())
}

/// A tool of `payments`, and the count of calls its endpoint received.
type Tool = (HttpToolConfig, Arc<AtomicUsize>);

/// What B made of a run that A was killed in, while a tool of `payments` ran.
struct Takeover {
    /// The run as B completed it.
    done: Value,
    /// The requests the model received, from A and B.
    requests: Vec<Value>,
    /// How it went, for the test's output.
    timeline: String,
}

/// A streamed run on A that calls `tools`; A is killed once each of them was called; B,
/// another instance or the restarted process on the same database, finishes the run. The
/// log B serves is checked whole: every number once, A's events as they were sent.
async fn kill_while_tool_runs(
    database_url: &str,
    b_is_restart: bool,
    llm: FakeLlm,
    tools: &[Tool],
) -> Takeover {
    let config = tool_config(tools);
    let mut a = Binary::new()
        .database(database_url)
        .upstream(&llm)
        .config_file(&config.path)
        .spawn();
    let client = reqwest::Client::new();
    let response = client
        .post(a.url("/v1/responses"))
        .json(
            &json!({"model": "gpt-4o-mini", "input": "Go ahead", "stream": true,
                      "tools": [{"type": "mcp", "server_label": "payments"}]}),
        )
        .send()
        .await
        .unwrap();
    let (first, first_seen) = oneshot::channel();
    let live = tokio::spawn(read_until_cut(response, first));
    // The client knows the run (a read-only call may start before its first event arrives).
    first_seen.await.unwrap();
    while tools
        .iter()
        .any(|(_, calls)| calls.load(Ordering::SeqCst) == 0)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    a.kill();
    let killed_at = started.elapsed();
    let seen_by_client = live.await.unwrap();
    let id = seen_by_client.response_id();

    // B: another instance, or the same process restarted, on the same database and upstream.
    let configs = tools.iter().map(|(tool, _)| tool.clone()).collect();
    let b = TestApp::builder()
        .database(database_url)
        .upstream(llm)
        .config(move |c| {
            c.runs.lease_ttl_ms = 1_000;
            c.runs.sweep_interval_ms = 100;
            c.tool_servers.insert(
                "payments".into(),
                switchyard::config::ToolServerConfig {
                    tools: configs,
                    ..Default::default()
                },
            );
        })
        .start()
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
    let timeline = format!(
        "{}: SIGKILL at {} ms (tool running); B serving at {} ms; first event after A's taken over {taken_over}; \
         run completed at {} ms; lease {} ms; {} events, contiguous; tool calls: {:?}",
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
        tools
            .iter()
            .map(|(_, calls)| calls.load(Ordering::SeqCst))
            .collect::<Vec<_>>(),
    );
    Takeover {
        done,
        requests: b.llm.requests(),
        timeline,
    }
}

/// The tool messages of a request to the model.
fn tool_messages(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// A call with side effects that A started is reported interrupted, and never run again.
async fn kill_mid_side_effect(database_url: &str, b_is_restart: bool) -> String {
    let llm = FakeLlm::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let url = tool_endpoint("/charge", "charged", calls.clone()).await;
    llm.push(Turn::tool_call("call_pay", "charge_card", "{}"));
    llm.push(Turn::text(
        "The payment may not have gone through; I will not retry it.",
    ));
    let tool = payments_tool("charge_card", url, false);
    let run = kill_while_tool_runs(database_url, b_is_restart, llm, &[(tool, calls.clone())]).await;

    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the tool with side effects ran once"
    );
    let output = run.done["output"].as_array().unwrap();
    let call = output.iter().find(|i| i["type"] == "mcp_call").unwrap();
    assert_eq!(call["status"], "failed");
    assert!(
        call["error"]["content"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{call}"
    );
    assert_eq!(
        output.last().unwrap()["content"][0]["text"],
        "The payment may not have gone through; I will not retry it."
    );
    // The model was told, once.
    assert_eq!(run.requests.len(), 2);
    let told = tool_messages(&run.requests[1]);
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("interrupted"), "{told:?}");
    run.timeline
}

/// A read-only call is not saved as started: B asks the model again for the turn A was in,
/// and the call runs again, to its result.
async fn kill_mid_read_only(database_url: &str, b_is_restart: bool) -> String {
    let llm = FakeLlm::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let url = tool_endpoint("/stock", "3 in stock", calls.clone()).await;
    llm.push(Turn::tool_call("call_stock", "check_stock", "{}"));
    llm.push(Turn::tool_call("call_stock_again", "check_stock", "{}"));
    llm.push(Turn::text("There are 3 in stock."));
    let tool = payments_tool("check_stock", url, true);
    let run = kill_while_tool_runs(database_url, b_is_restart, llm, &[(tool, calls.clone())]).await;

    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the read-only tool ran again"
    );
    assert_eq!(run.requests.len(), 3, "the turn A was in was asked again");
    assert_eq!(run.requests[1]["messages"], run.requests[0]["messages"]);
    assert_eq!(tool_messages(&run.requests[2]), ["3 in stock"]);
    let output = run.done["output"].as_array().unwrap();
    let listings = output.iter().filter(|i| i["type"] == "mcp_list_tools");
    assert_eq!(listings.count(), 1, "the tool server is announced once");
    let completed: Vec<&Value> = output
        .iter()
        .filter(|i| i["type"] == "mcp_call" && i["status"] == "completed")
        .collect();
    assert_eq!(completed.len(), 1, "{output:?}");
    assert_eq!(completed[0]["output"], "3 in stock");
    assert!(
        output
            .iter()
            .all(|i| i["error"].is_null() || !i["error"].to_string().contains("interrupted")),
        "{output:?}"
    );
    assert_eq!(
        output.last().unwrap()["content"][0]["text"],
        "There are 3 in stock."
    );
    run.timeline
}

/// A read-only call started after a call with effects in the same turn is recorded with it:
/// the turn is not asked again, and both calls are reported interrupted.
async fn kill_mid_mixed_turn(database_url: &str, b_is_restart: bool) -> String {
    let llm = FakeLlm::start().await.unwrap();
    let charges = Arc::new(AtomicUsize::new(0));
    let lookups = Arc::new(AtomicUsize::new(0));
    let charge_url = tool_endpoint("/charge", "charged", charges.clone()).await;
    let stock_url = tool_endpoint("/stock", "3 in stock", lookups.clone()).await;
    llm.push(Turn::tool_calls(&[
        ("call_pay", "charge_card", "{}"),
        ("call_stock", "check_stock", "{}"),
    ]));
    llm.push(Turn::text("Neither call finished; I will not retry them."));
    let tools = [
        (payments_tool("charge_card", charge_url, false), charges),
        (payments_tool("check_stock", stock_url, true), lookups),
    ];
    let run = kill_while_tool_runs(database_url, b_is_restart, llm, &tools).await;

    let calls: Vec<usize> = tools
        .iter()
        .map(|(_, calls)| calls.load(Ordering::SeqCst))
        .collect();
    assert_eq!(calls, [1, 1], "neither call ran again");
    assert_eq!(
        run.requests.len(),
        2,
        "the turn A was in is not asked again"
    );
    let told = tool_messages(&run.requests[1]);
    assert_eq!(told.len(), 2, "the model hears of both calls: {told:?}");
    assert!(told.iter().all(|m| m.contains("interrupted")), "{told:?}");
    let output = run.done["output"].as_array().unwrap();
    let failed = output
        .iter()
        .filter(|i| i["type"] == "mcp_call" && i["status"] == "failed");
    assert_eq!(failed.count(), 2, "{output:?}");
    run.timeline
}

#[tokio::test]
async fn a_run_of_an_instance_killed_mid_tool_call_is_completed_by_another_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let timeline = kill_mid_side_effect(&db.url, false).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_run_of_a_process_killed_mid_tool_call_is_completed_after_a_restart_on_sqlite() {
    let db = Database::sqlite();
    let timeline = kill_mid_side_effect(&db.url, true).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_read_only_call_cut_by_a_crash_runs_again_with_its_turn_on_another_instance_on_postgres()
{
    let Some(db) = Database::postgres().await else {
        return;
    };
    let timeline = kill_mid_read_only(&db.url, false).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_read_only_call_cut_by_a_crash_runs_again_with_its_turn_after_a_restart_on_sqlite() {
    let db = Database::sqlite();
    let timeline = kill_mid_read_only(&db.url, true).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_read_only_call_after_a_call_with_effects_is_reported_interrupted_with_it_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let timeline = kill_mid_mixed_turn(&db.url, false).await;
    eprintln!("{timeline}");
}

#[tokio::test]
async fn a_read_only_call_after_a_call_with_effects_is_reported_interrupted_with_it_on_sqlite() {
    let db = Database::sqlite();
    let timeline = kill_mid_mixed_turn(&db.url, true).await;
    eprintln!("{timeline}");
}
