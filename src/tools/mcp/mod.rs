//! MCP servers as tool sources, on the official Rust SDK (`rmcp`): each `[mcp_servers.LABEL]`
//! is reached over streamable HTTP or started as a command speaking stdio. A supervisor task
//! per server connects (the SDK negotiates the protocol version), lists the tools (every
//! page), publishes them to the registry, lists them again on
//! `notifications/tools/list_changed`, and reconnects with a growing delay when the
//! connection ends — for a command, when the process exits. Start-up does not wait for any of
//! it: until a server is connected its tools are simply absent, and a call made while it is
//! down fails as a tool error the model sees.
//!
//! A call is one `tools/call`: progress notifications go to the call's streamed output, and a
//! call abandoned before its answer (the run cancelled, the call timed out) is cancelled at the
//! server with `notifications/cancelled`. What a result holds becomes a [`ToolResult`] in
//! [`content`].

mod content;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, Implementation, ProgressNotificationParam, ProgressToken,
    RequestId, RequestParamsMeta as _, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use content::CallResult;

use super::registry::ToolRegistry;
use super::{
    ToolContext, ToolErrorKind, ToolHandler, ToolKind, ToolOptions, ToolOutput, ToolResult,
};
use crate::config::{Config, McpServerConfig, expand_env};

/// The first wait before connecting again; it doubles up to [`LAST_RETRY`] while attempts
/// keep failing. Short, so that a server that crashed once is back before the model's next
/// turn.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// A connection that lasted this long was healthy: the next failure starts the waits over.
const HEALTHY: Duration = Duration::from_secs(60);
/// How long shutdown waits for the servers to close (a command gets 3 s to exit on its own
/// once its stdin closes, then SIGTERM, then SIGKILL).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// The configured MCP servers' supervisors. Dropping it stops them (and the commands).
pub struct McpServers {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl McpServers {
    /// Starts a supervisor for every configured server; returns at once (connecting and
    /// listing tools happen in the background).
    pub fn start(config: &Config, registry: Arc<ToolRegistry>) -> McpServers {
        let servers = McpServers {
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        };
        if !config.mcp_servers.is_empty() {
            install_tls_provider();
        }
        for (label, settings) in &config.mcp_servers {
            crate::metrics::mcp_server_connected(label, false);
            let span = tracing::info_span!("mcp_server", label = %label);
            match Link::new(label, settings, servers.tasks.clone()) {
                Ok(link) => {
                    let supervisor = supervise(link, registry.clone(), servers.stop.clone());
                    servers.tasks.spawn(supervisor.instrument(span));
                }
                // Validation refuses such a configuration before it gets here.
                Err(problem) => {
                    tracing::error!(parent: &span, "MCP server not started: {problem}");
                    registry.settle(label);
                }
            }
        }
        servers
    }

    /// Disconnects from every server and stops the commands.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_WAIT, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("MCP servers still closing after {SHUTDOWN_WAIT:?}; leaving them");
        }
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Headers the MCP transport sets itself; neither the configuration nor a request may set them.
pub use crate::config::MCP_RESERVED_HEADERS as RESERVED_HEADERS;

/// A header for an MCP server, its value marked sensitive (left out of `Debug`). The problem,
/// if any, names the header, never its value.
pub fn sensitive_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid header name"))?;
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| format!("the value of header {name} is not valid"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// The HTTP client for a server named in a request: it connects only to the addresses that
/// were checked (a second lookup of the name could answer otherwise: DNS rebinding), and
/// never through a proxy from the environment.
fn pinned_client(url: &str, pinned: &[SocketAddr]) -> Result<reqwest_mcp::Client, String> {
    let host = url::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
        })
        .ok_or("the URL has no host")?;
    reqwest_mcp::Client::builder()
        .no_proxy()
        // A redirect would lead to an address nobody checked.
        .redirect(reqwest_mcp::redirect::Policy::none())
        .resolve_to_addrs(&host, pinned)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// An MCP server named in a request (`server_url`), connected for one run: its tools as
/// listed, or why there are none. Dropping it closes the connection — the run holds it until
/// it stops or pauses.
pub struct RequestServer {
    pub label: String,
    /// The listed tools, as handlers (empty when the server failed).
    pub handlers: Vec<Arc<dyn ToolHandler>>,
    /// Why the server offers no tools (it could not be reached or listed).
    pub error: Option<String>,
    _connection: Option<Connection>,
}

impl RequestServer {
    /// Connects to `url` at the `pinned` addresses (checked by the caller) with the request's
    /// `headers`, and lists the tools; a failure is the listing's `error`, never the caller's.
    /// Neither the headers nor their values appear in an error or a log line.
    pub async fn connect(
        label: &str,
        url: &str,
        pinned: Vec<SocketAddr>,
        headers: HashMap<HeaderName, HeaderValue>,
        startup_timeout: Duration,
    ) -> RequestServer {
        install_tls_provider();
        let settings = McpServerConfig {
            url: Some(url.to_string()),
            headers: BTreeMap::new(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            allowed_tools: None,
            require_approval: crate::config::ApprovalDefault::Always,
            timeout_ms: None,
            startup_timeout_ms: startup_timeout.as_millis() as u64,
            read_only_tools: Vec::new(),
            definition_only_tools: Vec::new(),
        };
        let link = Arc::new(Link {
            label: label.to_string(),
            endpoint: Endpoint::Http {
                url: url.to_string(),
                headers,
                pinned,
            },
            settings,
            peer: RwLock::new(None),
            progress: Mutex::new(HashMap::new()),
            list_changed: Notify::new(),
            tasks: TaskTracker::new(),
        });
        let failed = |error: String| {
            tracing::warn!(mcp_server = %label, error, "cannot use the MCP server named in the request");
            RequestServer {
                label: label.to_string(),
                handlers: Vec::new(),
                error: Some(format!(
                    "The MCP server '{label}' could not be used: {error}"
                )),
                _connection: None,
            }
        };
        let connection = match tokio::time::timeout(startup_timeout, link.connect()).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(problem)) => return failed(problem),
            Err(_) => {
                return failed(format!(
                    "it did not connect within {} ms",
                    startup_timeout.as_millis()
                ));
            }
        };
        let peer = connection.peer().clone();
        let listed = match tokio::time::timeout(startup_timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                return failed(format!(
                    "cannot list its tools: {}",
                    crate::redact::urls_in(&e.to_string())
                ));
            }
            Err(_) => {
                return failed(format!(
                    "it did not list its tools within {} ms",
                    startup_timeout.as_millis()
                ));
            }
        };
        link.set_peer(Some(peer));
        RequestServer {
            label: label.to_string(),
            handlers: link.offered(listed),
            error: None,
            _connection: Some(connection),
        }
    }
}

/// What a client and the model are told of an MCP server that is not connected.
pub fn not_connected(label: &str) -> String {
    format!("The MCP server '{label}' is not connected; its tools are unavailable for now.")
}

/// reqwest 0.13 (under rmcp) is built without a TLS crypto provider of its own, to use the
/// `ring` one the rest of the service already builds; it has to be the process's default.
pub fn install_tls_provider() {
    // Err: a provider is installed already (by an earlier start, or the embedding program).
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where a server is.
enum Endpoint {
    Http {
        url: String,
        headers: HashMap<HeaderName, HeaderValue>,
        /// The addresses checked for a server named in a request: the only ones connected to.
        /// Empty for a configured server (the operator's URL is resolved as usual).
        pinned: Vec<SocketAddr>,
    },
    Command {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
}

impl Endpoint {
    fn from_config(settings: &McpServerConfig) -> Result<Endpoint, String> {
        let expand = |what: &str, name: &str, value: &str| {
            expand_env(value).map_err(|var| {
                format!("{what} {name:?} needs the environment variable {var}, which is not set")
            })
        };
        match (&settings.url, &settings.command) {
            (Some(url), None) => {
                let mut headers = HashMap::new();
                for (name, value) in &settings.headers {
                    let value = expand("header", name, value)?;
                    let (name, value) = sensitive_header(name, &value)?;
                    headers.insert(name, value);
                }
                Ok(Endpoint::Http {
                    url: url.clone(),
                    headers,
                    pinned: Vec::new(),
                })
            }
            (None, Some(command)) => {
                let mut env = BTreeMap::new();
                for (name, value) in &settings.env {
                    env.insert(name.clone(), expand("variable", name, value)?);
                }
                Ok(Endpoint::Command {
                    program: command.clone(),
                    args: settings.args.clone(),
                    env,
                })
            }
            _ => Err("needs either url or command".into()),
        }
    }
}

/// One configured server: how to reach it, its connection while there is one, and what its
/// calls are waiting for.
struct Link {
    label: String,
    endpoint: Endpoint,
    settings: McpServerConfig,
    /// The live connection; `None` while the server is down.
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// Where each running call's progress goes, by the progress token of its request.
    progress: Mutex<HashMap<ProgressToken, ToolOutput>>,
    list_changed: Notify,
    /// The supervisor's tasks: the command's stderr reader, cancellation notices.
    tasks: TaskTracker,
}

type Connection = RunningService<RoleClient, Client>;

impl Link {
    fn new(
        label: &str,
        settings: &McpServerConfig,
        tasks: TaskTracker,
    ) -> Result<Arc<Link>, String> {
        Ok(Arc::new(Link {
            label: label.to_string(),
            endpoint: Endpoint::from_config(settings)?,
            settings: settings.clone(),
            peer: RwLock::new(None),
            progress: Mutex::new(HashMap::new()),
            list_changed: Notify::new(),
            tasks,
        }))
    }

    fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.settings.startup_timeout_ms)
    }

    fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_peer(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(PoisonError::into_inner) = peer;
    }

    /// Starts the command or opens the HTTP session, and completes the protocol's handshake.
    async fn connect(self: &Arc<Self>) -> Result<Connection, String> {
        let client = Client(self.clone());
        match &self.endpoint {
            Endpoint::Command { program, args, env } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env);
                // Its own process group, so that stopping it stops what it started (`npx`
                // runs node); killed when dropped, so that no server outlives the service.
                let mut command = CommandWrap::from(command);
                command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start {program:?}: {e}"))?;
                if let Some(stderr) = stderr {
                    self.tasks
                        .spawn(log_stderr(stderr).instrument(tracing::Span::current()));
                }
                client
                    .serve(transport)
                    .await
                    .map_err(|e| format!("the handshake failed: {e}"))
            }
            Endpoint::Http {
                url,
                headers,
                pinned,
            } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers.clone());
                let transport = match pinned.is_empty() {
                    true => StreamableHttpClientTransport::from_config(config),
                    false => StreamableHttpClientTransport::with_client(
                        pinned_client(url, pinned)?,
                        config,
                    ),
                };
                client.serve(transport).await.map_err(|e| {
                    format!(
                        "the handshake failed: {}",
                        crate::redact::urls_in(&e.to_string())
                    )
                })
            }
        }
    }

    /// Serves a connection until it ends (false) or the service stops (true): publishes the
    /// tools, and lists them again whenever the server says they changed.
    async fn serve(
        self: &Arc<Self>,
        connection: Connection,
        registry: &ToolRegistry,
        stop: &CancellationToken,
    ) -> bool {
        let peer = connection.peer().clone();
        if let Some(info) = peer.peer_info() {
            let server = info.server_info.as_ref();
            tracing::info!(
                protocol_version = %info.protocol_version,
                server = server.map_or("", |s| s.name.as_str()),
                version = server.map_or("", |s| s.version.as_str()),
                "MCP server connected"
            );
        }
        self.set_peer(Some(peer.clone()));
        crate::metrics::mcp_server_connected(&self.label, true);
        let cancel = connection.cancellation_token();
        let mut ended = std::pin::pin!(connection.waiting());
        // The first listing, then one after each notice that the tools changed; a stop is
        // heard while listing too.
        let mut listing = true;
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    cancel.cancel();
                    let _ = ended.await;
                    return true;
                }
                _ = &mut ended => return false,
                _ = self.refresh(&peer, registry), if listing => {
                    listing = false;
                    registry.settle(&self.label);
                }
                _ = self.list_changed.notified(), if !listing => listing = true,
            }
        }
    }

    /// Lists the server's tools and publishes those configured to be offered; a listing that
    /// fails leaves the tools as they were.
    async fn refresh(self: &Arc<Self>, peer: &Peer<RoleClient>, registry: &ToolRegistry) {
        let listed = match tokio::time::timeout(self.startup_timeout(), peer.list_all_tools()).await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                let error = crate::redact::urls_in(&e.to_string()).into_owned();
                tracing::warn!(error, "cannot list the MCP server's tools");
                return;
            }
            Err(_) => {
                tracing::warn!(
                    "the MCP server did not list its tools within startup_timeout_ms ({} ms)",
                    self.settings.startup_timeout_ms
                );
                return;
            }
        };
        let handlers = self.offered(listed);
        let problems = registry.publish(&self.label, handlers);
        for problem in &problems {
            tracing::warn!("{problem}; the tool is left out");
        }
        let offered = registry
            .server(&self.label)
            .map_or(0, |server| server.tools.len());
        crate::metrics::mcp_server_tools(&self.label, offered);
        tracing::info!(
            tools = offered,
            skipped = problems.len(),
            "MCP server's tools published"
        );
    }

    /// The listed tools the configuration lets the service offer, as handlers.
    fn offered(self: &Arc<Self>, listed: Vec<rmcp::model::Tool>) -> Vec<Arc<dyn ToolHandler>> {
        let settings = &self.settings;
        let listed_names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
        let configured = settings
            .allowed_tools
            .iter()
            .flatten()
            .map(|n| ("allowed_tools", n));
        let configured = configured
            .chain(
                settings
                    .read_only_tools
                    .iter()
                    .map(|n| ("read_only_tools", n)),
            )
            .chain(
                settings
                    .definition_only_tools
                    .iter()
                    .map(|n| ("definition_only_tools", n)),
            );
        for (key, name) in configured {
            if !listed_names.contains(&name.as_str()) {
                tracing::warn!("{key} names the tool {name:?}, which the MCP server does not list");
            }
        }
        let mut handlers: Vec<Arc<dyn ToolHandler>> = Vec::new();
        for tool in listed {
            let name = tool.name.to_string();
            let allowed = settings.allowed_tools.as_ref();
            if allowed.is_some_and(|names| !names.contains(&name)) {
                continue;
            }
            if !super::is_callable_name(&name) {
                tracing::warn!(
                    "tool {name:?} of tool server {:?} is left out: a model calls tools by names of 1 to 64 letters, digits, underscores or dashes",
                    self.label
                );
                continue;
            }
            handlers.push(Arc::new(McpTool {
                link: self.clone(),
                description: tool.description.as_deref().unwrap_or_default().to_string(),
                annotations: tool
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                    .filter(|a| a.as_object().is_some_and(|a| !a.is_empty())),
                parameters: Value::Object((*tool.input_schema).clone()),
                kind: match settings.definition_only_tools.contains(&name) {
                    true => ToolKind::DefinitionOnly,
                    false => ToolKind::Executed,
                },
                options: ToolOptions {
                    timeout: settings.timeout_ms.map(Duration::from_millis),
                    read_only: settings.read_only_tools.contains(&name),
                    ..ToolOptions::default()
                },
                name,
            }));
        }
        handlers
    }

    /// One `tools/call` on the live connection. Progress goes to `output` while it runs; a
    /// call dropped before its answer is cancelled at the server.
    async fn call(
        self: &Arc<Self>,
        name: &str,
        arguments: Value,
        output: ToolOutput,
    ) -> ToolResult {
        let Some(peer) = self.peer() else {
            return ToolResult::failure(
                ToolErrorKind::Transport { status: None },
                not_connected(&self.label),
            );
        };
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = match arguments {
            Value::Object(arguments) => Some(arguments),
            _ => None,
        };
        // The call's trace goes on at the server, in `_meta` (SEP-414), when traces are on.
        if let Some(traceparent) = crate::telemetry::traceparent() {
            params.set_traceparent(&traceparent);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => return self.failure(e),
        };
        // Registered once the request is queued: a progress notification can only come after
        // the server has read it. (rmcp handles each notification on a task of its own, so one
        // sent just before the result may come after it, when nobody listens any more.)
        let _progress = ProgressWatch::new(self.clone(), handle.progress_token.clone(), output);
        let mut abandoned = Abandoned {
            link: self.clone(),
            peer: peer.clone(),
            request: Some(handle.id.clone()),
        };
        let answered = handle.await_response().await;
        abandoned.request = None;
        match answered {
            Ok(ServerResult::CallToolResult(result)) => serde_json::to_value(result)
                .and_then(serde_json::from_value::<CallResult>)
                .map_or_else(
                    |e| self.failure_text(format!("its result could not be read: {e}")),
                    CallResult::into_tool_result,
                ),
            Ok(_) => self.failure_text("it answered tools/call with another kind of result".into()),
            Err(e) => self.failure(e),
        }
    }

    fn failure(&self, error: ServiceError) -> ToolResult {
        self.failure_text(crate::redact::urls_in(&error.to_string()).into_owned())
    }

    /// A call that failed for the protocol or the connection, not because the tool said so.
    fn failure_text(&self, problem: String) -> ToolResult {
        ToolResult::failure(
            ToolErrorKind::Transport { status: None },
            format!("The MCP server '{}' failed the call: {problem}", self.label),
        )
    }

    /// Sends a progress notification to the call it belongs to.
    fn progressed(&self, progress: ProgressNotificationParam) {
        let output = self
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&progress.progress_token)
            .cloned();
        if let Some(output) = output {
            output.send(progress_text(&progress));
        }
    }
}

/// One progress notification as a line of the call's output: `progress 2/5: message`.
fn progress_text(progress: &ProgressNotificationParam) -> String {
    let number = |n: f64| match n.fract() == 0.0 && n.abs() < 1e15 {
        true => format!("{}", n as i64),
        false => format!("{n}"),
    };
    let mut text = format!("progress {}", number(progress.progress));
    if let Some(total) = progress.total {
        text.push_str(&format!("/{}", number(total)));
    }
    if let Some(message) = &progress.message {
        text.push_str(&format!(": {message}"));
    }
    text.push('\n');
    text
}

/// Reads past the end of the current line without keeping it; false at the end of the stream.
async fn skip_line(stderr: &mut tokio::io::BufReader<tokio::process::ChildStderr>) -> bool {
    loop {
        let Ok(buffer) = stderr.fill_buf().await else {
            return false;
        };
        if buffer.is_empty() {
            return false;
        }
        match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => {
                stderr.consume(at + 1);
                return true;
            }
            None => {
                let all = buffer.len();
                stderr.consume(all);
            }
        }
    }
}

/// The longest stderr line logged whole; the rest of a longer one is dropped.
const STDERR_LINE: usize = 8 * 1024;

/// Logs what a command writes to stderr, line by line (not UTF-8 is no reason to stop
/// reading: a server whose stderr is not read any more blocks or dies of SIGPIPE).
async fn log_stderr(stderr: tokio::process::ChildStderr) {
    let mut stderr = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        // At most STDERR_LINE bytes of a line, then the rest of it skipped.
        let read = (&mut stderr)
            .take(STDERR_LINE as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') && line.len() >= STDERR_LINE && !skip_line(&mut stderr).await
        {
            return;
        }
        let text = String::from_utf8_lossy(&line);
        tracing::info!(stderr = %text.trim_end(), "MCP server wrote to stderr");
    }
}

/// Connects, serves, and reconnects after a growing delay, until the service stops.
async fn supervise(link: Arc<Link>, registry: Arc<ToolRegistry>, stop: CancellationToken) {
    let mut wait = FIRST_RETRY;
    loop {
        let attempt = Instant::now();
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            connected = tokio::time::timeout(link.startup_timeout(), link.connect()) => connected,
        };
        if !matches!(connected, Ok(Ok(_))) {
            registry.settle(&link.label);
        }
        match connected {
            Ok(Ok(connection)) => {
                let stopped = link.serve(connection, &registry, &stop).await;
                link.set_peer(None);
                registry.withdraw(&link.label);
                crate::metrics::mcp_server_connected(&link.label, false);
                if stopped {
                    tracing::info!("MCP server disconnected at shutdown");
                    return;
                }
                if attempt.elapsed() >= HEALTHY {
                    wait = FIRST_RETRY;
                }
                tracing::warn!(
                    retry_in_ms = wait.as_millis() as u64,
                    "the MCP server's connection ended; its tools are unavailable until it is back"
                );
            }
            Ok(Err(problem)) => {
                tracing::warn!(
                    retry_in_ms = wait.as_millis() as u64,
                    "cannot connect to the MCP server: {problem}"
                )
            }
            Err(_) => tracing::warn!(
                retry_in_ms = wait.as_millis() as u64,
                "the MCP server did not connect within startup_timeout_ms ({} ms)",
                link.settings.startup_timeout_ms
            ),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(LAST_RETRY);
    }
}

/// The client side of a connection: hears progress and list changes.
struct Client(Arc<Link>);

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.0.progressed(params);
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        tracing::info!("the MCP server's tools changed; listing them again");
        self.0.list_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("switchyard", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A tool of an MCP server, as the registry holds it.
struct McpTool {
    link: Arc<Link>,
    name: String,
    description: String,
    parameters: Value,
    annotations: Option<Value>,
    kind: ToolKind,
    options: ToolOptions,
}

#[async_trait]
impl ToolHandler for McpTool {
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

    fn annotations(&self) -> Option<Value> {
        self.annotations.clone()
    }

    /// The executor stops waiting on cancel and timeout by dropping this future, which
    /// cancels the request at the server ([`Abandoned`]).
    async fn call(&self, _: ToolContext, arguments: Value, output: ToolOutput) -> ToolResult {
        self.link.call(&self.name, arguments, output).await
    }
}

/// Routes a request's progress notifications to its call's output while it runs.
struct ProgressWatch {
    link: Arc<Link>,
    token: ProgressToken,
}

impl ProgressWatch {
    fn new(link: Arc<Link>, token: ProgressToken, output: ToolOutput) -> ProgressWatch {
        link.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), output);
        ProgressWatch { link, token }
    }
}

impl Drop for ProgressWatch {
    fn drop(&mut self) {
        self.link
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
    }
}

/// A request nobody waits for any more, while it is armed: dropping it tells the server with
/// `notifications/cancelled`. (rmcp's own `RequestHandle` sends nothing when its future is
/// dropped, and its `cancel` needs the handle that `await_response` consumes.)
struct Abandoned {
    link: Arc<Link>,
    peer: Peer<RoleClient>,
    request: Option<RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let peer = self.peer.clone();
        let label = self.link.label.clone();
        self.link.tasks.spawn(async move {
            let notice = CancelledNotificationParam::new(
                Some(request),
                Some("the call was cancelled or timed out".into()),
            );
            match peer.notify_cancelled(notice).await {
                Ok(()) => tracing::info!(mcp_server = %label, "MCP call cancelled at the server"),
                Err(e) => {
                    let error = crate::redact::urls_in(&e.to_string()).into_owned();
                    tracing::warn!(mcp_server = %label, error, "cannot cancel an MCP call at the server")
                }
            }
        });
    }
}
