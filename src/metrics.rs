//! Metrics in Prometheus text format (`GET /metrics`), through the `metrics` facade: code
//! records what happened with the functions below, which name every metric in one place; the
//! exporter keeps the values and renders them.
//!
//! Labels take only values from a bounded set (routes, configured models, servers and tools,
//! fixed outcome names), never anything a client chooses freely. Recording costs a label-set
//! lookup and an atomic add; histograms keep their samples until the next scrape or upkeep
//! (every few seconds), which folds them into buckets.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

const HTTP_REQUESTS: &str = "switchyard_http_requests_total";
const HTTP_DURATION: &str = "switchyard_http_request_duration_seconds";
const RUNS_STARTED: &str = "switchyard_runs_started_total";
const RUNS_FINISHED: &str = "switchyard_runs_finished_total";
const RUN_DURATION: &str = "switchyard_run_duration_seconds";
const FIRST_TOKEN: &str = "switchyard_time_to_first_token_seconds";
const UPSTREAM_TURN: &str = "switchyard_upstream_turn_duration_seconds";
const UPSTREAM_ERRORS: &str = "switchyard_upstream_errors_total";
const TOOL_CALLS: &str = "switchyard_tool_calls_total";
const TOOL_DURATION: &str = "switchyard_tool_call_duration_seconds";
const OPEN_STREAMS: &str = "switchyard_open_streams";
const RUNS_EXECUTING: &str = "switchyard_runs_executing";
const STORED_RUNS: &str = "switchyard_stored_runs";
const WRITER_BATCH: &str = "switchyard_event_writer_batch_size";
const WRITER_COMMIT: &str = "switchyard_event_writer_commit_seconds";
const TOKENS: &str = "switchyard_tokens_total";
const MCP_SERVER_UP: &str = "switchyard_mcp_server_up";
const MCP_SERVER_TOOLS: &str = "switchyard_mcp_server_tools";
const UPSTREAM_PROBE: &str = "switchyard_upstream_probe";
const TEXT_TOOL_CALLS: &str = "switchyard_text_tool_calls_total";
const UNMAPPED_HOSTED: &str = "switchyard_unmapped_hosted_tools_total";

/// Seconds, from a millisecond to a minute: requests and tool calls.
const SHORT: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Seconds, from 10 ms to 10 minutes: runs and model turns.
const LONG: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Seconds, from 0.1 ms to a second: database commits.
const COMMIT: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Events, new runs and endings per commit.
const BATCH: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// How a run's execution can end, as `switchyard_runs_finished_total` names it.
const ENDINGS: [&str; 9] = [
    "completed",
    "paused",
    "cancelled",
    "expired",
    "incomplete",
    "failed",
    "abandoned",
    "lost",
    "handed_over",
];

/// Handles of the metrics whose labels are known in advance, registered once: recording
/// through one is an atomic operation, where `counter!` and the like look the metric up by its
/// name and labels each time (the event writer records after every commit, several per run).
struct Fixed {
    started: [Counter; 2],
    finished: [(Counter, Histogram); ENDINGS.len()],
    writer_batch: Histogram,
    writer_commit: Histogram,
    runs_executing: Gauge,
    sse_streams: Gauge,
    websocket_streams: Gauge,
}

impl Fixed {
    fn register() -> Fixed {
        Fixed {
            started: [
                counter!(RUNS_STARTED, "resumed" => "false"),
                counter!(RUNS_STARTED, "resumed" => "true"),
            ],
            finished: ENDINGS.map(|ending| {
                (
                    counter!(RUNS_FINISHED, "ending" => ending),
                    histogram!(RUN_DURATION, "ending" => ending),
                )
            }),
            writer_batch: histogram!(WRITER_BATCH),
            writer_commit: histogram!(WRITER_COMMIT),
            runs_executing: gauge!(RUNS_EXECUTING),
            sse_streams: gauge!(OPEN_STREAMS, "transport" => "sse"),
            websocket_streams: gauge!(OPEN_STREAMS, "transport" => "websocket"),
        }
    }
}

/// The fixed handles, registered with the exporter once it is installed (until then, with
/// whatever recorder there is: none records nothing).
static FIXED: OnceLock<Fixed> = OnceLock::new();

fn fixed() -> &'static Fixed {
    FIXED.get_or_init(Fixed::register)
}

/// The process's exporter: installed once (every application of a process, as in tests,
/// shares it).
static EXPORTER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the exporter as the process's metrics recorder; `None` if another recorder was
/// installed first (metrics are then that recorder's).
pub fn install() -> Option<PrometheusHandle> {
    EXPORTER
        .get_or_init(|| {
            let mut builder = PrometheusBuilder::new();
            for (names, buckets) in [
                (&[HTTP_DURATION, TOOL_DURATION][..], SHORT),
                (&[RUN_DURATION, FIRST_TOKEN, UPSTREAM_TURN][..], LONG),
                (&[WRITER_COMMIT][..], COMMIT),
                (&[WRITER_BATCH][..], BATCH),
            ] {
                for name in names {
                    builder = builder
                        .set_buckets_for_metric(Matcher::Full((*name).to_string()), buckets)
                        .ok()?;
                }
            }
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            fixed();
            Some(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method, route and status"
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Time to a request's response headers (a stream's own length is in run duration)"
    );
    describe_counter!(
        RUNS_STARTED,
        "Run executions started here: new runs, and resumed ones (after a pause, a claim of a queued run or a takeover)"
    );
    describe_counter!(
        RUNS_FINISHED,
        "Run executions ended here, by how: completed, paused, cancelled, expired, incomplete, failed, abandoned, lost, handed_over"
    );
    describe_histogram!(
        RUN_DURATION,
        Unit::Seconds,
        "Length of a run's execution here, by how it ended"
    );
    describe_histogram!(
        FIRST_TOKEN,
        Unit::Seconds,
        "From a run's execution starting to the first text or tool call the model streamed, by model"
    );
    describe_histogram!(
        UPSTREAM_TURN,
        Unit::Seconds,
        "One model turn upstream, from the request to its stream's end, by provider and model"
    );
    describe_counter!(
        UPSTREAM_ERRORS,
        "Upstream failures, retried ones included, by provider and kind"
    );
    describe_counter!(
        TOOL_CALLS,
        "Server tool calls executed, by tool server, tool and outcome"
    );
    describe_histogram!(
        TOOL_DURATION,
        Unit::Seconds,
        "Server tool call duration, by tool server and tool"
    );
    describe_gauge!(
        OPEN_STREAMS,
        "Event streams open to clients, by transport (sse, websocket)"
    );
    describe_gauge!(RUNS_EXECUTING, "Runs executing on this instance");
    describe_gauge!(
        STORED_RUNS,
        "Runs in the database by state (queued, in_progress, requires_action): the same on every instance"
    );
    describe_histogram!(
        WRITER_BATCH,
        "Events, new runs and endings per event-writer commit"
    );
    describe_histogram!(WRITER_COMMIT, Unit::Seconds, "Event-writer commit latency");
    describe_counter!(TOKENS, "Tokens used, by model and kind (input, output)");
    describe_counter!(
        UNMAPPED_HOSTED,
        "Hosted tools of requests left out because no tool server runs their type (tools.hosted), by type"
    );
    describe_counter!(
        TEXT_TOOL_CALLS,
        "Calls read from a model's text (a text tool_protocol), by protocol and outcome: read, repaired, turned_back (unreadable, the model asked again), left_as_text (unreadable again)"
    );
    describe_gauge!(
        MCP_SERVER_UP,
        "Whether this instance is connected to a configured MCP server (1) or not (0), by server"
    );
    describe_gauge!(
        MCP_SERVER_TOOLS,
        "Tools of a configured MCP server offered now, by server (0 while it is not connected)"
    );
    describe_gauge!(
        UPSTREAM_PROBE,
        "What the probe of each provider at start (GET /models) found, by provider and result: 1 for its result (ok, model_missing, not_found, refused, unauthorized, unreachable, timeout, error), 0 for the others"
    );
}

/// Folds histogram samples into their buckets: called every few seconds, so that memory
/// stays flat when nobody scrapes.
pub fn upkeep() {
    if let Some(Some(handle)) = EXPORTER.get() {
        handle.run_upkeep();
    }
}

/// An answered request. `route` is the matched route (`/v1/responses/{id}`), or `unmatched`.
pub fn http_request(method: &str, route: &str, status: u16, took: Duration) {
    let method = static_method(method);
    counter!(HTTP_REQUESTS, "method" => method, "route" => route.to_string(), "status" => status.to_string())
        .increment(1);
    histogram!(HTTP_DURATION, "method" => method, "route" => route.to_string())
        .record(took.as_secs_f64());
}

/// Whether this instance is connected to the MCP server `server`.
pub fn mcp_server_connected(server: &str, connected: bool) {
    gauge!(MCP_SERVER_UP, "server" => server.to_string()).set(f64::from(u8::from(connected)));
    if !connected {
        mcp_server_tools(server, 0);
    }
}

/// What the probe of `provider` at start found: 1 for `result`, 0 for the other `results`
/// (so that an alert can watch `result!="ok"`).
pub fn upstream_probe(provider: &str, result: &'static str, results: &[&'static str]) {
    for other in results {
        let found = f64::from(u8::from(*other == result));
        gauge!(UPSTREAM_PROBE, "provider" => provider.to_string(), "result" => *other).set(found);
    }
}

/// How many of the MCP server `server`'s tools are offered now.
pub fn mcp_server_tools(server: &str, tools: usize) {
    gauge!(MCP_SERVER_TOOLS, "server" => server.to_string()).set(tools as f64);
}

/// A run's execution started here.
pub fn run_started(resumed: bool) {
    fixed().started[usize::from(resumed)].increment(1);
}

/// A run's execution ended here (`ending`: one of [`ENDINGS`]).
pub fn run_finished(ending: &'static str, took: Duration) {
    match ENDINGS.iter().position(|e| *e == ending) {
        Some(i) => {
            let (count, duration) = &fixed().finished[i];
            count.increment(1);
            duration.record(took.as_secs_f64());
        }
        None => {
            counter!(RUNS_FINISHED, "ending" => ending).increment(1);
            histogram!(RUN_DURATION, "ending" => ending).record(took.as_secs_f64());
        }
    }
}

/// The label of a model no configuration lists (one that a `"*"` provider serves): models
/// clients name freely would make a series each.
const OTHER_MODEL: &str = "other";

/// Handles of one listed model's metrics, registered when the service starts.
struct ModelHandles {
    first_token: Histogram,
    input_tokens: Counter,
    output_tokens: Counter,
    /// Its turns, on the provider that serves it.
    turn: Histogram,
}

/// The listed models' handles (every application of the process adds its own).
static MODELS: std::sync::RwLock<Option<std::collections::HashMap<String, ModelHandles>>> =
    std::sync::RwLock::new(None);

/// Registers the metrics of each listed `(model, provider)`: recording them is then an atomic
/// operation, and other models are counted together as `other`.
pub fn register_models(routes: &[(String, String)]) {
    let mut models = MODELS.write().unwrap_or_else(|e| e.into_inner());
    let models = models.get_or_insert_default();
    for (model, provider) in routes {
        models.entry(model.clone()).or_insert_with(|| ModelHandles {
            first_token: histogram!(FIRST_TOKEN, "model" => model.clone()),
            input_tokens: counter!(TOKENS, "model" => model.clone(), "kind" => "input"),
            output_tokens: counter!(TOKENS, "model" => model.clone(), "kind" => "output"),
            turn: histogram!(UPSTREAM_TURN, "provider" => provider.clone(), "model" => model.clone()),
        });
    }
}

/// Records through the model's handles, or `other` does it for a model no one listed.
fn with_model(model: &str, listed: impl FnOnce(&ModelHandles), other: impl FnOnce()) {
    let models = MODELS.read().unwrap_or_else(|e| e.into_inner());
    match models.as_ref().and_then(|m| m.get(model)) {
        Some(handles) => listed(handles),
        None => other(),
    }
}

pub fn first_token(model: &str, after: Duration) {
    let after = after.as_secs_f64();
    with_model(
        model,
        |h| h.first_token.record(after),
        || histogram!(FIRST_TOKEN, "model" => OTHER_MODEL).record(after),
    );
}

pub fn upstream_turn(provider: &str, model: &str, took: Duration) {
    let took = took.as_secs_f64();
    with_model(
        model,
        |h| h.turn.record(took),
        || {
            histogram!(UPSTREAM_TURN, "provider" => provider.to_string(), "model" => OTHER_MODEL)
                .record(took)
        },
    );
}

/// `kind`: the error's code (`upstream_timeout`, `upstream_rate_limited`, …).
pub fn upstream_error(provider: &str, kind: &'static str) {
    counter!(UPSTREAM_ERRORS, "provider" => provider.to_string(), "kind" => kind).increment(1);
}

/// A request's hosted tool left out: no tool server runs its `kind`, counted under its type
/// without a date (a closed set).
pub fn unmapped_hosted_tool(kind: &str) {
    let kind = crate::protocol::tools::hosted_type(kind).unwrap_or("other");
    counter!(UNMAPPED_HOSTED, "type" => kind).increment(1);
}

/// A call written in a model's text (SPEC §15); `outcome`: `read`, `repaired`, `turned_back`
/// or `left_as_text`.
pub fn text_tool_call(protocol: &'static str, outcome: &'static str) {
    counter!(TEXT_TOOL_CALLS, "protocol" => protocol, "outcome" => outcome).increment(1);
}

/// An executed server tool call; `outcome`: `ok` or what failed it.
pub fn tool_call(server: &str, tool: &str, outcome: &'static str, took: Duration) {
    counter!(TOOL_CALLS, "server" => server.to_string(), "tool" => tool.to_string(), "outcome" => outcome)
        .increment(1);
    histogram!(TOOL_DURATION, "server" => server.to_string(), "tool" => tool.to_string())
        .record(took.as_secs_f64());
}

pub fn tokens(model: &str, input: u64, output: u64) {
    with_model(
        model,
        |h| {
            h.input_tokens.increment(input);
            h.output_tokens.increment(output);
        },
        || {
            counter!(TOKENS, "model" => OTHER_MODEL, "kind" => "input").increment(input);
            counter!(TOKENS, "model" => OTHER_MODEL, "kind" => "output").increment(output);
        },
    );
}

/// A commit of the event writer: `rows` written in `took`.
pub fn writer_commit(rows: usize, took: Duration) {
    let fixed = fixed();
    fixed.writer_batch.record(rows as f64);
    fixed.writer_commit.record(took.as_secs_f64());
}

pub fn runs_executing(count: usize) {
    fixed().runs_executing.set(count as f64);
}

/// Runs stored in `state` (sampled when metrics are read).
pub fn stored_runs(state: &'static str, count: u64) {
    gauge!(STORED_RUNS, "state" => state).set(count as f64);
}

/// How an event stream reaches its client.
#[derive(Clone, Copy)]
pub enum Transport {
    Sse,
    WebSocket,
}

/// Counts an open event stream for as long as it lives.
pub struct OpenStream(Transport);

impl OpenStream {
    pub fn new(transport: Transport) -> OpenStream {
        OpenStream::gauge(transport).increment(1.0);
        OpenStream(transport)
    }

    fn gauge(transport: Transport) -> &'static Gauge {
        match transport {
            Transport::Sse => &fixed().sse_streams,
            Transport::WebSocket => &fixed().websocket_streams,
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        OpenStream::gauge(self.0).decrement(1.0);
    }
}

/// The rendered metrics, or `None` when this process's recorder is not the exporter.
pub fn render() -> Option<String> {
    match EXPORTER.get() {
        Some(Some(handle)) => Some(handle.render()),
        _ => None,
    }
}

/// The standard methods as static text (no allocation per request); others are `other`.
fn static_method(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}
