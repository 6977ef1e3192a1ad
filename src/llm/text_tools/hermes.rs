//! The Hermes form (Qwen's and NousResearch Hermes' chat templates): each call is a JSON object
//! `{"name": …, "arguments": {…}}` between `<tool_call>` and `</tool_call>`.

use serde_json::{Map, Value};

use super::{Malformed, ParsedCall, repair};

pub(super) const OPEN: &str = "<tool_call>";
pub(super) const CLOSE: &str = "</tool_call>";

pub(super) fn parse(inside: &str) -> Result<ParsedCall, Malformed> {
    let (value, repaired) = match serde_json::from_str::<Value>(inside.trim()) {
        Ok(value) => (value, false),
        Err(e) => match repair::json(inside) {
            Some(value) => (value, true),
            None => {
                return Err(Malformed {
                    reason: format!("the call is not JSON ({e})"),
                });
            }
        },
    };
    let Value::Object(mut call) = value else {
        return Err(Malformed {
            reason: "the call is not a JSON object with \"name\" and \"arguments\"".into(),
        });
    };
    let Some(Value::String(name)) = call.remove("name") else {
        return Err(Malformed {
            reason: "the call has no \"name\"".into(),
        });
    };
    let arguments = call
        .remove("arguments")
        .or_else(|| call.remove("parameters"))
        .unwrap_or(Value::Object(Map::new()));
    let arguments = match arguments {
        Value::Object(_) => arguments,
        // Some models write the arguments as a JSON string, as native calls carry them.
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => value,
            _ => {
                return Err(Malformed {
                    reason: format!("the arguments of {name} are not a JSON object"),
                });
            }
        },
        Value::Null => Value::Object(Map::new()),
        _ => {
            return Err(Malformed {
                reason: format!("the arguments of {name} are not a JSON object"),
            });
        }
    };
    Ok(ParsedCall {
        name,
        arguments,
        repaired,
    })
}
