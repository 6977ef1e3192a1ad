//! Server tools end to end: the registry, the concurrent executor, what the stream shows and
//! what the model is sent back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use switchyard::config::{Config, HttpToolConfig, Profile, ToolErrorPolicy, ToolServerConfig};
use switchyard::tools::{ToolContext, ToolHandler, ToolOptions, ToolOutput, ToolResult};

use crate::support::{
    Database, Step, TestApp, Turn, assert_items_do_not_interleave, assert_numbering, done_items,
    http_tool, serve,
};

fn builtin() -> Value {
    json!({"type": "mcp", "server_label": "builtin", "require_approval": "never"})
}

fn run_with(tools: Value) -> Value {
    json!({"model": "gpt-4o-mini", "input": "go", "tools": tools})
}

#[tokio::test]
async fn a_tool_turn_then_a_text_turn_streams_the_call_and_feeds_the_result_back() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "6 * 7"}"#,
    ));
    app.llm.push(Turn::text("It is 42"));

    let sse = app.stream(&run_with(json!([builtin()]))).await;

    assert_numbering(&sse);
    assert_items_do_not_interleave(&sse);
    assert_eq!(
        sse.types(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.mcp_list_tools.in_progress",
            "response.mcp_list_tools.completed",
            "response.output_item.done",
            "response.output_item.added",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let listing = &sse.events[5].data["item"];
    assert_eq!(listing["type"], "mcp_list_tools");
    assert_eq!(listing["server_label"], "builtin");
    let names: Vec<&str> = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["current_time", "calculator", "fetch_url"]);
    let call = &sse.events[11].data["item"];
    assert_eq!(call["type"], "mcp_call");
    assert_eq!(call["server_label"], "builtin");
    assert_eq!(call["name"], "calculator");
    // The arguments arrive in the delta only: a client that concatenates the deltas onto the
    // added item gets them once.
    assert_eq!(sse.events[6].data["item"]["arguments"], "");
    let mut arguments = sse.events[6].data["item"]["arguments"]
        .as_str()
        .unwrap()
        .to_string();
    arguments.push_str(sse.events[7].data["delta"].as_str().unwrap());
    assert_eq!(arguments, r#"{"expression": "6 * 7"}"#);
    assert_eq!(call["arguments"], arguments.as_str());
    assert_eq!(call["arguments"], r#"{"expression": "6 * 7"}"#);
    assert_eq!(call["output"], "42");
    assert_eq!(call["error"], Value::Null);
    assert_eq!(call["status"], "completed");
    assert!(call["id"].as_str().unwrap().starts_with("mcp_"));
    assert_eq!(sse.events[7].data["delta"], r#"{"expression": "6 * 7"}"#);
    let response = &sse.last().data["response"];
    assert_eq!(response["output"].as_array().unwrap().len(), 3);
    assert_eq!(
        response["usage"]["total_tokens"],
        15 + 13,
        "usage is summed over both turns"
    );

    let requests = app.llm.requests();
    assert_eq!(requests.len(), 2);
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["current_time", "calculator", "fetch_url"]);
    assert_eq!(
        requests[0]["tools"][1]["function"]["parameters"]["required"],
        json!(["expression"])
    );
    let call_id = call["id"].as_str().unwrap();
    assert_eq!(
        requests[1]["messages"],
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"6 * 7\"}"}}
            ]},
            {"role": "tool", "tool_call_id": call_id, "content": "42"},
        ])
    );
}

/// A local tool endpoint: `/sleep` waits `ms` then answers, `/json` answers JSON, `/fail`
/// answers 500.
async fn tool_endpoint() -> String {
    let app = axum::Router::new()
        .route(
            "/sleep",
            post(|Json(body): Json<Value>| async move {
                let ms = body["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                format!("slept {ms}")
            }),
        )
        .route(
            "/json",
            post(|Json(body): Json<Value>| async move {
                Json(json!({"temperature": 21, "city": body["city"]}))
            }),
        )
        .route(
            "/fail",
            post(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "backend exploded",
                )
            }),
        );
    serve(app).await
}

fn with_server(config: &mut Config, label: &str, tools: Vec<HttpToolConfig>) {
    config.tool_servers.insert(
        label.into(),
        ToolServerConfig {
            tools,
            ..Default::default()
        },
    );
}

#[tokio::test]
async fn three_slow_calls_of_one_turn_run_concurrently_and_are_shown_one_at_a_time() {
    let endpoint = tool_endpoint().await;
    let app = TestApp::builder()
        .config(|c| {
            with_server(
                c,
                "slow",
                vec![http_tool("sleep", format!("{endpoint}/sleep"), None)],
            )
        })
        .start()
        .await;
    app.llm.push(Turn::tool_calls(&[
        ("call_a", "sleep", r#"{"ms": 900}"#),
        ("call_b", "sleep", r#"{"ms": 600}"#),
        ("call_c", "sleep", r#"{"ms": 300}"#),
    ]));
    app.llm.push(Turn::text("done"));

    let started = Instant::now();
    let sse = app
        .stream(&run_with(json!([{"type": "mcp", "server_label": "slow"}])))
        .await;
    let elapsed = started.elapsed();
    eprintln!(
        "three calls of 900, 600 and 300 ms (sum 1800 ms): the run took {} ms",
        elapsed.as_millis()
    );

    assert_eq!(sse.last().data["response"]["status"], "completed");
    assert!(
        elapsed < Duration::from_millis(1500),
        "took {elapsed:?}; the delays sum to 1800 ms"
    );
    assert!(elapsed >= Duration::from_millis(900), "took {elapsed:?}");
    assert_items_do_not_interleave(&sse);
    assert_numbering(&sse);
    // Shown in the order they finished ...
    let outputs: Vec<String> = done_items(&sse)
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .map(|i| i["output"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outputs, ["slept 300", "slept 600", "slept 900"]);
    // ... but given back to the model in the order it called them.
    let messages = app.llm.requests()[1]["messages"].clone();
    let results: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["slept 900", "slept 600", "slept 300"]);
    assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn invalid_arguments_reach_the_model_as_an_error_and_the_run_goes_on() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expr": "1+1"}"#,
    ));
    app.llm.push(Turn::tool_call(
        "call_2",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    app.llm.push(Turn::text("2"));

    let sse = app.stream(&run_with(json!([builtin()]))).await;

    assert_eq!(sse.last().data["response"]["status"], "completed");
    let calls: Vec<Value> = done_items(&sse)
        .into_iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls[0]["status"], "failed");
    assert_eq!(calls[0]["error"]["type"], "mcp_tool_execution_error");
    let message = calls[0]["error"]["content"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid arguments for 'calculator'"),
        "{message}"
    );
    assert!(message.contains("expr"), "{message}");
    assert!(sse.types().contains(&"response.mcp_call.failed"));
    assert_eq!(calls[1]["output"], "2");
    let second = &app.llm.requests()[1]["messages"];
    assert_eq!(second[2]["role"], "tool");
    assert!(
        second[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("Error: Invalid arguments for 'calculator'")
    );
}

struct Panics;
#[async_trait]
impl ToolHandler for Panics {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "always panics"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _: ToolContext, _: Value, _: ToolOutput) -> ToolResult {
        panic!("boom")
    }
}

struct Sleeps;
#[async_trait]
impl ToolHandler for Sleeps {
    fn name(&self) -> &str {
        "nap"
    }
    fn description(&self) -> &str {
        "sleeps too long"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn options(&self) -> ToolOptions {
        ToolOptions {
            timeout: Some(Duration::from_millis(200)),
            ..Default::default()
        }
    }
    async fn call(&self, _: ToolContext, _: Value, _: ToolOutput) -> ToolResult {
        tokio::time::sleep(Duration::from_secs(5)).await;
        ToolResult::ok("rested")
    }
}

/// Streams its answer in pieces and ends the run with it.
struct Answers;
#[async_trait]
impl ToolHandler for Answers {
    fn name(&self) -> &str {
        "answer"
    }
    fn description(&self) -> &str {
        "answers directly"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn options(&self) -> ToolOptions {
        ToolOptions {
            return_direct: true,
            ..Default::default()
        }
    }
    async fn call(&self, _: ToolContext, _: Value, output: ToolOutput) -> ToolResult {
        output.send("The answer ");
        output.send("is 42.");
        ToolResult::ok("The answer is 42.")
    }
}

struct Secret;
#[async_trait]
impl ToolHandler for Secret {
    fn name(&self) -> &str {
        "lookup_secret"
    }
    fn description(&self) -> &str {
        "hidden from clients"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn options(&self) -> ToolOptions {
        ToolOptions {
            hidden: true,
            ..Default::default()
        }
    }
    async fn call(&self, _: ToolContext, _: Value, _: ToolOutput) -> ToolResult {
        ToolResult::ok("the secret is 7")
    }
}

fn test_tools() -> Vec<(String, Arc<dyn ToolHandler>)> {
    vec![
        ("test".to_string(), Arc::new(Panics) as Arc<dyn ToolHandler>),
        ("test".to_string(), Arc::new(Sleeps)),
        ("test".to_string(), Arc::new(Answers)),
        ("test".to_string(), Arc::new(Secret)),
    ]
}

fn test_server() -> Value {
    json!({"type": "mcp", "server_label": "test"})
}

#[tokio::test]
async fn a_timeout_and_a_panic_become_errors_the_model_sees() {
    let app = TestApp::builder().tools(test_tools()).start().await;
    app.llm.push(Turn::tool_calls(&[
        ("c1", "explode", "{}"),
        ("c2", "nap", "{}"),
    ]));
    app.llm.push(Turn::text("sorry"));

    let sse = app.stream(&run_with(json!([test_server()]))).await;

    assert_eq!(sse.last().data["response"]["status"], "completed");
    let calls: Vec<Value> = done_items(&sse)
        .into_iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    let error_of = |name: &str| {
        calls.iter().find(|c| c["name"] == name).unwrap()["error"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        error_of("explode"),
        "The tool 'explode' failed unexpectedly."
    );
    assert_eq!(
        error_of("nap"),
        "The tool 'nap' did not finish within 200 ms."
    );
    let tool_messages: Vec<String> = app.llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        tool_messages,
        [
            "Error: The tool 'explode' failed unexpectedly.",
            "Error: The tool 'nap' did not finish within 200 ms."
        ]
    );
}

/// Has effects, so must be saved as started before it runs: answers whether the run's saved
/// transcript showed it in progress when it ran.
struct Charges {
    database_url: String,
}
#[async_trait]
impl ToolHandler for Charges {
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "charges a card"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, context: ToolContext, _: Value, _: ToolOutput) -> ToolResult {
        use sqlx::Connection;
        let mut db = sqlx::PgConnection::connect(&self.database_url)
            .await
            .unwrap();
        let transcript: String =
            sqlx::query_scalar("SELECT transcript::text FROM responses WHERE id = $1")
                .bind(&context.response_id)
                .fetch_one(&mut db)
                .await
                .unwrap();
        let transcript: Vec<Value> = serde_json::from_str(&transcript).unwrap();
        let saved = transcript.iter().any(|item| {
            item["type"] == "mcp_call"
                && item["name"] == "charge"
                && item["status"] == "in_progress"
        });
        ToolResult::ok(if saved {
            "saved, then run"
        } else {
            "run unsaved"
        })
    }
}

#[tokio::test]
async fn a_server_call_is_saved_as_started_before_its_tool_runs() {
    // On PostgreSQL, where a trigger can hold the save open: a tool started before the save
    // commits reads the run without its call (and after a crash there, would run again).
    let Some(db) = Database::postgres().await else {
        return;
    };
    let url = &db.url;
    let tools = vec![(
        "test".to_string(),
        Arc::new(Charges {
            database_url: url.clone(),
        }) as Arc<dyn ToolHandler>,
    )];
    let app = TestApp::builder().database(url).tools(tools).start().await;
    {
        use sqlx::Connection;
        let mut db = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(
            "CREATE FUNCTION slow_save() RETURNS trigger AS $$ BEGIN \
               IF NEW.transcript::text LIKE '%in_progress%' THEN PERFORM pg_sleep(0.3); END IF; \
               RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER slow_save BEFORE UPDATE ON responses \
               FOR EACH ROW EXECUTE FUNCTION slow_save();",
        )
        .execute(&mut db)
        .await
        .unwrap();
    }
    app.llm.push(Turn::tool_call("c1", "charge", "{}"));
    app.llm.push(Turn::text("charged"));

    let sse = app.stream(&run_with(json!([test_server()]))).await;

    assert_eq!(sse.last().data["response"]["status"], "completed");
    let requests = app.llm.requests();
    let tool_message = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .clone();
    assert_eq!(tool_message, "saved, then run");
}

#[tokio::test]
async fn a_return_direct_tool_ends_the_run_with_its_output_as_the_answer() {
    let app = TestApp::builder().tools(test_tools()).start().await;
    app.llm.push(Turn::tool_call("c1", "answer", "{}"));

    let sse = app.stream(&run_with(json!([test_server()]))).await;

    let response = &sse.last().data["response"];
    assert_eq!(response["status"], "completed");
    let deltas: Vec<&str> = sse
        .events
        .iter()
        .filter(|e| e.event == "response.output_text.delta")
        .map(|e| e.data["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, ["The answer ", "is 42."]);
    let last = response["output"].as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "message");
    assert_eq!(last["content"][0]["text"], "The answer is 42.");
    assert_eq!(app.llm.requests().len(), 1, "no second model turn");
    assert_items_do_not_interleave(&sse);
}

#[tokio::test]
async fn a_hidden_tool_leaves_no_item_but_the_model_and_the_chain_see_it() {
    let app = TestApp::builder().tools(test_tools()).start().await;
    app.llm.push(Turn::tool_call("c1", "lookup_secret", "{}"));
    app.llm.push(Turn::text("I know it"));
    app.llm.push(Turn::text("Still know it"));

    let sse = app.stream(&run_with(json!([test_server()]))).await;
    assert!(
        sse.events
            .iter()
            .all(|e| e.data["item"]["type"] != "mcp_call"),
        "no mcp_call on the stream"
    );
    let response = &sse.last().data["response"];
    let types: Vec<&str> = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "message"]);
    let second = &app.llm.requests()[1]["messages"];
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": second[1]["tool_calls"][0]["id"], "content": "the secret is 7"})
    );

    // A continuation still carries the hidden call to the model.
    let (status, _) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "again?",
        "previous_response_id": response["id"]}),
        )
        .await;
    assert_eq!(status, 200);
    let third = &app.llm.requests()[2]["messages"];
    assert!(
        third
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "the secret is 7"),
        "{third}"
    );
}

#[tokio::test]
async fn a_function_and_two_servers_with_one_tool_name_each_get_a_name_and_their_own_calls() {
    let endpoint = tool_endpoint().await;
    let app = TestApp::builder()
        .config(|c| {
            with_server(
                c,
                "math",
                vec![http_tool("calculator", format!("{endpoint}/json"), None)],
            )
        })
        .start()
        .await;
    let tools = json!([
        {"type": "mcp", "server_label": "builtin", "allowed_tools": ["calculator"], "require_approval": "never"},
        {"type": "mcp", "server_label": "math", "require_approval": "never"},
        {"type": "function", "name": "calculator", "parameters": {"type": "object"}},
    ]);
    app.llm.push(Turn::tool_calls(&[
        ("c1", "builtin__calculator", r#"{"expression": "2+3"}"#),
        ("c2", "math__calculator", r#"{"city": "Rome"}"#),
        ("c3", "calculator", r#"{"x": 1}"#),
    ]));
    let (status, first) = app.post("/v1/responses", &run_with(tools.clone())).await;
    assert_eq!(status, 200, "{first}");

    // The client's function keeps its name; each server tool is qualified by its server.
    let requests = app.llm.requests();
    let shown: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        shown,
        ["builtin__calculator", "math__calculator", "calculator"]
    );
    // Each call reached its own tool, and its item names the server's own tool.
    let output = first["output"].as_array().unwrap();
    let call = |label: &str| {
        output
            .iter()
            .find(|i| i["type"] == "mcp_call" && i["server_label"] == label)
            .unwrap()
    };
    assert_eq!(call("builtin")["name"], "calculator");
    assert_eq!(call("builtin")["output"], "5");
    assert_eq!(call("math")["name"], "calculator");
    assert_eq!(
        serde_json::from_str::<Value>(call("math")["output"].as_str().unwrap()).unwrap(),
        json!({"temperature": 21, "city": "Rome"})
    );
    let function = output
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap();
    assert_eq!(function["name"], "calculator");
    assert_eq!(function["call_id"], "c3");

    // The continuation shows the model its calls under the names it was given.
    app.llm.push(Turn::text("done"));
    let (status, next) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "previous_response_id": first["id"], "tools": tools,
                "input": [{"type": "function_call_output", "call_id": "c3", "output": "42"}]}),
        )
        .await;
    assert_eq!(status, 200, "{next}");
    let requests = app.llm.requests();
    let messages = &requests[1]["messages"];
    let called: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        called,
        ["builtin__calculator", "math__calculator", "calculator"]
    );

    // tool_choice may name a tool by its server, or by a name only one tool has.
    for (choice, forced) in [
        (
            json!({"type": "mcp", "server_label": "math", "name": "calculator"}),
            "math__calculator",
        ),
        (
            json!({"type": "function", "name": "builtin__calculator"}),
            "builtin__calculator",
        ),
    ] {
        app.llm.push(Turn::text("ok"));
        let mut body = run_with(tools.clone());
        body["tool_choice"] = choice;
        let (status, reply) = app.post("/v1/responses", &body).await;
        assert_eq!(status, 200, "{reply}");
        let request = app.llm.requests().last().unwrap().clone();
        assert_eq!(request["tool_choice"]["function"]["name"], forced);
    }
    let mut body = run_with(json!([tools[0], tools[1]]));
    body["tool_choice"] = json!({"type": "function", "name": "calculator"});
    let (status, reply) = app.post("/v1/responses", &body).await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "tool_choice.name");
    assert_eq!(
        reply["error"]["message"],
        "Tool 'calculator' is offered by several tool servers of this request (builtin, math); name one with {\"type\": \"mcp\", \"server_label\": …, \"name\": \"calculator\"}."
    );
}

#[tokio::test]
async fn tool_declaration_mistakes_are_400s_naming_the_field() {
    let app = TestApp::start().await;
    let (status, body) = app
        .post(
            "/v1/responses",
            &run_with(json!([
                {"type": "function", "name": "calculator", "parameters": {"type": "object"}},
                {"type": "custom", "name": "calculator"},
            ])),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "tools[1]");
    assert_eq!(
        body["error"]["message"],
        "Tool name 'calculator' is declared twice: by tools[0] (function) and by tools[1] (custom). A tool can never be shadowed; rename one of them."
    );
    for (tools, param, fragment) in [
        (
            json!([{"type": "mcp", "server_label": "nowhere"}]),
            "tools[0].server_label",
            "Unknown tool server 'nowhere'",
        ),
        (
            json!([builtin(), builtin()]),
            "tools[1].server_label",
            "enabled twice",
        ),
        (
            json!([{"type": "mcp", "server_label": "builtin", "allowed_tools": ["rm_rf"]}]),
            "tools[0].allowed_tools",
            "has no tool 'rm_rf'",
        ),
        (
            json!([{"type": "function", "name": "f", "parameters": {"type": "nonsense"}}]),
            "tools[0].parameters",
            "Invalid schema for function 'f'",
        ),
        (
            json!([{"type": "function", "name": "bad name"}]),
            "tools[0].name",
            "Expected a name",
        ),
        (
            json!([{"type": "web_serch"}]),
            "tools[0].type",
            "not supported",
        ),
        (
            json!([{"type": "mcp", "server_label": "x", "server_url": "https://example.com/mcp"}]),
            "tools[0].server_url",
            "not supported",
        ),
    ] {
        let (status, body) = app.post("/v1/responses", &run_with(tools.clone())).await;
        assert_eq!(status, 400, "{tools}");
        assert_eq!(body["error"]["param"], param, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(fragment),
            "{body}"
        );
    }
    assert!(app.llm.requests().is_empty());
}

#[tokio::test]
async fn allowed_tools_limits_what_the_model_sees_and_blocks_what_it_attempts() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call("c1", "current_time", "{}"));
    app.llm.push(Turn::text("ok"));
    let sse = app
        .stream(&run_with(
            json!([{"type": "mcp", "server_label": "builtin", "allowed_tools": ["calculator"]}]),
        ))
        .await;
    let requests = app.llm.requests();
    let shown: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["calculator"]);
    let call = done_items(&sse)
        .into_iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap();
    assert_eq!(call["status"], "failed");
    assert_eq!(
        call["error"]["content"],
        "The tool 'current_time' is not available in this request; use one of the tools you were given."
    );
    assert_eq!(sse.last().data["response"]["status"], "completed");
}

#[tokio::test]
async fn tool_choice_forms_shape_the_upstream_request() {
    let app = TestApp::start().await;
    let cases = [
        (json!("none"), Value::Null, 0),
        (json!("required"), json!("required"), 3),
        (
            json!({"type": "mcp", "server_label": "builtin", "name": "calculator"}),
            json!({"type": "function", "function": {"name": "calculator"}}),
            1,
        ),
        (
            json!({"type": "allowed_tools", "mode": "required", "tools": [{"type": "mcp", "server_label": "builtin", "name": "current_time"}]}),
            json!("required"),
            1,
        ),
    ];
    for (choice, sent, tools) in cases {
        let mut body = run_with(json!([builtin()]));
        body["tool_choice"] = choice.clone();
        let (status, reply) = app.post("/v1/responses", &body).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["tool_choice"], choice, "echoed as given");
        let request = app.llm.requests().pop().unwrap();
        assert_eq!(
            request.get("tool_choice").cloned().unwrap_or(Value::Null),
            sent,
            "{choice}"
        );
        assert_eq!(
            request
                .get("tools")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            tools,
            "{choice}"
        );
    }
    let mut body = run_with(json!([builtin()]));
    body["tool_choice"] = json!({"type": "function", "name": "missing"});
    let (status, reply) = app.post("/v1/responses", &body).await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"]["param"], "tool_choice.name");
}

#[tokio::test]
async fn max_turns_ends_a_run_that_keeps_calling_tools_incomplete() {
    let app = TestApp::builder()
        .config(|c| c.tools.max_turns = 2)
        .start()
        .await;
    for n in 0..3 {
        app.llm.push(Turn::tool_call(
            &format!("c{n}"),
            "calculator",
            r#"{"expression": "1"}"#,
        ));
    }
    let sse = app.stream(&run_with(json!([builtin()]))).await;
    assert_eq!(sse.last().event, "response.incomplete");
    assert_eq!(
        sse.last().data["response"]["incomplete_details"],
        json!({"reason": "max_turns"})
    );
    assert_eq!(app.llm.requests().len(), 2);
}

#[tokio::test]
async fn max_tool_calls_and_parallel_tool_calls_refuse_extra_calls() {
    let app = TestApp::start().await;
    let two = || {
        Turn::tool_calls(&[
            ("c1", "calculator", r#"{"expression": "1"}"#),
            ("c2", "calculator", r#"{"expression": "2"}"#),
        ])
    };
    for (limit, expected) in [
        (
            json!({"max_tool_calls": 1}),
            "The limit of 1 tool calls for this response is reached; this call was not executed.",
        ),
        (
            json!({"parallel_tool_calls": false}),
            "Only one tool call per turn is allowed (parallel_tool_calls is false); this call was not executed. Call it again on its own.",
        ),
    ] {
        app.llm.push(two());
        app.llm.push(Turn::text("fine"));
        let mut body = run_with(json!([builtin()]));
        for (k, v) in limit.as_object().unwrap() {
            body[k] = v.clone();
        }
        let sse = app.stream(&body).await;
        let calls: Vec<Value> = done_items(&sse)
            .into_iter()
            .filter(|i| i["type"] == "mcp_call")
            .collect();
        assert_eq!(calls[0]["output"], "1", "{limit}");
        assert_eq!(calls[1]["error"]["content"], expected, "{limit}");
        assert_eq!(sse.last().data["response"]["status"], "completed");
    }
    assert_eq!(app.llm.requests()[2]["parallel_tool_calls"], false);
}

#[tokio::test]
async fn an_http_tool_server_answers_fails_and_times_out_as_tool_results() {
    let endpoint = tool_endpoint().await;
    let app = TestApp::builder()
        .config(|c| {
            with_server(
                c,
                "weather",
                vec![
                    http_tool("get_weather", format!("{endpoint}/json"), None),
                    http_tool("broken", format!("{endpoint}/fail"), None),
                    http_tool("slow", format!("{endpoint}/sleep"), Some(200)),
                ],
            )
        })
        .start()
        .await;
    app.llm.push(Turn::tool_calls(&[
        ("c1", "get_weather", r#"{"city": "Paris"}"#),
        ("c2", "broken", "{}"),
        ("c3", "slow", r#"{"ms": 2000}"#),
    ]));
    app.llm.push(Turn::text("done"));
    let sse = app
        .stream(&run_with(
            json!([{"type": "mcp", "server_label": "weather"}]),
        ))
        .await;
    let calls: Vec<Value> = done_items(&sse)
        .into_iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    let by_name = |name: &str| calls.iter().find(|c| c["name"] == name).unwrap().clone();
    let weather = by_name("get_weather");
    assert_eq!(weather["status"], "completed");
    assert_eq!(
        serde_json::from_str::<Value>(weather["output"].as_str().unwrap()).unwrap(),
        json!({"temperature": 21, "city": "Paris"})
    );
    assert_eq!(weather["data"], json!({"temperature": 21, "city": "Paris"}));
    let broken = by_name("broken");
    assert_eq!(
        broken["error"],
        json!({"type": "http_error", "code": 500, "message": "The tool server answered 500: backend exploded"})
    );
    assert_eq!(
        by_name("slow")["error"]["content"],
        "The tool 'slow' did not finish within 200 ms."
    );
    assert_eq!(sse.last().data["response"]["status"], "completed");
}

/// The bytes a chart endpoint answers with (a PNG's signature is enough for the service,
/// which passes images on without reading them).
const CHART: &[u8] = b"\x89PNG\r\n\x1a\n a tiny chart";

/// An HTTP tool server with one tool, `get_chart`, answering `image/png`.
async fn chart_app(images: Option<bool>, db: &Database) -> TestApp {
    let router = axum::Router::new().route(
        "/chart",
        post(|| async { ([("content-type", "image/png; foo=bar")], CHART) }),
    );
    let endpoint = serve(router).await;
    TestApp::builder()
        .database(&db.url)
        .config(move |c| {
            c.llm.provider.images = images;
            with_server(
                c,
                "charts",
                vec![http_tool("get_chart", format!("{endpoint}/chart"), None)],
            )
        })
        .start()
        .await
}

fn chart_url() -> String {
    use base64::Engine as _;
    let base64 = base64::engine::general_purpose::STANDARD.encode(CHART);
    format!("data:image/png;base64,{base64}")
}

/// The content parts of the user messages of an upstream request that show images.
fn image_messages(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].is_array())
        .map(|m| m["content"].clone())
        .collect()
}

#[tokio::test]
async fn an_http_tools_image_reaches_the_model_after_its_tool_message_and_again_in_a_continuation()
{
    let db = Database::postgres_or_sqlite().await;
    let app = chart_app(None, &db).await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "get_chart",
        r#"{"city": "Oslo"}"#,
    ));
    app.llm.push(Turn::text("A rising line."));
    app.llm.push(Turn::text("Still rising."));

    let tools = json!([{"type": "mcp", "server_label": "charts", "require_approval": "never"}]);
    let (status, first) = app.post("/v1/responses", &run_with(tools.clone())).await;

    assert_eq!(status, 200, "{first}");
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap()
        .clone();
    let placeholder = format!("[image: image/png, {} bytes]", CHART.len());
    assert_eq!(call["output"], placeholder.as_str());
    assert_eq!(
        call["data"],
        json!({"content": [{"type": "input_image", "image_url": chart_url(), "detail": "auto"}]})
    );
    let second = &app.llm.requests()[1];
    let messages = second["messages"].as_array().unwrap();
    let call_id = call["id"].as_str().unwrap();
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": call_id, "content": placeholder})
    );
    let shown = json!([
        {"type": "text", "text": format!("The image returned by call {call_id} (get_chart):")},
        {"type": "image_url", "image_url": {"url": chart_url()}}
    ]);
    assert_eq!(messages[3], json!({"role": "user", "content": shown}));
    assert_eq!(messages.len(), 4);

    // Stored, read back and continued: the model is shown the image again.
    let (_, stored) = app
        .get(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(stored["output"], first["output"]);
    let (status, next) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "and now?", "tools": tools,
                    "previous_response_id": first["id"]}),
        )
        .await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(image_messages(&app.llm.requests()[2]), [shown]);
}

#[tokio::test]
async fn a_provider_that_takes_no_images_is_shown_only_the_placeholder() {
    let db = Database::postgres_or_sqlite().await;
    let app = chart_app(Some(false), &db).await;
    app.llm.push(Turn::tool_call("call_1", "get_chart", "{}"));
    app.llm.push(Turn::text("I cannot see it."));

    let tools = json!([{"type": "mcp", "server_label": "charts", "require_approval": "never"}]);
    let sse = app.stream(&run_with(tools)).await;

    assert_eq!(sse.last().data["response"]["status"], "completed");
    let call = done_items(&sse)
        .into_iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap();
    // The client still gets the image ...
    assert_eq!(call["data"]["content"][0]["image_url"], chart_url());
    // ... the model only its placeholder.
    let second = &app.llm.requests()[1];
    assert!(image_messages(second).is_empty(), "{second}");
    assert!(!second.to_string().contains("image_url"), "{second}");
    assert_eq!(
        second["messages"].as_array().unwrap().last().unwrap()["content"],
        format!("[image: image/png, {} bytes]", CHART.len())
    );
}

#[tokio::test]
async fn fetch_url_refuses_a_loopback_address_by_default() {
    let endpoint = tool_endpoint().await;
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "c1",
        "fetch_url",
        &json!({"url": format!("{endpoint}/json")}).to_string(),
    ));
    app.llm.push(Turn::text("cannot"));
    let sse = app.stream(&run_with(json!([builtin()]))).await;
    let call = done_items(&sse)
        .into_iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap();
    assert_eq!(call["status"], "failed");
    let message = call["error"]["content"].as_str().unwrap();
    assert!(
        message.contains("is private, loopback or link-local; fetching it is not allowed"),
        "{message}"
    );
}

#[tokio::test]
async fn a_failed_tool_fails_the_run_when_the_policy_says_so() {
    let app = TestApp::builder()
        .config(|c| c.tools.on_error = ToolErrorPolicy::Fail)
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "c1",
        "calculator",
        r#"{"expression": "1/0"}"#,
    ));
    let sse = app.stream(&run_with(json!([builtin()]))).await;
    assert_eq!(sse.last().event, "response.failed");
    let n = sse.events.len();
    assert_eq!(sse.events[n - 2].data["code"], "tool_error");
    assert_eq!(
        sse.events[n - 2].data["message"],
        "The tool 'calculator' failed: Division by zero."
    );
}

#[tokio::test]
async fn a_server_is_listed_only_the_first_time_it_is_used_in_a_chain() {
    let app = TestApp::start().await;
    let (_, first) = app
        .post("/v1/responses", &run_with(json!([builtin()])))
        .await;
    assert_eq!(first["output"][0]["type"], "mcp_list_tools");
    let mut body = run_with(json!([builtin()]));
    body["previous_response_id"] = first["id"].clone();
    let (_, second) = app.post("/v1/responses", &body).await;
    assert_eq!(second["output"][0]["type"], "message");
    assert!(
        app.llm.requests()[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["role"] != "tool")
    );
}

#[tokio::test]
async fn a_client_function_call_streams_live_and_the_run_ends_for_the_client_to_answer() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    let function = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let sse = app.stream(&run_with(json!([function]))).await;
    assert_eq!(
        sse.types(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let added = &sse.events[2].data["item"];
    assert_eq!(added["type"], "function_call");
    assert_eq!(added["arguments"], "");
    assert_eq!(added["status"], "in_progress");
    assert_eq!(sse.events[5].data["name"], "get_weather");
    assert_eq!(sse.events[5].data["arguments"], r#"{"city": "Paris"}"#);
    assert_eq!(sse.events[5].data["item_id"], added["id"]);
    let response = &sse.last().data["response"];
    assert_eq!(response["output"][0]["call_id"], "call_w");

    // The standard continuation: the client's output reaches the model after the call.
    app.llm.push(Turn::text("Sunny"));
    let (status, next) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "previous_response_id": response["id"],
        "input": [{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24C"}]}),
        )
        .await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(
        app.llm.requests()[1]["messages"],
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24C"},
        ])
    );
}

#[tokio::test]
async fn chunks_of_two_calls_may_interleave_and_are_assembled_by_index() {
    let app = TestApp::start().await;
    app.llm.push(Turn {
        steps: vec![
            Step::ToolCall {
                index: 0,
                id: "call_1".into(),
                name: "calculator".into(),
                arguments: r#"{"expression""#.into(),
            },
            Step::ToolCall {
                index: 1,
                id: "call_2".into(),
                name: "current_time".into(),
                arguments: r#"{"timezone": "#.into(),
            },
            Step::ToolArgs {
                index: 0,
                arguments: r#": "6 * 7"}"#.into(),
            },
            Step::ToolArgs {
                index: 1,
                arguments: r#""UTC"}"#.into(),
            },
            Step::Finish {
                reason: "tool_calls".into(),
            },
        ],
    });
    app.llm.push(Turn::text("done"));
    let sse = app.stream(&run_with(json!([builtin()]))).await;
    assert_items_do_not_interleave(&sse);
    let calls: Vec<Value> = done_items(&sse)
        .into_iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls.len(), 2);
    let calculator = calls.iter().find(|c| c["name"] == "calculator").unwrap();
    assert_eq!(calculator["arguments"], r#"{"expression": "6 * 7"}"#);
    assert_eq!(calculator["output"], "42");
    let time = calls.iter().find(|c| c["name"] == "current_time").unwrap();
    assert_eq!(time["status"], "completed");
    assert!(time["output"].as_str().unwrap().ends_with("+00:00"));
}

#[tokio::test]
async fn calls_of_consecutive_turns_reach_the_model_as_separate_assistant_messages() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "6 * 7"}"#,
    ));
    app.llm.push(Turn::tool_call(
        "call_2",
        "calculator",
        r#"{"expression": "43"}"#,
    ));
    app.llm.push(Turn::text("done"));
    let (status, _) = app
        .post("/v1/responses", &run_with(json!([builtin()])))
        .await;
    assert_eq!(status, 200);
    let requests = app.llm.requests();
    let roles: Vec<&str> = requests[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
}

/// A client function whose output holds an image, answered on a `profile` provider played
/// by its persona (`images` as configured): the status and body of the answer, and the
/// request that carried the output upstream.
async fn image_output_on(profile: Profile, images: Option<bool>) -> (u16, Value, Value) {
    let persona = fake_llm::Persona::parse(profile.name()).unwrap();
    let llm = crate::support::FakeLlm::start_as(persona).await.unwrap();
    llm.push(Turn::tool_call("call_1", "snapshot", "{}"));
    llm.push(Turn::text("A cat."));
    let app = TestApp::builder()
        .config(move |c| {
            c.llm.provider.profile = Some(profile);
            c.llm.provider.images = images;
        })
        .upstream(llm)
        .start()
        .await;
    let tools = json!([{"type": "function", "name": "snapshot",
                        "parameters": {"type": "object", "properties": {}}}]);
    let (status, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "What is on the camera?", "tools": tools}),
        )
        .await;
    assert_eq!(status, 200, "{paused}");
    let output = json!([{"type": "input_text", "text": "The camera shows:"},
                        {"type": "input_image", "image_url": chart_url()}]);
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "previous_response_id": paused["id"], "tools": tools,
                    "input": [{"type": "function_call_output", "call_id": "call_1", "output": output}]}),
        )
        .await;
    let requests = app.llm.requests();
    (status, body, requests.last().unwrap().clone())
}

#[tokio::test]
async fn an_image_in_a_clients_function_output_reaches_a_model_that_takes_images() {
    let (status, body, sent) = image_output_on(Profile::Generic, None).await;
    assert_eq!(status, 200, "{body}");
    let messages = sent["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["content"], "The camera shows:\n[image]");
    let shown = json!([
        {"type": "text", "text": "The image returned by call call_1 (snapshot):"},
        {"type": "image_url", "image_url": {"url": chart_url()}}
    ]);
    assert_eq!(image_messages(&sent), [shown]);

    // DeepSeek reads no images: its profile shows it the placeholder only, and its persona
    // accepts that; told to send images anyway, the upstream's refusal reaches the client.
    let (status, body, sent) = image_output_on(Profile::Deepseek, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(image_messages(&sent).is_empty(), "{sent}");
    let (status, body, _) = image_output_on(Profile::Deepseek, Some(true)).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown variant `image_url`, expected `text`"),
        "{message}"
    );
}
