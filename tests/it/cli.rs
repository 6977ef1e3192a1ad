//! The real binary: configuration layering, `check-config`, `migrate`, and `serve` stopping
//! cleanly on SIGTERM. Each configuration error has its own test in tests/config.rs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn switchyard() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    // Only what each test sets reaches the binary.
    for (key, _) in std::env::vars() {
        if key.starts_with("SWITCHYARD") || key.starts_with("OPENAI_") {
            command.env_remove(key);
        }
    }
    command
}

fn run(command: &mut Command) -> (i32, String, String) {
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_config_layers_defaults_file_and_environment_and_hides_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("override.toml");
    std::fs::write(&file, "[server]\nport = 7000\nheartbeat_seconds = 5\n").unwrap();
    let (code, out, err) = run(switchyard()
        .args(["--config", file.to_str().unwrap(), "check-config"])
        .env("SWITCHYARD__SERVER__PORT", "9000")
        .env("OPENAI_API_KEY", "sk-very-secret")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"));
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
    let (code, _, err) = run(switchyard()
        .arg("probe")
        .env("SWITCHYARD__SERVER__PORT", "1"));
    assert_eq!(code, 1);
    assert!(err.contains("127.0.0.1:1/readyz"), "{err}");
}

#[test]
fn migrate_creates_the_sqlite_file_and_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/folder/s.db");
    let (code, out, err) = run(switchyard().arg("migrate").env(
        "SWITCHYARD__DATABASE__URL",
        format!("sqlite://{}", path.display()),
    ));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied migrations 1 to "), "{out}");
    assert!(path.exists());
}

#[test]
fn serve_answers_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = switchyard()
        .env("SWITCHYARD__SERVER__PORT", "0")
        .env(
            "SWITCHYARD__DATABASE__URL",
            format!("sqlite://{}/s.db", dir.path().display()),
        )
        .env("OPENAI_API_KEY", "sk-test")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            let at = line.find("address=")?;
            Some(
                line[at + 8..]
                    .split_whitespace()
                    .next()?
                    .trim_matches('"')
                    .to_string(),
            )
        })
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ready = runtime.block_on(async {
        reqwest::get(format!("http://{address}/readyz"))
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(ready, 200);
    let port = address.rsplit(':').next().unwrap();
    let (code, _, err) = run(switchyard()
        .arg("probe")
        .env("SWITCHYARD__SERVER__PORT", port));
    assert_eq!(code, 0, "probe of a ready instance: {err}");

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

#[test]
fn check_config_hides_inline_header_secrets_and_url_passwords_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.toml");
    std::fs::write(
        &file,
        r#"
[database]
url = "postgres://app:db-password@db.internal/switchyard"
[[tool_servers.search.tools]]
name = "search"
url = "https://user:url-password@search.internal/q?api_key=sk-query-key&lang=en"
headers = { Authorization = "Bearer sk-inline-header", "X-Token" = "${SEARCH_TOKEN}" }
"#,
    )
    .unwrap();
    let (code, out, err) = run(switchyard()
        .args(["--config", file.to_str().unwrap(), "check-config"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("SEARCH_TOKEN", "from-env"));
    assert_eq!(code, 0, "{err}");
    for secret in [
        "db-password",
        "url-password",
        "sk-query-key",
        "sk-inline-header",
        "from-env",
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
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/k.db", dir.path().display());
    let (code, out, err) = run(switchyard()
        .args(["keys", "create", "--tenant", "acme", "--name", "ci"])
        .env("SWITCHYARD__DATABASE__URL", &url)
        // Every statement is logged at this level.
        .env("RUST_LOG", "debug"));
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
fn api_keys_are_made_listed_and_revoked_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/k.db", dir.path().display());
    let (code, secret, err) = run(switchyard()
        .args([
            "keys",
            "create",
            "--tenant",
            "acme",
            "--name",
            "ci",
            "--deny-tools",
            "fetch_url",
        ])
        .env("SWITCHYARD__DATABASE__URL", &url));
    assert_eq!(code, 0, "{err}");
    let secret = secret.trim();
    assert!(secret.starts_with("sk-sy-"), "{secret}");
    assert!(err.contains("shown only this once"), "{err}");
    let (code, list, _) = run(switchyard()
        .args(["keys", "list"])
        .env("SWITCHYARD__DATABASE__URL", &url));
    assert_eq!(code, 0);
    assert!(
        list.contains("acme") && list.contains("active") && list.contains("fetch_url"),
        "{list}"
    );
    assert!(
        !list.contains(&secret[10..]),
        "the secret is never listed: {list}"
    );
    let id = list
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let (code, out, _) = run(switchyard()
        .args(["keys", "revoke", id])
        .env("SWITCHYARD__DATABASE__URL", &url));
    assert_eq!(code, 0, "{out}");
    let (_, list, _) = run(switchyard()
        .args(["keys", "list"])
        .env("SWITCHYARD__DATABASE__URL", &url));
    assert!(list.contains("revoked"), "{list}");
    let (code, _, err) = run(switchyard()
        .args(["keys", "revoke", id])
        .env("SWITCHYARD__DATABASE__URL", &url));
    assert_ne!(code, 0);
    assert!(err.contains("no active key"), "{err}");
}

#[test]
fn a_tool_error_body_cannot_forge_a_log_line_or_reach_the_terminal_raw() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (llm, tool) = runtime.block_on(async {
        let llm = fake_llm::FakeLlm::start().await.unwrap();
        let app = axum::Router::new().route(
            "/evil",
            axum::routing::post(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "boom\n2026-01-01T00:00:00.000000Z  INFO switchyard: forged line\u{1b}[31m",
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (llm, format!("http://{addr}/evil"))
    });
    llm.push(fake_llm::Turn::tool_call("c1", "evil", "{}"));
    llm.push(fake_llm::Turn::text("ok"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evil.toml");
    std::fs::write(
        &file,
        format!("[[tool_servers.evil.tools]]\nname = \"evil\"\nurl = \"{tool}\"\n"),
    )
    .unwrap();
    let mut child = switchyard()
        .args(["--config", file.to_str().unwrap()])
        .env("SWITCHYARD__SERVER__PORT", "0")
        .env("SWITCHYARD__AUTH__MODE", "open")
        .env("SWITCHYARD__LLM__RETRIES", "0")
        .env("SWITCHYARD__LLM__BASE_URL", llm.base_url())
        .env(
            "SWITCHYARD__DATABASE__URL",
            format!("sqlite://{}/l.db", dir.path().display()),
        )
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            seen.push(line.clone());
            let at = line.find("address=")?;
            Some(
                line[at + 8..]
                    .split_whitespace()
                    .next()?
                    .trim_matches('"')
                    .to_string(),
            )
        })
        .unwrap();
    runtime.block_on(async {
        let reply = reqwest::Client::new()
            .post(format!("http://{address}/v1/responses"))
            .json(&serde_json::json!({"model": "gpt-4o-mini", "input": "x",
                "tools": [{"type": "mcp", "server_label": "evil", "require_approval": "never"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 200);
    });
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    seen.extend(lines.map_while(Result::ok));
    let _ = child.wait();
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
