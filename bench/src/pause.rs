//! `pause`: runs that call a definition-only tool (the fake upstream calls the first tool
//! offered, twice per turn, for `--tool-turns` turns), so each run pauses that many times and
//! is resumed each time with streamed `submit_tool_outputs`.
//!
//! Measured per pause: the time to persist it — from the last call's `output_item.done` to
//! `response.completed`, which the service sends only once the pause is stored — and, per
//! submission, the time from sending it to the first resumed event and to the first text
//! delta. With `--upstream URL` instead of `--base`, the baseline row: the run's final request
//! (with every tool result) sent to the fake upstream directly; its time to first delta is what
//! the model itself takes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::common::{Data, DataLines, Numbering, number, parse_flags, process_stats, spread};

#[derive(Default)]
struct Tally {
    runs: usize,
    errors: usize,
    first_error: Option<String>,
    persist: Vec<Duration>,
    submit_first_event: Vec<Duration>,
    submit_first_delta: Vec<Duration>,
    events: usize,
}

pub async fn main(args: Vec<String>) -> Result<(), String> {
    let (mut base, mut upstream, mut runs, mut concurrency, mut pid) =
        (String::new(), String::new(), 200usize, 1usize, None::<u32>);
    parse_flags(args, |flag, value| {
        match flag {
            "--base" => base = value.trim_end_matches('/').to_string(),
            "--upstream" => upstream = value.trim_end_matches('/').to_string(),
            "--runs" => runs = number(flag, value)?,
            "--concurrency" => concurrency = number(flag, value)?,
            "--pid" => pid = Some(number(flag, value)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let client = crate::common::http_client()?;
    if !upstream.is_empty() {
        let mut baseline = upstream_first_delta(&client, &upstream, runs).await?;
        println!(
            "| upstream (final request directly) | {runs} | - | 0 | - | - | {} | - | - | - |",
            spread(&mut baseline)
        );
        return Ok(());
    }
    if base.is_empty() {
        return Err("pause needs --base (or --upstream for the baseline row)".into());
    }

    let before = pid.and_then(process_stats);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(runs));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (client, base, tally, remaining) = (
            client.clone(),
            base.clone(),
            tally.clone(),
            remaining.clone(),
        );
        workers.spawn(async move {
            use std::sync::atomic::Ordering;
            while remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let mut measured = Measured::default();
                let result = one_run(&client, &base, &mut measured).await;
                let mut tally = tally.lock().await;
                tally.persist.extend(measured.persist);
                tally.submit_first_event.extend(measured.submit_first_event);
                tally.submit_first_delta.extend(measured.submit_first_delta);
                tally.events += measured.events;
                match result {
                    Ok(()) => tally.runs += 1,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let after = pid.and_then(process_stats);
    let mut guard = tally.lock().await;
    let tally = &mut *guard;
    let resources = match (before, after) {
        (Some((_, cpu0)), Some((rss, cpu1))) => {
            format!("{} MiB | {} ms", rss / 1024, cpu1.saturating_sub(cpu0))
        }
        _ => "- | -".into(),
    };
    let pauses = tally.persist.len();
    let submits = tally.submit_first_event.len();
    let (runs, errors) = (tally.runs, tally.errors);
    let row = format!(
        "| switchyard ×{concurrency} | {runs} | {pauses} / {submits} | {errors} | {} | {} | {} | {} | {resources} |",
        spread(&mut tally.persist),
        spread(&mut tally.submit_first_event),
        spread(&mut tally.submit_first_delta),
        tally.events,
    );
    println!("{row}");
    if let Some(error) = &tally.first_error {
        eprintln!("first error: {error}");
    }
    Ok(())
}

/// The table header matching [`main`]'s rows.
pub fn header() -> &'static str {
    "| target | runs | pauses / submissions | errors | pause stored → `response.completed` ms p50 / p90 / p99 / max | submit → first resumed event ms p50 / p90 / p99 / max | submit → first text delta ms p50 / p90 / p99 / max | events | service RSS | service CPU |\n|---|---|---|---|---|---|---|---|---|---|"
}

#[derive(Default)]
struct Measured {
    persist: Vec<Duration>,
    submit_first_event: Vec<Duration>,
    submit_first_delta: Vec<Duration>,
    events: usize,
}

/// One run: create it streamed, then answer each pause until it completes; every segment's
/// numbering continues the last.
async fn one_run(
    client: &reqwest::Client,
    base: &str,
    measured: &mut Measured,
) -> Result<(), String> {
    let body = json!({
        "model": "gpt-4o-mini", "input": "benchmark", "stream": true,
        "tools": [{"type": "function", "name": "lookup", "description": "Looks something up",
                   "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                                  "required": ["timezone"]}}],
    });
    let response = client
        .post(format!("{base}/v1/responses"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let mut numbering = Numbering { next: 0 };
    let mut segment = read_segment(response, Instant::now(), &mut numbering, measured).await?;
    for _ in 0..16 {
        let Some(calls) = segment.pending_calls else {
            return Ok(());
        };
        let outputs: Vec<Value> = calls
            .iter()
            .map(|id| json!({"tool_call_id": id, "output": "12:00"}))
            .collect();
        let id = segment.response_id;
        let sent = Instant::now();
        let response = client
            .post(format!("{base}/v1/responses/{id}/submit_tool_outputs"))
            .json(&json!({"tool_outputs": outputs, "stream": true}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        segment = read_segment(response, sent, &mut numbering, measured).await?;
        measured.submit_first_event.push(
            segment
                .first_event
                .ok_or("a resumed stream without events")?,
        );
        if let Some(delta) = segment.first_delta {
            measured.submit_first_delta.push(delta);
        }
    }
    Err("the run paused more than 16 times".into())
}

struct Segment {
    response_id: String,
    /// The calls the run waits for, when it paused.
    pending_calls: Option<Vec<String>>,
    first_event: Option<Duration>,
    first_delta: Option<Duration>,
}

/// Reads one streamed segment of a run up to `[DONE]`.
async fn read_segment(
    response: reqwest::Response,
    sent: Instant,
    numbering: &mut Numbering,
    measured: &mut Measured,
) -> Result<Segment, String> {
    if !response.status().is_success() {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        return Err(format!("status {status}: {text}"));
    }
    let mut lines = DataLines::new(response);
    let mut segment = Segment {
        response_id: String::new(),
        pending_calls: None,
        first_event: None,
        first_delta: None,
    };
    let mut last_item_done = None;
    let mut done = false;
    while let Some(data) = lines.next().await? {
        let Data::Json(data) = data else {
            done = true;
            continue;
        };
        let at = Instant::now();
        segment.first_event.get_or_insert_with(|| sent.elapsed());
        let event: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        numbering.check(&event)?;
        measured.events += 1;
        match event["type"].as_str().unwrap_or_default() {
            "response.output_item.done" => last_item_done = Some(at),
            "response.output_text.delta" => {
                segment.first_delta.get_or_insert_with(|| sent.elapsed());
            }
            "response.completed" => {
                let response = &event["response"];
                segment.response_id = response["id"].as_str().unwrap_or_default().to_string();
                let calls = response
                    .pointer("/required_action/submit_tool_outputs/tool_calls")
                    .and_then(Value::as_array);
                if let Some(calls) = calls {
                    let ids = calls.iter().filter_map(|c| c["id"].as_str());
                    segment.pending_calls = Some(ids.map(str::to_string).collect());
                    let item_done = last_item_done.ok_or("a pause without a call item")?;
                    measured.persist.push(at - item_done);
                }
            }
            _ => {}
        }
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    if segment.response_id.is_empty() {
        return Err("the stream ended without response.completed".into());
    }
    Ok(segment)
}

/// The fake upstream's own time to first delta for the final request (the conversation with
/// every tool result), one request at a time.
async fn upstream_first_delta(
    client: &reqwest::Client,
    upstream: &str,
    requests: usize,
) -> Result<Vec<Duration>, String> {
    let mut messages = vec![json!({"role": "user", "content": "benchmark"})];
    for turn in 0..3 {
        let call = |side: &str| {
            json!({"id": format!("call_{turn}_{side}"), "type": "function",
            "function": {"name": "lookup", "arguments": "{\"timezone\": \"UTC\"}"}})
        };
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]}),
        );
        for side in ["a", "b"] {
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{turn}_{side}"), "content": "12:00"}));
        }
    }
    let body = json!({"model": "gpt-4o-mini", "stream": true, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]});
    let mut latencies = Vec::with_capacity(requests);
    for _ in 0..requests {
        let sent = Instant::now();
        let response = client
            .post(format!("{upstream}/chat/completions"))
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let mut lines = DataLines::new(response);
        let mut first = None;
        while let Some(data) = lines.next().await? {
            if let Data::Json(data) = data
                && first.is_none()
                && data.contains("\"content\"")
            {
                first = Some(sent.elapsed());
            }
        }
        latencies.push(first.ok_or("the upstream sent no text")?);
    }
    Ok(latencies)
}
