//! Typed settings: `config/default.toml` (compiled in) < `--config PATH` < `SWITCHYARD__…`
//! environment variables (SPEC §11). Secrets are wrapped in [`Secret`] so that neither logs
//! nor `check-config` ever print them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize, Serializer};

use crate::redact;

/// The defaults, compiled into the binary so it runs from any directory.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Clone, Debug, Deserialize, Serialize)]
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
    pub limits: crate::protocol::request::RequestLimits,
    /// HTTP tool servers by label.
    #[serde(default)]
    pub tool_servers: BTreeMap<String, ToolServerConfig>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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
    /// Hosted tool types requests may carry (`web_search`, …) and the tool server that runs
    /// each; unmapped ones are left out of what the model sees.
    #[serde(default)]
    pub hosted: BTreeMap<String, String>,
    /// Tools taken out of the registry altogether (a built-in one such as `fetch_url`).
    #[serde(default)]
    pub disabled: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorPolicy {
    Report,
    Fail,
}

/// The built-in `fetch_url` tool.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct FetchUrlConfig {
    /// Hosts it may fetch from; empty means any public host.
    pub allowed_hosts: Vec<String>,
    /// Whether private, loopback and link-local addresses may be fetched.
    pub allow_private: bool,
    pub max_bytes: usize,
    pub timeout_ms: u64,
}

/// A tool server's settings; with `tools`, an HTTP tool server whose tools are each backed
/// by an HTTP endpoint. `[tool_servers.builtin]` may set only `require_approval`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ToolServerConfig {
    /// Whether calls wait for the client's approval unless a request says otherwise.
    #[serde(default)]
    pub require_approval: ApprovalDefault,
    #[serde(default)]
    pub tools: Vec<HttpToolConfig>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDefault {
    Always,
    #[default]
    Never,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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
pub struct DatabaseConfig {
    pub url: String,
    pub max_connections: u32,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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
}

/// Where a model's requests go when its provider fails before it streams.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackConfig {
    /// The model to ask instead (routed by its own provider).
    pub model: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
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
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("configuration file {0} does not exist")]
    MissingFile(String),
    #[error("configuration: {0}")]
    Invalid(String),
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
}

impl Config {
    /// Loads the defaults, the optional file, then the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, Env::prefixed("SWITCHYARD__").split("__"))
    }

    /// Loads the defaults and the given overrides only (tests use this to stay independent
    /// of the process environment).
    pub fn load_with_env(path: Option<&Path>, env: Env) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = path {
            if !path.exists() {
                return Err(ConfigError::MissingFile(path.display().to_string()));
            }
            figment = figment.merge(Toml::file(path));
        }
        let config: Config = figment.merge(env).extract().map_err(Box::new)?;
        config.validate()?;
        Ok(config)
    }

    /// The defaults alone.
    pub fn defaults() -> Result<Config, ConfigError> {
        Config::load_with_env(None, Env::raw().only(&[]))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.database.url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres:")
            || url.starts_with("postgresql:"))
        {
            return Err(ConfigError::Invalid(format!(
                "database.url must start with sqlite:// or postgres://, got {url:?}"
            )));
        }
        if self.auth.mode == AuthMode::Open && !self.auth.open_on_any_address {
            let loopback = match self.server.host.parse::<std::net::IpAddr>() {
                Ok(ip) => ip.is_loopback(),
                Err(_) => self.server.host == "localhost",
            };
            if !loopback {
                return Err(ConfigError::Invalid(format!(
                    "auth.mode = \"open\" serves anyone who can connect, without API keys: it listens on loopback only, not on server.host = {:?}. Use API keys (auth.mode = \"keys\"), or set auth.open_on_any_address = true",
                    self.server.host
                )));
            }
        }
        if self.server.body_limit_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.body_limit_bytes must be positive".into(),
            ));
        }
        if self.tools.max_concurrency == 0 || self.tools.max_turns == 0 {
            return Err(ConfigError::Invalid(
                "tools.max_concurrency and tools.max_turns must be positive".into(),
            ));
        }
        if self.runs.lease_ttl_ms <= self.runs.sweep_interval_ms {
            return Err(ConfigError::Invalid(
                "runs.lease_ttl_ms must be longer than runs.sweep_interval_ms (leases are renewed every sweep)".into(),
            ));
        }
        if self.runs.event_batch_max == 0 {
            return Err(ConfigError::Invalid(
                "runs.event_batch_max must be positive".into(),
            ));
        }
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        for provider in self.providers() {
            for model in &provider.models {
                if model == "*" {
                    continue;
                }
                if let Some(first) = owner.insert(model.clone(), provider.name.clone()) {
                    return Err(ConfigError::Invalid(format!(
                        "model {model:?} is routed by both providers {first:?} and {:?}",
                        provider.name
                    )));
                }
            }
        }
        for (model, fallback) in &self.fallbacks {
            let routed = owner.contains_key(&fallback.model)
                || self
                    .providers()
                    .iter()
                    .any(|p| p.models.iter().any(|m| m == "*"));
            if !routed {
                return Err(ConfigError::Invalid(format!(
                    "fallbacks.{model}.model names {:?}, which no provider routes",
                    fallback.model
                )));
            }
        }
        Ok(())
    }

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
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}"))
    }
}

fn resolve(name: &str, provider: &ProviderConfig, is_default: bool) -> ResolvedProvider {
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let base_url = provider
        .base_url
        .clone()
        .or_else(|| is_default.then(|| env("OPENAI_BASE_URL")).flatten())
        .unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_string());
    let api_key = provider
        .api_key
        .clone()
        .or_else(|| provider.api_key_env.as_deref().and_then(env).map(Secret))
        .or_else(|| {
            is_default
                .then(|| env("OPENAI_API_KEY").map(Secret))
                .flatten()
        });
    ResolvedProvider {
        name: name.to_string(),
        base_url: base_url.trim_end_matches('/').to_string(),
        api_key,
        models: provider.models.clone(),
        http2: provider.http2,
        max_concurrent_requests: provider.max_concurrent_requests,
    }
}
