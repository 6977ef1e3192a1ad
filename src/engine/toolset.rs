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
use crate::protocol::tools::{
    AllowedRef, ApprovalPolicy, CustomTool, FunctionTool, McpTool, ToolChoice, ToolDecl,
};
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
        let mut resolving = Resolving::default();
        for (index, decl) in decls.iter().enumerate() {
            let path = format!("tools[{index}]");
            match decl {
                ToolDecl::Function(function) => resolving.function(&path, function)?,
                ToolDecl::Custom(custom) => resolving.custom(&path, custom)?,
                ToolDecl::LocalShell => resolving.local_shell(&path)?,
                ToolDecl::Mcp(mcp) => resolving.server(registry, index, &path, mcp)?,
            }
        }
        let Resolving {
            mut set, servers, ..
        } = resolving;
        set.apply_choice(choice, &servers)?;
        Ok(set)
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

/// A tool set being resolved: the set, where each name came from (for clash messages), and
/// which `tools` entry enabled each server.
#[derive(Default)]
struct Resolving {
    set: ToolSet,
    sources: HashMap<String, String>,
    servers: HashMap<String, usize>,
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
    ) -> Result<(), FieldError> {
        let name = spec.name.clone();
        let entry = ToolEntry {
            executor: Executor::Client(kind),
            server_label: None,
            spec,
            callable: true,
            needs_approval: false,
        };
        self.add(&name, source, path, entry)
    }

    fn function(&mut self, path: &str, function: &FunctionTool) -> Result<(), FieldError> {
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
        self.client(CallKind::Function, spec, format!("{path} (function)"), path)
    }

    fn custom(&mut self, path: &str, custom: &CustomTool) -> Result<(), FieldError> {
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
        self.client(CallKind::Custom, spec, format!("{path} (custom)"), path)
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
        if mcp.server_url.is_some() || mcp.connector_id.is_some() {
            return Err(FieldError::new(
                format!("{path}.server_url"),
                "Remote MCP servers given by URL are not supported; name a tool server configured by the operator with 'server_label'.",
            ));
        }
        let label = &mcp.server_label;
        let Some(server) = registry.server(label) else {
            let known: Vec<&str> = registry.servers().map(|s| s.label.as_str()).collect();
            return Err(FieldError::new(
                format!("{path}.server_label"),
                format!(
                    "Unknown tool server '{label}'. Configured tool servers: {}.",
                    known.join(", ")
                ),
            ));
        };
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
        for name in allowed.into_iter().flatten() {
            if !server.tools.iter().any(|t| t.name() == name) {
                return Err(FieldError::new(
                    format!("{path}.allowed_tools"),
                    format!("Tool server '{label}' has no tool '{name}'."),
                ));
            }
        }
        let mut listed = Vec::new();
        for tool in &server.tools {
            if allowed.is_some_and(|names| !names.iter().any(|n| n == tool.name())) {
                continue;
            }
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
            let entry = ToolEntry {
                executor,
                server_label: Some(label.clone()),
                spec,
                callable: true,
                needs_approval,
            };
            let source = format!("{path} (tool server '{label}')");
            self.add(tool.name(), source, path, entry)?;
        }
        self.set.listings.push((label.clone(), listed));
        Ok(())
    }
}
