//! HTTP tool servers: tools declared in the configuration, each backed by an HTTP endpoint.
//! The arguments are sent as the JSON body; a 2xx reply body is the result (an `image/*` one an
//! image of the result, its text a placeholder), any other status is a tool error carrying it.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use base64::Engine as _;

use super::{
    ToolContext, ToolErrorKind, ToolHandler, ToolImage, ToolKind, ToolOptions, ToolOutput,
    ToolResult,
};
use crate::config::{HttpToolConfig, expand_env};

/// How much of a reply is kept.
const REPLY_LIMIT: usize = 1024 * 1024;

pub struct HttpTool {
    name: String,
    description: String,
    parameters: Value,
    url: String,
    method: reqwest::Method,
    headers: BTreeMap<String, String>,
    kind: ToolKind,
    options: ToolOptions,
    client: reqwest::Client,
}

impl HttpTool {
    /// Builds the tool, resolving `${VAR}` in header values from the environment.
    pub fn from_config(config: &HttpToolConfig) -> Result<HttpTool, String> {
        let method = reqwest::Method::from_bytes(config.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("tool {:?}: invalid method {:?}", config.name, config.method))?;
        url::Url::parse(&config.url)
            .map_err(|e| format!("tool {:?}: invalid url {:?}: {e}", config.name, config.url))?;
        let mut headers = BTreeMap::new();
        for (name, value) in &config.headers {
            headers.insert(name.clone(), expand_env(value).map_err(|var| {
                format!("tool {:?}: header {name:?} needs the environment variable {var}, which is not set", config.name)
            })?);
        }
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(HttpTool {
            name: config.name.clone(),
            description: config.description.clone(),
            parameters: config.parameters.clone(),
            url: config.url.clone(),
            method,
            headers,
            kind: config.kind,
            options: ToolOptions {
                timeout: config.timeout_ms.map(Duration::from_millis),
                return_direct: config.return_direct,
                hidden: config.hidden,
                read_only: config.read_only,
            },
            client,
        })
    }
}

#[async_trait]
impl ToolHandler for HttpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn kind(&self) -> ToolKind {
        self.kind
    }

    fn options(&self) -> ToolOptions {
        self.options.clone()
    }

    async fn call(&self, context: ToolContext, arguments: Value, _: ToolOutput) -> ToolResult {
        let mut request = self
            .client
            .request(self.method.clone(), &self.url)
            .header("x-switchyard-response-id", &context.response_id)
            .header("x-switchyard-call-id", &context.call_id)
            .json(&arguments);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        // The call's trace goes on at the tool server (W3C `traceparent`), when traces are on.
        let mut trace = reqwest::header::HeaderMap::new();
        crate::telemetry::inject(&mut trace);
        let response = match request.headers(trace).send().await {
            Ok(response) => response,
            Err(e) => {
                return ToolResult::failure(
                    ToolErrorKind::Transport { status: None },
                    format!(
                        "The tool server could not be reached: {}",
                        crate::redact::urls_in(&e.to_string())
                    ),
                );
            }
        };
        let status = response.status();
        let image_type = image_type(&response).filter(|_| status.is_success());
        let (body, truncated) = match read_limited(response, REPLY_LIMIT).await {
            Ok(read) => read,
            Err(e) => {
                return ToolResult::failure(
                    ToolErrorKind::Transport {
                        status: Some(status.as_u16()),
                    },
                    format!(
                        "The tool server's reply could not be read: {}",
                        crate::redact::urls_in(&e.to_string())
                    ),
                );
            }
        };
        if let Some(mime_type) = image_type {
            return image_result(mime_type, &body, truncated);
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            return ToolResult::failure(
                ToolErrorKind::Transport {
                    status: Some(status.as_u16()),
                },
                format!(
                    "The tool server answered {}: {}",
                    status.as_u16(),
                    crate::redact::urls_in(&body)
                ),
            );
        }
        match serde_json::from_str::<Value>(&body) {
            Ok(data) => ToolResult::ok_with_data(body, data),
            Err(_) => ToolResult::ok(body),
        }
    }
}

/// The media type of an `image/*` reply (`image/png; …` → `image/png`).
fn image_type(response: &reqwest::Response) -> Option<String> {
    let value = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    let media = value.split(';').next()?.trim().to_ascii_lowercase();
    media.starts_with("image/").then_some(media)
}

/// An image reply as the result's image; one cut at the reply limit would be a broken image,
/// so it is left out and the text says so.
fn image_result(mime_type: String, body: &[u8], truncated: bool) -> ToolResult {
    if truncated {
        return ToolResult::ok(format!(
            "[image: {mime_type}, over {REPLY_LIMIT} bytes: left out, a tool's reply may take {REPLY_LIMIT} bytes]"
        ));
    }
    let image = ToolImage {
        mime_type,
        base64: base64::engine::general_purpose::STANDARD.encode(body),
    };
    ToolResult {
        images: vec![image.clone()],
        ..ToolResult::ok(image.placeholder())
    }
}

/// The body of `response`, at most `limit` bytes of it (reading stops there), and whether
/// bytes past the limit arrived and were dropped.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() >= limit {
            truncated = body.len() > limit;
            body.truncate(limit);
            break;
        }
    }
    Ok((body, truncated))
}
