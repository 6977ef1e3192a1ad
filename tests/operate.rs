//! What an operator sees of a running instance: request ids and the access log, readiness
//! during shutdown, and the metrics. Through the real binary and its logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fake_llm::{FakeLlm, Turn};
use serde_json::json;

/// An instance on a fresh SQLite file, with its logs kept.
struct Instance {
    child: std::process::Child,
    base: String,
    logs: Logs,
    _dir: tempfile::TempDir,
}

impl Instance {
    fn start(llm: &FakeLlm, env: &[(&str, &str)]) -> Instance {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/s.db", dir.path().display());
        let (child, address, logs) = spawn_binary_logged(&url, &llm.base_url(), None, env);
        Instance {
            child,
            base: format!("http://{address}"),
            logs,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The log lines of the request with this id.
    fn lines_of(&self, request_id: &str) -> Vec<String> {
        let field = format!("request_id=\"{request_id}\"");
        self.logs
            .lines()
            .into_iter()
            .filter(|line| line.contains(&field))
            .collect()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            kill(&mut self.child);
        }
    }
}

#[tokio::test]
async fn a_client_request_id_is_echoed_and_on_every_log_line_of_its_request() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Instance::start(&llm, &[]);
    let client = reqwest::Client::new();
    let reply = client
        .post(instance.url("/v1/responses"))
        .header("x-request-id", "trace-42.a")
        .json(&json!({"model": "gpt-4o-mini", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["x-request-id"], "trace-42.a");
    let body: serde_json::Value = reply.json().await.unwrap();
    let id = body["id"].as_str().unwrap();

    let access = instance
        .logs
        .wait_for(|l| l.contains("switchyard::access") && l.contains("trace-42.a"))
        .await;
    for part in [
        "method=POST",
        "route=\"/v1/responses\"",
        &format!("response_id=\"{id}\""),
        "status=200",
        "duration_ms=",
        "bytes=",
    ] {
        assert!(access.contains(part), "{part} in the access line: {access}");
    }
    let lines = instance.lines_of("trace-42.a");
    let started = lines.iter().find(|l| l.contains("run started")).unwrap();
    assert!(started.contains(id), "{started}");
    let stopped = lines.iter().find(|l| l.contains("run stopped")).unwrap();
    for part in ["ending=\"completed\"", "input_tokens=10", "output_tokens="] {
        assert!(stopped.contains(part), "{part} in: {stopped}");
    }
    // Nothing this request caused is logged without its id.
    let of_the_run: Vec<_> = instance
        .logs
        .lines()
        .into_iter()
        .filter(|l| l.contains(id))
        .collect();
    assert!(
        of_the_run
            .iter()
            .all(|l| l.contains("request_id=\"trace-42.a\"")),
        "{of_the_run:#?}"
    );
}

#[tokio::test]
async fn a_request_without_an_id_or_with_an_unusable_one_gets_a_new_one() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Instance::start(&llm, &[]);
    let client = reqwest::Client::new();
    let long = "x".repeat(129);
    for given in [None, Some("two words"), Some(long.as_str()), Some("")] {
        let mut request = client.get(instance.url("/v1/responses/resp_unknown"));
        if let Some(given) = given {
            request = request.header("x-request-id", given);
        }
        let reply = request.send().await.unwrap();
        assert_eq!(reply.status(), 404);
        let id = reply.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{given:?} → {id}"
        );
        let access = instance
            .logs
            .wait_for(|l| l.contains("switchyard::access") && l.contains(&id))
            .await;
        assert!(
            access.contains("route=\"/v1/responses/{id}\"") && access.contains("status=404"),
            "{access}"
        );
    }
    // An unknown path is logged as unmatched, not by its (unbounded) path.
    let reply = client
        .get(instance.url("/no/such/path"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 404);
    let id = reply.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let access = instance
        .logs
        .wait_for(|l| l.contains("switchyard::access") && l.contains(&id))
        .await;
    assert!(access.contains("route=\"unmatched\""), "{access}");
}

#[tokio::test]
async fn a_streamed_run_logs_under_its_request_id_and_the_access_line_names_the_response() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Turn::tool_call(
        "call_1",
        "get_weather",
        "{\"city\":\"Oslo\"}",
    ));
    let instance = Instance::start(&llm, &[]);
    let reply = reqwest::Client::new()
        .post(instance.url("/v1/responses"))
        .header("x-request-id", "stream-7")
        .json(&json!({
            "model": "gpt-4o-mini",
            "input": "weather?",
            "stream": true,
            "tools": [{"type": "function", "name": "get_weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.headers()["x-request-id"], "stream-7");
    let sse = read_sse(reply).await;
    let id = sse.response_id();
    let paused = instance
        .logs
        .wait_for(|l| l.contains("run stopped") && l.contains(&id))
        .await;
    assert!(paused.contains("request_id=\"stream-7\""), "{paused}");
    assert!(paused.contains("ending=\"paused\""), "{paused}");
    let access = instance
        .logs
        .wait_for(|l| l.contains("switchyard::access") && l.contains("stream-7"))
        .await;
    assert!(
        access.contains(&format!("response_id=\"{id}\"")),
        "{access}"
    );
}

#[tokio::test]
async fn readiness_fails_as_soon_as_shutdown_begins_while_requests_are_still_served() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Instance::start(&llm, &[("SWITCHYARD__SERVER__DRAIN_DELAY_MS", "3000")]);
    let client = reqwest::Client::new();
    let ready = client.get(instance.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    let signalled = Instant::now();
    instance.terminate();
    let mut unready_after = None;
    while signalled.elapsed() < Duration::from_millis(1500) {
        // A new connection each time: the listener is still open.
        let reply = reqwest::Client::new()
            .get(instance.url("/readyz"))
            .send()
            .await
            .unwrap();
        if reply.status() == 503 {
            let body: serde_json::Value = reply.json().await.unwrap();
            assert_eq!(body["error"]["code"], "service_unavailable", "{body}");
            unready_after = Some(signalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unready_after = unready_after.expect("/readyz turned 503 during the drain delay");
    assert!(
        unready_after < Duration::from_millis(1000),
        "{unready_after:?}"
    );
    // Still served: a run started now completes.
    let (status, body) = {
        let reply = client
            .post(instance.url("/v1/responses"))
            .json(&json!({"model": "gpt-4o-mini", "input": "late"}))
            .send()
            .await
            .unwrap();
        (
            reply.status().as_u16(),
            reply.json::<serde_json::Value>().await.unwrap(),
        )
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    // After the delay the listener closes.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(signalled.elapsed())).await;
    let after = reqwest::Client::new()
        .get(instance.url("/healthz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(after.is_err(), "{after:?}");
}
