//! Measurements of switchyard.
//!
//! `switchyard-bench resume --base URL [--runs N] [--reattaches N] [--starting-after N]`:
//! stream-resume latency — reattach to stored logs, time to the first replayed event; every
//! replay is checked (contiguous numbers from N+1, `[DONE]`).
//!
//! `switchyard-bench load --base URL --target switchyard|upstream (--rate R | --concurrency C)
//! [--duration-s S] [--pid PID]`: streamed text runs, open loop at R runs/s or closed loop with
//! C at once; per run the time to first byte, to the first text delta and to the end; every
//! switchyard stream's sequence numbers are checked. `--target upstream` sends the same load
//! to the chat-completions server directly, so the difference is switchyard's overhead.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

struct Args {
    base: String,
    runs: usize,
    reattaches: usize,
    starting_after: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("resume") {
        return Err("usage: switchyard-bench resume|load … (see the crate docs)".into());
    }
    let mut parsed = Args {
        base: String::new(),
        runs: 20,
        reattaches: 500,
        starting_after: 3,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--base" => parsed.base = value.trim_end_matches('/').to_string(),
            "--runs" => parsed.runs = number()?,
            "--reattaches" => parsed.reattaches = number()?,
            "--starting-after" => parsed.starting_after = number()? as u64,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.base.is_empty() {
        return Err("--base is required".into());
    }
    Ok(parsed)
}

mod load;

#[tokio::main]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("load-header") {
        println!("{}", load::header());
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("load") {
        if let Err(message) = load::main(std::env::args().skip(2).collect()).await {
            eprintln!("error: {message}");
            std::process::exit(1);
        }
        return;
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Err(message) = run(args).await {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())?;
    let mut ids = Vec::with_capacity(args.runs);
    for n in 0..args.runs {
        let body = json!({"model": "gpt-4o-mini", "input": format!("benchmark run {n} with a few words of text")});
        let reply: Value = client
            .post(format!("{}/v1/responses", args.base))
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let id = reply["id"].as_str().ok_or(format!("no id in {reply}"))?;
        ids.push(id.to_string());
    }
    let mut latencies = Vec::with_capacity(args.reattaches);
    let mut events = 0usize;
    for n in 0..args.reattaches {
        let id = &ids[n % ids.len()];
        let url = format!(
            "{}/v1/responses/{id}?stream=true&starting_after={}",
            args.base, args.starting_after
        );
        let started = Instant::now();
        let response = client.get(&url).send().await.map_err(|e| e.to_string())?;
        let mut body = response.bytes_stream();
        let mut raw = String::new();
        let mut first = None;
        while let Some(chunk) = body.next().await {
            raw.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
            if first.is_none() && raw.contains("\n\n") {
                first = Some(started.elapsed());
            }
        }
        latencies.push(first.ok_or(format!("no event replayed for {id}"))?);
        events += check_replay(&raw, args.starting_after)?;
    }
    latencies.sort();
    let at = |q: f64| {
        latencies[((latencies.len() as f64 * q).ceil() as usize)
            .saturating_sub(1)
            .min(latencies.len() - 1)]
    };
    let ms = |d: Duration| format!("{:.3}", d.as_secs_f64() * 1000.0);
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    println!("| reattaches | events checked | mean ms | p50 ms | p90 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {events} | {} | {} | {} | {} | {} |",
        latencies.len(),
        ms(mean),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(*latencies.last().unwrap_or(&Duration::ZERO)),
    );
    Ok(())
}

/// Sequence numbers contiguous from `after + 1`, then `[DONE]`; returns the event count.
fn check_replay(raw: &str, after: u64) -> Result<usize, String> {
    let mut expected = after + 1;
    let mut done = false;
    for block in raw.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let event: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
        let number = event["sequence_number"]
            .as_u64()
            .ok_or("an event without sequence_number")?;
        if number != expected {
            return Err(format!("expected sequence number {expected}, got {number}"));
        }
        expected += 1;
    }
    if !done {
        return Err("the replay did not end with [DONE]".into());
    }
    Ok((expected - after - 1) as usize)
}
