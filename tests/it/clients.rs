//! What stock clients send and expect, each point as the client meets it (issue: every client
//! works unchanged): the Open Responses schema's numbers and tool keys, `item_reference`s,
//! replayed server items and pauses answered by replay (Vercel AI SDK, OpenAI Agents SDK for
//! JavaScript, LangChain), Codex's requests, hosted MCP as the Vercel AI SDK declares it,
//! compaction and the WebSocket transport.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{TestApp, Turn};

fn weather() -> Value {
    json!({"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

/// The chat messages of the fake upstream's `n`th request.
fn messages(app: &TestApp, n: usize) -> Vec<Value> {
    app.llm.requests()[n]["messages"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn the_response_echoes_sampling_settings_as_numbers_and_function_tools_with_every_key() {
    let app = TestApp::builder()
        .script([Turn::text("hi"), Turn::text("hi")])
        .start()
        .await;

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi",
                    "tools": [{"type": "function", "name": "ping"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["temperature"], 1.0);
    assert_eq!(body["top_p"], 1.0);
    assert_eq!(body["presence_penalty"], 0.0);
    assert_eq!(body["frequency_penalty"], 0.0);
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "ping", "description": null,
                "parameters": null, "strict": null}])
    );
    // Defaults are not sent upstream: a provider with other defaults keeps its own.
    let sent = &app.llm.requests()[0];
    assert!(sent.get("temperature").is_none(), "{sent}");

    let (_, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi", "temperature": 0.2, "top_p": 0.5}),
        )
        .await;
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["top_p"], 0.5);
    assert_eq!(app.llm.requests()[1]["temperature"], 0.2);
}

#[tokio::test]
async fn assistant_messages_with_a_phase_are_accepted_and_kept() {
    let app = TestApp::builder()
        .script([Turn::text("four")])
        .start()
        .await;

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"type": "message", "role": "assistant", "phase": "commentary",
                 "content": "I should answer with the saved number."},
                {"type": "message", "role": "assistant", "phase": "final_answer",
                 "content": "The number is four."},
                {"type": "message", "role": "user", "content": "Repeat only the number."}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_str().unwrap();
    let (_, items) = app
        .get(&format!("/v1/responses/{id}/input_items?order=asc"))
        .await;
    assert_eq!(items["data"][0]["phase"], "commentary");
    assert_eq!(items["data"][1]["phase"], "final_answer");
    assert!(items["data"][2].get("phase").is_none());

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"type": "message", "role": "assistant", "phase": "aside", "content": "x"}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "input[0].phase");
}

#[tokio::test]
async fn item_references_resolve_to_the_items_an_earlier_response_produced() {
    let app = TestApp::builder()
        .script([Turn::text("Paris is sunny."), Turn::text("Yes.")])
        .start()
        .await;
    let (_, first) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "Weather in Paris?"}),
        )
        .await;
    let answer = first["output"][0]["id"].as_str().unwrap();
    let id = first["id"].as_str().unwrap();
    let (_, inputs) = app.get(&format!("/v1/responses/{id}/input_items")).await;
    let question = inputs["data"][0]["id"].as_str().unwrap();

    // The Vercel AI SDK's second turn: earlier items by reference, then the new message.
    let (status, second) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"type": "item_reference", "id": question},
                {"type": "item_reference", "id": answer},
                {"role": "user", "content": "Sure?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let sent = messages(&app, 1);
    assert_eq!(
        sent,
        [
            json!({"role": "user", "content": "Weather in Paris?"}),
            json!({"role": "assistant", "content": "Paris is sunny."}),
            json!({"role": "user", "content": "Sure?"}),
        ]
    );
    // Listed as the items they resolved to.
    let id = second["id"].as_str().unwrap();
    let (_, inputs) = app
        .get(&format!("/v1/responses/{id}/input_items?order=asc"))
        .await;
    assert_eq!(inputs["data"][1]["id"], answer);
    assert_eq!(inputs["data"][1]["content"][0]["text"], "Paris is sunny.");

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"role": "user", "content": "hi"},
                {"type": "item_reference", "id": "msg_unknown"}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "input[1].id");
    assert_eq!(
        body["error"]["message"],
        "Item with id 'msg_unknown' not found."
    );
    assert_eq!(
        app.llm.requests().len(),
        2,
        "nothing ran for the bad request"
    );
}

#[tokio::test]
async fn a_replayed_server_call_without_its_output_reaches_the_model_with_the_stored_one() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "6*7"}"#,
    ));
    app.llm.push(Turn::text("42."));
    app.llm.push(Turn::text("Still 42."));
    let builtin = json!([{"type": "mcp", "server_label": "builtin", "require_approval": "never"}]);
    let (_, first) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "6*7?", "tools": builtin}),
        )
        .await;
    let output = first["output"].as_array().unwrap();
    let call = output
        .iter()
        .find(|item| item["type"] == "mcp_call")
        .unwrap()
        .clone();
    assert_eq!(call["output"], "42");

    // The OpenAI Agents SDK for JavaScript replays the call without its output.
    let mut replayed = call.clone();
    replayed.as_object_mut().unwrap().remove("output");
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "tools": builtin, "input": [
                {"role": "user", "content": "6*7?"}, replayed,
                {"role": "user", "content": "Sure?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let sent = messages(&app, 2);
    let result = sent.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["content"], "42");
}

#[tokio::test]
async fn a_replayed_history_that_answers_a_paused_response_completes_it() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city": "Paris"}"#,
    ));
    app.llm.push(Turn::text("Sunny in Paris."));
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "Weather?", "tools": [weather()]}),
        )
        .await;
    assert!(paused["required_action"].is_object(), "{paused}");
    let id = paused["id"].as_str().unwrap();
    let call = paused["output"][0].clone();

    // LangChain, the Vercel AI SDK and Codex replay the history instead of chaining.
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "tools": [weather()], "input": [
                {"role": "user", "content": "Weather?"}, call,
                {"type": "function_call_output", "call_id": "call_w", "output": "sunny"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["content"][0]["text"], "Sunny in Paris.");
    let (_, before) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(before["status"], "completed");
    assert_eq!(before["required_action"], Value::Null);
    let (status, late) = app
        .post(
            &format!("/v1/responses/{id}/submit_tool_outputs"),
            &json!({"tool_outputs": [{"tool_call_id": "call_w", "output": "x"}]}),
        )
        .await;
    assert_eq!(status, 400, "{late}");
}

#[tokio::test]
async fn an_approval_answered_by_replay_runs_the_call_once_and_completes_the_paused_response() {
    let app = TestApp::start().await;
    let tools = json!([{"type": "mcp", "server_label": "builtin", "require_approval": "always"}]);
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "2+3"}"#,
    ));
    app.llm.push(Turn::text("It is 5."));
    app.llm.push(Turn::text("Still 5."));
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "2+3?", "tools": tools}),
        )
        .await;
    let id = paused["id"].as_str().unwrap();
    let request = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap()
        .clone();
    let request_id = request["id"].as_str().unwrap();
    let answer = json!({"type": "mcp_approval_response",
                        "approval_request_id": request_id, "approve": true});

    // The JavaScript Agents SDK and LangChain replay the request with its answer.
    let replay = |extra: Vec<Value>| {
        let mut input = vec![
            json!({"role": "user", "content": "2+3?"}),
            request.clone(),
            answer.clone(),
        ];
        input.extend(extra);
        json!({"model": "gpt-4o-mini", "tools": tools, "input": input})
    };
    let (status, second) = app.post("/v1/responses", &replay(Vec::new())).await;
    assert_eq!(status, 200, "{second}");
    let calls: Vec<&Value> = second["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls.len(), 1, "{second}");
    assert_eq!(calls[0]["output"], "5");
    assert_eq!(calls[0]["approval_request_id"], request_id);
    let (_, before) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(before["status"], "completed");
    assert_eq!(before["required_action"], Value::Null);

    // The same approval replayed again (with what followed) never runs the call again.
    let (status, third) = app
        .post(
            "/v1/responses",
            &replay(vec![
                calls[0].clone(),
                second["output"].as_array().unwrap().last().unwrap().clone(),
            ]),
        )
        .await;
    assert_eq!(status, 200, "{third}");
    assert!(
        third["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["type"] != "mcp_call"),
        "{third}"
    );
    assert_eq!(app.llm.requests().len(), 3);
}

#[tokio::test]
async fn an_approval_denied_by_replay_is_reported_to_the_model_and_not_run() {
    let app = TestApp::start().await;
    let tools = json!([{"type": "mcp", "server_label": "builtin", "require_approval": "always"}]);
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "2+3"}"#,
    ));
    app.llm.push(Turn::text("Understood."));
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "2+3?", "tools": tools}),
        )
        .await;
    let request = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap()
        .clone();
    let (status, second) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "tools": tools, "input": [
                {"role": "user", "content": "2+3?"}, request,
                {"type": "mcp_approval_response", "approval_request_id": request["id"],
                 "approve": false, "reason": "not now"}]}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let sent = messages(&app, 1);
    let result = sent.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(
        result["content"].as_str().unwrap().contains("denied"),
        "{result}"
    );
    let id = paused["id"].as_str().unwrap();
    let (_, before) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(before["status"], "completed");
}

#[tokio::test]
async fn an_approval_answer_to_an_unknown_request_is_refused() {
    let app = TestApp::start().await;
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"role": "user", "content": "hi"},
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope",
                 "approve": true}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "input[1]");
    assert!(app.llm.requests().is_empty());
}

#[tokio::test]
async fn codex_requests_with_client_metadata_namespaces_and_hosted_tools_run() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_x",
        "exec_command",
        r#"{"cmd": "ls"}"#,
    ));
    let namespace = json!({"type": "namespace", "name": "shell", "description": "Shell tools",
        "tools": [{"type": "function", "name": "exec_command",
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]});
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "list files",
                    "client_metadata": {"x-codex-turn": "1"},
                    "tools": [namespace, {"type": "web_search", "external_web_access": false}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let requests = app.llm.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        ["exec_command"],
        "web_search has no tool server here"
    );
    let call = &body["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "exec_command");
    assert_eq!(call["namespace"], "shell");
    assert_eq!(body["tools"][1]["type"], "web_search", "echoed as sent");

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "search",
                    "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "tool_choice.type");

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "web_serch"}]}),
        )
        .await;
    assert_eq!(
        status, 400,
        "a misspelt type is not taken for a hosted tool"
    );
    assert_eq!(body["error"]["param"], "tools[0].type");
}

#[tokio::test]
async fn a_hosted_tool_type_mapped_to_a_tool_server_runs_there() {
    let app = TestApp::builder()
        .config(|config| {
            config
                .tools
                .hosted
                .insert("web_search".into(), "builtin".into());
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "1+1"}"#,
    ));
    app.llm.push(Turn::text("2"));
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "1+1?",
                    "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let types: Vec<&str> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "mcp_call", "message"]);
    assert_eq!(body["output"][1]["output"], "2");
}

#[tokio::test]
async fn an_unmapped_hosted_tool_is_left_out_and_counted_or_refused_as_the_operator_says() {
    let request = json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "web_search_preview_2025_03_11"}]});
    // Ignored (the default): the run goes on without it; the model is not offered it.
    let app = TestApp::start().await;
    app.llm.push(Turn::text("Hello."));
    let (status, body) = app.post("/v1/responses", &request).await;
    assert_eq!(status, 200, "{body}");
    let offered = &app.llm.requests()[0]["tools"];
    assert_eq!(offered.as_array().unwrap().len(), 1, "{offered}");
    assert_eq!(
        body["tools"][1]["type"], "web_search_preview_2025_03_11",
        "echoed as given"
    );
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"switchyard_unmapped_hosted_tools_total{type="web_search_preview"}"#),
        "{metrics}"
    );

    // Refused: a 400 naming the entry and the setting that would map it; nothing is stored.
    let app = TestApp::builder()
        .config(|c| c.tools.unmapped_hosted = switchyard::config::UnmappedHosted::Refuse)
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &request).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "tools[1].type");
    assert_eq!(
        body["error"]["message"],
        "The hosted tool type 'web_search_preview_2025_03_11' is not available on this server: no tool server is configured to run it (the operator can map one with tools.hosted.web_search_preview_2025_03_11)."
    );
    assert!(app.llm.requests().is_empty());
}

#[tokio::test]
async fn hosted_mcp_as_the_vercel_ai_sdk_declares_it_is_accepted_and_listed_without_nulls() {
    let app = TestApp::builder().script([Turn::text("ok")]).start().await;
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
                {"type": "mcp", "server_label": "builtin", "server_url": "https://example.com/mcp",
                 "require_approval": "never"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let listing = &body["output"][0];
    assert_eq!(listing["type"], "mcp_list_tools");
    assert!(listing.get("error").is_none(), "{listing}");
    for tool in listing["tools"].as_array().unwrap() {
        assert!(tool.get("annotations").is_none(), "{tool}");
    }

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
                {"type": "mcp", "server_label": "dropbox", "connector_id": "connector_dropbox"}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "tools[0].connector_id");
}

#[tokio::test]
async fn a_turn_that_mixes_a_server_call_and_a_client_call_presents_them_in_call_order() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_calls(&[
        ("call_s", "calculator", r#"{"expression": "1+1"}"#),
        ("call_c", "get_weather", r#"{"city": "Paris"}"#),
    ]));
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "both", "tools": [
                {"type": "mcp", "server_label": "builtin", "require_approval": "never"},
                weather()]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let types: Vec<&str> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "mcp_call", "function_call"]);
}

#[tokio::test]
async fn compaction_returns_the_user_messages_and_a_summary_that_a_new_response_continues_from() {
    let app = TestApp::start().await;
    app.llm
        .push(Turn::text("Launch on Tuesday; notify support first."));
    app.llm.push(Turn::text("Tuesday."));
    let (status, body) = app
        .post(
            "/v1/responses/compact",
            &json!({"model": "gpt-4o-mini", "input": [
                {"role": "user", "content": "We agreed to launch on Tuesday and notify support first."},
                {"role": "assistant", "content": "Understood."}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "response.compaction");
    assert!(body["created_at"].is_i64());
    assert_eq!(body["usage"]["output_tokens"], 6);
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 2);
    assert_eq!(output[0]["role"], "user");
    assert_eq!(output[1]["type"], "compaction");
    assert_eq!(
        output[1]["encrypted_content"],
        "Launch on Tuesday; notify support first."
    );
    let asked = messages(&app, 0);
    assert_eq!(asked[0]["role"], "system", "the compaction instructions");
    assert_eq!(asked.last().unwrap()["role"], "user");

    let mut input = output.clone();
    input.push(json!({"role": "user", "content": "When?"}));
    let (status, _) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": input}),
        )
        .await;
    assert_eq!(status, 200);
    let sent = messages(&app, 1);
    assert!(
        sent[1]["content"]
            .as_str()
            .unwrap()
            .ends_with("Launch on Tuesday; notify support first."),
        "{sent:?}"
    );

    let (status, body) = app
        .post(
            "/v1/responses/compact",
            &json!({"input": [{"role": "user", "content": "Compact this."}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "model");
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn socket(app: &TestApp) -> Socket {
    let url = app.url("/v1/responses").replacen("http://", "ws://", 1);
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// Sends `response.create` and reads events until the turn ends (a terminal event, or an
/// `error` event before any response).
async fn turn(socket: &mut Socket, request: Value) -> Vec<Value> {
    socket
        .send(Message::text(request.to_string()))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(message) = socket.next().await {
        let Message::Text(text) = message.unwrap() else {
            continue;
        };
        let event: Value = serde_json::from_str(&text).unwrap();
        let kind = event["type"].as_str().unwrap().to_string();
        let started = !events.is_empty();
        events.push(event);
        if matches!(
            kind.as_str(),
            "response.completed" | "response.failed" | "response.incomplete"
        ) || (kind == "error" && !started)
        {
            break;
        }
    }
    events
}

#[tokio::test]
async fn a_websocket_carries_responses_in_turn_and_continues_store_false_ones_on_the_same_socket() {
    let app = TestApp::builder()
        .script([Turn::text("OK"), Turn::text("cobalt")])
        .start()
        .await;
    let mut ws = socket(&app).await;
    let first = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "input": "Remember the code word: cobalt. Reply with OK."}),
    )
    .await;
    let kinds: Vec<&str> = first.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    for (n, event) in first.iter().enumerate() {
        assert_eq!(event["sequence_number"], n);
    }
    let id = first[0]["response"]["id"].as_str().unwrap().to_string();

    let second = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "previous_response_id": id, "input": "What is the code word?"}),
    )
    .await;
    assert_eq!(second.last().unwrap()["type"], "response.completed");
    let sent = messages(&app, 1);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[1], json!({"role": "assistant", "content": "OK"}));

    // Another socket does not know it, and the first one goes on after an error.
    let mut other = socket(&app).await;
    let missing = turn(
        &mut other,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "previous_response_id": id, "input": "again"}),
    )
    .await;
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0]["type"], "error");
    assert_eq!(missing[0]["status"], 400);
    assert_eq!(missing[0]["error"]["code"], "previous_response_not_found");
    app.llm.push(Turn::text("recovered"));
    let recovered = turn(
        &mut other,
        json!({"type": "response.create", "model": "gpt-4o-mini", "input": "start over"}),
    )
    .await;
    assert_eq!(recovered.last().unwrap()["type"], "response.completed");
}

#[tokio::test]
async fn a_failed_websocket_continuation_forgets_the_response_it_continued() {
    let app = TestApp::builder().script([Turn::text("OK")]).start().await;
    let mut ws = socket(&app).await;
    let first = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "input": "Remember: ember."}),
    )
    .await;
    let id = first[0]["response"]["id"].as_str().unwrap().to_string();
    let failed = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "previous_response_id": id, "input": [
                   {"type": "function_call_output", "call_id": "call_missing", "output": "x"}]}),
    )
    .await;
    assert_eq!(failed[0]["type"], "error");
    assert_eq!(failed[0]["status"], 400);
    let retry = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "store": false,
               "previous_response_id": id, "input": "stale"}),
    )
    .await;
    assert_eq!(retry[0]["error"]["code"], "previous_response_not_found");
    assert_eq!(app.llm.requests().len(), 1);
}

#[tokio::test]
async fn a_websocket_message_that_is_not_a_create_request_gets_an_error_event() {
    let app = TestApp::start().await;
    let mut ws = socket(&app).await;
    let events = turn(&mut ws, json!({"type": "response.cancel"})).await;
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["error"]["param"], "type");
    let events = turn(
        &mut ws,
        json!({"type": "response.create", "model": "gpt-4o-mini", "input": "x", "background": true}),
    )
    .await;
    assert_eq!(events[0]["error"]["param"], "background");

    let (status, listed) = app.get("/v1/responses").await;
    assert_eq!(status, 200, "a plain GET lists the responses: {listed}");
    assert_eq!(listed["object"], "list");
}

#[tokio::test]
async fn tools_declared_in_an_additional_tools_input_item_join_the_request_and_survive_a_pause() {
    let app = TestApp::start().await;
    app.llm
        .push(Turn::tool_call("call_e", "exec", r#"{"input": "ls -la"}"#));
    app.llm.push(Turn::text("Listed."));
    // Codex, for the models of its catalog: no `tools`, an input item declaring them.
    let declared = json!({"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [
        {"type": "namespace", "name": "functions", "description": "Codex's tools", "tools": [
            {"type": "custom", "name": "exec", "description": "Runs a command."}]}]});
    let (status, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [declared, {"role": "user", "content": "list"}]}),
        )
        .await;
    assert_eq!(status, 200, "{paused}");
    let offered = &app.llm.requests()[0]["tools"][0]["function"];
    assert_eq!(offered["name"], "exec");
    let call = &paused["output"][0];
    assert_eq!(call["type"], "custom_tool_call");
    assert_eq!(call["input"], "ls -la");
    assert_eq!(call["namespace"], "functions");
    assert_eq!(
        paused["tools"],
        json!([]),
        "only the request's own tools are echoed"
    );
    let id = paused["id"].as_str().unwrap();
    let (status, done) = app
        .post(
            &format!("/v1/responses/{id}/submit_tool_outputs"),
            &json!({"tool_outputs": [{"tool_call_id": "call_e", "output": "a b c"}]}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        app.llm.requests()[1]["tools"][0]["function"]["name"],
        "exec",
        "the resumed run still offers the tools of its input"
    );
    assert_eq!(app.llm.requests()[1]["messages"][0]["role"], "user");

    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": [
                {"type": "additional_tools", "tools": [{"type": "nonsense"}]},
                {"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "input[0].tools[0].type");
}
