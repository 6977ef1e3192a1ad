//! The Response object (SPEC §4). Every key is always serialised, `null` when not applicable,
//! because strict clients reject a missing key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::items::Item;
use super::request::CreateResponse;
use super::tools::echo_tools;

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
    /// The conversation the response reads and adds to (left out for a response in none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationRef>,
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
const DEFAULT_TEMPERATURE: f64 = 1.0;
const DEFAULT_TOP_P: f64 = 1.0;
const DEFAULT_PENALTY: f64 = 0.0;

fn one_if_null<'de, D: serde::Deserializer<'de>>(de: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(de)?.unwrap_or(1.0))
}

fn zero_if_null<'de, D: serde::Deserializer<'de>>(de: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(de)?.unwrap_or(0.0))
}

/// A sampling setting to send upstream: none when it is the default, so that a provider
/// whose own default differs keeps it (a stored body no longer says whether the client set
/// the default explicitly).
fn unless_default(value: f64, default: f64) -> Option<f64> {
    (value != default).then_some(value)
}

/// The mapping between a request and the stored Response object, both ways: a run is stored
/// as its body alone, and every later execution of it (after a pause, a claim, a takeover)
/// reads its request back from there.
impl ResponseObject {
    /// The Response object of a new run of `request` on `model` (the request's model, as
    /// routed): every setting echoed, defaults filled in, nothing produced yet.
    pub fn for_request(
        id: &str,
        model: &str,
        request: &CreateResponse,
        created_at: i64,
    ) -> ResponseObject {
        let mut text = match &request.text {
            Some(Value::Object(object)) => object.clone(),
            _ => Map::new(),
        };
        text.entry("format")
            .or_insert_with(|| json!({"type": "text"}));
        ResponseObject {
            id: id.to_string(),
            object: "response".into(),
            created_at,
            completed_at: None,
            status: ResponseStatus::InProgress,
            error: None,
            incomplete_details: None,
            instructions: request.instructions.clone(),
            model: model.to_string(),
            output: Vec::new(),
            parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
            previous_response_id: request.previous_response_id.clone(),
            conversation: request
                .conversation_id()
                .ok()
                .flatten()
                .map(|id| ConversationRef { id }),
            tools: echo_tools(request.tools.as_deref().unwrap_or_default()),
            tool_choice: request.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            truncation: request
                .truncation
                .clone()
                .unwrap_or_else(|| "disabled".into()),
            text: Value::Object(text),
            reasoning: request
                .reasoning
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"effort": null, "summary": null})),
            temperature: request.temperature.unwrap_or(DEFAULT_TEMPERATURE),
            top_p: request.top_p.unwrap_or(DEFAULT_TOP_P),
            presence_penalty: request.presence_penalty.unwrap_or(DEFAULT_PENALTY),
            frequency_penalty: request.frequency_penalty.unwrap_or(DEFAULT_PENALTY),
            top_logprobs: Some(request.top_logprobs.unwrap_or(0)),
            max_output_tokens: request.max_output_tokens,
            max_tool_calls: request.max_tool_calls,
            store: request.store.unwrap_or(true),
            background: request.background.unwrap_or(false),
            service_tier: Some(
                request
                    .service_tier
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            ),
            metadata: request.metadata.clone().unwrap_or_default(),
            safety_identifier: request.safety_identifier.clone(),
            prompt_cache_key: request.prompt_cache_key.clone(),
            user: request.user.clone(),
            usage: None,
            required_action: None,
        }
    }

    /// The request this run was created with, as far as the body keeps it: every setting of
    /// [`ResponseObject::for_request`], so that `for_request` of it gives this body back (the
    /// input lives in the run's input items; a sampling setting equal to its default comes back
    /// unset).
    pub fn request(&self) -> CreateResponse {
        CreateResponse {
            model: Some(self.model.clone()),
            instructions: self.instructions.clone(),
            metadata: Some(self.metadata.clone()),
            store: Some(self.store),
            background: Some(self.background),
            previous_response_id: self.previous_response_id.clone(),
            tools: Some(self.tools.clone()),
            tool_choice: Some(self.tool_choice.clone()),
            parallel_tool_calls: Some(self.parallel_tool_calls),
            max_tool_calls: self.max_tool_calls,
            temperature: unless_default(self.temperature, DEFAULT_TEMPERATURE),
            top_p: unless_default(self.top_p, DEFAULT_TOP_P),
            presence_penalty: unless_default(self.presence_penalty, DEFAULT_PENALTY),
            frequency_penalty: unless_default(self.frequency_penalty, DEFAULT_PENALTY),
            top_logprobs: self.top_logprobs,
            max_output_tokens: self.max_output_tokens,
            text: Some(self.text.clone()),
            reasoning: Some(self.reasoning.clone()),
            truncation: Some(self.truncation.clone()),
            user: self.user.clone(),
            safety_identifier: self.safety_identifier.clone(),
            prompt_cache_key: self.prompt_cache_key.clone(),
            service_tier: self.service_tier.clone(),
            ..CreateResponse::default()
        }
    }

    /// The body as its run executes again (resumed, claimed): in progress, waiting for
    /// nothing, not completed, its usage `null` until it stops again (SPEC §4). Returns the
    /// usage so far, to which the run adds.
    pub fn reopen(&mut self) -> Option<Usage> {
        self.status = ResponseStatus::InProgress;
        self.required_action = None;
        self.completed_at = None;
        self.usage.take()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(value: Value) -> CreateResponse {
        serde_json::from_value(value).unwrap()
    }

    /// Every setting a request can give, none of them at its default.
    fn every_setting() -> Value {
        json!({
            "model": "gpt-4o", "input": "hi", "instructions": "Be brief",
            "metadata": {"k": "v"}, "store": false, "background": true,
            "previous_response_id": "resp_1",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": "required", "parallel_tool_calls": false, "max_tool_calls": 3,
            "temperature": 0.5, "top_p": 0.9, "presence_penalty": 0.1,
            "frequency_penalty": 0.2, "top_logprobs": 2, "max_output_tokens": 100,
            "text": {"format": {"type": "json_object"}, "verbosity": "low"},
            "reasoning": {"effort": "high", "summary": "auto"}, "truncation": "auto",
            "user": "u", "safety_identifier": "s", "prompt_cache_key": "p",
            "service_tier": "flex"
        })
    }

    #[test]
    fn a_stored_body_gives_back_the_request_that_made_it() {
        for given in [json!({"model": "m", "input": "hi"}), every_setting()] {
            let body = ResponseObject::for_request("resp_x", "m", &request(given.clone()), 7);
            let again = ResponseObject::for_request("resp_x", "m", &body.request(), 7);
            assert_eq!(again, body, "{given}");
        }
    }

    #[test]
    fn the_request_read_back_keeps_every_setting_a_run_uses() {
        let given = request(every_setting());
        let back = ResponseObject::for_request("resp_x", "gpt-4o", &given, 7).request();
        let settings = |r: &CreateResponse| {
            json!([
                r.model,
                r.instructions,
                r.metadata,
                r.store,
                r.background,
                r.previous_response_id,
                r.tool_choice,
                r.parallel_tool_calls,
                r.max_tool_calls,
                r.temperature,
                r.top_p,
                r.presence_penalty,
                r.frequency_penalty,
                r.top_logprobs,
                r.max_output_tokens,
                r.text,
                r.reasoning,
                r.truncation,
                r.user,
                r.safety_identifier,
                r.prompt_cache_key,
                r.service_tier
            ])
        };
        assert_eq!(settings(&back), settings(&given));
        // Tools come back echoed: with every key of their standard shape.
        assert_eq!(back.tools.as_ref().unwrap()[0]["name"], "f");
        assert_eq!(back.tools.as_ref().unwrap()[0]["strict"], Value::Null);
    }

    #[test]
    fn a_default_sampling_setting_comes_back_unset() {
        let given = request(json!({"model": "m", "temperature": 1.0, "top_p": 1.0}));
        let back = ResponseObject::for_request("resp_x", "m", &given, 7).request();
        assert_eq!((back.temperature, back.top_p), (None, None));
        assert_eq!(
            (back.presence_penalty, back.frequency_penalty),
            (None, None)
        );
    }

    #[test]
    fn a_reopened_body_runs_again_and_hands_over_its_usage() {
        let mut body = ResponseObject::for_request("resp_x", "m", &request(json!({})), 7);
        body.status = ResponseStatus::Completed;
        body.completed_at = Some(9);
        body.required_action = Some(RequiredAction::new(10, PendingWork::default()));
        body.usage = Some(Usage {
            input_tokens: 5,
            ..Usage::default()
        });
        let usage = body.reopen();
        assert_eq!(usage.map(|u| u.input_tokens), Some(5));
        assert_eq!(body.status, ResponseStatus::InProgress);
        assert_eq!(
            (body.completed_at, &body.required_action, &body.usage),
            (None, &None, &None)
        );
    }
}

/// `{"id": "conv_…"}`: the conversation a response belongs to.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize, ToSchema)]
pub struct ConversationRef {
    pub id: String,
}
