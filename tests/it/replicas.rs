//! Two instances on one PostgreSQL database: any of them serves any request. Skipped (with a
//! note) when `TEST_DATABASE_URL` is not set; CI sets it.

use std::time::Duration;

use serde_json::json;
use switchyard::config::Config;

use crate::support::{Database, TestApp, Turn, assert_numbering, read_sse};

/// Claims of queued runs every 50 ms.
fn quick_claims(config: &mut Config) {
    config.runs.claim_interval_ms = 50;
}

#[tokio::test]
async fn a_run_started_on_one_instance_streams_live_from_the_other() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let a = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    let b = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    a.llm
        .push(Turn::text("one two three four five six seven eight nine ten").paced(40));
    let (id, live) = a
        .start_stream(json!({"model": "gpt-4o-mini", "input": "count", "stream": true}))
        .await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let from_b = b.replay(&id, "").await;
    let from_a = live.await.unwrap();
    assert_numbering(&from_b);
    assert!(from_b.done);
    assert_eq!(from_b.raw, from_a.raw, "B relays exactly what A streamed");
    let (_, on_b) = b.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(on_b["status"], "completed");
}

#[tokio::test]
async fn a_run_paused_on_one_instance_is_resumed_on_the_other() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let a = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    let b = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    a.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let tools =
        json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]);
    let first = a
        .stream(&json!({"model": "gpt-4o-mini", "input": "weather?", "tools": tools}))
        .await;
    let id = first.response_id();
    b.llm.push(Turn::text("Sunny, says B"));
    let resumed = {
        let response = b.client.post(b.url(&format!("/v1/responses/{id}/submit_tool_outputs")))
            .json(&json!({"tool_outputs": [{"tool_call_id": "call_w", "output": "sunny"}], "stream": true}))
            .send().await.unwrap();
        read_sse(response).await
    };
    assert_eq!(
        resumed.events[0].data["sequence_number"],
        first.events.len() as u64
    );
    assert_eq!(
        resumed.last().data["response"]["output"][1]["content"][0]["text"],
        "Sunny, says B"
    );
    assert_eq!(b.llm.requests()[0]["messages"][2]["content"], "sunny");
    assert_eq!(a.llm.requests().len(), 1);
}

#[tokio::test]
async fn each_background_run_is_executed_by_exactly_one_instance() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let a = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    let b = TestApp::builder()
        .database(&db.url)
        .config(quick_claims)
        .start()
        .await;
    let count = 8;
    for _ in 0..count {
        a.llm.push(Turn::text("from A").delayed(50));
        b.llm.push(Turn::text("from B").delayed(50));
    }
    let mut ids = Vec::new();
    for n in 0..count {
        let app = if n % 2 == 0 { &a } else { &b };
        let (status, queued) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": format!("job {n}"), "background": true}),
            )
            .await;
        assert_eq!(status, 200);
        ids.push(queued["id"].as_str().unwrap().to_string());
    }
    let mut by = std::collections::HashMap::new();
    for id in &ids {
        let done = a.wait_until_stopped(id).await;
        assert_eq!(done["status"], "completed", "{done}");
        *by.entry(
            done["output"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string(),
        )
        .or_insert(0) += 1;
    }
    let executed = a.llm.requests().len() + b.llm.requests().len();
    assert_eq!(executed, count, "no run executed twice: {by:?}");
    eprintln!("background runs executed: {by:?}");
}
