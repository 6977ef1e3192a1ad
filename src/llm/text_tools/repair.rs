//! One repair attempt for a call's JSON with the mistakes models commonly make: a code fence
//! around it, single-quoted strings, Python's `True`/`False`/`None`, trailing commas, and a
//! cut-off end (an unterminated string, missing closing brackets).

use serde_json::Value;

/// The JSON `text` meant, if one repair makes it parse.
pub(super) fn json(text: &str) -> Option<Value> {
    let text = unfenced(text.trim());
    let mut out = String::with_capacity(text.len() + 8);
    // The closers of the brackets open at this point, innermost last.
    let mut open: Vec<char> = Vec::new();
    // Inside a string: the quote that opened it.
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            match c {
                '\\' => match chars.next() {
                    // `\'` is not a JSON escape.
                    Some('\'') => out.push('\''),
                    Some(next) => {
                        out.push('\\');
                        out.push(next);
                    }
                    None => {}
                },
                c if c == q => {
                    out.push('"');
                    quote = None;
                }
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
            continue;
        }
        match c {
            '"' | '\'' => {
                quote = Some(c);
                out.push('"');
            }
            '{' => {
                open.push('}');
                out.push(c);
            }
            '[' => {
                open.push(']');
                out.push(c);
            }
            '}' | ']' => {
                trim_trailing_comma(&mut out);
                open.pop();
                out.push(c);
            }
            c if c.is_ascii_alphabetic() => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek().filter(|n| n.is_ascii_alphanumeric()) {
                    word.push(next);
                    chars.next();
                }
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    other => other,
                });
            }
            c => out.push(c),
        }
    }
    if quote.is_some() {
        out.push('"');
    }
    trim_trailing_comma(&mut out);
    while let Some(closer) = open.pop() {
        out.push(closer);
    }
    serde_json::from_str(&out).ok()
}

/// The text inside a Markdown code fence, if it is wrapped in one.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or(rest, |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

fn trim_trailing_comma(out: &mut String) {
    let kept = out.trim_end().len();
    if out[..kept].ends_with(',') {
        out.truncate(kept - 1);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_common_mistakes_are_repaired() {
        let cases = [
            (
                r#"{'name': 'f', 'arguments': {'a': 1}}"#,
                json!({"name": "f", "arguments": {"a": 1}}),
            ),
            (
                r#"{"name": "f", "arguments": {"ok": True, "x": None,},}"#,
                json!({"name": "f", "arguments": {"ok": true, "x": null}}),
            ),
            ("```json\n{\"name\": \"f\"}\n```", json!({"name": "f"})),
            (
                r#"{"name": "f", "arguments": {"city": "Par"#,
                json!({"name": "f", "arguments": {"city": "Par"}}),
            ),
            (
                r#"{'name': 'f', 'arguments': {'q': 'it\'s "x"'}}"#,
                json!({"name": "f", "arguments": {"q": "it's \"x\""}}),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(json(text), Some(expected), "{text}");
        }
        assert_eq!(json("not json at all"), None);
    }
}
