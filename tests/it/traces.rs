//! Traces over OTLP, through the real binary: a collector in the test decodes the protobuf
//! messages the service sends (`opentelemetry-proto`'s definitions) and reads the spans.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::support::{Binary, ConfigFile, FakeLlm, Turn};

/// What the collector and the tool server saw.
#[derive(Default)]
struct Seen {
    spans: Vec<Span>,
    service_names: Vec<String>,
    /// Every export's `x-collector-key` header.
    keys: Vec<String>,
    /// The `traceparent` of each call the tool server got.
    tool_traceparents: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

async fn collect(
    axum::extract::State(seen): axum::extract::State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(header("content-type"), "application/x-protobuf");
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let mut seen = seen.lock().unwrap();
    seen.keys.push(header("x-collector-key"));
    for resource in request.resource_spans {
        let name = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| a.value.as_ref()?.value.clone());
        if let Some(Any::StringValue(name)) = name {
            seen.service_names.push(name);
        }
        for scope in resource.scope_spans {
            seen.spans.extend(scope.spans);
        }
    }
    ""
}

async fn stamp(
    axum::extract::State(seen): axum::extract::State<Shared>,
    headers: HeaderMap,
) -> String {
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    seen.lock().unwrap().tool_traceparents.push(traceparent);
    "stamped".into()
}

/// A collector (`POST /v1/traces`) and an HTTP tool server (`POST /stamp`) on one port, and
/// what they see.
async fn collector_and_tool_server() -> (Shared, u16) {
    let seen: Shared = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(collect))
        .route("/stamp", axum::routing::post(stamp))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (seen, port)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attributes, as text.
fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|a| {
            let value = match a.value.as_ref().and_then(|v| v.value.clone()) {
                Some(Any::StringValue(s)) => s,
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::ArrayValue(array)) => format!(
                    "{:?}",
                    array
                        .values
                        .iter()
                        .filter_map(|v| match &v.value {
                            Some(Any::StringValue(s)) => Some(s.clone()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                ),
                other => format!("{other:?}"),
            };
            (a.key.clone(), value)
        })
        .collect()
}

#[tokio::test]
async fn a_run_is_traced_in_the_clients_trace_with_its_turns_and_tool_calls_and_the_trace_goes_on_at_the_tool_server()
 {
    let (seen, port) = collector_and_tool_server().await;

    // An MCP server over streamable HTTP (the official Python SDK), which records the
    // `traceparent` of its call's `_meta`.
    let dir = tempfile::tempdir().unwrap();
    let (_mcp, mcp_url) = crate::mcp::counter_over_http(dir.path()).await;

    let llm = FakeLlm::start().await.unwrap();
    llm.push(Turn::tool_calls(&[
        ("call_1", "stamp", "{}"),
        ("call_2", "record_traceparent", "{}"),
    ]));
    llm.push(Turn::text("done"));
    let file = ConfigFile::new(&format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n\
         otlp_headers = {{ \"x-collector-key\" = \"${{COLLECTOR_KEY}}\" }}\n\
         service_name = \"switchyard-test\"\n\
         [[tool_servers.stamps.tools]]\nname = \"stamp\"\nparameters = {{ type = \"object\" }}\n\
         url = \"http://127.0.0.1:{port}/stamp\"\nread_only = true\n\
         [mcp_servers.counter]\nurl = \"{mcp_url}\"\nread_only_tools = [\"record_traceparent\"]\n"
    ));
    let mut instance = Binary::new()
        .upstream(&llm)
        .config_file(&file.path)
        .env("COLLECTOR_KEY", "secret-of-the-collector")
        .spawn();
    // Ready once the MCP server has listed its tools.
    let client = reqwest::Client::new();
    for _ in 0..600 {
        let ready = client.get(instance.url("/readyz")).send().await.unwrap();
        if ready.status() == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let reply = reqwest::Client::new()
        .post(instance.url("/v1/responses"))
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .json(&json!({
            "model": "gpt-4o-mini",
            "input": "stamp it",
            "tools": [
                {"type": "mcp", "server_label": "stamps"},
                {"type": "mcp", "server_label": "counter"},
            ],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    // The log lines stay as they are without traces: what only traces read is not on them.
    let access = instance
        .logs
        .wait_for(|l| l.contains("switchyard::access") && l.contains("route=\"/v1/responses\""))
        .await;
    assert!(
        !access.contains("otel.") && !access.contains("http."),
        "{access}"
    );
    assert!(access.contains("tenant=\"default\""), "{access}");

    // The last spans are sent when the service stops.
    instance.terminate();
    instance.exited(Duration::from_secs(30)).await.unwrap();

    let seen = seen.lock().unwrap();
    assert!(!seen.spans.is_empty(), "no span was received");
    assert!(
        seen.keys.iter().all(|k| k == "secret-of-the-collector"),
        "{:?}",
        seen.keys
    );
    assert!(seen.service_names.iter().all(|n| n == "switchyard-test"));
    for span in &seen.spans {
        eprintln!(
            "span {:?} kind={} id={} parent={} {:?}",
            span.name,
            span.kind,
            hex(&span.span_id),
            hex(&span.parent_span_id),
            attributes(span)
        );
    }
    let named = |prefix: &str| -> Vec<&Span> {
        seen.spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };
    // One trace, the client's.
    assert!(
        seen.spans.iter().all(|s| hex(&s.trace_id) == trace_id),
        "every span is in the client's trace"
    );
    let request = named("POST /v1/responses");
    assert_eq!(request.len(), 1);
    let request = request[0];
    assert_eq!(hex(&request.parent_span_id), parent_id);
    assert_eq!(request.kind, 2, "SERVER");
    let attrs = attributes(request);
    assert_eq!(attrs["http.request.method"], "POST");
    assert_eq!(attrs["http.route"], "/v1/responses");
    assert_eq!(attrs["http.response.status_code"], "200");

    let run = named("invoke_agent");
    assert_eq!(run.len(), 1);
    let run = run[0];
    assert_eq!(
        run.parent_span_id, request.span_id,
        "the run is the request's"
    );
    assert_eq!(attributes(run)["response_id"], body["id"].as_str().unwrap());

    // Two model turns, each a CLIENT span under the run with the GenAI attributes.
    let turns = named("chat gpt-4o-mini");
    assert_eq!(turns.len(), 2);
    for turn in &turns {
        assert_eq!(turn.parent_span_id, run.span_id);
        assert_eq!(turn.kind, 3, "CLIENT");
        let attrs = attributes(turn);
        assert_eq!(attrs["gen_ai.operation.name"], "chat");
        assert_eq!(attrs["gen_ai.request.model"], "gpt-4o-mini");
        assert!(attrs.contains_key("gen_ai.usage.input_tokens"), "{attrs:?}");
        assert!(
            attrs.contains_key("gen_ai.usage.output_tokens"),
            "{attrs:?}"
        );
    }
    let reasons: Vec<String> = turns
        .iter()
        .map(|t| attributes(t)["gen_ai.response.finish_reasons"].clone())
        .collect();
    assert!(
        reasons.contains(&r#"["tool_calls"]"#.to_string()),
        "{reasons:?}"
    );
    assert!(reasons.contains(&r#"["stop"]"#.to_string()), "{reasons:?}");

    // Each tool call: its span under the turn that made it (calls start while the model still
    // streams), and its trace went on at the tool server and at the MCP server.
    let calling = turns
        .iter()
        .find(|t| attributes(t)["gen_ai.response.finish_reasons"] == r#"["tool_calls"]"#)
        .unwrap();
    let mcp_call = named("execute_tool record_traceparent");
    assert_eq!(mcp_call.len(), 1);
    assert_eq!(mcp_call[0].parent_span_id, calling.span_id);
    assert_eq!(attributes(mcp_call[0])["gen_ai.tool.call.id"], "call_2");
    let recorded = std::fs::read_to_string(dir.path().join("traceparent")).unwrap();
    assert_eq!(
        recorded,
        format!("00-{trace_id}-{}-01", hex(&mcp_call[0].span_id)),
        "the MCP server got the call's span in _meta"
    );
    let tool = named("execute_tool stamp");
    assert_eq!(tool.len(), 1);
    let tool = tool[0];
    assert_eq!(tool.parent_span_id, calling.span_id);
    let attrs = attributes(tool);
    assert_eq!(attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attrs["gen_ai.tool.name"], "stamp");
    assert_eq!(attrs["gen_ai.tool.call.id"], "call_1");
    assert_eq!(
        seen.tool_traceparents,
        [format!("00-{trace_id}-{}-01", hex(&tool.span_id))]
    );
}

#[tokio::test]
async fn without_a_collector_configured_nothing_is_sent_and_no_traceparent_goes_to_tools() {
    let (seen, port) = collector_and_tool_server().await;
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Turn::tool_call("call_1", "stamp", "{}"));
    llm.push(Turn::text("done"));
    let file = ConfigFile::new(&format!(
        "[[tool_servers.stamps.tools]]\nname = \"stamp\"\nparameters = {{ type = \"object\" }}\n\
         url = \"http://127.0.0.1:{port}/stamp\"\nread_only = true\n"
    ));
    let mut instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    let reply = reqwest::Client::new()
        .post(instance.url("/v1/responses"))
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&json!({
            "model": "gpt-4o-mini",
            "input": "stamp it",
            "tools": [{"type": "mcp", "server_label": "stamps"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    instance.terminate();
    instance.exited(Duration::from_secs(30)).await.unwrap();
    let seen = seen.lock().unwrap();
    assert!(seen.spans.is_empty());
    assert_eq!(seen.tool_traceparents, [String::new()]);
}

#[tokio::test]
async fn at_a_sample_ratio_of_zero_a_run_without_a_clients_trace_is_not_sent() {
    let (seen, port) = collector_and_tool_server().await;
    let llm = FakeLlm::start().await.unwrap();
    let file = ConfigFile::new(&format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nsample_ratio = 0.0\n"
    ));
    let mut instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    let client = reqwest::Client::new();
    let run = |traceparent: Option<&str>| {
        let mut request = client
            .post(instance.url("/v1/responses"))
            .json(&json!({"model": "gpt-4o-mini", "input": "hi"}));
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.send()
    };
    assert_eq!(run(None).await.unwrap().status(), 200);
    // A client's sampled flag is followed whatever the ratio.
    let sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    assert_eq!(run(Some(sampled)).await.unwrap().status(), 200);
    instance.terminate();
    instance.exited(Duration::from_secs(30)).await.unwrap();
    let seen = seen.lock().unwrap();
    assert!(!seen.spans.is_empty());
    assert!(
        seen.spans
            .iter()
            .all(|s| hex(&s.trace_id) == "0af7651916cd43dd8448eb211c80319c"),
        "only the client's sampled trace was sent"
    );
}
