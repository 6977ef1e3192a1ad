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
//!
//! Traces (`[telemetry]`, off by default): the same spans, sent over OTLP by
//! `tracing-opentelemetry`, with a span of their own per model turn and per tool call. Off, no
//! layer is added and those spans are not made ([`on`]), so that a run costs what it did.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
use tracing::field::{Field, Visit};
use tracing::{Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};

use crate::config::TelemetryConfig;

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
    init_with(sink, None)
}

/// As [`init`], with the traces' layer when they are on.
fn init_with(sink: Sink, traces: Option<&Traces>) -> Result<(), TryInitError> {
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
            let traces = traces.map(Traces::layer);
            subscriber.with(output(&sink)).with(traces).try_init()
        }
        Err(_) => {
            let filter =
                EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new(default));
            let subscriber = registry.with(filter);
            let traces = traces.map(Traces::layer);
            subscriber.with(output(&sink)).with(traces).try_init()
        }
    }
}

/// Whether traces are sent: spans only traces need (a model turn's, a tool call's) are made
/// only then.
pub fn on() -> bool {
    TRACES_ON.load(Ordering::Relaxed)
}

static TRACES_ON: AtomicBool = AtomicBool::new(false);

/// The service's logging, and its traces when `[telemetry]` names a collector. Call within
/// the runtime (exports run on it); [`Traces::shutdown`] sends what is left.
pub fn init_service(sink: Sink, config: &TelemetryConfig) -> anyhow::Result<Option<Traces>> {
    let traces = match config.otlp_endpoint.is_empty() {
        true => None,
        false => Some(Traces::new(config)?),
    };
    // A second subscriber is the caller's mistake, not a reason not to serve.
    let _ = init_with(sink, traces.as_ref());
    TRACES_ON.store(traces.is_some(), Ordering::Relaxed);
    Ok(traces)
}

/// The tracer provider sending spans over OTLP.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    fn new(config: &TelemetryConfig) -> anyhow::Result<Traces> {
        let mut headers = HashMap::new();
        for (name, value) in &config.otlp_headers {
            let value = crate::config::expand_env(value).map_err(|variable| {
                anyhow::anyhow!("telemetry.otlp_headers.{name} names {variable}, which is not set")
            })?;
            headers.insert(name.clone(), value);
        }
        let client = OnRuntime {
            client: reqwest::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
                .context("cannot build the OTLP exporter's HTTP client")?,
            runtime: tokio::runtime::Handle::current(),
        };
        let endpoint = format!("{}/v1/traces", config.otlp_endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_headers(headers)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .context("cannot build the OTLP exporter")?;
        // A client's sampled flag is followed; a trace the service starts is kept at the ratio.
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio)));
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        Ok(Traces { provider })
    }

    /// The layer turning the service's spans into OpenTelemetry spans: switchyard's own spans
    /// (an MCP server's supervisor span lives as long as the process: left out), and its
    /// warnings and errors as span events.
    fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let ours = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.target().starts_with("switchyard")
                && metadata.target() != crate::api::access::PROBE_TARGET
                && metadata.name() != "mcp_server"
                && (metadata.is_span() || *metadata.level() <= tracing::Level::WARN)
        });
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("switchyard"))
            // What these record for every enter and exit is not asked for: without them an
            // enter and exit cost about a third.
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_context_activation(false)
            .with_filter(ours)
            .boxed()
    }

    /// Sends the spans not sent yet (at most `EXPORT_TIMEOUT`), then stops.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(EXPORT_TIMEOUT));
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the last spans could not be sent"),
            Err(e) => tracing::warn!(error = %e, "the last spans could not be sent"),
        }
    }
}

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter's HTTP client: the service's reqwest on the service's runtime. The batch
/// processor exports from a thread of its own, where reqwest's futures would find no runtime.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<bytes::Bytes>,
    ) -> Result<opentelemetry_http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            // The collector's answer is not read beyond its status: at most a small body.
            let body = response.bytes().await?;
            let mut answer = opentelemetry_http::Response::new(body);
            *answer.status_mut() = status;
            Ok::<_, opentelemetry_http::HttpError>(answer)
        });
        sent.await?
    }
}

/// A run's execution's span: its response id; with traces, also an agent's invocation (GenAI
/// conventions).
pub fn run_span(response_id: &str) -> Span {
    if !on() {
        return tracing::info_span!("run", response_id = %response_id);
    }
    tracing::info_span!(
        "run",
        response_id = %response_id,
        otel.name = "invoke_agent switchyard",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "switchyard",
    )
}

/// A model turn's span (`chat {model}`, OpenTelemetry's GenAI conventions), or none while
/// traces are off.
pub fn turn_span(model: &str) -> Span {
    if !on() {
        return Span::none();
    }
    tracing::info_span!(
        "turn",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
        gen_ai.request.stream = true,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
    )
}

/// The tokens the current turn used, as its upstream reported them.
pub fn turn_usage(input: u64, output: u64) {
    if on() {
        let span = Span::current();
        span.record("gen_ai.usage.input_tokens", input);
        span.record("gen_ai.usage.output_tokens", output);
    }
}

/// Why the current turn ended, as the upstream said.
pub fn turn_finished(reason: &crate::llm::FinishReason) {
    if !on() {
        return;
    }
    use crate::llm::FinishReason;
    let reason = match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other.as_str(),
    };
    let reasons = opentelemetry::Array::String(vec![reason.to_owned().into()]);
    let reasons = opentelemetry::Value::Array(reasons);
    Span::current().set_attribute("gen_ai.response.finish_reasons", reasons);
}

/// A server tool call's span (`execute_tool {name}`); while traces are off, the current span
/// (its run's), in which the call then logs.
pub fn tool_span(name: &str, call_id: &str) -> Span {
    if !on() {
        return Span::current();
    }
    tracing::info_span!(
        "tool",
        otel.name = %format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "extension",
        error.r#type = tracing::field::Empty,
    )
}

/// How the current tool call ended (the metrics' outcome): an `error.type` and an error
/// status unless it is `ok`.
pub fn tool_outcome(outcome: &'static str) {
    if on() && outcome != "ok" {
        let span = Span::current();
        span.record("error.type", outcome);
        span.set_status(opentelemetry::trace::Status::error(outcome));
    }
}

/// The W3C trace context of the current span, as headers for a request it makes (a tool
/// server's); nothing while traces are off.
pub fn inject(headers: &mut reqwest::header::HeaderMap) {
    if !on() {
        return;
    }
    let context = Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

/// The current span's `traceparent`, for a request that carries it in its own fields (an MCP
/// call's `_meta`); `None` while traces are off.
pub fn traceparent() -> Option<String> {
    if !on() {
        return None;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    inject(&mut headers);
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Makes the client's trace (its `traceparent`, `tracestate`) the parent of `span`, before
/// the span is entered; nothing while traces are off.
pub fn continue_trace(span: &Span, headers: &axum::http::HeaderMap) {
    if !on() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(parent);
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
        // What only traces read (a span's OpenTelemetry name and kind, its HTTP attributes,
        // which repeat the method, route and status the line has): not on plain lines.
        if self.result.is_err() || is_for_traces(field.name()) {
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

/// A span field only traces read.
fn is_for_traces(name: &str) -> bool {
    name.starts_with("otel.") || name.starts_with("http.")
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
