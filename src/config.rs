//! Typed settings: `config/default.toml` (compiled in) < `--config PATH` < `SWITCHYARD__…`
//! environment variables (SPEC §11). Secrets are wrapped in [`Secret`] so that neither logs
//! nor `check-config` ever print them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use figment::Figment;
use serde::{Deserialize, Serialize, Serializer};

use crate::redact;

mod provider;
mod sources;
mod validate;

pub use provider::{Profile, ReasoningFormat, SendBack, ToolProtocol};

pub use sources::{did_you_mean, key};

/// The defaults, compiled into the binary so it runs from any directory.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Headers the MCP transport sets itself; neither the configuration nor a request may set them.
pub const MCP_RESERVED_HEADERS: [&str; 3] = ["accept", "mcp-session-id", "last-event-id"];

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub database: DatabaseConfig,
    /// The default provider.
    pub llm: LlmConfig,
    /// Named providers, each routing its own `models`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Per model, another model to ask when its provider fails before it streams.
    #[serde(default)]
    pub fallbacks: BTreeMap<String, FallbackConfig>,
    pub runs: RunsConfig,
    pub tools: ToolsConfig,
    /// What one request may ask for.
    pub limits: crate::protocol::limits::RequestLimits,
    /// HTTP tool servers by label.
    #[serde(default)]
    pub tool_servers: BTreeMap<String, ToolServerConfig>,
    /// MCP servers by label: their tools join the registry as they are discovered.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// How reasoning given to clients in `encrypted_content` is sealed.
    #[serde(default)]
    pub reasoning: ReasoningConfig,
    /// The run inspector's pages under `/ui`.
    #[serde(default)]
    pub ui: UiConfig,
    /// Traces over OTLP.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where each value came from, for messages that name it.
    #[serde(skip)]
    origin: Origin,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Server tool calls of one model turn running at once.
    pub max_concurrency: usize,
    /// Timeout of a call whose tool sets none.
    pub default_timeout_ms: u64,
    /// Model turns per run; a run still calling tools after that ends `incomplete`.
    pub max_turns: u32,
    /// What a failed server tool call does: `report` it to the model, or `fail` the run.
    pub on_error: ToolErrorPolicy,
    pub fetch_url: FetchUrlConfig,
    /// MCP servers a request names by `server_url` (off unless hosts are listed).
    #[serde(default)]
    pub request_mcp: RequestMcpConfig,
    /// Hosted tool types requests may carry (`web_search`, …) and the tool server that runs
    /// each; unmapped ones are left out of what the model sees.
    #[serde(default)]
    pub hosted: BTreeMap<String, String>,
    /// What a request's hosted tool of a type not in `hosted` gets.
    #[serde(default)]
    pub unmapped_hosted: UnmappedHosted,
    /// Tools taken out of the registry altogether (a built-in one such as `fetch_url`).
    #[serde(default)]
    pub disabled: Vec<String>,
    /// `/readyz` answers 503 until every MCP server has listed its tools once, or has been
    /// failing for this long since its first attempt.
    #[serde(default = "default_mcp_ready_wait_ms")]
    pub mcp_ready_wait_ms: u64,
}

fn default_mcp_ready_wait_ms() -> u64 {
    10_000
}

/// What a request's hosted tool (`web_search`, …) of a type no tool server is configured for
/// gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnmappedHosted {
    /// Left out of what the model sees (Codex sends `web_search` unasked), logged once per
    /// type and counted in `switchyard_unmapped_hosted_tools_total`.
    #[default]
    Ignore,
    /// A 400 naming `tools[i].type` and the setting that would map it.
    Refuse,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorPolicy {
    Report,
    Fail,
}

/// The built-in `fetch_url` tool.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FetchUrlConfig {
    /// Hosts it may fetch from; empty means any public host.
    pub allowed_hosts: Vec<String>,
    /// Whether private, loopback and link-local addresses may be fetched.
    pub allow_private: bool,
    pub max_bytes: usize,
    pub timeout_ms: u64,
}

/// MCP servers named in a request (`{"type":"mcp","server_label","server_url",…}`): refused
/// unless the URL's host is listed here, and never on a private, loopback or link-local
/// address unless `allow_private` (the checks of `fetch_url`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RequestMcpConfig {
    /// Hosts a request may name (`mcp.example.com`, or `.example.org` for it and its
    /// subdomains); empty (the default): requests cannot name servers.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default)]
    pub allow_private: bool,
    /// How long connecting and listing the tools may take before the server's listing fails.
    #[serde(default = "mcp_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
}

/// A tool server's settings; with `tools`, an HTTP tool server whose tools are each backed
/// by an HTTP endpoint. `[tool_servers.builtin]` may set only `require_approval`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolServerConfig {
    /// Whether calls wait for the client's approval unless a request says otherwise.
    #[serde(default)]
    pub require_approval: ApprovalDefault,
    #[serde(default)]
    pub tools: Vec<HttpToolConfig>,
}

/// An MCP server whose tools the service offers under its label: reached at `url` (the
/// streamable HTTP transport), or started by the service as `command` with `args` and `env`
/// (stdio), restarted when it exits and stopped at shutdown.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub url: Option<String>,
    /// Sent with every request to `url`; values may name environment variables as `${NAME}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Added to the service's own environment for `command`; values may name environment
    /// variables as `${NAME}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Only these of the server's tools are offered (all when absent).
    pub allowed_tools: Option<Vec<String>>,
    /// Whether calls wait for the client's approval unless a request says otherwise.
    #[serde(default)]
    pub require_approval: ApprovalDefault,
    /// A call's timeout (`tools.default_timeout_ms` when absent).
    pub timeout_ms: Option<u64>,
    /// How long connecting (starting the command, the protocol's handshake) and listing the
    /// tools may take before the attempt counts as failed and is retried later.
    #[serde(default = "mcp_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// Tools that change nothing: after a crash their calls may run again (see `ToolOptions`).
    #[serde(default)]
    pub read_only_tools: Vec<String>,
    /// Tools the model sees but the client executes (the run pauses for their output).
    #[serde(default)]
    pub definition_only_tools: Vec<String>,
}

fn mcp_startup_timeout_ms() -> u64 {
    10_000
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDefault {
    Always,
    #[default]
    Never,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
    pub url: String,
    #[serde(default = "post")]
    pub method: String,
    /// Header values may name environment variables as `${NAME}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
    #[serde(default = "executed")]
    pub kind: ToolKind,
    #[serde(default)]
    pub return_direct: bool,
    #[serde(default)]
    pub hidden: bool,
    /// The endpoint changes nothing: a call may run again after a crash (see `ToolOptions`).
    #[serde(default)]
    pub read_only: bool,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

fn post() -> String {
    "POST".into()
}

fn executed() -> ToolKind {
    ToolKind::Executed
}

/// Who executes a tool's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// The service runs the handler.
    Executed,
    /// The model sees the tool, the client executes it (the run pauses for its output).
    DefinitionOnly,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub body_limit_bytes: usize,
    /// On shutdown, how long `/readyz` answers 503 while requests are still served.
    pub drain_delay_ms: u64,
    pub shutdown_grace_seconds: u64,
    pub heartbeat_seconds: u64,
    /// A connection that has not sent a request's headers within this is closed.
    pub header_read_timeout_seconds: u64,
    /// A request whose body has not arrived within this gets a 408.
    pub body_read_timeout_seconds: u64,
    /// Connections served at once; beyond it, new ones wait to be accepted.
    pub max_connections: usize,
}

/// Who may call the service.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `keys`: every `/v1` request needs an API key (`switchyard keys create`); `open`: no
    /// keys, every request is the default tenant's (local use).
    pub mode: AuthMode,
    /// In open mode, listen on an address other than loopback all the same.
    pub open_on_any_address: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    Keys,
    Open,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: String,
    pub max_connections: u32,
}

/// `[llm]`: the default provider's keys and the settings every provider shares, side by side
/// in one table. Read through [`LlmSection`], since serde cannot refuse unknown keys of a
/// struct with a flattened part.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(from = "LlmSection")]
pub struct LlmConfig {
    #[serde(flatten)]
    pub provider: ProviderConfig,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    /// Attempts after the first when a provider fails before it streams (a connection that
    /// fails, a 429, a 5xx), waiting `retry_initial_ms` doubled each time up to
    /// `retry_max_ms` (with jitter), or what its `Retry-After` asks.
    pub retries: u32,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    /// Each provider is asked for its model list at start ([`crate::llm::probe`]).
    pub probe_at_start: bool,
}

/// `[llm]` as written: [`ProviderConfig`]'s keys (the same list, kept in step by a test) and
/// [`LlmConfig`]'s own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmSection {
    base_url: Option<String>,
    api_key: Option<Secret>,
    api_key_env: Option<String>,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    http2: bool,
    #[serde(default)]
    max_concurrent_requests: Option<usize>,
    #[serde(default)]
    profile: Option<Profile>,
    #[serde(default)]
    reasoning_format: Option<ReasoningFormat>,
    #[serde(default)]
    reasoning_send_back: Option<SendBack>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    images: Option<bool>,
    #[serde(default)]
    tool_protocol: Option<ToolProtocol>,
    connect_timeout_ms: u64,
    first_byte_timeout_ms: u64,
    idle_timeout_ms: u64,
    retries: u32,
    retry_initial_ms: u64,
    retry_max_ms: u64,
    probe_at_start: bool,
}

impl From<LlmSection> for LlmConfig {
    fn from(section: LlmSection) -> LlmConfig {
        LlmConfig {
            provider: ProviderConfig {
                base_url: section.base_url,
                api_key: section.api_key,
                api_key_env: section.api_key_env,
                models: section.models,
                http2: section.http2,
                max_concurrent_requests: section.max_concurrent_requests,
                profile: section.profile,
                reasoning_format: section.reasoning_format,
                reasoning_send_back: section.reasoning_send_back,
                api_version: section.api_version,
                images: section.images,
                tool_protocol: section.tool_protocol,
            },
            connect_timeout_ms: section.connect_timeout_ms,
            first_byte_timeout_ms: section.first_byte_timeout_ms,
            idle_timeout_ms: section.idle_timeout_ms,
            retries: section.retries,
            retry_initial_ms: section.retry_initial_ms,
            retry_max_ms: section.retry_max_ms,
            probe_at_start: section.probe_at_start,
        }
    }
}

/// `[reasoning]`: the key reasoning is sealed with in `encrypted_content` (SPEC §13), the same
/// on every replica; earlier keys still open what they sealed.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key: Option<Secret>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_encryption_keys: Vec<Secret>,
}

/// `[telemetry]`: traces sent over OTLP (HTTP, protobuf) to a collector; off while
/// `otlp_endpoint` is empty.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://collector:4318`): spans go to `{otlp_endpoint}/v1/traces`.
    pub otlp_endpoint: String,
    /// Headers sent with every export (a vendor's key, say); `${VAR}` reads the environment.
    pub otlp_headers: BTreeMap<String, String>,
    /// The share of traces kept, 0 to 1, for those whose client sent no `traceparent` (a
    /// client's sampled flag is followed).
    pub sample_ratio: f64,
    /// `service.name` on every span.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: String::new(),
            otlp_headers: BTreeMap::new(),
            sample_ratio: 1.0,
            service_name: "switchyard".to_owned(),
        }
    }
}

/// `[ui]`: the run inspector (`/ui`, SPEC §17), the operator's switches.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// Serve the pages at all (without them `/ui` is a 404).
    pub enabled: bool,
    /// Show runs, but offer no form that changes one (no answers, no cancel).
    pub read_only: bool,
    /// Show what runs said and did (messages, tool arguments and outputs, metadata values);
    /// off, the pages show their shape (ids, statuses, times, sizes) only.
    pub show_content: bool,
}

impl Default for UiConfig {
    fn default() -> UiConfig {
        UiConfig {
            enabled: true,
            read_only: false,
            show_content: true,
        }
    }
}

/// Where a model's requests go when its provider fails before it streams.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackConfig {
    /// The model to ask instead (routed by its own provider).
    pub model: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
    /// The name of an environment variable holding the key.
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub models: Vec<String>,
    /// Speak HTTP/2 to this provider (prior knowledge, also without TLS): every run shares
    /// one connection. Off by default: HTTP/1.1 gives each streaming run its own connection,
    /// and an HTTP/2 server's cap on concurrent streams would make runs beyond it wait.
    #[serde(default)]
    pub http2: bool,
    /// Requests (streams) at once to this provider; more wait for a slot (as long as
    /// `llm.first_byte_timeout_ms`). None: unlimited.
    #[serde(default)]
    pub max_concurrent_requests: Option<usize>,
    /// Whose dialect of chat completions it speaks (SPEC §14); by default the one of the
    /// public endpoint `base_url` names, else `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// Where its models' reasoning is read from; by default the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_format: Option<ReasoningFormat>,
    /// Which earlier reasoning its models are sent again; by default the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_send_back: Option<SendBack>,
    /// Azure OpenAI's `api-version` query parameter (deployment URLs need one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Whether its models are shown the images tools return (else only a placeholder text);
    /// by default the profile's: yes, except DeepSeek's text-only API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
    /// How its models are offered tools and write their calls (SPEC §15): natively, or in a
    /// text protocol for models without function calling. `native` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_protocol: Option<ToolProtocol>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunsConfig {
    pub event_batch_max: usize,
    /// How long a run waits in `requires_action` for the client before it expires.
    pub requires_action_ttl_ms: u64,
    /// How often leases are renewed and overdue or abandoned runs swept.
    pub sweep_interval_ms: u64,
    /// Background runs this instance executes at once.
    pub max_background: usize,
    /// How often an instance looks for queued background runs (it is also woken at once by
    /// its own creates).
    pub claim_interval_ms: u64,
    /// How long an instance's claim on a running run holds without renewal; after it, another
    /// instance takes the run over.
    pub lease_ttl_ms: u64,
    /// Stopped runs (and their event logs) are deleted after this long.
    pub retention_hours: u64,
    /// An `Idempotency-Key` returns the same run for this long.
    pub idempotency_ttl_hours: u64,
}

/// A secret value: shown as `***` by `Debug` and `Serialize`.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

/// A configuration that cannot be used, with every problem found: one per line, each naming
/// its key (`llm.models`, `tool_servers.weather.tools[0].url`) and, where it was set, the file
/// or environment variable it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    MissingFile(String),
    /// The problems, with the warnings found along with them.
    #[error("{}", .errors.join("\n"))]
    Invalid {
        errors: Vec<String>,
        warnings: Vec<String>,
    },
}

impl ConfigError {
    /// Each problem on its own.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ConfigError::MissingFile(_) => vec![self.to_string()],
            ConfigError::Invalid { errors, .. } => errors.clone(),
        }
    }

    /// What was found besides, which would not have stopped the service on its own.
    pub fn warnings(&self) -> &[String] {
        match self {
            ConfigError::MissingFile(_) => &[],
            ConfigError::Invalid { warnings, .. } => warnings,
        }
    }
}

/// What [`Config::validate`] found: errors refuse the configuration, warnings are printed
/// and the service starts all the same.
#[derive(Debug, Default)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// A provider with everything resolved: where to send requests and with which key.
#[derive(Clone, Debug)]
pub struct ResolvedProvider {
    pub name: String,
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub models: Vec<String>,
    pub http2: bool,
    pub max_concurrent_requests: Option<usize>,
    pub profile: Profile,
    /// The configured overrides of the profile's reasoning defaults.
    pub reasoning_format: Option<ReasoningFormat>,
    pub reasoning_send_back: Option<SendBack>,
    pub api_version: Option<String>,
    /// The configured override of the profile's `images`.
    pub images: Option<bool>,
    pub tool_protocol: ToolProtocol,
}

/// The layered configuration a [`Config`] was read from, kept to say where a value came from.
#[derive(Clone, Default)]
struct Origin(Option<Arc<Figment>>);

impl fmt::Debug for Origin {
    /// Not the values: they hold the secrets [`Secret`] hides.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Origin")
    }
}

impl Origin {
    fn of(figment: Figment) -> Origin {
        Origin(Some(Arc::new(figment)))
    }
}

impl Config {
    /// Every provider with its URL and key resolved; the default provider first.
    pub fn providers(&self) -> Vec<ResolvedProvider> {
        let mut list = vec![resolve("default", &self.llm.provider, true)];
        for (name, provider) in &self.providers {
            list.push(resolve(name, provider, false));
        }
        list
    }

    /// The effective configuration as TOML, secrets redacted (for `check-config`).
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        // Show the resolved default provider so operators see where requests will go.
        let default = resolve("default", &self.llm.provider, true);
        shown.llm.provider.base_url = Some(redact::url(&default.base_url));
        shown.llm.provider.api_key = default.api_key;
        shown.database.url = redact::url(&shown.database.url);
        for provider in shown.providers.values_mut() {
            provider.base_url = provider.base_url.as_deref().map(redact::url);
        }
        for server in shown.tool_servers.values_mut() {
            for tool in &mut server.tools {
                tool.url = redact::url(&tool.url);
                for value in tool.headers.values_mut() {
                    *value = redact::header_value(value);
                }
            }
        }
        shown.telemetry.otlp_endpoint = redact::url(&shown.telemetry.otlp_endpoint);
        for value in shown.telemetry.otlp_headers.values_mut() {
            *value = redact::header_value(value);
        }
        for server in shown.mcp_servers.values_mut() {
            server.url = server.url.as_deref().map(redact::url);
            for value in server.headers.values_mut().chain(server.env.values_mut()) {
                *value = redact::header_value(value);
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}"))
    }
}

/// The prefix of configuration variables, and what separates a section from its key.
const ENV_PREFIX: &str = "SWITCHYARD__";
const ENV_SEPARATOR: &str = "__";

/// A set environment variable's value; an empty one counts as unset (docker-compose writes
/// `${VAR:-}` as an empty value).
fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn resolve(name: &str, provider: &ProviderConfig, is_default: bool) -> ResolvedProvider {
    let base_url = provider
        .base_url
        .clone()
        .or_else(|| is_default.then(|| env_value("OPENAI_BASE_URL")).flatten())
        .unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_string());
    let api_key = provider
        .api_key
        .clone()
        .filter(|key| !key.expose().is_empty())
        .or_else(|| {
            provider
                .api_key_env
                .as_deref()
                .and_then(env_value)
                .map(Secret)
        })
        .or_else(|| {
            is_default
                .then(|| env_value("OPENAI_API_KEY").map(Secret))
                .flatten()
        });
    let profile = provider
        .profile
        .unwrap_or_else(|| Profile::for_url(&base_url));
    ResolvedProvider {
        name: name.to_string(),
        profile,
        reasoning_format: provider.reasoning_format,
        reasoning_send_back: provider.reasoning_send_back,
        api_version: provider.api_version.clone(),
        images: provider.images,
        tool_protocol: provider.tool_protocol.unwrap_or_default(),
        base_url: base_url.trim_end_matches('/').to_string(),
        api_key,
        models: provider.models.clone(),
        http2: provider.http2,
        max_concurrent_requests: provider.max_concurrent_requests,
    }
}

/// `value` with every `${NAME}` replaced by the environment variable's value; the error is
/// the name of the first variable that is not set. Header values of tool servers use it.
pub fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_string())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Toml};

    use super::*;

    fn read(toml: &str) -> Result<Config, Vec<String>> {
        sources::extract(&Figment::from(Toml::string(DEFAULT_TOML)).merge(Toml::string(toml)))
            .map_err(|(problems, _)| problems)
    }

    #[test]
    fn every_key_of_the_defaults_and_of_their_commented_examples_is_known() {
        assert!(Config::defaults().is_ok());
        // Commented-out `[table]` and `key = value` lines (not prose), uncommented, under the
        // tables they are written in.
        let examples: String = DEFAULT_TOML
            .lines()
            .filter_map(|line| match line.strip_prefix("# ") {
                Some(example) => Some(example),
                None => line.starts_with('[').then_some(line),
            })
            .filter(|line| {
                line.starts_with('[')
                    || (line.contains(" = ") && toml::from_str::<toml::Table>(line).is_ok())
            })
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(
            examples.contains("[[tool_servers.weather.tools]]"),
            "{examples}"
        );
        let config = read(&examples).unwrap();
        assert_eq!(config.providers["local"].models, ["llama3.1"]);
        assert_eq!(config.fallbacks["gpt-4o"].model, "llama3.1");
        assert_eq!(
            config.tool_servers["weather"].tools[0].timeout_ms,
            Some(5000)
        );
        assert_eq!(config.llm.provider.max_concurrent_requests, Some(64));
        assert_eq!(config.mcp_servers["search"].timeout_ms, Some(20000));
        assert_eq!(config.mcp_servers["everything"].args.len(), 3);
    }

    #[test]
    fn the_llm_table_takes_every_key_a_provider_table_takes() {
        let provider = ProviderConfig {
            base_url: Some("http://127.0.0.1:11434/v1".into()),
            api_key: Some(Secret::new("***")),
            api_key_env: Some("LOCAL_KEY".into()),
            models: vec!["llama3.1".into()],
            http2: true,
            max_concurrent_requests: Some(4),
            profile: Some(Profile::Vllm),
            reasoning_format: Some(ReasoningFormat::ThinkTags),
            reasoning_send_back: Some(SendBack::TurnLoop),
            api_version: Some("2024-10-21".into()),
            images: Some(false),
            tool_protocol: Some(ToolProtocol::Hermes),
        };
        let table = toml::to_string(&provider).unwrap();
        let config = read(&format!("[llm]\n{table}")).unwrap();
        assert_eq!(
            toml::to_string(&config.llm.provider).unwrap(),
            table,
            "every key of [providers.NAME] is read in [llm]"
        );
    }

    #[test]
    fn header_values_take_variables_from_the_environment() {
        // PATH is set in every test environment.
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(
            expand_env("a ${PATH} b").as_deref(),
            Ok(format!("a {path} b").as_str())
        );
        assert_eq!(expand_env("plain").as_deref(), Ok("plain"));
        assert_eq!(
            expand_env("${SWITCHYARD_SURELY_UNSET_VAR}"),
            Err("SWITCHYARD_SURELY_UNSET_VAR".into())
        );
    }
}
