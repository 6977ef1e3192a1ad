//! `fetch_url`: an HTTP GET with a size limit, a timeout and a host allowlist. Private,
//! loopback and link-local addresses are refused unless the configuration allows them, and
//! the connection goes to the address that was checked (no DNS rebinding), redirects
//! included.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use url::Url;

use crate::config::FetchUrlConfig;
use crate::tools::{ToolContext, ToolErrorKind, ToolHandler, ToolOutput, ToolResult};

const MAX_REDIRECTS: usize = 5;

pub struct FetchUrl {
    config: FetchUrlConfig,
}

impl FetchUrl {
    pub fn new(config: FetchUrlConfig) -> FetchUrl {
        FetchUrl { config }
    }

    /// The address to connect to, or why the URL is refused.
    async fn check(&self, url: &Url) -> Result<SocketAddr, String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "Only http and https URLs can be fetched, not '{}'.",
                url.scheme()
            ));
        }
        let host = url.host_str().ok_or("The URL has no host.")?;
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        if !self.config.allowed_hosts.is_empty() && !self.host_allowed(bare_host) {
            return Err(format!(
                "The host '{bare_host}' is not in the allowed list."
            ));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let addresses: Vec<SocketAddr> = match bare_host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare_host, port))
                .await
                .map_err(|e| format!("The host '{bare_host}' cannot be resolved: {e}"))?
                .collect(),
        };
        let first = *addresses
            .first()
            .ok_or_else(|| format!("The host '{bare_host}' has no address."))?;
        if !self.config.allow_private
            && let Some(bad) = addresses.iter().find(|a| !is_public(a.ip()))
        {
            return Err(format!(
                "The address {} of '{bare_host}' is private, loopback or link-local; fetching it is not allowed.",
                bad.ip()
            ));
        }
        Ok(first)
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.config.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            let host = host.to_ascii_lowercase();
            match allowed.strip_prefix('.') {
                Some(domain) => host == domain || host.ends_with(&format!(".{domain}")),
                None => host == allowed,
            }
        })
    }
}

/// Whether an address is on the public internet.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() || v6.is_unspecified() {
                return false;
            }
            // An IPv4 address inside the IPv6 one reaches that IPv4 host where the network
            // translates it: judged as the IPv4 address.
            if let Some(v4) = embedded_ipv4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x2001 && s[1] == 0) // Teredo: tunnels to an IPv4 host
                || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64
                || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0)) // discard-only
        }
    }
}

/// The IPv4 address an IPv6 address carries, in each form a network may translate:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, IPv4-translated
/// `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and 6to4 `2002:AABB:CCDD::/48`.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let last = |hi: u16, lo: u16| std::net::Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(last(hi, lo)),
        [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        _ => None,
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
            let address = match self.check(&url).await {
                Ok(address) => address,
                Err(reason) => return ToolResult::failure(ToolErrorKind::Refused, reason),
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
                Err(e) => return ToolResult::error(format!("Cannot build the HTTP client: {e}")),
            };
            let request = client.get(url.clone()).send();
            let response = tokio::select! {
                _ = context.cancel.cancelled() => {
                    return ToolResult::failure(ToolErrorKind::Cancelled, "The fetch was cancelled.");
                }
                response = request => response,
            };
            let mut response = match response {
                Ok(response) => response,
                Err(e) => {
                    return ToolResult::failure(
                        ToolErrorKind::Transport { status: None },
                        format!("Fetching {url} failed: {e}"),
                    );
                }
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
            let mut body = Vec::new();
            let mut truncated = false;
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        body.extend_from_slice(&chunk);
                        if body.len() >= limit {
                            truncated = body.len() > limit;
                            body.truncate(limit);
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        return ToolResult::failure(
                            ToolErrorKind::Transport {
                                status: Some(status.as_u16()),
                            },
                            format!("Reading {url} failed: {e}"),
                        );
                    }
                }
            }
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

    #[test]
    fn private_loopback_and_link_local_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            // IPv4 inside IPv6: compatible, translated, NAT64, 6to4, Teredo.
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
        ] {
            assert!(
                !is_public(ip.parse().unwrap_or(IpAddr::from([1, 1, 1, 1]))),
                "{ip}"
            );
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(
                is_public(ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]))),
                "{ip}"
            );
        }
    }

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
        assert!(listed.host_allowed("api.example.com"));
        assert!(listed.host_allowed("example.com"));
        assert!(!listed.host_allowed("example.com.evil.org"));
        let refused = listed
            .check(&Url::parse("http://other.org/").unwrap_or_else(|_| unreachable!()))
            .await;
        assert_eq!(
            refused.unwrap_err(),
            "The host 'other.org' is not in the allowed list."
        );
    }
}
