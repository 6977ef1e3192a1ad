//! The tools of one run: the request's `tools` resolved against the registry, checked for
//! name clashes, narrowed by `allowed_tools` and `tool_choice`. The model is shown only what
//! it may call, and a call of anything else is refused by the service, not merely hinted.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::llm::ToolSpec;
use crate::protocol::items::McpToolInfo;
use crate::protocol::request::FieldError;
use crate::protocol::response::CallKind;
use crate::protocol::tools::{AllowedRef, ApprovalPolicy, ToolChoice, ToolDecl};
use crate::tools::ToolKind;
use crate::tools::registry::{RegisteredTool, ToolRegistry, compile_schema};

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
    pub listings: Vec<(String, Vec<McpToolInfo>)>,
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

    /// Resolves the request's tools; every problem is a 400 naming the field.
    pub fn resolve(
        registry: &ToolRegistry,
        decls: &[ToolDecl],
        choice: Option<&ToolChoice>,
    ) -> Result<ToolSet, FieldError> {
        let mut set = ToolSet::default();
        // Where each name came from, for clash messages.
        let mut sources: HashMap<String, String> = HashMap::new();
        let mut servers: HashMap<String, usize> = HashMap::new();
        for (index, decl) in decls.iter().enumerate() {
            let path = format!("tools[{index}]");
            match decl {
                ToolDecl::Function(function) => {
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
                    let source = format!("{path} (function)");
                    set.add(
                        &mut sources,
                        &function.name,
                        source,
                        &path,
                        ToolEntry {
                            executor: Executor::Client(CallKind::Function),
                            server_label: None,
                            spec: ToolSpec {
                                name: function.name.clone(),
                                description: function.description.clone(),
                                parameters,
                                strict: function.strict,
                            },
                            callable: true,
                            needs_approval: false,
                        },
                    )?;
                }
                ToolDecl::Custom(custom) => {
                    check_name(&custom.name, &format!("{path}.name"))?;
                    let mut description = custom.description.clone().unwrap_or_default();
                    if let Some(format) = &custom.format {
                        description
                            .push_str(&format!("\nThe input must follow this format: {format}"));
                    }
                    let source = format!("{path} (custom)");
                    set.add(&mut sources, &custom.name, source, &path, ToolEntry {
                        executor: Executor::Client(CallKind::Custom),
                        server_label: None,
                        spec: ToolSpec {
                            name: custom.name.clone(),
                            description: Some(description),
                            parameters: json!({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}),
                            strict: None,
                        },
                        callable: true,
                        needs_approval: false,
                    })?;
                }
                ToolDecl::LocalShell => {
                    let source = format!("{path} (local_shell)");
                    set.add(
                        &mut sources,
                        "local_shell",
                        source,
                        &path,
                        ToolEntry {
                            executor: Executor::Client(CallKind::LocalShell),
                            server_label: None,
                            spec: ToolSpec {
                                name: "local_shell".into(),
                                description: Some(
                                    "Runs a command on the user's machine and returns its output."
                                        .into(),
                                ),
                                parameters: local_shell_schema(),
                                strict: None,
                            },
                            callable: true,
                            needs_approval: false,
                        },
                    )?;
                }
                ToolDecl::Mcp(mcp) => {
                    if mcp.server_url.is_some() || mcp.connector_id.is_some() {
                        return Err(FieldError::new(
                            format!("{path}.server_url"),
                            "Remote MCP servers given by URL are not supported; name a tool server configured by the operator with 'server_label'.",
                        ));
                    }
                    let label = &mcp.server_label;
                    let Some(server) = registry.server(label) else {
                        let known: Vec<&str> =
                            registry.servers().map(|s| s.label.as_str()).collect();
                        return Err(FieldError::new(
                            format!("{path}.server_label"),
                            format!(
                                "Unknown tool server '{label}'. Configured tool servers: {}.",
                                known.join(", ")
                            ),
                        ));
                    };
                    if let Some(first) = servers.insert(label.clone(), index) {
                        return Err(FieldError::new(
                            format!("{path}.server_label"),
                            format!(
                                "Tool server '{label}' is enabled twice: by tools[{first}] and by {path}."
                            ),
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
                    if let Some(names) = allowed {
                        for name in names {
                            if !server.tools.iter().any(|t| t.name() == name) {
                                return Err(FieldError::new(
                                    format!("{path}.allowed_tools"),
                                    format!("Tool server '{label}' has no tool '{name}'."),
                                ));
                            }
                        }
                    }
                    let mut listed = Vec::new();
                    for tool in &server.tools {
                        if allowed.is_some_and(|names| !names.iter().any(|n| n == tool.name())) {
                            continue;
                        }
                        let source = format!("{path} (tool server '{label}')");
                        let spec = ToolSpec {
                            name: tool.name().to_string(),
                            description: Some(tool.handler.description().to_string()),
                            parameters: tool.schema.clone(),
                            strict: None,
                        };
                        listed.push(McpToolInfo {
                            name: spec.name.clone(),
                            description: spec.description.clone(),
                            input_schema: spec.parameters.clone(),
                            annotations: None,
                        });
                        let executor = match tool.kind {
                            ToolKind::Executed => Executor::Server(tool.clone()),
                            ToolKind::DefinitionOnly => Executor::Client(CallKind::Function),
                        };
                        let default = server.requires_approval;
                        let needs_approval = matches!(executor, Executor::Server(_))
                            && policy
                                .as_ref()
                                .map_or(default, |p| p.requires(tool.name(), default));
                        set.add(
                            &mut sources,
                            tool.name(),
                            source,
                            &path,
                            ToolEntry {
                                executor,
                                server_label: Some(label.clone()),
                                spec,
                                callable: true,
                                needs_approval,
                            },
                        )?;
                    }
                    set.listings.push((label.clone(), listed));
                }
            }
        }
        set.apply_choice(choice, &servers)?;
        Ok(set)
    }

    fn add(
        &mut self,
        sources: &mut HashMap<String, String>,
        name: &str,
        source: String,
        path: &str,
        entry: ToolEntry,
    ) -> Result<(), FieldError> {
        if let Some(first) = sources.get(name) {
            return Err(FieldError::new(
                path,
                format!(
                    "Tool name '{name}' is declared twice: by {first} and by {source}. A tool can never be shadowed; rename one of them."
                ),
            ));
        }
        sources.insert(name.to_string(), source);
        self.order.push(name.to_string());
        self.entries.insert(name.to_string(), entry);
        Ok(())
    }

    /// Narrows what the model may call and picks the chat `tool_choice`.
    fn apply_choice(
        &mut self,
        choice: Option<&ToolChoice>,
        servers: &HashMap<String, usize>,
    ) -> Result<(), FieldError> {
        let unknown_tool = |name: &str, param: &str| {
            FieldError::new(
                param,
                format!("Tool '{name}' is not among the request's tools."),
            )
        };
        let unknown_server = |label: &str, param: &str| {
            FieldError::new(
                param,
                format!("Tool server '{label}' is not enabled by the request's tools."),
            )
        };
        match choice {
            None | Some(ToolChoice::Auto) => {}
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
                let tools = tools.clone();
                self.restrict(move |name, entry| {
                    tools.iter().any(|reference| match reference {
                        AllowedRef::Named(allowed) => allowed == name,
                        AllowedRef::Server(label) => {
                            entry.server_label.as_deref() == Some(label.as_str())
                        }
                    })
                });
                self.choice = Some(json!(if *required { "required" } else { "auto" }));
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

/// Function names as the chat API accepts them.
fn check_name(name: &str, param: &str) -> Result<(), FieldError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
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
