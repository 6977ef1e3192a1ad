//! What an MCP `tools/call` result becomes: text content joined as the call's text,
//! `structuredContent` as its data, images as the result's images (with a short placeholder in
//! the text: the tool message is text only, and the images reach the model after it, where
//! its provider takes images), audio as a placeholder with its type and size in the data,
//! embedded resources as their text (or their URI and type), and `isError` as a failure the
//! tool reports.
//!
//! With images, the data is `{"content": [described media…], "structured_content": …}` (each
//! only when there is some), so that [`ToolResult::client_data`] puts the images first in that
//! list without touching a key of the structured content.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::tools::{ToolErrorKind, ToolImage, ToolResult, decoded_len};

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

/// A content block as the model reads it, and, for media, what the client is told of it
/// (or the image itself).
struct Shown {
    text: String,
    described: Option<Value>,
    image: Option<ToolImage>,
}

impl CallResult {
    pub fn into_tool_result(self) -> ToolResult {
        let shown: Vec<Shown> = self.content.iter().map(show).collect();
        let mut text = shown
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let mut described = Vec::new();
        let mut images = Vec::new();
        for s in shown {
            described.extend(s.described);
            images.extend(s.image);
        }
        if text.is_empty()
            && let Some(structured) = &self.structured_content
        {
            // A server that sends only structured content: the model reads it as JSON.
            text = structured.to_string();
        }
        let data = if images.is_empty() {
            // Structured content wins: the media it leaves out are still named in the text.
            match (self.structured_content, described.is_empty()) {
                (Some(structured), _) => Some(structured),
                (None, false) => Some(json!({ "content": described })),
                (None, true) => None,
            }
        } else {
            let mut data = json!({ "content": described });
            if let Some(structured) = self.structured_content {
                data["structured_content"] = structured;
            }
            Some(data)
        };
        if self.is_error == Some(true) && text.is_empty() {
            text = "The tool reported an error without a message.".into();
        }
        ToolResult {
            text,
            data,
            images,
            error: (self.is_error == Some(true)).then_some(ToolErrorKind::Tool),
        }
    }
}

impl Shown {
    fn plain(text: String) -> Shown {
        Shown {
            text,
            described: None,
            image: None,
        }
    }

    fn described(text: String, described: Value) -> Shown {
        Shown {
            text,
            described: Some(described),
            image: None,
        }
    }
}

fn show(block: &Value) -> Shown {
    let field = |name: &str| block.get(name).and_then(Value::as_str);
    match field("type").unwrap_or_default() {
        "text" => Shown::plain(field("text").unwrap_or_default().to_string()),
        "image" => {
            let image = ToolImage {
                mime_type: field("mimeType")
                    .unwrap_or("application/octet-stream")
                    .to_string(),
                base64: field("data").unwrap_or_default().to_string(),
            };
            Shown {
                text: image.placeholder(),
                described: None,
                image: Some(image),
            }
        }
        "audio" => {
            let mime_type = field("mimeType").unwrap_or("application/octet-stream");
            let bytes = decoded_len(field("data").unwrap_or_default());
            Shown::described(
                format!("[audio: {mime_type}, {bytes} bytes]"),
                json!({"type": "audio", "mime_type": mime_type, "bytes": bytes}),
            )
        }
        "resource" => show_resource(block.get("resource").cloned().unwrap_or_default()),
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
            Shown::described(text, Value::Object(described))
        }
        other => Shown::described(
            format!("[content of type {other:?} is not shown]"),
            json!({"type": other}),
        ),
    }
}

/// An embedded resource: its text, or its URI, type and size.
fn show_resource(resource: Value) -> Shown {
    let get = |name: &str| {
        resource
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let uri = get("uri").unwrap_or_default();
    match (get("text"), get("blob")) {
        (Some(text), _) => Shown::plain(text),
        (None, blob) => {
            let bytes = decoded_len(blob.as_deref().unwrap_or_default());
            let mime = get("mimeType").unwrap_or_else(|| "application/octet-stream".into());
            Shown::described(
                format!("[resource {uri}: {mime}, {bytes} bytes]"),
                json!({"type": "resource", "uri": uri, "mime_type": mime, "bytes": bytes}),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_image_is_one_of_the_results_images_and_a_placeholder_in_its_text() {
        let r = result(json!({"content": [
            {"type": "text", "text": "Here it is:"},
            {"type": "image", "mimeType": "image/png", "data": "AAAAAA=="}
        ]}));
        assert_eq!(r.text, "Here it is:\n[image: image/png, 4 bytes]");
        assert_eq!(
            r.images,
            [ToolImage {
                mime_type: "image/png".into(),
                base64: "AAAAAA==".into()
            }]
        );
        assert_eq!(
            r.client_data(),
            Some(json!({"content": [
                {"type": "input_image", "image_url": "data:image/png;base64,AAAAAA==", "detail": "auto"}
            ]}))
        );
    }

    #[test]
    fn audio_stays_a_placeholder_described_after_the_images() {
        let r = result(json!({"content": [
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
            {"type": "image", "mimeType": "image/jpeg", "data": "AAAA"}
        ]}));
        assert_eq!(
            r.text,
            "[audio: audio/wav, 3 bytes]\n[image: image/jpeg, 3 bytes]"
        );
        let data = r.client_data().unwrap();
        assert_eq!(data["content"][0]["type"], "input_image");
        assert_eq!(
            data["content"][1],
            json!({"type": "audio", "mime_type": "audio/wav", "bytes": 3})
        );
    }

    #[test]
    fn structured_content_beside_an_image_keeps_its_own_keys() {
        let r = result(json!({
            "content": [{"type": "image", "mimeType": "image/png", "data": "AAAA"}],
            "structuredContent": {"content": "a key of the tool's own"}
        }));
        let data = r.client_data().unwrap();
        assert_eq!(data["content"].as_array().unwrap().len(), 1);
        assert_eq!(data["content"][0]["type"], "input_image");
        assert_eq!(
            data["structured_content"],
            json!({"content": "a key of the tool's own"})
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
