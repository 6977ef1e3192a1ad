//! The Response object (SPEC §4). Every key is always serialised, `null` when not applicable,
//! because strict clients reject a missing key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::items::Item;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Queued,
    InProgress,
    Completed,
    Failed,
    Incomplete,
    Cancelled,
}

/// The Response object. Every key is always present (SPEC §4), so the schema requires them
/// all, `null` included where a key may be null.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Response)]
pub struct ResponseObject {
    #[schema(example = "resp_01a21618a3a67796a4811304cd94db12")]
    pub id: String,
    /// Always `response`.
    #[schema(schema_with = object_response)]
    pub object: String,
    pub created_at: i64,
    #[schema(required)]
    pub completed_at: Option<i64>,
    pub status: ResponseStatus,
    #[schema(required)]
    pub error: Option<ResponseError>,
    #[schema(required)]
    pub incomplete_details: Option<IncompleteDetails>,
    #[schema(required)]
    pub instructions: Option<String>,
    pub model: String,
    pub output: Vec<Item>,
    pub parallel_tool_calls: bool,
    #[schema(required)]
    pub previous_response_id: Option<String>,
    /// The request's `tools` as given, a `function` tool with every key of its standard
    /// shape.
    #[schema(value_type = Vec<super::tools::ToolEntry>)]
    pub tools: Vec<Value>,
    /// The request's `tool_choice`, else `auto`.
    #[schema(value_type = super::tools::ToolChoiceSchema)]
    pub tool_choice: Value,
    #[schema(schema_with = super::request::truncation_schema)]
    pub truncation: String,
    /// The request's `text` with its `format` (default `{"type": "text"}`).
    #[schema(value_type = super::request::TextConfig)]
    pub text: Value,
    /// The request's `reasoning`, else `{"effort": null, "summary": null}`.
    #[schema(value_type = super::request::ReasoningConfig)]
    pub reasoning: Value,
    /// The sampling settings used: the request's, else the defaults (numbers, never `null`:
    /// the Open Responses schema requires numbers). Bodies stored before they were always
    /// numbers read `null` as the default.
    #[serde(deserialize_with = "one_if_null")]
    pub temperature: f64,
    #[serde(deserialize_with = "one_if_null")]
    pub top_p: f64,
    #[serde(deserialize_with = "zero_if_null")]
    pub presence_penalty: f64,
    #[serde(deserialize_with = "zero_if_null")]
    pub frequency_penalty: f64,
    #[schema(required)]
    pub top_logprobs: Option<u32>,
    #[schema(required)]
    pub max_output_tokens: Option<u64>,
    #[schema(required)]
    pub max_tool_calls: Option<u64>,
    pub store: bool,
    pub background: bool,
    #[schema(required)]
    pub service_tier: Option<String>,
    /// String values (SPEC: the standard's metadata).
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub metadata: Map<String, Value>,
    #[schema(required)]
    pub safety_identifier: Option<String>,
    #[schema(required)]
    pub prompt_cache_key: Option<String>,
    #[schema(required)]
    pub user: Option<String>,
    /// `null` while the run goes on.
    #[schema(required)]
    pub usage: Option<Usage>,
    /// Extension: non-null while the run waits for the client (SPEC §3).
    #[schema(required)]
    pub required_action: Option<RequiredAction>,
}

/// `object` of a Response object.
fn object_response() -> utoipa::openapi::schema::Object {
    super::schema::constant("response")
}

fn object_list() -> utoipa::openapi::schema::Object {
    super::schema::constant("list")
}

fn object_model() -> utoipa::openapi::schema::Object {
    super::schema::constant("model")
}

fn object_compaction() -> utoipa::openapi::schema::Object {
    super::schema::constant("response.compaction")
}

/// The defaults of the sampling settings, echoed when a request leaves them out.
pub const DEFAULT_TEMPERATURE: f64 = 1.0;
pub const DEFAULT_TOP_P: f64 = 1.0;
pub const DEFAULT_PENALTY: f64 = 0.0;

fn one_if_null<'de, D: serde::Deserializer<'de>>(de: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(de)?.unwrap_or(1.0))
}

fn zero_if_null<'de, D: serde::Deserializer<'de>>(de: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(de)?.unwrap_or(0.0))
}

/// A sampling setting to send upstream: none when it is the default, so that a provider
/// whose own default differs keeps it (a stored body no longer says whether the client set
/// the default explicitly).
pub fn unless_default(value: f64, default: f64) -> Option<f64> {
    (value != default).then_some(value)
}

/// What a paused run waits for (SPEC §3): outputs of the client's calls, and answers to
/// approval requests (an extension, listed beside the calls).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequiredAction {
    /// Always `submit_tool_outputs`.
    #[serde(rename = "type")]
    pub kind: RequiredActionKind,
    /// When the run stops waiting (seconds since the Unix epoch).
    pub expires_at: i64,
    pub submit_tool_outputs: PendingWork,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequiredActionKind {
    SubmitToolOutputs,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingWork {
    pub tool_calls: Vec<PendingCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_requests: Vec<PendingApproval>,
}

/// A client call the run waits for; `id` is the call's `call_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: CallKind,
    pub function: PendingFunction,
}

/// For `custom` calls `arguments` carries the raw input, for `local_shell` the action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingFunction {
    pub name: String,
    pub arguments: String,
}

/// The item type of a call the client executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    Function,
    Custom,
    LocalShell,
}

/// An approval request the run waits for: the `mcp_approval_request` item it showed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingApproval {
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
}

impl RequiredAction {
    pub fn new(expires_at_secs: i64, work: PendingWork) -> RequiredAction {
        RequiredAction {
            kind: RequiredActionKind::SubmitToolOutputs,
            expires_at: expires_at_secs,
            submit_tool_outputs: work,
        }
    }
}

/// `error` of a failed response: `{code, message}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IncompleteDetails {
    pub reason: String,
}

/// Token usage, summed over every model turn of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

impl Usage {
    /// What was used beyond `earlier` (a part of this usage).
    pub fn minus(&self, earlier: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            input_tokens_details: InputTokensDetails {
                cached_tokens: self
                    .input_tokens_details
                    .cached_tokens
                    .saturating_sub(earlier.input_tokens_details.cached_tokens),
                cache_write_tokens: self
                    .input_tokens_details
                    .cache_write_tokens
                    .saturating_sub(earlier.input_tokens_details.cache_write_tokens),
            },
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: self
                    .output_tokens_details
                    .reasoning_tokens
                    .saturating_sub(earlier.output_tokens_details.reasoning_tokens),
            },
            total_tokens: self.total_tokens.saturating_sub(earlier.total_tokens),
        }
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.input_tokens_details.cached_tokens += other.input_tokens_details.cached_tokens;
        self.input_tokens_details.cache_write_tokens +=
            other.input_tokens_details.cache_write_tokens;
        self.output_tokens += other.output_tokens;
        self.output_tokens_details.reasoning_tokens += other.output_tokens_details.reasoning_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// `{"id":…,"object":"response","deleted":true}`
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    /// Always `response`.
    #[schema(schema_with = object_response)]
    pub object: &'static str,
    pub deleted: bool,
}

/// A page of a list endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct List<T> {
    /// Always `list`.
    #[schema(schema_with = object_list)]
    pub object: &'static str,
    pub data: Vec<T>,
    /// `null` for an empty page.
    #[schema(required)]
    pub first_id: Option<String>,
    #[schema(required)]
    pub last_id: Option<String>,
    pub has_more: bool,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Model {
    pub id: String,
    /// Always `model`.
    #[schema(schema_with = object_model)]
    pub object: &'static str,
    /// Always 0.
    pub created: i64,
    pub owned_by: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    #[schema(schema_with = object_list)]
    pub object: &'static str,
    pub data: Vec<Model>,
}

/// The answer of `POST /v1/responses/compact`: the compacted window, to be sent as the input
/// of a new response (it is not stored and has no response id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Compacted {
    pub id: String,
    /// Always `response.compaction`.
    #[schema(schema_with = object_compaction)]
    pub object: String,
    pub output: Vec<Item>,
    pub created_at: i64,
    pub usage: Usage,
}
