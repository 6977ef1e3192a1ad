//! The JSON protocol: the whole reply is one JSON object, `{"response": "…"}` for an answer or
//! `{"tool_calls": [{"name": …, "arguments": {…}}]}` for calls (llama.cpp's generic format,
//! enforced upstream with `response_format`). An answer's text streams as it arrives, its
//! JSON escapes decoded (an escape cut by a chunk waits for its end); calls are read once the
//! reply is whole. A reply that is not a JSON object (the model ignored the format) is text.

use serde_json::Value;

use super::{Piece, repair};

/// What the reply turned out to be.
#[derive(Debug, PartialEq)]
enum Mode {
    /// Not decided: its start is held.
    Undecided,
    /// Inside the answer's string.
    Response,
    /// The answer's string ended: the rest is the envelope's end.
    AfterResponse,
    /// An envelope read whole at the end.
    Whole,
    /// Not JSON: text.
    Text,
}

/// The envelope's start that makes a streamed answer.
const RESPONSE_START: [&str; 3] = ["{", "\"response\"", ":"];

#[derive(Debug)]
pub(super) struct JsonReplyParser {
    mode: Mode,
    pending: String,
}

impl JsonReplyParser {
    pub(super) fn new() -> JsonReplyParser {
        JsonReplyParser {
            mode: Mode::Undecided,
            pending: String::new(),
        }
    }

    pub(super) fn feed(&mut self, chunk: &str, out: &mut Vec<Piece>) {
        self.pending.push_str(chunk);
        if self.mode == Mode::Undecided {
            self.decide();
        }
        match self.mode {
            Mode::Response => self.answer(out),
            Mode::Text => {
                let text = std::mem::take(&mut self.pending);
                push_text(out, text);
            }
            Mode::Undecided | Mode::AfterResponse | Mode::Whole => {}
        }
    }

    pub(super) fn finish(&mut self, out: &mut Vec<Piece>) {
        let pending = std::mem::take(&mut self.pending);
        match self.mode {
            Mode::Undecided | Mode::Whole => envelope(&pending, out),
            Mode::Text => push_text(out, pending),
            // An answer cut off inside its string: what was decoded stands.
            Mode::Response | Mode::AfterResponse => {}
        }
    }

    /// Reads the start of the reply: `{"response": "` streams; another object is read whole;
    /// anything else is text.
    fn decide(&mut self) {
        let mut rest = self.pending.trim_start();
        if rest.is_empty() {
            return;
        }
        if !rest.starts_with('{') {
            self.mode = Mode::Text;
            return;
        }
        for token in RESPONSE_START {
            rest = rest.trim_start();
            if rest.len() < token.len() {
                if !token.starts_with(rest) {
                    self.mode = Mode::Whole;
                }
                return;
            }
            let Some(after) = rest.strip_prefix(token) else {
                self.mode = Mode::Whole;
                return;
            };
            rest = after;
        }
        let rest = rest.trim_start();
        match rest.chars().next() {
            None => {}
            Some('"') => {
                self.pending = rest[1..].to_string();
                self.mode = Mode::Response;
            }
            Some(_) => self.mode = Mode::Whole,
        }
    }

    /// Passes on the answer's text decoded so far, up to its closing quote.
    fn answer(&mut self, out: &mut Vec<Piece>) {
        let (end, closed) = string_end(&self.pending);
        if end == 0 && !closed {
            return;
        }
        let encoded: String = self.pending.drain(..end).collect();
        if let Ok(Value::String(text)) = serde_json::from_str(&format!("\"{encoded}\"")) {
            push_text(out, text);
        }
        if closed {
            self.pending.clear();
            self.mode = Mode::AfterResponse;
        }
    }
}

/// How much of `encoded` (the inside of a JSON string, from its start) is complete: up to the
/// closing quote (then `true`), or up to an escape the chunk cut.
fn string_end(encoded: &str) -> (usize, bool) {
    let bytes = encoded.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return (i, true),
            b'\\' => {
                let needed = match bytes.get(i + 1) {
                    None => return (i, false),
                    Some(b'u') => {
                        // A high surrogate needs its low half in the same decode.
                        let high = encoded
                            .get(i + 2..i + 6)
                            .and_then(|h| u16::from_str_radix(h, 16).ok())
                            .is_some_and(|h| (0xD800..0xDC00).contains(&h));
                        if high { 12 } else { 6 }
                    }
                    Some(_) => 2,
                };
                if i + needed > bytes.len() {
                    return (i, false);
                }
                i += needed;
            }
            _ => i += 1,
        }
    }
    (bytes.len(), false)
}

/// A whole envelope: its answer and calls, or the text as it was when it is not one.
fn envelope(text: &str, out: &mut Vec<Piece>) {
    let parsed = serde_json::from_str::<Value>(text.trim())
        .ok()
        .map(|v| (v, false))
        .or_else(|| repair::json(text).map(|v| (v, true)));
    let known = |envelope: &serde_json::Map<String, Value>| {
        ["response", "tool_calls", "tool_call"]
            .iter()
            .any(|key| envelope.contains_key(*key))
    };
    let Some((Value::Object(mut envelope), repaired)) =
        parsed.filter(|(v, _)| v.as_object().is_some_and(known))
    else {
        if !text.trim().is_empty() {
            out.push(Piece::Malformed {
                raw: text.to_string(),
                reason: "the reply is not a JSON object with \"response\" or \"tool_calls\"".into(),
            });
        }
        return;
    };
    if let Some(Value::String(answer)) = envelope.remove("response") {
        push_text(out, answer);
    }
    let calls = match envelope.remove("tool_calls") {
        Some(Value::Array(calls)) => calls,
        // llama.cpp's generic format also writes a single `tool_call`.
        _ => envelope.remove("tool_call").into_iter().collect(),
    };
    for call in calls {
        match super::hermes::parse(&call.to_string()) {
            Ok(mut parsed) => {
                parsed.repaired |= repaired;
                out.push(Piece::Call(parsed));
            }
            Err(malformed) => out.push(Piece::Malformed {
                raw: call.to_string(),
                reason: malformed.reason,
            }),
        }
    }
}

fn push_text(out: &mut Vec<Piece>, text: String) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Text(last)) => last.push_str(&text),
        _ => out.push(Piece::Text(text)),
    }
}
