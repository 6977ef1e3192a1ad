//! `resume`: reattach to finished runs' stored logs with `starting_after`; time to the first
//! replayed event. Every replay is checked: contiguous numbers from N+1, then `[DONE]`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Data, DataLines, Numbering, ms, number, parse_flags, quantile};

pub async fn main(args: Vec<String>) -> Result<(), String> {
    let (mut base, mut runs, mut reattaches, mut starting_after) =
        (String::new(), 20usize, 500usize, 3u64);
    parse_flags(args, |flag, value| {
        match flag {
            "--base" => base = value.trim_end_matches('/').to_string(),
            "--runs" => runs = number(flag, value)?,
            "--reattaches" => reattaches = number(flag, value)?,
            "--starting-after" => starting_after = number(flag, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if base.is_empty() || runs == 0 {
        return Err("resume needs --base and at least one run".into());
    }
    let client = crate::common::http_client()?;
    let mut ids = Vec::with_capacity(runs);
    for n in 0..runs {
        let body = json!({"model": "gpt-4o-mini", "input": format!("benchmark run {n} with a few words of text")});
        let reply: Value = client
            .post(format!("{base}/v1/responses"))
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
    let mut latencies = Vec::with_capacity(reattaches);
    let mut events = 0usize;
    for n in 0..reattaches {
        let id = &ids[n % ids.len()];
        let url = format!("{base}/v1/responses/{id}?stream=true&starting_after={starting_after}");
        let started = Instant::now();
        let response = client.get(&url).send().await.map_err(|e| e.to_string())?;
        let mut lines = DataLines::new(response);
        let mut numbering = Numbering {
            next: starting_after + 1,
        };
        let mut first = None;
        let mut done = false;
        while let Some(data) = lines.next().await? {
            first.get_or_insert_with(|| started.elapsed());
            match data {
                Data::Done => done = true,
                Data::Json(data) => {
                    let event: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
                    numbering.check(&event)?;
                    events += 1;
                }
            }
        }
        if !done {
            return Err(format!("the replay of {id} did not end with [DONE]"));
        }
        latencies.push(first.ok_or(format!("no event replayed for {id}"))?);
    }
    latencies.sort();
    let mean = latencies.iter().sum::<Duration>() / latencies.len().max(1) as u32;
    let at = |q| ms(quantile(&latencies, q), 3);
    println!("| reattaches | events checked | mean ms | p50 ms | p90 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {events} | {} | {} | {} | {} | {} |",
        latencies.len(),
        ms(Some(mean), 3),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
    );
    Ok(())
}
