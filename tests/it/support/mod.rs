//! Test harness: the real application on 127.0.0.1:0 with a fresh database and a scripted
//! fake LLM, plus a small SSE client.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use fake_llm::FakeLlm;
use serde_json::Value;
use switchyard::app::Application;
use switchyard::config::{Config, Secret};
use switchyard::tools::ToolHandler;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[allow(unused_imports)]
pub use fake_llm::{Step, Turn};

mod audit;
#[allow(unused_imports)]
pub use audit::*;

pub struct TestApp {
    pub base: String,
    /// The app's tool registry, where MCP servers' tools appear once discovered.
    pub tools: Arc<switchyard::tools::registry::ToolRegistry>,
    pub llm: FakeLlm,
    pub client: reqwest::Client,
    pub database_url: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    dir: TempDir,
}

/// A test configuration: the fake LLM as the default provider, quick timeouts.
pub fn test_config(database_url: &str, llm: &FakeLlm) -> Config {
    let mut config = Config::defaults().unwrap();
    config.server.host = "127.0.0.1".into();
    config.server.port = 0;
    // API keys are tested on their own (tests/auth.rs); elsewhere every request is the
    // default tenant's.
    config.auth.mode = switchyard::config::AuthMode::Open;
    config.server.shutdown_grace_seconds = 5;
    config.server.drain_delay_ms = 0;
    config.database.url = database_url.to_string();
    config.llm.provider.base_url = Some(llm.base_url());
    config.llm.provider.api_key = Some(Secret::new("test-key"));
    config.llm.provider.models = vec!["gpt-4o-mini".into(), "gpt-4o".into()];
    config.llm.first_byte_timeout_ms = 2_000;
    // Scripted upstream failures are the failures under test; retries are tested on their own.
    config.llm.retries = 0;
    config.llm.idle_timeout_ms = 2_000;
    config
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    spawn_app_with_tools(Vec::new(), tweak).await
}

/// The app with extra compiled-in tool handlers `(server label, handler)`.
pub async fn spawn_app_with_tools(
    tools: Vec<(String, Arc<dyn ToolHandler>)>,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/switchyard.db", dir.path().display());
    let llm = FakeLlm::start().await.unwrap();
    start_with(url, llm, dir, tools, tweak).await
}

/// The app on the given database with extra compiled-in tool handlers.
pub async fn spawn_app_with_tools_on(
    database_url: &str,
    tools: Vec<(String, Arc<dyn ToolHandler>)>,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start().await.unwrap();
    start_with(database_url.to_string(), llm, dir, tools, tweak).await
}

/// The app on the given database (a fresh fake LLM); the temp dir is unused then.
pub async fn spawn_app_on(database_url: &str, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start().await.unwrap();
    start(database_url.to_string(), llm, dir, tweak).await
}

/// A new, empty PostgreSQL database next to `TEST_DATABASE_URL`'s (named after it, so CI
/// drops it with its own), or `None` when PostgreSQL is not configured.
pub async fn fresh_postgres_url() -> Option<String> {
    use sqlx::Connection;
    let base = std::env::var("TEST_DATABASE_URL").ok()?;
    let (server, current) = base.rsplit_once('/')?;
    let current = current.split('?').next().unwrap_or(current);
    // 16 random hex digits keep the name under PostgreSQL's 63-byte identifier limit.
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{current}_t{}", &unique[..16]);
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    Some(format!("{server}/{name}"))
}

/// A fresh SQLite URL in a new temp dir, plus a fresh PostgreSQL database when
/// `TEST_DATABASE_URL` is set. Each test gets its own: instances take over each other's
/// abandoned runs, so tests must not share a database.
pub async fn database_urls() -> Vec<(String, Option<TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![(
        format!("sqlite://{}/switchyard.db", dir.path().display()),
        Some(dir),
    )];
    if let Some(url) = fresh_postgres_url().await {
        urls.push((url, None));
    }
    urls
}

async fn start(
    database_url: String,
    llm: FakeLlm,
    dir: TempDir,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    start_with(database_url, llm, dir, Vec::new(), tweak).await
}

async fn start_with(
    database_url: String,
    llm: FakeLlm,
    dir: TempDir,
    tools: Vec<(String, Arc<dyn ToolHandler>)>,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    // RUST_LOG=switchyard=debug shows the service's logs with a failing test's output.
    let _ = switchyard::telemetry::init(switchyard::telemetry::Sink::Tests);
    let mut config = test_config(&database_url, &llm);
    tweak(&mut config);
    let app = Application::build_with_tools(config, tools).await.unwrap();
    let base = format!("http://{}", app.local_addr());
    let tools = app.tools();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    TestApp {
        base,
        tools,
        llm,
        client: reqwest::Client::new(),
        database_url,
        stop: Some(stop),
        server: Some(server),
        dir,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Graceful shutdown (as on SIGTERM), then a new process on the same database and LLM.
    pub async fn restart(mut self, tweak: impl FnOnce(&mut Config)) -> TestApp {
        self.shutdown().await;
        let TestApp {
            llm,
            database_url,
            dir,
            ..
        } = self;
        start(database_url, llm, dir, tweak).await
    }

    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap().unwrap();
        }
    }

    /// POSTs JSON; returns status and body.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let response = self.client.delete(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Creates a streamed run and reads the whole stream.
    pub async fn stream(&self, body: &Value) -> Sse {
        let mut body = body.clone();
        body["stream"] = Value::Bool(true);
        let response = self
            .client
            .post(self.url("/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap();
        read_sse(response).await
    }

    /// Replays a run's event log (`query` adds e.g. `&starting_after=3`).
    pub async fn replay(&self, id: &str, query: &str) -> Sse {
        let url = self.url(&format!("/v1/responses/{id}?stream=true{query}"));
        read_sse(self.client.get(url).send().await.unwrap()).await
    }

    /// Polls until the stored run leaves `in_progress`.
    pub async fn wait_until_stopped(&self, id: &str) -> Value {
        for _ in 0..200 {
            let (_, body) = self.get(&format!("/v1/responses/{id}")).await;
            if body["status"] != "in_progress" && body["status"] != "queued" {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {id} did not stop");
    }
}

/// One SSE event as received.
#[derive(Clone, Debug)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

/// A whole SSE response.
#[derive(Debug)]
pub struct Sse {
    pub status: u16,
    pub content_type: String,
    pub events: Vec<SseEvent>,
    pub done: bool,
    pub comments: Vec<String>,
    pub raw: String,
}

impl Sse {
    pub fn types(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.event.as_str()).collect()
    }

    pub fn last(&self) -> &SseEvent {
        self.events.last().unwrap()
    }

    pub fn response_id(&self) -> String {
        self.events[0].data["response"]["id"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

pub async fn read_sse(response: reqwest::Response) -> Sse {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let raw = response.text().await.unwrap();
    parse_sse(status, content_type, raw)
}

pub fn parse_sse(status: u16, content_type: String, raw: String) -> Sse {
    let mut events = Vec::new();
    let mut comments = Vec::new();
    let mut done = false;
    for block in raw.split("\n\n").filter(|b| !b.is_empty()) {
        let mut event = None;
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(comment) = line.strip_prefix(':') {
                comments.push(comment.trim().to_string());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(v.to_string());
            }
        }
        match data.as_deref() {
            Some("[DONE]") => done = true,
            Some(text) => events.push(SseEvent {
                event: event.unwrap_or_default(),
                id,
                data: serde_json::from_str(text).unwrap(),
            }),
            None => {}
        }
    }
    Sse {
        status,
        content_type,
        events,
        done,
        comments,
        raw,
    }
}

/// Every key SPEC §4 requires on a Response object.
pub const RESPONSE_KEYS: &[&str] = &[
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "error",
    "incomplete_details",
    "instructions",
    "model",
    "output",
    "parallel_tool_calls",
    "previous_response_id",
    "tools",
    "tool_choice",
    "truncation",
    "text",
    "reasoning",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "user",
    "usage",
    "required_action",
];

pub fn assert_response_keys(response: &Value) {
    let object = response.as_object().expect("a response object");
    for key in RESPONSE_KEYS {
        assert!(object.contains_key(*key), "missing key {key} in {response}");
    }
}

/// Asserts sequence numbers 0..n, each SSE `id:` equal to its event's number.
pub fn assert_numbering(sse: &Sse) {
    for (n, event) in sse.events.iter().enumerate() {
        assert_eq!(
            event.data["sequence_number"], n as u64,
            "event {n}: {:?}",
            event.data
        );
        assert_eq!(event.id.as_deref(), Some(n.to_string().as_str()));
        assert_eq!(event.data["type"], event.event);
    }
}

/// Starts a streamed run; returns its id (from `response.created`) and the rest of the stream,
/// read in the background.
pub async fn start_stream(app: &TestApp, body: Value) -> (String, tokio::task::JoinHandle<Sse>) {
    use futures_util::StreamExt;
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let mut bytes = response.bytes_stream();
    let mut raw = String::new();
    let id = loop {
        let chunk = bytes.next().await.unwrap().unwrap();
        raw.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(start) = raw.find("\"id\":\"resp_") {
            break raw[start + 6..start + 6 + 37].to_string();
        }
    };
    let reader = tokio::spawn(async move {
        while let Some(Ok(chunk)) = bytes.next().await {
            raw.push_str(&String::from_utf8_lossy(&chunk));
        }
        parse_sse(status, "text/event-stream".into(), raw)
    });
    (id, reader)
}

/// An HTTP tool at `url`, executed by the service, with the defaults of its configuration.
pub fn http_tool(
    name: &str,
    url: String,
    timeout_ms: Option<u64>,
) -> switchyard::config::HttpToolConfig {
    switchyard::config::HttpToolConfig {
        name: name.into(),
        description: format!("{name} over HTTP"),
        parameters: serde_json::json!({"type": "object"}),
        url,
        method: "POST".into(),
        headers: Default::default(),
        timeout_ms,
        kind: switchyard::tools::ToolKind::Executed,
        return_direct: false,
        hidden: false,
        read_only: false,
    }
}

/// The switchyard binary (built for the tests), started on `database_url` with the fake LLM
/// at `llm_url` and short leases (a run of a killed instance is taken over within a second);
/// `config` is an extra configuration file. Returns it once it listens, with its address.
pub fn spawn_binary(
    database_url: &str,
    llm_url: &str,
    config: &std::path::Path,
) -> (std::process::Child, String) {
    spawn_binary_with(database_url, llm_url, Some(config), &[])
}

/// As [`spawn_binary`], with `env` set on top (`SWITCHYARD__SECTION__KEY` overrides) and the
/// configuration file optional.
pub fn spawn_binary_with(
    database_url: &str,
    llm_url: &str,
    config: Option<&std::path::Path>,
    env: &[(&str, &str)],
) -> (std::process::Child, String) {
    let (child, address, _) = spawn_binary_logged(database_url, llm_url, config, env);
    (child, address)
}

/// What an instance has logged so far, line by line.
#[derive(Clone, Default)]
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Logs {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (up to 5 s) for a line that `matches`, and returns it.
    pub async fn wait_for(&self, matches: impl Fn(&str) -> bool) -> String {
        for _ in 0..250 {
            if let Some(line) = self.lines().into_iter().find(|l| matches(l)) {
                return line;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("no such log line in:\n{}", self.lines().join("\n"));
    }
}

/// As [`spawn_binary_with`], keeping what the instance logs.
pub fn spawn_binary_logged(
    database_url: &str,
    llm_url: &str,
    config: Option<&std::path::Path>,
    env: &[(&str, &str)],
) -> (std::process::Child, String, Logs) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    if let Some(config) = config {
        command.args(["--config", config.to_str().unwrap()]);
    }
    command
        .env("SWITCHYARD__SERVER__PORT", "0")
        .env("SWITCHYARD__DATABASE__URL", database_url)
        .env("SWITCHYARD__LLM__BASE_URL", llm_url)
        .env("SWITCHYARD__LLM__API_KEY", "test")
        .env("SWITCHYARD__AUTH__MODE", "open")
        .env("SWITCHYARD__LLM__RETRIES", "0")
        .env("SWITCHYARD__SERVER__DRAIN_DELAY_MS", "0")
        .env("SWITCHYARD__RUNS__LEASE_TTL_MS", "1000")
        .env("SWITCHYARD__RUNS__SWEEP_INTERVAL_MS", "200")
        .env("RUST_LOG", "info");
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            let at = line.find("address=")?;
            Some(line[at + 8..].split_whitespace().next()?.to_string())
        })
        .expect("the instance printed its address (did it exit?)");
    // Keep reading so the child never blocks on a full pipe. TEST_BINARY_LOGS=1 shows them.
    let echo = std::env::var_os("TEST_BINARY_LOGS").is_some();
    let pid = child.id();
    let logs = Logs::default();
    let kept = logs.clone();
    std::thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            if echo {
                eprintln!("[switchyard {pid}] {line}");
            }
            kept.0.lock().unwrap().push(line);
        }
    });
    (child, address, logs)
}

/// Reads a stream until it ends or its connection breaks; keeps what arrived. `first` hears
/// of the first whole event.
pub async fn read_until_cut(
    response: reqwest::Response,
    first: tokio::sync::oneshot::Sender<()>,
) -> Sse {
    use futures_util::StreamExt;
    let status = response.status().as_u16();
    let mut body = response.bytes_stream();
    let mut raw = String::new();
    let mut first = Some(first);
    while let Some(Ok(chunk)) = body.next().await {
        raw.push_str(&String::from_utf8_lossy(&chunk));
        if raw.contains("\n\n")
            && let Some(first) = first.take()
        {
            let _ = first.send(());
        }
    }
    // A frame cut in half is not an event the client saw.
    let whole = raw.rfind("\n\n").map_or(0, |end| end + 2);
    raw.truncate(whole);
    parse_sse(status, "text/event-stream".into(), raw)
}

/// SIGKILL, then reaps the process.
pub fn kill(child: &mut std::process::Child) {
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let _ = child.wait();
}
