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
use serde_json::Value;
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

/// The result of a call: text for the model, optional structured data for clients.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    pub text: String,
    pub data: Option<Value>,
    pub error: Option<ToolErrorKind>,
}

impl ToolResult {
    /// Cuts a text longer than `max` bytes (at a character boundary), saying so at its end;
    /// structured data that large is left out.
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
    }

    pub fn ok(text: impl Into<String>) -> ToolResult {
        ToolResult {
            text: text.into(),
            data: None,
            error: None,
        }
    }

    pub fn ok_with_data(text: impl Into<String>, data: Value) -> ToolResult {
        ToolResult {
            text: text.into(),
            data: Some(data),
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
