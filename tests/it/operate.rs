//! What an operator sees of a running instance: request ids and the access log, readiness
//! during shutdown, and the metrics. Through the real binary and its logs.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    Binary, Database, FakeLlm, Instance, Turn, backends, first_listed_key, read_sse,
};

/// The log lines of the request with this id.
fn lines_of(instance: &Instance, request_id: &str) -> Vec<String> {
    let field = format!("request_id=\"{request_id}\"");
    instance
        .logs
        .lines()
        .into_iter()
        .filter(|line| line.contains(&field))
        .collect()
}

#[tokio::test]
async fn a_client_request_id_is_echoed_and_on_every_log_line_of_its_request() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new().upstream(&llm).spawn();
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
    let lines = lines_of(&instance, "trace-42.a");
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
async fn the_access_line_names_the_client_the_tenant_the_key_and_an_errors_code() {
    let llm = FakeLlm::start().await.unwrap();
    let db = Database::sqlite();
    let setup = Binary::new().database(&db.url);
    assert_eq!(setup.run(&["migrate"]).code, 0);
    let made = setup.run(&["keys", "create", "--tenant", "acme", "--name", "ci"]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let secret = made.stdout.trim().to_string();
    let listed = setup.run(&["keys", "list"]).stdout;
    let key_id = first_listed_key(&listed);
    let instance = Binary::new()
        .database(&db.url)
        .upstream(&llm)
        .env("SWITCHYARD__AUTH__MODE", "keys")
        .spawn();
    let client = reqwest::Client::new();
    let access_of = async |request_id: &str| {
        let field = format!("request_id=\"{request_id}\"");
        instance
            .logs
            .wait_for(|l| l.contains("switchyard::access") && l.contains(&field))
            .await
    };

    // A run: who asked, from where, and no error code.
    let reply = client
        .post(instance.url("/v1/responses"))
        .bearer_auth(&secret)
        .header("x-request-id", "acc-1")
        .json(&json!({"model": "gpt-4o-mini", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let access = access_of("acc-1").await;
    for part in [
        "client=127.0.0.1:",
        "tenant=\"acme\"",
        &format!("key_id=\"{key_id}\""),
        "status=200",
    ] {
        assert!(access.contains(part), "{part} in the access line: {access}");
    }
    assert!(!access.contains("error_code"), "{access}");

    // An error: its code, as the client got it in `error.code`.
    let reply = client
        .get(instance.url("/v1/responses/resp_unknown"))
        .bearer_auth(&secret)
        .header("x-request-id", "acc-2")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 404);
    let body: serde_json::Value = reply.json().await.unwrap();
    let code = body["error"]["code"]
        .as_str()
        .or(body["error"]["type"].as_str())
        .unwrap()
        .to_string();
    let access = access_of("acc-2").await;
    assert!(
        access.contains(&format!("error_code=\"{code}\"")) && access.contains("tenant=\"acme\""),
        "{access}"
    );

    // A wrong key: the code, and no tenant or key (nobody was recognised).
    let reply = client
        .get(instance.url("/v1/responses/resp_unknown"))
        .bearer_auth("sk-sy-wrong")
        .header("x-request-id", "acc-3")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 401);
    let access = access_of("acc-3").await;
    assert!(
        access.contains("error_code=\"invalid_api_key\""),
        "{access}"
    );
    assert!(
        !access.contains("tenant=") && !access.contains("key_id="),
        "{access}"
    );

    // Probes and scrapes are logged at DEBUG: not at this instance's INFO.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let reply = client
            .get(instance.url(path))
            .header("x-request-id", "acc-probe")
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success(), "{path}: {}", reply.status());
    }
    let reply = client
        .get(instance.url("/v1/models"))
        .bearer_auth(&secret)
        .header("x-request-id", "acc-after")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    access_of("acc-after").await;
    assert!(lines_of(&instance, "acc-probe").is_empty());
}

#[tokio::test]
async fn a_request_without_an_id_or_with_an_unusable_one_gets_a_new_one() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new().upstream(&llm).spawn();
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
    let instance = Binary::new().upstream(&llm).spawn();
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
    let instance = Binary::new()
        .upstream(&llm)
        .env("SWITCHYARD__SERVER__DRAIN_DELAY_MS", "3000")
        .spawn();
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

/// The value of the sample `name{labels}` in a Prometheus text rendering (labels in any order;
/// `labels` lists some of them), summed over the samples that match; `None` if none does.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        if metric != name {
            continue;
        }
        let matches = labels
            .iter()
            .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        if matches {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    found
}

async fn scrape(instance: &Instance) -> String {
    let reply = reqwest::get(instance.url("/metrics")).await.unwrap();
    assert_eq!(reply.status(), 200);
    assert!(
        reply.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        reply.headers()
    );
    reply.text().await.unwrap()
}

#[tokio::test]
async fn metrics_count_requests_runs_turns_tools_streams_and_the_writer_after_a_mixed_load() {
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new().upstream(&llm).spawn();
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        let request = client.post(instance.url("/v1/responses")).json(&body);
        async move {
            let reply = request.send().await.unwrap();
            let status = reply.status().as_u16();
            (status, reply.json::<serde_json::Value>().await.unwrap())
        }
    };
    let text = json!({"model": "gpt-4o-mini", "input": "hi"});
    let builtin = json!([{"type": "mcp", "server_label": "builtin", "require_approval": "never"}]);

    // Two answers.
    for _ in 0..2 {
        llm.push(Turn::text("hello"));
        assert_eq!(post(text.clone()).await.0, 200);
    }
    // A server tool called well, then with arguments that do not fit its schema.
    llm.push(Turn::tool_call(
        "c1",
        "calculator",
        r#"{"expression": "6 * 7"}"#,
    ));
    llm.push(Turn::tool_call("c2", "calculator", r#"{"nope": 1}"#));
    llm.push(Turn::text("42"));
    let mut with_tools = text.clone();
    with_tools["tools"] = builtin.clone();
    assert_eq!(post(with_tools).await.0, 200);
    // A client tool: the run pauses.
    llm.push(Turn::tool_call("c3", "lookup", "{}"));
    let mut client_tool = text.clone();
    client_tool["tools"] =
        json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]);
    let (status, paused) = post(client_tool).await;
    assert_eq!(
        (status, paused["status"].as_str()),
        (200, Some("completed"))
    );
    // The upstream fails.
    llm.push(Turn::error(500, "boom"));
    assert_eq!(post(text.clone()).await.0, 502);
    // Unknown model, unknown response.
    assert_eq!(
        post(json!({"model": "no-such-model", "input": "x"}))
            .await
            .0,
        400
    );
    let unknown = client
        .get(instance.url("/v1/responses/resp_unknown"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    // A stream kept open by a slow model.
    llm.push(Turn::text("slow answer").delayed(1500));
    let mut streamed = text.clone();
    streamed["stream"] = json!(true);
    let stream = client
        .post(instance.url("/v1/responses"))
        .json(&streamed)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let during = scrape(&instance).await;
    let open = |labels: &[(&str, &str)]| sample(&during, "switchyard_open_streams", labels);
    assert_eq!(open(&[("transport", "sse")]), Some(1.0), "{during}");
    assert_eq!(sample(&during, "switchyard_runs_executing", &[]), Some(1.0));
    assert_eq!(
        sample(
            &during,
            "switchyard_stored_runs",
            &[("state", "requires_action")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &during,
            "switchyard_stored_runs",
            &[("state", "in_progress")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&during, "switchyard_stored_runs", &[("state", "queued")]),
        Some(0.0)
    );
    read_sse(stream).await;
    // The stream's run has stopped, and its stream closed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = scrape(&instance).await;
    let value = |name: &str, labels: &[(&str, &str)]| sample(&after, name, labels);
    let requests = |route: &str, status: &str| {
        value(
            "switchyard_http_requests_total",
            &[("route", route), ("status", status)],
        )
    };
    assert_eq!(requests("/v1/responses", "200"), Some(5.0), "{after}");
    assert_eq!(requests("/v1/responses", "502"), Some(1.0));
    assert_eq!(requests("/v1/responses", "400"), Some(1.0));
    assert_eq!(requests("/v1/responses/{id}", "404"), Some(1.0));
    assert_eq!(
        value(
            "switchyard_http_request_duration_seconds_count",
            &[("route", "/v1/responses")]
        ),
        Some(7.0)
    );
    assert_eq!(value("switchyard_runs_started_total", &[]), Some(6.0));
    let ended = |ending: &str| value("switchyard_runs_finished_total", &[("ending", ending)]);
    assert_eq!(ended("completed"), Some(4.0));
    assert_eq!(ended("paused"), Some(1.0));
    assert_eq!(ended("failed"), Some(1.0));
    assert_eq!(
        value("switchyard_run_duration_seconds_count", &[]),
        Some(6.0)
    );
    let slow = value(
        "switchyard_run_duration_seconds_bucket",
        &[("ending", "completed"), ("le", "1")],
    );
    assert_eq!(slow, Some(3.0), "the slow run took over a second");
    // Every run but the failed one streamed a first token; the slow one after 1.5 s.
    let first =
        |labels: &[(&str, &str)]| value("switchyard_time_to_first_token_seconds_bucket", labels);
    assert_eq!(
        value(
            "switchyard_time_to_first_token_seconds_count",
            &[("model", "gpt-4o-mini")]
        ),
        Some(5.0)
    );
    assert_eq!(first(&[("le", "1")]), Some(4.0));
    // Turns: 2 + 3 + 1 + 1 (the failed one) + 1.
    assert_eq!(
        value(
            "switchyard_upstream_turn_duration_seconds_count",
            &[("provider", "default"), ("model", "gpt-4o-mini")]
        ),
        Some(8.0)
    );
    assert_eq!(
        value(
            "switchyard_upstream_errors_total",
            &[("provider", "default"), ("kind", "upstream_error")]
        ),
        Some(1.0)
    );
    let calls = |outcome: &str| {
        value(
            "switchyard_tool_calls_total",
            &[
                ("server", "builtin"),
                ("tool", "calculator"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(calls("ok"), Some(1.0));
    assert_eq!(calls("invalid_arguments"), Some(1.0));
    assert_eq!(
        value(
            "switchyard_tool_call_duration_seconds_count",
            &[("tool", "calculator")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value("switchyard_open_streams", &[("transport", "sse")]),
        Some(0.0)
    );
    assert_eq!(value("switchyard_runs_executing", &[]), Some(0.0));
    let commits = value("switchyard_event_writer_commit_seconds_count", &[]).unwrap();
    let rows = value("switchyard_event_writer_batch_size_sum", &[]).unwrap();
    assert!(
        commits >= 6.0 && rows >= commits,
        "{commits} commits, {rows} rows"
    );
    let tokens = |kind: &str| {
        value(
            "switchyard_tokens_total",
            &[("model", "gpt-4o-mini"), ("kind", kind)],
        )
        .unwrap()
    };
    assert!(tokens("input") > 0.0 && tokens("output") > 0.0, "{after}");
    for family in [
        "switchyard_http_requests_total",
        "switchyard_runs_finished_total",
        "switchyard_tokens_total",
    ] {
        assert!(
            after.contains(&format!("# TYPE {family} counter")),
            "{family} is described"
        );
    }
}

/// Connections of `database` that use TLS, and all of them.
async fn tls_connections(admin_url: &str, database: &str) -> (i64, i64) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(admin_url).await.unwrap();
    sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE s.ssl), COUNT(*) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.datname = $1",
    )
    .bind(database)
    .fetch_one(&mut admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn postgres_with_sslmode_require_connects_over_tls_and_an_untrusted_certificate_is_refused() {
    let Some(db) = Database::postgres().await else {
        return; // PostgreSQL only.
    };
    let url = &db.url;
    let admin = std::env::var("TEST_DATABASE_URL").unwrap();
    let database = url.rsplit('/').next().unwrap().to_string();
    let llm = FakeLlm::start().await.unwrap();
    let mut instance = Binary::new()
        .database(&format!("{url}?sslmode=require"))
        .upstream(&llm)
        .spawn();
    llm.push(Turn::text("over TLS"));
    let reply = reqwest::Client::new()
        .post(instance.url("/v1/responses"))
        .json(&json!({"model": "gpt-4o-mini", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let (tls, all) = tls_connections(&admin, &database).await;
    assert!(all > 0 && tls == all, "{tls} of {all} connections use TLS");
    instance.kill();

    // verify-full checks the server's certificate, which no trusted authority signed here.
    let output = Binary::new()
        .database(&format!("{url}?sslmode=verify-full"))
        .run(&["migrate"]);
    let err = &output.stderr;
    assert_ne!(output.code, 0);
    assert!(err.contains("certificate"), "{err}");
}

/// Runs `statements` on the database at `url`, each with the binds given.
async fn execute(url: &str, statements: &[(&str, Vec<i64>)]) {
    use sqlx::Connection;
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        for (sql, binds) in statements {
            let mut query = sqlx::query(sql);
            for bind in binds {
                query = query.bind(*bind);
            }
            query.execute(&mut conn).await.unwrap();
        }
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        for (sql, binds) in statements {
            let mut query = sqlx::query(sql);
            for bind in binds {
                query = query.bind(*bind);
            }
            query.execute(&mut conn).await.unwrap();
        }
    }
}

/// Records migration `version` as applied by a newer release that says binaries knowing
/// `requires` can run on it.
async fn newer_release_applied(url: &str, version: i64, requires: i64) {
    let checksum = match url.starts_with("sqlite:") {
        true => "X'00'",
        false => "'\\x00'::bytea",
    };
    let record = format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'a newer release', TRUE, {checksum}, 0)"
    );
    execute(
        url,
        &[
            (&record, vec![version]),
            (
                "INSERT INTO schema_compat (version, requires) VALUES ($1, $2)",
                vec![version, requires],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_older_binary_runs_on_a_newer_schema_that_allows_it_and_refuses_one_that_does_not() {
    for db in backends().await {
        let url = &db.url;
        let switchyard = Binary::new()
            .database(url)
            .env("SWITCHYARD__SERVER__PORT", "0")
            .env("SWITCHYARD__AUTH__MODE", "open")
            // An upstream on this machine needs no key (nothing is asked of it here).
            .env("SWITCHYARD__LLM__BASE_URL", "http://127.0.0.1:9/v1")
            .env("RUST_LOG", "warn");
        let first = switchyard.run(&["migrate"]);
        let out = &first.stdout;
        assert_eq!(first.code, 0, "{out}");
        assert!(out.contains("applied migrations 1 to "), "{out}");
        let again = switchyard.run(&["migrate"]);
        let out = &again.stdout;
        assert!(out.contains("no migration to apply"), "{out}");

        // A newer release added migration 900, which this release can run on.
        newer_release_applied(url, 900, 10).await;
        let migrate = switchyard.run(&["migrate"]);
        let out = &migrate.stdout;
        assert_eq!(migrate.code, 0, "{out}");
        assert!(
            out.contains("also has migration(s) 900 of a newer release, which this one can run on"),
            "{out}"
        );
        let llm = FakeLlm::start().await.unwrap();
        let mut instance = Binary::new().database(url).upstream(&llm).spawn();
        llm.push(Turn::text("still here"));
        let reply = reqwest::Client::new()
            .post(instance.url("/v1/responses"))
            .json(&json!({"model": "gpt-4o-mini", "input": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        instance.kill();

        // Then migration 901, which needs binaries that know it.
        newer_release_applied(url, 901, 901).await;
        for command in ["migrate", "serve"] {
            let refused = switchyard.run(&[command]);
            let err = &refused.stderr;
            assert_ne!(refused.code, 0, "{command}: {err}");
            assert!(
                err.contains("cannot run on: 901 (needs a binary that knows migration 901)")
                    && err.contains("restore the backup"),
                "{command}: {err}"
            );
        }
    }
}
