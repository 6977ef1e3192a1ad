//! The tool registry: every server tool, grouped by tool server. Compiled-in and HTTP tool
//! servers are built once at start-up and read-only afterwards; an MCP server's tools are
//! discovered while the service runs, and each such server has a snapshot of its tools that
//! is swapped whole when its list changes (a run takes the snapshot once, as it resolves its
//! tools). A tool is identified by its server and its name: a name is unique within its
//! server (a second one is an error, never a silent replacement), and two servers may both
//! have a tool of that name (a request that enables both shows the model a qualified name for
//! each, `crate::engine::toolset`).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::HttpTool;
use super::{ToolHandler, ToolKind, ToolOptions, builtin};
use crate::config::{self, ApprovalDefault, Config};

/// The server label of the compiled-in handlers.
pub const BUILTIN: &str = "builtin";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RegistryError {
    #[error("tool {name:?} is defined twice by tool server {server:?}")]
    Duplicate { name: String, server: String },
    #[error("tool {name:?} of tool server {server:?} has an invalid parameter schema: {message}")]
    InvalidSchema {
        name: String,
        server: String,
        message: String,
    },
    /// A problem of the configuration, at its full key (`tools.hosted.web_search`).
    #[error("{key}: {message}")]
    Config { key: String, message: String },
    /// A configured HTTP tool that cannot be built (its URL, method or a header's variable):
    /// what [`Config::validate`] also finds, in its own words.
    #[error("{key}: {message}")]
    HttpTool { key: String, message: String },
}

impl RegistryError {
    /// This error as a problem of the configuration at `key`.
    fn at(self, key: String) -> RegistryError {
        RegistryError::Config {
            key,
            message: self.to_string(),
        }
    }
}

/// A tool as registered: its handler, its compiled schema and its effective options.
pub struct RegisteredTool {
    pub server_label: String,
    pub handler: Arc<dyn ToolHandler>,
    pub schema: Value,
    validator: jsonschema::Validator,
    pub kind: ToolKind,
    pub options: ToolOptions,
}

impl RegisteredTool {
    /// Checks the handler's schema against the meta-schema and takes its options, with
    /// `default_timeout` where it sets none.
    fn new(
        server_label: &str,
        handler: Arc<dyn ToolHandler>,
        default_timeout: Duration,
    ) -> Result<RegisteredTool, RegistryError> {
        let schema = handler.parameters();
        let validator =
            compile_schema(&schema).map_err(|message| RegistryError::InvalidSchema {
                name: handler.name().to_string(),
                server: server_label.to_string(),
                message,
            })?;
        let mut options = handler.options();
        options.timeout.get_or_insert(default_timeout);
        Ok(RegisteredTool {
            server_label: server_label.to_string(),
            kind: handler.kind(),
            handler,
            schema,
            validator,
            options,
        })
    }

    pub fn name(&self) -> &str {
        self.handler.name()
    }

    /// Checks arguments against the schema; the error lists every problem.
    pub fn validate(&self, arguments: &Value) -> Result<(), String> {
        validate_with(&self.validator, arguments)
    }
}

/// Every problem of `instance`, one per line-ish, with where it is.
pub fn validate_with(validator: &jsonschema::Validator, instance: &Value) -> Result<(), String> {
    let problems: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Checks a parameter schema against the JSON Schema meta-schema and compiles it. Only
/// object schemas describe function arguments; remote `$ref`s are not fetched.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    if !schema.is_object() {
        return Err("the schema must be a JSON object".into());
    }
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// One tool server: its label, tools in registration order, and whether its calls wait for
/// approval by default.
pub struct ToolServer {
    pub label: String,
    pub tools: Vec<Arc<RegisteredTool>>,
    pub requires_approval: bool,
    /// False for an MCP server that is not connected (its tools are not known now).
    pub available: bool,
}

pub struct ToolRegistry {
    servers: BTreeMap<String, Arc<ToolServer>>,
    /// Hosted tool types (`web_search`, …) and the tool server that runs each.
    hosted: BTreeMap<String, String>,
    /// What a request's hosted tool of another type gets.
    unmapped_hosted: crate::config::UnmappedHosted,
    /// Each MCP server's tools as last discovered (none while it is down).
    discovered: BTreeMap<String, Discovered>,
    default_timeout: Duration,
}

/// An MCP server's place in the registry.
struct Discovered {
    tools: RwLock<Arc<ToolServer>>,
    /// True once the server's first connection attempt is over (its tools listed, or not).
    settled: tokio::sync::watch::Sender<bool>,
    /// When that was.
    settled_at: OnceLock<Instant>,
    /// Whether it has listed its tools at least once.
    listed: AtomicBool,
}

impl Discovered {
    fn tools(&self) -> Arc<ToolServer> {
        self.tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, tools: Vec<Arc<RegisteredTool>>, available: bool) {
        let mut current = self.tools.write().unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(ToolServer {
            label: current.label.clone(),
            tools,
            requires_approval: current.requires_approval,
            available,
        });
    }
}

impl ToolRegistry {
    pub fn builder() -> ToolRegistryBuilder {
        ToolRegistryBuilder {
            servers: BTreeMap::new(),
            default_timeout: Duration::from_secs(30),
            hosted: BTreeMap::new(),
            unmapped_hosted: Default::default(),
            discovered: BTreeMap::new(),
        }
    }

    /// The compiled-in handlers (server `builtin`) and the configured HTTP tool servers.
    pub fn from_config(config: &Config) -> Result<ToolRegistry, Vec<RegistryError>> {
        ToolRegistry::from_config_with(config, Vec::new())
    }

    /// As [`ToolRegistry::from_config`], plus handlers compiled into an embedding program,
    /// each with the server label it belongs to. Every problem is reported, not only the
    /// first.
    pub fn from_config_with(
        config: &Config,
        extra: Vec<(String, Arc<dyn ToolHandler>)>,
    ) -> Result<ToolRegistry, Vec<RegistryError>> {
        let mut errors = Vec::new();
        let mut builder = ToolRegistry::builder();
        builder.default_timeout = Duration::from_millis(config.tools.default_timeout_ms);
        builder.server(BUILTIN);
        let disabled = |name: &str| config.tools.disabled.iter().any(|d| d == name);
        // Every tool's name, disabled ones included, to check tools.disabled against.
        let mut names: Vec<String> = Vec::new();
        for handler in builtin::handlers(&config.tools) {
            names.push(handler.name().to_string());
            if !disabled(handler.name()) {
                errors.extend(builder.register(BUILTIN, handler).err());
            }
        }
        for (label, handler) in extra {
            names.push(handler.name().to_string());
            errors.extend(builder.register(&label, handler).err());
        }
        for (label, server) in &config.tool_servers {
            if label == BUILTIN && !server.tools.is_empty() {
                errors.push(RegistryError::Config {
                    key: config::key(&["tool_servers", label, "tools"]),
                    message: "the label 'builtin' is reserved for the compiled-in tools; it takes only require_approval".into(),
                });
                continue;
            }
            builder.requires_approval(label, server.require_approval == ApprovalDefault::Always);
            for (i, tool) in server.tools.iter().enumerate() {
                let index = i.to_string();
                let key = |leaf: &str| config::key(&["tool_servers", label, "tools", &index, leaf]);
                names.push(tool.name.clone());
                if disabled(&tool.name) {
                    continue;
                }
                let handler = match HttpTool::from_config(tool) {
                    Ok(handler) => handler,
                    Err(message) => {
                        errors.push(RegistryError::HttpTool {
                            key: config::key(&["tool_servers", label, "tools", &index]),
                            message,
                        });
                        continue;
                    }
                };
                if let Err(error) = builder.register(label, Arc::new(handler)) {
                    let leaf = match error {
                        RegistryError::InvalidSchema { .. } => "parameters",
                        _ => "name",
                    };
                    errors.push(error.at(key(leaf)));
                }
            }
        }
        for (label, server) in &config.mcp_servers {
            let requires_approval = server.require_approval == ApprovalDefault::Always;
            errors.extend(builder.mcp_server(label, requires_approval).err());
        }
        for (kind, label) in &config.tools.hosted {
            errors.extend(builder.hosted(kind, label).err());
        }
        builder.unmapped_hosted = config.tools.unmapped_hosted;
        for (i, name) in config.tools.disabled.iter().enumerate() {
            if !names.contains(name) {
                let known: Vec<&str> = names.iter().map(String::as_str).collect();
                errors.push(RegistryError::Config {
                    key: config::key(&["tools", "disabled", &i.to_string()]),
                    message: format!(
                        "no tool is named {name:?}{}",
                        config::did_you_mean(name, &known)
                    ),
                });
            }
        }
        match errors.is_empty() {
            true => Ok(builder.build()),
            false => Err(errors),
        }
    }

    /// The tool server the operator maps a hosted tool type to.
    pub fn hosted(&self, kind: &str) -> Option<&str> {
        self.hosted.get(kind).map(String::as_str)
    }

    /// What a request's hosted tool of a type no tool server runs gets.
    pub fn unmapped_hosted(&self) -> crate::config::UnmappedHosted {
        self.unmapped_hosted
    }

    /// A tool server with its tools as they are now (an MCP server's current snapshot).
    pub fn server(&self, label: &str) -> Option<Arc<ToolServer>> {
        if let Some(server) = self.servers.get(label) {
            return Some(server.clone());
        }
        Some(self.discovered.get(label)?.tools())
    }

    /// Every tool server's label, in order.
    pub fn labels(&self) -> Vec<&str> {
        let mut labels: Vec<&str> = self
            .servers
            .keys()
            .chain(self.discovered.keys())
            .map(String::as_str)
            .collect();
        labels.sort_unstable();
        labels
    }

    /// Replaces the tools of the MCP server `label` with `handlers`, in their order. A tool
    /// whose schema is invalid, or whose name the server lists twice, is left out; the
    /// problems are returned for the caller to report. Other servers' tools of the same names
    /// do not matter: a tool belongs to its server.
    pub fn publish(&self, label: &str, handlers: Vec<Arc<dyn ToolHandler>>) -> Vec<RegistryError> {
        let Some(slot) = self.discovered.get(label) else {
            return Vec::new();
        };
        let (tools, problems) = self.checked(label, handlers);
        slot.replace(tools, true);
        slot.listed.store(true, Ordering::Relaxed);
        problems
    }

    /// `handlers` of the server `label` as registered tools, in their order, without those
    /// whose schema is invalid or whose name comes twice (the problems).
    fn checked(
        &self,
        label: &str,
        handlers: Vec<Arc<dyn ToolHandler>>,
    ) -> (Vec<Arc<RegisteredTool>>, Vec<RegistryError>) {
        let mut problems = Vec::new();
        let mut tools: Vec<Arc<RegisteredTool>> = Vec::new();
        let mut names = HashSet::new();
        for handler in handlers {
            if !names.insert(handler.name().to_string()) {
                problems.push(RegistryError::Duplicate {
                    name: handler.name().to_string(),
                    server: label.to_string(),
                });
                continue;
            }
            match RegisteredTool::new(label, handler, self.default_timeout) {
                Ok(tool) => tools.push(Arc::new(tool)),
                Err(problem) => problems.push(problem),
            }
        }
        (tools, problems)
    }

    /// The tools of an MCP server named in a request, checked as discovered tools are: one
    /// whose schema is invalid, or whose name the server lists twice, is left out (the
    /// problems are returned). Its calls wait for approval unless the request says otherwise.
    pub fn request_server(
        &self,
        label: &str,
        handlers: Vec<Arc<dyn ToolHandler>>,
        available: bool,
    ) -> (ToolServer, Vec<RegistryError>) {
        let (tools, problems) = self.checked(label, handlers);
        let server = ToolServer {
            label: label.to_string(),
            tools,
            // As OpenAI's API does for a server named in a request.
            requires_approval: true,
            available,
        };
        (server, problems)
    }

    /// Takes the tools of the MCP server `label` away while it is not connected.
    pub fn withdraw(&self, label: &str) {
        if let Some(slot) = self.discovered.get(label) {
            slot.replace(Vec::new(), false);
        }
    }

    /// Notes that the MCP server `label`'s first connection attempt is over.
    pub fn settle(&self, label: &str) {
        if let Some(slot) = self.discovered.get(label) {
            slot.settled_at.get_or_init(Instant::now);
            slot.settled.send_replace(true);
        }
    }

    /// The MCP servers a replica is not ready without: each that has not listed its tools
    /// yet, unless its first attempt failed more than `bound` ago (a server that is down
    /// does not keep a replica out of service for ever). Once listed, a server never holds
    /// readiness back again: a server going down later takes its tools along, on every
    /// replica alike.
    pub fn awaited(&self, bound: Duration) -> Vec<&str> {
        self.discovered
            .iter()
            .filter(|(_, slot)| !slot.listed.load(Ordering::Relaxed))
            .filter(|(_, slot)| slot.settled_at.get().is_none_or(|at| at.elapsed() < bound))
            .map(|(label, _)| label.as_str())
            .collect()
    }

    /// Whether every MCP server's first connection attempt is over (see
    /// [`ToolRegistry::discovery_settled`]).
    pub fn discovery_is_settled(&self) -> bool {
        self.discovered.values().all(|slot| *slot.settled.borrow())
    }

    /// Waits until every MCP server's first connection attempt is over: its tools are listed,
    /// or it could not be reached. (Each attempt is bounded by the server's
    /// `startup_timeout_ms`.)
    pub async fn discovery_settled(&self) {
        for slot in self.discovered.values() {
            let mut settled = slot.settled.subscribe();
            // Err: the sender is gone, which it is not while `self` lives.
            let _ = settled.wait_for(|settled| *settled).await;
        }
    }
}

pub struct ToolRegistryBuilder {
    servers: BTreeMap<String, ToolServer>,
    default_timeout: Duration,
    hosted: BTreeMap<String, String>,
    unmapped_hosted: crate::config::UnmappedHosted,
    discovered: BTreeMap<String, ToolServer>,
}

impl ToolRegistryBuilder {
    /// Declares a tool server (a server without tools is still a valid label).
    pub fn server(&mut self, label: &str) -> &mut Self {
        self.servers
            .entry(label.to_string())
            .or_insert_with(|| ToolServer {
                label: label.to_string(),
                tools: Vec::new(),
                requires_approval: false,
                available: true,
            });
        self
    }

    /// Sets whether a server's calls wait for approval by default.
    pub fn requires_approval(&mut self, label: &str, required: bool) -> &mut Self {
        self.server(label);
        if let Some(server) = self.servers.get_mut(label) {
            server.requires_approval = required;
        }
        self
    }

    /// Declares an MCP server, whose tools are published once discovered
    /// ([`ToolRegistry::publish`]); its label must not be another server's.
    pub fn mcp_server(
        &mut self,
        label: &str,
        requires_approval: bool,
    ) -> Result<&mut Self, RegistryError> {
        if self.servers.contains_key(label) || self.discovered.contains_key(label) {
            return Err(RegistryError::Config {
                key: config::key(&["mcp_servers", label]),
                message: format!(
                    "the label {label:?} is taken by another tool server (builtin, or one in [tool_servers])"
                ),
            });
        }
        self.discovered.insert(
            label.to_string(),
            ToolServer {
                label: label.to_string(),
                tools: Vec::new(),
                requires_approval,
                // Until it is connected and has listed its tools.
                available: false,
            },
        );
        Ok(self)
    }

    /// Adds a handler to a server; a name the server has already is an error (another
    /// server's tool of that name is not).
    pub fn register(
        &mut self,
        server_label: &str,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<&mut Self, RegistryError> {
        self.server(server_label);
        let Some(server) = self.servers.get_mut(server_label) else {
            return Ok(self);
        };
        if server.tools.iter().any(|t| t.name() == handler.name()) {
            return Err(RegistryError::Duplicate {
                name: handler.name().to_string(),
                server: server_label.to_string(),
            });
        }
        let tool = RegisteredTool::new(server_label, handler, self.default_timeout)?;
        server.tools.push(Arc::new(tool));
        Ok(self)
    }

    /// Runs requests' hosted tools of type `kind` on the tool server `label`, which must be
    /// declared by then.
    pub fn hosted(&mut self, kind: &str, label: &str) -> Result<&mut Self, RegistryError> {
        let key = config::key(&["tools", "hosted", kind]);
        if !crate::protocol::tools::is_hosted_type(kind) {
            return Err(RegistryError::Config {
                key,
                message: format!(
                    "{kind:?} is not a hosted tool type (such as web_search, file_search, code_interpreter, image_generation){}",
                    config::did_you_mean(kind, crate::protocol::tools::HOSTED_TOOL_TYPES)
                ),
            });
        }
        if !self.servers.contains_key(label) && !self.discovered.contains_key(label) {
            let labels: Vec<&str> = self
                .servers
                .keys()
                .chain(self.discovered.keys())
                .map(String::as_str)
                .collect();
            return Err(RegistryError::Config {
                key,
                message: format!(
                    "names the tool server {label:?}, which is not configured{}",
                    config::did_you_mean(label, &labels)
                ),
            });
        }
        self.hosted.insert(kind.to_string(), label.to_string());
        Ok(self)
    }

    pub fn build(self) -> ToolRegistry {
        ToolRegistry {
            servers: self
                .servers
                .into_iter()
                .map(|(label, server)| (label, Arc::new(server)))
                .collect(),
            hosted: self.hosted,
            unmapped_hosted: self.unmapped_hosted,
            discovered: self
                .discovered
                .into_iter()
                .map(|(label, server)| {
                    let slot = Discovered {
                        tools: RwLock::new(Arc::new(server)),
                        settled: tokio::sync::watch::Sender::new(false),
                        settled_at: OnceLock::new(),
                        listed: AtomicBool::new(false),
                    };
                    (label, slot)
                })
                .collect(),
            default_timeout: self.default_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::tools::{ToolContext, ToolOutput, ToolResult};

    struct Named(&'static str, Value);

    #[async_trait]
    impl ToolHandler for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "a test tool"
        }
        fn parameters(&self) -> Value {
            self.1.clone()
        }
        async fn call(&self, _: ToolContext, _: Value, _: ToolOutput) -> ToolResult {
            ToolResult::ok("")
        }
    }

    fn tool(name: &'static str) -> Arc<dyn ToolHandler> {
        Arc::new(Named(name, json!({"type": "object"})))
    }

    fn names(registry: &ToolRegistry, label: &str) -> Vec<String> {
        let server = registry.server(label).unwrap();
        server.tools.iter().map(|t| t.name().to_string()).collect()
    }

    #[test]
    fn servers_may_share_tool_names_but_a_server_lists_each_name_once_with_a_valid_schema() {
        let mut builder = ToolRegistry::builder();
        builder.register(BUILTIN, tool("calculator")).unwrap();
        let twice = builder.register(BUILTIN, tool("calculator")).err().unwrap();
        assert_eq!(
            twice.to_string(),
            r#"tool "calculator" is defined twice by tool server "builtin""#
        );
        builder.register("math", tool("calculator")).unwrap();
        builder.mcp_server("a", false).unwrap();
        builder.mcp_server("b", true).unwrap();
        let registry = builder.build();
        assert!(!registry.server("a").unwrap().available);
        assert_eq!(names(&registry, "math"), ["calculator"]);

        assert_eq!(registry.publish("a", vec![tool("search")]), []);
        let bad = Arc::new(Named("broken", json!({"type": "no-such-type"})));
        let problems = registry.publish(
            "b",
            vec![
                tool("search"),
                tool("calculator"),
                bad,
                tool("fetch"),
                tool("fetch"),
            ],
        );

        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(
            problems[0]
                .starts_with(r#"tool "broken" of tool server "b" has an invalid parameter schema"#),
            "{problems:?}"
        );
        assert_eq!(
            problems[1],
            r#"tool "fetch" is defined twice by tool server "b""#
        );
        assert_eq!(problems.len(), 2);
        assert_eq!(names(&registry, "a"), ["search"]);
        assert_eq!(names(&registry, "b"), ["search", "calculator", "fetch"]);
        let b = registry.server("b").unwrap();
        assert!(b.available && b.requires_approval);

        // A server that goes away takes its tools along.
        registry.withdraw("a");
        assert!(!registry.server("a").unwrap().available);
        assert_eq!(names(&registry, "a"), Vec::<String>::new());
    }

    #[test]
    fn readiness_awaits_each_mcp_server_until_it_lists_or_has_failed_for_the_bound() {
        let mut builder = ToolRegistry::builder();
        builder.mcp_server("a", false).unwrap();
        builder.mcp_server("b", false).unwrap();
        builder.mcp_server("c", false).unwrap();
        let registry = builder.build();
        let bound = Duration::from_secs(3600);
        assert_eq!(registry.awaited(bound), ["a", "b", "c"]);
        // a lists; b fails its first attempt (still awaited within the bound); c fails and
        // the bound is over at once.
        registry.publish("a", vec![tool("search")]);
        registry.settle("a");
        registry.settle("b");
        registry.settle("c");
        assert_eq!(registry.awaited(bound), ["b", "c"]);
        assert_eq!(registry.awaited(Duration::ZERO), Vec::<&str>::new());
        // Listed once is enough, even while it is down later.
        registry.withdraw("a");
        registry.publish("b", vec![]);
        assert_eq!(registry.awaited(bound), ["c"]);
    }

    #[test]
    fn an_mcp_server_cannot_take_another_servers_label() {
        let mut builder = ToolRegistry::builder();
        builder.server(BUILTIN);
        let error = builder.mcp_server(BUILTIN, false).err().unwrap();
        assert!(
            error
                .to_string()
                .starts_with(r#"mcp_servers.builtin: the label "builtin" is taken"#),
            "{error}"
        );
    }
}
