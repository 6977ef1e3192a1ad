//! The fake upstream as a model without native function calling, served by a server that
//! refuses `tools` (as Ollama does for such a model): it writes the scripted tool calls into its
//! text in a protocol's syntax (switchyard's `tool_protocol`), so that the same scripts drive a
//! native and a text-protocol run. Each call is written when it is complete, in pieces that
//! split its markers and its multi-byte characters, as a model's tokens would.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The syntax the fake writes calls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolText {
    Hermes,
    Vcp,
    Json,
}

impl ToolText {
    pub fn parse(name: &str) -> Option<ToolText> {
        match name {
            "hermes" => Some(ToolText::Hermes),
            "vcp" => Some(ToolText::Vcp),
            "json" => Some(ToolText::Json),
            _ => None,
        }
    }

    /// Ollama's answer to a request with `tools` for a model whose template has none
    /// (ollama/ollama#6027: its OpenAI-compatible endpoint, HTTP 400).
    pub fn refusal(self, request: &Value) -> Option<(u16, Value)> {
        let offers = request
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        let model = request.get("model").and_then(Value::as_str).unwrap_or("");
        offers.then(|| {
            let message = format!("registry.ollama.ai/library/{model}:latest does not support tools");
            (
                400,
                json!({"error": {"message": message, "type": "api_error", "param": null, "code": null}}),
            )
        })
    }

    /// One complete call as the model writes it (JSON: the envelope is written by
    /// [`ToolText::envelope`]).
    pub fn call(self, name: &str, arguments: &str) -> String {
        let arguments: Value = serde_json::from_str(arguments).unwrap_or(json!({}));
        match self {
            ToolText::Hermes => {
                format!(
                    "<tool_call>\n{}\n</tool_call>\n",
                    json!({"name": name, "arguments": arguments})
                )
            }
            ToolText::Vcp => {
                let mut block = format!("<<<[TOOL_REQUEST]>>>\ntool_name:「始」{name}「末」");
                if let Value::Object(fields) = arguments {
                    for (key, value) in fields {
                        let value = match value {
                            Value::String(text) => text,
                            other => other.to_string(),
                        };
                        block.push_str(&format!(",\n{key}:「始」{value}「末」"));
                    }
                }
                block.push_str("\n<<<[END_TOOL_REQUEST]>>>\n");
                block
            }
            ToolText::Json => json!({"name": name, "arguments": arguments}).to_string(),
        }
    }
}

/// `text` in pieces of about `size` bytes, cut anywhere but inside a character.
pub fn pieces(text: &str, size: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(text[start..end].to_string());
        start = end;
    }
    pieces
}
