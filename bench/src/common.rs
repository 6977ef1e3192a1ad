//! What every scenario shares: reading SSE bodies, percentiles, the service's `/proc` figures.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// The `data:` payloads of an SSE body, one at a time.
pub struct DataLines {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

/// One payload of an SSE body.
pub enum Data {
    Json(String),
    Done,
}

impl DataLines {
    pub fn new(response: reqwest::Response) -> Self {
        DataLines {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next payload; `None` when the body ends.
    pub async fn next(&mut self) -> Result<Option<Data>, String> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue; // a `: ping` comment
                };
                return Ok(Some(if data == "[DONE]" {
                    Data::Done
                } else {
                    Data::Json(data.to_string())
                }));
            }
            match self.body.next().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(|e| e.to_string())?;
                    self.buffer.push_str(&String::from_utf8_lossy(&chunk));
                }
                None => return Ok(None),
            }
        }
    }
}

/// Checks that the events of one switchyard stream are numbered without gaps.
pub struct Numbering {
    pub next: u64,
}

impl Numbering {
    pub fn check(&mut self, event: &serde_json::Value) -> Result<(), String> {
        if event["sequence_number"].as_u64() != Some(self.next) {
            return Err(format!(
                "sequence number {} where {} was due",
                event["sequence_number"], self.next
            ));
        }
        self.next += 1;
        Ok(())
    }
}

/// The value at quantile `q` (0 < q ≤ 1) of sorted values.
pub fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize)
        .saturating_sub(1)
        .min(sorted.len() - 1);
    Some(sorted[index])
}

/// Milliseconds with `decimals` places, or `-` when there is no value.
pub fn ms(value: Option<Duration>, decimals: usize) -> String {
    value.map_or("-".into(), |d| {
        format!("{:.*}", decimals, d.as_secs_f64() * 1000.0)
    })
}

/// `p50 / p90 / p99 / max` in milliseconds of unsorted values.
pub fn spread(values: &mut [Duration]) -> String {
    values.sort();
    [0.5, 0.9, 0.99, 1.0]
        .map(|q| ms(quantile(values, q), 2))
        .join(" / ")
}

/// `(RSS in KiB, CPU time in ms)` of a process, from `/proc`.
pub fn process_stats(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports CPU time in clock ticks of 1/100 s.
    Some((rss, ticks * 10))
}

/// A client for many concurrent streams: no Nagle delay, connections kept for reuse. With
/// `SWITCHYARD_API_KEY` set, every request carries it (the service's auth is measured too).
pub fn http_client() -> Result<reqwest::Client, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Ok(key) = std::env::var("SWITCHYARD_API_KEY") {
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4096)
        .default_headers(headers)
        .build()
        .map_err(|e| e.to_string())
}

/// Parses `--flag value` pairs with `apply`, which returns false for an unknown flag.
pub fn parse_flags(
    args: Vec<String>,
    mut apply: impl FnMut(&str, &str) -> Result<bool, String>,
) -> Result<(), String> {
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        if !apply(&flag, &value)? {
            return Err(format!("unknown flag {flag}"));
        }
    }
    Ok(())
}

/// Parses a flag's value.
pub fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e| format!("{flag}: {e}"))
}
