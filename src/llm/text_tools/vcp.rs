//! The reference design's VCP blocks: between `<<<[TOOL_REQUEST]>>>` and
//! `<<<[END_TOOL_REQUEST]>>>`, one `key:「始」value「末」` per field, `tool_name` naming the tool
//! and every other key an argument. Values are text; the caller gives them the types the
//! tool's schema asks for. A repeated key keeps its last value; an empty value is "".

use serde_json::{Map, Value};

use super::{Malformed, ParsedCall};

pub(super) const OPEN: &str = "<<<[TOOL_REQUEST]>>>";
pub(super) const CLOSE: &str = "<<<[END_TOOL_REQUEST]>>>";
pub(super) const START: &str = "「始」";
pub(super) const END: &str = "「末」";

pub(super) fn parse(inside: &str) -> Result<ParsedCall, Malformed> {
    let mut fields = Map::new();
    let mut rest = inside;
    while let Some(start) = rest.find(START) {
        let key = rest[..start]
            .trim_matches(|c: char| c.is_whitespace() || c == ',')
            .strip_suffix(':')
            .or_else(|| rest[..start].trim().strip_suffix('：'))
            .map(|key| key.trim_matches(|c: char| c.is_whitespace() || c == ','));
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Err(Malformed {
                reason: format!("a value has no key before {START}"),
            });
        };
        let after = &rest[start + START.len()..];
        let Some(end) = after.find(END) else {
            return Err(Malformed {
                reason: format!("the value of {key} is not closed with {END}"),
            });
        };
        fields.insert(key.to_string(), Value::String(after[..end].to_string()));
        rest = &after[end + END.len()..];
    }
    let Some(Value::String(name)) = fields.remove("tool_name") else {
        return Err(Malformed {
            reason: format!("the block has no tool_name:{START}…{END}"),
        });
    };
    Ok(ParsedCall {
        name: name.trim().to_string(),
        arguments: Value::Object(fields),
        repaired: false,
    })
}
