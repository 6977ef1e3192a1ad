//! What the values of a configuration mean: every problem found, each naming its full key and
//! where it was set. Values that can leak a secret (URLs, keys) are shown redacted or not at
//! all.

use std::collections::BTreeMap;
use std::fmt::Display;

use url::{Host, Url};

use super::sources::{self, Setter, did_you_mean, key};
use super::{AuthMode, Config, Findings, OPENAI_DEFAULT_BASE_URL, ProviderConfig, env_value};
use crate::redact;

/// The methods a tool server's endpoint may be called with (an unknown one is a typo: HTTP
/// would send it as an extension method and the endpoint would refuse it).
const TOOL_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

pub(super) fn all(config: &Config) -> Findings {
    let mut check = Check {
        config,
        findings: Findings::default(),
    };
    check.server_and_auth();
    check.database();
    check.providers();
    check.fallbacks();
    check.tools();
    check.tool_servers();
    check.mcp_servers();
    check.runs();
    check.telemetry();
    check.environment();
    check.findings
}

struct Check<'a> {
    config: &'a Config,
    findings: Findings,
}

/// A key path from its segments (labels and indices included).
fn at<S: ToString>(segments: &[S]) -> Vec<String> {
    segments.iter().map(ToString::to_string).collect()
}

/// The path of the key `leaf` in the table at `prefix` (`llm`, `providers.NAME`).
fn in_table(prefix: &[&str], leaf: &str) -> Vec<String> {
    let mut path = at(prefix);
    path.push(leaf.to_string());
    path
}

impl Check<'_> {
    /// `KEY SOURCE: problem`, the source being where the value was set (if it was).
    fn error(&mut self, path: &[String], problem: impl Display) {
        let setter = self.config.origin.source(path);
        self.error_from(path, setter, problem);
    }

    fn error_from(&mut self, path: &[String], setter: Option<Setter>, problem: impl Display) {
        self.findings.errors.push(format!(
            "{}{}: {problem}",
            key(path),
            sources::where_set(setter)
        ));
    }

    fn warning(&mut self, path: &[String], problem: impl Display) {
        let setter = self.config.origin.source(path);
        self.findings.warnings.push(format!(
            "{}{}: {problem}",
            key(path),
            sources::where_set(setter)
        ));
    }

    fn positive(&mut self, path: &[&str], value: u64) {
        if value == 0 {
            self.error(&at(path), "must be positive");
        }
    }

    fn server_and_auth(&mut self) {
        let server = &self.config.server;
        let host = server.host.as_str();
        let is_ip = host.parse::<std::net::IpAddr>().is_ok();
        let is_name = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !is_ip && !is_name {
            self.error(
                &at(&["server", "host"]),
                format!("{host:?} is not an address to listen on: write an IP address or a host name, and the port as server.port"),
            );
        }
        self.positive(
            &["server", "body_limit_bytes"],
            server.body_limit_bytes as u64,
        );
        self.positive(
            &["server", "max_connections"],
            server.max_connections as u64,
        );
        let auth = &self.config.auth;
        if auth.mode == AuthMode::Open && !auth.open_on_any_address {
            let loopback = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => ip.is_loopback(),
                Err(_) => host == "localhost",
            };
            if !loopback {
                self.error(
                    &at(&["auth", "mode"]),
                    format!("\"open\" serves anyone who can connect, without API keys, so it listens on loopback only, not on server.host = {host:?}; use API keys (auth.mode = \"keys\"), or set auth.open_on_any_address = true"),
                );
            }
        }
    }

    fn database(&mut self) {
        let path = at(&["database", "url"]);
        let url = &self.config.database.url;
        let shown = redact::url(url);
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            if let Err(e) = Url::parse(url) {
                self.error(&path, format!("{shown:?} is not a valid URL: {e}"));
            }
        } else if !url.starts_with("sqlite:") {
            self.error(
                &path,
                format!("{shown:?} is not a database URL: it starts with sqlite://, postgres:// or postgresql://"),
            );
        }
        self.positive(
            &["database", "max_connections"],
            u64::from(self.config.database.max_connections),
        );
    }

    fn providers(&mut self) {
        let config = self.config;
        let named_models = config.providers.values().any(|p| !p.models.is_empty());
        // The default provider routes nothing when only named providers list models: it is
        // never asked, so it needs neither a URL nor a key.
        if config.llm.provider.models.is_empty() {
            if !named_models {
                self.error(
                    &at(&["llm", "models"]),
                    "is empty, and no [providers.NAME] table lists a model either: no request could be served",
                );
            }
        } else {
            self.provider(&["llm"], &config.llm.provider, true);
        }
        for (name, provider) in &config.providers {
            if provider.models.is_empty() {
                self.error(
                    &at(&["providers", name, "models"]),
                    "is empty: the provider would serve no model",
                );
            }
            self.provider(&["providers", name], provider, false);
        }
        // One provider per model.
        let lists: Vec<(Vec<String>, &ProviderConfig)> =
            std::iter::once((at(&["llm", "models"]), &config.llm.provider))
                .chain(
                    config
                        .providers
                        .iter()
                        .map(|(name, p)| (at(&["providers", name, "models"]), p)),
                )
                .collect();
        let mut owner: BTreeMap<&str, String> = BTreeMap::new();
        for (list, provider) in &lists {
            for (i, model) in provider.models.iter().enumerate() {
                let mut path = list.clone();
                path.push(i.to_string());
                if model.trim().is_empty() {
                    self.error(
                        &path,
                        "is empty: write a model name, or \"*\" for every model no other provider lists",
                    );
                } else if model != "*"
                    && let Some(first) = owner.insert(model, key(list))
                {
                    self.error(
                        &path,
                        format!("{model:?} is routed by {first} already; a model has one provider"),
                    );
                }
            }
        }
    }

    /// One provider's URL and key; `prefix` is `llm` or `providers.NAME`.
    fn provider(&mut self, prefix: &[&str], provider: &ProviderConfig, is_default: bool) {
        let path = |leaf: &str| in_table(prefix, leaf);
        let shown = |leaf: &str| key(&path(leaf));
        let url = self.provider_url(prefix, provider, is_default);
        let key_env_broken = self.check_api_key_env(prefix, provider);
        let Some(url) = url else { return };
        let has_key = super::resolve("", provider, is_default).api_key.is_some();
        let local = is_local(&url);
        if !has_key && !local && !key_env_broken {
            let ways = match is_default {
                true => format!(
                    "{}, {} or OPENAI_API_KEY",
                    shown("api_key"),
                    shown("api_key_env")
                ),
                false => format!("{} or {}", shown("api_key"), shown("api_key_env")),
            };
            self.error(
                &path("api_key"),
                format!(
                    "the provider at {} needs an API key and none is set: set {ways} (a server on this machine or a private network needs none)",
                    redact::url(url.as_str()),
                ),
            );
        }
        if has_key && !local && url.scheme() == "http" {
            self.warning(
                &path("base_url"),
                format!(
                    "{} is plain http to a host that is not on this machine or a private network: the API key travels unencrypted; use https",
                    redact::url(url.as_str())
                ),
            );
        }
        if provider.max_concurrent_requests == Some(0) {
            self.error(
                &path("max_concurrent_requests"),
                "must be positive (leave it out for no limit)",
            );
        }
    }

    /// Where a provider is: its `base_url`; for the default provider, else `OPENAI_BASE_URL`
    /// or OpenAI's own. `None` (and an error) when that is not an http(s) URL or missing.
    fn provider_url(
        &mut self,
        prefix: &[&str],
        provider: &ProviderConfig,
        is_default: bool,
    ) -> Option<Url> {
        let path = in_table(prefix, "base_url");
        let configured = provider.base_url.as_deref();
        let fallback = is_default.then(|| env_value("OPENAI_BASE_URL")).flatten();
        match (configured, fallback) {
            (Some(url), _) => self.http_url(&path, None, url),
            (None, Some(url)) => {
                self.http_url(&path, Some(Setter::Env("OPENAI_BASE_URL".into())), &url)
            }
            (None, None) if is_default => Url::parse(OPENAI_DEFAULT_BASE_URL).ok(),
            (None, None) => {
                self.error(
                    &path,
                    "is missing: a provider in [providers] needs its own base_url (such as \"http://127.0.0.1:11434/v1\")",
                );
                None
            }
        }
    }

    /// A provider's `api_key_env`, if set, names a variable that is set (and is warned about
    /// beside `api_key`, which wins). True when it is broken: the missing key is then not
    /// reported a second time.
    fn check_api_key_env(&mut self, prefix: &[&str], provider: &ProviderConfig) -> bool {
        let Some(name) = provider.api_key_env.as_deref() else {
            return false;
        };
        let path = in_table(prefix, "api_key_env");
        let is_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let broken = if !is_name {
            // Not echoed: it may be the key itself, written where its variable's name goes.
            self.error(
                &path,
                "is not the name of an environment variable (letters, digits and _): it takes the name of the variable that holds the key, not the key",
            );
            true
        } else if env_value(name).is_none() {
            self.error(
                &path,
                format!("names the environment variable {name}, which is not set"),
            );
            true
        } else {
            false
        };
        if provider.api_key.is_some() {
            self.warning(
                &in_table(prefix, "api_key"),
                format!(
                    "is set, and so is {}: api_key is used, the variable is not read",
                    key(&path)
                ),
            );
        }
        broken
    }

    /// `value` parsed as an http(s) URL, or an error at `path`.
    fn http_url(&mut self, path: &[String], setter: Option<Setter>, value: &str) -> Option<Url> {
        let setter = setter.or_else(|| self.config.origin.source(path));
        let shown = redact::url(value);
        match Url::parse(value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
            Ok(_) => {
                self.error_from(
                    path,
                    setter,
                    format!("{shown:?} is not an http:// or https:// URL"),
                );
                None
            }
            Err(e) => {
                self.error_from(
                    path,
                    setter,
                    format!("{shown:?} is not an http:// or https:// URL ({e})"),
                );
                None
            }
        }
    }

    fn fallbacks(&mut self) {
        let config = self.config;
        let providers = std::iter::once(&config.llm.provider).chain(config.providers.values());
        let mut routed: Vec<&str> = Vec::new();
        let mut everything = false;
        for provider in providers {
            for model in &provider.models {
                everything |= model == "*";
                routed.push(model);
            }
        }
        let is_routed = |model: &str| everything || routed.contains(&model);
        let hint = |model: &str| did_you_mean(model, &routed);
        for (model, fallback) in &config.fallbacks {
            if !is_routed(model) {
                self.error(
                    &at(&["fallbacks", model]),
                    format!(
                        "no provider routes the model {model:?} (llm.models, providers.NAME.models), so it never falls back{}",
                        hint(model)
                    ),
                );
            }
            if !is_routed(&fallback.model) {
                self.error(
                    &at(&["fallbacks", model, "model"]),
                    format!(
                        "no provider routes the model {:?} (llm.models, providers.NAME.models){}",
                        fallback.model,
                        hint(&fallback.model)
                    ),
                );
            }
        }
    }

    fn tools(&mut self) {
        let tools = &self.config.tools;
        self.positive(&["tools", "max_concurrency"], tools.max_concurrency as u64);
        self.positive(&["tools", "max_turns"], u64::from(tools.max_turns));
        let lists = [
            ("fetch_url", &tools.fetch_url.allowed_hosts),
            ("request_mcp", &tools.request_mcp.allowed_hosts),
        ];
        for (section, hosts) in lists {
            for (i, host) in hosts.iter().enumerate() {
                let bare = !host.is_empty()
                    && !host.contains("://")
                    && !host.contains('/')
                    && !host.contains(char::is_whitespace);
                if !bare {
                    self.error(
                        &at(&["tools", section, "allowed_hosts", &i.to_string()]),
                        format!("{host:?} is not a host name: write example.com, or .example.com for it and its subdomains"),
                    );
                }
            }
        }
        self.positive(
            &["tools", "request_mcp", "startup_timeout_ms"],
            tools.request_mcp.startup_timeout_ms,
        );
    }

    fn tool_servers(&mut self) {
        for (label, server) in &self.config.tool_servers {
            for (i, tool) in server.tools.iter().enumerate() {
                let index = i.to_string();
                let path = |leaf: &[&str]| {
                    let mut path = at(&["tool_servers", label.as_str(), "tools", &index]);
                    path.extend(at(leaf));
                    path
                };
                if tool.name.trim().is_empty() {
                    self.error(&path(&["name"]), "is empty");
                }
                self.http_url(&path(&["url"]), None, &tool.url);
                if !TOOL_METHODS
                    .iter()
                    .any(|m| m.eq_ignore_ascii_case(&tool.method))
                {
                    self.error(
                        &path(&["method"]),
                        format!(
                            "{:?} is not one of {}",
                            tool.method,
                            TOOL_METHODS.join(", ")
                        ),
                    );
                }
                self.header_values(&path(&["headers"]), &tool.headers, true);
            }
        }
    }

    /// Header names and `${VAR}` references of header (or environment) values at `prefix`.
    fn header_values(
        &mut self,
        prefix: &[String],
        values: &BTreeMap<String, String>,
        are_headers: bool,
    ) {
        for (name, value) in values {
            let mut path = prefix.to_vec();
            path.push(name.clone());
            if are_headers && reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                self.error(&path, "is not a valid header name");
            }
            if let Err(variable) = super::expand_env(value) {
                self.error(
                    &path,
                    format!("names the environment variable {variable}, which is not set"),
                );
            }
        }
    }

    fn mcp_servers(&mut self) {
        let config = self.config;
        let labels = config.mcp_servers.keys().map(|l| ("mcp_servers", l));
        for (section, label) in
            labels.chain(config.tool_servers.keys().map(|l| ("tool_servers", l)))
        {
            if label == crate::auth::REQUEST_SERVERS {
                self.error(
                    &at(&[section, label.as_str()]),
                    "the label \"@request\" is reserved: in an API key's tool_servers it stands for the MCP servers requests name by URL",
                );
            }
        }
        for (label, server) in &self.config.mcp_servers {
            let path = |leaf: &str| at(&["mcp_servers", label.as_str(), leaf]);
            match (&server.url, &server.command) {
                (None, None) => self.error(
                    &at(&["mcp_servers", label.as_str()]),
                    "needs url (a streamable HTTP server) or command (a server the service starts, speaking stdio)",
                ),
                (Some(_), Some(_)) => self.error(
                    &path("command"),
                    "is set, and so is url: a server is reached at url or started as command, not both",
                ),
                (Some(url), None) => {
                    self.http_url(&path("url"), None, url);
                    for (leaf, set) in [("args", !server.args.is_empty()), ("env", !server.env.is_empty())] {
                        if set {
                            self.error(&path(leaf), "is only for a server started as command; this one is reached at url");
                        }
                    }
                }
                (None, Some(command)) => {
                    if command.trim().is_empty() {
                        self.error(&path("command"), "is empty");
                    }
                    if !server.headers.is_empty() {
                        self.error(&path("headers"), "are only for a server reached at url; this one is started as command");
                    }
                }
            }
            self.header_values(&path("headers"), &server.headers, true);
            for name in server.headers.keys() {
                let reserved = super::MCP_RESERVED_HEADERS;
                if reserved.contains(&name.to_ascii_lowercase().as_str()) {
                    let mut key = path("headers");
                    key.push(name.clone());
                    self.error(&key, "is set by the MCP transport itself");
                }
            }
            self.header_values(&path("env"), &server.env, false);
            if server.timeout_ms == Some(0) {
                self.error(
                    &path("timeout_ms"),
                    "must be positive (leave it out for tools.default_timeout_ms)",
                );
            }
            self.positive(
                &["mcp_servers", label.as_str(), "startup_timeout_ms"],
                server.startup_timeout_ms,
            );
            for (i, name) in server.read_only_tools.iter().enumerate() {
                if server.definition_only_tools.contains(name) {
                    self.error(
                        &at(&["mcp_servers", label.as_str(), "read_only_tools", &i.to_string()]),
                        format!("{name:?} is also in definition_only_tools: the service never runs a definition-only tool"),
                    );
                }
            }
        }
    }

    fn telemetry(&mut self) {
        let telemetry = &self.config.telemetry;
        let path = |leaf: &str| at(&["telemetry", leaf]);
        if !telemetry.otlp_endpoint.is_empty() {
            self.http_url(&path("otlp_endpoint"), None, &telemetry.otlp_endpoint);
        }
        if !(0.0..=1.0).contains(&telemetry.sample_ratio) {
            self.error(&path("sample_ratio"), "must be between 0 and 1");
        }
        if telemetry.service_name.trim().is_empty() {
            self.error(&path("service_name"), "must not be empty");
        }
        self.header_values(&path("otlp_headers"), &telemetry.otlp_headers, true);
    }

    fn runs(&mut self) {
        let runs = &self.config.runs;
        if runs.lease_ttl_ms <= runs.sweep_interval_ms {
            self.error(
                &at(&["runs", "lease_ttl_ms"]),
                format!(
                    "must be longer than runs.sweep_interval_ms ({}): leases are renewed every sweep",
                    runs.sweep_interval_ms
                ),
            );
        }
        self.positive(&["runs", "event_batch_max"], runs.event_batch_max as u64);
    }

    /// Variables meant for the configuration that it never reads: `SWITCHYARD_SERVER__PORT`
    /// (one underscore after the prefix).
    fn environment(&mut self) {
        let prefix = super::ENV_PREFIX;
        let stem = prefix.trim_end_matches('_');
        for (name, _) in std::env::vars_os() {
            let Some(name) = name.into_string().ok() else {
                continue;
            };
            let near = name.len() > stem.len()
                && name[..stem.len()].eq_ignore_ascii_case(stem)
                && !name[..prefix.len().min(name.len())].eq_ignore_ascii_case(prefix)
                && name.contains(super::ENV_SEPARATOR);
            if near {
                self.findings.warnings.push(format!(
                    "{name} is not read: configuration variables start with {prefix} (two underscores)"
                ));
            }
        }
    }
}

/// Whether `url`'s host is this machine or a private network, whose model servers (Ollama,
/// vLLM, a docker-compose or Kubernetes service by its one-word name) commonly take no key.
fn is_local(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Some(Host::Ipv6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback() || first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfe80
        }
        Some(Host::Domain(name)) => {
            name == "localhost" || name.ends_with(".localhost") || !name.contains('.')
        }
        None => false,
    }
}

impl Config {
    /// Every problem of the values themselves (URLs, providers and their keys, tool servers,
    /// limits), all of them rather than the first. Reads the environment variables the
    /// configuration names (`api_key_env`, `${VAR}` in header values).
    pub fn validate(&self) -> Findings {
        all(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_private_and_one_word_hosts_are_local_and_public_ones_are_not() {
        let local = |u: &str| is_local(&Url::parse(u).unwrap());
        assert!(local("http://127.0.0.1:11434/v1"));
        assert!(local("http://localhost:8000/v1"));
        assert!(local("http://[::1]:8000/v1"));
        assert!(local("https://10.1.2.3/v1"));
        assert!(local("http://vllm:8000/v1"));
        assert!(!local("https://api.openai.com/v1"));
        assert!(!local("https://8.8.8.8/v1"));
    }
}
