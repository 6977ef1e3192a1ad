//! MCP servers a request names by `server_url` (SPEC §6): refused unless the operator lists
//! the host (`[tools.request_mcp]`) and the caller's key may name servers, refused on a
//! private, loopback or link-local address unless the operator allows those (the checks of
//! `fetch_url`, `crate::tools::address`); otherwise connected for the run, at the addresses
//! checked, with the request's `headers`. The headers go to that server only: they are not
//! stored (the echoed and stored `tools` leave them out), logged, or shown in an error.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};

use super::Engine;
use super::toolset::RequestNamed;
use crate::auth::KeyPolicy;
use crate::protocol::field::FieldError;
use crate::protocol::tools::{McpTool, ToolDecl};
use crate::tools::address;
use crate::tools::mcp::{RESERVED_HEADERS, RequestServer, sensitive_header};

impl Engine {
    /// Checks and connects every server the request names by URL (each `mcp` entry with a
    /// `server_url` and a label no configured server has), by label, all at once. Every
    /// refusal is a 400 naming the field (the first in the order of `tools`); a server that
    /// cannot be reached or listed is not: its listing says why.
    pub(super) async fn request_servers(
        &self,
        declared: &[(String, ToolDecl)],
        policy: Option<&KeyPolicy>,
    ) -> Result<HashMap<String, RequestNamed>, FieldError> {
        let mut wanted: Vec<(&str, &McpTool, &str)> = Vec::new();
        for (path, decl) in declared {
            let ToolDecl::Mcp(mcp) = decl else {
                continue;
            };
            let label = &mcp.server_label;
            if self.inner.registry.server(label).is_some() {
                // Credentials for a server of the operator's are a request meant for a
                // server of the client's own under a label that is taken.
                if mcp.server_url.is_some()
                    && (mcp.headers.is_some() || mcp.authorization.is_some())
                {
                    return Err(FieldError::new(
                        format!("{path}.server_label"),
                        format!(
                            "'{label}' is the label of a tool server configured by the operator; give the server at 'server_url' a label of its own."
                        ),
                    ));
                }
                continue;
            }
            let Some(url) = &mcp.server_url else {
                continue;
            };
            // Named twice: the tool set refuses it ("enabled twice").
            if wanted
                .iter()
                .any(|(_, other, _)| other.server_label == *label)
            {
                continue;
            }
            wanted.push((path, mcp, url));
        }
        let connecting = wanted
            .iter()
            .map(|(path, mcp, url)| self.request_server(path, mcp, url, policy));
        let mut named = HashMap::new();
        for ((_, mcp, _), server) in wanted.iter().zip(join_all(connecting).await) {
            named.insert(mcp.server_label.clone(), server?);
        }
        Ok(named)
    }

    async fn request_server(
        &self,
        path: &str,
        mcp: &McpTool,
        url: &str,
        policy: Option<&KeyPolicy>,
    ) -> Result<RequestNamed, FieldError> {
        let label = &mcp.server_label;
        let settings = &self.inner.settings.tools.request_mcp;
        let refused = |message: String| FieldError::new(format!("{path}.server_url"), message);
        if settings.allowed_hosts.is_empty() {
            return Err(refused(format!(
                "Tool servers given by 'server_url' are not supported on this service (the operator has not enabled them); '{label}' is not a tool server configured by the operator. Configured tool servers: {}.",
                self.inner.registry.labels().join(", ")
            )));
        }
        if !policy.is_none_or(KeyPolicy::allows_request_servers) {
            return Err(refused(
                "This API key may not name tool servers by 'server_url'.".into(),
            ));
        }
        if label.is_empty() {
            return Err(FieldError::new(
                format!("{path}.server_label"),
                "A tool server named by 'server_url' needs a 'server_label'.",
            ));
        }
        let parsed =
            url::Url::parse(url).map_err(|e| refused(format!("Invalid 'server_url': {e}.")))?;
        let rules = address::Rules {
            allowed_hosts: Some(&settings.allowed_hosts),
            allow_private: settings.allow_private,
            purpose: "connecting to it",
        };
        let addresses = address::check(&parsed, &rules).await.map_err(|reason| {
            refused(format!(
                "The MCP server at 'server_url' is refused: {reason}"
            ))
        })?;
        let headers = headers(path, mcp)?;
        let timeout = Duration::from_millis(settings.startup_timeout_ms);
        let connection =
            RequestServer::connect(label, parsed.as_str(), addresses, headers, timeout).await;
        let available = connection.error.is_none();
        let (server, problems) =
            self.inner
                .registry
                .request_server(label, connection.handlers.clone(), available);
        for problem in &problems {
            tracing::warn!("{problem}; the tool is left out");
        }
        Ok(RequestNamed {
            server: Arc::new(server),
            error: connection.error.clone(),
            connection: Arc::new(connection),
        })
    }
}

/// The entry's `headers` (and its `authorization` token as a bearer `Authorization`) as the
/// transport sends them, each value marked sensitive (left out of `Debug`). A problem names
/// the header, never its value.
fn headers(path: &str, mcp: &McpTool) -> Result<HashMap<HeaderName, HeaderValue>, FieldError> {
    let mut headers = HashMap::new();
    for (name, value) in mcp.headers.iter().flat_map(|h| &h.0) {
        let param = format!("{path}.headers");
        let (header, value) = sensitive_header(name, value)
            .map_err(|problem| FieldError::new(&param, format!("Invalid header: {problem}.")))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(FieldError::new(
                &param,
                format!("The header '{name}' is set by the MCP transport itself."),
            ));
        }
        headers.insert(header, value);
    }
    if let Some(token) = &mcp.authorization
        && !headers.contains_key(&AUTHORIZATION)
    {
        let (header, value) =
            sensitive_header(AUTHORIZATION.as_str(), &format!("Bearer {}", token.0)).map_err(
                |_| {
                    FieldError::new(
                        format!("{path}.authorization"),
                        "The token cannot be sent in an HTTP header.",
                    )
                },
            )?;
        headers.insert(header, value);
    }
    Ok(headers)
}
