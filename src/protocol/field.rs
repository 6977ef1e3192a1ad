//! Reading JSON fields with errors that name them: a wrong field is a [`FieldError`], which
//! becomes a 400 whose `param` is the field's path (`input[0].content`), with an
//! OpenAI-style message. Every wire type that is parsed by hand or through serde uses it.

use serde_json::Value;

/// A request field that is wrong, with the reason; becomes a 400 naming `param`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub param: String,
    pub message: String,
}

impl FieldError {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// A word for a JSON value's type, for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `object[key]` is absent, `null`, or passes `is`: a key of a hand-parsed object whose value
/// is passed on or echoed, so that a value of the wrong type is a 400 naming it rather than
/// something the upstream chokes on or the Response object echoes.
pub(crate) fn optional(
    object: &Value,
    key: &str,
    path: &str,
    is: fn(&Value) -> bool,
    expected: &str,
) -> Result<(), FieldError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(value) if is(value) => Ok(()),
        Some(value) => {
            let param = format!("{path}.{key}");
            Err(FieldError::new(
                param.clone(),
                format!(
                    "Invalid type for '{param}': expected {expected}, but got {} instead.",
                    json_kind(value)
                ),
            ))
        }
    }
}

pub(crate) fn typed<T: serde::de::DeserializeOwned>(
    value: Value,
    path: &str,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let inner = e.path().to_string();
        let param = if inner == "." || inner.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{inner}")
        };
        describe_serde_error(&param, &e.into_inner().to_string())
    })
}

/// Turns a serde message into an OpenAI-style one naming the field.
pub fn describe_serde_error(param: &str, message: &str) -> FieldError {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        let full = join_path(param, name);
        return FieldError::new(full.clone(), format!("Unknown parameter: '{full}'."));
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        let full = join_path(param, name);
        return FieldError::new(
            full.clone(),
            format!("Missing required parameter: '{full}'."),
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let name = rest.split('`').next().unwrap_or(rest);
        let expected = rest
            .split_once("expected ")
            .map(|(_, e)| e.replace('`', "'"))
            .unwrap_or_default();
        return FieldError::new(
            param,
            format!("Invalid value for '{param}': '{name}'. Expected {expected}."),
        );
    }
    let message = message.split(" at line ").next().unwrap_or(message);
    if param.is_empty() || param == "." {
        FieldError::new("", format!("Invalid request body: {message}."))
    } else {
        FieldError::new(param, format!("Invalid value for '{param}': {message}."))
    }
}

/// `parent.name`, unless serde already put `name` at the end of the path.
fn join_path(parent: &str, name: &str) -> String {
    if parent == name || parent.ends_with(&format!(".{name}")) {
        parent.to_string()
    } else if parent.is_empty() || parent == "." {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}
