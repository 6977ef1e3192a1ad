//! The persisted pause: definition-only calls park the run in `requires_action`; it resumes
//! exactly once from the database — after `submit_tool_outputs`, or a continuation — also
//! after a restart; it expires, and it can be cancelled.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Sse, Step, TestApp, Turn, assert_numbering, backends, read_sse};

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
}

fn ask(tools: Value) -> Value {
    json!({"model": "gpt-4o-mini", "input": "Weather in Paris?", "tools": tools})
}

async fn submit(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    app.post(&format!("/v1/responses/{id}/submit_tool_outputs"), &body)
        .await
}

async fn submit_stream(app: &TestApp, id: &str, mut body: Value) -> Sse {
    body["stream"] = json!(true);
    let response = app
        .client
        .post(app.url(&format!("/v1/responses/{id}/submit_tool_outputs")))
        .json(&body)
        .send()
        .await
        .unwrap();
    read_sse(response).await
}

fn outputs(pairs: &[(&str, &str)]) -> Value {
    json!({"tool_outputs": pairs.iter().map(|(id, out)| json!({"tool_call_id": id, "output": out})).collect::<Vec<_>>()})
}

fn numbers(sse: &Sse) -> Vec<u64> {
    sse.events
        .iter()
        .map(|e| e.data["sequence_number"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_definition_only_call_pauses_the_run_until_outputs_arrive_and_numbering_continues() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    app.llm.push(Turn::text("Sunny in Paris"));

    let first = app.stream(&ask(json!([weather_tool()]))).await;
    assert_numbering(&first);
    assert!(first.done);
    assert_eq!(first.last().event, "response.completed");
    let paused = &first.last().data["response"];
    assert_eq!(
        paused["status"], "completed",
        "the model's turn is complete"
    );
    let action = &paused["required_action"];
    assert_eq!(action["type"], "submit_tool_outputs");
    assert_eq!(
        action["submit_tool_outputs"]["tool_calls"],
        json!([{"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}])
    );
    let expires_at = action["expires_at"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now + 590..=now + 610).contains(&expires_at),
        "10 minutes by default"
    );
    let id = first.response_id();
    // Persisted before response.completed was sent.
    let (_, stored) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(stored["required_action"], *action);

    let resumed = submit_stream(&app, &id, outputs(&[("call_w", "sunny, 24C")])).await;
    assert_eq!(resumed.status, 200);
    let last = first.events.len() as u64 - 1;
    assert_eq!(
        numbers(&resumed),
        ((last + 1)..(last + 1 + resumed.events.len() as u64)).collect::<Vec<_>>()
    );
    assert_eq!(resumed.events[0].event, "response.in_progress");
    assert_eq!(
        resumed.events[1].data["output_index"], 1,
        "output indices continue after the pause"
    );
    assert_eq!(resumed.last().event, "response.completed");
    assert!(resumed.done);
    let done = &resumed.last().data["response"];
    assert_eq!(done["required_action"], Value::Null);
    assert_eq!(done["output"][1]["content"][0]["text"], "Sunny in Paris");
    assert_eq!(
        done["usage"]["total_tokens"],
        15 + 13,
        "usage spans the pause"
    );

    // The model saw its call and the client's output.
    assert_eq!(
        app.llm.requests()[1]["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24C"},
        ])
    );
    // The outputs are input items of the run now.
    let (_, items) = app
        .get(&format!("/v1/responses/{id}/input_items?order=asc"))
        .await;
    assert_eq!(items["data"][1]["type"], "function_call_output");
    assert_eq!(items["data"][1]["call_id"], "call_w");
    // The whole log replays across the pause, numbered 0..n, [DONE] once at the end.
    let replay = app.replay(&id, "").await;
    assert_numbering(&replay);
    assert_eq!(
        replay.events.len(),
        first.events.len() + resumed.events.len()
    );
    assert_eq!(replay.raw.matches("[DONE]").count(), 1);
}

#[tokio::test]
async fn a_run_can_pause_several_times_and_resume_without_a_stream() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    app.llm.push(Turn::tool_call(
        "call_2",
        "get_weather",
        r#"{"city": "Rome"}"#,
    ));
    app.llm.push(Turn::text("Paris sunny, Rome rainy"));

    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    let id = paused["id"].as_str().unwrap();
    assert_eq!(
        paused["required_action"]["submit_tool_outputs"]["tool_calls"][0]["id"],
        "call_1"
    );
    let (status, again) = submit(&app, id, outputs(&[("call_1", "sunny")])).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], *id, "the same response");
    assert_eq!(
        again["required_action"]["submit_tool_outputs"]["tool_calls"][0]["id"],
        "call_2"
    );
    let (status, done) = submit(&app, id, outputs(&[("call_2", "rainy")])).await;
    assert_eq!(status, 200);
    assert_eq!(done["required_action"], Value::Null);
    let types: Vec<&str> = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["function_call", "function_call", "message"]);
    let log = app.replay(id, "").await;
    assert_numbering(&log);
    let segments: Vec<&str> = log
        .types()
        .into_iter()
        .filter(|t| {
            matches!(
                *t,
                "response.created" | "response.in_progress" | "response.completed"
            )
        })
        .collect();
    assert_eq!(
        segments,
        [
            "response.created",
            "response.in_progress",
            "response.completed",
            "response.in_progress",
            "response.completed",
            "response.in_progress",
            "response.completed"
        ]
    );
    eprintln!("{}", describe_log(&log));
}

/// One line per event: sequence number, type, output index — for the note.
fn describe_log(log: &Sse) -> String {
    log.events
        .iter()
        .map(|e| {
            let index = e
                .data
                .get("output_index")
                .map(|i| format!(" oi={i}"))
                .unwrap_or_default();
            let item = e
                .data
                .get("item")
                .map(|i| format!(" {}", i["type"].as_str().unwrap_or("")))
                .unwrap_or_default();
            format!("{:>3} {}{index}{item}", e.data["sequence_number"], e.event)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn server_calls_of_the_same_turn_run_before_the_pause() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_calls(&[
        ("call_c", "calculator", r#"{"expression": "2+2"}"#),
        ("call_w", "get_weather", r#"{"city": "Paris"}"#),
    ]));
    app.llm.push(Turn::text("4, and sunny"));
    let (_, paused) = app
        .post(
            "/v1/responses",
            &ask(json!([{"type": "mcp", "server_label": "builtin"}, weather_tool()])),
        )
        .await;
    let types: Vec<&str> = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    // In the model's call order.
    assert_eq!(types, ["mcp_list_tools", "mcp_call", "function_call"]);
    assert_eq!(paused["output"][1]["output"], "4");
    let pending = &paused["required_action"]["submit_tool_outputs"]["tool_calls"];
    assert_eq!(
        pending.as_array().unwrap().len(),
        1,
        "only the client's call is pending"
    );
    let (status, done) = submit(
        &app,
        paused["id"].as_str().unwrap(),
        outputs(&[("call_w", "sunny")]),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(done["status"], "completed");
    let requests = app.llm.requests();
    let messages = &requests[1]["messages"];
    assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages[2]["content"], "4");
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_w", "content": "sunny"})
    );
}

#[tokio::test]
async fn submit_tool_outputs_refuses_what_does_not_answer_every_pending_call_exactly_once() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_calls(&[
        ("call_A", "get_weather", r#"{"city": "Paris"}"#),
        ("call_B", "get_weather", r#"{"city": "Rome"}"#),
    ]));
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    let id = paused["id"].as_str().unwrap();
    for (body, got) in [
        (outputs(&[("call_A", "x")]), "['call_A']"),
        (
            outputs(&[("call_A", "x"), ("call_B", "y"), ("call_C", "z")]),
            "['call_A', 'call_B', 'call_C']",
        ),
        (
            outputs(&[("call_A", "x"), ("call_A", "y")]),
            "['call_A', 'call_A']",
        ),
        (
            outputs(&[("call_A", "x"), ("call_X", "y")]),
            "['call_A', 'call_X']",
        ),
        (json!({"tool_outputs": []}), "[]"),
    ] {
        let (status, reply) = submit(&app, id, body).await;
        assert_eq!(status, 400);
        assert_eq!(reply["error"]["type"], "invalid_request_error");
        assert_eq!(
            reply["error"]["message"],
            format!("Expected tool outputs for call_ids ['call_A', 'call_B'], got {got}")
        );
    }
    let (status, reply) = submit(
        &app,
        id,
        json!({"tool_outputs": [{"tool_call_id": "call_A"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "tool_outputs[0].output");
    let (status, reply) = submit(&app, "resp_unknown", outputs(&[])).await;
    assert_eq!(status, 404);
    assert_eq!(
        reply["error"]["message"],
        "Response with id 'resp_unknown' not found."
    );
    // Nothing above resumed the run.
    assert_eq!(app.llm.requests().len(), 1);
    app.llm.push(Turn::text("both"));
    let (status, _) = submit(&app, id, outputs(&[("call_B", "y"), ("call_A", "x")])).await;
    assert_eq!(status, 200, "any order answers");
    let (status, reply) = submit(&app, id, outputs(&[("call_A", "x"), ("call_B", "y")])).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"completed\" do not accept tool outputs."
    );
}

#[tokio::test]
async fn of_two_concurrent_submissions_exactly_one_resumes_the_run() {
    for db in backends().await {
        let url = &db.url;
        let app = TestApp::builder().database(url).start().await;
        app.llm.push(Turn::tool_call(
            "call_w",
            "get_weather",
            r#"{"city": "Paris"}"#,
        ));
        app.llm.push(Turn::text("Sunny").paced(50));
        let (_, paused) = app
            .post("/v1/responses", &ask(json!([weather_tool()])))
            .await;
        let id = paused["id"].as_str().unwrap().to_string();

        let body = outputs(&[("call_w", "sunny")]);
        let (a, b) = tokio::join!(
            submit(&app, &id, body.clone()),
            submit(&app, &id, body.clone())
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [200, 400], "{url}: {a:?} {b:?}");
        let loser = if a.0 == 400 { a.1 } else { b.1 };
        let message = loser["error"]["message"].as_str().unwrap();
        assert!(
            message == "Runs in status \"in_progress\" do not accept tool outputs."
                || message == "Runs in status \"completed\" do not accept tool outputs.",
            "{message}"
        );
        let requests = app.llm.requests();
        assert_eq!(requests.len(), 2, "the outputs reached the model once");
        let (_, items) = app.get(&format!("/v1/responses/{id}/input_items")).await;
        assert_eq!(
            items["data"].as_array().unwrap().len(),
            2,
            "the outputs were appended once"
        );
    }
}

#[tokio::test]
async fn a_paused_run_resumes_after_the_service_restarts() {
    for db in backends().await {
        let url = &db.url;
        let app = TestApp::builder().database(url).start().await;
        app.llm.push(Turn::tool_call(
            "call_w",
            "get_weather",
            r#"{"city": "Paris"}"#,
        ));
        let first = app.stream(&ask(json!([weather_tool()]))).await;
        let id = first.response_id();

        // A new process on the same database.
        let app = app.restart(|_| {}).await;
        app.llm.push(Turn::text("Sunny after the restart"));
        let resumed = submit_stream(&app, &id, outputs(&[("call_w", "sunny")])).await;
        assert_eq!(resumed.status, 200, "{url}: {}", resumed.raw);
        assert_eq!(
            resumed.events[0].data["sequence_number"],
            first.events.len() as u64
        );
        assert_eq!(
            resumed.last().data["response"]["output"][1]["content"][0]["text"],
            "Sunny after the restart"
        );
        let requests = app.llm.requests();
        let messages = &requests.last().unwrap()["messages"];
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "call_w", "content": "sunny"})
        );
    }
}

#[tokio::test]
async fn a_paused_run_expires_and_then_refuses_outputs() {
    let app = TestApp::builder()
        .config(|c| {
            c.runs.requires_action_ttl_ms = 200;
            c.runs.sweep_interval_ms = 50;
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    let id = paused["id"].as_str().unwrap();
    let mut expired = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        expired = app.get(&format!("/v1/responses/{id}")).await.1;
        if expired["status"] == "incomplete" {
            break;
        }
    }
    assert_eq!(expired["status"], "incomplete");
    assert_eq!(
        expired["incomplete_details"],
        json!({"reason": "tool_outputs_expired"})
    );
    assert_eq!(expired["required_action"], Value::Null);
    let (status, reply) = submit(&app, id, outputs(&[("call_w", "late")])).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"expired\" do not accept tool outputs."
    );
    let log = app.replay(id, "").await;
    assert_numbering(&log);
    assert_eq!(log.last().event, "response.incomplete");
}

#[tokio::test]
async fn a_late_submission_finds_the_run_expired_even_before_the_sweeper() {
    let app = TestApp::builder()
        .config(|c| {
            c.runs.requires_action_ttl_ms = 100;
            c.runs.sweep_interval_ms = 60_000;
            // Leases are renewed every sweep: they must outlast it.
            c.runs.lease_ttl_ms = 120_000;
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, reply) = submit(
        &app,
        paused["id"].as_str().unwrap(),
        outputs(&[("call_w", "late")]),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"expired\" do not accept tool outputs."
    );
}

#[tokio::test]
async fn cancel_stops_a_running_run_and_a_paused_one_and_is_idempotent() {
    let app = TestApp::start().await;
    // Running: the model hangs mid-answer.
    app.llm.push(Turn {
        steps: vec![
            Step::Text {
                text: "Thinking".into(),
            },
            Step::Hang,
        ],
    });
    let (id, reader) = app
        .start_stream(json!({"model": "gpt-4o-mini", "input": "long task", "stream": true}))
        .await;
    // Let the first delta through before cancelling.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, cancelled) = app
        .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["output"][0]["status"], "incomplete");
    assert_eq!(
        cancelled["output"][0]["content"][0]["text"], "Thinking",
        "what was produced is kept"
    );
    let sse = reader.await.unwrap();
    assert_eq!(sse.last().event, "response.failed");
    assert_eq!(sse.last().data["response"]["status"], "cancelled");
    assert!(sse.done);
    assert_numbering(&sse);
    // Again: the same answer.
    let (status, again) = app
        .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(again["status"], "cancelled");

    // Paused.
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    let paused_id = paused["id"].as_str().unwrap();
    let (status, cancelled) = app
        .post(&format!("/v1/responses/{paused_id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["required_action"], Value::Null);
    let (status, reply) = submit(&app, paused_id, outputs(&[("call_w", "x")])).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"cancelled\" do not accept tool outputs."
    );

    // Completed: returned as it is.
    let (_, finished) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi"}),
        )
        .await;
    let (status, same) = app
        .post(
            &format!("/v1/responses/{}/cancel", finished["id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(same, finished);
    let (status, _) = app
        .post("/v1/responses/resp_unknown/cancel", &json!({}))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_continuation_answers_a_paused_run_with_each_output_type() {
    let app = TestApp::start().await;
    let tools = json!([
        weather_tool(),
        {"type": "custom", "name": "run_sql", "description": "Runs SQL"},
        {"type": "local_shell"},
    ]);
    app.llm.push(Turn::tool_calls(&[
        ("call_f", "get_weather", r#"{"city": "Paris"}"#),
        ("call_c", "run_sql", r#"{"input": "SELECT 1"}"#),
        (
            "call_s",
            "local_shell",
            r#"{"command": ["ls", "-l"], "working_directory": "/tmp"}"#,
        ),
    ]));
    let sse = app.stream(&ask(tools.clone())).await;
    assert_numbering(&sse);
    let paused = &sse.last().data["response"];
    let types: Vec<&str> = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["function_call", "custom_tool_call", "local_shell_call"]
    );
    assert_eq!(paused["output"][1]["input"], "SELECT 1");
    assert_eq!(
        paused["output"][2]["action"],
        json!({"type": "exec", "command": ["ls", "-l"], "env": {},
        "timeout_ms": null, "working_directory": "/tmp", "user": null})
    );
    assert!(
        sse.types()
            .contains(&"response.custom_tool_call_input.delta")
    );
    assert!(
        sse.types()
            .contains(&"response.custom_tool_call_input.done")
    );
    let pending = &paused["required_action"]["submit_tool_outputs"]["tool_calls"];
    assert_eq!(
        pending[1],
        json!({"id": "call_c", "type": "custom", "function": {"name": "run_sql", "arguments": "SELECT 1"}})
    );
    assert_eq!(pending[2]["type"], "local_shell");

    let continue_with = |input: Value| json!({"model": "gpt-4o-mini", "previous_response_id": paused["id"], "input": input});
    let all = json!([
        {"type": "function_call_output", "call_id": "call_f", "output": "sunny"},
        {"type": "custom_tool_call_output", "call_id": "call_c", "output": "1"},
        {"type": "local_shell_call_output", "call_id": "call_s", "output": "total 0"},
    ]);
    let missing = json!([all[0], all[1]]);
    let (status, reply) = app.post("/v1/responses", &continue_with(missing)).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "No tool output found for function call call_s."
    );
    let stray = json!([all[0], all[1], all[2], {"type": "function_call_output", "call_id": "call_zzz", "output": "?"}]);
    let (status, reply) = app.post("/v1/responses", &continue_with(stray)).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "No tool call found for function call output with call_id call_zzz."
    );
    assert_eq!(reply["error"]["param"], "input[3]");

    app.llm.push(Turn::text("All done"));
    let (status, next) = app.post("/v1/responses", &continue_with(all)).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(next["output"][0]["content"][0]["text"], "All done");
    let (_, previous) = app
        .get(&format!("/v1/responses/{}", paused["id"].as_str().unwrap()))
        .await;
    assert_eq!(previous["status"], "completed");
    assert_eq!(previous["required_action"], Value::Null);
    let (status, reply) = submit(
        &app,
        paused["id"].as_str().unwrap(),
        outputs(&[("call_f", "x")]),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"completed\" do not accept tool outputs."
    );
    let requests = app.llm.requests();
    let messages = &requests[1]["messages"];
    let tool_results: Vec<(&str, &str)> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tool_results,
        [("call_f", "sunny"), ("call_c", "1"), ("call_s", "total 0")]
    );
    assert_eq!(
        messages[1]["tool_calls"][1]["function"]["arguments"],
        r#"{"input":"SELECT 1"}"#
    );
}

fn guarded(policy: Value) -> Value {
    json!({"type": "mcp", "server_label": "builtin", "require_approval": policy})
}

#[tokio::test]
async fn an_approved_call_runs_once_after_the_approval_and_the_model_sees_its_result() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "6 * 7"}"#,
    ));
    app.llm.push(Turn::text("It is 42"));
    let first = app.stream(&ask(json!([guarded(json!("always"))]))).await;
    assert_numbering(&first);
    let paused = &first.last().data["response"];
    let types: Vec<&str> = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "mcp_approval_request"]);
    let request = &paused["output"][1];
    let request_id = request["id"].as_str().unwrap();
    assert!(request_id.starts_with("mcpr_"));
    assert_eq!(request["name"], "calculator");
    assert_eq!(request["arguments"], r#"{"expression": "6 * 7"}"#);
    let action = &paused["required_action"]["submit_tool_outputs"];
    assert_eq!(action["tool_calls"], json!([]));
    assert_eq!(
        action["approval_requests"],
        json!([{"id": request_id, "server_label": "builtin",
        "name": "calculator", "arguments": "{\"expression\": \"6 * 7\"}"}])
    );
    assert!(
        !first.types().contains(&"response.mcp_call.in_progress"),
        "nothing ran before the approval"
    );

    let id = first.response_id();
    let (status, reply) = submit(&app, &id, json!({"tool_outputs": []})).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        format!("Expected tool approvals for approval_request_ids ['{request_id}'], got []")
    );

    let resumed = submit_stream(
        &app,
        &id,
        json!({"tool_approvals": [{"approval_request_id": request_id, "approve": true}]}),
    )
    .await;
    assert_eq!(resumed.status, 200, "{}", resumed.raw);
    let call = resumed
        .events
        .iter()
        .find(|e| e.event == "response.output_item.done")
        .unwrap();
    assert_eq!(call.data["item"]["type"], "mcp_call");
    assert_eq!(call.data["item"]["approval_request_id"], request_id);
    assert_eq!(call.data["item"]["output"], "42");
    assert_eq!(resumed.last().data["response"]["status"], "completed");
    let messages = &app.llm.requests()[1]["messages"];
    assert_eq!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count(),
        1
    );
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "42")
    );

    // The same approval again: the run is not waiting any more.
    let (status, reply) = submit(
        &app,
        &id,
        json!({"tool_approvals": [{"approval_request_id": request_id, "approve": true}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        "Runs in status \"completed\" do not accept tool outputs."
    );
}

#[tokio::test]
async fn a_denied_call_is_reported_to_the_model_and_a_continuation_cannot_approve_twice() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_calls(&[
        ("call_1", "fetch_url", r#"{"url": "https://example.com"}"#),
        ("call_2", "get_weather", r#"{"city": "Paris"}"#),
    ]));
    app.llm.push(Turn::text("Understood"));
    let tools = json!([
        guarded(json!({"always": {"tool_names": ["fetch_url"]}})),
        weather_tool()
    ]);
    let (_, paused) = app.post("/v1/responses", &ask(tools)).await;
    let action = &paused["required_action"]["submit_tool_outputs"];
    assert_eq!(
        action["tool_calls"][0]["id"], "call_2",
        "a pause can hold a client call and an approval"
    );
    let request_id = action["approval_requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let previous = paused["id"].clone();
    let continuation = |input: Value| json!({"model": "gpt-4o-mini", "previous_response_id": previous, "input": input});

    let without_approval =
        json!([{"type": "function_call_output", "call_id": "call_2", "output": "sunny"}]);
    let (status, reply) = app
        .post("/v1/responses", &continuation(without_approval))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        format!("No approval response found for approval request {request_id}.")
    );

    let answer = json!([
        {"type": "function_call_output", "call_id": "call_2", "output": "sunny"},
        {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": false, "reason": "not today"},
    ]);
    let (status, next) = app
        .post("/v1/responses", &continuation(answer.clone()))
        .await;
    assert_eq!(status, 200, "{next}");
    let denied = next["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap();
    assert_eq!(denied["status"], "failed");
    assert_eq!(denied["approval_request_id"], request_id.as_str());
    assert_eq!(
        denied["error"]["content"],
        "The user denied this call: not today"
    );
    let messages = &app.llm.requests()[1]["messages"];
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "Error: The user denied this call: not today")
    );

    // Sending the answer again would run (or deny) the call twice: refused.
    let (status, reply) = app.post("/v1/responses", &continuation(answer)).await;
    assert_eq!(status, 400);
    assert_eq!(
        reply["error"]["message"],
        format!("No pending approval request with id {request_id}.")
    );
    assert_eq!(reply["error"]["param"], "input[1]");
}

#[tokio::test]
async fn a_server_configured_to_require_approval_pauses_unless_the_request_says_never() {
    let app = TestApp::builder()
        .config(|c| {
            c.tool_servers.insert(
                "builtin".into(),
                switchyard::config::ToolServerConfig {
                    require_approval: switchyard::config::ApprovalDefault::Always,
                    tools: vec![],
                },
            );
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    let (_, paused) = app
        .post(
            "/v1/responses",
            &ask(json!([{"type": "mcp", "server_label": "builtin"}])),
        )
        .await;
    assert_eq!(paused["output"][1]["type"], "mcp_approval_request");
    app.llm.push(Turn::tool_call(
        "call_2",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    app.llm.push(Turn::text("2"));
    let (_, direct) = app
        .post("/v1/responses", &ask(json!([guarded(json!("never"))])))
        .await;
    assert_eq!(direct["output"][1]["type"], "mcp_call");
    assert_eq!(direct["required_action"], Value::Null);
}

#[tokio::test]
async fn an_unstored_run_is_kept_while_it_waits_and_deleted_once_it_stops() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    app.llm.push(Turn::text("Sunny"));
    let mut body = ask(json!([weather_tool()]));
    body["store"] = json!(false);
    let (_, paused) = app.post("/v1/responses", &body).await;
    let id = paused["id"].as_str().unwrap();
    let (status, done) = submit(&app, id, outputs(&[("call_w", "sunny")])).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["output"][1]["content"][0]["text"], "Sunny");
    let (status, _) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_resumed_run_reports_no_usage_while_running_and_an_approved_call_carries_its_request_id()
{
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    app.llm.push(Turn::text("2"));
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([guarded(json!("always"))])))
        .await;
    assert!(
        paused["usage"].is_object(),
        "a paused run reports the usage so far"
    );
    let request_id = paused["output"][1]["id"].as_str().unwrap();
    let resumed = submit_stream(
        &app,
        paused["id"].as_str().unwrap(),
        json!({"tool_approvals": [{"approval_request_id": request_id, "approve": true}]}),
    )
    .await;
    assert_eq!(resumed.events[0].event, "response.in_progress");
    assert_eq!(resumed.events[0].data["response"]["usage"], Value::Null);
    assert_eq!(
        resumed.events[0].data["response"]["completed_at"],
        Value::Null
    );
    let added = resumed
        .events
        .iter()
        .find(|e| e.event == "response.output_item.added")
        .unwrap();
    assert_eq!(added.data["item"]["approval_request_id"], request_id);
    // 15 for the tool-call turn, 11 for the one-word answer: summed across the pause.
    assert_eq!(
        resumed.last().data["response"]["usage"]["total_tokens"],
        15 + 11
    );
}

#[tokio::test]
async fn a_cancelled_or_expired_pause_has_no_completion_time() {
    let app = TestApp::builder()
        .config(|c| {
            c.runs.requires_action_ttl_ms = 100;
            c.runs.sweep_interval_ms = 30;
        })
        .start()
        .await;
    for _ in 0..2 {
        app.llm.push(Turn::tool_call(
            "call_w",
            "get_weather",
            r#"{"city": "Paris"}"#,
        ));
    }
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    assert!(paused["completed_at"].is_i64());
    let (_, cancelled) = app
        .post(
            &format!("/v1/responses/{}/cancel", paused["id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["completed_at"], Value::Null);
    let (_, paused) = app
        .post("/v1/responses", &ask(json!([weather_tool()])))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, expired) = app
        .get(&format!("/v1/responses/{}", paused["id"].as_str().unwrap()))
        .await;
    assert_eq!(expired["status"], "incomplete");
    assert_eq!(expired["completed_at"], Value::Null);
}
