//! Server tools: the [`ToolHandler`] contract, the [`registry::ToolRegistry`] built at start-up
//! from compiled-in handlers and configured tool servers (MCP servers' tools join it as they
//! are discovered, [`mcp`]), and the handlers themselves.
//!
//! A tool never crashes a run: invalid arguments, errors, timeouts and panics all become a
//! [`ToolResult`] with an error, which the model sees and can react to.

pub mod address;
pub mod builtin;
pub mod http;
pub mod mcp;
pub mod registry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// Whether the chat API takes `name` for a function: 1 to 64 letters, digits, `_` or `-`.
pub fn is_callable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Who executes a tool's calls (a setting of configured tools too).
pub use crate::config::ToolKind;

/// How the executor treats a tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOptions {
    /// Overrides the configured default timeout.
    pub timeout: Option<Duration>,
    /// The tool's output ends the run as the assistant's answer, without another model turn.
    pub return_direct: bool,
    /// The call leaves no item on the stream or in `output`; it is stored and the model sees
    /// it.
    pub hidden: bool,
    /// The call changes nothing (it only reads): it starts without first being saved as
    /// started, and a crash before its turn is saved runs it again with the turn instead of
    /// reporting it interrupted.
    pub read_only: bool,
}

/// What a call knows about where it runs.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub response_id: String,
    pub call_id: String,
    pub tenant_id: String,
    /// Cancelled when the run is cancelled or the call times out: stop work early.
    pub cancel: CancellationToken,
}

/// A channel a tool may stream partial text into while it works.
#[derive(Clone)]
pub struct ToolOutput {
    sink: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl ToolOutput {
    pub fn new(sink: impl Fn(String) + Send + Sync + 'static) -> ToolOutput {
        ToolOutput {
            sink: Some(Arc::new(sink)),
        }
    }

    /// An output nobody reads (for calls outside a run, e.g. in tests).
    pub fn discard() -> ToolOutput {
        ToolOutput { sink: None }
    }

    pub fn send(&self, text: impl Into<String>) {
        if let Some(sink) = &self.sink {
            sink(text.into());
        }
    }
}

/// Why a call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolErrorKind {
    /// The tool ran and reported a failure (bad input it detected, division by zero, …).
    Tool,
    /// The arguments were not valid JSON or did not match the schema.
    InvalidArguments,
    /// The call was refused before running (not allowed, over `max_tool_calls`, …).
    Refused,
    /// The tool's backend could not be reached or answered with an error status.
    Transport {
        status: Option<u16>,
    },
    Timeout,
    Panic,
    Cancelled,
}

impl ToolErrorKind {
    /// A fault of the machinery rather than a failure the tool reported.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            ToolErrorKind::Transport { .. } | ToolErrorKind::Timeout | ToolErrorKind::Panic
        )
    }
}

/// An image a tool returned (an MCP `image` block, an HTTP tool's `image/*` reply), kept as
/// the tool sent it: base64 of its bytes. The model is shown it after the call's tool message
/// where its provider takes images, and the client gets it as an `input_image` part of the
/// call's `data` (SPEC §5, `mcp_call`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolImage {
    pub mime_type: String,
    pub base64: String,
}

impl ToolImage {
    /// The image as a `data:` URL, the form both chat completions and `input_image` take.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime_type, self.base64)
    }

    /// Its size once decoded, without decoding it.
    pub fn bytes(&self) -> usize {
        decoded_len(&self.base64)
    }

    /// The text the model reads in the call's tool message in its place.
    pub fn placeholder(&self) -> String {
        format!("[image: {}, {} bytes]", self.mime_type, self.bytes())
    }
}

/// The size of base64-encoded data once decoded, without decoding it.
pub fn decoded_len(base64: &str) -> usize {
    let trimmed = base64.trim_end_matches('=');
    let digits = trimmed.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    digits * 3 / 4
}

/// The result of a call: text for the model, optional structured data and images for
/// clients (the images reach the model too, where its provider takes them).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// What the model reads in the call's tool message (an image has a placeholder here).
    pub text: String,
    pub data: Option<Value>,
    pub images: Vec<ToolImage>,
    pub error: Option<ToolErrorKind>,
}

impl ToolResult {
    /// Cuts a text longer than `max` bytes (at a character boundary), saying so at its end;
    /// structured data that large is left out. Images share the same limit, counted by their
    /// decoded size all together: they are kept in order while they fit, and each one left
    /// out is named at the end of the text, so that neither the model nor the client is left
    /// to guess why a placeholder has no image.
    pub fn cut_to(&mut self, max: usize) {
        if self.text.len() > max {
            let mut end = max;
            while !self.text.is_char_boundary(end) {
                end -= 1;
            }
            let dropped = self.text.len() - end;
            self.text.truncate(end);
            self.text
                .push_str(&format!("\n[… {dropped} more bytes of output were cut]"));
        }
        if self
            .data
            .as_ref()
            .is_some_and(|data| serde_json::to_vec(data).map_or(0, |v| v.len()) > max)
        {
            self.data = None;
        }
        let mut total = 0;
        let mut notes = String::new();
        self.images.retain(|image| {
            total += image.bytes();
            let fits = total <= max;
            if !fits {
                total -= image.bytes();
                notes.push_str(&format!(
                    "\n[{} left out: a tool's images may take {max} bytes in all]",
                    image.placeholder().trim_matches(['[', ']'])
                ));
            }
            fits
        });
        self.text.push_str(&notes);
    }

    /// The call's `data` for clients: the tool's data, and its images as `input_image` parts
    /// first in a `content` list. Data that is already such a list (`{"content": [...]}`, the
    /// media an MCP result described) takes the images before its parts; any other data goes
    /// under `structured_content` beside the list, so that no key of the tool's own is
    /// overwritten.
    pub fn client_data(&self) -> Option<Value> {
        if self.images.is_empty() {
            return self.data.clone();
        }
        let images = self.images.iter().map(
            |image| json!({"type": "input_image", "image_url": image.data_url(), "detail": "auto"}),
        );
        let mut object = Map::new();
        let mut content: Vec<Value> = images.collect();
        match self.data.clone() {
            None => {}
            Some(Value::Object(mut described))
                if described.get("content").is_some_and(Value::is_array) =>
            {
                if let Some(Value::Array(parts)) = described.remove("content") {
                    content.extend(parts);
                }
                object = described;
            }
            Some(other) => {
                object.insert("structured_content".into(), other);
            }
        }
        object.insert("content".into(), Value::Array(content));
        Some(Value::Object(object))
    }

    pub fn ok(text: impl Into<String>) -> ToolResult {
        ToolResult {
            text: text.into(),
            data: None,
            images: Vec::new(),
            error: None,
        }
    }

    pub fn ok_with_data(text: impl Into<String>, data: Value) -> ToolResult {
        ToolResult {
            text: text.into(),
            data: Some(data),
            images: Vec::new(),
            error: None,
        }
    }

    /// A failure the tool reports (the model sees the message).
    pub fn error(message: impl Into<String>) -> ToolResult {
        ToolResult::failure(ToolErrorKind::Tool, message)
    }

    pub fn failure(kind: ToolErrorKind, message: impl Into<String>) -> ToolResult {
        ToolResult {
            text: message.into(),
            data: None,
            images: Vec::new(),
            error: Some(kind),
        }
    }

    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }
}

/// A server tool. Implementations hold no per-run state: one handler serves every run at
/// once, and everything about a call comes in through [`ToolContext`].
#[async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    /// The name the model calls; unique across every tool server.
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// The JSON Schema of the arguments (checked against the meta-schema at registration).
    fn parameters(&self) -> Value;
    fn kind(&self) -> ToolKind {
        ToolKind::Executed
    }
    fn options(&self) -> ToolOptions {
        ToolOptions::default()
    }
    /// Hints about the tool for clients (an MCP server's `annotations`: `readOnlyHint`, …),
    /// shown in `mcp_list_tools`; never trusted by the service itself.
    fn annotations(&self) -> Option<Value> {
        None
    }
    /// Runs one call. `arguments` already match [`ToolHandler::parameters`].
    async fn call(&self, context: ToolContext, arguments: Value, output: ToolOutput) -> ToolResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(bytes: usize) -> ToolImage {
        ToolImage {
            mime_type: "image/png".into(),
            base64: "AAAA".repeat(bytes / 3),
        }
    }

    #[test]
    fn images_over_the_output_limit_are_left_out_and_the_text_says_so() {
        let mut result = ToolResult {
            images: vec![image(600), image(600), image(300)],
            ..ToolResult::ok("[image: image/png, 600 bytes] ×2, 300")
        };
        result.cut_to(1000);
        assert_eq!(result.images, [image(600), image(300)]);
        assert!(
            result.text.ends_with(
                "\n[image: image/png, 600 bytes left out: a tool's images may take 1000 bytes in all]"
            ),
            "{}",
            result.text
        );
    }

    #[test]
    fn a_tools_images_come_first_in_the_data_and_other_data_beside_them() {
        let mut result = ToolResult::ok_with_data("x", json!([1, 2]));
        assert_eq!(result.client_data(), Some(json!([1, 2])));
        result.images.push(image(3));
        assert_eq!(
            result.client_data(),
            Some(json!({
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}],
                "structured_content": [1, 2]
            }))
        );
    }
}
