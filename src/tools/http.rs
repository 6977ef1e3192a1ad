//! HTTP tool servers: tools declared in the configuration, each backed by an HTTP endpoint.
//! The arguments are sent as the JSON body; a 2xx reply body is the result, any other status
//! is a tool error carrying it.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    ToolContext, ToolErrorKind, ToolHandler, ToolKind, ToolOptions, ToolOutput, ToolResult,
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
        let response = match request.send().await {
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
        let body = match read_limited(response, REPLY_LIMIT).await {
            Ok((body, _)) => String::from_utf8_lossy(&body).into_owned(),
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
