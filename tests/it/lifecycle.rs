//! What survives a restart, a graceful shutdown and a crash: runs are never left
//! `in_progress`, and stored runs stay readable. On SQLite, and on PostgreSQL when
//! `TEST_DATABASE_URL` is set.

use std::sync::Arc;

use serde_json::json;
use switchyard::engine::emitter::EventEmitter;
use switchyard::protocol::events::Event;
use switchyard::protocol::ids;
use switchyard::store::{self, NewRun, RunState};
use switchyard::time::UnixMillis;

use crate::support::{Binary, FakeLlm, Step, TestApp, Turn, assert_numbering, backends, run_sql};

#[tokio::test]
async fn stored_runs_and_their_event_logs_are_readable_after_a_restart() {
    for db in backends().await {
        let url = &db.url;
        let app = TestApp::builder().database(url).start().await;
        app.llm.push(Turn::text("kept across restarts"));
        let live = app
            .stream(&json!({"model": "gpt-4o-mini", "input": "remember"}))
            .await;
        let id = live.response_id();
        let (_, before) = app.get(&format!("/v1/responses/{id}")).await;

        let app = app.restart(|_| {}).await;
        let (status, after) = app.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(status, 200, "{url}");
        assert_eq!(after, before);
        assert_eq!(
            after["output"][0]["content"][0]["text"],
            "kept across restarts"
        );
        let replay = app.replay(&id, "").await;
        assert_eq!(replay.raw, live.raw);
        // And the chain continues from the stored run.
        app.llm.push(Turn::text("yes"));
        let (status, next) = app
            .post("/v1/responses", &json!({"model": "gpt-4o-mini", "input": "still there?", "previous_response_id": id}))
            .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(
            app.llm.requests().last().unwrap()["messages"][1]["content"],
            "kept across restarts"
        );
    }
}

#[tokio::test]
async fn a_graceful_shutdown_hands_runs_that_outlive_the_grace_period_over_to_the_next_instance() {
    for db in backends().await {
        let url = &db.url;
        let grace = |c: &mut switchyard::config::Config| c.server.shutdown_grace_seconds = 1;
        let mut app = TestApp::builder().database(url).config(grace).start().await;
        app.llm.push(Turn {
            steps: vec![
                Step::Text {
                    text: "never".into(),
                },
                Step::Hang,
            ],
        });
        let (id, reader) = app
            .start_stream(json!({"model": "gpt-4o-mini", "input": "hang", "stream": true}))
            .await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        app.shutdown().await;

        // The open stream saw the cut message closed, and nothing that ends the run.
        let sse = reader.await.unwrap();
        assert_numbering(&sse);
        let item_done = sse
            .events
            .iter()
            .find(|e| e.event == "response.output_item.done")
            .unwrap();
        assert_eq!(item_done.data["item"]["status"], "incomplete", "{url}");
        assert!(
            !sse.types()
                .iter()
                .any(|t| *t == "response.failed" || *t == "error"),
            "{url}: {}",
            sse.raw
        );

        // The next instance on the database takes it over at once and finishes it, asking
        // the model again for the turn that was cut.
        app.llm.push(Turn::text("A whole answer"));
        let app = app.restart(|_| {}).await;
        let stored = app.wait_until_stopped(&id).await;
        assert_eq!(stored["status"], "completed", "{url}: {stored}");
        assert_eq!(stored["output"][0]["status"], "incomplete");
        assert_eq!(stored["output"][0]["content"][0]["text"], "never");
        assert_eq!(stored["output"][1]["content"][0]["text"], "A whole answer");
        let requests = app.llm.requests();
        assert_eq!(requests.len(), 2, "{url}");
        assert_eq!(requests[0]["messages"], requests[1]["messages"]);
        let log = app.replay(&id, "").await;
        assert_numbering(&log);
        assert!(log.done, "{url}");
        for (replayed, seen) in log.events.iter().zip(&sse.events) {
            assert_eq!(
                replayed.data, seen.data,
                "{url}: the log keeps what was streamed"
            );
        }
        let terminal = log
            .types()
            .iter()
            .filter(|t| {
                [
                    "response.completed",
                    "response.failed",
                    "response.incomplete",
                ]
                .contains(t)
            })
            .count();
        assert_eq!(terminal, 1, "{url}: {:?}", log.types());
        assert_eq!(log.last().event, "response.completed");
    }
}

#[tokio::test]
async fn a_run_left_in_progress_by_a_crashed_instance_is_taken_over_and_completed() {
    for db in backends().await {
        let url = &db.url;
        // What a process killed mid-run leaves behind: an in-progress run under an expired
        // lease with a partial event log.
        let store = store::connect(url, 2).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        let mut body: switchyard::protocol::response::ResponseObject = serde_json::from_value(json!({
            "id": id, "object": "response", "created_at": 1, "completed_at": null,
            "status": "in_progress", "error": null, "incomplete_details": null, "instructions": null,
            "model": "gpt-4o-mini", "output": [], "parallel_tool_calls": true, "previous_response_id": null,
            "tools": [], "tool_choice": "auto", "truncation": "disabled", "text": {"format": {"type": "text"}},
            "reasoning": {"effort": null, "summary": null}, "temperature": null, "top_p": null,
            "presence_penalty": null, "frequency_penalty": null, "top_logprobs": 0,
            "max_output_tokens": null, "max_tool_calls": null, "store": true, "background": false,
            "service_tier": "default", "metadata": {}, "safety_identifier": null,
            "prompt_cache_key": null, "user": null, "usage": null, "required_action": null
        })).unwrap();
        store
            .insert_run(&NewRun {
                tenant_id: store::DEFAULT_TENANT.into(),
                state: RunState::InProgress,
                body: body.clone(),
                body_json: None,
                input_items: vec![],
                lease: Some(store::Lease {
                    holder: "crashed-instance".into(),
                    until: UnixMillis::from_millis(1),
                }),
                now: UnixMillis::from_millis(1),
                initial_events: vec![],
                idempotency: None,
                key_id: None,
            })
            .await
            .unwrap();
        let (hub, writer) =
            switchyard::engine::hub::EventHub::start(store.clone(), "crashed-instance".into(), 16);
        let mut emitter =
            EventEmitter::new(hub.clone(), Arc::from(id.as_str()), Arc::from("default"), 0);
        body.status = switchyard::protocol::response::ResponseStatus::InProgress;
        emitter
            .emit(Event::Created {
                response: Box::new(body.clone()),
            })
            .await;
        emitter
            .emit(Event::InProgress {
                response: Box::new(body),
            })
            .await;
        // A message was being streamed when the process died.
        let message = switchyard::protocol::items::Item::Message(
            switchyard::protocol::items::Message::assistant("msg_crashed".into()),
        );
        emitter
            .emit(Event::OutputItemAdded {
                output_index: 0,
                item: message,
            })
            .await;
        emitter
            .emit(Event::OutputTextDelta {
                item_id: "msg_crashed".into(),
                output_index: 0,
                content_index: 0,
                delta: "Half a sent".into(),
                logprobs: vec![],
            })
            .await;
        emitter.flush().await.unwrap();
        drop(emitter);
        writer.finish(hub).await;

        // A new process takes the run over and finishes it.
        let app = TestApp::builder()
            .database(url)
            .config(|c| {
                c.runs.lease_ttl_ms = 1_000;
                c.runs.sweep_interval_ms = 100;
            })
            .start()
            .await;
        app.llm.push(Turn::text("A whole answer"));
        let stored = app.wait_until_stopped(&id).await;
        assert_eq!(stored["status"], "completed", "{url}: {stored}");
        assert_eq!(stored["output"][0]["status"], "incomplete");
        assert_eq!(stored["output"][0]["content"][0]["text"], "Half a sent");
        assert_eq!(stored["output"][1]["content"][0]["text"], "A whole answer");
        let log = app.replay(&id, "").await;
        assert_numbering(&log);
        assert!(log.done);
        assert_eq!(
            &log.types()[..6],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.output_text.delta",
                "response.output_item.done",
                "response.in_progress",
            ]
        );
        assert_eq!(log.events[4].data["item"]["status"], "incomplete");
        assert_eq!(log.last().event, "response.completed");
    }
}

#[tokio::test]
async fn stopped_runs_are_pruned_after_the_retention_window() {
    let app = TestApp::builder()
        .config(|c| {
            c.runs.retention_hours = 0;
            c.runs.idempotency_ttl_hours = 0;
            c.runs.sweep_interval_ms = 50;
        })
        .start()
        .await;
    let (_, done) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "short-lived"}),
        )
        .await;
    let id = done["id"].as_str().unwrap();
    let mut status = 200;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        status = app.get(&format!("/v1/responses/{id}")).await.0;
        if status == 404 {
            break;
        }
    }
    assert_eq!(status, 404, "pruned");
    let (status, _) = app.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 404);
}

/// Rows `query` counts, with `$1` bound to `value`.
async fn count_rows(url: &str, query: &str, value: &str) -> i64 {
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        let query = sqlx::query_scalar(query).bind(value);
        query.fetch_one(&pool).await.unwrap()
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let query = sqlx::query_scalar(query).bind(value);
        query.fetch_one(&pool).await.unwrap()
    }
}

/// Makes the database refuse new runs, as a broken disk or constraint would.
async fn refuse_new_runs(url: &str, refuse: bool) {
    let statements: &[&str] = match (url.starts_with("sqlite"), refuse) {
        (true, true) => &["CREATE TRIGGER refuse_runs BEFORE INSERT ON responses \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
        (true, false) => &["DROP TRIGGER refuse_runs"],
        (false, true) => &[
            "CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            "CREATE TRIGGER refuse_runs BEFORE INSERT ON responses \
             FOR EACH ROW EXECUTE FUNCTION refuse_runs()",
        ],
        (false, false) => &["DROP TRIGGER refuse_runs ON responses"],
    };
    run_sql(url, statements).await;
}

#[tokio::test]
async fn a_run_that_cannot_be_stored_is_a_500_and_leaves_nothing_behind() {
    for db in backends().await {
        let url = &db.url;
        let app = TestApp::builder().database(url).start().await;
        refuse_new_runs(url, true).await;
        // The run starts before its insert commits; it must show nothing, and stop.
        app.llm.push(Turn::text("never shown"));
        let refused = app
            .stream(&json!({"model": "gpt-4o-mini", "input": "hello", "stream": true}))
            .await;
        assert_eq!(refused.status, 500, "{url}: {}", refused.raw);
        assert!(refused.events.is_empty(), "{}", refused.raw);
        app.llm.push(Turn::text("never shown"));
        let (status, body) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "hello"}),
            )
            .await;
        assert_eq!(status, 500, "{url}: {body}");
        assert_eq!(body["error"]["type"], "server_error", "{body}");

        // Once the database takes runs again, so does the service.
        refuse_new_runs(url, false).await;
        app.llm.push(Turn::text("stored"));
        let stored = app
            .stream(&json!({"model": "gpt-4o-mini", "input": "hello", "stream": true}))
            .await;
        assert_eq!(stored.last().event, "response.completed", "{}", stored.raw);
        assert_numbering(&stored);
        let id = stored.response_id();
        let others = "SELECT COUNT(*) FROM responses WHERE id <> $1";
        assert_eq!(count_rows(url, others, &id).await, 0, "{url}");
        let others = "SELECT COUNT(*) FROM response_event_frames WHERE response_id <> $1";
        assert_eq!(count_rows(url, others, &id).await, 0, "{url}");
    }
}

#[tokio::test]
async fn a_server_error_is_logged_with_its_database_cause_which_the_client_never_sees() {
    for database in backends().await {
        let url = &database.url;
        let llm = FakeLlm::start().await.unwrap();
        let instance = Binary::new().database(url).upstream(&llm).spawn();
        refuse_new_runs(url, true).await;
        llm.push(Turn::text("never shown"));
        let answer = reqwest::Client::new()
            .post(instance.url("/v1/responses"))
            .json(&json!({"model": "gpt-4o-mini", "input": "hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 500, "{url}");
        let body = answer.text().await.unwrap();
        let envelope: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            envelope["error"]["message"],
            "The server had an error while processing your request."
        );
        assert!(!body.contains("refused by the test"), "{body}");
        // The log line names each layer of the cause once: the store's words, sqlx's, and the
        // database's own message.
        let line = instance
            .logs
            .wait_for(|line| line.contains("internal error"))
            .await;
        for layer in [
            "database error",
            "error returned from database",
            "refused by the test",
        ] {
            assert_eq!(line.matches(layer).count(), 1, "{url}: {line}");
        }
    }
}
