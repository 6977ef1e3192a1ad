//! A scripted OpenAI-compatible chat-completions server.
//!
//! Tests queue [`Turn`]s; each `POST /v1/chat/completions` consumes one and replays its
//! [`Step`]s as real streaming chunks (`data: {...}` lines, then `data: [DONE]`). Every request
//! body is recorded so tests can assert what the service sent upstream. With an empty queue it
//! echoes the last user message, which keeps manual runs and benchmarks simple.
//!
//! The same server runs in-process (`FakeLlm::start`) for Rust tests and as the `fake-llm`
//! binary for the client-compatibility suite, driven there through `/control/*`. As a
//! [`Persona`] it plays one provider: reasoning where that provider streams it, and the
//! refusals that provider documents.

mod persona;
mod text_tools;

pub use persona::{Persona, ReasoningForm, Seen};
pub use text_tools::ToolText;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One scripted reply to one chat-completions request.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Turn {
    pub steps: Vec<Step>,
}

/// One thing the fake upstream does while answering.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Step {
    /// Reply with this HTTP status and JSON body instead of a stream (must come first). A
    /// string body is sent as it is, as text (HTML when it starts with `<`), as servers and
    /// proxies answer a path they do not serve.
    Status {
        status: u16,
        body: Value,
        /// A `Retry-After` header, in seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    },
    /// Wait before the next step (before the response headers when it comes first).
    Delay { ms: u64 },
    /// One chunk carrying a content delta.
    Text { text: String },
    /// One chunk carrying a reasoning delta, where the persona streams reasoning
    /// (`delta.reasoning_content`, `delta.reasoning`, or `<think>` in the content).
    Reasoning { text: String },
    /// The first chunk of a tool call: its id, name and the start of its arguments.
    ToolCall {
        index: u32,
        id: String,
        name: String,
        #[serde(default)]
        arguments: String,
    },
    /// A further chunk of a tool call's arguments.
    ToolArgs { index: u32, arguments: String },
    /// A chunk with `finish_reason` set.
    Finish { reason: String },
    /// The usage chunk (`choices: []`), as sent with `stream_options.include_usage`.
    Usage {
        prompt_tokens: u64,
        completion_tokens: u64,
        #[serde(default)]
        cached_tokens: u64,
        #[serde(default)]
        reasoning_tokens: u64,
    },
    /// Drop the connection here, without `[DONE]`.
    Cut,
    /// Stop sending but keep the connection open until the client goes away.
    Hang,
}

impl Turn {
    /// A text answer streamed as one delta per word, with `stop` and usage.
    pub fn text(text: &str) -> Turn {
        let mut steps: Vec<Step> = split_words(text)
            .into_iter()
            .map(|word| Step::Text { text: word })
            .collect();
        steps.push(Step::Finish {
            reason: "stop".into(),
        });
        steps.push(Step::Usage {
            prompt_tokens: 10,
            completion_tokens: steps.len() as u64 - 1,
            cached_tokens: 0,
            reasoning_tokens: 0,
        });
        Turn { steps }
    }

    /// An HTTP error reply.
    pub fn error(status: u16, message: &str) -> Turn {
        Turn {
            steps: vec![Step::Status {
                status,
                body: json!({"error": {"message": message, "type": "server_error", "code": null}}),
                retry_after: None,
            }],
        }
    }

    /// One tool call with the given arguments, then `tool_calls`.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Turn {
        Turn::tool_calls(&[(id, name, arguments)])
    }

    /// Several tool calls in one turn, each argument string sent in two chunks.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Turn {
        let mut steps = Vec::new();
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            let split = arguments.len() / 2;
            let split = (0..=split)
                .rev()
                .find(|i| arguments.is_char_boundary(*i))
                .unwrap_or(0);
            steps.push(Step::ToolCall {
                index: index as u32,
                id: (*id).into(),
                name: (*name).into(),
                arguments: arguments[..split].into(),
            });
            steps.push(Step::ToolArgs {
                index: index as u32,
                arguments: arguments[split..].into(),
            });
        }
        steps.push(Step::Finish {
            reason: "tool_calls".into(),
        });
        steps.push(Step::Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_tokens: 0,
            reasoning_tokens: 0,
        });
        Turn { steps }
    }

    /// Prepends a delay before anything is sent.
    pub fn delayed(mut self, ms: u64) -> Turn {
        self.steps.insert(0, Step::Delay { ms });
        self
    }

    /// Sets a delay between consecutive chunks.
    pub fn paced(self, ms: u64) -> Turn {
        let mut steps = Vec::with_capacity(self.steps.len() * 2);
        for step in self.steps {
            if !steps.is_empty() {
                steps.push(Step::Delay { ms });
            }
            steps.push(step);
        }
        Turn { steps }
    }
}

fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        if ch == ' ' && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        current.push(ch);
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

#[derive(Default)]
struct Script {
    turns: VecDeque<Turn>,
    requests: Vec<Value>,
    versions: Vec<String>,
    seen: Vec<Seen>,
}

#[derive(Clone, Default)]
struct Shared {
    script: Arc<Mutex<Script>>,
    /// The answer when nothing is queued; `None` echoes the last user message.
    default: Option<Arc<Turn>>,
    /// Tool-call turns before the default answer.
    tool_turns: usize,
    /// See [`Synthetic::call_tools`].
    call_tools: bool,
    persona: Persona,
    /// Calls written in the text, `tools` refused (a model without function calling).
    tool_text: Option<ToolText>,
}

/// A synthetic default answer for benchmarks: `deltas` text chunks, the first after
/// `first_token_ms`, the others `inter_token_ms` apart, then `stop` and usage.
#[derive(Clone, Copy, Debug, Default)]
pub struct Synthetic {
    pub deltas: usize,
    pub first_token_ms: u64,
    pub inter_token_ms: u64,
    /// Before answering a request that offers tools, this many turns each call the first
    /// offered tool twice with `{"timezone": "UTC"}` (the `tools` and `pause` benchmark
    /// scenarios); counted from the tool-call turns already in the request.
    pub tool_turns: usize,
    /// An unscripted request that offers tools and ends with a user message calls the
    /// first tool, with arguments made from its schema (for suites whose prompts ask for a
    /// tool call).
    pub call_tools: bool,
}

impl Synthetic {
    pub fn turn(&self) -> Turn {
        let mut steps = Vec::with_capacity(self.deltas * 2 + 3);
        if self.first_token_ms > 0 {
            steps.push(Step::Delay {
                ms: self.first_token_ms,
            });
        }
        for n in 0..self.deltas {
            if n > 0 && self.inter_token_ms > 0 {
                steps.push(Step::Delay {
                    ms: self.inter_token_ms,
                });
            }
            steps.push(Step::Text {
                text: format!("tok{n} "),
            });
        }
        steps.push(Step::Finish {
            reason: "stop".into(),
        });
        steps.push(Step::Usage {
            prompt_tokens: 10,
            completion_tokens: self.deltas as u64,
            cached_tokens: 0,
            reasoning_tokens: 0,
        });
        Turn { steps }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        // A panicking test thread must not poison the script for everyone else.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake upstream; dropping it stops the server.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Shared,
    /// Dropped with the fake: the server stops accepting and closes its connections.
    _shutdown: tokio::sync::watch::Sender<()>,
}

impl FakeLlm {
    /// Starts on `127.0.0.1:0`.
    pub async fn start() -> std::io::Result<FakeLlm> {
        FakeLlm::start_on("127.0.0.1:0").await
    }

    /// Starts on `127.0.0.1:0`, playing `persona`.
    pub async fn start_as(persona: Persona) -> std::io::Result<FakeLlm> {
        FakeLlm::listen("127.0.0.1:0", persona, None).await
    }

    /// Starts on the given address.
    pub async fn start_on(addr: &str) -> std::io::Result<FakeLlm> {
        FakeLlm::listen(addr, Persona::Generic, None).await
    }

    /// Starts on `127.0.0.1:0` as a model without function calling that writes its calls in
    /// `syntax`, behind a server that refuses `tools`.
    pub async fn start_writing_calls(syntax: ToolText) -> std::io::Result<FakeLlm> {
        FakeLlm::listen("127.0.0.1:0", Persona::Generic, Some(syntax)).await
    }

    async fn listen(
        addr: &str,
        persona: Persona,
        tool_text: Option<ToolText>,
    ) -> std::io::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared {
            persona,
            tool_text,
            ..Shared::default()
        };
        let app = router(shared.clone());
        let (tx, rx) = tokio::sync::watch::channel(());
        tokio::spawn(accept_loop(listener, app, rx));
        Ok(FakeLlm {
            addr,
            shared,
            _shutdown: tx,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure as the provider's `base_url` (ends in `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues one turn.
    pub fn push(&self, turn: Turn) {
        self.shared.lock().turns.push_back(turn);
    }

    /// The request bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.lock().requests.clone()
    }

    /// The HTTP version of each request received so far (`HTTP/1.1`, `HTTP/2.0`), in order.
    pub fn http_versions(&self) -> Vec<String> {
        self.shared.lock().versions.clone()
    }

    /// What was seen of each request besides its body (path, query, credentials), in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.lock().seen.clone()
    }

    /// How many turns are still queued.
    pub fn pending(&self) -> usize {
        self.shared.lock().turns.len()
    }
}

/// The fake's router: chat completions, models and the control API.
fn router(shared: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        // Azure OpenAI's deployment and v1 URLs, served by the `azure` persona.
        .route(
            "/openai/deployments/{deployment}/chat/completions",
            post(chat_completions),
        )
        .route("/openai/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/tool", post(tool))
        .route("/control/turns", post(push_turns))
        .route("/control/requests", get(list_requests))
        .route("/control/reset", post(reset))
        .with_state(shared)
}

/// Serves forever on `addr` as `persona`, printing `listening on http://ADDR` once bound.
pub async fn serve(
    addr: &str,
    synthetic: Option<Synthetic>,
    persona: Persona,
    tool_text: Option<ToolText>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let shared = Shared {
        // Without `--deltas` an unscripted request is echoed.
        default: synthetic
            .filter(|s| s.deltas > 0)
            .map(|s| Arc::new(s.turn())),
        tool_turns: synthetic.map_or(0, |s| s.tool_turns),
        call_tools: synthetic.is_some_and(|s| s.call_tools),
        persona,
        tool_text,
        ..Shared::default()
    };
    let (_running, shutdown) = tokio::sync::watch::channel(());
    accept_loop(listener, router(shared), shutdown).await;
    Ok(())
}

/// Serves connections from `listener` until `shutdown`'s sender is dropped, then closes them:
/// HTTP/1.1 and HTTP/2 without TLS (prior knowledge), with no limit on concurrent HTTP/2
/// streams, so a client can hold thousands of slow streams on one connection.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    mut shutdown: tokio::sync::watch::Receiver<()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;

    let service = TowerToHyperService::new(app);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(None);
    let builder = Arc::new(builder);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (builder, service) = (builder.clone(), service.clone());
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = builder.serve_connection(TokioIo::new(tcp), service) => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}

async fn models() -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "fake"}]}),
    )
}

/// A tool endpoint for HTTP tool servers in benchmarks: answers every call at once.
async fn tool() -> Json<Value> {
    Json(json!({"time": "2026-01-01T00:00:00Z"}))
}

async fn push_turns(State(shared): State<Shared>, Json(turns): Json<Vec<Turn>>) -> StatusCode {
    shared.lock().turns.extend(turns);
    StatusCode::NO_CONTENT
}

async fn list_requests(State(shared): State<Shared>) -> Json<Vec<Value>> {
    Json(shared.lock().requests.clone())
}

async fn reset(State(shared): State<Shared>) -> StatusCode {
    let mut script = shared.lock();
    script.turns.clear();
    script.requests.clear();
    script.versions.clear();
    script.seen.clear();
    StatusCode::NO_CONTENT
}

async fn chat_completions(
    State(shared): State<Shared>,
    version: axum::http::Version,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = Seen {
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        authorization: header("authorization"),
        api_key: header("api-key"),
    };
    if !shared.persona.serves(&seen.path) {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    }
    let refusal = match shared.tool_text {
        Some(syntax) => syntax.refusal(&request),
        None => shared.persona.refusal(&request, &seen),
    };
    let turn = {
        let mut script = shared.lock();
        // A benchmark's synthetic upstream answers millions of requests: it keeps none.
        if shared.default.is_none() {
            script.requests.push(request.clone());
            script.versions.push(format!("{version:?}"));
            script.seen.push(seen);
        }
        // A refused request leaves the script as it is.
        match refusal {
            Some(_) => None,
            None => script.turns.pop_front(),
        }
    };
    if let Some((status, body)) = refusal {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        return (status, Json(body)).into_response();
    }
    let turn = turn.unwrap_or_else(|| {
        // Only a request that offers tools gets tool calls: one fake serves both scenarios.
        let done = tool_call_turns(&request);
        if shared.call_tools
            && last_role(&request) == Some("user")
            && let Some((name, arguments)) = first_tool_call(&request)
        {
            return Turn::tool_call(
                &format!("call_{}", request_count(&shared)),
                &name,
                &arguments,
            );
        }
        if let Some(tool) = first_tool_name(&request).filter(|_| done < shared.tool_turns) {
            let (a, b) = (format!("call_{done}_a"), format!("call_{done}_b"));
            let arguments = r#"{"timezone": "UTC"}"#;
            return Turn::tool_calls(&[(&a, &tool, arguments), (&b, &tool, arguments)]);
        }
        match &shared.default {
            Some(turn) => Turn::clone(turn),
            None => Turn::text(&format!("Echo: {}", last_user_text(&request))),
        }
    });
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake")
        .to_string();

    let mut steps: VecDeque<Step> = turn.steps.into();
    // Leading delays hold back the headers: that is how a slow first byte looks.
    while let Some(Step::Delay { ms }) = steps.front() {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
        steps.pop_front();
    }
    if let Some(Step::Status {
        status,
        body,
        retry_after,
    }) = steps.front()
    {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = match body {
            Value::String(text) => {
                let html = text.starts_with('<');
                let kind = if html { "text/html" } else { "text/plain" };
                (status, [(header::CONTENT_TYPE, kind)], text.clone()).into_response()
            }
            _ => (status, Json(body.clone())).into_response(),
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, (*seconds).into());
        }
        return response;
    }

    if let Some(syntax) = shared.tool_text {
        steps = written_calls(steps, syntax);
    }
    let stream = async_stream(steps, model, shared.persona);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The name of the first function the request offers.
/// The role of the request's last message.
fn last_role(request: &Value) -> Option<&str> {
    request
        .get("messages")?
        .as_array()?
        .last()?
        .get("role")?
        .as_str()
}

/// How many requests the fake has answered (a distinct call id for each).
fn request_count(shared: &Shared) -> usize {
    shared.lock().requests.len()
}

/// The first offered tool, with arguments made from its parameter schema: each required
/// property gets a value of its type (the first of an `enum`).
fn first_tool_call(request: &Value) -> Option<(String, String)> {
    let function = request.get("tools")?.as_array()?.first()?.get("function")?;
    let name = function.get("name")?.as_str()?.to_string();
    let schema = function.get("parameters").cloned().unwrap_or(Value::Null);
    Some((name, example_of(&schema).to_string()))
}

fn example_of(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => json!("example"),
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        _ => {
            let mut object = serde_json::Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            let required = schema.get("required").and_then(Value::as_array);
            for name in required.into_iter().flatten().filter_map(Value::as_str) {
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                object.insert(name.to_string(), example_of(property));
            }
            Value::Object(object)
        }
    }
}

fn first_tool_name(request: &Value) -> Option<String> {
    let tools = request.get("tools")?.as_array()?;
    let name = tools.first()?.pointer("/function/name")?.as_str()?;
    Some(name.to_string())
}

/// How many assistant turns with tool calls the conversation already has.
fn tool_call_turns(request: &Value) -> usize {
    request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |messages| {
            messages
                .iter()
                .filter(|m| m.get("tool_calls").is_some_and(|c| !c.is_null()))
                .count()
        })
}

fn last_user_text(request: &Value) -> String {
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(user) = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return String::new();
    };
    match user.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The steps with their tool calls written into the text in `syntax`: each call's chunks become
/// text chunks once the call is complete, and `tool_calls` becomes `stop`. In JSON the whole
/// reply is an envelope: `{"response": "…"}` around the text, or `{"tool_calls": […]}`.
fn written_calls(steps: VecDeque<Step>, syntax: ToolText) -> VecDeque<Step> {
    let mut out = VecDeque::new();
    // Calls being streamed: (index, name, arguments).
    let mut calls: Vec<(u32, String, String)> = Vec::new();
    let mut written: Vec<String> = Vec::new();
    let mut texts = 0;
    let flush = |calls: &mut Vec<(u32, String, String)>,
                 out: &mut VecDeque<Step>,
                 written: &mut Vec<String>| {
        for (_, name, arguments) in calls.drain(..) {
            let call = syntax.call(&name, &arguments);
            match syntax {
                ToolText::Json => written.push(call),
                _ => out.extend(
                    text_tools::pieces(&call, 7)
                        .into_iter()
                        .map(|text| Step::Text { text }),
                ),
            }
        }
    };
    for step in steps {
        match step {
            Step::ToolCall {
                index,
                name,
                arguments,
                ..
            } => calls.push((index, name, arguments)),
            Step::ToolArgs { index, arguments } => {
                if let Some(call) = calls.iter_mut().find(|c| c.0 == index) {
                    call.2.push_str(&arguments);
                }
            }
            Step::Text { text } if syntax == ToolText::Json => {
                let escaped = serde_json::to_string(&text).unwrap_or_default();
                let inner = &escaped[1..escaped.len() - 1];
                let text = match texts {
                    0 => format!("{{\"response\": \"{inner}"),
                    _ => inner.to_string(),
                };
                texts += 1;
                out.push_back(Step::Text { text });
            }
            Step::Finish { reason } => {
                flush(&mut calls, &mut out, &mut written);
                if texts > 0 {
                    out.push_back(Step::Text { text: "\"}".into() });
                    texts = 0;
                }
                if !written.is_empty() {
                    let envelope = format!("{{\"tool_calls\": [{}]}}", written.join(", "));
                    out.extend(
                        text_tools::pieces(&envelope, 7)
                            .into_iter()
                            .map(|text| Step::Text { text }),
                    );
                    written.clear();
                }
                let reason = if reason == "tool_calls" {
                    "stop".to_string()
                } else {
                    reason
                };
                out.push_back(Step::Finish { reason });
            }
            other => {
                flush(&mut calls, &mut out, &mut written);
                out.push_back(other);
            }
        }
    }
    out
}

/// Replays steps as SSE chunks. A `Cut` ends the body with an error, which hyper turns into
/// an aborted connection; a `Hang` never ends.
fn async_stream(
    steps: VecDeque<Step>,
    model: String,
    persona: Persona,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let reasoning = persona.reasoning();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({
                "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
        };
        let mut first = true;
        let mut first_call = true;
        // Inside a `<think>` block (ReasoningForm::ThinkTags).
        let mut thinking = false;
        // The reasoning block streamed so far, which OpenRouter signs when it ends.
        let mut block = String::new();
        for step in steps {
            if !block.is_empty() && !matches!(step, Step::Reasoning { .. } | Step::Delay { .. }) {
                let signature = persona.block_signature(&std::mem::take(&mut block));
                let detail = json!([{"type": "reasoning.text", "signature": signature,
                                     "format": "anthropic-claude-v1", "index": 0}]);
                let data = chunk(json!({"reasoning_details": detail}), None);
                if tx
                    .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if thinking && !matches!(step, Step::Reasoning { .. } | Step::Delay { .. }) {
                thinking = false;
                let close = match step {
                    Step::Text { .. } => None,
                    _ => Some(chunk(json!({"content": "</think>\n\n"}), None)),
                };
                if let Some(data) = close
                    && tx
                        .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                        .await
                        .is_err()
                {
                    return;
                }
                if let Step::Text { text } = &step {
                    let data = chunk(json!({"content": format!("</think>\n\n{text}")}), None);
                    if tx
                        .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
            }
            let data = match step {
                Step::Delay { ms } => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    continue;
                }
                Step::Status { .. } => continue,
                Step::Text { text } => {
                    let mut delta = json!({"content": text});
                    if first {
                        delta["role"] = json!("assistant");
                    }
                    chunk(delta, None)
                }
                Step::Reasoning { text } => match reasoning {
                    ReasoningForm::Field(field) if persona == Persona::Openrouter => {
                        block.push_str(&text);
                        let detail = json!([{"type": "reasoning.text", "text": text,
                                             "format": "anthropic-claude-v1", "index": 0}]);
                        chunk(json!({ field: text, "reasoning_details": detail }), None)
                    }
                    ReasoningForm::Field(field) => chunk(json!({ field: text }), None),
                    ReasoningForm::ThinkTags => {
                        let opening = if thinking { "" } else { "<think>" };
                        thinking = true;
                        chunk(json!({"content": format!("{opening}{text}")}), None)
                    }
                    ReasoningForm::Hidden => continue,
                },
                Step::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                } => {
                    let mut call = json!({"index": index, "id": id, "type": "function",
                        "function": {"name": name, "arguments": arguments}});
                    if let Some(signature) = persona.call_signature(&model, first_call, &name) {
                        call["extra_content"] = json!({"google": {"thought_signature": signature}});
                    }
                    first_call = false;
                    chunk(json!({"tool_calls": [call]}), None)
                }
                Step::ToolArgs { index, arguments } => chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
                    None,
                ),
                Step::Finish { reason } => chunk(json!({}), Some(&reason)),
                Step::Usage {
                    prompt_tokens,
                    completion_tokens,
                    cached_tokens,
                    reasoning_tokens,
                } => json!({
                    "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                        "prompt_tokens_details": {"cached_tokens": cached_tokens},
                        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
                    },
                }),
                Step::Cut => {
                    // Let the chunks already sent leave first: an errored body makes hyper
                    // drop what it still buffers, and a real cut loses nothing already sent.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = tx.send(Err(std::io::Error::other("scripted cut"))).await;
                    return;
                }
                Step::Hang => {
                    tx.closed().await;
                    return;
                }
            };
            first = false;
            if tx
                .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
