//! Personas: the fake upstream speaking as one provider. A persona streams reasoning where and
//! as that provider does, and refuses what that provider's documentation says it refuses, with
//! the error status and body it documents, so that a test of switchyard fails where the real
//! provider would. Each refusal cites its source.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which provider the fake plays; `generic` accepts everything, as the fake always did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Persona {
    #[default]
    Generic,
    Openai,
    Azure,
    Deepseek,
    Vllm,
    Ollama,
    Llamacpp,
    Openrouter,
    Gemini,
    Anthropic,
}

/// Where a persona's streamed reasoning goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningForm {
    /// In this field of the delta.
    Field(&'static str),
    /// `<think>…</think>` in the content (a model served without a reasoning parser).
    ThinkTags,
    /// Not streamed at all (the provider keeps it; only its token count is reported).
    Hidden,
}

/// What the fake saw of a request besides its body.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Seen {
    pub path: String,
    pub query: Option<String>,
    pub authorization: Option<String>,
    pub api_key: Option<String>,
}

impl Persona {
    pub const ALL: [Persona; 10] = [
        Persona::Generic,
        Persona::Openai,
        Persona::Azure,
        Persona::Deepseek,
        Persona::Vllm,
        Persona::Ollama,
        Persona::Llamacpp,
        Persona::Openrouter,
        Persona::Gemini,
        Persona::Anthropic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Persona::Generic => "generic",
            Persona::Openai => "openai",
            Persona::Azure => "azure",
            Persona::Deepseek => "deepseek",
            Persona::Vllm => "vllm",
            Persona::Ollama => "ollama",
            Persona::Llamacpp => "llamacpp",
            Persona::Openrouter => "openrouter",
            Persona::Gemini => "gemini",
            Persona::Anthropic => "anthropic",
        }
    }

    pub fn parse(name: &str) -> Option<Persona> {
        Persona::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Where this provider streams a model's reasoning in chat completions.
    pub fn reasoning(self) -> ReasoningForm {
        match self {
            // api-docs.deepseek.com/guides/thinking_mode: `reasoning_content`; llama-server's
            // default `--reasoning-format deepseek` does the same.
            Persona::Deepseek | Persona::Llamacpp => ReasoningForm::Field("reasoning_content"),
            // vLLM's reasoning parsers (`reasoning` since 0.10.2), Ollama's OpenAI
            // compatibility and OpenRouter stream `reasoning`.
            Persona::Vllm | Persona::Ollama | Persona::Openrouter => {
                ReasoningForm::Field("reasoning")
            }
            // A self-hosted model without a reasoning parser writes its thinking as text.
            Persona::Generic => ReasoningForm::ThinkTags,
            // OpenAI and Azure never return reasoning text in chat completions (only
            // `completion_tokens_details.reasoning_tokens`); Anthropic's and Gemini's OpenAI
            // compatibility layers do not return it unless asked in their own extensions.
            Persona::Openai | Persona::Azure | Persona::Anthropic | Persona::Gemini => {
                ReasoningForm::Hidden
            }
        }
    }

    /// The path the provider serves chat completions on.
    pub fn serves(self, path: &str) -> bool {
        match self {
            // Azure's deployment URLs (learn.microsoft.com/azure/ai-foundry/openai/reference).
            Persona::Azure => {
                path.starts_with("/openai/deployments/") && path.ends_with("/chat/completions")
                    || path == "/openai/v1/chat/completions"
            }
            _ => path == "/v1/chat/completions",
        }
    }

    /// What the real provider refuses of this request: its status and error body.
    pub fn refusal(self, request: &Value, seen: &Seen) -> Option<(u16, Value)> {
        match self {
            Persona::Openai => openai_refusal(request),
            Persona::Azure => azure_refusal(request, seen),
            Persona::Deepseek => deepseek_refusal(request),
            Persona::Gemini => gemini_refusal(request),
            _ => None,
        }
    }

    /// The signature OpenRouter gives a reasoning block of an Anthropic model once it is
    /// streamed (a `reasoning_details` fragment with the block's `index` and its `signature`,
    /// openrouter.ai/docs "Reasoning Tokens"); a real one is an opaque base64 blob.
    pub fn block_signature(self, text: &str) -> String {
        let hex: String = text.bytes().take(12).map(|b| format!("{b:02x}")).collect();
        format!("EqQB{hex}")
    }

    /// The signature the provider puts on a streamed tool call, if it signs this one: Gemini 3
    /// signs the first function call of each response (`extra_content.google.thought_signature`,
    /// ai.google.dev/gemini-api/docs/thought-signatures).
    pub fn call_signature(self, model: &str, first: bool, name: &str) -> Option<String> {
        (self == Persona::Gemini && gemini_signs(model) && first).then(|| gemini_signature(name))
    }
}

/// Gemini 3 models sign their function calls and check the signatures.
fn gemini_signs(model: &str) -> bool {
    model.trim_start_matches("models/").starts_with("gemini-3")
}

/// The fake's thought signature of a call to `name` (a real one is an opaque base64 blob of
/// the model's thoughts; the call's id is the client's to choose, so it does not depend on it).
fn gemini_signature(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("CiQB{hex}+/w==")
}

/// Google's stand-in for a signature that is not known, which skips the check.
const GEMINI_STAND_IN: &str = "skip_thought_signature_validator";

/// Gemini 3 "enforces strict validation on the current turn": the first function call of each
/// step since the last user message must carry the signature it was given, else a 400
/// (ai.google.dev/gemini-api/docs/thought-signatures). The bodies are the ones the API answers,
/// a list holding one error, as Gemini's OpenAI-compatible endpoint answers errors.
fn gemini_refusal(request: &Value) -> Option<(u16, Value)> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    if !gemini_signs(model) {
        return None;
    }
    let messages = request.get("messages")?.as_array()?;
    let turn = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map_or(0, |i| i + 1);
    for (position, message) in messages.iter().enumerate().skip(turn) {
        let Some(first) = message.pointer("/tool_calls/0") else {
            continue;
        };
        let name = first.pointer("/function/name").and_then(Value::as_str);
        let message = match first
            .pointer("/extra_content/google/thought_signature")
            .and_then(Value::as_str)
        {
            None => format!(
                "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{}` , position {}. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                name.unwrap_or_default(),
                position + 1
            ),
            Some(signature)
                if signature != GEMINI_STAND_IN
                    && Some(signature) != name.map(gemini_signature).as_deref() =>
            {
                "Corrupted thought signature.".to_string()
            }
            Some(_) => continue,
        };
        return Some((
            400,
            json!([{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}]),
        ));
    }
    None
}

/// OpenAI's error body (platform.openai.com/docs/guides/error-codes).
pub fn openai_error(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// Whether `model` is one of OpenAI's reasoning models (o-series, gpt-5 family).
fn openai_reasoning_model(model: &str) -> bool {
    let o_series =
        model.len() > 1 && model.starts_with('o') && model.as_bytes()[1].is_ascii_digit();
    o_series || (model.starts_with("gpt-5") && !model.starts_with("gpt-5-chat"))
}

/// OpenAI refuses `max_tokens` ("not compatible with o-series models", API reference of
/// `max_tokens`) and non-default sampling parameters for its reasoning models, with these
/// bodies (as the API answers them: `unsupported_parameter`, `unsupported_value`).
fn openai_refusal(request: &Value) -> Option<(u16, Value)> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    if !openai_reasoning_model(model) {
        return None;
    }
    if request.get("max_tokens").is_some() {
        let message = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.";
        return Some((
            400,
            openai_error(
                message,
                "invalid_request_error",
                Some("max_tokens"),
                Some("unsupported_parameter"),
            ),
        ));
    }
    if let Some(value) = request.get("temperature").and_then(Value::as_f64)
        && value != 1.0
    {
        let message = format!(
            "Unsupported value: 'temperature' does not support {value} with this model. Only the default (1) value is supported."
        );
        return Some((
            400,
            openai_error(
                &message,
                "invalid_request_error",
                Some("temperature"),
                Some("unsupported_value"),
            ),
        ));
    }
    for param in ["top_p", "presence_penalty", "frequency_penalty"] {
        if request.get(param).is_some() {
            let message =
                format!("Unsupported parameter: '{param}' is not supported with this model.");
            return Some((
                400,
                openai_error(
                    &message,
                    "invalid_request_error",
                    Some(param),
                    Some("unsupported_parameter"),
                ),
            ));
        }
    }
    None
}

/// Azure OpenAI: the key in the `api-key` header (a bearer token is an Entra ID token, which a
/// key is not), and an `api-version` on deployment URLs.
fn azure_refusal(request: &Value, seen: &Seen) -> Option<(u16, Value)> {
    if seen.api_key.is_none() {
        let message = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.";
        return Some((401, json!({"error": {"code": "401", "message": message}})));
    }
    let versioned = seen
        .query
        .as_deref()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("api-version=")));
    if seen.path.starts_with("/openai/deployments/") && !versioned {
        return Some((
            404,
            json!({"error": {"code": "404", "message": "Resource not found"}}),
        ));
    }
    openai_refusal(request)
}

/// DeepSeek's chat API takes text only (api-docs.deepseek.com, Create Chat Completion: content
/// parts of type `text`): a message with any other part (an image) is refused while its body
/// is read, with this body (as the API answers it, e.g. reported in rikkahub/rikkahub#1433).
fn deepseek_text_only(request: &Value) -> Option<(u16, Value)> {
    let messages = request.get("messages")?.as_array()?;
    let (index, kind) = messages.iter().enumerate().find_map(|(index, message)| {
        let parts = message.get("content")?.as_array()?;
        let kind = parts
            .iter()
            .filter_map(|p| p.get("type").and_then(Value::as_str))
            .find(|kind| *kind != "text")?;
        Some((index, kind))
    })?;
    let column = request
        .to_string()
        .find(&format!("\"{kind}\""))
        .unwrap_or(0)
        + 1;
    let message = format!(
        "Failed to deserialize the JSON body into the target type: messages[{index}]: unknown variant `{kind}`, expected `text` at line 1 column {column}"
    );
    Some((
        400,
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}),
    ))
}

/// DeepSeek's thinking mode (`deepseek-reasoner`, or `thinking: {"type": "enabled"}`):
/// "for turns that do perform tool calls, the reasoning_content must be fully passed back to
/// the API in all subsequent requests. If your code does not correctly pass back
/// reasoning_content, the API will return a 400 error" (api-docs.deepseek.com/guides/
/// thinking_mode); the body is the one the API answers (V4 wording).
fn deepseek_refusal(request: &Value) -> Option<(u16, Value)> {
    if let Some(refusal) = deepseek_text_only(request) {
        return Some(refusal);
    }
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    let thinking = model == "deepseek-reasoner"
        || request.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    if !thinking {
        return None;
    }
    let missing = request.get("messages")?.as_array()?.iter().any(|m| {
        m.get("role").and_then(Value::as_str) == Some("assistant")
            && m.get("tool_calls").is_some()
            && m.get("reasoning_content").and_then(Value::as_str).is_none()
    });
    missing.then(|| {
        let message = "The reasoning_content in the thinking mode must be passed back to the API.";
        (
            400,
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}),
        )
    })
}
