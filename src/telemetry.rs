//! Logging, the same for the service and its tests: `RUST_LOG` filters, and
//! `SWITCHYARD_LOG_FORMAT=json` writes JSON lines. Log lines carry the fields of the spans
//! they are in — a request's method and path, a run's response id — instead of repeating
//! them on each line.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Where log lines go.
pub enum Sink {
    /// Standard output, `info` by default (the service).
    Stdout,
    /// The test harness's captured output, silent unless `RUST_LOG` says otherwise.
    Tests,
}

/// Installs the global subscriber; an error when one is installed already (a second test
/// in the same process).
pub fn init(sink: Sink) -> Result<(), tracing_subscriber::util::TryInitError> {
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match sink {
        Sink::Stdout => "info,sqlx=warn",
        Sink::Tests => "off",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let json = std::env::var("SWITCHYARD_LOG_FORMAT").is_ok_and(|v| v == "json");
    let (writer, ansi) = match sink {
        // Colours only for a terminal: logs in files and containers stay plain text.
        Sink::Stdout => (
            BoxMakeWriter::new(std::io::stdout),
            std::io::IsTerminal::is_terminal(&std::io::stdout()),
        ),
        Sink::Tests => (
            BoxMakeWriter::new(tracing_subscriber::fmt::TestWriter::default()),
            false,
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    if json {
        builder.json().finish().try_init()
    } else {
        builder.finish().try_init()
    }
}
