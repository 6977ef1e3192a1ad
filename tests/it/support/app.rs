//! The application in this process: `TestApp::start()` for the default, `TestApp::builder()`
//! for anything else (a database, extra tool handlers, configuration overrides, the fake
//! upstream to use and its script), then requests to it as a client makes them.
//!
//! Every app listens on `127.0.0.1:0` with the test configuration ([`test_config`]): open mode,
//! a scripted fake upstream (`app.llm`) as the default provider, quick timeouts, no retries.
//! Without a database it gets a fresh SQLite file of its own.

use std::sync::Arc;
use std::time::Duration;

use fake_llm::{FakeLlm, Turn};
use serde_json::Value;
use switchyard::app::Application;
use switchyard::config::{Config, HttpToolConfig, Secret};
use switchyard::store::{self, RunStore};
use switchyard::tools::ToolHandler;
use switchyard::tools::registry::ToolRegistry;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::backends::Database;
use super::sse::{Sse, parse_sse, read_sse};

/// A configuration override, applied after [`test_config`].
type Override<'a> = Box<dyn FnOnce(&mut Config) + Send + 'a>;

/// The application, started in this process on `127.0.0.1:0`.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The app's tool registry, where MCP servers' tools appear once discovered.
    pub tools: Arc<ToolRegistry>,
    /// The scripted upstream the app's default provider is: `push` turns, read `requests`.
    pub llm: FakeLlm,
    /// A client for requests of the test's own making.
    pub client: reqwest::Client,
    /// The database it runs on.
    pub database_url: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    /// The database the app made for itself, kept as long as the app and its restarts.
    database: Option<Database>,
}

/// What to start an app with; [`TestAppBuilder::start`] starts it.
#[must_use]
pub struct TestAppBuilder<'a> {
    database_url: Option<String>,
    database: Option<Database>,
    tools: Vec<(String, Arc<dyn ToolHandler>)>,
    overrides: Vec<Override<'a>>,
    llm: Option<FakeLlm>,
    script: Vec<Turn>,
}

/// A test configuration: the fake LLM as the default provider, quick timeouts.
pub fn test_config(database_url: &str, llm: &FakeLlm) -> Config {
    let mut config = Config::defaults().unwrap();
    config.server.host = "127.0.0.1".into();
    config.server.port = 0;
    // API keys are tested on their own (the `auth` tests); elsewhere every request is the
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

/// An HTTP tool at `url`, executed by the service, with the defaults of its configuration.
pub fn http_tool(name: &str, url: String, timeout_ms: Option<u64>) -> HttpToolConfig {
    HttpToolConfig {
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

impl<'a> TestAppBuilder<'a> {
    /// Runs the app on this database (the test keeps it, and may start more apps on it)
    /// instead of a fresh SQLite file of its own.
    pub fn database(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }

    /// Compiled-in tool handlers, each `(tool server label, handler)`, besides the built-in
    /// ones.
    pub fn tools(mut self, tools: Vec<(String, Arc<dyn ToolHandler>)>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Changes the configuration after [`test_config`] (in the order given).
    pub fn config(mut self, change: impl FnOnce(&mut Config) + Send + 'a) -> Self {
        self.overrides.push(Box::new(change));
        self
    }

    /// The scripted upstream to use (one that another instance of the test already uses)
    /// instead of a new one; it is the app's `llm` then.
    pub fn upstream(mut self, llm: FakeLlm) -> Self {
        self.llm = Some(llm);
        self
    }

    /// The upstream's script: turns it answers with, in order, queued before the app starts
    /// (a test can queue more on `app.llm` as it goes).
    pub fn script(mut self, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.script.extend(turns);
        self
    }

    /// Starts the app; returns once it listens.
    pub async fn start(self) -> TestApp {
        // RUST_LOG=switchyard=debug shows the service's logs with a failing test's output.
        let _ = switchyard::telemetry::init(switchyard::telemetry::Sink::Tests);
        let llm = match self.llm {
            Some(llm) => llm,
            None => FakeLlm::start().await.unwrap(),
        };
        for turn in self.script {
            llm.push(turn);
        }
        let mut database = self.database;
        let database_url = match self.database_url {
            Some(url) => url,
            None => database.get_or_insert_with(Database::sqlite).url.clone(),
        };
        let mut config = test_config(&database_url, &llm);
        for change in self.overrides {
            change(&mut config);
        }
        let app = Application::build_with_tools(config, self.tools)
            .await
            .unwrap();
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
            database,
        }
    }
}

impl TestApp {
    /// What to start an app with.
    pub fn builder<'a>() -> TestAppBuilder<'a> {
        TestAppBuilder {
            database_url: None,
            database: None,
            tools: Vec::new(),
            overrides: Vec::new(),
            llm: None,
            script: Vec::new(),
        }
    }

    /// The app with the test configuration on a fresh SQLite file.
    pub async fn start() -> TestApp {
        TestApp::builder().start().await
    }

    /// `path` on the app: `http://127.0.0.1:PORT/path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Graceful shutdown (as on SIGTERM), then a new app on the same database and upstream,
    /// with the test configuration changed by `change` (and no extra tool handlers).
    pub async fn restart(mut self, change: impl FnOnce(&mut Config) + Send) -> TestApp {
        self.shutdown().await;
        let TestApp {
            llm,
            database_url,
            database,
            ..
        } = self;
        let mut next = TestApp::builder()
            .database(&database_url)
            .upstream(llm)
            .config(change);
        next.database = database;
        next.start().await
    }

    /// Graceful shutdown, as on SIGTERM; returns once the app has stopped.
    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap().unwrap();
        }
    }

    /// A store on the app's database, beside the app (to make API keys, or to look at what it
    /// stored).
    pub async fn store(&self) -> Arc<dyn RunStore> {
        store::connect(&self.database_url, 2).await.unwrap()
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

    /// GETs; returns status and JSON body (`null` if it is not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// DELETEs; returns status and JSON body.
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

    /// Starts a streamed run; returns its id (from `response.created`) and the rest of the
    /// stream, read in the background.
    pub async fn start_stream(&self, body: Value) -> (String, JoinHandle<Sse>) {
        use futures_util::StreamExt;
        let response = self
            .client
            .post(self.url("/v1/responses"))
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

    /// Replays a run's event log (`query` adds e.g. `&starting_after=3`).
    pub async fn replay(&self, id: &str, query: &str) -> Sse {
        let url = self.url(&format!("/v1/responses/{id}?stream=true{query}"));
        read_sse(self.client.get(url).send().await.unwrap()).await
    }

    /// Polls until the stored run leaves `in_progress`.
    pub async fn wait_until_stopped(&self, id: &str) -> Value {
        self.wait_until_stopped_within(id, Duration::from_secs(5))
            .await
    }

    /// Polls until the stored run leaves `queued` and `in_progress`, sleeping `within` in all
    /// between the polls at most (a loaded machine adds the polls' own time).
    pub async fn wait_until_stopped_within(&self, id: &str, within: Duration) -> Value {
        const POLL: Duration = Duration::from_millis(25);
        let mut body = Value::Null;
        for _ in 0..within.div_duration_f64(POLL).ceil() as u32 {
            body = self.get(&format!("/v1/responses/{id}")).await.1;
            if body["status"] != "in_progress" && body["status"] != "queued" {
                return body;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("run {id} did not stop: {body}");
    }
}
