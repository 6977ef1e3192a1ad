//! MCP servers as tool sources, against servers this project did not write: the reference
//! server `@modelcontextprotocol/server-everything` (npm) over stdio and over streamable HTTP,
//! and `tests/mcp/counter_server.py`, written with the official Python SDK (`mcp` from PyPI),
//! which counts its calls in files so that a test sees what the server saw.
//!
//! `bash tests/mcp/setup.sh` installs them (CI runs it before the tests); a test that does not
//! find them fails, saying so. With `TEST_DATABASE_URL` set, the apps run on PostgreSQL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::config::{ApprovalDefault, Config, McpServerConfig};
use switchyard::tools::{ToolContext, ToolOutput};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::support::{
    Binary, ConfigFile, Database, FakeLlm, TestApp, Turn, assert_items_do_not_interleave,
    assert_numbering, done_items, read_until_cut,
};

/// Where `tests/mcp/setup.sh` put the servers.
struct Installed {
    node: String,
    /// server-everything's entry point.
    everything: PathBuf,
    python: PathBuf,
    counter: PathBuf,
}

fn installed() -> Installed {
    let cache = std::env::var_os("SWITCHYARD_MCP_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/switchyard-mcp")
        });
    let installed = Installed {
        node: "node".into(),
        everything: cache
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        python: cache.join("venv/bin/python"),
        counter: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/counter_server.py"),
    };
    if [&installed.everything, &installed.python]
        .iter()
        .any(|path| !path.exists())
    {
        set_up();
    }
    installed
}

/// Installs the servers (`tests/mcp/setup.sh`, pinned versions from npm and PyPI) the first
/// time a test of this binary finds them missing, so that `cargo test` alone is enough.
fn set_up() {
    static SETUP: std::sync::Once = std::sync::Once::new();
    SETUP.call_once(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/setup.sh");
        let output = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{} failed:\n{}{}",
            script.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

fn server(url: Option<String>, command: Option<String>, args: Vec<String>) -> McpServerConfig {
    McpServerConfig {
        url,
        headers: BTreeMap::new(),
        command,
        args,
        env: BTreeMap::new(),
        allowed_tools: None,
        require_approval: ApprovalDefault::Never,
        timeout_ms: None,
        startup_timeout_ms: 20_000,
        read_only_tools: Vec::new(),
        definition_only_tools: Vec::new(),
    }
}

/// server-everything started by the service, speaking stdio.
fn everything_over_stdio(tools: &[&str]) -> McpServerConfig {
    let installed = installed();
    let mut config = server(
        None,
        Some(installed.node),
        vec![installed.everything.display().to_string(), "stdio".into()],
    );
    config.allowed_tools = Some(tools.iter().map(|t| t.to_string()).collect());
    config
}

/// The Python server started by the service, keeping its counts in `dir`.
fn counter_over_stdio(dir: &Path) -> McpServerConfig {
    let installed = installed();
    let mut config = server(
        None,
        Some(installed.python.display().to_string()),
        vec![installed.counter.display().to_string()],
    );
    config
        .env
        .insert("COUNTER_DIR".into(), dir.display().to_string());
    config
}

/// A server process a test started itself; killed when dropped.
pub(crate) struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything over streamable HTTP on a port of its own; returns its URL once it
/// listens.
async fn everything_over_http() -> (Process, String) {
    let installed = installed();
    let port = free_port();
    let child = std::process::Command::new(&installed.node)
        .arg(&installed.everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .env("EVERYTHING_INSTANCE", "http")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let process = Process(child);
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (process, format!("http://127.0.0.1:{port}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server-everything did not listen on port {port}");
}

/// The Python server over streamable HTTP on a port of its own, keeping its counts in `dir`;
/// returns its URL once it listens.
pub(crate) async fn counter_over_http(dir: &Path) -> (Process, String) {
    let installed = installed();
    let port = free_port();
    let child = std::process::Command::new(&installed.python)
        .arg(&installed.counter)
        .args(["--http", &port.to_string()])
        .env("COUNTER_DIR", dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let process = Process(child);
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (process, format!("http://127.0.0.1:{port}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the counter server did not listen on port {port}");
}

/// Configures the MCP servers `(label, configuration)`.
fn mcp_servers(servers: Vec<(&str, McpServerConfig)>) -> impl FnOnce(&mut Config) + Send + '_ {
    move |config| {
        for (label, server) in servers {
            config.mcp_servers.insert(label.to_string(), server);
        }
    }
}

/// Waits until the server `label` offers every tool in `names`.
async fn wait_for_tools(app: &TestApp, label: &str, names: &[&str]) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let offered: Vec<String> = app
            .tools
            .server(label)
            .map(|server| server.tools.iter().map(|t| t.name().to_string()).collect())
            .unwrap_or_default();
        if names.iter().all(|name| offered.iter().any(|o| o == name)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("tool server {label} did not offer {names:?} within 30 s");
}

/// A count the Python server keeps (0 before its first).
fn count(dir: &Path, name: &str) -> u64 {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

async fn wait_for_count(dir: &Path, name: &str, at_least: u64) {
    for _ in 0..400 {
        if count(dir, name) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{name} did not reach {at_least} (it is {})",
        count(dir, name)
    );
}

fn mcp(label: &str) -> Value {
    json!({"type": "mcp", "server_label": label, "require_approval": "never"})
}

fn run_with(tools: Value) -> Value {
    json!({"model": "gpt-4o-mini", "input": "go", "tools": tools})
}

fn call_named<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["type"] == "mcp_call" && i["name"] == name)
        .unwrap_or_else(|| panic!("no mcp_call of {name} in {items:#?}"))
}

#[tokio::test]
async fn a_streamed_run_calls_a_stdio_server_and_an_http_server_concurrently() {
    let (_http, url) = everything_over_http().await;
    let mut over_http = server(Some(url), None, Vec::new());
    over_http.allowed_tools = Some(vec!["get-sum".into()]);
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![
            (
                "everything",
                everything_over_stdio(&["echo", "trigger-long-running-operation"]),
            ),
            ("everything_http", over_http),
        ]))
        .start()
        .await;
    wait_for_tools(
        &app,
        "everything",
        &["echo", "trigger-long-running-operation"],
    )
    .await;
    wait_for_tools(&app, "everything_http", &["get-sum"]).await;
    app.llm.push(Turn::tool_calls(&[
        (
            "call_slow",
            "trigger-long-running-operation",
            r#"{"duration": 3, "steps": 2}"#,
        ),
        ("call_sum", "get-sum", r#"{"a": 2, "b": 3}"#),
        ("call_echo", "echo", r#"{"message": "hi"}"#),
    ]));
    app.llm.push(Turn::text("Done."));

    let started = Instant::now();
    let sse = app
        .stream(&run_with(json!([
            mcp("everything"),
            mcp("everything_http")
        ])))
        .await;
    let took = started.elapsed();

    eprintln!("events of the run:");
    for event in &sse.events {
        let item = &event.data["item"];
        eprintln!(
            "  {} {}",
            event.event,
            match item.is_object() {
                true => format!(
                    "{} {} {}",
                    item["type"].as_str().unwrap_or(""),
                    item["server_label"].as_str().unwrap_or(""),
                    item["name"].as_str().unwrap_or("")
                ),
                false => String::new(),
            }
        );
    }
    assert_numbering(&sse);
    assert_items_do_not_interleave(&sse);
    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let listings: Vec<(&str, Vec<&str>)> = items
        .iter()
        .filter(|i| i["type"] == "mcp_list_tools")
        .map(|i| {
            let names = i["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap())
                .collect();
            (i["server_label"].as_str().unwrap(), names)
        })
        .collect();
    assert_eq!(
        listings,
        [
            ("everything", vec!["echo", "trigger-long-running-operation"]),
            ("everything_http", vec!["get-sum"]),
        ]
    );
    let sum_listed = &items
        .iter()
        .find(|i| i["type"] == "mcp_list_tools" && i["server_label"] == "everything_http")
        .unwrap()["tools"][0];
    assert_eq!(
        sum_listed["annotations"]["readOnlyHint"], true,
        "{sum_listed}"
    );
    assert_eq!(sum_listed["description"], "Returns the sum of two numbers");
    let sum = call_named(&items, "get-sum");
    assert_eq!(sum["server_label"], "everything_http");
    assert_eq!(sum["status"], "completed");
    assert!(sum["output"].as_str().unwrap().contains('5'), "{sum}");
    let echo = call_named(&items, "echo");
    assert_eq!(echo["server_label"], "everything");
    assert_eq!(echo["output"], "Echo: hi");
    let slow = call_named(&items, "trigger-long-running-operation");
    assert!(
        slow["output"]
            .as_str()
            .unwrap()
            .starts_with("Long running operation completed"),
        "{slow}"
    );
    // Called first, shown last (its first progress comes after 1.5 s): the quick calls did not
    // wait for it.
    let calls: Vec<&str> = items
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(calls.last(), Some(&"trigger-long-running-operation"));
    eprintln!("the run took {took:?}");
    // The model got every result back.
    let second = app.llm.requests()[1].to_string();
    assert!(second.contains("Echo: hi"), "{second}");
}

/// server-everything twice, every tool of each offered: started by the service over stdio as
/// `everything`, and over streamable HTTP as `everything_http`. Each process has
/// `EVERYTHING_INSTANCE` (`stdio` or `http`) in its environment, which its `get-env` tool
/// shows: a call's output says which server ran it.
async fn two_everythings(db: &Database) -> (Process, TestApp) {
    let (http, url) = everything_over_http().await;
    let mut over_stdio = everything_over_stdio(&[]);
    over_stdio.allowed_tools = None;
    over_stdio
        .env
        .insert("EVERYTHING_INSTANCE".into(), "stdio".into());
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![
            ("everything", over_stdio),
            ("everything_http", server(Some(url), None, Vec::new())),
        ]))
        .start()
        .await;
    for label in ["everything", "everything_http"] {
        wait_for_tools(&app, label, &["echo", "get-env", "get-sum"]).await;
    }
    (http, app)
}

/// Which server-everything ran a `get-env` call, from its output.
fn instance_of(call: &Value) -> &'static str {
    let output = call["output"].as_str().unwrap_or_default();
    match (
        output.contains(r#""EVERYTHING_INSTANCE": "stdio""#),
        output.contains(r#""EVERYTHING_INSTANCE": "http""#),
    ) {
        (true, false) => "stdio",
        (false, true) => "http",
        _ => panic!("no instance in {call}"),
    }
}

/// The names of the tools a request to the upstream offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn two_instances_of_one_server_are_usable_alone_and_together_each_call_reaching_its_own() {
    let db = Database::postgres_or_sqlite().await;
    let (_http, app) = two_everythings(&db).await;

    // Alone, each server's tools go by their own names, and its calls reach it.
    for (label, instance) in [("everything", "stdio"), ("everything_http", "http")] {
        app.llm.push(Turn::tool_call("c1", "get-env", "{}"));
        app.llm.push(Turn::text("ok"));
        let (status, body) = app
            .post("/v1/responses", &run_with(json!([mcp(label)])))
            .await;
        assert_eq!(status, 200, "{body}");
        let request = &app.llm.requests()[app.llm.requests().len() - 2];
        assert!(
            offered(request).contains(&"get-env".to_string()),
            "{request}"
        );
        let output = body["output"].as_array().unwrap().clone();
        let call = call_named(&output, "get-env");
        assert_eq!(call["server_label"], label);
        assert_eq!(instance_of(call), instance);
    }

    // Together: every tool both list is shown qualified by its server, and mapped back.
    let before = app.llm.requests().len();
    app.llm.push(Turn::tool_calls(&[
        ("c1", "everything__get-env", "{}"),
        ("c2", "everything_http__get-env", "{}"),
        ("c3", "everything_http__get-sum", r#"{"a": 2, "b": 3}"#),
    ]));
    app.llm.push(Turn::text("Done."));
    let tools = json!([mcp("everything"), mcp("everything_http")]);
    let sse = app.stream(&run_with(tools.clone())).await;
    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    assert_numbering(&sse);
    let shown = offered(&app.llm.requests()[before]);
    for name in [
        "everything__echo",
        "everything_http__echo",
        "everything_http__get-env",
    ] {
        assert!(shown.contains(&name.to_string()), "{shown:?}");
    }
    assert!(!shown.contains(&"echo".to_string()), "{shown:?}");
    let items = done_items(&sse);
    // The listings and the calls carry the servers' own names.
    for listing in items.iter().filter(|i| i["type"] == "mcp_list_tools") {
        let names: Vec<&str> = listing["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"get-env") && names.contains(&"echo"),
            "{listing}"
        );
    }
    let calls: Vec<&Value> = items.iter().filter(|i| i["type"] == "mcp_call").collect();
    let routed: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["server_label"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        routed,
        [
            ("everything", "get-env"),
            ("everything_http", "get-env"),
            ("everything_http", "get-sum")
        ]
    );
    assert_eq!(instance_of(calls[0]), "stdio");
    assert_eq!(instance_of(calls[1]), "http");
    assert!(
        calls[2]["output"].as_str().unwrap().contains('5'),
        "{}",
        calls[2]
    );

    // A client that concatenates the argument events gets each call's arguments once.
    for call in &calls {
        let id = call["id"].as_str().unwrap();
        let added = sse
            .events
            .iter()
            .find(|e| e.event == "response.output_item.added" && e.data["item"]["id"] == id)
            .unwrap();
        let mut arguments = added.data["item"]["arguments"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(arguments, "");
        for event in &sse.events {
            if event.event == "response.mcp_call_arguments.delta" && event.data["item_id"] == id {
                arguments.push_str(event.data["delta"].as_str().unwrap());
            }
        }
        assert_eq!(arguments, call["arguments"].as_str().unwrap(), "{call}");
    }

    // The model is shown its calls under the names it called them by, and so is it when the
    // client replays the output as input (no previous_response_id).
    let names_called = |request: &Value| -> Vec<String> {
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .map(|c| c["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let qualified = [
        "everything__get-env",
        "everything_http__get-env",
        "everything_http__get-sum",
    ];
    assert_eq!(names_called(&app.llm.requests()[before + 1]), qualified);
    let mut input = sse.last().data["response"]["output"]
        .as_array()
        .unwrap()
        .clone();
    input.push(json!({"role": "user", "content": "and again?"}));
    app.llm.push(Turn::text("again"));
    let (status, body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": input, "tools": tools}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names_called(app.llm.requests().last().unwrap()), qualified);
}

#[tokio::test]
async fn an_approval_finds_its_call_by_server_and_name_after_a_pause_on_every_backend() {
    for db in crate::support::backends().await {
        let (_http, app) = two_everythings(&db).await;
        let approve = |label: &str| json!({"type": "mcp", "server_label": label, "require_approval": "always"});
        let tools = json!([approve("everything"), approve("everything_http")]);
        app.llm
            .push(Turn::tool_call("c1", "everything_http__get-env", "{}"));
        let (status, paused) = app.post("/v1/responses", &run_with(tools.clone())).await;
        assert_eq!(status, 200, "{paused}");
        let request = paused["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "mcp_approval_request")
            .unwrap()
            .clone();
        assert_eq!(request["server_label"], "everything_http");
        assert_eq!(request["name"], "get-env");

        app.llm.push(Turn::text("Done."));
        let (status, done) = app
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "previous_response_id": paused["id"],
                    "tools": tools, "input": [{"type": "mcp_approval_response",
                    "approval_request_id": request["id"], "approve": true}]}),
            )
            .await;
        assert_eq!(status, 200, "{done}");
        let output = done["output"].as_array().unwrap().clone();
        let call = call_named(&output, "get-env");
        assert_eq!(call["server_label"], "everything_http");
        assert_eq!(call["approval_request_id"], request["id"]);
        assert_eq!(instance_of(call), "http");
    }
}

/// `/readyz`'s status and message.
async fn readiness(instance: &crate::support::Instance) -> (u16, String) {
    let response = reqwest::get(instance.url("/readyz")).await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (status, message)
}

async fn wait_until_ready(instance: &crate::support::Instance) {
    for _ in 0..600 {
        if readiness(instance).await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not ready after 30 s: {:?}", readiness(instance).await);
}

#[tokio::test]
async fn readiness_waits_for_each_mcp_server_to_list_once_or_to_fail_for_the_bound() {
    let installed = installed();
    let llm = FakeLlm::start().await.unwrap();
    // A server that is not there yet: not ready until it has listed its tools.
    let port = free_port();
    let file = ConfigFile::new(&format!(
        "[tools]\nmcp_ready_wait_ms = 600000\n[mcp_servers.late]\nurl = \"http://127.0.0.1:{port}/mcp\"\nstartup_timeout_ms = 2000\n"
    ));
    let instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    assert_eq!(
        readiness(&instance).await,
        (
            503,
            "waiting for MCP servers to list their tools: late".into()
        )
    );
    let server = std::process::Command::new(&installed.node)
        .arg(&installed.everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Process(server);
    wait_until_ready(&instance).await;
    instance
        .logs
        .wait_for(|line| line.contains("MCP server's tools published"))
        .await;
    // Listed once is enough: a server that goes down later takes its tools along, but the
    // replica stays in service.
    drop(server);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(readiness(&instance).await.0, 200);

    // A server that is down holds readiness back only for tools.mcp_ready_wait_ms.
    let file = ConfigFile::new(&format!(
        "[tools]\nmcp_ready_wait_ms = 1500\n[mcp_servers.absent]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
        free_port()
    ));
    let started = Instant::now();
    let instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    assert_eq!(
        readiness(&instance).await,
        (
            503,
            "waiting for MCP servers to list their tools: absent".into()
        )
    );
    wait_until_ready(&instance).await;
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test]
async fn progress_notifications_are_streamed_as_the_calls_output() {
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "everything",
            everything_over_stdio(&["trigger-long-running-operation"]),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "everything", &["trigger-long-running-operation"]).await;
    let server = app.tools.server("everything").unwrap();
    let tool = server.tools[0].clone();
    let streamed = Arc::new(Mutex::new(Vec::new()));
    let sink = streamed.clone();
    let output = ToolOutput::new(move |text| sink.lock().unwrap().push(text));
    let context = ToolContext {
        response_id: "resp_test".into(),
        call_id: "call_test".into(),
        tenant_id: "default".into(),
        cancel: CancellationToken::new(),
    };

    let result = tool
        .handler
        .call(context, json!({"duration": 0.6, "steps": 3}), output)
        .await;

    assert_eq!(result.error, None, "{}", result.text);
    // rmcp hands each notification to its own task, so the last one, sent just before the
    // result, may come after it (and is then dropped: the result says more). The others came
    // 200 ms and more before it, in order.
    let streamed = streamed.lock().unwrap().clone();
    assert!(streamed.len() >= 2 && streamed.len() <= 3, "{streamed:?}");
    let expected = ["progress 1/3\n", "progress 2/3\n", "progress 3/3\n"];
    assert_eq!(streamed, expected[..streamed.len()]);
}

#[tokio::test]
async fn structured_content_is_the_calls_data_an_image_reaches_client_and_model_and_a_resource_its_text()
 {
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "everything",
            everything_over_stdio(&[
                "get-structured-content",
                "get-tiny-image",
                "get-resource-reference",
            ]),
        )]))
        .start()
        .await;
    wait_for_tools(
        &app,
        "everything",
        &[
            "get-structured-content",
            "get-tiny-image",
            "get-resource-reference",
        ],
    )
    .await;
    app.llm.push(Turn::tool_calls(&[
        ("c1", "get-structured-content", r#"{"location": "Chicago"}"#),
        ("c2", "get-tiny-image", "{}"),
        (
            "c3",
            "get-resource-reference",
            r#"{"resourceType": "Text", "resourceId": 1}"#,
        ),
    ]));
    app.llm.push(Turn::text("Done."));

    let sse = app.stream(&run_with(json!([mcp("everything")]))).await;

    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let weather = call_named(&items, "get-structured-content");
    assert_eq!(
        weather["data"],
        json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
    );
    let image = call_named(&items, "get-tiny-image");
    let shown = image["output"].as_str().unwrap();
    assert!(shown.contains("[image: image/png, "), "{shown}");
    assert!(shown.len() < 1000, "no base64 in the tool message: {shown}");
    // The client gets the image itself, as an input_image part of the call's data.
    let part = &image["data"]["content"][0];
    assert_eq!(part["type"], "input_image", "{part}");
    assert_eq!(part["detail"], "auto");
    let url = part["image_url"].as_str().unwrap();
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url}"
    );
    // The model gets it after the turn's tool messages, in a user message naming the call.
    let messages = app.llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "tool", "user"]);
    let shown_images = &messages[5]["content"];
    let call_id = image["id"].as_str().unwrap();
    assert_eq!(
        shown_images[0]["text"],
        format!("The image returned by call {call_id} (get-tiny-image):")
    );
    assert_eq!(
        shown_images[1],
        json!({"type": "image_url", "image_url": {"url": url}})
    );
    let resource = call_named(&items, "get-resource-reference");
    let text = resource["output"].as_str().unwrap();
    assert!(text.contains("Resource 1"), "{text}");
}

#[tokio::test]
async fn an_mcp_servers_state_is_in_the_metrics() {
    let dir = TempDir::new().unwrap();
    let absent = server(
        Some(format!("http://127.0.0.1:{}/mcp", free_port())),
        None,
        Vec::new(),
    );
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![
            ("metered", counter_over_stdio(dir.path())),
            ("metered_absent", absent),
        ]))
        .start()
        .await;
    wait_for_tools(&app, "metered", &["count"]).await;

    // The gauges are set just after the tools are published.
    let scrape = || async {
        app.client
            .get(app.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let mut metrics = scrape().await;
    for _ in 0..100 {
        if metrics.contains(r#"switchyard_mcp_server_tools{server="metered"} 8"#) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        metrics = scrape().await;
    }

    for (line, expected) in [
        (r#"switchyard_mcp_server_up{server="metered"}"#, "1"),
        (r#"switchyard_mcp_server_up{server="metered_absent"}"#, "0"),
        (
            r#"switchyard_mcp_server_tools{server="metered_absent"}"#,
            "0",
        ),
    ] {
        let value = metrics
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("no {line} in\n{metrics}"));
        assert_eq!(value.trim(), expected, "{line}");
    }
    let tools = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"switchyard_mcp_server_tools{server="metered"}"#))
        .unwrap();
    // count, wait, fail, header, record_header, record_traceparent, grow and calculator
    // (builtin's has the same name: a tool belongs to its server); broken has a bad schema
    assert_eq!(tools.trim(), "8");
}

#[tokio::test]
async fn tools_listed_over_several_pages_are_all_offered() {
    let dir = TempDir::new().unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter",
            counter_over_stdio(dir.path()),
        )]))
        .start()
        .await;

    wait_for_tools(
        &app,
        "counter",
        &["count", "wait", "fail", "header", "grow"],
    )
    .await;

    // Two tools a page.
    assert!(
        count(dir.path(), "list-pages") >= 4,
        "{}",
        count(dir.path(), "list-pages")
    );
}

#[tokio::test]
async fn an_error_result_is_a_tool_error_the_model_sees() {
    let dir = TempDir::new().unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter",
            counter_over_stdio(dir.path()),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["fail"]).await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "fail",
        r#"{"message": "no such city"}"#,
    ));
    app.llm.push(Turn::text("Sorry."));

    let sse = app.stream(&run_with(json!([mcp("counter")]))).await;

    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let call = call_named(&items, "fail");
    assert_eq!(call["status"], "failed");
    assert_eq!(call["output"], Value::Null);
    assert_eq!(call["error"]["type"], "mcp_tool_execution_error");
    assert!(
        call["error"]["content"]
            .as_str()
            .unwrap()
            .contains("no such city"),
        "{call}"
    );
    assert!(sse.types().contains(&"response.mcp_call.failed"));
    let second = app.llm.requests()[1].to_string();
    assert!(second.contains("no such city"), "{second}");
}

#[tokio::test]
async fn cancelling_a_run_during_a_long_call_cancels_the_call_at_the_server() {
    let dir = TempDir::new().unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter",
            counter_over_stdio(dir.path()),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["wait"]).await;
    app.llm
        .push(Turn::tool_call("call_1", "wait", r#"{"seconds": 30}"#));
    let mut body = run_with(json!([mcp("counter")]));
    body["stream"] = json!(true);

    let (id, stream) = app.start_stream(body).await;
    wait_for_count(dir.path(), "wait-started", 1).await;
    let (status, _) = app
        .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);

    // The server saw the cancellation: its tool stopped waiting.
    wait_for_count(dir.path(), "wait-cancelled", 1).await;
    assert_eq!(count(dir.path(), "wait-finished"), 0);
    let sse = stream.await.unwrap();
    assert_eq!(sse.last().data["response"]["status"], "cancelled");
}

#[tokio::test]
async fn a_call_that_times_out_is_cancelled_at_the_server() {
    let dir = TempDir::new().unwrap();
    let mut counter = counter_over_stdio(dir.path());
    counter.timeout_ms = Some(500);
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![("counter", counter)]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["wait"]).await;
    app.llm
        .push(Turn::tool_call("call_1", "wait", r#"{"seconds": 30}"#));
    app.llm.push(Turn::text("Too slow."));

    let sse = app.stream(&run_with(json!([mcp("counter")]))).await;

    let items = done_items(&sse);
    let call = call_named(&items, "wait");
    assert_eq!(
        call["error"]["content"],
        "The tool 'wait' did not finish within 500 ms."
    );
    wait_for_count(dir.path(), "wait-cancelled", 1).await;
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_is_started_again() {
    let dir = TempDir::new().unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter",
            counter_over_stdio(dir.path()),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["wait", "count"]).await;
    app.llm
        .push(Turn::tool_call("call_1", "wait", r#"{"seconds": 30}"#));
    app.llm.push(Turn::text("It broke."));
    let mut body = run_with(json!([mcp("counter")]));
    body["stream"] = json!(true);

    let (_, stream) = app.start_stream(body).await;
    wait_for_count(dir.path(), "wait-started", 1).await;
    let pid = std::fs::read_to_string(dir.path().join("pid")).unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .unwrap()
            .success()
    );
    let sse = tokio::time::timeout(Duration::from_secs(20), stream)
        .await
        .expect("the run ended")
        .unwrap();

    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let call = call_named(&items, "wait");
    assert_eq!(call["status"], "failed");
    let error = call["error"]["content"].as_str().unwrap();
    assert!(
        error.starts_with("The MCP server 'counter' failed the call"),
        "{error}"
    );

    // Started again (a new process), its tools offered again: later calls work.
    wait_for_count(dir.path(), "starts", 2).await;
    assert_ne!(
        std::fs::read_to_string(dir.path().join("pid")).unwrap(),
        pid
    );
    wait_for_tools(&app, "counter", &["count"]).await;
    app.llm
        .push(Turn::tool_call("call_2", "count", r#"{"label": "after"}"#));
    app.llm.push(Turn::text("Counted."));
    let sse = app.stream(&run_with(json!([mcp("counter")]))).await;
    let items = done_items(&sse);
    assert_eq!(call_named(&items, "count")["output"], "after: call 1");
}

#[tokio::test]
async fn a_server_that_requires_approval_pauses_the_run_and_runs_the_call_once_approved() {
    let dir = TempDir::new().unwrap();
    let mut counter = counter_over_stdio(dir.path());
    counter.require_approval = ApprovalDefault::Always;
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![("counter", counter)]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["count"]).await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "count",
        r#"{"label": "approved"}"#,
    ));
    app.llm.push(Turn::text("Counted."));
    let body = json!({"model": "gpt-4o-mini", "input": "go",
        "tools": [{"type": "mcp", "server_label": "counter"}]});

    let (status, paused) = app.post("/v1/responses", &body).await;

    assert_eq!(status, 200, "{paused}");
    let request = &paused["output"][1];
    assert_eq!(request["type"], "mcp_approval_request", "{paused}");
    assert_eq!(request["server_label"], "counter");
    assert_eq!(request["name"], "count");
    assert_eq!(count(dir.path(), "calls-approved"), 0, "nothing ran yet");

    let id = paused["id"].as_str().unwrap();
    let approval = json!({"tool_approvals": [
        {"approval_request_id": request["id"], "approve": true}
    ]});
    let (status, done) = app
        .post(
            &format!("/v1/responses/{id}/submit_tool_outputs"),
            &approval,
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let call = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap()
        .clone();
    assert_eq!(call["output"], "approved: call 1");
    assert_eq!(call["approval_request_id"], request["id"]);
    assert_eq!(count(dir.path(), "calls-approved"), 1);
}

#[tokio::test]
async fn tools_a_server_adds_while_running_are_offered_after_its_list_changed_notice() {
    let dir = TempDir::new().unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter",
            counter_over_stdio(dir.path()),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "counter", &["grow"]).await;
    app.llm
        .push(Turn::tool_call("call_1", "grow", r#"{"name": "sprout"}"#));
    app.llm.push(Turn::text("Grown."));

    let sse = app.stream(&run_with(json!([mcp("counter")]))).await;
    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );

    wait_for_tools(&app, "counter", &["sprout"]).await;
    app.llm.push(Turn::tool_call("call_2", "sprout", "{}"));
    app.llm.push(Turn::text("It is there."));
    let sse = app.stream(&run_with(json!([mcp("counter")]))).await;
    let items = done_items(&sse);
    assert_eq!(call_named(&items, "sprout")["output"], "sprout is here");
}

#[tokio::test]
async fn a_slow_or_absent_server_holds_up_neither_the_start_nor_the_runs() {
    let started = Instant::now();
    let slow = server(None, Some("sleep".into()), vec!["30".into()]);
    let absent = server(
        Some(format!("http://127.0.0.1:{}/mcp", free_port())),
        None,
        Vec::new(),
    );
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![("slow", slow), ("absent", absent)]))
        .start()
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the start took {:?}",
        started.elapsed()
    );
    app.llm.push(Turn::tool_call(
        "call_1",
        "calculator",
        r#"{"expression": "6 * 7"}"#,
    ));
    app.llm.push(Turn::text("42"));

    let sse = app
        .stream(&run_with(json!([
            mcp("builtin"),
            mcp("slow"),
            // The tools of a server that is down cannot be checked: not the client's mistake.
            {"type": "mcp", "server_label": "absent", "allowed_tools": ["search"],
             "require_approval": "never"},
        ])))
        .await;

    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    assert_eq!(call_named(&items, "calculator")["output"], "42");
    for label in ["slow", "absent"] {
        let listing = items
            .iter()
            .find(|i| i["type"] == "mcp_list_tools" && i["server_label"] == label)
            .unwrap();
        assert_eq!(
            listing["tools"],
            json!([]),
            "{label} has no tools while it is down"
        );
        assert_eq!(
            listing["error"],
            format!(
                "The MCP server '{label}' is not connected; its tools are unavailable for now."
            )
        );
        assert_eq!(listing["status"], "failed", "after mcp_list_tools.failed");
    }
    let failed = sse
        .types()
        .iter()
        .filter(|t| **t == "response.mcp_list_tools.failed")
        .count();
    assert_eq!(failed, 2);
    let builtin = items
        .iter()
        .find(|i| i["type"] == "mcp_list_tools" && i["server_label"] == "builtin")
        .unwrap();
    assert!(builtin.get("error").is_none(), "{builtin}");
    assert_eq!(builtin["status"], "completed");
}

#[tokio::test]
async fn a_bad_schema_is_left_out_with_a_warning_and_a_name_builtin_has_too_is_kept() {
    let installed = installed();
    let dir = TempDir::new().unwrap();
    let state = dir.path().join("counter");
    let config = format!(
        "[mcp_servers.counter]\ncommand = {:?}\nargs = [{:?}]\nenv = {{ COUNTER_DIR = {:?} }}\n",
        installed.python.display().to_string(),
        installed.counter.display().to_string(),
        state.display().to_string(),
    );
    let llm = FakeLlm::start().await.unwrap();
    let file = ConfigFile::new(&config);
    let instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    let (address, logs) = (&instance.address, &instance.logs);

    let schema = logs
        .wait_for(|line| line.contains("\"broken\"") && line.contains("invalid parameter schema"))
        .await;
    assert!(schema.contains("\"counter\""), "{schema}");
    assert!(schema.contains("WARN"), "{schema}");

    // The broken tool is left out; the others are offered, `calculator` too (a tool belongs
    // to its server: builtin's does not take the name away).
    let client = reqwest::Client::new();
    for (name, expected) in [("broken", 400), ("calculator", 200), ("count", 200)] {
        let body = json!({"model": "gpt-4o-mini", "input": "go", "tools": [
            {"type": "mcp", "server_label": "counter", "allowed_tools": [name]}
        ]});
        if expected == 200 {
            llm.push(Turn::text("ok"));
        }
        let response = client
            .post(format!("http://{address}/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let reply: Value = response.json().await.unwrap();
        assert_eq!(status, expected, "{name}: {reply}");
        if expected == 400 {
            assert_eq!(
                reply["error"]["message"],
                format!("Tool server 'counter' has no tool '{name}'.")
            );
        }
    }
}

#[tokio::test]
async fn an_mcp_server_configuration_that_cannot_work_is_refused_naming_the_key() {
    let mut config = Config::defaults().unwrap();
    let mut both = server(
        Some("http://127.0.0.1:9/mcp".into()),
        Some("node".into()),
        Vec::new(),
    );
    both.timeout_ms = Some(0);
    config.mcp_servers.insert("both".into(), both);
    config
        .mcp_servers
        .insert("neither".into(), server(None, None, Vec::new()));
    let mut reserved = server(Some("http://127.0.0.1:9/mcp".into()), None, Vec::new());
    reserved
        .headers
        .insert("Accept".into(), "text/plain".into());
    config.mcp_servers.insert("reserved".into(), reserved);
    config.mcp_servers.insert(
        "builtin".into(),
        server(None, Some("node".into()), Vec::new()),
    );
    let error = switchyard::app::Checked::new(&config, Vec::new())
        .err()
        .expect("refused");
    let problems = error.problems();
    let has = |start: &str| problems.iter().any(|p| p.starts_with(start));
    assert!(
        has("mcp_servers.both.command: is set, and so is url"),
        "{problems:#?}"
    );
    assert!(
        has("mcp_servers.both.timeout_ms: must be positive"),
        "{problems:#?}"
    );
    assert!(has("mcp_servers.neither: needs url"), "{problems:#?}");
    assert!(
        has("mcp_servers.reserved.headers.Accept: is set by the MCP transport itself"),
        "{problems:#?}"
    );
    assert!(
        has("mcp_servers.builtin: the label \"builtin\" is taken"),
        "{problems:#?}"
    );
}

/// A streamed run on an instance (the binary) that calls the Python server's `wait`; the
/// instance is killed while the call runs, and another (on SQLite: the restarted process) on
/// the same database takes the run over. `wait` is read-only or not; the model asks for it
/// again when asked for the turn again. Returns the run as it ended, and the server's state.
async fn kill_mid_call(database_url: &str, read_only: bool) -> (Value, TempDir) {
    kill_mid_call_with(database_url, read_only, false).await
}

/// As [`kill_mid_call`]; with `slow`, B also has an MCP server that takes 2 s to fail its
/// first attempt, which B's start does not wait for (the run is taken over after it).
async fn kill_mid_call_with(database_url: &str, read_only: bool, slow: bool) -> (Value, TempDir) {
    let state = TempDir::new().unwrap();
    let mut counter = counter_over_stdio(state.path());
    if read_only {
        counter.read_only_tools = vec!["wait".into()];
    }
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Turn::tool_call("call_1", "wait", r#"{"seconds": 30}"#));
    if read_only {
        llm.push(Turn::tool_call("call_2", "wait", r#"{"seconds": 0.2}"#));
    }
    llm.push(Turn::text("Done waiting."));
    let config = ConfigFile::new(
        &toml::to_string(&BTreeMap::from([(
            "mcp_servers",
            BTreeMap::from([("counter", counter.clone())]),
        )]))
        .unwrap(),
    );
    let mut a = Binary::new()
        .database(database_url)
        .upstream(&llm)
        .config_file(&config.path)
        .spawn();
    a.logs
        .wait_for(|line| line.contains("MCP server's tools published"))
        .await;
    let response = reqwest::Client::new()
        .post(a.url("/v1/responses"))
        .json(
            &json!({"model": "gpt-4o-mini", "input": "go", "stream": true,
                      "tools": [mcp("counter")]}),
        )
        .send()
        .await
        .unwrap();
    let (first, first_seen) = tokio::sync::oneshot::channel();
    let live = tokio::spawn(read_until_cut(response, first));
    first_seen.await.unwrap();
    wait_for_count(state.path(), "wait-started", 1).await;
    a.kill();
    let id = live.await.unwrap().response_id();

    let started = Instant::now();
    // B, on the same database and upstream.
    let b = TestApp::builder()
        .database(database_url)
        .upstream(llm)
        .config(move |c| {
            c.runs.lease_ttl_ms = 1_000;
            c.runs.sweep_interval_ms = 100;
            c.mcp_servers.insert("counter".into(), counter);
            if slow {
                let mut slow = server(None, Some("sleep".into()), vec!["30".into()]);
                slow.startup_timeout_ms = 6_000;
                c.mcp_servers.insert("slow".into(), slow);
            }
        })
        .start()
        .await;
    if slow {
        assert!(
            started.elapsed() < Duration::from_millis(4_000),
            "the start waited for the slow server: {:?}",
            started.elapsed()
        );
    }
    let done = b
        .wait_until_stopped_within(&id, Duration::from_secs(20))
        .await;
    assert_eq!(
        done["status"], "completed",
        "the run was not completed: {done}"
    );
    (done, state)
}

fn mcp_calls(run: &Value) -> Vec<Value> {
    run["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .cloned()
        .collect()
}

async fn a_call_with_effects_cut_by_a_crash_is_reported_interrupted_and_never_run_again(
    database_url: &str,
) {
    let (run, state) = kill_mid_call(database_url, false).await;

    let calls = mcp_calls(&run);
    assert_eq!(calls.len(), 1, "{run}");
    assert_eq!(calls[0]["status"], "failed");
    let error = calls[0]["error"]["content"].as_str().unwrap();
    assert!(error.contains("interrupted"), "{error}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count(state.path(), "wait-started"), 1, "it ran once");
}

async fn a_read_only_call_cut_by_a_crash_runs_again_with_its_turn(database_url: &str) {
    let (run, state) = kill_mid_call(database_url, true).await;

    let calls = mcp_calls(&run);
    let completed: Vec<&Value> = calls
        .iter()
        .filter(|c| c["status"] == "completed")
        .collect();
    assert_eq!(completed.len(), 1, "{run}");
    assert_eq!(completed[0]["output"], "waited 0.2 s");
    assert_eq!(count(state.path(), "wait-started"), 2, "it ran again");
    assert_eq!(count(state.path(), "wait-finished"), 1);
}

#[tokio::test]
async fn an_mcp_call_with_effects_cut_by_a_crash_is_never_run_again_after_a_restart_on_sqlite() {
    let db = Database::sqlite();
    a_call_with_effects_cut_by_a_crash_is_reported_interrupted_and_never_run_again(&db.url).await;
}

#[tokio::test]
async fn a_read_only_mcp_call_cut_by_a_crash_runs_again_after_a_restart_on_sqlite() {
    let db = Database::sqlite();
    a_read_only_call_cut_by_a_crash_runs_again_with_its_turn(&db.url).await;
}

#[tokio::test]
async fn a_start_with_runs_to_take_over_does_not_wait_for_a_slow_mcp_server() {
    let db = Database::sqlite();
    let (run, state) = kill_mid_call_with(&db.url, true, true).await;

    let calls = mcp_calls(&run);
    assert!(
        calls
            .iter()
            .any(|c| c["status"] == "completed" && c["output"] == "waited 0.2 s"),
        "{run}"
    );
    assert_eq!(count(state.path(), "wait-started"), 2, "it ran again");
}

#[tokio::test]
async fn mcp_calls_cut_by_a_crash_follow_the_same_rules_on_another_instance_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    a_call_with_effects_cut_by_a_crash_is_reported_interrupted_and_never_run_again(&db.url).await;
    let Some(db) = Database::postgres().await else {
        return;
    };
    a_read_only_call_cut_by_a_crash_runs_again_with_its_turn(&db.url).await;
}

#[tokio::test]
async fn an_http_server_gets_the_configured_headers_with_variables_from_the_environment() {
    let dir = TempDir::new().unwrap();
    let (_server, url) = counter_over_http(dir.path()).await;
    let mut counter = server(Some(url.clone()), None, Vec::new());
    // HOME is set wherever tests run.
    counter
        .headers
        .insert("X-Home".into(), "home is ${HOME}".into());
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![("counter_http", counter)]))
        .start()
        .await;
    wait_for_tools(&app, "counter_http", &["header", "count"]).await;
    // A configured server stays connected (what `wait_until_disconnected` tells apart).
    assert!(connections_to(port) > 0);
    app.llm.push(Turn::tool_calls(&[
        ("c1", "header", r#"{"name": "x-home"}"#),
        ("c2", "count", r#"{"label": "http"}"#),
    ]));
    app.llm.push(Turn::text("Done."));

    let sse = app.stream(&run_with(json!([mcp("counter_http")]))).await;

    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let home = std::env::var("HOME").unwrap();
    assert_eq!(
        call_named(&items, "header")["output"],
        format!("home is {home}")
    );
    assert_eq!(call_named(&items, "count")["output"], "http: call 1");
    assert_eq!(count(dir.path(), "calls-http"), 1);
}

#[tokio::test]
async fn an_http_server_that_restarts_is_used_again() {
    let dir = TempDir::new().unwrap();
    let (server_process, url) = counter_over_http(dir.path()).await;
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(mcp_servers(vec![(
            "counter_http",
            server(Some(url), None, Vec::new()),
        )]))
        .start()
        .await;
    wait_for_tools(&app, "counter_http", &["count"]).await;
    drop(server_process);
    // The same server again, on the same port (a new process, without the old session).
    let installed = installed();
    let _again = Process(
        std::process::Command::new(&installed.python)
            .arg(&installed.counter)
            .args(["--http", &port.to_string()])
            .env("COUNTER_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_count(dir.path(), "starts", 2).await;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A call may fail while the connection is found broken and made again; one soon works.
    let mut outputs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        app.llm
            .push(Turn::tool_call("c1", "count", r#"{"label": "again"}"#));
        app.llm.push(Turn::text("Done."));
        let sse = app.stream(&run_with(json!([mcp("counter_http")]))).await;
        let call = call_named(&done_items(&sse), "count").clone();
        outputs.push(call.to_string());
        if call["output"] == "again: call 1" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("no call worked after the server restarted: {outputs:#?}");
}

#[tokio::test]
async fn credentials_a_request_sends_for_a_tool_server_are_neither_echoed_nor_stored() {
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder().database(&db.url).start().await;
    app.llm.push(Turn::text("Hello."));
    let body = json!({"model": "gpt-4o-mini", "input": "hi", "tools": [
        {"type": "mcp", "server_label": "builtin", "require_approval": "never",
         "headers": {"Authorization": "Bearer sk-very-secret"}, "authorization": "sk-also-secret"}
    ]});

    let (status, created) = app.post("/v1/responses", &body).await;

    assert_eq!(status, 200, "{created}");
    assert_eq!(
        created["tools"],
        json!([{"type": "mcp", "server_label": "builtin", "require_approval": "never"}])
    );
    let id = created["id"].as_str().unwrap();
    let (_, stored) = app.get(&format!("/v1/responses/{id}")).await;
    let replayed = app.replay(id, "").await;
    for shown in [stored.to_string(), replayed.raw] {
        assert!(!shown.contains("secret"), "{shown}");
    }

    // Nor those in an additional_tools input item, which is stored as an input item.
    app.llm.push(Turn::text("Hello again."));
    let body = json!({"model": "gpt-4o-mini", "previous_response_id": id, "input": [
        {"type": "additional_tools", "tools": [
            {"type": "mcp", "server_label": "builtin", "require_approval": "never",
             "headers": {"Authorization": "Bearer sk-very-secret"}, "authorization": "sk-also-secret"}
        ]},
        {"role": "user", "content": "and now?"}
    ]});
    let (status, created) = app.post("/v1/responses", &body).await;
    assert_eq!(status, 200, "{created}");
    let next = created["id"].as_str().unwrap();
    let (_, items) = app.get(&format!("/v1/responses/{next}/input_items")).await;
    assert!(items.to_string().contains("additional_tools"), "{items}");
    let (_, stored) = app.get(&format!("/v1/responses/{next}")).await;
    for shown in [items.to_string(), stored.to_string()] {
        assert!(!shown.contains("secret"), "{shown}");
    }
}

/// Allows servers named in requests on `hosts` (`allow_private` for the loopback servers of
/// the tests).
fn request_servers(hosts: &[&str], allow_private: bool) -> impl FnOnce(&mut Config) + Send {
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    move |config| {
        config.tools.request_mcp.allowed_hosts = hosts;
        config.tools.request_mcp.allow_private = allow_private;
    }
}

/// Open TCP connections to `port` on this machine (client ends: the remote port is `port`).
fn connections_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // rem_address is ADDR:PORT in hex; state 01 is ESTABLISHED.
                    fields.len() > 3
                        && fields[3] == "01"
                        && fields[2].rsplit(':').next() == Some(&format!("{port:04X}"))
                })
                .count()
        })
        .sum()
}

/// Waits (up to 10 s) until nothing is connected to the server at `url` any more.
async fn wait_until_disconnected(url: &str) {
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    for _ in 0..200 {
        if connections_to(port) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} connections to {url} are still open",
        connections_to(port)
    );
}

fn named(label: &str, url: &str) -> Value {
    json!({"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"})
}

#[tokio::test]
async fn servers_named_in_a_request_are_refused_unless_the_operator_lists_their_host() {
    let (_http, url) = everything_over_http().await;
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp");
    let cases = [
        // Off by default.
        (
            Vec::new(),
            true,
            url.clone(),
            "are not supported on this service (the operator has not enabled them)",
        ),
        (
            vec!["mcp.example.com"],
            true,
            url.clone(),
            "The host '127.0.0.1' is not in the allowed list.",
        ),
        // Listed, but loopback: a name that resolves to it, an IP literal, IPv4 in IPv6.
        (
            vec!["localhost"],
            false,
            format!("http://localhost:{port}/mcp"),
            "is private, loopback or link-local; connecting to it is not allowed.",
        ),
        (
            vec!["127.0.0.1"],
            false,
            url.clone(),
            "The address 127.0.0.1 of '127.0.0.1' is private, loopback or link-local",
        ),
        (
            vec!["::ffff:7f00:1"],
            false,
            format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
            "is private, loopback or link-local",
        ),
        (
            vec!["127.0.0.1"],
            true,
            "file:///etc/passwd".to_string(),
            "Only http and https URLs",
        ),
    ];
    for (hosts, allow_private, url, expected) in cases {
        let db = Database::postgres_or_sqlite().await;
        let app = TestApp::builder()
            .database(&db.url)
            .config(request_servers(&hosts, allow_private))
            .start()
            .await;
        let (status, reply) = app
            .post("/v1/responses", &run_with(json!([named("mine", &url)])))
            .await;
        assert_eq!(status, 400, "{hosts:?} {url}: {reply}");
        assert_eq!(reply["error"]["param"], "tools[0].server_url", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{hosts:?} {url}: {message}");
        assert!(app.llm.requests().is_empty());
    }

    // A label the operator's configuration has, with credentials: not the request's server.
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(request_servers(&["127.0.0.1"], true))
        .start()
        .await;
    let mut builtin = named("builtin", &url);
    builtin["headers"] = json!({"Authorization": "Bearer sk-x"});
    let (status, reply) = app.post("/v1/responses", &run_with(json!([builtin]))).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "tools[0].server_label", "{reply}");

    // Headers the transport sets, and values that cannot be sent (never quoted back).
    for headers in [
        json!({"Mcp-Session-Id": "mine"}),
        json!({"Authorization": "Bearer sk-bad\nsecret"}),
    ] {
        let mut tool = named("mine", &url);
        tool["headers"] = headers.clone();
        let (status, reply) = app.post("/v1/responses", &run_with(json!([tool]))).await;
        assert_eq!(status, 400, "{headers}: {reply}");
        assert_eq!(reply["error"]["param"], "tools[0].headers", "{reply}");
        assert!(!reply.to_string().contains("secret"), "{reply}");
    }
}

#[tokio::test]
async fn a_server_named_in_a_request_on_a_listed_host_is_listed_and_called_in_a_streamed_run() {
    let (_http, url) = everything_over_http().await;
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(request_servers(&["127.0.0.1"], true))
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_sum",
        "get-sum",
        r#"{"a": 2, "b": 3}"#,
    ));
    app.llm.push(Turn::text("Done."));
    let mut tool = named("mine", &url);
    tool["allowed_tools"] = json!(["get-sum", "echo"]);

    let sse = app.stream(&run_with(json!([tool]))).await;

    assert_numbering(&sse);
    assert_items_do_not_interleave(&sse);
    assert_eq!(
        sse.last().data["response"]["status"],
        "completed",
        "{}",
        sse.raw
    );
    let items = done_items(&sse);
    let listing = items
        .iter()
        .find(|i| i["type"] == "mcp_list_tools")
        .unwrap();
    assert_eq!(listing["server_label"], "mine");
    let names: Vec<&str> = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "get-sum"]);
    let sum = call_named(&items, "get-sum");
    assert_eq!(sum["server_label"], "mine");
    assert_eq!(sum["status"], "completed");
    assert!(sum["output"].as_str().unwrap().contains('5'), "{sum}");
    // The run stopped: its connection is closed.
    wait_until_disconnected(&url).await;

    // A server that cannot be reached fails its listing, not the request.
    app.llm.push(Turn::text("No tools."));
    let absent = format!("http://127.0.0.1:{}/mcp", free_port());
    let sse = app.stream(&run_with(json!([named("gone", &absent)]))).await;
    assert_eq!(sse.last().data["response"]["status"], "completed");
    let listing = done_items(&sse)
        .into_iter()
        .find(|i| i["type"] == "mcp_list_tools")
        .unwrap();
    assert!(
        listing["error"]
            .as_str()
            .unwrap()
            .starts_with("The MCP server 'gone' could not be used"),
        "{listing}"
    );
}

#[tokio::test]
async fn a_server_named_in_a_request_waits_for_approval_by_default() {
    let dir = TempDir::new().unwrap();
    let (_server, url) = counter_over_http(dir.path()).await;
    let db = Database::postgres_or_sqlite().await;
    let app = TestApp::builder()
        .database(&db.url)
        .config(request_servers(&["127.0.0.1"], true))
        .start()
        .await;
    app.llm
        .push(Turn::tool_call("call_1", "count", r#"{"label": "named"}"#));
    let body = run_with(json!([{"type": "mcp", "server_label": "mine", "server_url": url}]));

    let (status, paused) = app.post("/v1/responses", &body).await;

    assert_eq!(status, 200, "{paused}");
    let request = &paused["output"][1];
    assert_eq!(request["type"], "mcp_approval_request", "{paused}");
    assert_eq!(request["server_label"], "mine");
    assert_eq!(request["name"], "count");
    assert_eq!(count(dir.path(), "calls-named"), 0, "nothing ran yet");
    // The run paused: its connection is closed.
    wait_until_disconnected(&url).await;

    // Approved, the resumed run connects again (the stored tools say where) and calls it once.
    app.llm.push(Turn::text("Counted."));
    let id = paused["id"].as_str().unwrap();
    let approval = json!({"tool_approvals": [
        {"approval_request_id": request["id"], "approve": true}
    ]});
    let (status, done) = app
        .post(
            &format!("/v1/responses/{id}/submit_tool_outputs"),
            &approval,
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let call = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_call")
        .unwrap()
        .clone();
    assert_eq!(call["output"], "named: call 1", "{call}");
    assert_eq!(count(dir.path(), "calls-named"), 1);
}

#[tokio::test]
async fn headers_of_a_server_named_in_a_request_reach_it_and_nothing_else() {
    let dir = TempDir::new().unwrap();
    let state = dir.path().join("counter");
    let (_server, url) = counter_over_http(&state).await;
    let config = "[tools.request_mcp]\nallowed_hosts = [\"127.0.0.1\"]\nallow_private = true\n";
    let llm = FakeLlm::start().await.unwrap();
    let file = ConfigFile::new(config);
    let instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    let (address, logs) = (&instance.address, &instance.logs);
    let secret = "sk-request-secret-4242";
    llm.push(Turn::tool_call(
        "call_1",
        "record_header",
        r#"{"name": "authorization"}"#,
    ));
    llm.push(Turn::text("Done."));
    let mut tool = named("mine", &url);
    tool["headers"] = json!({"Authorization": format!("Bearer {secret}")});
    let body = json!({"model": "gpt-4o-mini", "input": "go", "tools": [tool], "stream": true});

    let client = reqwest::Client::new();
    let base = format!("http://{address}/v1/responses");
    let streamed = client
        .post(&base)
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    assert!(streamed.contains("response.completed"), "{streamed}");
    assert!(streamed.contains("\"output\":\"recorded\""), "{streamed}");
    assert_eq!(
        std::fs::read_to_string(state.join("header-authorization")).unwrap(),
        format!("Bearer {secret}")
    );
    let id = streamed
        .split("\"id\":\"")
        .find(|s| s.starts_with("resp_"))
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    // OpenAI's `authorization` (an access token) is sent as a bearer Authorization header.
    let token = "sk-token-secret-4343";
    llm.push(Turn::tool_call(
        "call_2",
        "record_header",
        r#"{"name": "authorization"}"#,
    ));
    llm.push(Turn::text("Done."));
    let mut tool = named("mine", &url);
    tool["authorization"] = json!(token);
    let body = json!({"model": "gpt-4o-mini", "input": "go", "tools": [tool]});
    let reply: Value = client
        .post(&base)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reply["status"], "completed", "{reply}");
    assert_eq!(
        std::fs::read_to_string(state.join("header-authorization")).unwrap(),
        format!("Bearer {token}")
    );
    let second = reply["id"].as_str().unwrap().to_string();
    let mut shown = vec![streamed, reply.to_string()];
    shown.push(
        client
            .get(format!("{base}/{second}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    for path in [
        format!("{base}/{id}"),
        format!("{base}/{id}/input_items"),
        format!("{base}/{id}?stream=true"),
    ] {
        shown.push(
            client
                .get(&path)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    assert!(shown[3].contains("\"server_url\""), "{}", shown[3]);
    for text in shown {
        assert!(!text.contains(secret) && !text.contains(token), "{text}");
    }
    let lines = logs.lines();
    assert!(!lines.is_empty());
    for line in lines {
        assert!(!line.contains(secret) && !line.contains(token), "{line}");
    }
}

#[tokio::test]
async fn a_server_named_in_a_request_is_reached_at_the_checked_addresses_only() {
    use switchyard::tools::mcp::RequestServer;
    let (_http, url) = everything_over_http().await;
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let pinned = vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))];
    // A name nothing resolves: the connection goes to the address that was checked, and is
    // never looked up again (DNS rebinding).
    let server = RequestServer::connect(
        "pinned",
        &format!("http://mcp.unresolvable.invalid:{port}/mcp"),
        pinned,
        Default::default(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(server.error, None);
    assert!(server.handlers.iter().any(|h| h.name() == "echo"));

    // A redirect is not followed: it would lead to an address nobody checked.
    let followed = Arc::new(Mutex::new(0usize));
    let counter = followed.clone();
    let target = crate::support::serve(axum::Router::new().fallback(move || {
        *counter.lock().unwrap() += 1;
        async { "reached" }
    }))
    .await;
    let redirect = crate::support::serve(axum::Router::new().fallback(move || {
        let target = format!("{target}/mcp");
        async move { axum::response::Redirect::temporary(&target) }
    }))
    .await;
    let redirect_port: u16 = redirect.rsplit(':').next().unwrap().parse().unwrap();
    let server = RequestServer::connect(
        "redirecting",
        &format!("{redirect}/mcp"),
        vec![std::net::SocketAddr::from(([127, 0, 0, 1], redirect_port))],
        Default::default(),
        Duration::from_secs(5),
    )
    .await;
    let error = server.error.unwrap();
    assert!(
        error.starts_with("The MCP server 'redirecting' could not be used"),
        "{error}"
    );
    assert!(server.handlers.is_empty());
    assert_eq!(*followed.lock().unwrap(), 0);
}

#[tokio::test]
async fn servers_named_in_one_request_are_connected_at_once() {
    // Each endpoint answers only once the other has been asked too (or after 3 s): connected
    // one after the other, the first would be answered alone.
    let arrived = Arc::new(tokio::sync::Semaphore::new(0));
    let met = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
    let router = {
        let (arrived, met) = (arrived.clone(), met.clone());
        axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (arrived, met) = (arrived.clone(), met.clone());
            async move {
                let first = !met.lock().unwrap().iter().any(|(p, _)| *p == uri.path());
                if first {
                    arrived.add_permits(1);
                    let both = tokio::time::timeout(Duration::from_secs(3), async {
                        while arrived.available_permits() < 2 {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    })
                    .await
                    .is_ok();
                    met.lock().unwrap().push((uri.path().to_string(), both));
                }
                (axum::http::StatusCode::NOT_FOUND, "no MCP here")
            }
        })
    };
    let base = crate::support::serve(router).await;
    let app = TestApp::builder()
        .config(request_servers(&["127.0.0.1"], true))
        .start()
        .await;
    app.llm.push(Turn::text("ok"));
    let (status, body) = app
        .post(
            "/v1/responses",
            &run_with(json!([
                named("first", &format!("{base}/a/mcp")),
                named("second", &format!("{base}/b/mcp"))
            ])),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let listings: Vec<&Value> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_list_tools")
        .collect();
    assert_eq!(listings.len(), 2, "{body}");
    for listing in listings {
        assert_eq!(listing["status"], "failed", "{listing}");
    }
    let mut met = met.lock().unwrap().clone();
    met.sort();
    assert_eq!(
        met,
        [("/a/mcp".to_string(), true), ("/b/mcp".to_string(), true)]
    );
}
