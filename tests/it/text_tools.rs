//! Tools for models without native function calling (SPEC §15): a provider with a text
//! `tool_protocol` is sent no `tools`; its model is shown the tools in the system prompt and
//! writes its calls in its text, which become the same items and events as native calls.
//! The fake upstream plays such a model behind a server that refuses `tools` (as Ollama does).

use fake_llm::ToolText;
use serde_json::{Value, json};
use switchyard::config::ToolProtocol;

use crate::support::{FakeLlm, Sse, TestApp, Turn, assert_items_do_not_interleave, read_sse};

/// A run with a server-tool turn, then a client call that pauses it, then (its output
/// submitted) the answer, on a provider speaking `protocol` to a fake writing `syntax`
/// (`None`: a native model).
async fn tool_loop(protocol: ToolProtocol, syntax: Option<ToolText>) -> (TestApp, Sse, Sse) {
    let llm = match syntax {
        Some(syntax) => FakeLlm::start_writing_calls(syntax).await.unwrap(),
        None => FakeLlm::start().await.unwrap(),
    };
    llm.push(Turn::tool_call(
        "call_t",
        "current_time",
        r#"{"timezone":"UTC"}"#,
    ));
    llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city":"Zürich","days":2}"#,
    ));
    llm.push(Turn::text("Sunny in Zürich, 21 °C."));
    let app = TestApp::builder()
        .config(move |c| c.llm.provider.tool_protocol = Some(protocol))
        .upstream(llm)
        .start()
        .await;
    let paused = app
        .stream(&json!({
            "model": "gpt-4o-mini", "input": "What time is it, and the weather in Zürich?",
            "tools": [
                {"type": "mcp", "server_label": "builtin", "allowed_tools": ["current_time"],
                 "require_approval": "never"},
                {"type": "function", "name": "get_weather", "description": "The weather of a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                "days": {"type": "integer"}}, "required": ["city"]}},
            ],
        }))
        .await;
    assert_items_do_not_interleave(&paused);
    let id = paused.response_id();
    let response = app
        .client
        .post(app.url(&format!("/v1/responses/{id}/submit_tool_outputs")))
        .json(&json!({"tool_outputs": [{"tool_call_id": paused_call_id(&paused), "output": "Sunny, 21 °C"}],
                      "stream": true}))
        .send()
        .await
        .unwrap();
    let resumed = read_sse(response).await;
    (app, paused, resumed)
}

/// The call id the paused run waits for.
fn paused_call_id(paused: &Sse) -> String {
    paused.last().data["response"]["required_action"]["submit_tool_outputs"]["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A stream as its events' types, the consecutive deltas of one kind counted as one (how a
/// model's text is chunked is not what a client is promised).
fn shape(sse: &Sse) -> Vec<String> {
    let mut shape: Vec<String> = Vec::new();
    for event in &sse.events {
        let kind = event.event.clone();
        if kind.ends_with(".delta") && shape.last() == Some(&kind) {
            continue;
        }
        shape.push(kind);
    }
    shape
}

/// A finished response's output with ids and the clock's readings left out.
fn output(sse: &Sse) -> Value {
    let mut output = sse.last().data["response"]["output"].clone();
    for item in output.as_array_mut().unwrap() {
        let item = item.as_object_mut().unwrap();
        let clock = item["type"] == "mcp_call";
        for key in ["id", "call_id"] {
            item.remove(key);
        }
        if clock {
            item.remove("output");
            item.remove("data");
        }
    }
    output
}

#[tokio::test]
async fn a_text_protocol_run_streams_the_same_events_and_items_as_a_native_one() {
    let (_native, native_paused, native_resumed) = tool_loop(ToolProtocol::Native, None).await;
    for (protocol, syntax) in [
        (ToolProtocol::Hermes, ToolText::Hermes),
        (ToolProtocol::Vcp, ToolText::Vcp),
        (ToolProtocol::Json, ToolText::Json),
    ] {
        let (app, paused, resumed) = tool_loop(protocol, Some(syntax)).await;
        let name = format!("{protocol:?}");
        assert_eq!(shape(&paused), shape(&native_paused), "{name}");
        assert_eq!(shape(&resumed), shape(&native_resumed), "{name}");
        assert_eq!(output(&paused), output(&native_paused), "{name}");
        assert_eq!(output(&resumed), output(&native_resumed), "{name}");
        let call = &paused.last().data["response"]["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap()
            .clone();
        // Typed as the schema says, whichever syntax the model wrote it in.
        assert_eq!(call["arguments"], r#"{"city":"Zürich","days":2}"#, "{name}");
        check_requests(protocol, &app.llm.requests());
    }
}

/// What a text-protocol provider was sent: no `tools`, the tools in the system prompt, and the
/// earlier calls and results written back in the protocol's own syntax.
fn check_requests(protocol: ToolProtocol, requests: &[Value]) {
    assert_eq!(requests.len(), 3, "{protocol:?}");
    let (call_marker, result_marker) = match protocol {
        ToolProtocol::Hermes => ("<tool_call>", "<tool_response>"),
        ToolProtocol::Vcp => ("<<<[TOOL_REQUEST]>>>", "<<<[TOOL_RESULT]>>>"),
        ToolProtocol::Json => ("{\"tool_calls\": [", "{\"tool_results\": ["),
        ToolProtocol::Native => unreachable!(),
    };
    let json_format = (protocol == ToolProtocol::Json).then(|| json!({"type": "json_object"}));
    for request in requests {
        assert!(request.get("tools").is_none(), "{request}");
        assert!(request.get("tool_choice").is_none(), "{request}");
        assert_eq!(
            request.get("response_format").cloned(),
            json_format,
            "{request}"
        );
        let messages = request["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system");
        let system = messages[0]["content"].as_str().unwrap();
        assert!(
            system.contains("get_weather") && system.contains("current_time"),
            "{system}"
        );
        assert!(
            messages
                .iter()
                .all(|m| m["role"] != "tool" && m.get("tool_calls").is_none())
        );
    }
    let last = requests[2]["messages"].as_array().unwrap();
    let assistants: Vec<&str> = last
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(assistants.len(), 2, "{last:?}");
    assert!(
        assistants.iter().all(|a| a.contains(call_marker)),
        "{assistants:?}"
    );
    let results: Vec<&str> = last
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.contains(result_marker))
        .collect();
    assert_eq!(results.len(), 2, "{last:?}");
    assert!(results[1].contains("Sunny, 21 °C"), "{results:?}");
}

#[tokio::test]
async fn an_unreadable_call_is_turned_back_to_the_model_once_then_left_as_text() {
    let broken =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>";
    let unreadable = |text: &str| Turn {
        steps: vec![
            fake_llm::Step::Text { text: text.into() },
            fake_llm::Step::Finish {
                reason: "stop".into(),
            },
        ],
    };
    let llm = FakeLlm::start_writing_calls(ToolText::Hermes)
        .await
        .unwrap();
    llm.push(unreadable(broken));
    llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city":"Oslo"}"#,
    ));
    let app = TestApp::builder()
        .config(|c| c.llm.provider.tool_protocol = Some(ToolProtocol::Hermes))
        .upstream(llm)
        .start()
        .await;
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Weather in Oslo?", "tools": tools}))
        .await;
    // The client sees the call the model wrote when asked again, and nothing of the first.
    let response = &sse.last().data["response"];
    assert_eq!(response["status"], "completed", "{response}");
    let kinds: Vec<&str> = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["function_call"], "{response}");
    assert!(
        !sse.events
            .iter()
            .any(|e| e.data.to_string().contains("tool_call>"))
    );
    let requests = app.llm.requests();
    let told = requests[1]["messages"].to_string();
    assert!(
        told.contains("Your tool call could not be read: the call is not JSON"),
        "{told}"
    );

    // Unreadable again after being asked: the text as the model wrote it.
    app.llm.push(unreadable(broken));
    app.llm.push(unreadable(broken));
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Again?", "tools": tools}))
        .await;
    let response = &sse.last().data["response"];
    assert_eq!(response["status"], "completed", "{response}");
    assert_eq!(response["output"][0]["type"], "message", "{response}");
    assert_eq!(response["output"][0]["content"][0]["text"], broken);
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // (The recorder is the process's: other tests' calls count too.)
    for outcome in ["turned_back", "left_as_text", "read"] {
        let series = format!(
            "switchyard_text_tool_calls_total{{protocol=\"hermes\",outcome=\"{outcome}\"}}"
        );
        assert!(metrics.contains(&series), "{series}\n{metrics}");
    }
}

#[tokio::test]
async fn an_approval_works_the_same_in_every_text_protocol() {
    for (protocol, syntax) in [
        (ToolProtocol::Hermes, ToolText::Hermes),
        (ToolProtocol::Vcp, ToolText::Vcp),
        (ToolProtocol::Json, ToolText::Json),
    ] {
        let llm = FakeLlm::start_writing_calls(syntax).await.unwrap();
        llm.push(Turn::tool_call(
            "call_1",
            "calculator",
            r#"{"expression": "2+3"}"#,
        ));
        llm.push(Turn::text("It is 5."));
        let app = TestApp::builder()
            .config(move |c| c.llm.provider.tool_protocol = Some(protocol))
            .upstream(llm)
            .start()
            .await;
        let tools =
            json!([{"type": "mcp", "server_label": "builtin", "require_approval": "always"}]);
        let (status, paused) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "2+3?", "tools": tools}),
            )
            .await;
        assert_eq!(status, 200, "{protocol:?}: {paused}");
        let request = paused["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "mcp_approval_request")
            .unwrap_or_else(|| panic!("{protocol:?}: {paused}"))
            .clone();
        assert_eq!(request["name"], "calculator");
        let (status, answered) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "tools": tools, "previous_response_id": paused["id"],
                        "input": [{"type": "mcp_approval_response",
                                   "approval_request_id": request["id"], "approve": true}]}),
            )
            .await;
        assert_eq!(status, 200, "{protocol:?}: {answered}");
        let call = answered["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "mcp_call")
            .unwrap_or_else(|| panic!("{protocol:?}: {answered}"))
            .clone();
        assert_eq!(call["output"], "5", "{protocol:?}: {call}");
        let last = answered["output"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(
            last["content"][0]["text"], "It is 5.",
            "{protocol:?}: {answered}"
        );
    }
}

#[tokio::test]
async fn a_custom_tool_call_written_in_text_is_a_custom_tool_call_item() {
    for (protocol, syntax) in [
        (ToolProtocol::Hermes, ToolText::Hermes),
        (ToolProtocol::Vcp, ToolText::Vcp),
        (ToolProtocol::Json, ToolText::Json),
    ] {
        let llm = FakeLlm::start_writing_calls(syntax).await.unwrap();
        llm.push(Turn::tool_call(
            "call_e",
            "exec",
            r#"{"input": "ls -la 「x」"}"#,
        ));
        llm.push(Turn::text("Listed."));
        let app = TestApp::builder()
            .config(move |c| c.llm.provider.tool_protocol = Some(protocol))
            .upstream(llm)
            .start()
            .await;
        let tools = json!([{"type": "custom", "name": "exec", "description": "Runs a command."}]);
        let (status, paused) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "list", "tools": tools}),
            )
            .await;
        assert_eq!(status, 200, "{protocol:?}: {paused}");
        let call = &paused["output"][0];
        assert_eq!(call["type"], "custom_tool_call", "{protocol:?}: {paused}");
        assert_eq!(call["input"], "ls -la 「x」", "{protocol:?}");
        let (status, done) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "previous_response_id": paused["id"], "tools": tools,
                        "input": [{"type": "custom_tool_call_output", "call_id": call["call_id"],
                                   "output": "a b c"}]}),
            )
            .await;
        assert_eq!(status, 200, "{protocol:?}: {done}");
        assert_eq!(done["output"][0]["content"][0]["text"], "Listed.");
        let sent = app.llm.requests()[1]["messages"].to_string();
        assert!(sent.contains("a b c"), "{protocol:?}: {sent}");
    }
}
