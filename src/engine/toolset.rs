//! The tools of one run: the request's `tools` resolved against the registry, checked for
//! name clashes, narrowed by `allowed_tools` and `tool_choice`. The model is shown only what
//! it may call, and a call of anything else is refused by the service, not merely hinted.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::auth::KeyPolicy;
use crate::llm::ToolSpec;
use crate::protocol::field::FieldError;
use crate::protocol::items::McpToolInfo;
use crate::protocol::response::CallKind;
use crate::protocol::tools::{
    AllowedRef, ApprovalPolicy, CustomTool, FunctionTool, McpTool, Namespace, ToolChoice, ToolDecl,
};
use crate::tools::ToolKind;
use crate::tools::mcp::RequestServer;
use crate::tools::registry::{RegisteredTool, ToolRegistry, ToolServer, compile_schema};

/// Who runs a tool's calls.
#[derive(Clone)]
pub enum Executor {
    Server(Arc<RegisteredTool>),
    /// The client (a request tool, or a registry tool marked definition-only).
    Client(CallKind),
}

/// What the model sees of `local_shell`.
fn local_shell_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "The command and its arguments."},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "timeout_ms": {"type": "integer"},
            "working_directory": {"type": "string"},
            "user": {"type": "string"}
        },
        "required": ["command"]
    })
}

#[derive(Clone)]
pub struct ToolEntry {
    pub executor: Executor,
    /// The tool server it belongs to (`None` for request functions).
    pub server_label: Option<String>,
    spec: ToolSpec,
    /// Shown to the model (and so callable) under `tool_choice`.
    pub callable: bool,
    /// A server call of this tool waits for the client's approval.
    pub needs_approval: bool,
    /// The namespace a request declared the tool in; its calls carry it.
    pub namespace: Option<String>,
}

/// The resolved tools of a run.
#[derive(Clone, Default)]
pub struct ToolSet {
    entries: HashMap<String, ToolEntry>,
    /// Names in declaration order.
    order: Vec<String>,
    /// The chat `tool_choice` to send (`None`: let the model decide).
    pub choice: Option<Value>,
    /// Each enabled tool server with the tools the model is shown, for `mcp_list_tools`.
    pub listings: Vec<Listing>,
    /// The connections to servers named in the request, closed when the run lets go of its
    /// tools (it stops or pauses).
    connections: Vec<Arc<RequestServer>>,
}

/// An MCP server named in the request by `server_url`, connected for this run.
#[derive(Clone)]
pub struct RequestNamed {
    pub server: Arc<ToolServer>,
    /// Why it offers no tools (it could not be reached or listed).
    pub error: Option<String>,
    pub connection: Arc<RequestServer>,
}

/// A tool server as its `mcp_list_tools` item shows it.
#[derive(Clone, Debug)]
pub struct Listing {
    pub server_label: String,
    pub tools: Vec<McpToolInfo>,
    /// Why the server offers no tools now (an MCP server that is not connected).
    pub error: Option<String>,
}

impl ToolSet {
    /// What the model is shown.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.order
            .iter()
            .filter_map(|name| self.entries.get(name))
            .filter(|entry| entry.callable)
            .map(|entry| entry.spec.clone())
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.entries.get(name)
    }

    /// Resolves the request's tools (`named`: the servers it names by URL, connected
    /// already); every problem is a 400 naming the field.
    pub fn resolve(
        registry: &ToolRegistry,
        named: HashMap<String, RequestNamed>,
        decls: &[ToolDecl],
        choice: Option<&ToolChoice>,
        policy: Option<&KeyPolicy>,
    ) -> Result<ToolSet, FieldError> {
        let mut resolving = Resolving {
            policy: policy.cloned().unwrap_or_default(),
            named,
            ..Resolving::default()
        };
        for (index, decl) in decls.iter().enumerate() {
            let path = format!("tools[{index}]");
            match decl {
                ToolDecl::Function(function) => resolving.function(&path, function, None)?,
                ToolDecl::Custom(custom) => resolving.custom(&path, custom, None)?,
                ToolDecl::LocalShell => resolving.local_shell(&path)?,
                ToolDecl::Mcp(mcp) => resolving.server(registry, index, &path, mcp)?,
                ToolDecl::Namespace(namespace) => resolving.namespace(&path, namespace)?,
                ToolDecl::Hosted(kind) => resolving.hosted(registry, index, &path, kind)?,
            }
        }
        let Resolving {
            mut set, servers, ..
        } = resolving;
        let choice = choice.map(|c| hosted_choice(registry, c)).transpose()?;
        set.apply_choice(choice.as_ref(), &servers)?;
        Ok(set)
    }

    /// Narrows what the model may call and picks the chat `tool_choice`.
    fn apply_choice(
        &mut self,
        choice: Option<&ToolChoice>,
        servers: &HashMap<String, usize>,
    ) -> Result<(), FieldError> {
        match choice {
            None | Some(ToolChoice::Auto) => {}
            // Resolved to its tool server before (`hosted_choice`).
            Some(ToolChoice::Hosted(kind)) => {
                return Err(FieldError::new(
                    "tool_choice.type",
                    format!("Tool type '{kind}' is not offered by this service."),
                ));
            }
            Some(ToolChoice::None) => self.restrict(|_, _| false),
            Some(ToolChoice::Required) => {
                if self.entries.is_empty() {
                    return Err(FieldError::new(
                        "tool_choice",
                        "tool_choice 'required' needs at least one tool in 'tools'.",
                    ));
                }
                self.choice = Some(json!("required"));
            }
            Some(ToolChoice::Named(name)) => {
                if !self.entries.contains_key(name) {
                    return Err(unknown_tool(name, "tool_choice.name"));
                }
                let only = name.clone();
                self.restrict(move |n, _| n == only);
                self.choice = Some(json!({"type": "function", "name": name}));
            }
            Some(ToolChoice::Server(label)) => {
                if !servers.contains_key(label) {
                    return Err(unknown_server(label, "tool_choice.server_label"));
                }
                let label = label.clone();
                self.restrict(move |_, entry| {
                    entry.server_label.as_deref() == Some(label.as_str())
                });
                self.choice = Some(json!("required"));
            }
            Some(ToolChoice::Allowed { required, tools }) => {
                self.check_allowed_refs(tools, servers)?;
                let tools = tools.clone();
                self.restrict(move |name, entry| {
                    tools.iter().any(|reference| match reference {
                        AllowedRef::Named(allowed) => allowed == name,
                        AllowedRef::Server(label) => {
                            entry.server_label.as_deref() == Some(label.as_str())
                        }
                        AllowedRef::Hosted(_) => false,
                    })
                });
                self.choice = Some(json!(if *required { "required" } else { "auto" }));
            }
        }
        Ok(())
    }

    /// Every entry of an `allowed_tools` choice names a tool or a tool server of the request:
    /// naming anything else is the client's mistake, not a narrowing to nothing.
    fn check_allowed_refs(
        &self,
        tools: &[AllowedRef],
        servers: &HashMap<String, usize>,
    ) -> Result<(), FieldError> {
        for (index, reference) in tools.iter().enumerate() {
            match reference {
                AllowedRef::Named(name) if !self.entries.contains_key(name) => {
                    return Err(unknown_tool(
                        name,
                        &format!("tool_choice.tools[{index}].name"),
                    ));
                }
                AllowedRef::Server(label) if !servers.contains_key(label) => {
                    return Err(unknown_server(
                        label,
                        &format!("tool_choice.tools[{index}].server_label"),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn restrict(&mut self, keep: impl Fn(&str, &ToolEntry) -> bool) {
        for (name, entry) in self.entries.iter_mut() {
            entry.callable = entry.callable && keep(name, entry);
        }
    }
}

/// `tool_choice` (at `param`) names a tool the request does not declare.
fn unknown_tool(name: &str, param: &str) -> FieldError {
    FieldError::new(
        param,
        format!("Tool '{name}' is not among the request's tools."),
    )
}

/// `tool_choice` (at `param`) names a tool server the request's `tools` do not enable.
fn unknown_server(label: &str, param: &str) -> FieldError {
    FieldError::new(
        param,
        format!("Tool server '{label}' is not enabled by the request's tools."),
    )
}

/// A `tool_choice` naming hosted tool types, as the tool servers they are mapped to: forcing a
/// hosted tool this service does not offer is the client's error.
fn hosted_choice(registry: &ToolRegistry, choice: &ToolChoice) -> Result<ToolChoice, FieldError> {
    let server = |kind: &str, param: &str| {
        registry.hosted(kind).map(str::to_string).ok_or_else(|| {
            FieldError::new(
                param,
                format!(
                    "Tool type '{kind}' is not offered by this service (no tool server is configured for it), so tool_choice cannot require it."
                ),
            )
        })
    };
    Ok(match choice {
        ToolChoice::Hosted(kind) => ToolChoice::Server(server(kind, "tool_choice.type")?),
        ToolChoice::Allowed { required, tools } => ToolChoice::Allowed {
            required: *required,
            tools: tools
                .iter()
                .enumerate()
                .map(|(index, reference)| match reference {
                    AllowedRef::Hosted(kind) => {
                        server(kind, &format!("tool_choice.tools[{index}].type"))
                            .map(AllowedRef::Server)
                    }
                    other => Ok(other.clone()),
                })
                .collect::<Result<_, _>>()?,
        },
        other => other.clone(),
    })
}

/// Function names as the chat API accepts them.
fn check_name(name: &str, param: &str) -> Result<(), FieldError> {
    if crate::tools::is_callable_name(name) {
        Ok(())
    } else {
        Err(FieldError::new(
            param,
            format!(
                "Invalid '{param}': '{name}'. Expected a name of 1 to 64 letters, digits, underscores or dashes."
            ),
        ))
    }
}

/// A tool set being resolved: the set, where each name came from (for clash messages), and
/// which `tools` entry enabled each server.
#[derive(Default)]
struct Resolving {
    set: ToolSet,
    sources: HashMap<String, String>,
    servers: HashMap<String, usize>,
    /// What the caller's API key may use.
    policy: KeyPolicy,
    /// The servers the request names by URL, by label.
    named: HashMap<String, RequestNamed>,
}

impl Resolving {
    /// Adds a tool under `name`; a name seen before is a clash, never a replacement.
    fn add(
        &mut self,
        name: &str,
        source: String,
        path: &str,
        entry: ToolEntry,
    ) -> Result<(), FieldError> {
        if let Some(first) = self.sources.get(name) {
            return Err(FieldError::new(
                path,
                format!(
                    "Tool name '{name}' is declared twice: by {first} and by {source}. A tool can never be shadowed; rename one of them."
                ),
            ));
        }
        self.sources.insert(name.to_string(), source);
        self.set.order.push(name.to_string());
        self.set.entries.insert(name.to_string(), entry);
        Ok(())
    }

    /// A tool the client executes, shown to the model as `spec`.
    fn client(
        &mut self,
        kind: CallKind,
        spec: ToolSpec,
        source: String,
        path: &str,
        namespace: Option<&str>,
    ) -> Result<(), FieldError> {
        let name = spec.name.clone();
        let entry = ToolEntry {
            executor: Executor::Client(kind),
            server_label: None,
            spec,
            callable: true,
            needs_approval: false,
            namespace: namespace.map(str::to_string),
        };
        self.add(&name, source, path, entry)
    }

    /// A namespace's tools, each shown to the model under its own name (a name clash with
    /// any other tool is refused as always).
    fn namespace(&mut self, path: &str, namespace: &Namespace) -> Result<(), FieldError> {
        check_name(&namespace.name, &format!("{path}.name"))?;
        for (index, decl) in namespace.tools.iter().enumerate() {
            let path = format!("{path}.tools[{index}]");
            let name = Some(namespace.name.as_str());
            match decl {
                ToolDecl::Function(function) => self.function(&path, function, name)?,
                ToolDecl::Custom(custom) => self.custom(&path, custom, name)?,
                // The parser lets nothing else into a namespace.
                _ => {}
            }
        }
        Ok(())
    }

    /// A hosted tool type: the tool server the operator maps it to, as if the request had
    /// enabled that server; without a mapping it is left out of what the model sees (it
    /// stays in the echoed `tools`), logged once per type and counted, or refused
    /// (`tools.unmapped_hosted`).
    fn hosted(
        &mut self,
        registry: &ToolRegistry,
        index: usize,
        path: &str,
        kind: &str,
    ) -> Result<(), FieldError> {
        let Some(label) = registry.hosted(kind) else {
            if registry.unmapped_hosted() == crate::config::UnmappedHosted::Refuse {
                return Err(FieldError::new(
                    format!("{path}.type"),
                    format!(
                        "The hosted tool type '{kind}' is not available on this server: no tool server is configured to run it (the operator can map one with tools.hosted.{kind})."
                    ),
                ));
            }
            log_unmapped_once(kind);
            crate::metrics::unmapped_hosted_tool(kind);
            return Ok(());
        };
        if self.servers.contains_key(label) {
            // The request enabled the server itself too: once is enough.
            return Ok(());
        }
        let mcp = McpTool {
            server_label: label.to_string(),
            allowed_tools: None,
            require_approval: None,
            server_url: None,
            connector_id: None,
            headers: None,
            authorization: None,
        };
        self.server(registry, index, path, &mcp)
    }

    fn function(
        &mut self,
        path: &str,
        function: &FunctionTool,
        namespace: Option<&str>,
    ) -> Result<(), FieldError> {
        check_name(&function.name, &format!("{path}.name"))?;
        let parameters = function
            .parameters
            .clone()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        compile_schema(&parameters).map_err(|e| {
            FieldError::new(
                format!("{path}.parameters"),
                format!("Invalid schema for function '{}': {e}", function.name),
            )
        })?;
        let spec = ToolSpec {
            name: function.name.clone(),
            description: function.description.clone(),
            parameters,
            strict: function.strict,
        };
        self.client(
            CallKind::Function,
            spec,
            format!("{path} (function)"),
            path,
            namespace,
        )
    }

    fn custom(
        &mut self,
        path: &str,
        custom: &CustomTool,
        namespace: Option<&str>,
    ) -> Result<(), FieldError> {
        check_name(&custom.name, &format!("{path}.name"))?;
        let mut description = custom.description.clone().unwrap_or_default();
        if let Some(format) = &custom.format {
            description.push_str(&format!("\nThe input must follow this format: {format}"));
        }
        let spec = ToolSpec {
            name: custom.name.clone(),
            description: Some(description),
            parameters: json!({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}),
            strict: None,
        };
        self.client(
            CallKind::Custom,
            spec,
            format!("{path} (custom)"),
            path,
            namespace,
        )
    }

    fn local_shell(&mut self, path: &str) -> Result<(), FieldError> {
        let spec = ToolSpec {
            name: "local_shell".into(),
            description: Some(
                "Runs a command on the user's machine and returns its output.".into(),
            ),
            parameters: local_shell_schema(),
            strict: None,
        };
        self.client(
            CallKind::LocalShell,
            spec,
            format!("{path} (local_shell)"),
            path,
            None,
        )
    }

    /// A configured tool server enabled by `tools[index]`: its tools (all, or those allowed),
    /// each executed by the service unless it is definition-only, under the approval policy.
    fn server(
        &mut self,
        registry: &ToolRegistry,
        index: usize,
        path: &str,
        mcp: &McpTool,
    ) -> Result<(), FieldError> {
        let label = &mcp.server_label;
        let (server, named) = self.find_server(registry, path, mcp)?;
        // A `server_url` or `connector_id` beside the label of a configured server is taken as
        // naming it (the Vercel AI SDK always sends one): the operator's configuration says
        // where the server is, and the request cannot send its calls anywhere else.
        // (A server named by URL was checked against the key's policy as it was connected.)
        if named.is_none() && !self.policy.allows_server(label) {
            return Err(FieldError::new(
                format!("{path}.server_label"),
                format!("This API key may not use the tool server '{label}'."),
            ));
        }
        if let Some(first) = self.servers.insert(label.clone(), index) {
            return Err(FieldError::new(
                format!("{path}.server_label"),
                format!("Tool server '{label}' is enabled twice: by tools[{first}] and by {path}."),
            ));
        }
        let policy = match mcp.require_approval.as_ref() {
            None | Some(Value::Null) => None,
            Some(value) => Some(ApprovalPolicy::parse(
                value,
                &format!("{path}.require_approval"),
            )?),
        };
        let allowed = mcp.allowed_tools.as_ref().and_then(|a| a.names());
        self.check_allowed_tools(&server, label, path, allowed.unwrap_or_default())?;
        let mut listed = Vec::new();
        for tool in &server.tools {
            if allowed.is_some_and(|names| !names.iter().any(|n| n == tool.name())) {
                continue;
            }
            // A tool the key may not use is not shown (so it cannot be called).
            if !self.policy.allows_tool(tool.name()) {
                continue;
            }
            let (info, entry) = server_tool(tool, label, server.requires_approval, policy.as_ref());
            listed.push(info);
            let source = format!("{path} (tool server '{label}')");
            self.add(tool.name(), source, path, entry)?;
        }
        let error = match named {
            Some(named) => {
                self.set.connections.push(named.connection);
                named.error
            }
            None => (!server.available).then(|| crate::tools::mcp::not_connected(label)),
        };
        self.set.listings.push(Listing {
            server_label: label.clone(),
            tools: listed,
            error,
        });
        Ok(())
    }

    /// The tool server `mcp` (at `path`) enables: a configured one, else one the request
    /// names by URL (returned too, for its connection). Any other label is a 400 that lists
    /// the configured servers.
    fn find_server(
        &self,
        registry: &ToolRegistry,
        path: &str,
        mcp: &McpTool,
    ) -> Result<(Arc<ToolServer>, Option<RequestNamed>), FieldError> {
        let label = &mcp.server_label;
        let named = match registry.server(label) {
            Some(_) => None,
            None => self.named.get(label).cloned(),
        };
        let Some(server) = registry
            .server(label)
            .or_else(|| Some(named.as_ref()?.server.clone()))
        else {
            // A server named by URL alone is not one the operator configured.
            let by = [
                ("server_url", &mcp.server_url),
                ("connector_id", &mcp.connector_id),
            ]
            .into_iter()
            .find(|(_, value)| value.is_some());
            if let Some((field, _)) = by {
                return Err(FieldError::new(
                    format!("{path}.{field}"),
                    format!(
                        "Tool servers given by '{field}' are not supported; '{label}' is not a tool server configured by the operator. Configured tool servers: {}.",
                        known_servers(registry)
                    ),
                ));
            }
            return Err(FieldError::new(
                format!("{path}.server_label"),
                format!(
                    "Unknown tool server '{label}'. Configured tool servers: {}.",
                    known_servers(registry)
                ),
            ));
        };
        Ok((server, named))
    }

    /// Each name in the entry's `allowed_tools` is a tool of the server `label` that the key
    /// may use.
    fn check_allowed_tools(
        &self,
        server: &ToolServer,
        label: &str,
        path: &str,
        allowed: &[String],
    ) -> Result<(), FieldError> {
        for name in allowed {
            // An MCP server that is not connected has no tools to check against now: its
            // listing says so, and the request is not the client's mistake.
            if server.available && !server.tools.iter().any(|t| t.name() == name) {
                return Err(FieldError::new(
                    format!("{path}.allowed_tools"),
                    format!("Tool server '{label}' has no tool '{name}'."),
                ));
            }
            if !self.policy.allows_tool(name) {
                return Err(FieldError::new(
                    format!("{path}.allowed_tools"),
                    format!("This API key may not use the tool '{name}'."),
                ));
            }
        }
        Ok(())
    }
}

/// One tool of the enabled server `label`, as its `mcp_list_tools` item lists it and as the
/// run holds it: executed by the service unless it is definition-only, and then waiting for
/// approval as the request's `require_approval` says (`default`, the server's setting, where
/// it says nothing).
fn server_tool(
    tool: &Arc<RegisteredTool>,
    label: &str,
    default: bool,
    policy: Option<&ApprovalPolicy>,
) -> (McpToolInfo, ToolEntry) {
    let spec = ToolSpec {
        name: tool.name().to_string(),
        description: Some(tool.handler.description().to_string()),
        parameters: tool.schema.clone(),
        strict: None,
    };
    let info = McpToolInfo {
        name: spec.name.clone(),
        description: spec.description.clone(),
        input_schema: spec.parameters.clone(),
        annotations: tool.handler.annotations(),
    };
    let executor = match tool.kind {
        ToolKind::Executed => Executor::Server(tool.clone()),
        ToolKind::DefinitionOnly => Executor::Client(CallKind::Function),
    };
    let needs_approval = matches!(executor, Executor::Server(_))
        && policy.map_or(default, |p| p.requires(tool.name(), default));
    let entry = ToolEntry {
        executor,
        server_label: Some(label.to_string()),
        spec,
        callable: true,
        needs_approval,
        namespace: None,
    };
    (info, entry)
}

/// The configured tool servers, for error messages.
fn known_servers(registry: &ToolRegistry) -> String {
    registry.labels().join(", ")
}

/// Logs, once per tool type and process, that requests carry a hosted tool nobody runs here.
fn log_unmapped_once(kind: &str) {
    static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    if !logged.iter().any(|k| k == kind) {
        logged.push(kind.to_string());
        tracing::warn!(
            tool_type = kind,
            "requests carry the hosted tool type {kind:?}, which no tool server is configured for (tools.hosted); it is left out of what the model sees"
        );
    }
}
