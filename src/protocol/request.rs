//! Request bodies. Unknown parameters are refused (as the OpenAI API does) so that a misspelt
//! field is an error instead of a silently ignored setting.

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, Object, ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::field::{FieldError, json_kind, optional, typed};
use super::items::Item;
use super::limits::RequestLimits;
use super::schema::{any_of, array_of, described, one_of, or_null, reference, string, tagged};
use super::tools::{ToolChoiceSchema, ToolEntry};

/// `POST /v1/responses`
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateResponse {
    /// A model the service routes (`GET /v1/models`) and the key allows; else 400
    /// `model_not_found`.
    #[schema(value_type = String, required, min_length = 1, example = "gpt-4o-mini")]
    pub model: Option<String>,
    /// A string (one user message) or a list of items. Required unless
    /// `previous_response_id` is set.
    // Parsed by `CreateResponse::input_entries`, naming the path of every problem.
    #[schema(value_type = Option<Input>)]
    pub input: Option<Value>,
    pub instructions: Option<String>,
    #[schema(schema_with = metadata_schema)]
    pub metadata: Option<Map<String, Value>>,
    pub store: Option<bool>,
    pub stream: Option<bool>,
    /// Accepted and ignored.
    pub stream_options: Option<Value>,
    /// Return at once with a `queued` response; requires `store` not `false`.
    pub background: Option<bool>,
    #[schema(min_length = 1)]
    pub previous_response_id: Option<String>,
    #[schema(value_type = Option<Vec<ToolEntry>>)]
    pub tools: Option<Vec<Value>>,
    #[schema(value_type = Option<ToolChoiceSchema>)]
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tool_calls: Option<u64>,
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    #[schema(minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    #[schema(minimum = -2, maximum = 2)]
    pub presence_penalty: Option<f64>,
    #[schema(minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<f64>,
    #[schema(maximum = 20)]
    pub top_logprobs: Option<u32>,
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<u64>,
    #[schema(value_type = Option<TextConfig>)]
    pub text: Option<Value>,
    #[schema(value_type = Option<ReasoningConfig>)]
    pub reasoning: Option<Value>,
    #[schema(schema_with = truncation_request_schema)]
    pub truncation: Option<String>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub service_tier: Option<String>,
    /// Accepted for compatibility; this service produces no optional extra output data.
    pub include: Option<Vec<String>>,
    /// Prompt templates are not supported: only `null` is accepted.
    #[schema(schema_with = null_only)]
    pub prompt: Option<Value>,
    /// The conversation (`conv_…`, or `{"id": "conv_…"}`) whose items come before `input`,
    /// and to which the response adds its own.
    #[schema(schema_with = conversation_param)]
    pub conversation: Option<Value>,
    /// Accepted for compatibility (Codex sends it); not stored or echoed.
    pub client_metadata: Option<Value>,
}

/// `input`: a string (one user message) or a list of input items (parsed by [`parse_input`]).
pub struct Input;

impl ToSchema for Input {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((InputItem::name().into_owned(), InputItem::schema()));
        <InputItem as ToSchema>::schemas(schemas);
    }
}

impl PartialSchema for Input {
    fn schema() -> RefOr<Schema> {
        described(
            "A string (one user message) or a list of input items.",
            one_of([string().into(), array_of::<InputItem>().into()]),
        )
    }
}

/// One entry of `input`: an item, a bare `{role, content}` message, or a reference to an
/// item of an earlier response.
pub struct InputItem;

impl ToSchema for InputItem {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Item::name().into_owned(), Item::schema()));
        <Item as ToSchema>::schemas(schemas);
    }
}

impl PartialSchema for InputItem {
    fn schema() -> RefOr<Schema> {
        let bare_message = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("role", reference::<super::items::Role>())
            .property("content", super::items::content_schema())
            .required("role")
            .required("content")
            .description(Some("A message without its `type`."));
        let item_reference = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("type", super::schema::constant("item_reference"))
            .property("id", string())
            .required("type")
            .required("id")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "An item of an earlier response of the caller's, by its id (unknown: 400 naming `input[i].id`).",
            ));
        any_of([
            reference::<Item>().into(),
            bare_message.into(),
            item_reference.into(),
        ])
        .into()
    }
}

/// `text` of a request and of the Response object: the output format, and other keys echoed
/// as given.
pub struct TextConfig;

impl ToSchema for TextConfig {}

impl PartialSchema for TextConfig {
    fn schema() -> RefOr<Schema> {
        let json_schema = tagged("json_schema")
            .property("name", string())
            .property("schema", Object::with_type(Type::Object))
            .property(
                "strict",
                ObjectBuilder::new().schema_type(or_null(Type::Boolean)),
            )
            .property("description", super::schema::nullable_string())
            .required("name")
            .required("schema");
        let format = one_of([
            tagged("text").into(),
            tagged("json_object").into(),
            json_schema.into(),
        ]);
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("format", format)
            .description(Some(
                "`format` is sent upstream as `response_format`; the Response object always has it (default `{\"type\": \"text\"}`).",
            ))
            .into()
    }
}

/// `reasoning` of a request and of the Response object: `effort` is sent upstream, the rest
/// echoed.
pub struct ReasoningConfig;

impl ToSchema for ReasoningConfig {}

impl PartialSchema for ReasoningConfig {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("effort", super::schema::nullable_string())
            .property("summary", super::schema::nullable_string())
            .description(Some("Default `{\"effort\": null, \"summary\": null}`."))
            .into()
    }
}

/// `truncation` of the Response object.
pub fn truncation_schema() -> Object {
    super::schema::one_of_strings(&["auto", "disabled"])
}

/// `truncation` of a request: as echoed, or `null` (`disabled`).
fn truncation_request_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(or_null(Type::String))
        .enum_values(Some([
            Value::from("auto"),
            Value::from("disabled"),
            Value::Null,
        ]))
        .build()
}

/// `metadata`: string values, within the standard's limits (the defaults of `[limits]`).
fn metadata_schema() -> Object {
    let defaults = RequestLimits::default();
    ObjectBuilder::new()
        .schema_type(or_null(Type::Object))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(defaults.metadata_max_value_chars)),
        ))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(defaults.metadata_max_key_chars)),
        ))
        .max_properties(Some(defaults.metadata_max_pairs))
        .build()
}

/// A field whose only accepted value is `null`.
fn null_only() -> Object {
    Object::with_type(Type::Null)
}

fn conversation_param() -> Schema {
    let by_id = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("id", string())
        .required("id");
    one_of([string().into(), by_id.into(), null_only().into()])
}

impl CreateResponse {
    /// Checks the values the type system cannot: ranges, limits and unsupported features.
    pub fn validate(&self, limits: &RequestLimits) -> Result<(), FieldError> {
        if let Some(instructions) = &self.instructions
            && instructions.len() > limits.max_instructions_bytes
        {
            return Err(FieldError::new(
                "instructions",
                format!(
                    "Invalid 'instructions': {} bytes is longer than the {} bytes this service accepts.",
                    instructions.len(),
                    limits.max_instructions_bytes
                ),
            ));
        }
        check_input_size(self.input.as_ref(), limits)?;
        self.check_model_parameters()?;
        if let Some(truncation) = &self.truncation
            && truncation != "auto"
            && truncation != "disabled"
        {
            return Err(FieldError::new(
                "truncation",
                format!(
                    "Invalid value: '{truncation}'. Supported values are: 'auto' and 'disabled'."
                ),
            ));
        }
        if let Some(metadata) = &self.metadata {
            validate_metadata(metadata, limits)?;
        }
        if self.prompt.as_ref().is_some_and(|p| !p.is_null()) {
            return Err(unsupported(
                "prompt",
                "Prompt templates are not supported by this service.",
            ));
        }
        if self.conversation_id()?.is_some() {
            if self.previous_response_id.is_some() {
                return Err(FieldError::new(
                    "conversation",
                    "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'.",
                ));
            }
            if self.store == Some(false) {
                return Err(FieldError::new(
                    "store",
                    "A response in a conversation adds its items to it: 'store' cannot be false with 'conversation'.",
                ));
            }
        }
        if self.background == Some(true) && self.store == Some(false) {
            return Err(FieldError::new(
                "store",
                "Background mode requires 'store' to be true: the response is stored for polling.",
            ));
        }
        if let Some(id) = &self.previous_response_id
            && id.is_empty()
        {
            return Err(FieldError::new(
                "previous_response_id",
                "Invalid 'previous_response_id': empty string.",
            ));
        }
        self.text_format()?;
        self.check_reasoning()?;
        Ok(())
    }

    /// The model's parameters within the ranges the OpenAI API accepts, refused with its
    /// messages.
    fn check_model_parameters(&self) -> Result<(), FieldError> {
        range("temperature", self.temperature, 0.0, 2.0)?;
        range("top_p", self.top_p, 0.0, 1.0)?;
        range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        if let Some(n) = self.top_logprobs
            && n > 20
        {
            return Err(FieldError::new(
                "top_logprobs",
                format!(
                    "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20, but got {n} instead."
                ),
            ));
        }
        if self.max_output_tokens == Some(0) {
            return Err(FieldError::new(
                "max_output_tokens",
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.",
            ));
        }
        Ok(())
    }

    /// `reasoning.effort` (sent upstream) and `reasoning.summary` (echoed), when given, are
    /// strings.
    fn check_reasoning(&self) -> Result<(), FieldError> {
        if let Some(reasoning) = &self.reasoning {
            optional(
                reasoning,
                "effort",
                "reasoning",
                Value::is_string,
                "a string",
            )?;
            optional(
                reasoning,
                "summary",
                "reasoning",
                Value::is_string,
                "a string",
            )?;
        }
        Ok(())
    }

    /// The input as items: a string is one user message. Each item gets an id;
    /// `item_reference`s are left for the engine to resolve.
    pub fn input_entries(&self) -> Result<Vec<InputEntry>, FieldError> {
        parse_input(self.input.as_ref())
    }

    /// The structured-output format requested in `text.format`, if any besides plain text.
    pub fn text_format(&self) -> Result<Option<Value>, FieldError> {
        let Some(format) = self.text.as_ref().and_then(|t| t.get("format")) else {
            return Ok(None);
        };
        match format.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(format.clone())),
            Some("json_schema") => {
                if !format.get("schema").is_some_and(Value::is_object) {
                    return Err(FieldError::new(
                        "text.format.schema",
                        "Missing required parameter: 'text.format.schema'.",
                    ));
                }
                if !format.get("name").is_some_and(Value::is_string) {
                    return Err(FieldError::new(
                        "text.format.name",
                        "Missing required parameter: 'text.format.name'.",
                    ));
                }
                // Passed on upstream and echoed: of their standard types, or left out.
                optional(
                    format,
                    "strict",
                    "text.format",
                    Value::is_boolean,
                    "a boolean",
                )?;
                optional(
                    format,
                    "description",
                    "text.format",
                    Value::is_string,
                    "a string",
                )?;
                Ok(Some(format.clone()))
            }
            Some(other) => Err(FieldError::new(
                "text.format.type",
                format!(
                    "Invalid value: '{other}'. Supported values are: 'text', 'json_object' and 'json_schema'."
                ),
            )),
            None => Err(FieldError::new(
                "text.format.type",
                "Missing required parameter: 'text.format.type'.",
            )),
        }
    }
}

fn unsupported(param: &str, message: &str) -> FieldError {
    FieldError::new(param, message)
}

fn range(param: &str, value: Option<f64>, min: f64, max: f64) -> Result<(), FieldError> {
    match value {
        Some(v) if !(min..=max).contains(&v) => Err(FieldError::new(
            param,
            format!(
                "Invalid '{param}': expected a value between {min} and {max}, but got {v} instead."
            ),
        )),
        _ => Ok(()),
    }
}

/// `input` within the limits: its number of items, and its size (as JSON; a string's own
/// length).
pub fn check_input_size(input: Option<&Value>, limits: &RequestLimits) -> Result<(), FieldError> {
    let Some(input) = input else { return Ok(()) };
    if let Value::Array(items) = input
        && items.len() > limits.max_input_items
    {
        return Err(FieldError::new(
            "input",
            format!(
                "Invalid 'input': {} items is more than the {} this service accepts.",
                items.len(),
                limits.max_input_items
            ),
        ));
    }
    let bytes = match input {
        Value::String(text) => text.len(),
        other => serde_json::to_vec(other).map_or(0, |v| v.len()),
    };
    if bytes > limits.max_input_bytes {
        return Err(FieldError::new(
            "input",
            format!(
                "Invalid 'input': {bytes} bytes is more than the {} bytes this service accepts.",
                limits.max_input_bytes
            ),
        ));
    }
    Ok(())
}

pub(crate) fn validate_metadata(
    metadata: &Map<String, Value>,
    limits: &RequestLimits,
) -> Result<(), FieldError> {
    let (max_pairs, max_key, max_value) = (
        limits.metadata_max_pairs,
        limits.metadata_max_key_chars,
        limits.metadata_max_value_chars,
    );
    if metadata.len() > max_pairs {
        return Err(FieldError::new(
            "metadata",
            format!(
                "Invalid 'metadata': too many properties. Expected an object with at most {max_pairs} properties, but got {} instead.",
                metadata.len()
            ),
        ));
    }
    for (key, value) in metadata {
        if key.chars().count() > max_key {
            return Err(FieldError::new(
                "metadata",
                format!("Invalid 'metadata': key '{key}' is longer than {max_key} characters."),
            ));
        }
        let Some(text) = value.as_str() else {
            return Err(FieldError::new(
                format!("metadata.{key}"),
                format!(
                    "Invalid type for 'metadata.{key}': expected a string, but got {} instead.",
                    json_kind(value)
                ),
            ));
        };
        if text.chars().count() > max_value {
            return Err(FieldError::new(
                format!("metadata.{key}"),
                format!(
                    "Invalid 'metadata.{key}': string too long. Expected a string with maximum length {max_value}."
                ),
            ));
        }
    }
    Ok(())
}

impl CreateResponse {
    /// The id `conversation` names: a string, or `{"id": …}`.
    pub fn conversation_id(&self) -> Result<Option<String>, FieldError> {
        match &self.conversation {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(id)) => Ok(Some(id.clone())),
            Some(Value::Object(object)) => match object.get("id") {
                Some(Value::String(id)) => Ok(Some(id.clone())),
                _ => Err(FieldError::new(
                    "conversation.id",
                    "Missing required parameter: 'conversation.id'.",
                )),
            },
            Some(other) => Err(FieldError::new(
                "conversation",
                format!(
                    "Invalid type for 'conversation': expected a string or an object with an 'id', but got {} instead.",
                    json_kind(other)
                ),
            )),
        }
    }
}

/// One entry of `input`: an item, or a reference to an item of an earlier response (its id),
/// which only the store can resolve.
#[derive(Clone, Debug, PartialEq)]
pub enum InputEntry {
    Item(Item),
    Reference(String),
}

/// Parses `input`: a string, or a list of items where a bare `{role, content}` is a message.
pub fn parse_input(input: Option<&Value>) -> Result<Vec<InputEntry>, FieldError> {
    let mut items = match input {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![InputEntry::Item(Item::Message(super::items::Message {
            id: String::new(),
            role: super::items::Role::User,
            content: vec![super::items::ContentPart::InputText { text: text.clone() }],
            status: None,
            phase: None,
        }))],
        Some(Value::Array(values)) => {
            let mut items = Vec::with_capacity(values.len());
            for (index, value) in values.iter().enumerate() {
                items.push(parse_item(value, &format!("input[{index}]"))?);
            }
            items
        }
        Some(other) => {
            return Err(FieldError::new(
                "input",
                format!(
                    "Invalid type for 'input': expected a string or an array of input items, but got {} instead.",
                    json_kind(other)
                ),
            ));
        }
    };
    for entry in &mut items {
        if let InputEntry::Item(item) = entry {
            item.normalise();
        }
    }
    Ok(items)
}

pub(crate) fn parse_item(value: &Value, path: &str) -> Result<InputEntry, FieldError> {
    if value.get("type").and_then(Value::as_str) == Some("item_reference") {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Reference {
            #[serde(rename = "type")]
            _kind: String,
            id: String,
        }
        let reference: Reference = typed(value.clone(), path)?;
        return Ok(InputEntry::Reference(reference.id));
    }
    parse_plain_item(value, path).map(InputEntry::Item)
}

fn parse_plain_item(value: &Value, path: &str) -> Result<Item, FieldError> {
    let mut value = value.clone();
    if let Value::Object(object) = &mut value
        && !object.contains_key("type")
        && object.contains_key("role")
    {
        object.insert("type".into(), Value::String("message".into()));
    }
    // Each type is parsed as its own struct: through the tagged enum, serde would lose the
    // path of a nested error (`input[0]` instead of `input[0].role`).
    match value.get("type").and_then(Value::as_str) {
        Some("message") => typed(value, path).map(Item::Message),
        Some("function_call") => typed(value, path).map(Item::FunctionCall),
        Some("function_call_output") => typed(value, path).map(Item::FunctionCallOutput),
        Some("mcp_call") => typed(value, path).map(Item::McpCall),
        Some("mcp_list_tools") => typed(value, path).map(Item::McpListTools),
        Some("custom_tool_call") => typed(value, path).map(Item::CustomToolCall),
        Some("custom_tool_call_output") => typed(value, path).map(Item::CustomToolCallOutput),
        Some("local_shell_call") => typed(value, path).map(Item::LocalShellCall),
        Some("local_shell_call_output") => typed(value, path).map(Item::LocalShellCallOutput),
        Some("mcp_approval_request") => typed(value, path).map(Item::McpApprovalRequest),
        Some("mcp_approval_response") => typed(value, path).map(Item::McpApprovalResponse),
        Some("compaction") => typed(value, path).map(Item::Compaction),
        Some("reasoning") => typed(value, path).map(Item::Reasoning),
        Some("additional_tools") => typed(value, path).map(Item::AdditionalTools),
        Some(other) => Err(FieldError::new(
            format!("{path}.type"),
            format!(
                "Invalid value for '{path}.type': '{other}'. Expected one of 'message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'local_shell_call', 'local_shell_call_output', 'mcp_list_tools', 'mcp_call', 'mcp_approval_request', 'mcp_approval_response', 'compaction', 'reasoning', 'additional_tools', 'item_reference'."
            ),
        )),
        None => Err(FieldError::new(
            format!("{path}.type"),
            format!("Missing required parameter: '{path}.type'."),
        )),
    }
}

/// `POST /v1/responses/{id}/submit_tool_outputs` (SPEC §8).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitToolOutputs {
    /// One per pending call, in any order.
    #[serde(default)]
    pub tool_outputs: Vec<SubmittedOutput>,
    /// One per pending approval request (extension).
    #[serde(default)]
    pub tool_approvals: Vec<ToolApproval>,
    pub stream: Option<bool>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmittedOutput {
    /// The pending call's `call_id`.
    pub tool_call_id: String,
    pub output: super::items::ToolOutput,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolApproval {
    pub approval_request_id: String,
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Query of `GET /v1/responses/{id}/input_items` (`include[]` is accepted and ignored).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListInputItems {
    /// Items on a page, 1 to 100 (default 20).
    // Taken as text and parsed by the handler, so that a bad value's error names it.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// `asc` or `desc` (default).
    #[param(value_type = Option<String>, pattern = "^(asc|desc)$")]
    pub order: Option<String>,
    /// An item id of this response: the page starts after it.
    pub after: Option<String>,
}

/// Query of `GET /v1/responses` (an extension: the caller's responses, newest first), besides
/// `metadata[KEY]=VALUE` pairs, read from the query string by the handler.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListResponses {
    /// Responses on a page, 1 to 100 (default 20).
    // Taken as text and parsed by the handler, so that a bad value's error names it.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// A response id: the page starts after it (the previous page's `last_id`).
    pub after: Option<String>,
    /// Only responses with this status.
    #[param(value_type = Option<String>,
        pattern = "^(queued|in_progress|requires_action|completed|failed|incomplete|cancelled|expired)$")]
    pub status: Option<String>,
    /// Only responses of this model (as the request named it).
    pub model: Option<String>,
    /// Only responses created at or after this Unix time (seconds).
    #[param(value_type = Option<i64>)]
    pub created_after: Option<String>,
    /// Only responses created before this Unix time (seconds).
    #[param(value_type = Option<i64>)]
    pub created_before: Option<String>,
    /// `true`: only responses paused until the client answers (`requires_action`); `false`:
    /// only the others.
    #[param(value_type = Option<bool>)]
    pub waiting: Option<String>,
}

/// Query of `GET /v1/responses/{id}`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RetrieveResponse {
    /// Replay the event log, then follow the run live (`text/event-stream`).
    pub stream: Option<bool>,
    /// Replay the events after this sequence number (else the `Last-Event-ID` header's).
    pub starting_after: Option<u64>,
}

/// `POST /v1/responses/compact` (Open Responses): a context window to compact.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactRequest {
    /// As in `POST /v1/responses`.
    #[schema(value_type = String, required, min_length = 1, example = "gpt-4o-mini")]
    pub model: Option<String>,
    /// A string or a list of items, as in `POST /v1/responses`.
    #[schema(value_type = Option<Input>)]
    pub input: Option<Value>,
    #[schema(min_length = 1)]
    pub previous_response_id: Option<String>,
    pub instructions: Option<String>,
    /// Accepted for compatibility.
    pub prompt_cache_key: Option<String>,
}
