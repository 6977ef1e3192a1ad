//! The OpenAI-compatible `/chat/completions` client: maps a [`ModelRequest`] to a streaming
//! chat request and the SSE chunks back to [`ModelEvent`]s.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::opaque::Opaque;
use super::profile::{Dialect, EffortField, Signatures};
use super::sse::SseDecoder;
use super::text_tools::render;
use super::text_tools::{TextCalls, TextProtocol};
use super::think::ThinkSplitter;
use super::{FinishReason, LlmClient, LlmError, ModelEvent, ModelRequest, ModelStream};
use crate::config::{LlmConfig, ReasoningFormat, ResolvedProvider, Secret, SendBack, ToolProtocol};
use crate::protocol::items::{ContentPart, Item, Role};
use crate::protocol::response::{InputTokensDetails, OutputTokensDetails, Usage};
use crate::protocol::transcript::Entry;

/// Model events as a reply's chunks are read into them.
pub type Events = VecDeque<Result<ModelEvent, LlmError>>;

/// How much of an upstream error body is read for its message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub struct ChatCompletionsClient {
    http: reqwest::Client,
    base_url: String,
    /// The URL of every request, unless `base_url` names the `{model}` (Azure deployments);
    /// parsed once (parsing it cost a text run 16,000 instructions, 1.4 %).
    fixed_url: Option<reqwest::Url>,
    dialect: Dialect,
    api_key: Option<Secret>,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
}

impl ChatCompletionsClient {
    pub fn new(provider: &ResolvedProvider, llm: &LlmConfig) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(llm.connect_timeout_ms))
            // Nagle's algorithm would hold each small streamed chunk for a delayed ACK.
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90));
        // Without the choice, TLS would negotiate HTTP/2 whenever the server offers it, and
        // runs past the server's concurrent-stream cap would wait for a free stream.
        let http = if provider.http2 {
            http.http2_prior_knowledge()
        } else {
            http.http1_only()
        };
        let http = http
            .build()
            .map_err(|e| LlmError::Connect(format!("cannot build the HTTP client: {e}")))?;
        let dialect = Dialect::for_provider(provider);
        let fixed_url = match provider.base_url.contains("{model}") {
            true => None,
            false => {
                let url = dialect.url(&provider.base_url, "");
                let parsed = reqwest::Url::parse(&url)
                    .map_err(|e| LlmError::Connect(format!("the URL {url} is not valid: {e}")))?;
                Some(parsed)
            }
        };
        Ok(ChatCompletionsClient {
            http,
            base_url: provider.base_url.clone(),
            fixed_url,
            dialect,
            api_key: provider.api_key.clone(),
            first_byte_timeout: Duration::from_millis(llm.first_byte_timeout_ms),
            idle_timeout: Duration::from_millis(llm.idle_timeout_ms),
        })
    }
}

#[async_trait]
impl LlmClient for ChatCompletionsClient {
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, LlmError> {
        let body = chat_request_body(request, &self.dialect);
        let call = match &self.fixed_url {
            Some(url) => self.http.post(url.clone()),
            None => self
                .http
                .post(self.dialect.url(&self.base_url, &request.model)),
        };
        let call = call.json(&body);
        let call = self.dialect.authorize(call, self.api_key.as_ref());
        let response = tokio::time::timeout(self.first_byte_timeout, call.send())
            .await
            .map_err(|_| LlmError::Timeout {
                what: "answer",
                after: self.first_byte_timeout,
            })?
            .map_err(|e| {
                if e.is_timeout() {
                    LlmError::Timeout {
                        what: "accept the connection",
                        after: self.first_byte_timeout,
                    }
                } else {
                    LlmError::Connect(error_chain(&e))
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = read_error_body(response, self.idle_timeout).await;
            return Err(LlmError::Status {
                status: status.as_u16(),
                body: Box::new(body),
                retry_after,
            });
        }
        Ok(Box::pin(decode_chunks(
            response.bytes_stream(),
            self.idle_timeout,
            Reader::of(&self.dialect, request),
        )))
    }
}

/// `reqwest` errors hide their cause; the chain is what an operator needs.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The upstream's error reply, read for at most `timeout` and [`ERROR_BODY_LIMIT`] bytes.
async fn read_error_body(response: reqwest::Response, timeout: Duration) -> super::ErrorBody {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    super::ErrorBody::parse(&body)
}

/// Maps the model-neutral request to a chat-completions body in the provider's dialect.
pub fn chat_request_body(request: &ModelRequest, dialect: &Dialect) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let text_tools = dialect.tool_protocol != ToolProtocol::Native;
    let messages = match text_tools {
        true => text_tool_messages(request, dialect),
        false => chat_messages(request, dialect),
    };
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !request.tools.is_empty() && !text_tools {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let mut function = json!({"name": tool.name, "parameters": tool.parameters});
                if let Some(description) = &tool.description {
                    function["description"] = json!(description);
                }
                if let Some(strict) = tool.strict {
                    function["strict"] = json!(strict);
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(parallel) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), chat_tool_choice(choice));
        }
    }
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.into(), value);
        }
    };
    if !dialect.refuses_sampling(&request.model) {
        put("temperature", request.temperature.map(|v| json!(v)));
        put("top_p", request.top_p.map(|v| json!(v)));
        put(
            "presence_penalty",
            request.presence_penalty.map(|v| json!(v)),
        );
        put(
            "frequency_penalty",
            request.frequency_penalty.map(|v| json!(v)),
        );
    }
    put(
        dialect.token_limit,
        request.max_output_tokens.map(|v| json!(v)),
    );
    let effort = request.reasoning_effort.as_ref();
    match dialect.effort {
        EffortField::ReasoningEffort => put("reasoning_effort", effort.map(|v| json!(v))),
        EffortField::ReasoningObject => put("reasoning", effort.map(|v| json!({"effort": v}))),
    }
    put("user", request.user.as_ref().map(|v| json!(v)));
    let response_format = request.response_format.as_ref().map(chat_response_format);
    // The JSON protocol's envelope, where the client asks for no format of its own.
    let envelope = (dialect.tool_protocol == ToolProtocol::Json && !request.tools.is_empty())
        .then(|| json!({"type": "json_object"}));
    put("response_format", response_format.or(envelope));
    Value::Object(body)
}

/// The messages of a provider whose models write their calls in text (SPEC §15): the history's
/// calls and results in the protocol's syntax, and the tools offered in the system prompt.
fn text_tool_messages(request: &ModelRequest, dialect: &Dialect) -> Vec<Value> {
    let protocol = dialect.tool_protocol;
    let mut messages = render::render_history(protocol, chat_messages(request, dialect));
    if !request.tools.is_empty() {
        let section = render::tools_prompt(
            protocol,
            &request.tools,
            request.tool_choice.as_ref(),
            request.parallel_tool_calls,
        );
        match messages.first_mut() {
            Some(first) if first["role"] == "system" => {
                let instructions = first["content"].as_str().unwrap_or_default();
                first["content"] = json!(format!("{instructions}\n\n{section}"));
            }
            _ => messages.insert(0, json!({"role": "system", "content": section})),
        }
    }
    messages
}

/// `text.format` → `response_format`.
fn chat_response_format(format: &Value) -> Value {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut schema = json!({"name": format.get("name"), "schema": format.get("schema")});
            if let Some(strict) = format.get("strict") {
                schema["strict"] = strict.clone();
            }
            if let Some(description) = format.get("description") {
                schema["description"] = description.clone();
            }
            json!({"type": "json_schema", "json_schema": schema})
        }
        _ => json!({"type": "json_object"}),
    }
}

/// Responses `tool_choice` → chat `tool_choice`.
fn chat_tool_choice(choice: &Value) -> Value {
    match choice.get("name").and_then(Value::as_str) {
        Some(name) => json!({"type": "function", "function": {"name": name}}),
        None => choice.clone(),
    }
}

/// How a compaction item's summary is introduced to the model.
pub const COMPACTION_PREFIX: &str = "[Summary of the earlier conversation]";

/// Items → chat messages. Consecutive calls (client functions and server calls) become one
/// assistant message with several `tool_calls`, each directly followed by its result, as
/// chat-completions requires; tool listings are not part of the conversation. Reasoning is
/// sent back, on the assistant message it preceded, where the dialect says. Images server
/// calls returned follow their tool messages in one user message, where the dialect says the
/// provider takes images ([`call_images`]).
fn chat_messages(request: &ModelRequest, dialect: &Dialect) -> Vec<Value> {
    let entries = &request.items;
    let items = || entries.iter().filter_map(Entry::item);
    let client_outputs: HashMap<&str, String> = items().filter_map(Item::as_output).collect();
    let client_images: HashMap<&str, Vec<&str>> = items()
        .filter_map(Item::output_images)
        .filter(|(_, urls)| !urls.is_empty())
        .collect();
    // Outputs are placed right after their call, wherever the client put them.
    let called: HashSet<String> = items()
        .filter_map(Item::as_call)
        .map(|(id, _, _)| id)
        .collect();
    let mut messages: Vec<Value> = Vec::with_capacity(entries.len() + 1);
    if let Some(instructions) = &request.instructions {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    let mut reasoning = SentBack::new(dialect, entries);
    let signatures = call_signatures(dialect, entries);
    // A server tool's calls as the model is shown that tool in this request.
    let call_at = |index: usize| {
        let item = entries.get(index).and_then(Entry::item)?;
        let (id, name, arguments) = item.as_call()?;
        let name = match item {
            Item::McpCall(c) if !request.renamed.is_empty() => request
                .renamed
                .get(&(c.server_label.clone(), name))
                .cloned()
                .unwrap_or_else(|| c.name.clone()),
            _ => name,
        };
        Some((id, name, arguments))
    };
    let mut index = 0;
    while index < entries.len() {
        let Entry::Item(item) = &entries[index] else {
            // A turn's end only separates the calls of consecutive turns.
            index += 1;
            continue;
        };
        if item.as_call().is_some() {
            let mut calls = Vec::new();
            let mut results = Vec::new();
            let mut images = Vec::new();
            loop {
                let Some((id, name, arguments)) = call_at(index) else {
                    // Provider state streamed after a call belongs to the calls' message.
                    match entries.get(index).and_then(Entry::item) {
                        Some(Item::Reasoning(r))
                            if r.text().is_empty() && Opaque::of(r).is_some() =>
                        {
                            reasoning.keep(index, r);
                            index += 1;
                            continue;
                        }
                        _ => break,
                    }
                };
                let result = match &entries[index] {
                    Entry::Item(Item::McpCall(c)) => {
                        if dialect.images {
                            images.extend(call_images(&id, &name, c.image_urls()));
                        }
                        Some(c.result_text())
                    }
                    _ => {
                        if dialect.images
                            && let Some(urls) = client_images.get(id.as_str())
                        {
                            images.extend(call_images(&id, &name, urls.clone()));
                        }
                        client_outputs.get(id.as_str()).cloned()
                    }
                };
                let mut call = json!({"id": id, "type": "function",
                                      "function": {"name": name, "arguments": arguments}});
                if let Some(signature) = signatures.get(id.as_str()) {
                    call["extra_content"] = json!({"google": {"thought_signature": signature}});
                }
                calls.push(call);
                results.push((id, result));
                index += 1;
            }
            reasoning.attach(attach_tool_calls(&mut messages, calls));
            for (id, result) in results {
                let content =
                    result.unwrap_or_else(|| "No output was provided for this call.".into());
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            if !images.is_empty() {
                messages.push(json!({"role": "user", "content": images}));
            }
            continue;
        }
        if let Item::Reasoning(item) = item {
            reasoning.keep(index, item);
        } else if let Some(message) = chat_message(item, &called) {
            messages.push(message);
            if let Some(last) = messages.last_mut() {
                reasoning.attach(last);
            }
        }
        index += 1;
    }
    if dialect.signatures == Signatures::Required {
        stand_in_signatures(&mut messages);
    }
    messages
}

/// The signatures of the request's calls, by call id, where the dialect sends them back.
fn call_signatures(dialect: &Dialect, entries: &[Entry]) -> HashMap<String, String> {
    if dialect.signatures == Signatures::Dropped {
        return HashMap::new();
    }
    entries
        .iter()
        .filter_map(Entry::item)
        .filter_map(|item| match item {
            Item::Reasoning(r) => Opaque::of(r),
            _ => None,
        })
        .filter_map(|state| match state {
            Opaque::CallSignature { call_id, signature } => Some((call_id, signature)),
            Opaque::ReasoningDetails(_) => None,
        })
        .collect()
}

/// Gemini refuses a request whose current turn (everything after the last user message) has a
/// step whose first call carries no signature. A history a client replayed without its
/// reasoning items lost them: such a call gets Google's documented stand-in instead.
fn stand_in_signatures(messages: &mut [Value]) {
    let turn = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |i| i + 1);
    for message in &mut messages[turn..] {
        if let Some(first) = message
            .get_mut("tool_calls")
            .and_then(|calls| calls.get_mut(0))
            && first.get("extra_content").is_none()
        {
            tracing::debug!(call = %first["id"], "a call of the current turn has no thought signature; the stand-in is sent");
            first["extra_content"] =
                json!({"google": {"thought_signature": super::opaque::UNKNOWN_SIGNATURE}});
        }
    }
}

/// The content parts that show the model the images a call returned (a server call's, or a
/// client's output): a line naming the call, then each image. Chat completions takes text
/// only in a `tool` message, and images in a `user` message after the turn's tool messages,
/// which every compatible server accepts there; the tool message already holds a placeholder
/// per image. An image of a type chat completions does not take (PNG, JPEG, WEBP and GIF only,
/// per OpenAI's vision guide) is left to its placeholder rather than have the provider refuse
/// the whole request.
fn call_images(call_id: &str, name: &str, urls: Vec<&str>) -> Vec<Value> {
    let urls: Vec<&str> = urls
        .into_iter()
        .filter(|url| model_takes_image(url))
        .collect();
    if urls.is_empty() {
        return Vec::new();
    }
    let text = match urls.len() {
        1 => format!("The image returned by call {call_id} ({name}):"),
        n => format!("The {n} images returned by call {call_id} ({name}):"),
    };
    let mut parts = vec![json!({"type": "text", "text": text})];
    parts.extend(
        urls.into_iter()
            .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
    );
    parts
}

/// Whether chat completions takes the image at `url`: a `data:` URL of one of the types it
/// reads, or a URL it fetches itself.
fn model_takes_image(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("data:") else {
        return true;
    };
    let mime = rest.split([';', ',']).next().unwrap_or_default();
    matches!(
        mime.to_ascii_lowercase().as_str(),
        "image/png" | "image/jpeg" | "image/jpg" | "image/webp" | "image/gif"
    )
}

/// One item that is not a call as a chat message, if the model is shown it.
fn chat_message(item: &Item, called: &HashSet<String>) -> Option<Value> {
    match item {
        Item::Message(message) => {
            let role = match message.role {
                Role::User => "user",
                // `developer` is not understood by every compatible server; `system` is.
                Role::System | Role::Developer => "system",
                Role::Assistant => "assistant",
            };
            Some(json!({"role": role, "content": chat_content(&message.content)}))
        }
        // A user message, which every compatible server accepts anywhere.
        Item::Compaction(compaction) => Some(json!({
            "role": "user",
            "content": format!("{COMPACTION_PREFIX}\n{}", compaction.encrypted_content),
        })),
        other => {
            let (call_id, text) = other.as_output()?;
            // Tool listings and approval items are not part of the conversation.
            (!called.contains(call_id))
                .then(|| json!({"role": "tool", "tool_call_id": call_id, "content": text}))
        }
    }
}

/// Earlier reasoning on its way back to the model: kept from the reasoning items the dialect
/// sends back, put on the assistant message that follows them (the one that called tools,
/// under `SendBack::ToolCalls`), and dropped at the next message of another role. The
/// provider's reasoning blocks ([`Opaque::ReasoningDetails`]) go with it where the dialect
/// takes them back.
struct SentBack {
    mode: SendBack,
    field: &'static str,
    details: bool,
    /// Reasoning items before this index are not sent back (`usize::MAX`: none is).
    from: usize,
    pending: Option<String>,
    pending_details: Vec<Value>,
}

impl SentBack {
    fn new(dialect: &Dialect, entries: &[Entry]) -> SentBack {
        let from = match dialect.send_back {
            SendBack::Never => usize::MAX,
            SendBack::Always | SendBack::ToolCalls => 0,
            SendBack::TurnLoop => entries
                .iter()
                .rposition(|e| e.item().is_some_and(Item::is_user_message))
                .map_or(0, |i| i + 1),
        };
        SentBack {
            mode: dialect.send_back,
            field: dialect.send_back_field,
            details: dialect.reasoning_details,
            from,
            pending: None,
            pending_details: Vec::new(),
        }
    }

    fn keep(&mut self, index: usize, item: &crate::protocol::items::Reasoning) {
        if index < self.from {
            return;
        }
        let text = item.text();
        if !text.is_empty() {
            self.pending.get_or_insert_default().push_str(&text);
        } else if self.details
            && let Some(Opaque::ReasoningDetails(blocks)) = Opaque::of(item)
        {
            self.pending_details.extend(blocks);
        }
    }

    /// A message was added: an assistant message takes the reasoning before it.
    fn attach(&mut self, message: &mut Value) {
        if message["role"] != "assistant" {
            self.pending = None;
            self.pending_details.clear();
            return;
        }
        if self.mode != SendBack::ToolCalls {
            if let Some(text) = self.pending.take() {
                message[self.field] = json!(text);
            }
            if !self.pending_details.is_empty() {
                let blocks = std::mem::take(&mut self.pending_details);
                match message.get_mut("reasoning_details") {
                    Some(Value::Array(have)) => have.extend(blocks),
                    _ => message["reasoning_details"] = Value::Array(blocks),
                }
            }
            return;
        }
        // Its calls may still be merged into it: the reasoning waits for them.
        if message.get("tool_calls").is_some() && message.get(self.field).is_none() {
            message[self.field] = json!(self.pending.take().unwrap_or_default());
        }
    }
}

/// Puts tool calls on the assistant message just before them (its text and its calls are one
/// turn), or on a new one; returns that message.
fn attach_tool_calls(messages: &mut Vec<Value>, calls: Vec<Value>) -> &mut Value {
    let merge = messages
        .last()
        .is_some_and(|last| last["role"] == "assistant" && last.get("tool_calls").is_none());
    if !merge {
        messages.push(json!({"role": "assistant", "content": null}));
    }
    let last = messages.len() - 1;
    messages[last]["tool_calls"] = Value::Array(calls);
    &mut messages[last]
}

/// Text-only content as a string (understood everywhere); otherwise chat content parts.
fn chat_content(parts: &[ContentPart]) -> Value {
    let text_only = parts.iter().all(|p| {
        matches!(
            p,
            ContentPart::InputText { .. }
                | ContentPart::OutputText(_)
                | ContentPart::Refusal { .. }
        )
    });
    if text_only {
        let mut text = String::new();
        for part in parts {
            match part {
                ContentPart::InputText { text: t } => text.push_str(t),
                ContentPart::OutputText(t) => text.push_str(&t.text),
                ContentPart::Refusal { refusal } => text.push_str(refusal),
                _ => {}
            }
        }
        return json!(text);
    }
    let converted: Vec<Value> = parts
        .iter()
        .filter_map(|part| match part {
            ContentPart::InputText { text } => Some(json!({"type": "text", "text": text})),
            ContentPart::OutputText(t) => Some(json!({"type": "text", "text": t.text})),
            ContentPart::Refusal { refusal } => Some(json!({"type": "text", "text": refusal})),
            ContentPart::InputImage {
                image_url, detail, ..
            } => image_url.as_ref().map(
                |url| json!({"type": "image_url", "image_url": {"url": url, "detail": detail}}),
            ),
            ContentPart::InputFile {
                file_data,
                filename,
                ..
            } => file_data.as_ref().map(
                |data| json!({"type": "file", "file": {"file_data": data, "filename": filename}}),
            ),
        })
        .collect();
    Value::Array(converted)
}

/// Decodes the SSE body into model events, enforcing the idle timeout between chunks.
/// A body that ends before any `finish_reason` is a broken stream, not a short answer.
fn decode_chunks(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle_timeout: Duration,
    reader: Reader,
) -> impl Stream<Item = Result<ModelEvent, LlmError>> + Send {
    struct State<S> {
        body: S,
        decoder: SseDecoder,
        pending: VecDeque<Result<ModelEvent, LlmError>>,
        reader: Reader,
        done: bool,
    }
    let state = State {
        body: Box::pin(body),
        decoder: SseDecoder::new(),
        pending: VecDeque::new(),
        reader,
        done: false,
    };
    futures_util::stream::unfold(state, move |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                if event.is_err() {
                    state.done = true;
                }
                return Some((event, state));
            }
            if state.done {
                return None;
            }
            let next = tokio::time::timeout(idle_timeout, state.body.next()).await;
            let payloads = match next {
                Err(_) => {
                    state.pending.push_back(Err(LlmError::Timeout {
                        what: "send the next chunk",
                        after: idle_timeout,
                    }));
                    continue;
                }
                Ok(Some(Ok(bytes))) => state.decoder.feed(&bytes),
                Ok(Some(Err(e))) => {
                    state
                        .pending
                        .push_back(Err(LlmError::Protocol(error_chain(&e))));
                    continue;
                }
                Ok(None) => {
                    state.done = true;
                    let tail: Vec<String> = state.decoder.finish().into_iter().collect();
                    for payload in tail {
                        parse_payload(&payload, &mut state.pending, &mut state.reader);
                    }
                    if !state.reader.finished {
                        state.pending.push_back(Err(LlmError::Protocol(
                            "the stream ended before the model finished".into(),
                        )));
                    }
                    // Drain what is pending, then stop.
                    let event = state.pending.pop_front()?;
                    return Some((event, state));
                }
            };
            for payload in payloads {
                if payload.trim() == "[DONE]" {
                    if !state.reader.finished {
                        state.pending.push_back(Err(LlmError::Protocol(
                            "the stream ended before the model finished".into(),
                        )));
                    }
                    state.done = true;
                    break;
                }
                parse_payload(&payload, &mut state.pending, &mut state.reader);
            }
        }
    })
}

/// A streamed chunk, as much of it as is read: strings borrow from the payload where they
/// can (no escapes in them); `error` and `usage`, at most once a stream, stay generic.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
}

impl<'a> Chunk<'a> {
    /// A chunk of the common shape, read without serde ([`super::chunk`]).
    fn common(common: super::chunk::Common<'a>) -> Chunk<'a> {
        let choice = |choice: super::chunk::Choice<'a>| Choice {
            delta: choice.delta.map(|content| Delta {
                content: Text(content.map(Cow::Borrowed)),
                reasoning_content: Text(None),
                reasoning: Text(None),
                reasoning_details: None,
                tool_calls: None,
            }),
            finish_reason: Text(choice.finish_reason.map(Cow::Borrowed)),
        };
        Chunk {
            error: None,
            choices: common.choices.map(|c| c.into_iter().map(choice).collect()),
            usage: None,
        }
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Text<'a>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Text<'a>,
    #[serde(default, borrow)]
    reasoning_content: Text<'a>,
    #[serde(default, borrow)]
    reasoning: Text<'a>,
    /// OpenRouter's reasoning blocks ([`super::opaque`]).
    #[serde(default)]
    reasoning_details: Option<Value>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallChunk<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallChunk<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Text<'a>,
    #[serde(default, borrow)]
    function: Option<FunctionChunk<'a>>,
    /// Gemini's `{"google": {"thought_signature": …}}` ([`super::opaque`]).
    #[serde(default)]
    extra_content: Option<Value>,
}

#[derive(Deserialize)]
struct FunctionChunk<'a> {
    #[serde(default, borrow)]
    name: Text<'a>,
    #[serde(default, borrow)]
    arguments: Text<'a>,
}

/// A field read only when it is a string: upstreams put other things (null, objects) where
/// they have nothing to say, and those are skipped.
#[derive(Default)]
struct Text<'a>(Option<Cow<'a, str>>);

impl<'a> Text<'a> {
    fn into_string(self) -> Option<String> {
        self.0.map(Cow::into_owned)
    }

    /// The text, when there is some.
    fn non_empty(self) -> Option<String> {
        self.0.filter(|t| !t.is_empty()).map(Cow::into_owned)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> serde::de::Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_unit<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_none<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Text<'de>, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Text<'de>, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Text(None))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

/// Reads one streamed reply's chunks into events, finding its reasoning where the dialect
/// says it is, and its calls in its text where the provider's tool protocol is a text one.
struct Reader {
    /// A finish reason was seen.
    finished: bool,
    format: ReasoningFormat,
    /// Splits `<think>` blocks from the content (`ReasoningFormat::ThinkTags`).
    think: Option<ThinkSplitter>,
    /// Reads calls from the text (a text `tool_protocol`), after `<think>` blocks are split off.
    calls: Option<TextCalls>,
}

impl Reader {
    fn new(format: ReasoningFormat) -> Reader {
        Reader {
            finished: false,
            format,
            think: (format == ReasoningFormat::ThinkTags).then(ThinkSplitter::default),
            calls: None,
        }
    }

    /// The reader of a reply to `request` in the dialect.
    fn of(dialect: &Dialect, request: &ModelRequest) -> Reader {
        let mut reader = Reader::new(dialect.reasoning_format);
        reader.calls = text_protocol(dialect, request).map(|p| TextCalls::new(p, &request.tools));
        reader
    }

    /// A delta's reasoning: `reasoning_content` or `reasoning`, never both (vLLM sent both
    /// while it renamed the field).
    fn reasoning(&self, delta: &mut Delta<'_>, out: &mut Events) {
        if self.format == ReasoningFormat::None {
            return;
        }
        let content = std::mem::take(&mut delta.reasoning_content).non_empty();
        let text = content.or_else(|| std::mem::take(&mut delta.reasoning).non_empty());
        if let Some(text) = text {
            out.push_back(Ok(ModelEvent::ReasoningDelta(text)));
        }
    }

    fn content(&mut self, text: String, out: &mut Events) {
        match (&mut self.think, &mut self.calls) {
            (None, None) => out.push_back(Ok(ModelEvent::TextDelta(text))),
            (Some(splitter), None) => splitter.feed(text, out),
            (think, Some(calls)) => {
                let mut split = Events::new();
                match think {
                    Some(splitter) => splitter.feed(text, &mut split),
                    None => split.push_back(Ok(ModelEvent::TextDelta(text))),
                }
                read_calls(calls, split, out);
            }
        }
    }

    /// The content ended (a call or the finish reason came): what a `<think>` splitter or the
    /// call parser held back is decided.
    fn end_content(&mut self, out: &mut Events) {
        let mut split = Events::new();
        if let Some(splitter) = &mut self.think {
            splitter.finish(&mut split);
        }
        match &mut self.calls {
            Some(calls) => {
                read_calls(calls, split, out);
                calls.finish(out);
            }
            None => out.extend(split),
        }
    }

    /// The reply's finish reason: a reply that wrote calls in its text finished with them.
    fn finish_reason(&self, reason: &str) -> FinishReason {
        match FinishReason::parse(reason) {
            FinishReason::Stop if self.calls.as_ref().is_some_and(TextCalls::called) => {
                FinishReason::ToolCalls
            }
            reason => reason,
        }
    }
}

/// Text deltas through the call parser; other events as they are.
fn read_calls(calls: &mut TextCalls, events: Events, out: &mut Events) {
    for event in events {
        match event {
            Ok(ModelEvent::TextDelta(text)) => calls.feed(&text, out),
            other => out.push_back(other),
        }
    }
}

/// The text protocol calls are read in, for a request that offers tools on a provider with
/// one.
fn text_protocol(dialect: &Dialect, request: &ModelRequest) -> Option<TextProtocol> {
    if request.tools.is_empty() {
        return None;
    }
    match dialect.tool_protocol {
        ToolProtocol::Native => None,
        ToolProtocol::Hermes => Some(TextProtocol::Hermes),
        ToolProtocol::Vcp => Some(TextProtocol::Vcp),
        ToolProtocol::Json => Some(TextProtocol::Json),
    }
}

/// One chunk → events.
fn parse_payload(
    payload: &str,
    out: &mut VecDeque<Result<ModelEvent, LlmError>>,
    reader: &mut Reader,
) {
    let chunk = match super::chunk::read(payload) {
        Some(common) => Chunk::common(common),
        None => match serde_json::from_str(payload) {
            Ok(chunk) => chunk,
            Err(e) => {
                let message = format!("a chunk is not a chat-completions chunk: {e}");
                out.push_back(Err(LlmError::Protocol(message)));
                return;
            }
        },
    };
    if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
        // vLLM and llama.cpp put the HTTP status an error would have had in `code`.
        let status = error.get("code").and_then(Value::as_u64).unwrap_or(502) as u16;
        out.push_back(Err(LlmError::Status {
            status,
            body: Box::new(super::ErrorBody::of_error(&error)),
            retry_after: None,
        }));
        return;
    }
    if let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) {
        if let Some(mut delta) = choice.delta {
            reader.reasoning(&mut delta, out);
            if let Some(Value::Array(details)) = delta.reasoning_details.take()
                && !details.is_empty()
            {
                out.push_back(Ok(ModelEvent::ReasoningDetails(details)));
            }
            if let Some(text) = delta.content.non_empty() {
                reader.content(text, out);
            }
            if delta.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
                reader.end_content(out);
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                let (name, arguments) = match call.function {
                    Some(f) => (f.name.into_string(), f.arguments.into_string()),
                    None => (None, None),
                };
                let signature = call
                    .extra_content
                    .as_ref()
                    .and_then(|extra| extra.pointer("/google/thought_signature"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                out.push_back(Ok(ModelEvent::ToolCallDelta {
                    index: call.index.unwrap_or(position as u32),
                    id: call.id.into_string(),
                    name,
                    arguments: arguments.unwrap_or_default(),
                    signature,
                }));
            }
        }
        if let Some(reason) = choice.finish_reason.0 {
            reader.end_content(out);
            reader.finished = true;
            out.push_back(Ok(ModelEvent::Finish(reader.finish_reason(&reason))));
        }
    }
    if let Some(usage) = chunk.usage.filter(|u| u.is_object()) {
        let number = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        let input = number("/prompt_tokens");
        let output = number("/completion_tokens");
        out.push_back(Ok(ModelEvent::Usage(Usage {
            input_tokens: input,
            input_tokens_details: InputTokensDetails {
                cached_tokens: number("/prompt_tokens_details/cached_tokens"),
                cache_write_tokens: 0,
            },
            output_tokens: output,
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: number("/completion_tokens_details/reasoning_tokens"),
            },
            total_tokens: usage
                .get("total_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(input + output),
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::items::{FunctionCall, FunctionCallOutput, McpCall, Message, ToolOutput};

    /// What `parse_payload` goes on to read of a chunk, to compare the two readers.
    fn read_of(chunk: &Chunk) -> String {
        let text = |t: &Text| format!("{:?}", t.0.as_deref());
        let choice = |c: &Choice| {
            let delta = c.delta.as_ref().map(|d| {
                format!(
                    "content {} reasoning {} {} details {:?} calls {:?}",
                    text(&d.content),
                    text(&d.reasoning_content),
                    text(&d.reasoning),
                    d.reasoning_details,
                    d.tool_calls.as_ref().map(Vec::len),
                )
            });
            format!("delta {delta:?} finish {}", text(&c.finish_reason))
        };
        let choices = chunk
            .choices
            .as_ref()
            .map(|c| c.iter().map(choice).collect::<Vec<_>>());
        format!(
            "{choices:?} error {:?} usage {:?}",
            chunk.error, chunk.usage
        )
    }

    /// The chunk as serde reads it, and as the common shape's reader does when it reads it.
    fn both_readers(payload: &str) -> (Result<String, String>, Option<String>) {
        let serde = serde_json::from_str::<Chunk>(payload)
            .map(|chunk| read_of(&chunk))
            .map_err(|e| e.to_string());
        let common = super::super::chunk::read(payload).map(|c| read_of(&Chunk::common(c)));
        (serde, common)
    }

    #[test]
    fn the_common_shape_of_a_chunk_is_read_without_serde_as_serde_reads_it() {
        let common = [
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"tok0 ","role":"assistant"},"finish_reason":null,"index":0}],"created":0,"id":"chatcmpl-fake","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"id":"x","choices":[]}"#,
            " { \"choices\" : [ { \"delta\" : { \"content\" : \"h\u{e9}llo \u{2713} \u{1f600}\" } , \"finish_reason\" : null } ] ,\n\t\"created\" : -1.5e+3 , \"n\" : 0.25E-2 , \"ok\" : true , \"no\" : false }\r\n",
            r#"{"choices":[{"delta":null,"finish_reason":"length","index":0}],"error":null}"#,
            r#"{"choices":[{"delta":{"content":null},"finish_reason":"tool_calls"}]}"#,
            r#"{}"#,
        ];
        for payload in common {
            let (serde, fast) = both_readers(payload);
            assert_eq!(fast.as_ref(), Some(serde.as_ref().unwrap()), "{payload}");
        }
        // Read by serde: escapes, nested values, what the delta carries besides text, usage, an
        // error, a second choice, a repeated field, and JSON that is not valid.
        let other = [
            r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\u00e9"}}]}"#,
            r#"{"ch\u006fices":[]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"error":{"message":"overloaded","code":503}}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null,"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"},"logprobs":{"content":[]}}]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":[]} x"#,
            r#"{"choices":[{"delta":{"content":"a"}}]"#,
            "{\"choices\":[{\"delta\":{\"content\":\"a\u{1}\"}}]}",
            r#"{"created":01}"#,
            r#"{"created":1.}"#,
            r#"{"created":-}"#,
            r#"{"created":1e}"#,
            r#"{"ok":tru}"#,
            r#"{"id":"x",}"#,
            r#"[]"#,
            "",
        ];
        for payload in other {
            assert_eq!(both_readers(payload).1, None, "{payload}");
        }
        // Every chunk the reader accepts, serde reads the same: the common chunks with a
        // character taken out or put in at every place.
        let marks = [
            "\"", "\\", ",", ":", "{", "}", "[", "]", "0", "-", ".", "e", " ", "n", "\u{1}",
            "\u{e9}",
        ];
        let mut accepted = 0;
        for payload in common {
            for (at, c) in payload.char_indices() {
                let taken_out = format!("{}{}", &payload[..at], &payload[at + c.len_utf8()..]);
                let put_in =
                    marks.map(|mark| format!("{}{mark}{}", &payload[..at], &payload[at..]));
                for variant in std::iter::once(taken_out).chain(put_in) {
                    let (serde, fast) = both_readers(&variant);
                    if let Some(fast) = fast {
                        accepted += 1;
                        assert_eq!(Ok(fast), serde, "{variant}");
                    }
                }
            }
        }
        assert!(accepted > 1_000, "{accepted}");
    }

    fn user(text: &str) -> Item {
        Item::Message(Message {
            id: "msg_1".into(),
            role: Role::User,
            content: vec![ContentPart::InputText { text: text.into() }],
            status: None,
            phase: None,
        })
    }

    #[test]
    fn call_signatures_go_back_on_their_calls_and_gemini_gets_the_stand_in_for_a_lost_one() {
        use crate::config::Profile;
        use crate::protocol::items::Reasoning;
        let call = |id: &str| {
            Item::FunctionCall(FunctionCall {
                id: format!("fc_{id}"),
                call_id: id.into(),
                name: "f".into(),
                arguments: "{}".into(),
                status: None,
                namespace: None,
            })
        };
        let output = |id: &str| {
            Item::FunctionCallOutput(FunctionCallOutput {
                id: format!("fco_{id}"),
                call_id: id.into(),
                output: ToolOutput::Text("ok".into()),
                status: None,
            })
        };
        let signed = Item::Reasoning(Reasoning {
            id: "rs_1".into(),
            summary: Vec::new(),
            content: None,
            encrypted_content: Some(
                Opaque::CallSignature {
                    call_id: "a".into(),
                    signature: "SIG+/=".into(),
                }
                .encode(),
            ),
            status: None,
        });
        // Step one signed (its reasoning item kept), step two's signature lost by the client.
        let items = [
            user("hi"),
            signed,
            call("a"),
            output("a"),
            call("b"),
            output("b"),
        ];
        let request = ModelRequest {
            model: "m".into(),
            items: items.into_iter().map(Entry::Item).collect(),
            ..ModelRequest::default()
        };
        let signatures = |profile: Profile| -> Vec<Value> {
            chat_messages(&request, &Dialect::of(profile))
                .iter()
                .filter_map(|m| m.get("tool_calls"))
                .map(|calls| calls[0]["extra_content"]["google"]["thought_signature"].clone())
                .collect()
        };
        assert_eq!(
            signatures(Profile::Gemini),
            [json!("SIG+/="), json!("skip_thought_signature_validator")]
        );
        assert_eq!(signatures(Profile::Generic), [json!("SIG+/="), Value::Null]);
        assert_eq!(signatures(Profile::Openai), [Value::Null, Value::Null]);
    }

    #[test]
    fn reasoning_blocks_streamed_after_a_call_go_back_on_that_calls_message() {
        use crate::config::Profile;
        use crate::protocol::items::Reasoning;
        let blocks = vec![json!({"type": "reasoning.encrypted", "data": "gAAAAB", "index": 0})];
        let items = [
            user("hi"),
            Item::FunctionCall(FunctionCall {
                id: "fc_a".into(),
                call_id: "a".into(),
                name: "f".into(),
                arguments: "{}".into(),
                status: None,
                namespace: None,
            }),
            Item::Reasoning(Reasoning {
                id: "rs_1".into(),
                summary: Vec::new(),
                content: None,
                encrypted_content: Some(Opaque::ReasoningDetails(blocks.clone()).encode()),
                status: None,
            }),
            Item::FunctionCallOutput(FunctionCallOutput {
                id: "fco_a".into(),
                call_id: "a".into(),
                output: ToolOutput::Text("ok".into()),
                status: None,
            }),
        ];
        let request = ModelRequest {
            model: "m".into(),
            items: items.into_iter().map(Entry::Item).collect(),
            ..ModelRequest::default()
        };
        let messages = chat_messages(&request, &Dialect::of(Profile::Openrouter));
        assert_eq!(messages[1]["reasoning_details"], Value::Array(blocks));
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages.len(), 3);
        let elsewhere = chat_messages(&request, &Dialect::of(Profile::Vllm));
        assert!(elsewhere[1].get("reasoning_details").is_none());
    }

    #[test]
    fn instructions_become_a_system_message_and_calls_merge_into_one_assistant_turn() {
        let call = |id: &str| {
            Item::FunctionCall(FunctionCall {
                id: format!("fc_{id}"),
                call_id: id.into(),
                name: "f".into(),
                arguments: "{}".into(),
                status: None,
                namespace: None,
            })
        };
        let request = ModelRequest {
            model: "m".into(),
            instructions: Some("be brief".into()),
            items: vec![
                user("hi"),
                call("a"),
                call("b"),
                Item::FunctionCallOutput(FunctionCallOutput {
                    id: "fco_1".into(),
                    call_id: "a".into(),
                    output: ToolOutput::Text("1".into()),
                    status: None,
                }),
            ]
            .into_iter()
            .map(Entry::Item)
            .collect(),
            max_output_tokens: Some(50),
            ..ModelRequest::default()
        };
        let body = chat_request_body(&request, &Dialect::of(crate::config::Profile::Generic));
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            body["messages"][1],
            json!({"role": "user", "content": "hi"})
        );
        assert_eq!(
            body["messages"][2]["tool_calls"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "a", "content": "1"})
        );
        assert_eq!(body["max_tokens"], json!(50));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn images_of_a_turns_calls_follow_its_tool_messages_where_the_provider_takes_them() {
        let call = |id: &str, images: &[&str]| {
            let content: Vec<Value> = images
                .iter()
                .map(|url| json!({"type": "input_image", "image_url": url, "detail": "auto"}))
                .collect();
            Entry::Item(Item::McpCall(McpCall {
                id: id.into(),
                server_label: "s".into(),
                name: "chart".into(),
                arguments: "{}".into(),
                output: Some("[image: …]".into()),
                error: None,
                status: None,
                approval_request_id: None,
                data: Some(json!({ "content": content })),
            }))
        };
        let request = ModelRequest {
            model: "m".into(),
            items: vec![
                Entry::Item(user("draw")),
                call("mcp_1", &["data:image/png;base64,AAAA"]),
                call("mcp_2", &["data:image/svg+xml;base64,AAAA"]),
                call("mcp_3", &[]),
            ],
            ..ModelRequest::default()
        };
        let mut dialect = Dialect::of(crate::config::Profile::Openai);
        let body = chat_request_body(&request, &dialect);
        let roles: Vec<&Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["role"])
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "tool", "user"]);
        // The SVG, which chat completions does not read, is left to its placeholder.
        assert_eq!(
            body["messages"][5]["content"],
            json!([
                {"type": "text", "text": "The image returned by call mcp_1 (chart):"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            ])
        );
        dialect.images = false;
        let body = chat_request_body(&request, &dialect);
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(5));
        assert!(!body.to_string().contains("image_url"), "{body}");
    }

    #[test]
    fn a_call_written_inside_think_tags_is_reasoning_not_a_call() {
        let mut dialect = Dialect::of(crate::config::Profile::Generic);
        dialect.tool_protocol = ToolProtocol::Hermes;
        let request = ModelRequest {
            model: "m".into(),
            tools: vec![crate::llm::ToolSpec {
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object"}),
                strict: None,
            }],
            ..ModelRequest::default()
        };
        let mut reader = Reader::of(&dialect, &request);
        let mut out = VecDeque::new();
        let chunks = [
            "<think>I could write <tool_",
            "call>{\"name\": \"f\"}</tool_call> here.</think>Done: <tool_call>{\"name\": \"f\", ",
            "\"arguments\": {}}</tool_call>",
        ];
        for chunk in chunks {
            let payload = json!({"choices": [{"delta": {"content": chunk}}]}).to_string();
            parse_payload(&payload, &mut out, &mut reader);
        }
        parse_payload(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            &mut out,
            &mut reader,
        );
        let mut reasoning = String::new();
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut finish = None;
        for event in out {
            match event.unwrap() {
                ModelEvent::ReasoningDelta(t) => reasoning.push_str(&t),
                ModelEvent::TextDelta(t) => text.push_str(&t),
                ModelEvent::ToolCallDelta {
                    name, arguments, ..
                } => calls.push((name, arguments)),
                ModelEvent::Finish(reason) => finish = Some(reason),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            reasoning,
            "I could write <tool_call>{\"name\": \"f\"}</tool_call> here."
        );
        assert_eq!(text, "Done:");
        assert_eq!(calls, [(Some("f".to_string()), "{}".to_string())]);
        assert_eq!(
            finish,
            Some(FinishReason::ToolCalls),
            "a reply that called finished so"
        );
    }

    #[test]
    fn chunks_become_text_tool_call_usage_and_finish_events() {
        let mut out = VecDeque::new();
        let mut reader = Reader::new(ReasoningFormat::ThinkTags);
        parse_payload(
            r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
            &mut out,
            &mut reader,
        );
        parse_payload(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}"#,
            &mut out,
            &mut reader,
        );
        parse_payload(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            &mut out,
            &mut reader,
        );
        parse_payload(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
            &mut out,
            &mut reader,
        );
        let events: Vec<_> = out.into_iter().map(|e| e.ok()).collect();
        assert_eq!(events[0], Some(ModelEvent::TextDelta("Hi".into())));
        assert!(
            matches!(&events[1], Some(ModelEvent::ToolCallDelta { index: 0, id: Some(id), .. }) if id == "c")
        );
        assert_eq!(events[2], Some(ModelEvent::Finish(FinishReason::Stop)));
        assert!(matches!(&events[3], Some(ModelEvent::Usage(u)) if u.total_tokens == 7));
        assert!(reader.finished);
    }

    #[test]
    fn escaped_text_is_decoded_and_fields_that_are_not_strings_are_skipped() {
        let mut out = VecDeque::new();
        let mut reader = Reader::new(ReasoningFormat::ThinkTags);
        parse_payload(
            r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\u00e9",
                "reasoning":{"summary":[1]},"reasoning_content":null,"tool_calls":null},
                "finish_reason":null,"logprobs":null}],"usage":null}"#,
            &mut out,
            &mut reader,
        );
        parse_payload(
            r#"{"error":{"message":"overloaded","code":529}}"#,
            &mut out,
            &mut reader,
        );
        parse_payload(r#"{"choices":"#, &mut out, &mut reader);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[0].as_ref().ok(),
            Some(&ModelEvent::TextDelta("a\"b\u{e9}".into()))
        );
        assert!(
            matches!(&out[1], Err(LlmError::Status { status: 529, body, .. }) if body.message == "overloaded")
        );
        assert!(matches!(&out[2], Err(LlmError::Protocol(_))));
        assert!(!reader.finished);
    }
}
