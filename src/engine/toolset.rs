//! The tools of one run: the request's `tools` resolved against the registry, named
//! unambiguously, narrowed by `allowed_tools` and `tool_choice`. The model is shown only what
//! it may call, and a call of anything else is refused by the service, not merely hinted.
//!
//! A server tool is identified by its tool server and its name. The model is shown its own
//! name when no other tool of the request has it, and otherwise a qualified name
//! ([`qualified_name`]) that is mapped back: its `mcp_call` items carry the server's own
//! label and name, and the history shows the model those calls under the names of this
//! request. A client tool (function, custom, local shell) is always shown under its own name,
//! since the client executes its calls by that name; two of one name are the client's error.

use std::collections::{HashMap, HashSet};
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
    /// The tool's own name (a server tool's name at its server); the model may be shown
    /// another (the key it is found under).
    pub name: String,
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

    /// The tool the model calls `name` (the name it is shown).
    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.entries.get(name)
    }

    /// The tool `name` of the tool server `label` (an approval request names it so).
    pub fn find(&self, label: &str, name: &str) -> Option<&ToolEntry> {
        self.entries
            .values()
            .find(|e| e.name == name && e.server_label.as_deref() == Some(label))
    }

    /// The server tools the model is shown under a qualified name, by (server label, own
    /// name): their earlier calls are shown to the model under those names too.
    pub fn renamed(&self) -> HashMap<(String, String), String> {
        self.entries
            .iter()
            .filter(|(shown, entry)| **shown != entry.name)
            .filter_map(|(shown, entry)| {
                let label = entry.server_label.clone()?;
                Some(((label, entry.name.clone()), shown.clone()))
            })
            .collect()
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
        resolving.name_tools()?;
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
                let only = self.shown_name(name, None, "tool_choice.name")?;
                self.choice = Some(json!({"type": "function", "name": only}));
                self.restrict(move |n, _| n == only);
            }
            Some(ToolChoice::ServerTool(label, name)) => {
                if !servers.contains_key(label) {
                    return Err(unknown_server(label, "tool_choice.server_label"));
                }
                let only = self.shown_name(name, Some(label), "tool_choice.name")?;
                self.choice = Some(json!({"type": "function", "name": only}));
                self.restrict(move |n, _| n == only);
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
                let named = self.allowed_names(tools, servers)?;
                let tools = tools.clone();
                self.restrict(move |name, entry| {
                    named.contains(name)
                        || tools.iter().any(|reference| match reference {
                            AllowedRef::Server(label) => {
                                entry.server_label.as_deref() == Some(label.as_str())
                            }
                            _ => false,
                        })
                });
                self.choice = Some(json!(if *required { "required" } else { "auto" }));
            }
        }
        Ok(())
    }

    /// Every entry of an `allowed_tools` choice names a tool or a tool server of the request:
    /// naming anything else is the client's mistake, not a narrowing to nothing. Returns the
    /// names (as the model is shown them) of the tools it names one by one.
    fn allowed_names(
        &self,
        tools: &[AllowedRef],
        servers: &HashMap<String, usize>,
    ) -> Result<HashSet<String>, FieldError> {
        let mut names = HashSet::new();
        for (index, reference) in tools.iter().enumerate() {
            let param = |leaf: &str| format!("tool_choice.tools[{index}].{leaf}");
            match reference {
                AllowedRef::Named(name) => {
                    names.insert(self.shown_name(name, None, &param("name"))?);
                }
                AllowedRef::ServerTool(label, _) | AllowedRef::Server(label)
                    if !servers.contains_key(label) =>
                {
                    return Err(unknown_server(label, &param("server_label")));
                }
                AllowedRef::ServerTool(label, name) => {
                    names.insert(self.shown_name(name, Some(label), &param("name"))?);
                }
                _ => {}
            }
        }
        Ok(names)
    }

    /// The name the model is shown for the tool a `tool_choice` names (at `param`): a name it
    /// is shown, or a tool's own name (of the server `label`, where the choice says) when
    /// only one tool of the request has it.
    fn shown_name(
        &self,
        name: &str,
        label: Option<&str>,
        param: &str,
    ) -> Result<String, FieldError> {
        if label.is_none() && self.entries.contains_key(name) {
            return Ok(name.to_string());
        }
        let matches: Vec<(&String, &ToolEntry)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.name == name)
            .filter(|(_, e)| label.is_none_or(|l| e.server_label.as_deref() == Some(l)))
            .collect();
        match matches.as_slice() {
            [(shown, _)] => Ok((*shown).clone()),
            [] => Err(match label {
                Some(label) => FieldError::new(
                    param,
                    format!("Tool server '{label}' offers no tool '{name}' in this request."),
                ),
                None => unknown_tool(name, param),
            }),
            several => {
                let mut labels: Vec<&str> = several
                    .iter()
                    .filter_map(|(_, e)| e.server_label.as_deref())
                    .collect();
                labels.sort_unstable();
                Err(FieldError::new(
                    param,
                    format!(
                        "Tool '{name}' is offered by several tool servers of this request ({}); name one with {{\"type\": \"mcp\", \"server_label\": …, \"name\": \"{name}\"}}.",
                        labels.join(", ")
                    ),
                ))
            }
        }
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

/// A tool set being resolved: the set, the tools under their own names until every name is
/// known ([`Resolving::name_tools`]), where each client tool's name came from (for clash
/// messages), and which `tools` entry enabled each server.
#[derive(Default)]
struct Resolving {
    set: ToolSet,
    tools: Vec<ToolEntry>,
    sources: HashMap<String, String>,
    servers: HashMap<String, usize>,
    /// What the caller's API key may use.
    policy: KeyPolicy,
    /// The servers the request names by URL, by label.
    named: HashMap<String, RequestNamed>,
}

impl Resolving {
    /// Adds a tool under its own name. A client tool's name is the name its calls carry: a
    /// second client tool of that name is a clash, never a replacement. A server tool's name
    /// may be any other tool's too ([`Resolving::name_tools`]).
    fn add(&mut self, source: String, path: &str, entry: ToolEntry) -> Result<(), FieldError> {
        if entry.server_label.is_none() {
            if let Some(first) = self.sources.get(&entry.name) {
                return Err(FieldError::new(
                    path,
                    format!(
                        "Tool name '{}' is declared twice: by {first} and by {source}. A tool can never be shadowed; rename one of them.",
                        entry.name
                    ),
                ));
            }
            self.sources.insert(entry.name.clone(), source);
        }
        self.tools.push(entry);
        Ok(())
    }

    /// Gives every tool the name the model is shown: its own where no other tool of the
    /// request has it, else (a server tool) its qualified name. Declaration order is kept.
    fn name_tools(&mut self) -> Result<(), FieldError> {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for entry in &self.tools {
            *count.entry(entry.name.as_str()).or_default() += 1;
        }
        let own =
            |entry: &ToolEntry| entry.server_label.is_none() || count[entry.name.as_str()] == 1;
        let mut taken: HashSet<String> = self
            .tools
            .iter()
            .filter(|e| own(e))
            .map(|e| e.name.clone())
            .collect();
        let mut shown = Vec::with_capacity(self.tools.len());
        for entry in &self.tools {
            let (true, Some(label)) = (!own(entry), entry.server_label.as_deref()) else {
                shown.push(entry.name.clone());
                continue;
            };
            let name = [qualified_name(label, &entry.name), hashed_name(label, &entry.name)]
                .into_iter()
                .find(|candidate| !taken.contains(candidate))
                .ok_or_else(|| {
                    FieldError::new(
                        "tools",
                        format!(
                            "The tool '{}' of tool server '{label}' cannot be given a name of its own: '{}' is taken by another tool of the request; rename that one.",
                            entry.name,
                            qualified_name(label, &entry.name)
                        ),
                    )
                })?;
            taken.insert(name.clone());
            shown.push(name);
        }
        for (name, mut entry) in shown.into_iter().zip(std::mem::take(&mut self.tools)) {
            entry.spec.name = name.clone();
            self.set.order.push(name.clone());
            self.set.entries.insert(name, entry);
        }
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
        let entry = ToolEntry {
            name: spec.name.clone(),
            executor: Executor::Client(kind),
            server_label: None,
            spec,
            callable: true,
            needs_approval: false,
            namespace: namespace.map(str::to_string),
        };
        self.add(source, path, entry)
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
            self.add(source, path, entry)?;
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
        name: tool.name().to_string(),
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

/// The name a server tool is shown under when its own name is not unique in the request:
/// `<label>__<name>`, the label's characters the chat API does not take in a name replaced by
/// `_`; where that is longer than the 64 characters a name may have, [`hashed_name`]. Only a
/// function of the label and the name, so that a replayed history shows the same names.
pub fn qualified_name(label: &str, name: &str) -> String {
    let qualified = qualified_name_start(label, name);
    if qualified.len() <= 64 {
        qualified
    } else {
        hashed_name(label, name)
    }
}

/// `<start of the qualified name>_<8 hex digits of SHA-256 of label and name>`, at most 64
/// characters: for a qualified name that is too long or taken.
pub fn hashed_name(label: &str, name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{label}\0{name}").as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let start: String = qualified_name_start(label, name)
        .chars()
        .take(64 - 9)
        .collect();
    format!("{start}_{hex}")
}

/// The qualified name before any shortening.
fn qualified_name_start(label: &str, name: &str) -> String {
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{label}__{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_are_callable_deterministic_and_short_enough() {
        assert_eq!(
            qualified_name("everything", "get-sum"),
            "everything__get-sum"
        );
        assert_eq!(qualified_name("acme.prod", "search"), "acme_prod__search");
        let long = "a".repeat(60);
        let name = qualified_name(&long, "search");
        assert_eq!(name.len(), 64);
        assert_eq!(name, qualified_name(&long, "search"));
        assert_ne!(name, qualified_name(&long, "searcH"));
        for name in [name, hashed_name("acme", "search")] {
            assert!(crate::tools::is_callable_name(&name), "{name}");
        }
        assert_ne!(
            hashed_name("acme", "search"),
            qualified_name("acme", "search")
        );
    }
}
