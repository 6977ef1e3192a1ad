//! What an upstream's error reply says, and who must act on it. Providers that speak
//! chat-completions write their errors in a handful of shapes ([`ErrorBody::parse`] reads them
//! all); the status and the body decide whether the request was at fault (the client is told
//! the upstream's own message and code, as a 400), this service's credentials (a 502 for the
//! operator), its URL (a 502 naming the likely fix), or the upstream itself.

use std::fmt;

use serde_json::Value;

/// How much of an error body that is not JSON is kept as its message.
const TEXT_LIMIT: usize = 500;

/// How much of an upstream's message a client is shown.
const MESSAGE_LIMIT: usize = 1_000;

/// An upstream's error reply, as far as it could be read. The message is the upstream's own
/// words, unredacted: for the log. What a client sees goes through [`Refusal`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorBody {
    pub message: String,
    /// A machine code (`context_length_exceeded`); a number in its place is not one (vLLM and
    /// llama.cpp repeat the HTTP status there).
    pub code: Option<String>,
    /// The chat-completions field at fault, when the upstream names it.
    pub param: Option<String>,
    /// `type` (OpenAI `invalid_request_error`, llama.cpp `exceed_context_size_error`), or
    /// Gemini's `status` (`INVALID_ARGUMENT`).
    pub kind: Option<String>,
}

impl ErrorBody {
    /// A whole error reply: JSON in any of the shapes below, else its text (tags stripped).
    pub fn parse(bytes: &[u8]) -> ErrorBody {
        serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|value| ErrorBody::from_json(&value))
            .unwrap_or_else(|| ErrorBody::text(&String::from_utf8_lossy(bytes)))
    }

    /// The shapes providers send:
    /// * OpenAI, Ollama, llama.cpp, OpenRouter, vLLM ≥ 0.10: `{"error": {"message", "type",
    ///   "param", "code"}}` (some with a numeric `code`);
    /// * Gemini's OpenAI-compatible endpoint: the same inside a list, `[{"error": {"code",
    ///   "message", "status"}}]`;
    /// * Ollama (older): `{"error": "text"}`;
    /// * vLLM (older): `{"object": "error", "message", "type", "param", "code": 400}`;
    /// * FastAPI servers for an unknown path: `{"detail": "Not Found"}`.
    pub fn from_json(value: &Value) -> Option<ErrorBody> {
        match value {
            Value::Array(list) => list.first().and_then(ErrorBody::from_json),
            Value::Object(map) => match map.get("error") {
                Some(error) if !error.is_null() => Some(ErrorBody::of_error(error)),
                _ if map.contains_key("message") => Some(ErrorBody::of_error(value)),
                _ => map
                    .get("detail")
                    .and_then(Value::as_str)
                    .map(ErrorBody::text),
            },
            _ => None,
        }
    }

    /// The `error` member of a reply or of a streamed chunk: an object with the fields, or a
    /// plain message.
    pub fn of_error(error: &Value) -> ErrorBody {
        let Some(object) = error.as_object() else {
            let message = error.as_str().map_or_else(|| error.to_string(), Into::into);
            return ErrorBody {
                message,
                ..ErrorBody::default()
            };
        };
        let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
        let mut body = ErrorBody {
            message: text("message").unwrap_or_else(|| error.to_string()),
            code: text("code").filter(|code| !code.is_empty()),
            param: text("param"),
            kind: text("type").or_else(|| text("status")),
        };
        // OpenRouter passes the provider's own error on as text in `metadata.raw`
        // (https://openrouter.ai/docs/api-reference/errors): its words are the useful ones.
        if let Some(raw) = error.pointer("/metadata/raw").and_then(Value::as_str) {
            let inner = ErrorBody::parse(raw.as_bytes());
            if !inner.message.is_empty() && inner.message != body.message {
                body.message = format!("{}: {}", body.message, inner.message);
            }
            body.code = body.code.or(inner.code);
            body.param = body.param.or(inner.param);
        }
        body
    }

    /// A body that is only text: a plain line, or an HTML page with its tags left out;
    /// clipped.
    fn text(text: &str) -> ErrorBody {
        let html = text.trim_start().starts_with('<');
        let mut plain = String::with_capacity(text.len().min(TEXT_LIMIT));
        let mut in_tag = false;
        for c in text.chars() {
            match c {
                '<' if html => in_tag = true,
                '>' if in_tag => {
                    in_tag = false;
                    plain.push(' ');
                }
                c if !in_tag => plain.push(c),
                _ => {}
            }
        }
        let words: Vec<&str> = plain.split_whitespace().collect();
        ErrorBody {
            message: clip(&words.join(" "), TEXT_LIMIT),
            ..ErrorBody::default()
        }
    }
}

/// For the log: the message, then what else the upstream said.
impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message.is_empty() {
            true => f.write_str("no error message")?,
            false => f.write_str(&self.message)?,
        }
        for (name, value) in [
            ("code", &self.code),
            ("type", &self.kind),
            ("param", &self.param),
        ] {
            if let Some(value) = value {
                write!(f, " ({name} {value})")?;
            }
        }
        Ok(())
    }
}

/// Who must act on an upstream's error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The request: the client can change it (400, 413, 422, and a 404 for a model the
    /// upstream does not have).
    Request,
    /// This service's credentials (401, 403): the operator must check the provider's key.
    Credentials,
    /// The URL (a 404 of anything but a model): the provider's `base_url` is likely wrong.
    Address,
    /// The upstream itself (429, 5xx, anything else): it may pass on another try.
    Upstream,
}

impl Blame {
    pub fn of(status: u16, body: &ErrorBody) -> Blame {
        match status {
            // Gemini refuses a bad key with a 400 ("API key not valid. Please pass a valid API
            // key.", https://github.com/continuedev/continue/issues/8516).
            400 if body.message.to_ascii_lowercase().contains("api key") => Blame::Credentials,
            400 | 413 | 422 => Blame::Request,
            401 | 403 => Blame::Credentials,
            404 if model_not_found(body) => Blame::Request,
            404 => Blame::Address,
            _ => Blame::Upstream,
        }
    }
}

/// A request the upstream refused, as the client is told: its code, its words with anything
/// secret hidden, and the Responses field at fault where the upstream's maps to one.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub code: Option<String>,
    pub message: String,
    pub param: Option<String>,
}

impl Refusal {
    pub fn new(status: u16, body: &ErrorBody) -> Refusal {
        // The standard's code for a prompt too long, whatever the upstream calls it; else the
        // upstream's own code; else what its words say.
        let code = if context_overflow(body) {
            Some("context_length_exceeded".to_string())
        } else if let Some(code) = body.code.as_deref().filter(|code| is_code(code)) {
            // Azure's deployment is its model.
            Some(code.replace("DeploymentNotFound", "model_not_found"))
        } else {
            model_not_found(body).then(|| "model_not_found".to_string())
        };
        let param = match code.as_deref() {
            Some("model_not_found") => Some("model".to_string()),
            _ => body
                .param
                .as_deref()
                .and_then(responses_param)
                .map(Into::into),
        };
        let words = crate::redact::secrets_in(body.message.trim());
        let message = match words.is_empty() {
            true => format!("The upstream model refused the request (HTTP {status})."),
            false => format!(
                "The upstream model refused the request (HTTP {status}): {}",
                clip(&words, MESSAGE_LIMIT)
            ),
        };
        Refusal {
            code,
            message,
            param,
        }
    }
}

/// A machine code: one short word. Anything else (a sentence, a number: vLLM, llama.cpp and
/// OpenRouter repeat the HTTP status, Azure writes `"401"`) is not shown as one, nor an error
/// type repeated as the code (DeepSeek's and Anthropic's `"code": "invalid_request_error"`,
/// https://api-docs.deepseek.com/quick_start/error_codes): the client has the type already.
fn is_code(code: &str) -> bool {
    let word = code
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let letters = code.chars().any(|c| c.is_ascii_alphabetic());
    word && letters && code.len() <= 64 && !code.ends_with("_error")
}

/// Whether the prompt did not fit the model's context, in the words providers use: OpenAI's
/// code ("Your input exceeds the context window of this model"); OpenAI, DeepSeek, vLLM and
/// OpenRouter "This model's maximum context length is N tokens" (DeepSeek and vLLM without
/// the code); llama.cpp's `exceed_context_size_error` ("request (N tokens) exceeds the
/// available context size (M tokens)", tools/server/server-common.cpp); Gemini "exceeds the
/// maximum number of tokens allowed"; Anthropic "prompt is too long".
fn context_overflow(body: &ErrorBody) -> bool {
    const WORDS: [&str; 6] = [
        "maximum context length",
        "exceeds the context window",
        "context length exceeded",
        "exceeds the available context size",
        "exceeds the maximum number of tokens",
        "prompt is too long",
    ];
    let message = body.message.to_ascii_lowercase();
    body.code.as_deref() == Some("context_length_exceeded")
        || body.kind.as_deref() == Some("exceed_context_size_error")
        || WORDS.iter().any(|w| message.contains(w))
}

/// Whether the upstream does not have the model asked for: OpenAI's code, Azure's
/// `DeploymentNotFound` (a deployment is its model), or the words of vLLM ("The model `x` does
/// not exist."), DeepSeek ("Model Not Exist", a 400) and Ollama ("model 'x' not found";
/// older "model \"x\" not found, try pulling it first"). A 404 without them is a wrong URL.
fn model_not_found(body: &ErrorBody) -> bool {
    let message = body.message.to_ascii_lowercase();
    matches!(
        body.code.as_deref(),
        Some("model_not_found" | "DeploymentNotFound")
    ) || (message.contains("model")
        && (message.contains("not found") || message.contains("not exist")))
}

/// The Responses field a chat-completions field comes from, where that is clear (`messages`
/// holds the instructions and the whole context, so its index is not an `input` index).
fn responses_param(chat: &str) -> Option<&'static str> {
    let head = chat.split(['.', '[']).next().unwrap_or(chat);
    Some(match head {
        "max_tokens" | "max_completion_tokens" => "max_output_tokens",
        // vLLM names the prompt's tokens when it does not fit.
        "messages" | "input_tokens" => "input",
        "tools" | "functions" => "tools",
        "tool_choice" | "function_call" => "tool_choice",
        "parallel_tool_calls" => "parallel_tool_calls",
        "temperature" => "temperature",
        "top_p" => "top_p",
        "presence_penalty" => "presence_penalty",
        "frequency_penalty" => "frequency_penalty",
        "response_format" => "text.format",
        "reasoning_effort" | "reasoning" => "reasoning.effort",
        "model" => "model",
        "user" => "user",
        _ => return None,
    })
}

/// At most `limit` bytes of `text`, cut at a character boundary, with an ellipsis if cut.
fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let end = (0..=limit)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(value: Value) -> ErrorBody {
        ErrorBody::parse(value.to_string().as_bytes())
    }

    #[test]
    fn every_providers_error_shape_is_read_and_a_numeric_code_is_no_code() {
        let openai = parsed(
            json!({"error": {"message": "Unsupported parameter: 'max_tokens'.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}),
        );
        assert_eq!(openai.code.as_deref(), Some("unsupported_parameter"));
        assert_eq!(openai.param.as_deref(), Some("max_tokens"));
        let vllm_old = parsed(
            json!({"object": "error", "message": "bad", "type": "BadRequestError",
            "param": null, "code": 400}),
        );
        assert_eq!((vllm_old.message.as_str(), vllm_old.code), ("bad", None));
        assert_eq!(vllm_old.kind.as_deref(), Some("BadRequestError"));
        let llamacpp = parsed(
            json!({"error": {"code": 400, "message": "request (4476 tokens) \
            exceeds the available context size (4096 tokens)", "type": "exceed_context_size_error",
            "n_prompt_tokens": 4476, "n_ctx": 4096}}),
        );
        assert_eq!(llamacpp.code, None);
        assert_eq!(llamacpp.kind.as_deref(), Some("exceed_context_size_error"));
        let ollama_old =
            parsed(json!({"error": "model \"llama9\" not found, try pulling it first"}));
        assert_eq!(
            ollama_old.message,
            "model \"llama9\" not found, try pulling it first"
        );
        let gemini = parsed(
            json!([{"error": {"code": 400, "message": "Invalid JSON payload.",
            "status": "INVALID_ARGUMENT"}}]),
        );
        assert_eq!(gemini.message, "Invalid JSON payload.");
        assert_eq!(gemini.kind.as_deref(), Some("INVALID_ARGUMENT"));
        let openrouter = parsed(
            json!({"error": {"code": 400, "message": "Provider returned error",
            "metadata": {"provider_name": "X", "raw": "{\"error\":{\"message\":\"temperature is \
            out of range\",\"param\":\"temperature\"}}"}}}),
        );
        assert_eq!(
            openrouter.message,
            "Provider returned error: temperature is out of range"
        );
        assert_eq!(openrouter.param.as_deref(), Some("temperature"));
        let fastapi = parsed(json!({"detail": "Not Found"}));
        assert_eq!(fastapi.message, "Not Found");
        let html = ErrorBody::parse(
            b"<html><head><title>404 Not Found</title></head>\n<body>nginx</body></html>",
        );
        assert_eq!(html.message, "404 Not Found nginx");
        assert_eq!(ErrorBody::parse(b"").message, "");
    }

    #[test]
    fn the_status_and_the_body_say_who_must_act() {
        let said = |message: &str| ErrorBody {
            message: message.into(),
            ..ErrorBody::default()
        };
        assert_eq!(Blame::of(400, &said("bad")), Blame::Request);
        assert_eq!(Blame::of(422, &said("bad")), Blame::Request);
        assert_eq!(Blame::of(401, &said("bad key")), Blame::Credentials);
        assert_eq!(Blame::of(403, &said("no")), Blame::Credentials);
        assert_eq!(
            Blame::of(404, &said("The model `x` does not exist.")),
            Blame::Request
        );
        assert_eq!(Blame::of(404, &said("404 page not found")), Blame::Address);
        assert_eq!(Blame::of(429, &said("slow")), Blame::Upstream);
        assert_eq!(Blame::of(503, &said("down")), Blame::Upstream);
    }

    #[test]
    fn a_refusal_keeps_the_upstreams_code_maps_its_param_and_hides_secrets() {
        let body = ErrorBody {
            message: "Invalid 'max_tokens' for key sk-live-0123456789 at https://h/v1?key=k".into(),
            code: Some("integer_above_max_value".into()),
            param: Some("max_tokens".into()),
            kind: Some("invalid_request_error".into()),
        };
        assert_eq!(
            Refusal::new(400, &body),
            Refusal {
                code: Some("integer_above_max_value".into()),
                message: "The upstream model refused the request (HTTP 400): Invalid \
                          'max_tokens' for key *** at https://h/v1?key=***"
                    .into(),
                param: Some("max_output_tokens".into()),
            }
        );
        let overflow = ErrorBody {
            message: "This model's maximum context length is 4096 tokens.".into(),
            ..ErrorBody::default()
        };
        assert_eq!(
            Refusal::new(400, &overflow).code.as_deref(),
            Some("context_length_exceeded")
        );
        let sentence = ErrorBody {
            code: Some("this is not a code".into()),
            param: Some("messages[3].content".into()),
            ..ErrorBody::default()
        };
        let refusal = Refusal::new(422, &sentence);
        assert_eq!(refusal.code, None);
        assert_eq!(refusal.param.as_deref(), Some("input"));
        assert_eq!(
            refusal.message,
            "The upstream model refused the request (HTTP 422)."
        );
    }
}
