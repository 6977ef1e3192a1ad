//! The load generator: streamed text runs against switchyard or the upstream directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::common::{Data, DataLines, Numbering, number, parse_flags, process_stats, quantile};

struct Options {
    base: String,
    upstream: bool,
    /// The tool scenarios: which tool server each run enables (the upstream is expected to
    /// call its first tool, see `fake-llm --tool-turns`).
    tools: Option<Tools>,
    rate: Option<f64>,
    concurrency: Option<usize>,
    duration: Duration,
    pid: Option<u32>,
}

fn options(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        base: String::new(),
        upstream: false,
        tools: None,
        rate: None,
        concurrency: None,
        duration: Duration::from_secs(10),
        pid: None,
    };
    parse_flags(args, |flag, value| {
        match flag {
            "--base" => options.base = value.trim_end_matches('/').to_string(),
            "--target" => options.upstream = value == "upstream",
            "--scenario" => options.tools = Tools::from_scenario(value)?,
            "--rate" => options.rate = Some(number(flag, value)?),
            "--concurrency" => options.concurrency = Some(number(flag, value)?),
            "--duration-s" => options.duration = Duration::from_secs_f64(number(flag, value)?),
            "--pid" => options.pid = Some(number(flag, value)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if options.base.is_empty() || options.rate.is_none() == options.concurrency.is_none() {
        return Err("load needs --base and one of --rate or --concurrency".into());
    }
    Ok(options)
}

/// The tool a tool scenario's runs enable.
#[derive(Clone, Copy)]
enum Tools {
    /// `tools`: the builtin `current_time`, read-only.
    Builtin,
    /// `http-tools`: an HTTP tool marked read-only (tool server `bench_read_only`).
    Http,
    /// `http-tools-saved`: the same HTTP tool, not read-only: each call is saved as started
    /// (tool server `bench_saved`).
    HttpSaved,
}

impl Tools {
    fn from_scenario(name: &str) -> Result<Option<Tools>, String> {
        Ok(match name {
            "text" => None,
            "tools" => Some(Tools::Builtin),
            "http-tools" => Some(Tools::Http),
            "http-tools-saved" => Some(Tools::HttpSaved),
            other => return Err(format!("unknown scenario {other:?}")),
        })
    }

    fn declaration(self) -> Value {
        match self {
            Tools::Builtin => {
                json!([{"type": "mcp", "server_label": "builtin", "allowed_tools": ["current_time"]}])
            }
            Tools::Http => json!([{"type": "mcp", "server_label": "bench_read_only"}]),
            Tools::HttpSaved => json!([{"type": "mcp", "server_label": "bench_saved"}]),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tools::Builtin => "switchyard tools",
            Tools::Http => "switchyard http-tools",
            Tools::HttpSaved => "switchyard http-tools-saved",
        }
    }
}

/// One run's timings.
#[derive(Clone, Copy)]
struct Sample {
    first_byte: Duration,
    first_delta: Duration,
    total: Duration,
}

#[derive(Default)]
struct Tally {
    samples: Vec<Sample>,
    errors: usize,
    events: usize,
    first_error: Option<String>,
}

pub async fn main(args: Vec<String>) -> Result<(), String> {
    let options = Arc::new(options(args)?);
    let client = crate::common::http_client()?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let before = options.pid.and_then(process_stats);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match (options.rate, options.concurrency) {
        (Some(rate), _) => {
            // Open loop: runs start on schedule whatever the service does; each is timed from
            // its scheduled start, so queueing shows in the figures.
            let interval = Duration::from_secs_f64(1.0 / rate);
            let mut next = Instant::now();
            while started.elapsed() < options.duration {
                let (client, options, tally) = (client.clone(), options.clone(), tally.clone());
                let scheduled = next;
                tasks.spawn(async move {
                    record(&tally, one_run(&client, &options, scheduled).await).await
                });
                next += interval;
                tokio::time::sleep_until(next.into()).await;
            }
        }
        (None, Some(concurrency)) => {
            let stop = Arc::new(AtomicBool::new(false));
            for _ in 0..concurrency {
                let (client, options, tally, stop) =
                    (client.clone(), options.clone(), tally.clone(), stop.clone());
                tasks.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let result = one_run(&client, &options, Instant::now()).await;
                        record(&tally, result).await;
                    }
                });
            }
            tokio::time::sleep(options.duration).await;
            stop.store(true, Ordering::Relaxed);
        }
        _ => unreachable!("checked by options()"),
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    let after = options.pid.and_then(process_stats);
    let tally = tally.lock().await;
    report(&options, &tally, elapsed, before, after);
    Ok(())
}

async fn record(tally: &Mutex<Tally>, result: Result<(Sample, usize), String>) {
    let mut tally = tally.lock().await;
    match result {
        Ok((sample, events)) => {
            tally.samples.push(sample);
            tally.events += events;
        }
        Err(e) => {
            tally.errors += 1;
            tally.first_error.get_or_insert(e);
        }
    }
}

/// One streamed run; returns its timings and how many events it carried.
async fn one_run(
    client: &reqwest::Client,
    options: &Options,
    start: Instant,
) -> Result<(Sample, usize), String> {
    let (url, body) = if options.upstream {
        (
            format!("{}/chat/completions", options.base),
            json!({"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true},
                   "messages": [{"role": "user", "content": "benchmark"}]}),
        )
    } else {
        let mut body = json!({"model": "gpt-4o-mini", "input": "benchmark", "stream": true});
        if let Some(tools) = options.tools {
            body["tools"] = tools.declaration();
        }
        (format!("{}/v1/responses", options.base), body)
    };
    let response = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let first_byte = start.elapsed();
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let mut lines = DataLines::new(response);
    let mut first_delta = None;
    let mut numbering = Numbering { next: 0 };
    let mut events = 0usize;
    let mut done = false;
    while let Some(data) = lines.next().await? {
        let Data::Json(data) = data else {
            done = true;
            continue;
        };
        events += 1;
        if options.upstream {
            if first_delta.is_none() && data.contains("\"content\"") {
                first_delta = Some(start.elapsed());
            }
            continue;
        }
        let event: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        numbering.check(&event)?;
        if first_delta.is_none() && event["type"] == "response.output_text.delta" {
            first_delta = Some(start.elapsed());
        }
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    Ok((
        Sample {
            first_byte,
            first_delta: first_delta.ok_or("no text delta")?,
            total: start.elapsed(),
        },
        events,
    ))
}

fn report(
    options: &Options,
    tally: &Tally,
    elapsed: Duration,
    before: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
) {
    let pick = |f: fn(&Sample) -> Duration| {
        let mut values: Vec<Duration> = tally.samples.iter().map(f).collect();
        values.sort();
        values
    };
    let at = |values: &[Duration], q: f64| crate::common::ms(quantile(values, q), 2);
    let mode = match (options.rate, options.concurrency) {
        (Some(rate), _) => format!("open {rate}/s"),
        (_, Some(c)) => format!("closed ×{c}"),
        _ => String::new(),
    };
    let target = match (options.upstream, options.tools) {
        (true, _) => "upstream",
        (false, Some(tools)) => tools.label(),
        (false, None) => "switchyard",
    };
    let (first_byte, first_delta, total) = (
        pick(|s| s.first_byte),
        pick(|s| s.first_delta),
        pick(|s| s.total),
    );
    let throughput = tally.samples.len() as f64 / elapsed.as_secs_f64();
    let resources = match (before, after) {
        (Some((_, cpu0)), Some((rss, cpu1))) => {
            format!("{} MiB | {} ms", rss / 1024, cpu1.saturating_sub(cpu0))
        }
        _ => "- | -".into(),
    };
    println!(
        "| {target} | {mode} | {} | {} | {throughput:.0} | {} / {} / {} | {} / {} / {} / {} / {} | {} / {} / {} | {} | {resources} |",
        tally.samples.len(),
        tally.errors,
        at(&first_byte, 0.5),
        at(&first_byte, 0.99),
        at(&first_byte, 1.0),
        at(&first_delta, 0.5),
        at(&first_delta, 0.9),
        at(&first_delta, 0.99),
        at(&first_delta, 0.999),
        at(&first_delta, 1.0),
        at(&total, 0.5),
        at(&total, 0.99),
        at(&total, 1.0),
        tally.events,
    );
    if let Some(error) = &tally.first_error {
        eprintln!("first error: {error}");
    }
}

/// The table header matching [`report`]'s rows.
pub fn header() -> &'static str {
    "| target | load | runs | errors | runs/s | first byte ms p50 / p99 / max | first delta ms p50 / p90 / p99 / p99.9 / max | total ms p50 / p99 / max | events | service RSS | service CPU |\n|---|---|---|---|---|---|---|---|---|---|---|"
}
