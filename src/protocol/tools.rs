//! `tools` entries and `tool_choice` of a request (SPEC §6), parsed with the path of every
//! problem.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::field::{FieldError, json_kind, optional, typed};
use super::limits::RequestLimits;
use super::schema::{
    array, described, nullable_string, one_of, one_of_strings, or_null, string, strings, tagged,
    tagged_ref,
};

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
    /// A group of function and custom tools (Codex sends them): the model sees its tools
    /// as they are, and their calls carry the namespace.
    Namespace(Namespace),
    /// A tool the provider hosts (`web_search`, `code_interpreter`, …): run by the tool
    /// server the operator maps its type to, otherwise not shown to the model.
    Hosted(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Namespace {
    pub name: String,
    pub description: Option<String>,
    /// Only `Function` and `Custom` entries.
    pub tools: Vec<ToolDecl>,
}

/// Tool types the OpenAI API hosts itself, which clients may send as they are. Any other
/// unknown type is refused, so that a misspelt type is an error, not a silently dropped tool.
pub const HOSTED_TOOL_TYPES: &[&str] = &[
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "computer_use",
    "shell",
    "apply_patch",
    "tool_search",
    "image_gen",
];

/// Whether `kind` names a hosted tool type (dated variants such as
/// `web_search_preview_2025_03_11` included).
pub fn is_hosted_type(kind: &str) -> bool {
    hosted_type(kind).is_some()
}

/// The hosted tool type `kind` names, without its date (`web_search_preview` for
/// `web_search_preview_2025_03_11`); the longest one that fits.
pub fn hosted_type(kind: &str) -> Option<&'static str> {
    HOSTED_TOOL_TYPES
        .iter()
        .filter(|hosted| {
            kind == **hosted
                || kind
                    .strip_prefix(**hosted)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|date| {
                        !date.is_empty() && date.chars().all(|c| c.is_ascii_digit() || c == '_')
                    })
        })
        .max_by_key(|hosted| hosted.len())
        .copied()
}

/// A tool the client executes, taking free-form text (`"type": "custom"`).
#[derive(Clone, Debug, PartialEq, Deserialize, ToSchema)]
pub struct CustomTool {
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// The grammar of the input, passed on as given.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub format: Option<Value>,
}

/// A function the client executes (`"type": "function"`). The Response object echoes it with
/// `description`, `parameters` and `strict` present (`null` when not given).
#[derive(Clone, Debug, PartialEq, Deserialize, ToSchema)]
pub struct FunctionTool {
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema of the arguments (checked against the meta-schema).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A configured tool server whose tools the service executes (`"type": "mcp"`).
#[derive(Clone, Debug, PartialEq, Deserialize, ToSchema)]
pub struct McpTool {
    /// A tool server of the configuration (`builtin` is always there).
    #[schema(example = "builtin")]
    pub server_label: String,
    #[serde(default)]
    pub allowed_tools: Option<AllowedTools>,
    /// `always`, `never`, or the tools listed under each; default from the server's
    /// configuration.
    #[serde(default)]
    #[schema(schema_with = require_approval_schema)]
    pub require_approval: Option<Value>,
    /// An MCP server named by URL (where the operator allows its host); beside the label of
    /// a configured server it is taken as naming that server.
    #[serde(default)]
    pub server_url: Option<String>,
    #[serde(default)]
    pub connector_id: Option<String>,
    /// Sent to the `server_url` server only; never stored, logged or echoed.
    #[serde(default)]
    #[schema(value_type = Option<std::collections::HashMap<String, String>>)]
    pub headers: Option<Credentials>,
    /// An access token for the `server_url` server, sent as `Authorization: Bearer …` unless
    /// `headers` has an `Authorization`; never stored, logged or echoed.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub authorization: Option<Token>,
}

/// An `mcp` entry's `authorization`: its `Debug` does not show it.
#[derive(Clone, PartialEq, Deserialize)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// An `mcp` entry's `headers`: credentials, whose values are never shown (its `Debug` names
/// the headers only).
#[derive(Clone, PartialEq, Deserialize)]
pub struct Credentials(pub std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// `allowed_tools`: a list of names, or `{"tool_names": [...]}`.
#[derive(Clone, Debug, PartialEq, Deserialize, ToSchema)]
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

/// A name of a tool the client declares (function, custom, namespace), as the engine checks
/// it; the `name` of `FunctionTool` and `CustomTool` repeats it (the derive takes a literal).
const TOOL_NAME_PATTERN: &str = r"^[A-Za-z0-9_-]{1,64}$";

/// The schema of `require_approval` (parsed by [`ApprovalPolicy::parse`]).
fn require_approval_schema() -> Schema {
    let filter = || {
        ObjectBuilder::new()
            .schema_type(or_null(Type::Object))
            .property("tool_names", strings())
            .required("tool_names")
    };
    one_of([
        one_of_strings(&["always", "never"]).into(),
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("always", filter())
            .property("never", filter())
            .into(),
        ObjectBuilder::new().schema_type(Type::Null).into(),
    ])
}

/// The hosted tool types, dated variants included, as [`is_hosted_type`] accepts them.
fn hosted_type_pattern() -> String {
    format!("^({})(_[0-9_]+)?$", HOSTED_TOOL_TYPES.join("|"))
}

/// An object whose `type` is a hosted tool type (a `tools` entry, or a `tool_choice`).
fn hosted_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(hosted_type_pattern())),
        )
        .required("type")
}

/// An entry of `tools` (parsed by [`parse_tools`]), as a request sends it and the Response
/// object echoes it. Keys a type does not know are accepted and echoed.
pub struct ToolEntry;

impl ToSchema for ToolEntry {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Tool")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for (name, schema) in [
            (FunctionTool::name(), FunctionTool::schema()),
            (CustomTool::name(), CustomTool::schema()),
            (McpTool::name(), McpTool::schema()),
            (AllowedTools::name(), AllowedTools::schema()),
        ] {
            schemas.push((name.into_owned(), schema));
        }
    }
}

impl PartialSchema for ToolEntry {
    fn schema() -> RefOr<Schema> {
        let namespaced = one_of([
            tagged_ref::<FunctionTool>("function").into(),
            tagged_ref::<CustomTool>("custom").into(),
        ]);
        let namespace = tagged("namespace")
            .property(
                "name",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(TOOL_NAME_PATTERN)),
            )
            .property("description", nullable_string())
            .property("tools", array(namespaced))
            .required("name")
            .required("tools")
            .description(Some(
                "Function and custom tools under one name: the model sees each of them, and \
                 their calls carry the namespace.",
            ));
        let hosted = hosted_schema().description(Some(
            "A tool type the OpenAI API hosts: run by the tool server the operator maps \
                 it to, otherwise not shown to the model (still echoed).",
        ));
        one_of([
            tagged_ref::<FunctionTool>("function").into(),
            tagged_ref::<CustomTool>("custom").into(),
            tagged_ref::<McpTool>("mcp").into(),
            tagged("local_shell")
                .description(Some(
                    "The client's shell: the model sees a function `local_shell`.",
                ))
                .into(),
            namespace.into(),
            hosted.into(),
        ])
        .into()
    }
}

/// `tool_choice` (parsed by [`parse_tool_choice`]), as a request sends it and the Response
/// object echoes it.
pub struct ToolChoiceSchema;

impl ToSchema for ToolChoiceSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ToolChoice")
    }
}

impl PartialSchema for ToolChoiceSchema {
    fn schema() -> RefOr<Schema> {
        let named = |kind: &str| tagged(kind).property("name", string()).required("name");
        let server = || {
            tagged("mcp")
                .property("server_label", string())
                .property("name", nullable_string())
                .required("server_label")
        };
        let reference = one_of([
            named("function").into(),
            named("custom").into(),
            server().into(),
            hosted_schema().into(),
        ]);
        let allowed = tagged("allowed_tools")
            .property(
                "mode",
                ObjectBuilder::new()
                    .schema_type(or_null(Type::String))
                    .enum_values(Some([
                        Value::from("auto"),
                        Value::from("required"),
                        Value::Null,
                    ])),
            )
            .property("tools", array(reference))
            .required("tools")
            .description(Some(
                "Only these tools may be called (enforced by the service); `required` forces a call.",
            ));
        described(
            "`none`, `auto` (the default), `required`, one tool, or the tools allowed.",
            one_of([
                one_of_strings(&["none", "auto", "required"]).into(),
                named("function").into(),
                named("custom").into(),
                server().into(),
                allowed.into(),
                hosted_schema().into(),
            ]),
        )
    }
}

/// Parses `tools`.
pub fn parse_tools(values: &[Value]) -> Result<Vec<ToolDecl>, FieldError> {
    parse_tools_at(values, "tools")
}

/// Parses a list of tools found at `path` (`tools`, or an input item's `tools`).
pub fn parse_tools_at(values: &[Value], path: &str) -> Result<Vec<ToolDecl>, FieldError> {
    values
        .iter()
        .enumerate()
        .map(|(index, value)| parse_tool(value, &format!("{path}[{index}]"), true))
        .collect()
}

/// One entry of `tools` (or of a namespace's `tools`, where only functions and custom tools
/// may be).
fn parse_tool(value: &Value, path: &str, top_level: bool) -> Result<ToolDecl, FieldError> {
    match value.get("type").and_then(Value::as_str) {
        Some("function") => typed(value.clone(), path).map(ToolDecl::Function),
        Some("custom") => {
            // The grammar is passed on as given and echoed: an object, or nothing.
            optional(value, "format", path, Value::is_object, "an object")?;
            typed(value.clone(), path).map(ToolDecl::Custom)
        }
        Some("mcp") if top_level => typed(value.clone(), path).map(ToolDecl::Mcp),
        Some("local_shell") if top_level => Ok(ToolDecl::LocalShell),
        Some("namespace") if top_level => parse_namespace(value, path),
        Some(hosted) if top_level && is_hosted_type(hosted) => {
            Ok(ToolDecl::Hosted(hosted.to_string()))
        }
        Some(other) if top_level => Err(FieldError::new(
            format!("{path}.type"),
            format!(
                "Tools of type '{other}' are not supported by this service; use 'function', 'custom', 'local_shell', 'namespace', 'mcp' or a hosted tool type."
            ),
        )),
        Some(other) => Err(FieldError::new(
            format!("{path}.type"),
            format!("A namespace holds 'function' and 'custom' tools, not '{other}'."),
        )),
        None => Err(FieldError::new(
            format!("{path}.type"),
            format!("Missing required parameter: '{path}.type'."),
        )),
    }
}

fn parse_namespace(value: &Value, path: &str) -> Result<ToolDecl, FieldError> {
    #[derive(Deserialize)]
    struct Raw {
        name: String,
        #[serde(default)]
        description: Option<String>,
        tools: Vec<Value>,
    }
    let raw: Raw = typed(value.clone(), path)?;
    let tools = raw
        .tools
        .iter()
        .enumerate()
        .map(|(index, tool)| parse_tool(tool, &format!("{path}.tools[{index}]"), false))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ToolDecl::Namespace(Namespace {
        name: raw.name,
        description: raw.description,
        tools,
    }))
}

/// The declared tools within the limits: how many (a namespace counts its tools), and each
/// schema's size and nesting. `paths` names where each declaration came from.
pub fn check_tool_limits(
    decls: &[(String, ToolDecl)],
    limits: &RequestLimits,
) -> Result<(), FieldError> {
    let mut count = 0;
    for (path, decl) in decls {
        let members: Vec<(String, &ToolDecl)> = match decl {
            ToolDecl::Namespace(namespace) => namespace
                .tools
                .iter()
                .enumerate()
                .map(|(index, tool)| (format!("{path}.tools[{index}]"), tool))
                .collect(),
            other => vec![(path.clone(), other)],
        };
        for (path, decl) in members {
            count += 1;
            if count > limits.max_tools {
                return Err(FieldError::new(
                    path,
                    format!("A request may declare at most {} tools.", limits.max_tools),
                ));
            }
            let (field, schema) = match decl {
                ToolDecl::Function(f) => ("parameters", f.parameters.as_ref()),
                ToolDecl::Custom(c) => ("format", c.format.as_ref()),
                _ => continue,
            };
            let Some(schema) = schema else { continue };
            let bytes = serde_json::to_vec(schema).map_or(0, |v| v.len());
            if bytes > limits.max_schema_bytes {
                return Err(FieldError::new(
                    format!("{path}.{field}"),
                    format!(
                        "The schema is {bytes} bytes; this service accepts at most {}.",
                        limits.max_schema_bytes
                    ),
                ));
            }
            if depth(schema) > limits.max_schema_depth {
                return Err(FieldError::new(
                    format!("{path}.{field}"),
                    format!(
                        "The schema is nested deeper than the {} levels this service accepts.",
                        limits.max_schema_depth
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// How deeply a JSON value nests (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `tools` as the Response object echoes them: as the request gave them, with every key of a
/// `function` tool's standard shape present (`description`, `parameters` and `strict` are
/// `null` when the request left them out; strict clients reject a missing key). An `mcp`
/// entry's `headers` and `authorization` (credentials for the server, as the OpenAI API takes
/// them) are left out: the echo is what is stored, and credentials are never stored or echoed.
/// (The configuration says how to reach a configured server; its own headers are used.)
pub fn echo_tools(values: &[Value]) -> Vec<Value> {
    values
        .iter()
        .map(|value| {
            let mut value = value.clone();
            if let Value::Object(tool) = &mut value {
                match tool.get("type").and_then(Value::as_str) {
                    Some("function") => {
                        for key in ["description", "parameters", "strict"] {
                            tool.entry(key).or_insert(Value::Null);
                        }
                    }
                    Some("mcp") => scrub_credentials(tool),
                    _ => {}
                }
            }
            value
        })
        .collect()
}

/// Takes the credentials for a tool server (`headers`, `authorization`) out of an `mcp`
/// entry. Every entry that is stored or echoed goes through it: a request's `tools` (their
/// echo) and an `additional_tools` input item's (as it is read).
fn scrub_credentials(tool: &mut serde_json::Map<String, Value>) {
    tool.remove("headers");
    tool.remove("authorization");
}

/// Tool entries as read, each `mcp` entry without its credentials.
pub fn without_credentials<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Value>, D::Error> {
    let mut tools = <Vec<Value> as serde::Deserialize>::deserialize(deserializer)?;
    for tool in &mut tools {
        if let Value::Object(tool) = tool
            && tool.get("type").and_then(Value::as_str) == Some("mcp")
        {
            scrub_credentials(tool);
        }
    }
    Ok(tools)
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
    /// The tool of this server (label) with this name.
    ServerTool(String, String),
    /// A hosted tool type (`{"type": "web_search"}`).
    Hosted(String),
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
    ServerTool(String, String),
    Hosted(String),
}

/// `tool_choice` as sent: a mode (`"none"`, `"auto"`, `"required"`) or an object naming a
/// tool, a tool server, a hosted tool type or the tools allowed; a problem names its path.
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
                    optional(value, "name", param, Value::is_string, "a string")?;
                    let label = object
                        .get("server_label")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            FieldError::new(
                                "tool_choice.server_label",
                                "Missing required parameter: 'tool_choice.server_label'.",
                            )
                        })?;
                    Ok(match name() {
                        Some(name) => ToolChoice::ServerTool(label.into(), name),
                        None => ToolChoice::Server(label.into()),
                    })
                }
                Some("allowed_tools") => parse_allowed_tools(value),
                Some(hosted) if is_hosted_type(hosted) => Ok(ToolChoice::Hosted(hosted.into())),
                Some(other) => Err(FieldError::new(
                    "tool_choice.type",
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function', 'custom', 'mcp', 'allowed_tools' and hosted tool types."
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

/// An `allowed_tools` choice (`{"type": "allowed_tools", "mode": …, "tools": […]}`): the tools
/// the model may call, and whether it must call one.
fn parse_allowed_tools(choice: &Value) -> Result<ToolChoice, FieldError> {
    optional(choice, "mode", "tool_choice", Value::is_string, "a string")?;
    let required = match choice.get("mode").and_then(Value::as_str) {
        None | Some("auto") => false,
        Some("required") => true,
        Some(other) => {
            return Err(FieldError::new(
                "tool_choice.mode",
                format!("Invalid value: '{other}'. Supported values are: 'auto' and 'required'."),
            ));
        }
    };
    let Some(entries) = choice.get("tools").and_then(Value::as_array) else {
        return Err(FieldError::new(
            "tool_choice.tools",
            "Missing required parameter: 'tool_choice.tools'.",
        ));
    };
    let mut tools = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        tools.push(parse_allowed_ref(
            entry,
            &format!("tool_choice.tools[{index}]"),
        )?);
    }
    Ok(ToolChoice::Allowed { required, tools })
}

/// One entry of an `allowed_tools` choice, at `path`: written as a `tool_choice` that names a
/// tool, a tool server or a hosted tool type, and its problems reported at its own path.
fn parse_allowed_ref(entry: &Value, path: &str) -> Result<AllowedRef, FieldError> {
    match parse_tool_choice(entry) {
        Ok(ToolChoice::Named(name)) => Ok(AllowedRef::Named(name)),
        Ok(ToolChoice::Server(label)) => Ok(AllowedRef::Server(label)),
        Ok(ToolChoice::ServerTool(label, name)) => Ok(AllowedRef::ServerTool(label, name)),
        Ok(ToolChoice::Hosted(kind)) => Ok(AllowedRef::Hosted(kind)),
        Ok(_) => Err(FieldError::new(
            path,
            "Expected a tool reference such as {\"type\": \"function\", \"name\": …}.",
        )),
        Err(e) => Err(FieldError::new(
            e.param.replacen("tool_choice", path, 1),
            e.message.replacen("'tool_choice", &format!("'{path}"), 1),
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
