//! `idle`: N streamed runs held open at once against a slow upstream (one that sends a first
//! delta at once and the next only much later, e.g. `fake-llm --deltas 2 --inter-token-ms
//! 30000`). Each stream is counted open once its first text delta arrived; when all are open,
//! the service's RSS is read: (RSS then − RSS before) / open streams is the memory one open
//! stream costs. The streams are then read to their end and every one's numbering checked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::common::{Data, DataLines, Numbering, number, parse_flags, process_stats};

struct Progress {
    opened: AtomicUsize,
    /// Streams that ended after they were counted open.
    closed: AtomicUsize,
    finished: AtomicUsize,
    failed: AtomicUsize,
    changed: Notify,
}

pub async fn main(args: Vec<String>) -> Result<(), String> {
    let (mut base, mut streams, mut pid, mut opening) =
        (String::new(), 1000usize, None::<u32>, 128usize);
    parse_flags(args, |flag, value| {
        match flag {
            "--base" => base = value.trim_end_matches('/').to_string(),
            "--streams" => streams = number(flag, value)?,
            "--pid" => pid = Some(number(flag, value)?),
            "--opening" => opening = number(flag, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let pid = pid.ok_or("idle needs --pid (the service's process)")?;
    if base.is_empty() {
        return Err("idle needs --base".into());
    }
    let client = crate::common::http_client()?;
    let (rss_before, cpu_before) = process_stats(pid).ok_or("cannot read the service's /proc")?;
    let progress = Arc::new(Progress {
        opened: AtomicUsize::new(0),
        closed: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        changed: Notify::new(),
    });
    // At most `opening` streams are being opened at once; an open one gives its place back.
    let gate = Arc::new(Semaphore::new(opening.max(1)));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let (client, base, progress, gate) =
            (client.clone(), base.clone(), progress.clone(), gate.clone());
        tasks.spawn(async move {
            let result = hold_one(&client, &base, &gate, &progress).await;
            let counter = if result.is_ok() {
                &progress.finished
            } else {
                &progress.failed
            };
            counter.fetch_add(1, Ordering::SeqCst);
            progress.changed.notify_one();
            result
        });
    }
    loop {
        let notified = progress.changed.notified();
        let opened = progress.opened.load(Ordering::SeqCst);
        let failed = progress.failed.load(Ordering::SeqCst);
        if opened + failed >= streams {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
    }
    let open_time = started.elapsed();
    // Give the service a moment to settle (write its last batches), then read its memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_open, cpu_open) = process_stats(pid).ok_or("cannot read the service's /proc")?;
    let open_now = progress.opened.load(Ordering::SeqCst) - progress.closed.load(Ordering::SeqCst);
    let mut first_error = None;
    while let Some(result) = tasks.join_next().await {
        if let Ok(Err(e)) = result {
            first_error.get_or_insert(e);
        }
    }
    let (rss_after, _) = process_stats(pid).unwrap_or((0, 0));
    let failed = progress.failed.load(Ordering::SeqCst);
    let per_stream = (rss_open.saturating_sub(rss_before) as f64) / open_now.max(1) as f64;
    println!(
        "| streams held open | errors | opened in s | service RSS before / all open / after, MiB | RSS per open stream, KiB | CPU to open, ms |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {open_now} of {streams} | {failed} | {:.1} | {} / {} / {} | **{per_stream:.1}** | {} |",
        open_time.as_secs_f64(),
        rss_before / 1024,
        rss_open / 1024,
        rss_after / 1024,
        cpu_open.saturating_sub(cpu_before),
    );
    if let Some(error) = first_error {
        eprintln!("first error: {error}");
    }
    Ok(())
}

/// Opens one stream, counts it open at its first text delta, then reads it to `[DONE]`.
async fn hold_one(
    client: &reqwest::Client,
    base: &str,
    gate: &Semaphore,
    progress: &Progress,
) -> Result<(), String> {
    let permit = gate.acquire().await.map_err(|e| e.to_string())?;
    let response = client
        .post(format!("{base}/v1/responses"))
        .json(&json!({"model": "gpt-4o-mini", "input": "benchmark", "stream": true}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let mut permit = Some(permit);
    let result = read_to_end(DataLines::new(response), &mut permit, progress).await;
    if permit.is_none() {
        progress.closed.fetch_add(1, Ordering::SeqCst);
    }
    result
}

/// Reads a stream to `[DONE]`, checking its numbering; at the first text delta the stream is
/// counted open and `permit` is given back.
async fn read_to_end(
    mut lines: DataLines,
    permit: &mut Option<tokio::sync::SemaphorePermit<'_>>,
    progress: &Progress,
) -> Result<(), String> {
    let mut numbering = Numbering { next: 0 };
    let mut done = false;
    while let Some(data) = lines.next().await? {
        let Data::Json(data) = data else {
            done = true;
            continue;
        };
        let event: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        numbering.check(&event)?;
        if event["type"] == "response.output_text.delta" && permit.take().is_some() {
            progress.opened.fetch_add(1, Ordering::SeqCst);
            progress.changed.notify_one();
        }
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    if numbering.next == 0 || permit.is_some() {
        return Err("the stream carried no text delta".into());
    }
    Ok(())
}
