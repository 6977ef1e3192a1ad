//! Reasoning models and provider profiles (SPEC §13–14): reasoning streamed as `reasoning`
//! items in whichever form the provider sends it, stored and replayed, sent back where the
//! provider needs it, and every profile's requests written so that its persona of the fake
//! upstream (which refuses what the real provider refuses) accepts them.

use std::net::SocketAddr;

use fake_llm::{Persona, ReasoningForm};
use serde_json::{Value, json};
use switchyard::config::Profile;

use crate::support::{
    FakeLlm, Sse, Step, TestApp, Turn, assert_items_do_not_interleave, audit_log, describe,
    read_sse,
};

/// A turn that reasons, then does `then`.
fn reasoning_then(thought: &str, then: Turn) -> Turn {
    let mut steps = vec![
        Step::Reasoning {
            text: format!("{thought} "),
        },
        Step::Reasoning {
            text: "Then act.".into(),
        },
    ];
    steps.extend(then.steps.into_iter().map(|step| match step {
        Step::Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            ..
        } => Step::Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            reasoning_tokens: 3,
        },
        other => other,
    }));
    Turn { steps }
}

/// The items of a finished stream's `output_item.done` events, as `(type, text)`: a reasoning
/// item's text or summary, a message's text, a call's name.
fn shown(sse: &Sse) -> Vec<(String, String)> {
    sse.events
        .iter()
        .filter(|e| e.event == "response.output_item.done")
        .map(|e| {
            let item = &e.data["item"];
            let text = match item["type"].as_str() {
                Some("reasoning") => item["content"][0]["text"]
                    .as_str()
                    .or(item["summary"][0]["text"].as_str())
                    .unwrap_or_default(),
                Some("message") => item["content"][0]["text"].as_str().unwrap_or_default(),
                _ => item["name"].as_str().unwrap_or_default(),
            };
            (item["type"].as_str().unwrap().to_string(), text.to_string())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test]
async fn streamed_reasoning_is_a_reasoning_item_before_the_answer_stored_and_replayed() {
    let app = TestApp::builder()
        .script([reasoning_then(
            "Paris is the capital.",
            Turn::text("Paris."),
        )])
        .start()
        .await;
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Capital of France?"}))
        .await;
    audit_log(&sse);
    assert_items_do_not_interleave(&sse);
    assert_eq!(
        sse.types()[2..11],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
        ]
    );
    let added = &sse.events[2].data;
    assert_eq!(added["output_index"], 0);
    let id = added["item"]["id"].as_str().unwrap();
    assert!(id.starts_with("rs_"), "{id}");
    assert_eq!(
        added["item"],
        json!({"type": "reasoning", "id": id, "summary": [], "content": [], "status": "in_progress"})
    );
    assert_eq!(
        sse.events[3].data["part"],
        json!({"type": "reasoning_text", "text": ""})
    );
    let delta = &sse.events[4].data;
    assert_eq!(
        (
            &delta["item_id"],
            &delta["output_index"],
            &delta["content_index"],
            &delta["delta"]
        ),
        (
            &json!(id),
            &json!(0),
            &json!(0),
            &json!("Paris is the capital. ")
        )
    );
    assert_eq!(
        sse.events[6].data["text"],
        "Paris is the capital. Then act."
    );
    assert_eq!(
        sse.events[7].data["part"],
        json!({"type": "reasoning_text", "text": "Paris is the capital. Then act."})
    );
    assert_eq!(
        shown(&sse),
        pairs(&[
            ("reasoning", "Paris is the capital. Then act."),
            ("message", "Paris.")
        ])
    );
    let response = &sse.last().data["response"];
    assert_eq!(
        response["usage"]["output_tokens_details"]["reasoning_tokens"],
        3
    );
    // The answer is only the answer: the fake sent the reasoning as `<think>` text.
    assert_eq!(response["output"][1]["content"][0]["text"], "Paris.");

    let id = sse.response_id();
    let (_, stored) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(stored["output"], response["output"]);
    let replayed = app.replay(&id, "").await;
    assert_eq!(replayed.types(), sse.types());
    assert_eq!(
        replayed.events[4].data, sse.events[4].data,
        "the log keeps the reasoning deltas"
    );
}

#[tokio::test]
async fn with_a_summary_asked_for_the_reasoning_streams_as_a_summary_part() {
    let app = TestApp::builder()
        .script([reasoning_then("Think.", Turn::text("Done."))])
        .start()
        .await;
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Go",
                        "reasoning": {"effort": "low", "summary": "auto"}}))
        .await;
    audit_log(&sse);
    assert_eq!(
        sse.types()[2..10],
        [
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
        ]
    );
    let part = &sse.events[3].data;
    assert_eq!(
        (&part["summary_index"], &part["part"]),
        (&json!(0), &json!({"type": "summary_text", "text": ""}))
    );
    assert_eq!(sse.events[4].data["summary_index"], 0);
    assert_eq!(
        sse.events[8].data["item"]["summary"],
        json!([{"type": "summary_text", "text": "Think. Then act."}])
    );
    assert_eq!(
        app.llm.requests()[0]["reasoning_effort"],
        "low",
        "the effort goes upstream"
    );
}

#[tokio::test]
async fn think_tags_split_anywhere_in_the_stream_never_reach_the_answer() {
    let pieces = ["<th", "ink>Hm", "m, ü", "</thi", "nk>\n", "\nHel", "lo"];
    let mut steps: Vec<Step> = pieces
        .iter()
        .map(|p| Step::Text {
            text: (*p).to_string(),
        })
        .collect();
    steps.push(Step::Finish {
        reason: "stop".into(),
    });
    let app = TestApp::builder().script([Turn { steps }]).start().await;
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Hi"}))
        .await;
    audit_log(&sse);
    assert_eq!(
        shown(&sse),
        pairs(&[("reasoning", "Hmm, ü"), ("message", "Hello")])
    );
    let text: String = sse
        .events
        .iter()
        .filter(|e| e.event == "response.output_text.delta")
        .map(|e| e.data["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello");
}

/// The provider configuration that points `profile` at the fake at `addr`, as an operator
/// writes it.
fn provider_for(config: &mut switchyard::config::Config, profile: Profile, addr: SocketAddr) {
    let provider = &mut config.llm.provider;
    provider.profile = Some(profile);
    provider.models = vec![model_of(profile).into()];
    if profile == Profile::Azure {
        provider.base_url = Some(format!("http://{addr}/openai/deployments/{{model}}"));
        provider.api_version = Some("2024-10-21".into());
    }
}

/// A model of the profile's provider that reasons.
fn model_of(profile: Profile) -> &'static str {
    match profile {
        Profile::Openai | Profile::Azure => "gpt-5-mini",
        Profile::Deepseek => "deepseek-reasoner",
        Profile::Gemini => "gemini-3-flash-preview",
        Profile::Anthropic => "claude-sonnet-4-5",
        _ => "qwen3-8b",
    }
}

/// Where the profile sends reasoning back on assistant messages, if it does.
fn sent_back_field(profile: Profile) -> Option<&'static str> {
    match profile {
        Profile::Deepseek | Profile::Llamacpp => Some("reasoning_content"),
        Profile::Vllm | Profile::Ollama | Profile::Openrouter => Some("reasoning"),
        _ => None,
    }
}

/// Two server-tool turns, then a client call that pauses the run, then (once its output is
/// submitted) the answer; every turn reasons first.
async fn tool_loop(profile: Profile) -> (TestApp, Sse, Sse) {
    let persona = Persona::parse(profile.name()).unwrap();
    let llm = FakeLlm::start_as(persona).await.unwrap();
    let time = r#"{"timezone":"UTC"}"#;
    let weather = r#"{"city":"Paris"}"#;
    for turn in [
        reasoning_then(
            "Time first.",
            Turn::tool_call("call_t1", "current_time", time),
        ),
        reasoning_then("Again.", Turn::tool_call("call_t2", "current_time", time)),
        reasoning_then(
            "Weather.",
            Turn::tool_call("call_w", "get_weather", weather),
        ),
        reasoning_then("Answer.", Turn::text("Sunny in Paris.")),
    ] {
        llm.push(turn);
    }
    let addr = llm.addr();
    let app = TestApp::builder()
        .config(move |c| provider_for(c, profile, addr))
        .upstream(llm)
        .start()
        .await;
    let paused = app
        .stream(&json!({
            "model": model_of(profile), "input": "What time is it, and the weather in Paris?",
            "max_output_tokens": 400, "temperature": 0.5, "reasoning": {"effort": "low"},
            "tools": [
                {"type": "mcp", "server_label": "builtin", "allowed_tools": ["current_time"],
                 "require_approval": "never"},
                {"type": "function", "name": "get_weather", "description": "The weather of a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}},
            ],
        }))
        .await;
    let id = paused.response_id();
    let response = app
        .client
        .post(app.url(&format!("/v1/responses/{id}/submit_tool_outputs")))
        .json(
            &json!({"tool_outputs": [{"tool_call_id": "call_w", "output": "Sunny, 21 °C"}],
                      "stream": true}),
        )
        .send()
        .await
        .unwrap();
    let resumed = read_sse(response).await;
    (app, paused, resumed)
}

#[tokio::test]
async fn every_profile_runs_two_server_tool_turns_and_a_pause_as_its_provider_accepts_them() {
    for profile in Profile::ALL {
        let (app, paused, resumed) = tool_loop(profile).await;
        let name = profile.name();
        let requests = app.llm.requests();
        assert_eq!(requests.len(), 4, "{name}: every turn was accepted");
        let paused_end = &paused.last().data["response"];
        assert_eq!(
            paused_end["required_action"]["submit_tool_outputs"]["tool_calls"][0]["id"],
            "call_w",
            "{name}: {}",
            describe(&paused)
        );
        let response = &resumed.last().data["response"];
        assert_eq!(response["status"], "completed", "{name}: {response}");
        assert_eq!(
            response["usage"]["output_tokens_details"]["reasoning_tokens"], 12,
            "{name}"
        );
        let reasons = Persona::parse(name).unwrap().reasoning() != ReasoningForm::Hidden;
        let kinds: Vec<&str> = response["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["type"].as_str().unwrap())
            .collect();
        let expected: &[&str] = match (reasons, profile == Profile::Gemini) {
            // OpenRouter's reasoning blocks follow each stretch of reasoning.
            _ if profile == Profile::Openrouter => &[
                "mcp_list_tools",
                "reasoning",
                "reasoning",
                "mcp_call",
                "reasoning",
                "reasoning",
                "mcp_call",
                "reasoning",
                "reasoning",
                "function_call",
                "reasoning",
                "reasoning",
                "message",
            ],
            // Gemini shows no reasoning, but signs each step's first call.
            (false, true) => &[
                "mcp_list_tools",
                "reasoning",
                "mcp_call",
                "reasoning",
                "mcp_call",
                "reasoning",
                "function_call",
                "message",
            ],
            (true, _) => &[
                "mcp_list_tools",
                "reasoning",
                "mcp_call",
                "reasoning",
                "mcp_call",
                "reasoning",
                "function_call",
                "reasoning",
                "message",
            ],
            (false, false) => &[
                "mcp_list_tools",
                "mcp_call",
                "mcp_call",
                "function_call",
                "message",
            ],
        };
        assert_eq!(kinds, expected, "{name}");
        check_requests(profile, &requests, &app.llm.seen());
    }
}

/// What the profile wrote upstream, besides the persona having accepted it.
fn check_requests(profile: Profile, requests: &[Value], seen: &[fake_llm::Seen]) {
    let name = profile.name();
    let first = &requests[0];
    let openai_like = matches!(profile, Profile::Openai | Profile::Azure);
    let (limit, other) = match openai_like {
        true => ("max_completion_tokens", "max_tokens"),
        false => ("max_tokens", "max_completion_tokens"),
    };
    assert_eq!(first[limit], 400, "{name}: {first}");
    assert!(first.get(other).is_none(), "{name}");
    assert_eq!(first.get("temperature").is_none(), openai_like, "{name}");
    match profile {
        Profile::Openrouter => assert_eq!(first["reasoning"], json!({"effort": "low"})),
        _ => assert_eq!(first["reasoning_effort"], "low", "{name}"),
    }
    if profile == Profile::Azure {
        assert_eq!(
            seen[0].path,
            "/openai/deployments/gpt-5-mini/chat/completions"
        );
        assert_eq!(seen[0].query.as_deref(), Some("api-version=2024-10-21"));
        assert_eq!(seen[0].api_key.as_deref(), Some("test-key"));
        assert_eq!(seen[0].authorization, None);
    } else {
        assert_eq!(
            seen[0].authorization.as_deref(),
            Some("Bearer test-key"),
            "{name}"
        );
    }
    // The last request holds the whole loop: three assistant messages that called tools.
    let last = &requests[3];
    let called: Vec<&Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(called.len(), 3, "{name}: {last}");
    for (message, call) in called
        .iter()
        .zip(["current_time", "current_time", "get_weather"])
    {
        let signature = &message["tool_calls"][0]["extra_content"]["google"]["thought_signature"];
        match profile {
            Profile::Gemini => assert_eq!(
                signature.as_str(),
                Persona::Gemini
                    .call_signature(model_of(profile), true, call)
                    .as_deref(),
                "{name}: the signature the call was given: {message}"
            ),
            _ => assert!(message["tool_calls"][0].get("extra_content").is_none()),
        }
    }
    for (message, thought) in called.iter().zip(["Time first.", "Again.", "Weather."]) {
        let text = format!("{thought} Then act.");
        let blocks = match profile {
            Profile::Openrouter => json!([{"type": "reasoning.text", "text": text,
                "format": "anthropic-claude-v1", "index": 0,
                "signature": Persona::Openrouter.block_signature(&text)}]),
            _ => Value::Null,
        };
        assert_eq!(message["reasoning_details"], blocks, "{name}: {message}");
        let fields = ["reasoning", "reasoning_content"].map(|f| message.get(f).is_some());
        match sent_back_field(profile) {
            Some(field) => assert_eq!(
                message[field],
                format!("{thought} Then act."),
                "{name}: {message}"
            ),
            None => assert_eq!(fields, [false, false], "{name}: {message}"),
        }
    }
}

/// A Codex-style exchange on a vLLM provider: `store: false` with the reasoning sealed, the
/// history replayed by the client with the blob (its text left out, or `blob` instead).
async fn replayed_with(blob: Option<&str>) -> (TestApp, Value) {
    let llm = FakeLlm::start_as(Persona::Vllm).await.unwrap();
    llm.push(reasoning_then(
        "Need the weather.",
        Turn::tool_call("call_w", "get_weather", r#"{"city":"Paris"}"#),
    ));
    llm.push(Turn::text("Sunny."));
    let addr = llm.addr();
    let app = TestApp::builder()
        .config(move |c| {
            provider_for(c, Profile::Vllm, addr);
            c.reasoning.encryption_key = Some(switchyard::config::Secret::new("shared key"));
        })
        .upstream(llm)
        .start()
        .await;
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let user = json!({"type": "message", "role": "user", "content": "Weather in Paris?"});
    let first = app
        .stream(
            &json!({"model": "qwen3-8b", "input": [user], "tools": tools, "store": false,
                        "include": ["reasoning.encrypted_content"]}),
        )
        .await;
    let output = first.last().data["response"]["output"].clone();
    let mut reasoning = output[0].clone();
    assert_eq!(reasoning["type"], "reasoning");
    let sealed = reasoning["encrypted_content"].as_str().unwrap().to_string();
    assert!(sealed.starts_with("sy1."), "{reasoning}");
    assert!(!sealed.contains("weather"), "sealed, not plain");
    // The client keeps the blob only (as a client of OpenAI, which shows no raw reasoning).
    reasoning.as_object_mut().unwrap().remove("content");
    reasoning["encrypted_content"] = json!(blob.unwrap_or(&sealed));
    let input = json!([user, reasoning, output[1],
                       {"type": "function_call_output", "call_id": "call_w", "output": "Sunny"}]);
    let second = app
        .stream(
            &json!({"model": "qwen3-8b", "input": input, "tools": tools, "store": false,
                        "include": ["reasoning.encrypted_content"]}),
        )
        .await;
    assert_eq!(second.last().data["response"]["status"], "completed");
    let sent = app.llm.requests()[1]["messages"][1].clone();
    (app, sent)
}

#[tokio::test]
async fn sealed_reasoning_given_back_by_the_client_is_opened_and_sent_back_to_the_model() {
    let (_app, assistant) = replayed_with(None).await;
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["reasoning"], "Need the weather. Then act.",
        "{assistant}"
    );
}

#[tokio::test]
async fn a_sealed_blob_that_does_not_open_is_dropped_and_the_run_goes_on() {
    for blob in ["sy1.AAAAbroken", "gAAAAABo_an_openai_blob"] {
        let (_app, assistant) = replayed_with(Some(blob)).await;
        assert_eq!(assistant["role"], "assistant");
        assert!(assistant.get("reasoning").is_none(), "{assistant}");
    }
}

/// A Gemini 3 exchange whose history the client replays: the first request pauses on a
/// signed client call; the second gives its output back with the history as `keep` leaves it.
/// Returns the second request's status and body, and the assistant message sent upstream.
async fn gemini_replay(profile: Profile, keep: fn(&Value) -> bool) -> (u16, Value, Value) {
    let llm = FakeLlm::start_as(Persona::Gemini).await.unwrap();
    llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    llm.push(Turn::text("Sunny."));
    let addr = llm.addr();
    let app = TestApp::builder()
        .config(move |c| {
            provider_for(c, profile, addr);
            c.llm.provider.models = vec!["gemini-3-flash-preview".into()];
        })
        .upstream(llm)
        .start()
        .await;
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let user = json!({"type": "message", "role": "user", "content": "Weather in Paris?"});
    let first = app
        .stream(&json!({"model": "gemini-3-flash-preview", "input": [user], "tools": tools}))
        .await;
    let output = first.last().data["response"]["output"].clone();
    let kinds: Vec<&str> = output
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "function_call"], "{output}");
    let signature = output[0]["encrypted_content"].as_str().unwrap();
    assert!(signature.starts_with("op1."), "{signature}");
    let mut input = vec![user];
    input.extend(
        output
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| keep(i))
            .cloned(),
    );
    input.push(json!({"type": "function_call_output", "call_id": "call_w", "output": "Sunny"}));
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gemini-3-flash-preview", "input": input, "tools": tools}),
        )
        .await;
    let requests = app.llm.requests();
    let sent = requests.last().unwrap()["messages"][1].clone();
    (status, body, sent)
}

#[tokio::test]
async fn a_gemini_call_signature_is_a_reasoning_item_that_goes_back_with_its_call() {
    let signed = Persona::Gemini.call_signature("gemini-3-flash-preview", true, "get_weather");
    let (status, body, sent) = gemini_replay(Profile::Gemini, |_| true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["content"][0]["text"], "Sunny.");
    assert_eq!(
        sent["tool_calls"][0]["extra_content"]["google"]["thought_signature"].as_str(),
        signed.as_deref(),
        "{sent}"
    );
}

#[tokio::test]
async fn a_replayed_gemini_call_without_its_signature_gets_googles_stand_in() {
    let call_only = |item: &Value| item["type"] != "reasoning";
    let (status, body, sent) = gemini_replay(Profile::Gemini, call_only).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sent["tool_calls"][0]["extra_content"]["google"]["thought_signature"],
        "skip_thought_signature_validator",
        "{sent}"
    );
    // A server not known to require them is not sent one: Gemini's refusal reaches the client.
    let (status, body, _) = gemini_replay(Profile::Generic, call_only).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("): Function call is missing a thought_signature"),
        "{message}"
    );
}
