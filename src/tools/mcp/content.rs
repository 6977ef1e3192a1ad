//! What an MCP `tools/call` result becomes: text content joined as the call's text,
//! `structuredContent` as its data, images and audio as a short placeholder (the model is not
//! sent megabytes of base64) with their type and size in the data, embedded resources as their
//! text (or their URI and type), and `isError` as a failure the tool reports.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::tools::ToolResult;

/// The parts of a `CallToolResult` the service uses, read from its JSON so that content
/// types a newer server sends are shown as unknown instead of failing the call.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    structured_content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

/// A content block as the model reads it, and, for media, what the client is told of it.
struct Shown {
    text: String,
    described: Option<Value>,
}

impl CallResult {
    pub fn into_tool_result(self) -> ToolResult {
        let shown: Vec<Shown> = self.content.iter().map(show).collect();
        let mut text = shown
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let described: Vec<Value> = shown.into_iter().filter_map(|s| s.described).collect();
        if text.is_empty()
            && let Some(structured) = &self.structured_content
        {
            // A server that sends only structured content: the model reads it as JSON.
            text = structured.to_string();
        }
        let data = match (self.structured_content, described.is_empty()) {
            (Some(structured), _) => Some(structured),
            (None, false) => Some(json!({ "content": described })),
            (None, true) => None,
        };
        if self.is_error == Some(true) {
            if text.is_empty() {
                text = "The tool reported an error without a message.".into();
            }
            let mut result = ToolResult::error(text);
            result.data = data;
            return result;
        }
        ToolResult {
            text,
            data,
            error: None,
        }
    }
}

fn show(block: &Value) -> Shown {
    let field = |name: &str| block.get(name).and_then(Value::as_str);
    let plain = |text: String| Shown {
        text,
        described: None,
    };
    match field("type").unwrap_or_default() {
        "text" => plain(field("text").unwrap_or_default().to_string()),
        kind @ ("image" | "audio") => {
            let mime_type = field("mimeType").unwrap_or("application/octet-stream");
            let bytes = decoded_len(field("data").unwrap_or_default());
            Shown {
                text: format!("[{kind}: {mime_type}, {bytes} bytes]"),
                described: Some(json!({"type": kind, "mime_type": mime_type, "bytes": bytes})),
            }
        }
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or_default();
            let get = |name: &str| {
                resource
                    .get(name)
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let uri = get("uri").unwrap_or_default();
            let mime_type = get("mimeType");
            match (get("text"), get("blob")) {
                (Some(text), _) => plain(text),
                (None, blob) => {
                    let bytes = decoded_len(blob.as_deref().unwrap_or_default());
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    Shown {
                        text: format!("[resource {uri}: {mime}, {bytes} bytes]"),
                        described: Some(
                            json!({"type": "resource", "uri": uri, "mime_type": mime, "bytes": bytes}),
                        ),
                    }
                }
            }
        }
        "resource_link" => {
            let uri = field("uri").unwrap_or_default();
            let mut described = Map::new();
            described.insert("type".into(), json!("resource_link"));
            described.insert("uri".into(), json!(uri));
            let mut text = format!("[resource link: {uri}");
            if let Some(name) = field("name") {
                text.push_str(&format!(" ({name})"));
                described.insert("name".into(), json!(name));
            }
            if let Some(mime) = field("mimeType") {
                text.push_str(&format!(", {mime}"));
                described.insert("mime_type".into(), json!(mime));
            }
            text.push(']');
            Shown {
                text,
                described: Some(Value::Object(described)),
            }
        }
        other => Shown {
            text: format!("[content of type {other:?} is not shown]"),
            described: Some(json!({"type": other})),
        },
    }
}

/// The size of base64-encoded data once decoded, without decoding it.
fn decoded_len(base64: &str) -> usize {
    let trimmed = base64.trim_end_matches('=');
    let digits = trimmed.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    digits * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolErrorKind;

    fn result(value: Value) -> ToolResult {
        serde_json::from_value::<CallResult>(value)
            .unwrap_or_default()
            .into_tool_result()
    }

    #[test]
    fn text_blocks_are_joined_and_structured_content_is_the_data() {
        let r = result(json!({
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "structuredContent": {"temperature": 33}
        }));
        assert_eq!(r.text, "a\nb");
        assert_eq!(r.data, Some(json!({"temperature": 33})));
        assert_eq!(r.error, None);
    }

    #[test]
    fn an_image_is_a_placeholder_with_its_type_and_size_not_its_bytes() {
        let r = result(json!({
            "content": [{"type": "image", "mimeType": "image/png", "data": "AAAAAA=="}]
        }));
        assert_eq!(r.text, "[image: image/png, 4 bytes]");
        assert_eq!(
            r.data,
            Some(json!({"content": [{"type": "image", "mime_type": "image/png", "bytes": 4}]}))
        );
    }

    #[test]
    fn an_embedded_resource_is_its_text_or_its_uri_and_type() {
        let r = result(json!({"content": [
            {"type": "resource", "resource": {"uri": "demo://1", "mimeType": "text/plain", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "demo://2", "mimeType": "application/zip", "blob": "AAAA"}}
        ]}));
        assert_eq!(
            r.text,
            "hello\n[resource demo://2: application/zip, 3 bytes]"
        );
    }

    #[test]
    fn is_error_is_a_failure_the_tool_reports() {
        let r =
            result(json!({"content": [{"type": "text", "text": "no such city"}], "isError": true}));
        assert_eq!(r.text, "no such city");
        assert_eq!(r.error, Some(ToolErrorKind::Tool));
    }
}
