//! Stream events (SPEC §7) in the Responses API vocabulary. The emitter stamps each with its
//! `sequence_number` and serialises it once; that JSON text is what the store keeps and what
//! every SSE subscriber receives.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::items::{ContentPart, Item};
use super::response::ResponseObject;

/// An event of a run, tagged by `type` (SPEC §7); sent and stored with its
/// `sequence_number` (`Sequenced`, the schema `StreamEvent`).
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "response.created")]
    Created { response: Box<ResponseObject> },
    #[serde(rename = "response.queued")]
    Queued { response: Box<ResponseObject> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Box<ResponseObject> },
    #[serde(rename = "response.completed")]
    Completed { response: Box<ResponseObject> },
    #[serde(rename = "response.failed")]
    Failed { response: Box<ResponseObject> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Box<ResponseObject> },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded { output_index: usize, item: Item },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone { output_index: usize, item: Item },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: Vec<Value>,
    },
    /// A reasoning item's `reasoning_text` part opens (SPEC §13): the `content_part.added` of
    /// a reasoning item, whose part is not a message's (`{"type": "reasoning_text"}`). The
    /// openai SDKs' stream helpers add the part here and its deltas to it.
    #[serde(rename = "response.content_part.added")]
    ReasoningPartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ReasoningPart,
    },
    #[serde(rename = "response.content_part.done")]
    ReasoningPartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ReasoningPart,
    },
    /// Reasoning text as the upstream streams it (SPEC §13).
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    /// With `reasoning.summary` asked for, the reasoning streams as a summary part.
    #[serde(rename = "response.reasoning_summary_part.added")]
    ReasoningSummaryPartAdded {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: Value,
    },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    ReasoningSummaryTextDelta {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_summary_text.done")]
    ReasoningSummaryTextDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        text: String,
    },
    #[serde(rename = "response.reasoning_summary_part.done")]
    ReasoningSummaryPartDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: Value,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    CustomToolCallInputDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.custom_tool_call_input.done")]
    CustomToolCallInputDone {
        item_id: String,
        output_index: usize,
        input: String,
    },
    #[serde(rename = "response.mcp_list_tools.in_progress")]
    McpListToolsInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_list_tools.completed")]
    McpListToolsCompleted {
        item_id: String,
        output_index: usize,
    },
    /// The server's tools could not be listed (an MCP server that is not connected): the
    /// item's `error` says so.
    #[serde(rename = "response.mcp_list_tools.failed")]
    McpListToolsFailed {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call_arguments.delta")]
    McpCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.mcp_call_arguments.done")]
    McpCallArgumentsDone {
        item_id: String,
        output_index: usize,
        arguments: String,
    },
    #[serde(rename = "response.mcp_call.in_progress")]
    McpCallInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call.completed")]
    McpCallCompleted {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call.failed")]
    McpCallFailed {
        item_id: String,
        output_index: usize,
    },
    /// A failure after the stream started: the fields flat and nested (SPEC §7 E).
    #[serde(rename = "error")]
    Error {
        code: Option<String>,
        message: String,
        param: Option<String>,
        error: ErrorDetail,
    },
}

/// The part of a reasoning item its text streams into.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReasoningPart {
    ReasoningText { text: String },
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: String,
    pub code: Option<String>,
    pub message: String,
    pub param: Option<String>,
}

impl Event {
    /// Whether the event is the run's last for good: it stopped, without waiting for the
    /// client (a pause's `response.completed` has a `required_action`, and the log goes on
    /// once the client answers).
    pub fn ends_run(&self) -> bool {
        self.lifecycle()
            .is_some_and(|(kind, response)| kind.ends_run(response))
    }

    /// The lifecycle event this is, with the response it carries.
    pub fn lifecycle(&self) -> Option<(Lifecycle, &ResponseObject)> {
        let (kind, response) = match self {
            Event::Created { response } => (Lifecycle::Created, response),
            Event::Queued { response } => (Lifecycle::Queued, response),
            Event::InProgress { response } => (Lifecycle::InProgress, response),
            Event::Completed { response } => (Lifecycle::Completed, response),
            Event::Failed { response } => (Lifecycle::Failed, response),
            Event::Incomplete { response } => (Lifecycle::Incomplete, response),
            _ => return None,
        };
        Some((kind, response))
    }

    /// The `type` field, also used as the SSE `event:` name.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Created { .. } => Lifecycle::Created.kind(),
            Event::Queued { .. } => Lifecycle::Queued.kind(),
            Event::InProgress { .. } => Lifecycle::InProgress.kind(),
            Event::Completed { .. } => Lifecycle::Completed.kind(),
            Event::Failed { .. } => Lifecycle::Failed.kind(),
            Event::Incomplete { .. } => Lifecycle::Incomplete.kind(),
            Event::OutputItemAdded { .. } => "response.output_item.added",
            Event::OutputItemDone { .. } => "response.output_item.done",
            Event::ContentPartAdded { .. } => "response.content_part.added",
            Event::ContentPartDone { .. } => "response.content_part.done",
            Event::OutputTextDelta { .. } => "response.output_text.delta",
            Event::OutputTextDone { .. } => "response.output_text.done",
            Event::ReasoningPartAdded { .. } => "response.content_part.added",
            Event::ReasoningPartDone { .. } => "response.content_part.done",
            Event::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            Event::ReasoningTextDone { .. } => "response.reasoning_text.done",
            Event::ReasoningSummaryPartAdded { .. } => "response.reasoning_summary_part.added",
            Event::ReasoningSummaryTextDelta { .. } => "response.reasoning_summary_text.delta",
            Event::ReasoningSummaryTextDone { .. } => "response.reasoning_summary_text.done",
            Event::ReasoningSummaryPartDone { .. } => "response.reasoning_summary_part.done",
            Event::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Event::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Event::CustomToolCallInputDelta { .. } => "response.custom_tool_call_input.delta",
            Event::CustomToolCallInputDone { .. } => "response.custom_tool_call_input.done",
            Event::McpListToolsInProgress { .. } => "response.mcp_list_tools.in_progress",
            Event::McpListToolsCompleted { .. } => "response.mcp_list_tools.completed",
            Event::McpListToolsFailed { .. } => "response.mcp_list_tools.failed",
            Event::McpCallArgumentsDelta { .. } => "response.mcp_call_arguments.delta",
            Event::McpCallArgumentsDone { .. } => "response.mcp_call_arguments.done",
            Event::McpCallInProgress { .. } => "response.mcp_call.in_progress",
            Event::McpCallCompleted { .. } => "response.mcp_call.completed",
            Event::McpCallFailed { .. } => "response.mcp_call.failed",
            Event::Error { .. } => "error",
        }
    }

    /// The JSON text of the event with its sequence number.
    pub fn to_json(&self, sequence_number: u64) -> String {
        if let Event::OutputTextDelta {
            item_id,
            output_index,
            content_index,
            delta,
            logprobs,
        } = self
            && logprobs.is_empty()
        {
            return text_delta_json(
                item_id,
                *output_index,
                *content_index,
                delta,
                sequence_number,
            );
        }
        // Serialising these plain data types cannot fail; fall back to a valid error event.
        let failed = |e: serde_json::Error| {
            format!(
                r#"{{"type":"error","code":"server_error","message":{},"param":null,"sequence_number":{sequence_number}}}"#,
                Value::String(e.to_string())
            )
        };
        if let Some((kind, response)) = self.lifecycle() {
            return match serde_json::to_string(response) {
                Ok(response) => kind.to_json(&response, sequence_number),
                Err(e) => failed(e),
            };
        }
        serde_json::to_string(&Sequenced {
            event: self,
            sequence_number,
        })
        .unwrap_or_else(failed)
    }
}

/// The events that carry the whole response object (SPEC §7). A run's first two carry the
/// same object, and its closing one the object its row stores: they are written from its JSON
/// text, serialised once (a text run serialised it five times, 7 % of its instructions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Created,
    Queued,
    InProgress,
    Completed,
    Failed,
    Incomplete,
}

impl Lifecycle {
    /// The event's `type`.
    pub fn kind(self) -> &'static str {
        match self {
            Lifecycle::Created => "response.created",
            Lifecycle::Queued => "response.queued",
            Lifecycle::InProgress => "response.in_progress",
            Lifecycle::Completed => "response.completed",
            Lifecycle::Failed => "response.failed",
            Lifecycle::Incomplete => "response.incomplete",
        }
    }

    /// The event, carrying `response`.
    pub fn event(self, response: Box<ResponseObject>) -> Event {
        match self {
            Lifecycle::Created => Event::Created { response },
            Lifecycle::Queued => Event::Queued { response },
            Lifecycle::InProgress => Event::InProgress { response },
            Lifecycle::Completed => Event::Completed { response },
            Lifecycle::Failed => Event::Failed { response },
            Lifecycle::Incomplete => Event::Incomplete { response },
        }
    }

    /// Whether the event ends the run for good (see [`Event::ends_run`]).
    pub fn ends_run(self, response: &ResponseObject) -> bool {
        matches!(
            self,
            Lifecycle::Completed | Lifecycle::Failed | Lifecycle::Incomplete
        ) && response.required_action.is_none()
    }

    /// The event's JSON text, around the JSON text of its response: the text serde writes
    /// for the event (a test compares them).
    pub fn to_json(self, response: &str, sequence_number: u64) -> String {
        let mut out = String::with_capacity(response.len() + 100);
        out.push_str(r#"{"type":""#);
        out.push_str(self.kind());
        out.push_str(r#"","response":"#);
        out.push_str(response);
        out.push_str(r#","sequence_number":"#);
        out.push_str(itoa::Buffer::new().format(sequence_number));
        out.push('}');
        out
    }
}

/// A text delta's JSON, written directly: the same text serde writes for the event (a test
/// compares them), at a third of its cost. Half of a text run's events are deltas.
fn text_delta_json(
    item_id: &str,
    output_index: usize,
    content_index: usize,
    delta: &str,
    sequence_number: u64,
) -> String {
    let mut out = String::with_capacity(150 + item_id.len() + delta.len());
    out.push_str(r#"{"type":"response.output_text.delta","item_id":"#);
    push_json_string(&mut out, item_id);
    out.push_str(r#","output_index":"#);
    out.push_str(itoa::Buffer::new().format(output_index));
    out.push_str(r#","content_index":"#);
    out.push_str(itoa::Buffer::new().format(content_index));
    out.push_str(r#","delta":"#);
    push_json_string(&mut out, delta);
    out.push_str(r#","logprobs":[],"sequence_number":"#);
    out.push_str(itoa::Buffer::new().format(sequence_number));
    out.push('}');
    out
}

/// Appends `text` as a JSON string, as serde writes it: copied as it is when nothing in it is
/// escaped (most text), else written by serde.
pub(crate) fn push_json_string(out: &mut String, text: &str) {
    if !needs_escape(text.as_bytes()) {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        // Serialising a string cannot fail.
        out.push_str(&serde_json::to_string(text).unwrap_or_default());
    }
}

/// Whether JSON escapes a byte of `bytes`: a quote, a backslash or a control character (below
/// 0x20). Eight bytes at a time (a byte at a time took 1.9 % of a text run's instructions).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `word` is below `n` (1 ≤ n ≤ 0x80): exact for the word as a whole.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH != 0;
    let (quote, backslash) = (ONES * u64::from(b'"'), ONES * u64::from(b'\\'));
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut eight = [0; 8];
        eight.copy_from_slice(word);
        let word = u64::from_ne_bytes(eight);
        if below(word, 0x20) || below(word ^ quote, 1) || below(word ^ backslash, 1) {
            return true;
        }
    }
    let rest = words.remainder();
    rest.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// An event as a stream sends it (the JSON of an SSE `data:` line, of a WebSocket message)
/// and the store keeps it: its fields and its place in the run's log, numbered from 0.
#[derive(Serialize, ToSchema)]
#[schema(as = StreamEvent)]
pub struct Sequenced<'a> {
    #[serde(flatten)]
    pub event: &'a Event,
    pub sequence_number: u64,
}

/// One event of a run's log, numbered and serialised once: what the store keeps and what
/// every reader of the run receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub response_id: Arc<str>,
    pub tenant_id: Arc<str>,
    pub sequence_number: u64,
    /// The event's `type`, borrowed for live events, owned when read back.
    pub event_type: Cow<'static, str>,
    /// The event's JSON text, serialised once.
    pub data: Arc<str>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    /// The run's last event for good (see `Event::ends_run`): readers following it live stop
    /// there instead of looking in the store for more. Known only as the event is emitted;
    /// an event read back from the store says `false`.
    pub ends_run: bool,
}

/// Whether an event of this type ends a stream (the run stopped or paused).
pub fn is_terminal(kind: &str) -> bool {
    matches!(
        kind,
        "response.completed" | "response.failed" | "response.incomplete"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_delta_written_directly_is_the_text_serde_writes() {
        for (item_id, delta) in [
            ("msg_0", "Hello"),
            (
                "msg_\"x\"",
                "a \"quote\", a \\ and a\nnewline\t\u{0}\u{1f} é 😀 </script>",
            ),
            ("msg_1", ""),
        ] {
            let event = Event::OutputTextDelta {
                item_id: item_id.into(),
                output_index: 12,
                content_index: 3,
                delta: delta.into(),
                logprobs: Vec::new(),
            };
            let serde = serde_json::to_string(&Sequenced {
                event: &event,
                sequence_number: 4_000_000_007,
            })
            .unwrap();
            assert_eq!(event.to_json(4_000_000_007), serde);
        }
    }

    #[test]
    fn a_string_needs_escaping_exactly_when_a_byte_of_it_does() {
        let one_by_one = |bytes: &[u8]| bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        // Every byte, at each place of a 17-byte text (two words and a remainder) whose other
        // bytes need no escaping: ASCII, and bytes of 0x7f and above, whose high bit the word
        // arithmetic must not mistake for a byte that needs escaping.
        for fill in [b'a', 0x7f, 0x80, 0xc3, 0xff, b' ', b'!', b'#', b'[', b']'] {
            for byte in 0..=255u8 {
                for at in 0..17 {
                    let mut text = vec![fill; 17];
                    text[at] = byte;
                    assert_eq!(
                        needs_escape(&text),
                        one_by_one(&text),
                        "{fill:#x} {byte:#x} at {at}"
                    );
                    assert_eq!(needs_escape(&text[..at]), one_by_one(&text[..at]));
                }
            }
        }
        assert!(!needs_escape(b""));
        assert!(!needs_escape("Ünïcödé 😀 </script>".as_bytes()));
    }

    #[test]
    fn a_lifecycle_event_written_around_its_response_is_the_text_serde_writes() {
        let response: ResponseObject = serde_json::from_value(serde_json::json!({
            "id": "resp_1", "object": "response", "created_at": 1, "completed_at": null,
            "status": "in_progress", "error": null, "incomplete_details": null,
            "instructions": "say \"hi\"", "model": "m", "output": [],
            "parallel_tool_calls": true, "previous_response_id": null, "tools": [],
            "tool_choice": "auto", "truncation": "disabled", "text": {}, "reasoning": {},
            "temperature": 0.5, "top_p": 1.0, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "top_logprobs": 0, "max_output_tokens": null,
            "max_tool_calls": null, "store": true, "background": false, "service_tier": null,
            "metadata": {"k": "v"}, "safety_identifier": null, "prompt_cache_key": null,
            "user": null, "usage": null, "required_action": null
        }))
        .unwrap();
        let text = serde_json::to_string(&response).unwrap();
        for kind in [
            Lifecycle::Created,
            Lifecycle::Queued,
            Lifecycle::InProgress,
            Lifecycle::Completed,
            Lifecycle::Failed,
            Lifecycle::Incomplete,
        ] {
            let event = kind.event(Box::new(response.clone()));
            // serde names the variant from its own `rename`, apart from `Lifecycle::kind`.
            let serde = serde_json::to_string(&Sequenced {
                event: &event,
                sequence_number: u64::MAX,
            })
            .unwrap();
            assert_eq!(event.lifecycle().map(|(k, _)| k), Some(kind));
            assert_eq!(kind.to_json(&text, u64::MAX), serde);
            assert_eq!(event.to_json(u64::MAX), serde);
            assert_eq!(kind.kind(), event.kind());
        }
    }
}
