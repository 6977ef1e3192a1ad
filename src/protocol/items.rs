//! Items: what goes into a run (`input`) and what comes out of it (`output`), SPEC §5.
//!
//! One enum serves both directions; the store keeps items as JSON in exactly this shape, so
//! what a client lists later is what it sent (normalised: ids assigned, string content turned
//! into parts).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::field::json_kind;
use super::ids;

/// An input or output item, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    Message(Message),
    FunctionCall(FunctionCall),
    FunctionCallOutput(FunctionCallOutput),
    McpListTools(McpListTools),
    McpCall(McpCall),
    CustomToolCall(CustomToolCall),
    CustomToolCallOutput(CallOutput),
    LocalShellCall(LocalShellCall),
    LocalShellCallOutput(CallOutput),
    McpApprovalRequest(McpApprovalRequest),
    McpApprovalResponse(McpApprovalResponse),
    /// A compacted stretch of conversation (from `POST /v1/responses/compact`).
    Compaction(Compaction),
    /// The model's reasoning, as a client replays it (Codex replays what it received);
    /// accepted and kept, not shown to the model again.
    Reasoning(Reasoning),
    /// Tools declared in the input rather than in `tools` (Codex sends its tools so for the
    /// models of its catalog): they join the request's tools; not part of the conversation.
    AdditionalTools(AdditionalTools),
}

impl Item {
    pub fn id(&self) -> &str {
        match self {
            Item::Message(m) => &m.id,
            Item::FunctionCall(c) => &c.id,
            Item::FunctionCallOutput(o) => &o.id,
            Item::McpListTools(l) => &l.id,
            Item::McpCall(c) => &c.id,
            Item::CustomToolCall(c) => &c.id,
            Item::LocalShellCall(c) => &c.id,
            Item::CustomToolCallOutput(o) | Item::LocalShellCallOutput(o) => &o.id,
            Item::McpApprovalRequest(r) => &r.id,
            Item::McpApprovalResponse(r) => &r.id,
            Item::Compaction(c) => &c.id,
            Item::Reasoning(r) => &r.id,
            Item::AdditionalTools(t) => &t.id,
        }
    }

    /// A call the model made, as `(call id, tool name, arguments)`; for server calls the
    /// item id serves as the call id.
    pub fn as_call(&self) -> Option<(String, String, String)> {
        match self {
            Item::FunctionCall(c) => Some((c.call_id.clone(), c.name.clone(), c.arguments.clone())),
            Item::McpCall(c) => Some((c.id.clone(), c.name.clone(), c.arguments.clone())),
            Item::CustomToolCall(c) => Some((
                c.call_id.clone(),
                c.name.clone(),
                serde_json::json!({"input": c.input}).to_string(),
            )),
            Item::LocalShellCall(c) => Some((
                c.call_id.clone(),
                "local_shell".into(),
                serde_json::to_string(&c.action).unwrap_or_default(),
            )),
            _ => None,
        }
    }

    /// Whether it is a message from the user (what starts a new turn of a conversation).
    pub fn is_user_message(&self) -> bool {
        matches!(self, Item::Message(m) if m.role == Role::User)
    }

    /// A client's output for a call, as `(call id, text)`.
    pub fn as_output(&self) -> Option<(&str, String)> {
        match self {
            Item::FunctionCallOutput(o) => Some((&o.call_id, o.output.as_text())),
            Item::CustomToolCallOutput(o) | Item::LocalShellCallOutput(o) => {
                Some((&o.call_id, o.output.as_text()))
            }
            _ => None,
        }
    }

    /// The images of a client's output for a call, as `(call id, URLs)`.
    pub fn output_images(&self) -> Option<(&str, Vec<&str>)> {
        match self {
            Item::FunctionCallOutput(o) => Some((&o.call_id, o.output.image_urls())),
            Item::CustomToolCallOutput(o) | Item::LocalShellCallOutput(o) => {
                Some((&o.call_id, o.output.image_urls()))
            }
            _ => None,
        }
    }

    /// The item's status slot.
    pub fn status_mut(&mut self) -> &mut Option<ItemStatus> {
        match self {
            Item::Message(m) => &mut m.status,
            Item::FunctionCall(c) => &mut c.status,
            Item::FunctionCallOutput(o) => &mut o.status,
            Item::McpListTools(l) => &mut l.status,
            Item::McpCall(c) => &mut c.status,
            Item::CustomToolCall(c) => &mut c.status,
            Item::LocalShellCall(c) => &mut c.status,
            Item::CustomToolCallOutput(o) | Item::LocalShellCallOutput(o) => &mut o.status,
            Item::McpApprovalRequest(r) => &mut r.status,
            Item::McpApprovalResponse(r) => &mut r.status,
            Item::Compaction(c) => &mut c.status,
            Item::Reasoning(r) => &mut r.status,
            Item::AdditionalTools(t) => &mut t.status,
        }
    }

    /// Gives the item an id and a status where the client left them out.
    pub fn normalise(&mut self) {
        match self {
            Item::Message(m) => {
                ids::assign(&mut m.id, ids::MESSAGE);
                m.status.get_or_insert(ItemStatus::Completed);
                if m.role == Role::Assistant {
                    for part in &mut m.content {
                        if let ContentPart::InputText { text } = part {
                            *part = ContentPart::OutputText(OutputText::new(std::mem::take(text)));
                        }
                    }
                }
            }
            Item::FunctionCall(c) => {
                ids::assign(&mut c.id, ids::FUNCTION_CALL);
                c.status.get_or_insert(ItemStatus::Completed);
            }
            Item::FunctionCallOutput(o) => {
                ids::assign(&mut o.id, ids::FUNCTION_CALL_OUTPUT);
                o.status.get_or_insert(ItemStatus::Completed);
            }
            Item::McpListTools(l) => {
                ids::assign(&mut l.id, ids::MCP_LIST_TOOLS);
                l.status.get_or_insert(ItemStatus::Completed);
            }
            Item::McpCall(c) => {
                ids::assign(&mut c.id, ids::MCP_CALL);
                c.status.get_or_insert(ItemStatus::Completed);
            }
            Item::CustomToolCall(c) => {
                ids::assign(&mut c.id, ids::CUSTOM_TOOL_CALL);
                c.status.get_or_insert(ItemStatus::Completed);
            }
            Item::LocalShellCall(c) => {
                ids::assign(&mut c.id, ids::LOCAL_SHELL_CALL);
                c.status.get_or_insert(ItemStatus::Completed);
            }
            Item::CustomToolCallOutput(o) | Item::LocalShellCallOutput(o) => {
                ids::assign(&mut o.id, ids::FUNCTION_CALL_OUTPUT);
                o.status.get_or_insert(ItemStatus::Completed);
            }
            Item::McpApprovalRequest(r) => {
                ids::assign(&mut r.id, ids::MCP_APPROVAL_REQUEST);
                r.status.get_or_insert(ItemStatus::Completed);
            }
            Item::McpApprovalResponse(r) => {
                ids::assign(&mut r.id, ids::MCP_APPROVAL_RESPONSE);
                r.status.get_or_insert(ItemStatus::Completed);
            }
            // Kept as given: the standard item has no status.
            Item::Compaction(c) => ids::assign(&mut c.id, ids::COMPACTION),
            Item::Reasoning(r) => ids::assign(&mut r.id, ids::REASONING),
            Item::AdditionalTools(t) => ids::assign(&mut t.id, ids::ADDITIONAL_TOOLS),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
    /// A server tool call that ended in an error, or a tool server's listing that failed
    /// (`mcp_call`, `mcp_list_tools`).
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    System,
    Developer,
    Assistant,
}

/// A message. Input content may be a plain string; it is stored as parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    #[serde(default)]
    pub id: String,
    pub role: Role,
    /// Accepted as a string or as parts; always parts when the service gives it back.
    #[serde(deserialize_with = "content_parts")]
    #[schema(schema_with = content_schema)]
    pub content: Vec<ContentPart>,
    #[serde(default)]
    pub status: Option<ItemStatus>,
    /// Of an assistant message: whether it is commentary on the way or the final answer
    /// (Open Responses); kept as the client sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Commentary,
    FinalAnswer,
}

impl Message {
    /// An empty assistant message, as it opens on the stream.
    pub fn assistant(id: String) -> Message {
        Message {
            id,
            role: Role::Assistant,
            content: Vec::new(),
            status: Some(ItemStatus::InProgress),
            phase: None,
        }
    }

    /// The text of all text parts, joined.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            match part {
                ContentPart::InputText { text }
                | ContentPart::OutputText(OutputText { text, .. }) => out.push_str(text),
                ContentPart::Refusal { refusal } => out.push_str(refusal),
                _ => {}
            }
        }
        out
    }
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    InputText {
        text: String,
    },
    OutputText(OutputText),
    Refusal {
        refusal: String,
    },
    InputImage {
        #[serde(default)]
        image_url: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default = "auto")]
        detail: String,
    },
    InputFile {
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        file_data: Option<String>,
        #[serde(default)]
        file_url: Option<String>,
        #[serde(default)]
        filename: Option<String>,
    },
}

fn auto() -> String {
    "auto".into()
}

/// Assistant text; `annotations` and `logprobs` are always present (empty) on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutputText {
    pub text: String,
    #[serde(default)]
    pub annotations: Vec<Value>,
    #[serde(default)]
    pub logprobs: Vec<Value>,
}

impl OutputText {
    pub fn new(text: String) -> OutputText {
        OutputText {
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

/// Accepts `"text"` or a list of parts; a string becomes one `input_text` part (turned into
/// `output_text` for assistant messages by [`Item::normalise`]).
fn content_parts<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<ContentPart>, D::Error> {
    // An untagged enum would hide the inner error, so the two shapes are tried explicitly.
    let value = Value::deserialize(de)?;
    match value {
        Value::String(text) => Ok(vec![ContentPart::InputText { text }]),
        Value::Array(_) => {
            serde_json::from_value::<Vec<ContentPart>>(value).map_err(serde::de::Error::custom)
        }
        other => Err(serde::de::Error::custom(format!(
            "expected a string or an array of content parts, got {}",
            json_kind(&other)
        ))),
    }
}

/// What [`content_parts`] accepts: a string, or a list of parts.
pub(crate) fn content_schema() -> utoipa::openapi::schema::Schema {
    super::schema::one_of([
        super::schema::string().into(),
        super::schema::array_of::<ContentPart>().into(),
    ])
}

/// A call of a definition-only function tool, made by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    #[serde(default)]
    pub id: String,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    #[serde(default)]
    pub status: Option<ItemStatus>,
    /// The namespace the called function was declared in (a `namespace` tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The client's output for a function call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCallOutput {
    #[serde(default)]
    pub id: String,
    pub call_id: String,
    pub output: ToolOutput,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

/// A tool output: text, or a list of content parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolOutput {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl ToolOutput {
    /// The output as text for a chat-completions `tool` message: an image is a placeholder
    /// there (the model is shown images in a message of their own, [`ToolOutput::image_urls`]).
    pub fn as_text(&self) -> String {
        match self {
            ToolOutput::Text(text) => text.clone(),
            ToolOutput::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::InputText { text } => Some(text.as_str()),
                    ContentPart::OutputText(t) => Some(t.text.as_str()),
                    ContentPart::InputImage {
                        image_url: Some(_), ..
                    } => Some("[image]"),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The URLs (or `data:` URLs) of the images in the output.
    pub fn image_urls(&self) -> Vec<&str> {
        match self {
            ToolOutput::Text(_) => Vec::new(),
            ToolOutput::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::InputImage { image_url, .. } => image_url.as_deref(),
                    _ => None,
                })
                .collect(),
        }
    }
}

/// What the model was shown of a tool server: emitted the first time a server is used in a
/// chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpListTools {
    #[serde(default)]
    pub id: String,
    pub server_label: String,
    /// Left out by a client replaying the listing by id; filled from the stored one.
    #[serde(default)]
    pub tools: Vec<McpToolInfo>,
    /// Left out when there is none: the Vercel AI SDK's parser rejects `null` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpToolInfo {
    pub name: String,
    /// Left out when there is none (the Vercel AI SDK's parser rejects `null` here too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: Value,
    /// Left out when there are none (as the listing's `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// A call of a server tool, executed by the service (every tool source: compiled-in, HTTP
/// tool servers, MCP servers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpCall {
    #[serde(default)]
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
    #[serde(default)]
    pub output: Option<String>,
    /// `{"type": "mcp_tool_execution_error" | "http_error", …}` when the call failed.
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(default)]
    pub status: Option<ItemStatus>,
    #[serde(default)]
    pub approval_request_id: Option<String>,
    /// Extension: structured data the tool returned for clients, besides the text the model
    /// sees; the images it returned are `input_image` parts of `data.content` (SPEC §5), and
    /// the model is shown them from there, in this run and in any that continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl McpCall {
    /// The URLs (`data:` URLs, as the service writes them) of the images the call returned.
    pub fn image_urls(&self) -> Vec<&str> {
        let parts = self
            .data
            .as_ref()
            .and_then(|data| data.get("content"))
            .and_then(Value::as_array);
        parts
            .into_iter()
            .flatten()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("input_image"))
            .filter_map(|part| part.get("image_url").and_then(Value::as_str))
            .collect()
    }

    /// The text the model sees as the call's result.
    pub fn result_text(&self) -> String {
        match (&self.error, &self.output) {
            (Some(error), _) => {
                let message = error
                    .get("message")
                    .or_else(|| error.get("content"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| error.to_string());
                format!("Error: {message}")
            }
            (None, Some(output)) => output.clone(),
            // Never an empty result for a call that may have had one: say it is unknown.
            (None, None) => "No output was provided for this call.".into(),
        }
    }
}

/// A call of a client-executed custom tool: the model's raw `input` text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CustomToolCall {
    #[serde(default)]
    pub id: String,
    pub call_id: String,
    pub name: String,
    pub input: String,
    #[serde(default)]
    pub status: Option<ItemStatus>,
    /// The namespace the called tool was declared in (a `namespace` tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A client's output for a custom tool call or a local shell call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CallOutput {
    #[serde(default)]
    pub id: String,
    pub call_id: String,
    pub output: ToolOutput,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

/// A command the model wants the client to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LocalShellCall {
    #[serde(default)]
    pub id: String,
    pub call_id: String,
    pub action: ShellAction,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ShellAction {
    #[serde(rename = "type", default = "exec")]
    pub kind: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: serde_json::Map<String, Value>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub working_directory: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

fn exec() -> String {
    "exec".into()
}

/// A server call waiting for the client's approval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpApprovalRequest {
    #[serde(default)]
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

/// The client's answer to an approval request (input only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpApprovalResponse {
    #[serde(default)]
    pub id: String,
    pub approval_request_id: String,
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub status: Option<ItemStatus>,
}

/// A compacted window of conversation: what the model summarised of it. The standard calls
/// the field `encrypted_content`; this service keeps the summary there as plain text (it is
/// the client's own conversation), and shows it to the model as such.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Compaction {
    #[serde(default)]
    pub id: String,
    pub encrypted_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}

/// A reasoning item: its summary parts and, where a provider sent them, its text or
/// encrypted content, kept as given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Reasoning {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub summary: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}

impl Reasoning {
    /// The reasoning as text: its `reasoning_text` parts, else its summary's text.
    pub fn text(&self) -> String {
        let texts = |parts: &[Value], kind: &str| -> Vec<String> {
            parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some(kind))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        };
        let content = texts(
            self.content.as_deref().unwrap_or_default(),
            "reasoning_text",
        );
        match content.is_empty() {
            false => content.concat(),
            true => texts(&self.summary, "summary_text").join("\n\n"),
        }
    }
}

/// Tools declared in the input, with the role Codex gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AdditionalTools {
    #[serde(default)]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Entries as in a request's `tools`, kept as given but for the credentials of `mcp`
    /// entries, which are never kept.
    #[schema(value_type = Vec<super::tools::ToolEntry>)]
    #[serde(deserialize_with = "super::tools::without_credentials")]
    pub tools: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}
