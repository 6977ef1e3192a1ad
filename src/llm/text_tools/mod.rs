//! Tool calls for models without native function calling (SPEC §15): the model writes its
//! calls as marked blocks in its text, and one incremental parser per protocol turns the
//! streamed text back into text and calls. A non-streamed reply is the same parser fed
//! everything at once.
//!
//! While text streams it is passed on as it arrives, except a trailing fragment that could be
//! the start of a call marker, which is held back only until it is decided: no fragment of a
//! marker ever reaches the client as text, wherever the chunks split it. A marker inside a
//! fenced code block (a line starting with three backticks opens and closes one) is an example
//! in prose, and stays text. Whitespace right before or after a call is the call's layout and
//! is dropped. Reasoning never reaches the parser: `<think>` blocks and reasoning fields are
//! split off before it.

mod fence;
mod hermes;
mod json;
pub mod render;
mod repair;
mod vcp;

use serde_json::Value;

use fence::Fence;

/// The text syntax a model writes its calls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextProtocol {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>`: the form Qwen and Hermes models
    /// are trained on.
    Hermes,
    /// `<<<[TOOL_REQUEST]>>>` … `tool_name:「始」…「末」` … `<<<[END_TOOL_REQUEST]>>>`: the
    /// reference design's blocks, one `key:「始」value「末」` per argument.
    Vcp,
    /// The whole reply a JSON envelope: `{"response": "…"}` or `{"tool_calls": […]}`.
    Json,
}

impl TextProtocol {
    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            TextProtocol::Hermes => "hermes",
            TextProtocol::Vcp => "vcp",
            TextProtocol::Json => "json",
        }
    }

    /// The markers of a marked protocol's blocks (JSON has none).
    fn open(self) -> &'static str {
        match self {
            TextProtocol::Hermes => hermes::OPEN,
            TextProtocol::Vcp => vcp::OPEN,
            TextProtocol::Json => "",
        }
    }

    fn close(self) -> &'static str {
        match self {
            TextProtocol::Hermes => hermes::CLOSE,
            TextProtocol::Vcp => vcp::CLOSE,
            TextProtocol::Json => "",
        }
    }

    /// The call a block's inside (between its markers) holds.
    fn parse(self, inside: &str) -> Result<ParsedCall, Malformed> {
        match self {
            TextProtocol::Hermes | TextProtocol::Json => hermes::parse(inside),
            TextProtocol::Vcp => vcp::parse(inside),
        }
    }
}

/// A call read from the text.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
    /// The block needed a repair to parse (counted and logged by the caller).
    pub repaired: bool,
}

/// A block that could not be read as a call.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    /// What is wrong, for the model and the log.
    pub reason: String,
}

/// What the parser found in the text.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Text(String),
    Call(ParsedCall),
    /// A block (markers included, `raw`) that is not a call.
    Malformed {
        raw: String,
        reason: String,
    },
}

/// Where the parser is.
#[derive(Debug)]
enum State {
    /// In text: `pending` is a tail held back (whitespace that may precede a call, or what
    /// may be the start of a marker).
    Text,
    /// Inside a block: `pending` is what came after its opening marker.
    Block,
}

/// The incremental parser of one reply.
#[derive(Debug)]
pub struct TextCallParser {
    protocol: TextProtocol,
    state: State,
    pending: String,
    fence: Fence,
    /// A call was found: whitespace after it is layout.
    after_call: bool,
}

impl TextCallParser {
    pub fn new(protocol: TextProtocol) -> TextCallParser {
        TextCallParser {
            protocol,
            state: State::Text,
            pending: String::new(),
            fence: Fence::default(),
            after_call: false,
        }
    }

    /// Reads the next piece of the reply.
    pub fn feed(&mut self, chunk: &str, out: &mut Vec<Piece>) {
        self.pending.push_str(chunk);
        loop {
            let progressed = match self.state {
                State::Text => self.text(out),
                State::Block => self.block(out),
            };
            if !progressed {
                return;
            }
        }
    }

    /// The reply ended: what was held back is decided. An unterminated block is repaired when
    /// its inside is a whole call (models often leave the closing marker out at the end), and
    /// is otherwise malformed.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        let pending = std::mem::take(&mut self.pending);
        match self.state {
            State::Text => {
                if !(self.after_call && pending.trim().is_empty()) {
                    self.emit_text(pending, out);
                }
            }
            State::Block => match self.protocol.parse(&pending) {
                Ok(mut call) => {
                    call.repaired = true;
                    out.push(Piece::Call(call));
                }
                Err(malformed) => out.push(Piece::Malformed {
                    raw: format!("{}{pending}", self.protocol.open()),
                    reason: format!(
                        "the block is not closed with {}; {}",
                        self.protocol.close(),
                        malformed.reason
                    ),
                }),
            },
        }
        self.state = State::Text;
    }

    /// In text: passes on what is decided; true when a block opened.
    fn text(&mut self, out: &mut Vec<Piece>) -> bool {
        if self.after_call {
            // The layout after a call is dropped; only whitespace so far waits.
            let rest = self.pending.trim_start().len();
            if rest == 0 {
                return false;
            }
            let layout: String = self.pending.drain(..self.pending.len() - rest).collect();
            self.fence.advance(&layout);
            self.after_call = false;
        }
        let open = self.protocol.open();
        let mut from = 0;
        while let Some(found) = self.pending[from..].find(open).map(|i| from + i) {
            if self.fence.inside_after(&self.pending[..found]) {
                // An example in a fenced block: text.
                from = found + open.len();
                continue;
            }
            let before: String = self.pending.drain(..found + open.len()).collect();
            let text = &before[..found];
            // The layout before the call is dropped.
            let kept = text.trim_end();
            self.emit_text(kept.to_string(), out);
            self.fence.advance(&text[kept.len()..]);
            self.state = State::Block;
            return true;
        }
        // Nothing opens here yet: pass on all but what may start a marker or be layout.
        let decided = self.pending.len() - held_back(&self.pending, open);
        if decided > 0 {
            let text: String = self.pending.drain(..decided).collect();
            self.emit_text(text, out);
        }
        false
    }

    /// In a block: true when it closed.
    fn block(&mut self, out: &mut Vec<Piece>) -> bool {
        let close = self.protocol.close();
        let Some(found) = self.pending.find(close) else {
            return false;
        };
        let block: String = self.pending.drain(..found + close.len()).collect();
        let inside = &block[..found];
        match self.protocol.parse(inside) {
            Ok(call) => out.push(Piece::Call(call)),
            Err(malformed) => out.push(Piece::Malformed {
                raw: format!("{}{block}", self.protocol.open()),
                reason: malformed.reason,
            }),
        }
        self.after_call = true;
        // A call stands on lines of its own.
        self.fence.advance("\n");
        self.state = State::Text;
        true
    }

    fn emit_text(&mut self, text: String, out: &mut Vec<Piece>) {
        if text.is_empty() {
            return;
        }
        self.fence.advance(&text);
        match out.last_mut() {
            Some(Piece::Text(last)) => last.push_str(&text),
            _ => out.push(Piece::Text(text)),
        }
    }
}

/// How many bytes at the end of `pending` stay held back: a tail that is a prefix of the
/// opening marker (it may become one), and the whitespace before it (layout, if a call
/// follows).
fn held_back(pending: &str, open: &str) -> usize {
    let marker = (1..open.len().min(pending.len() + 1))
        .rev()
        .find(|&n| pending.is_char_boundary(pending.len() - n) && pending.ends_with(&open[..n]))
        .unwrap_or(0);
    let before = &pending[..pending.len() - marker];
    marker + before.len() - before.trim_end().len()
}

#[cfg(test)]
mod tests;

/// A reply's content read for calls in a text protocol, as model events: text deltas, and a
/// whole `ToolCallDelta` per call (its arguments given the types the tool's schema asks for,
/// since some protocols write every value as text).
pub struct TextCalls {
    protocol: TextProtocol,
    parser: AnyParser,
    /// Each tool's parameters schema, by name.
    schemas: std::collections::HashMap<String, Value>,
    /// Calls read so far: the next one's index.
    calls: u32,
}

impl TextCalls {
    pub fn new(protocol: TextProtocol, tools: &[crate::llm::ToolSpec]) -> TextCalls {
        TextCalls {
            protocol,
            parser: match protocol {
                TextProtocol::Json => AnyParser::Json(json::JsonReplyParser::new()),
                marked => AnyParser::Marked(TextCallParser::new(marked)),
            },
            schemas: tools
                .iter()
                .map(|t| (t.name.clone(), t.parameters.clone()))
                .collect(),
            calls: 0,
        }
    }

    /// Whether the reply held a call.
    pub fn called(&self) -> bool {
        self.calls > 0
    }

    pub fn feed(&mut self, text: &str, out: &mut crate::llm::openai::Events) {
        let mut pieces = Vec::new();
        match &mut self.parser {
            AnyParser::Marked(parser) => parser.feed(text, &mut pieces),
            AnyParser::Json(parser) => parser.feed(text, &mut pieces),
        }
        self.events(pieces, out);
    }

    pub fn finish(&mut self, out: &mut crate::llm::openai::Events) {
        let mut pieces = Vec::new();
        match &mut self.parser {
            AnyParser::Marked(parser) => parser.finish(&mut pieces),
            AnyParser::Json(parser) => parser.finish(&mut pieces),
        }
        self.events(pieces, out);
    }

    fn events(&mut self, pieces: Vec<Piece>, out: &mut crate::llm::openai::Events) {
        use crate::llm::ModelEvent;
        for piece in pieces {
            let event = match piece {
                Piece::Text(text) => ModelEvent::TextDelta(text),
                Piece::Call(call) => {
                    let outcome = match call.repaired {
                        true => "repaired",
                        false => "read",
                    };
                    if call.repaired {
                        tracing::info!(tool = %call.name, "a text-protocol call was repaired to parse");
                    }
                    crate::metrics::text_tool_call(self.protocol.name(), outcome);
                    let arguments = match self.schemas.get(&call.name) {
                        Some(schema) => coerce(call.arguments, schema),
                        None => call.arguments,
                    };
                    self.calls += 1;
                    ModelEvent::ToolCallDelta {
                        index: self.calls - 1,
                        id: Some(crate::protocol::ids::new(crate::protocol::ids::CALL)),
                        name: Some(call.name),
                        arguments: arguments.to_string(),
                        signature: None,
                    }
                }
                // The run decides: the model is asked again, or the text stays as it was.
                Piece::Malformed { raw, reason } => ModelEvent::MalformedCall {
                    protocol: self.protocol.name(),
                    raw,
                    reason,
                },
            };
            out.push_back(Ok(event));
        }
    }
}

/// The parser of a protocol: marked blocks in text, or a JSON envelope.
enum AnyParser {
    Marked(TextCallParser),
    Json(json::JsonReplyParser),
}

/// `value` with the text of each property the schema types as a number, integer, boolean,
/// object or array read as that type, where it reads so.
fn coerce(value: Value, schema: &Value) -> Value {
    let Value::Object(fields) = value else {
        return value;
    };
    let properties = schema.get("properties");
    let fields = fields
        .into_iter()
        .map(|(key, field)| {
            let kind = properties
                .and_then(|p| p.get(&key))
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str);
            let field = match (&field, kind) {
                (
                    Value::String(text),
                    Some("number" | "integer" | "boolean" | "object" | "array"),
                ) => serde_json::from_str::<Value>(text.trim()).unwrap_or(field),
                _ => field,
            };
            (key, field)
        })
        .collect();
    Value::Object(fields)
}
