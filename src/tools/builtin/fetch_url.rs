//! `fetch_url`: an HTTP GET with a size limit, a timeout and a host allowlist. Private,
//! loopback and link-local addresses are refused unless the configuration allows them, and
//! the connection goes to the address that was checked (no DNS rebinding), redirects
//! included.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use url::Url;

use crate::config::FetchUrlConfig;
use crate::tools::address;
use crate::tools::http::read_limited;
use crate::tools::{ToolContext, ToolErrorKind, ToolHandler, ToolOutput, ToolResult};

const MAX_REDIRECTS: usize = 5;

pub struct FetchUrl {
    config: FetchUrlConfig,
}

impl FetchUrl {
    pub fn new(config: FetchUrlConfig) -> FetchUrl {
        FetchUrl { config }
    }

    /// The address to connect to, or why the URL is refused (an empty `allowed_hosts` list
    /// allows every public host).
    async fn check(&self, url: &Url) -> Result<SocketAddr, String> {
        let listed = &self.config.allowed_hosts;
        let rules = address::Rules {
            allowed_hosts: (!listed.is_empty()).then_some(listed.as_slice()),
            allow_private: self.config.allow_private,
            purpose: "fetching it",
        };
        let addresses = address::check(url, &rules).await?;
        addresses
            .first()
            .copied()
            .ok_or_else(|| "The host has no address.".to_string())
    }

    /// One GET of `url`, redirects not followed, over a connection to the address
    /// [`FetchUrl::check`] allowed. `Err` is the call's result: the URL refused, the fetch
    /// cancelled or failed.
    async fn get_pinned(
        &self,
        context: &ToolContext,
        url: &Url,
        timeout: Duration,
    ) -> Result<reqwest::Response, ToolResult> {
        let address = match self.check(url).await {
            Ok(address) => address,
            Err(reason) => return Err(ToolResult::failure(ToolErrorKind::Refused, reason)),
        };
        let host = url.host_str().unwrap_or_default().to_string();
        // Pin the connection to the checked address.
        // No proxy from the environment: the connection must go to the address checked.
        let client = match reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&host, address)
            .timeout(timeout)
            .build()
        {
            Ok(client) => client,
            Err(e) => {
                return Err(ToolResult::error(format!(
                    "Cannot build the HTTP client: {e}"
                )));
            }
        };
        let request = client.get(url.clone()).send();
        let response = tokio::select! {
            _ = context.cancel.cancelled() => {
                return Err(ToolResult::failure(ToolErrorKind::Cancelled, "The fetch was cancelled."));
            }
            response = request => response,
        };
        response.map_err(|e| {
            ToolResult::failure(
                ToolErrorKind::Transport { status: None },
                format!("Fetching {url} failed: {e}"),
            )
        })
    }
}

#[async_trait]
impl ToolHandler for FetchUrl {
    fn name(&self) -> &str {
        "fetch_url"
    }

    fn description(&self) -> &str {
        "Fetches a URL with HTTP GET and returns its status, content type and body as text."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "An http or https URL."},
                "max_bytes": {"type": "integer", "minimum": 1, "description": "Read at most this many bytes of the body."}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    }

    async fn call(&self, context: ToolContext, arguments: Value, _: ToolOutput) -> ToolResult {
        let text = arguments
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut url = match Url::parse(text) {
            Ok(url) => url,
            Err(e) => return ToolResult::error(format!("'{text}' is not a valid URL: {e}")),
        };
        let limit = arguments
            .get("max_bytes")
            .and_then(Value::as_u64)
            .map_or(self.config.max_bytes, |n| {
                (n as usize).min(self.config.max_bytes)
            });
        let timeout = Duration::from_millis(self.config.timeout_ms);
        for _ in 0..=MAX_REDIRECTS {
            let response = match self.get_pinned(&context, &url, timeout).await {
                Ok(response) => response,
                Err(failed) => return failed,
            };
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
            {
                match url.join(location) {
                    Ok(next) => {
                        url = next;
                        continue;
                    }
                    Err(e) => {
                        return ToolResult::error(format!("Bad redirect to '{location}': {e}"));
                    }
                }
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let (body, truncated) = match read_limited(response, limit).await {
                Ok(read) => read,
                Err(e) => {
                    return ToolResult::failure(
                        ToolErrorKind::Transport {
                            status: Some(status.as_u16()),
                        },
                        format!("Reading {url} failed: {e}"),
                    );
                }
            };
            let body = String::from_utf8_lossy(&body).into_owned();
            let note = if truncated {
                format!("\n[truncated to {limit} bytes]")
            } else {
                String::new()
            };
            let text = format!(
                "Status: {}\nContent-Type: {content_type}\n\n{body}{note}",
                status.as_u16()
            );
            return ToolResult::ok_with_data(
                text,
                json!({"url": url.as_str(), "status": status.as_u16(), "content_type": content_type,
                       "bytes": body.len(), "truncated": truncated}),
            );
        }
        ToolResult::error(format!("More than {MAX_REDIRECTS} redirects."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_urls_and_unlisted_hosts_are_refused() {
        let config = |hosts: Vec<&str>| FetchUrlConfig {
            allowed_hosts: hosts.into_iter().map(String::from).collect(),
            allow_private: false,
            max_bytes: 1000,
            timeout_ms: 1000,
        };
        let fetch = FetchUrl::new(config(vec![]));
        let refused = fetch
            .check(&Url::parse("http://127.0.0.1:9/x").unwrap_or_else(|_| unreachable!()))
            .await;
        assert!(
            refused
                .unwrap_err()
                .contains("private, loopback or link-local")
        );
        let refused = fetch
            .check(&Url::parse("http://[::1]/").unwrap_or_else(|_| unreachable!()))
            .await;
        assert!(refused.is_err());
        let refused = fetch
            .check(&Url::parse("file:///etc/passwd").unwrap_or_else(|_| unreachable!()))
            .await;
        assert!(refused.unwrap_err().contains("Only http and https"));

        let listed = FetchUrl::new(config(vec![".example.com"]));
        let refused = listed
            .check(&Url::parse("http://other.org/").unwrap_or_else(|_| unreachable!()))
            .await;
        assert_eq!(
            refused.unwrap_err(),
            "The host 'other.org' is not in the allowed list."
        );
    }
}
