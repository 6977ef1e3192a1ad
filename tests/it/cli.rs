//! The real binary: configuration layering, `check-config`, `migrate`, and `serve` stopping
//! cleanly on SIGTERM. Each configuration error has its own test among the `config` tests.

use std::time::Duration;

use crate::support::{
    Binary, ConfigFile, Database, FakeLlm, Output, Turn, first_listed_key, serve,
};

#[test]
fn check_config_layers_defaults_file_and_environment_and_hides_secrets() {
    let file = ConfigFile::new("[server]\nport = 7000\nheartbeat_seconds = 5\n");
    let Output {
        code,
        stdout: out,
        stderr: err,
    } = Binary::new()
        .config_file(&file.path)
        .env("SWITCHYARD__SERVER__PORT", "9000")
        .env("OPENAI_API_KEY", "sk-very-secret")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
        .run(&["check-config"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("port = 9000"),
        "the environment wins over the file: {out}"
    );
    assert!(
        out.contains("heartbeat_seconds = 5"),
        "the file wins over the defaults: {out}"
    );
    assert!(
        out.contains("body_limit_bytes = 8388608"),
        "defaults stay: {out}"
    );
    assert!(
        out.contains("base_url = \"http://127.0.0.1:11434/v1\""),
        "OPENAI_BASE_URL is the fallback: {out}"
    );
    assert!(out.contains("api_key = \"***\""), "{out}");
    assert!(!out.contains("sk-very-secret") && !err.contains("sk-very-secret"));
}

#[test]
fn probe_fails_when_nothing_answers() {
    let Output {
        code, stderr: err, ..
    } = Binary::new()
        .env("SWITCHYARD__SERVER__PORT", "1")
        .run(&["probe"]);
    assert_eq!(code, 1);
    assert!(err.contains("127.0.0.1:1/readyz"), "{err}");
}

#[test]
fn migrate_creates_the_sqlite_file_and_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/folder/s.db");
    let Output {
        code,
        stdout: out,
        stderr: err,
    } = Binary::new()
        .database(&format!("sqlite://{}", path.display()))
        .run(&["migrate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied migrations 1 to "), "{out}");
    assert!(path.exists());
}

#[test]
fn serve_answers_and_stops_cleanly_on_sigterm() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut instance = Binary::new().spawn();
    let ready = runtime.block_on(async {
        reqwest::get(instance.url("/readyz"))
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(ready, 200);
    let port = instance.address.rsplit(':').next().unwrap();
    let Output {
        code, stderr: err, ..
    } = Binary::new()
        .env("SWITCHYARD__SERVER__PORT", port)
        .run(&["probe"]);
    assert_eq!(code, 0, "probe of a ready instance: {err}");

    instance.terminate();
    let status = runtime
        .block_on(instance.exited(Duration::from_secs(20)))
        .expect("did not stop after SIGTERM");
    assert!(status.success(), "{status}");
    let rest = instance.logs.lines();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

#[test]
fn check_config_hides_inline_header_secrets_and_url_passwords_and_keys() {
    let file = ConfigFile::new(
        r#"
[database]
url = "postgres://app:db-password@db.internal/switchyard"
[[tool_servers.search.tools]]
name = "search"
url = "https://user:url-password@search.internal/q?api_key=sk-query-key&lang=en"
headers = { Authorization = "Bearer sk-inline-header", "X-Token" = "${SEARCH_TOKEN}" }
[telemetry]
otlp_endpoint = "https://otel:otlp-password@collector.internal:4318"
otlp_headers = { "x-api-key" = "sk-otlp-header" }
"#,
    );
    let Output {
        code,
        stdout: out,
        stderr: err,
    } = Binary::new()
        .config_file(&file.path)
        .env("OPENAI_API_KEY", "sk-test")
        .env("SEARCH_TOKEN", "from-env")
        .run(&["check-config"]);
    assert_eq!(code, 0, "{err}");
    for secret in [
        "db-password",
        "url-password",
        "sk-query-key",
        "sk-inline-header",
        "from-env",
        "otlp-password",
        "sk-otlp-header",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} shown:\n{out}"
        );
    }
    assert!(
        out.contains("postgres://app:***@db.internal/switchyard"),
        "{out}"
    );
    assert!(out.contains("api_key=***"), "{out}");
    assert!(out.contains("Authorization = \"***\""), "{out}");
    assert!(
        out.contains("${SEARCH_TOKEN}"),
        "a reference is shown as it is: {out}"
    );
}

#[test]
fn a_new_key_is_alone_on_standard_output_whatever_is_logged() {
    // On PostgreSQL without autovacuum a warning was logged there, before the secret: a
    // script's `key=$(switchyard keys create …)` got both.
    let db = Database::sqlite();
    assert_eq!(Binary::new().database(&db.url).run(&["migrate"]).code, 0);
    let Output {
        code,
        stdout: out,
        stderr: err,
    } = Binary::new()
        .database(&db.url)
        // Every statement is logged at this level.
        .env("RUST_LOG", "debug")
        .run(&["keys", "create", "--tenant", "acme", "--name", "ci"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].starts_with("sk-sy-"), "{out}");
    assert!(
        err.contains("DEBUG"),
        "the logs went to standard error: {err}"
    );
}

#[test]
fn keys_without_the_servers_database_make_none_and_name_the_one_they_looked_for() {
    // The default URL is relative: run from another folder, `keys` would have made a new
    // empty file there, whose keys no server reads.
    let elsewhere = tempfile::tempdir().unwrap();
    let switchyard = Binary::new().current_dir(elsewhere.path());
    for command in [
        &["keys", "create", "--tenant", "acme", "--name", "ci"][..],
        &["keys", "list"][..],
    ] {
        let Output {
            code,
            stdout: out,
            stderr: err,
        } = switchyard.run(command);
        assert_eq!(code, 1, "{command:?}: {err}");
        assert!(out.is_empty(), "no key is printed: {out}");
        let expected = elsewhere.path().join("data/switchyard.db");
        assert!(
            err.contains(&format!("no database at {}", expected.display())),
            "the absolute path it looked for: {err}"
        );
        assert!(
            err.contains("sqlite://data/switchyard.db") && err.contains("switchyard migrate"),
            "the setting and the way out: {err}"
        );
    }
    assert!(
        !elsewhere.path().join("data").exists(),
        "nothing was made in the folder"
    );
    // Once the database is made on purpose, the same command works there.
    assert_eq!(switchyard.run(&["migrate"]).code, 0);
    let Output { code, stderr, .. } = switchyard.run(&["keys", "list"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn version_names_the_commit_built() {
    let Output {
        code, stdout: out, ..
    } = Binary::new().run(&["--version"]);
    assert_eq!(code, 0);
    let line = out.trim();
    let expected = format!("switchyard {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&expected) && line.ends_with(')'), "{line}");
    let commit = &line[expected.len()..line.len() - 1];
    // The checkout's HEAD when the tests run from one (as the binary was built from it).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success());
    match head {
        Some(head) => assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim()),
        None => assert!(!commit.is_empty(), "{line}"),
    }
}

#[test]
fn api_keys_are_made_listed_and_revoked_from_the_command_line() {
    let db = Database::sqlite();
    let switchyard = Binary::new().database(&db.url);
    assert_eq!(switchyard.run(&["migrate"]).code, 0);
    let Output {
        code,
        stdout: secret,
        stderr: err,
    } = switchyard.run(&[
        "keys",
        "create",
        "--tenant",
        "acme",
        "--name",
        "ci",
        "--deny-tools",
        "fetch_url",
    ]);
    assert_eq!(code, 0, "{err}");
    let secret = secret.trim();
    assert!(secret.starts_with("sk-sy-"), "{secret}");
    assert!(err.contains("shown only this once"), "{err}");
    let Output {
        code, stdout: list, ..
    } = switchyard.run(&["keys", "list"]);
    assert_eq!(code, 0);
    assert!(
        list.contains("acme") && list.contains("active") && list.contains("fetch_url"),
        "{list}"
    );
    assert!(
        !list.contains(&secret[10..]),
        "the secret is never listed: {list}"
    );
    let id = first_listed_key(&list);
    let Output {
        code, stdout: out, ..
    } = switchyard.run(&["keys", "revoke", id]);
    assert_eq!(code, 0, "{out}");
    let list = switchyard.run(&["keys", "list"]).stdout;
    assert!(list.contains("revoked"), "{list}");
    let Output {
        code, stderr: err, ..
    } = switchyard.run(&["keys", "revoke", id]);
    assert_ne!(code, 0);
    assert!(err.contains("no active key"), "{err}");
}

#[test]
fn a_tool_error_body_cannot_forge_a_log_line_or_reach_the_terminal_raw() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (llm, tool) = runtime.block_on(async {
        let llm = FakeLlm::start().await.unwrap();
        let app = axum::Router::new().route(
            "/evil",
            axum::routing::post(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "boom\n2026-01-01T00:00:00.000000Z  INFO switchyard: forged line\u{1b}[31m",
                )
            }),
        );
        (llm, format!("{}/evil", serve(app).await))
    });
    llm.push(Turn::tool_call("c1", "evil", "{}"));
    llm.push(Turn::text("ok"));
    let file = ConfigFile::new(&format!(
        "[[tool_servers.evil.tools]]\nname = \"evil\"\nurl = \"{tool}\"\n"
    ));
    let mut instance = Binary::new().upstream(&llm).config_file(&file.path).spawn();
    runtime.block_on(async {
        let reply = reqwest::Client::new()
            .post(instance.url("/v1/responses"))
            .json(&serde_json::json!({"model": "gpt-4o-mini", "input": "x",
                "tools": [{"type": "mcp", "server_label": "evil", "require_approval": "never"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 200);
    });
    instance.terminate();
    runtime
        .block_on(instance.exited(Duration::from_secs(20)))
        .expect("it stopped after SIGTERM");
    let seen = instance.logs.lines();
    let log = seen.join("\n");
    assert!(log.contains("forged line"), "the error is logged: {log}");
    assert!(
        !seen.iter().any(|l| l.starts_with("2026-01-01T00:00:00")),
        "a forged line: {log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "an escape sequence reached the log: {log:?}"
    );
    assert!(
        log.contains("\\n2026-01-01"),
        "the newline is escaped: {log}"
    );
}
