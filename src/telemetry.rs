//! Logging, the same for the service and its tests: `RUST_LOG` filters, and
//! `SWITCHYARD_LOG_FORMAT=json` writes JSON lines. Log lines carry the fields of the spans
//! they are in — a request's method and path, a run's response id — instead of repeating
//! them on each line.
//!
//! A span is entered each time its future is polled (a run's task is polled once per event it
//! streams), so what entering costs is paid many times per run. `RUST_LOG` is read as plain
//! targets and levels where it can be (`info,sqlx=warn`): that filter keeps nothing per span.
//! `EnvFilter`, needed only for directives on spans and fields, takes a lock on every enter
//! and exit (measured with it: a text run alone on SQLite 2.5 % slower with the spans than
//! without them).

use std::fmt;

use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};

/// Where log lines go.
pub enum Sink {
    /// Standard output, `info` by default (the service).
    Stdout,
    /// Standard error, `info` by default (commands whose answer is on standard output).
    Stderr,
    /// The test harness's captured output, silent unless `RUST_LOG` says otherwise.
    Tests,
}

/// Installs the global subscriber; an error when one is installed already (a second test
/// in the same process).
pub fn init(sink: Sink) -> Result<(), TryInitError> {
    let default = match sink {
        Sink::Stdout | Sink::Stderr => "info,sqlx=warn,rmcp=off",
        Sink::Tests => "off",
    };
    let directives = std::env::var("RUST_LOG")
        .ok()
        .filter(|value| !value.trim().is_empty())
        .unwrap_or_else(|| default.to_string());
    let registry = tracing_subscriber::registry();
    match directives.parse::<Targets>() {
        Ok(targets) => {
            let subscriber = registry.with(targets);
            subscriber.with(output(&sink)).try_init()
        }
        Err(_) => {
            let filter =
                EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new(default));
            let subscriber = registry.with(filter);
            subscriber.with(output(&sink)).try_init()
        }
    }
}

/// The layer that writes lines: plain or JSON, to the sink.
fn output<S>(sink: &Sink) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let (writer, ansi) = match sink {
        // Colours only for a terminal: logs in files and containers stay plain text.
        Sink::Stdout => (
            BoxMakeWriter::new(std::io::stdout),
            std::io::IsTerminal::is_terminal(&std::io::stdout()),
        ),
        Sink::Stderr => (
            BoxMakeWriter::new(std::io::stderr),
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ),
        Sink::Tests => (
            BoxMakeWriter::new(tracing_subscriber::fmt::TestWriter::default()),
            false,
        ),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    match std::env::var("SWITCHYARD_LOG_FORMAT").is_ok_and(|v| v == "json") {
        // JSON escapes every control character itself.
        true => layer.json().boxed(),
        false => layer.fmt_fields(EscapedFields).boxed(),
    }
}

/// The plain format's fields, with control characters escaped: a value that came from outside
/// (a tool's error body, an argument name the model chose) cannot start a forged log line
/// with a newline, nor send escape sequences to a terminal.
struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{}", escape(value)),
            name => write!(self.writer, "{separator}{name}={}", escape(value)),
        };
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Quoted as the default format does (its escapes leave no control character raw).
        match field.name() {
            "message" => self.write(field, value),
            _ => self.write(field, &format!("{value:?}")),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// `text` with its control characters written as escapes (`\n`, `\u{1b}`, …).
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if c.is_control() => escaped.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn control_characters_are_escaped_and_other_text_is_kept() {
        assert_eq!(escape("plain é ✓"), "plain é ✓");
        assert_eq!(
            escape("a\nINFO forged\r\u{1b}[31mred\u{7}"),
            "a\\nINFO forged\\r\\u{1b}[31mred\\u{7}"
        );
    }
}
