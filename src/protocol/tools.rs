//! `tools` entries and `tool_choice` of a request (SPEC §6), parsed with the path of every
//! problem.

use serde::Deserialize;
use serde_json::Value;

use super::items::json_kind;
use super::request::{FieldError, typed};

/// One entry of `tools`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolDecl {
    /// A function the client executes.
    Function(FunctionTool),
    /// A configured tool server whose tools the service executes.
    Mcp(McpTool),
    /// A tool the client executes, taking free-form text.
    Custom(CustomTool),
    /// The client's shell.
    LocalShell,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CustomTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub format: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct FunctionTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct McpTool {
    pub server_label: String,
    #[serde(default)]
    pub allowed_tools: Option<AllowedTools>,
    #[serde(default)]
    pub require_approval: Option<Value>,
    #[serde(default)]
    pub server_url: Option<String>,
    #[serde(default)]
    pub connector_id: Option<String>,
}

/// `allowed_tools`: a list of names, or `{"tool_names": [...]}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum AllowedTools {
    Names(Vec<String>),
    Filter {
        #[serde(default)]
        tool_names: Option<Vec<String>>,
    },
}

/// `require_approval`: `"always"`, `"never"`, or per-tool lists.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalPolicy {
    Always,
    Never,
    /// Tools listed under `always` / `never`; the others follow the server's default.
    Filter {
        always: Vec<String>,
        never: Vec<String>,
    },
}

impl ApprovalPolicy {
    pub fn parse(value: &Value, param: &str) -> Result<ApprovalPolicy, FieldError> {
        let names = |key: &str| -> Result<Vec<String>, FieldError> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(filter) => match filter.get("tool_names") {
                    Some(Value::Array(names)) => names
                        .iter()
                        .map(|n| {
                            n.as_str().map(str::to_string).ok_or_else(|| {
                                FieldError::new(
                                    format!("{param}.{key}.tool_names"),
                                    "Expected an array of tool names.",
                                )
                            })
                        })
                        .collect(),
                    _ => Err(FieldError::new(
                        format!("{param}.{key}"),
                        format!("Expected {{\"tool_names\": [...]}} for '{param}.{key}'."),
                    )),
                },
            }
        };
        match value {
            Value::String(mode) if mode == "always" => Ok(ApprovalPolicy::Always),
            Value::String(mode) if mode == "never" => Ok(ApprovalPolicy::Never),
            Value::Object(_) => Ok(ApprovalPolicy::Filter {
                always: names("always")?,
                never: names("never")?,
            }),
            _ => Err(FieldError::new(
                param,
                "Invalid value: expected 'always', 'never' or {\"always\": {\"tool_names\": [...]}, \"never\": {\"tool_names\": [...]}}.",
            )),
        }
    }

    /// Whether calls of `tool` wait for approval, given the server's default.
    pub fn requires(&self, tool: &str, default: bool) -> bool {
        match self {
            ApprovalPolicy::Always => true,
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Filter { always, never } => {
                if always.iter().any(|n| n == tool) {
                    true
                } else if never.iter().any(|n| n == tool) {
                    false
                } else {
                    default
                }
            }
        }
    }
}

impl AllowedTools {
    pub fn names(&self) -> Option<&[String]> {
        match self {
            AllowedTools::Names(names) => Some(names),
            AllowedTools::Filter { tool_names } => tool_names.as_deref(),
        }
    }
}

/// Parses `tools`.
pub fn parse_tools(values: &[Value]) -> Result<Vec<ToolDecl>, FieldError> {
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let path = format!("tools[{index}]");
            match value.get("type").and_then(Value::as_str) {
                Some("function") => typed(value.clone(), &path).map(ToolDecl::Function),
                Some("mcp") => typed(value.clone(), &path).map(ToolDecl::Mcp),
                Some("custom") => typed(value.clone(), &path).map(ToolDecl::Custom),
                Some("local_shell") => Ok(ToolDecl::LocalShell),
                Some(other) => Err(FieldError::new(
                    format!("{path}.type"),
                    format!("Tools of type '{other}' are not supported by this service; use 'function', 'custom', 'local_shell' or 'mcp'."),
                )),
                None => Err(FieldError::new(
                    format!("{path}.type"),
                    format!("Missing required parameter: '{path}.type'."),
                )),
            }
        })
        .collect()
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    /// Exactly this tool (a function, or a server tool).
    Named(String),
    /// Some tool of this server.
    Server(String),
    /// Only these tools; `required` forces a call.
    Allowed {
        required: bool,
        tools: Vec<AllowedRef>,
    },
}

/// One entry of `tool_choice.tools` in `allowed_tools` mode.
#[derive(Clone, Debug, PartialEq)]
pub enum AllowedRef {
    Named(String),
    Server(String),
}

pub fn parse_tool_choice(value: &Value) -> Result<ToolChoice, FieldError> {
    let param = "tool_choice";
    match value {
        Value::String(mode) => match mode.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(FieldError::new(
                param,
                format!(
                    "Invalid value: '{other}'. Supported values are: 'none', 'auto' and 'required'."
                ),
            )),
        },
        Value::Object(object) => {
            let name = || {
                object
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            match object.get("type").and_then(Value::as_str) {
                Some("function" | "custom") => name().map(ToolChoice::Named).ok_or_else(|| {
                    FieldError::new(
                        "tool_choice.name",
                        "Missing required parameter: 'tool_choice.name'.",
                    )
                }),
                Some("mcp") => {
                    let label = object
                        .get("server_label")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            FieldError::new(
                                "tool_choice.server_label",
                                "Missing required parameter: 'tool_choice.server_label'.",
                            )
                        })?;
                    Ok(name().map_or_else(|| ToolChoice::Server(label.into()), ToolChoice::Named))
                }
                Some("allowed_tools") => {
                    let required = match object.get("mode").and_then(Value::as_str) {
                        None | Some("auto") => false,
                        Some("required") => true,
                        Some(other) => {
                            return Err(FieldError::new(
                                "tool_choice.mode",
                                format!(
                                    "Invalid value: '{other}'. Supported values are: 'auto' and 'required'."
                                ),
                            ));
                        }
                    };
                    let Some(entries) = object.get("tools").and_then(Value::as_array) else {
                        return Err(FieldError::new(
                            "tool_choice.tools",
                            "Missing required parameter: 'tool_choice.tools'.",
                        ));
                    };
                    let mut tools = Vec::with_capacity(entries.len());
                    for (index, entry) in entries.iter().enumerate() {
                        let path = format!("tool_choice.tools[{index}]");
                        match parse_tool_choice(entry) {
                            Ok(ToolChoice::Named(name)) => tools.push(AllowedRef::Named(name)),
                            Ok(ToolChoice::Server(label)) => tools.push(AllowedRef::Server(label)),
                            Ok(_) => {
                                return Err(FieldError::new(
                                    path,
                                    "Expected a tool reference such as {\"type\": \"function\", \"name\": …}.",
                                ));
                            }
                            Err(e) => {
                                return Err(FieldError::new(
                                    e.param.replacen("tool_choice", &path, 1),
                                    e.message.replacen("'tool_choice", &format!("'{path}"), 1),
                                ));
                            }
                        }
                    }
                    Ok(ToolChoice::Allowed { required, tools })
                }
                Some(other) => Err(FieldError::new(
                    "tool_choice.type",
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function', 'custom', 'mcp' and 'allowed_tools'."
                    ),
                )),
                None => Err(FieldError::new(
                    "tool_choice.type",
                    "Missing required parameter: 'tool_choice.type'.",
                )),
            }
        }
        other => Err(FieldError::new(
            param,
            format!(
                "Invalid type for 'tool_choice': expected a string or an object, but got {} instead.",
                json_kind(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tool_choice_form_parses() {
        assert_eq!(parse_tool_choice(&json!("none")), Ok(ToolChoice::None));
        assert_eq!(
            parse_tool_choice(&json!("required")),
            Ok(ToolChoice::Required)
        );
        assert_eq!(
            parse_tool_choice(&json!({"type": "function", "name": "f"})),
            Ok(ToolChoice::Named("f".into()))
        );
        assert_eq!(
            parse_tool_choice(&json!({"type": "mcp", "server_label": "builtin"})),
            Ok(ToolChoice::Server("builtin".into()))
        );
        assert_eq!(
            parse_tool_choice(&json!({"type": "allowed_tools", "mode": "required",
                "tools": [{"type": "function", "name": "f"}, {"type": "mcp", "server_label": "s"}]})),
            Ok(ToolChoice::Allowed {
                required: true,
                tools: vec![
                    AllowedRef::Named("f".into()),
                    AllowedRef::Server("s".into())
                ]
            })
        );
        assert_eq!(
            parse_tool_choice(&json!("sometimes")).unwrap_err().param,
            "tool_choice"
        );
        assert_eq!(
            parse_tool_choice(&json!({"type": "allowed_tools", "tools": [{"type": "function"}]}))
                .unwrap_err()
                .param,
            "tool_choice.tools[0].name"
        );
    }
}
