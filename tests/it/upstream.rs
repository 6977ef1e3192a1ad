//! What a client sees when the upstream refuses a request (issue 25, point 4): a request at
//! fault is a 400 with the upstream's own message (secrets hidden), code and field, without a
//! stream and as `error` then `response.failed` with one, stored the same; a refusal of the
//! service's credentials and a wrong `base_url` are 502s for the operator, without the
//! upstream's words. And (point 5) an unknown model names the models the caller may use, and
//! each provider is probed at start and by `check-config --probe`.
//!
//! The upstream bodies are the ones providers send, as collected with their sources in the
//! provider notes (OpenAI error bodies as pasted in public issues, vLLM
//! `vllm/entrypoints/openai/engine/protocol.py`, llama.cpp `tools/server/server-common.cpp`).

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::config::{FallbackConfig, ProviderConfig};

use crate::support::{Binary, ConfigFile, FakeLlm, Sse, Step, TestApp, Turn, assert_numbering};

fn hello() -> Value {
    json!({"model": "gpt-4o-mini", "input": "Say hello"})
}

/// The upstream answers `status` with `body` instead of a stream.
fn refusing(status: u16, body: Value) -> Turn {
    Turn {
        steps: vec![Step::Status {
            status,
            body,
            retry_after: None,
        }],
    }
}

/// OpenAI's answer to `max_tokens` for a reasoning model
/// (github.com/griptape-ai/ComfyUI-Griptape/issues/312).
fn unsupported_max_tokens() -> Turn {
    refusing(
        400,
        json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with \
            this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error",
            "param": "max_tokens", "code": "unsupported_parameter"}}),
    )
}

const UNSUPPORTED: &str = "The upstream model refused the request (HTTP 400): Unsupported \
    parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' \
    instead.";

/// OpenAI's answer to a key it does not know (github.com/chatanywhere/GPT_API_free/issues/62),
/// here with the whole key in it, as a proxy may write it.
fn refused_key() -> Turn {
    refusing(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-live-0123456789abcdefSECRET. \
            You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
    )
}

const AUTH_FAILED: &str = "The upstream model refused this service's credentials (HTTP 401); \
    the operator must check the provider's API key.";

const NOT_FOUND: &str = "The upstream model's API answered HTTP 404 (not found); the operator \
    must check the provider's base_url (it usually ends in /v1).";

/// The error envelope, keys as the service writes them.
fn envelope(kind: &str, code: Value, message: &str, param: Value) -> Value {
    json!({"error": {"code": code, "message": message, "param": param, "type": kind}})
}

/// The id a reply without a stream names: `… (response resp_X is stored as failed)`.
fn stored_id(body: &Value) -> String {
    let message = body["error"]["message"].as_str().unwrap();
    let tail = message.rsplit_once("(response ").unwrap().1;
    tail.split(' ').next().unwrap().to_string()
}

/// The message a reply without a stream carries: the failure's, then where it is stored.
fn stored_as_failed(message: &str, id: &str) -> String {
    format!("{message} (response {id} is stored as failed)")
}

/// Asserts the stored response failed with `error`.
async fn assert_stored(app: &TestApp, id: &str, error: Value) {
    let (status, stored) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["status"], "failed", "{stored}");
    assert_eq!(stored["error"], error, "{stored}");
}

#[tokio::test]
async fn an_unsupported_parameter_is_a_400_with_the_upstreams_message_code_and_field() {
    let app = TestApp::builder()
        .config(|c| c.llm.retries = 2)
        .script([unsupported_max_tokens()])
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 400, "{body}");
    let id = stored_id(&body);
    assert_eq!(
        body,
        envelope(
            "invalid_request_error",
            json!("unsupported_parameter"),
            &stored_as_failed(UNSUPPORTED, &id),
            json!("max_output_tokens"),
        )
    );
    assert_eq!(
        app.llm.requests().len(),
        1,
        "a refused request is not retried"
    );
    assert_stored(
        &app,
        &id,
        json!({"code": "invalid_prompt", "message": UNSUPPORTED}),
    )
    .await;
}

#[tokio::test]
async fn a_prompt_too_long_is_a_400_context_length_exceeded_whatever_the_provider_says() {
    let cases = [
        // OpenAI (github.com/chathub-dev/chathub/issues/126).
        (
            json!({"error": {"message": "This model's maximum context length is 4097 tokens. \
                However, your messages resulted in 4294 tokens. Please reduce the length of the \
                messages.", "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}),
            "This model's maximum context length is 4097 tokens. However, your messages \
             resulted in 4294 tokens. Please reduce the length of the messages.",
            json!("input"),
        ),
        // vLLM ≥ 0.10.1: the status as `code` (vllm/entrypoints/openai/engine/protocol.py).
        (
            json!({"error": {"message": "This model's maximum context length is 40960 tokens. \
                However, you requested 0 output tokens and your prompt contains at least 40961 \
                input tokens, for a total of at least 40961 tokens.", "type": "BadRequestError",
                "param": "input_tokens", "code": 400}}),
            "This model's maximum context length is 40960 tokens. However, you requested 0 \
             output tokens and your prompt contains at least 40961 input tokens, for a total \
             of at least 40961 tokens.",
            json!("input"),
        ),
        // vLLM before 0.10.1: flat.
        (
            json!({"object": "error", "message": "This model's maximum context length is 2048 \
                tokens. However, you requested 2723 tokens (1699 in the messages, 1024 in the \
                completion).", "type": "BadRequestError", "param": null, "code": 400}),
            "This model's maximum context length is 2048 tokens. However, you requested 2723 \
             tokens (1699 in the messages, 1024 in the completion).",
            Value::Null,
        ),
        // llama.cpp (tools/server/server-common.cpp).
        (
            json!({"error": {"code": 400, "message": "request (9412 tokens) exceeds the \
                available context size (8192 tokens), try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 9412, "n_ctx": 8192}}),
            "request (9412 tokens) exceeds the available context size (8192 tokens), try \
             increasing it",
            Value::Null,
        ),
    ];
    let app = TestApp::start().await;
    for (upstream, said, param) in cases {
        app.llm.push(refusing(400, upstream));
        let (status, body) = app.post("/v1/responses", &hello()).await;
        assert_eq!(status, 400, "{body}");
        let message = format!("The upstream model refused the request (HTTP 400): {said}");
        let id = stored_id(&body);
        assert_eq!(
            body,
            envelope(
                "invalid_request_error",
                json!("context_length_exceeded"),
                &stored_as_failed(&message, &id),
                param,
            )
        );
        assert_stored(
            &app,
            &id,
            json!({"code": "invalid_prompt", "message": message}),
        )
        .await;
    }
}

#[tokio::test]
async fn a_refused_key_is_a_502_that_says_so_and_never_shows_the_upstreams_words() {
    let app = TestApp::builder().script([refused_key()]).start().await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 502, "{body}");
    let id = stored_id(&body);
    assert_eq!(
        body,
        envelope(
            "server_error",
            json!("upstream_auth_failed"),
            &stored_as_failed(AUTH_FAILED, &id),
            Value::Null,
        )
    );
    assert_stored(
        &app,
        &id,
        json!({"code": "server_error", "message": AUTH_FAILED}),
    )
    .await;

    app.llm.push(refused_key());
    let sse = app.stream(&hello()).await;
    assert_failed_stream(
        &sse,
        json!({"type": "server_error", "code": "upstream_auth_failed",
               "message": AUTH_FAILED, "param": null}),
        json!({"code": "server_error", "message": AUTH_FAILED}),
    );
    let replayed = app.replay(&sse.response_id(), "").await;
    let (_, stored) = app.get(&format!("/v1/responses/{id}")).await;
    for seen in [body.to_string(), sse.raw, replayed.raw, stored.to_string()] {
        assert!(!seen.contains("sk-live"), "{seen}");
        assert!(!seen.contains("Incorrect API key"), "{seen}");
    }
}

#[tokio::test]
async fn a_forbidden_key_is_the_same_502() {
    // A project without access to the model: the operator's to fix, not the client's.
    let app = TestApp::builder()
        .script([refusing(
            403,
            json!({"error": {"message": "project proj_1 has no access to gpt-4o-mini",
                "type": "permission_error", "param": null, "code": null}}),
        )])
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "upstream_auth_failed");
    assert!(!body.to_string().contains("proj_1"), "{body}");
}

#[tokio::test]
async fn a_model_the_upstream_does_not_have_is_a_400_model_not_found() {
    let cases = [
        // OpenAI (github.com/ksred/GitPilotAI/issues/12).
        json!({"error": {"message": "The model `gpt-4o-mini` does not exist or you do not have \
            access to it.", "type": "invalid_request_error", "param": null,
            "code": "model_not_found"}}),
        // vLLM ≥ 0.10.1.
        json!({"error": {"message": "The model `gpt-4o-mini` does not exist.",
            "type": "NotFoundError", "param": null, "code": 404}}),
        // Ollama ≥ 0.18.
        json!({"error": {"message": "model 'gpt-4o-mini' not found", "type": "not_found_error",
            "param": null, "code": null}}),
    ];
    let app = TestApp::start().await;
    for upstream in cases {
        let said = upstream["error"]["message"].as_str().unwrap().to_string();
        app.llm.push(refusing(404, upstream));
        let (status, body) = app.post("/v1/responses", &hello()).await;
        assert_eq!(status, 400, "{body}");
        let message = format!("The upstream model refused the request (HTTP 404): {said}");
        assert_eq!(
            body,
            envelope(
                "invalid_request_error",
                json!("model_not_found"),
                &stored_as_failed(&message, &stored_id(&body)),
                json!("model"),
            )
        );
    }
}

#[tokio::test]
async fn a_base_url_without_v1_is_a_502_naming_the_fix() {
    // The fake serves /v1/chat/completions only: without /v1 it answers 404, no body.
    let llm = FakeLlm::start().await.unwrap();
    let root = format!("http://{}", llm.addr());
    let app = TestApp::builder()
        .config(move |c| c.llm.provider.base_url = Some(root))
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        body,
        envelope(
            "server_error",
            json!("upstream_not_found"),
            &stored_as_failed(NOT_FOUND, &stored_id(&body)),
            Value::Null,
        )
    );
    drop(llm);

    // What servers and proxies answer for a path they do not serve: an HTML page, a line.
    let app = TestApp::start().await;
    for page in [
        "<html><head><title>404 Not Found</title></head><body><center>nginx</center></body></html>",
        "404 page not found",
    ] {
        app.llm.push(refusing(404, json!(page)));
        let (status, body) = app.post("/v1/responses", &hello()).await;
        assert_eq!(status, 502, "{body}");
        assert_eq!(body["error"]["code"], "upstream_not_found");
        assert_eq!(
            body["error"]["message"],
            stored_as_failed(NOT_FOUND, &stored_id(&body))
        );
    }
}

/// The stream ends with `error` carrying `error` flat and nested, then `response.failed`
/// with `response_error`, then `[DONE]`; the stored response says the same.
fn assert_failed_stream(sse: &Sse, error: Value, response_error: Value) {
    assert_numbering(sse);
    assert!(sse.done);
    assert_eq!(
        sse.types(),
        [
            "response.created",
            "response.in_progress",
            "error",
            "response.failed"
        ]
    );
    let mut flat = error.clone();
    flat.as_object_mut().unwrap().remove("type");
    let mut expected = json!({"type": "error", "sequence_number": 2, "error": error});
    for (key, value) in flat.as_object().unwrap() {
        expected[key] = value.clone();
    }
    assert_eq!(sse.events[2].data, expected);
    let failed = &sse.last().data["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"], response_error);
}

#[tokio::test]
async fn a_refused_request_ends_a_stream_with_error_then_response_failed_carrying_the_same() {
    let app = TestApp::builder()
        .script([unsupported_max_tokens()])
        .start()
        .await;
    let sse = app.stream(&hello()).await;
    assert_eq!(sse.status, 200);
    assert_failed_stream(
        &sse,
        json!({"type": "invalid_request_error", "code": "unsupported_parameter",
               "message": UNSUPPORTED, "param": "max_output_tokens"}),
        json!({"code": "invalid_prompt", "message": UNSUPPORTED}),
    );
    assert_stored(
        &app,
        &sse.response_id(),
        json!({"code": "invalid_prompt", "message": UNSUPPORTED}),
    )
    .await;
}

#[tokio::test]
async fn a_background_run_the_upstream_refuses_stores_the_same_error() {
    let app = TestApp::builder()
        .script([unsupported_max_tokens()])
        .start()
        .await;
    let mut request = hello();
    request["background"] = json!(true);
    let (status, queued) = app.post("/v1/responses", &request).await;
    assert_eq!(status, 200, "{queued}");
    let id = queued["id"].as_str().unwrap();
    let stopped = app.wait_until_stopped(id).await;
    assert_eq!(stopped["status"], "failed");
    assert_eq!(
        stopped["error"],
        json!({"code": "invalid_prompt", "message": UNSUPPORTED})
    );
}

#[tokio::test]
async fn keys_and_urls_in_an_upstream_message_are_hidden_from_the_client() {
    let app = TestApp::builder()
        .script([refusing(
            422,
            json!({"error": {"message": "tools[0] rejected by https://gw.internal/v1/check?\
                api_key=sk-gw-0123456789 (Authorization: Bearer eyJhbGciOi.abc.def, key \
                sk-proj-0123456789abcdef, trace 9f86d081884c7d659a2feaa0c55ad015)",
                "type": "invalid_request_error", "param": "tools[0].function.parameters",
                "code": "invalid_function_parameters"}}),
        )])
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 400, "{body}");
    let message = "The upstream model refused the request (HTTP 422): tools[0] rejected by \
        https://gw.internal/v1/check?api_key=*** (Authorization: Bearer ***, key ***, trace ***)";
    assert_eq!(
        body,
        envelope(
            "invalid_request_error",
            json!("invalid_function_parameters"),
            &stored_as_failed(message, &stored_id(&body)),
            json!("tools"),
        )
    );
}

#[tokio::test]
async fn a_compaction_the_upstream_refuses_is_the_same_400() {
    let app = TestApp::builder()
        .script([unsupported_max_tokens(), refused_key()])
        .start()
        .await;
    let (status, body) = app.post("/v1/responses/compact", &hello()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body,
        envelope(
            "invalid_request_error",
            json!("unsupported_parameter"),
            UNSUPPORTED,
            json!("max_output_tokens"),
        )
    );
    let (status, body) = app.post("/v1/responses/compact", &hello()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        body,
        envelope(
            "server_error",
            json!("upstream_auth_failed"),
            AUTH_FAILED,
            Value::Null
        )
    );
}

#[tokio::test]
async fn a_request_the_upstream_refused_is_not_asked_of_the_fallback_model_but_a_missing_model_is()
{
    let backup = FakeLlm::start().await.unwrap();
    let backup_url = backup.base_url();
    let app = TestApp::builder()
        .config(move |c| {
            let provider = ProviderConfig {
                base_url: Some(backup_url),
                models: vec!["llama3".into()],
                ..Default::default()
            };
            c.providers.insert("backup".into(), provider);
            let fallback = FallbackConfig {
                model: "llama3".into(),
            };
            c.fallbacks.insert("gpt-4o-mini".into(), fallback);
        })
        .script([unsupported_max_tokens()])
        .start()
        .await;
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 400, "{body}");
    assert!(backup.requests().is_empty(), "the fallback was not asked");

    app.llm.push(refusing(
        404,
        json!({"error": {"message": "The model `gpt-4o-mini` does not exist.",
            "type": "NotFoundError", "param": null, "code": 404}}),
    ));
    backup.push(Turn::text("from the backup"));
    let (status, body) = app.post("/v1/responses", &hello()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["content"][0]["text"], "from the backup");
}

#[tokio::test]
async fn an_unknown_model_names_the_models_the_caller_may_use() {
    let app = TestApp::start().await;
    let expected = envelope(
        "invalid_request_error",
        json!("model_not_found"),
        "The model 'gpt-9' does not exist or you do not have access to it. Models you may \
         use: 'gpt-4o-mini', 'gpt-4o'.",
        json!("model"),
    );
    let request = json!({"model": "gpt-9", "input": "hi"});
    for path in ["/v1/responses", "/v1/responses/compact"] {
        let (status, body) = app.post(path, &request).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body, expected, "{path}");
    }
}

#[tokio::test]
async fn an_unknown_model_names_the_models_the_callers_key_may_use() {
    let app = TestApp::builder()
        .config(|c| c.auth.mode = switchyard::config::AuthMode::Keys)
        .start()
        .await;
    let policy = switchyard::auth::KeyPolicy {
        models: Some(vec!["gpt-4o".into(), "not-routed".into()]),
        ..Default::default()
    };
    let store = app.store().await;
    let (_, secret) = switchyard::auth::create_key(&*store, "acme", "test", &policy)
        .await
        .unwrap();
    let reply = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(secret)
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 400);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "The model 'gpt-4o-mini' does not exist or you do not have access to it. Models you \
         may use: 'gpt-4o'."
    );
}

/// Whether the Prometheus text has `name{…labels…} value`.
fn has_series(metrics: &str, name: &str, labels: &[(&str, &str)], value: &str) -> bool {
    metrics.lines().any(|line| {
        let Some((series, found)) = line.rsplit_once(' ') else {
            return false;
        };
        series.starts_with(&format!("{name}{{"))
            && labels
                .iter()
                .all(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
            && found == value
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_without_v1_is_a_warning_at_start_naming_the_fix_and_a_metric() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new()
        .env(
            "SWITCHYARD__LLM__BASE_URL",
            format!("http://{}", llm.addr()),
        )
        .spawn();
    let line = instance
        .logs
        .wait_for(|line| line.contains("does base_url end in /v1"))
        .await;
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("provider=\"default\""), "{line}");
    assert!(line.contains("result=\"not_found\""), "{line}");
    let metrics = reqwest::get(instance.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let probe = "switchyard_upstream_probe";
    let labels = |result| [("provider", "default"), ("result", result)];
    assert!(
        has_series(&metrics, probe, &labels("not_found"), "1"),
        "{metrics}"
    );
    assert!(has_series(&metrics, probe, &labels("ok"), "0"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_probe_prints_a_line_per_provider_and_fails_when_one_cannot_serve() {
    let llm = FakeLlm::start().await.unwrap();
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let good = format!(
        "[llm]\nbase_url = \"{}\"\nmodels = [\"fake\"]\n",
        llm.base_url()
    );
    let file = ConfigFile::new(&good);
    let outcome = Binary::new()
        .config_file(&file.path)
        .run(&["check-config", "--probe"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.stdout.contains("[llm]"),
        "the configuration is still printed"
    );
    let lines: Vec<&str> = outcome.stderr.lines().collect();
    let ok = format!(
        "provider \"default\": ok: {} answers and lists 1 model",
        llm.base_url()
    );
    assert_eq!(lines, [ok.as_str()], "{}", outcome.stderr);

    let bad = format!(
        "[llm]\nbase_url = \"{base}\"\nmodels = [\"fake\", \"gpt-4o\"]\n\
         [providers.local]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodels = [\"llama3.1\"]\n\
         [providers.nov1]\nbase_url = \"http://{addr}\"\nmodels = [\"qwen3\"]\n",
        base = llm.base_url(),
        addr = llm.addr(),
    );
    let file = ConfigFile::new(&bad);
    let outcome = Binary::new()
        .config_file(&file.path)
        .run(&["check-config", "--probe"]);
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    let expected = [
        format!(
            "provider \"default\": model_missing: {} does not list the configured model(s) \
             \"gpt-4o\": requests for them will fail unless it serves models it does not list \
             (names are case-sensitive)",
            llm.base_url()
        ),
        format!(
            "provider \"local\": refused: connection refused at http://127.0.0.1:{port}/v1: \
             is the port right, and is the server running?"
        ),
        format!(
            "provider \"nov1\": not_found: GET http://{}/models answered 404 Not Found: does \
             base_url end in /v1 (e.g. http://127.0.0.1:11434/v1)?",
            llm.addr()
        ),
    ];
    for line in &expected {
        assert!(
            outcome.stderr.lines().any(|l| l == line),
            "{line}\nin\n{}",
            outcome.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_probe_at_start_off_no_request_reaches_the_provider_before_a_run() {
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", upstream.local_addr().unwrap());
    let started = |probe: &'static str| {
        Binary::new()
            .env("SWITCHYARD__LLM__BASE_URL", base_url.as_str())
            .env("SWITCHYARD__LLM__PROBE_AT_START", probe)
            .spawn()
    };
    let instance = started("false");
    let ready = reqwest::get(instance.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);
    assert!(!connection(&upstream).await, "nothing was asked");
    drop(instance);
    // The same start with the default probes the provider at once.
    let _instance = started("true");
    assert!(connection(&upstream).await, "the probe came");
}

/// Whether a connection comes to `upstream` within 2 s.
async fn connection(upstream: &tokio::net::TcpListener) -> bool {
    tokio::time::timeout(Duration::from_secs(2), upstream.accept())
        .await
        .is_ok()
}
