//! Background runs: queued at once, claimed by a worker from the database, polled, and
//! reattached to from any point of their event log.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Sse, Step, TestApp, Turn, assert_numbering, assert_response_keys, read_sse};

fn background(input: &str) -> Value {
    json!({"model": "gpt-4o-mini", "input": input, "background": true})
}

#[tokio::test]
async fn a_background_run_returns_queued_at_once_and_completes_for_polling() {
    let app = TestApp::start().await;
    app.llm
        .push(Turn::text("done in the background").delayed(200));
    let (status, queued) = app.post("/v1/responses", &background("work")).await;
    assert_eq!(status, 200, "{queued}");
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["background"], true);
    assert_response_keys(&queued);
    let id = queued["id"].as_str().unwrap();
    let done = app.wait_until_stopped(id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        "done in the background"
    );
    assert_eq!(done["background"], true);

    let log = app.replay(id, "").await;
    assert_numbering(&log);
    assert_eq!(
        &log.types()[..3],
        [
            "response.created",
            "response.queued",
            "response.in_progress"
        ]
    );
    assert_eq!(log.events[0].data["response"]["status"], "queued");
    assert_eq!(log.last().event, "response.completed");
    assert!(log.done);
}

#[tokio::test]
async fn a_streamed_background_run_shows_queued_then_the_run() {
    let app = TestApp::builder()
        .script([Turn::text("a b c")])
        .start()
        .await;
    let sse = app.stream(&background("work")).await;
    assert_numbering(&sse);
    assert_eq!(
        sse.types(),
        [
            "response.created",
            "response.queued",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert!(sse.done);
}

#[tokio::test]
async fn a_client_reattaches_mid_run_from_any_point_without_gaps_or_repeats() {
    let app = TestApp::start().await;
    app.llm
        .push(Turn::text("one two three four five six seven eight").paced(60));
    let (_, queued) = app.post("/v1/responses", &background("count")).await;
    let id = queued["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(250)).await;

    let reattach = |query: &'static str, header: Option<&'static str>| {
        let mut request = app
            .client
            .get(app.url(&format!("/v1/responses/{id}?stream=true{query}")));
        if let Some(value) = header {
            request = request.header("Last-Event-ID", value);
        }
        async move { read_sse(request.send().await.unwrap()).await }
    };
    let (whole, after_three, by_header) = tokio::join!(
        reattach("", None),
        reattach("&starting_after=3", None),
        reattach("", Some("5"))
    );
    assert_numbering(&whole);
    assert!(whole.done);
    let numbers = |sse: &Sse| {
        sse.events
            .iter()
            .map(|e| e.data["sequence_number"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let total = whole.events.len() as u64;
    assert_eq!(numbers(&after_three), (4..total).collect::<Vec<_>>());
    assert_eq!(numbers(&by_header), (6..total).collect::<Vec<_>>());
    assert!(after_three.done && by_header.done);
    assert_eq!(
        whole.last().data["response"]["output"][0]["content"][0]["text"],
        "one two three four five six seven eight"
    );
}

#[tokio::test]
async fn background_needs_store_and_a_queued_run_can_be_cancelled() {
    let app = TestApp::builder()
        .config(|c| c.runs.max_background = 1)
        .start()
        .await;
    let mut unstored = background("x");
    unstored["store"] = json!(false);
    let (status, reply) = app.post("/v1/responses", &unstored).await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "store");

    // One slot: the first run hangs in it, the second waits queued.
    app.llm.push(Turn {
        steps: vec![Step::Hang],
    });
    let (_, first) = app.post("/v1/responses", &background("first")).await;
    let (_, second) = app.post("/v1/responses", &background("second")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second_id = second["id"].as_str().unwrap();
    let (_, waiting) = app.get(&format!("/v1/responses/{second_id}")).await;
    assert_eq!(waiting["status"], "queued");
    let (status, cancelled) = app
        .post(&format!("/v1/responses/{second_id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "cancelled");
    let (status, cancelled) = app
        .post(
            &format!("/v1/responses/{}/cancel", first["id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "cancelled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.llm.requests().len(),
        1,
        "the cancelled queued run never ran"
    );
    let log = app.replay(second_id, "").await;
    assert_eq!(
        log.types(),
        ["response.created", "response.queued", "response.failed"]
    );
    assert_eq!(log.last().data["response"]["status"], "cancelled");
}

#[tokio::test]
async fn a_queued_run_survives_a_restart_and_runs_after_it() {
    let app = TestApp::builder()
        .config(|c| c.runs.max_background = 1)
        .start()
        .await;
    app.llm.push(Turn {
        steps: vec![
            Step::Text {
                text: "never".into(),
            },
            Step::Hang,
        ],
    });
    let (_, first) = app.post("/v1/responses", &background("first")).await;
    let (_, second) = app.post("/v1/responses", &background("second")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let app = app.restart(|c| c.server.shutdown_grace_seconds = 0).await;
    app.llm.push(Turn::text("after the restart"));
    let done = app.wait_until_stopped(second["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "after the restart");
    let (_, stopped) = app
        .get(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        stopped["status"], "failed",
        "the running one was failed at shutdown"
    );
}

#[tokio::test]
async fn a_reader_resuming_after_the_last_event_gets_done_at_once() {
    let app = TestApp::start().await;
    let live = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "hi"}))
        .await;
    let id = live.response_id();
    let last = live.events.len() - 1;
    let started = std::time::Instant::now();
    let by_cursor = read_sse(
        app.client
            .get(app.url(&format!(
                "/v1/responses/{id}?stream=true&starting_after={last}"
            )))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let by_header = read_sse(
        app.client
            .get(app.url(&format!("/v1/responses/{id}?stream=true")))
            .header("Last-Event-ID", last.to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        by_cursor.events.is_empty() && by_cursor.done,
        "{}",
        by_cursor.raw
    );
    assert!(
        by_header.events.is_empty() && by_header.done,
        "{}",
        by_header.raw
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_000),
        "no wait for more: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_retried_background_request_with_its_idempotency_key_answers_at_once_with_the_same_run() {
    let app = TestApp::builder()
        .script([Turn::text("slow").delayed(1500)])
        .start()
        .await;
    let send = || {
        app.client
            .post(app.url("/v1/responses"))
            .header("Idempotency-Key", "bg-1")
            .json(&background("work"))
            .send()
    };
    let first: Value = send().await.unwrap().json().await.unwrap();
    assert_eq!(first["status"], "queued");
    let started = std::time::Instant::now();
    let again: Value = send().await.unwrap().json().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "the retry did not wait for the run: {:?}",
        started.elapsed()
    );
    assert_eq!(again["id"], first["id"]);
    assert!(
        ["queued", "in_progress"].contains(&again["status"].as_str().unwrap()),
        "{again}"
    );
    let done = app.wait_until_stopped(first["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(app.llm.requests().len(), 1, "the model was asked once");
}
