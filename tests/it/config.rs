//! Every configuration error, through the real binary: `check-config` refuses the
//! configuration with exit code 2 and one line per problem, naming the full key and where it
//! was set; `serve` refuses the same before it opens the database or listens.

use std::time::{Duration, Instant};

use crate::support::{Binary, ConfigFile};

/// `check-config`'s stderr, once it has refused the configuration (exit code 2).
fn refused(binary: Binary) -> String {
    let outcome = binary.run(&["check-config"]);
    assert_eq!(outcome.code, 2, "{}{}", outcome.stdout, outcome.stderr);
    assert!(
        outcome.stdout.is_empty(),
        "nothing printed: {}",
        outcome.stdout
    );
    outcome.stderr
}

/// `stderr` has this line, exactly.
#[track_caller]
fn assert_line(stderr: &str, line: &str) {
    assert!(
        stderr.lines().any(|l| l == line),
        "expected the line\n{line}\nin\n{stderr}"
    );
}

/// A file's refusal, with its one expected line (`{file}` standing for the file's path).
#[track_caller]
fn assert_refused(toml: &str, line: &str) {
    let file = ConfigFile::new(toml);
    let stderr = refused(Binary::new().config_file(&file.path));
    assert_line(&stderr, &line.replace("{file}", &file.path));
}

// Reading: keys that do not exist, values of the wrong type.

#[test]
fn an_unknown_key_in_the_file_is_refused_with_the_closest_known_key() {
    assert_refused(
        "[llm]\nmodles = [\"gpt-4o\"]\n",
        "error: unknown key llm.modles in {file}; did you mean llm.models?",
    );
}

#[test]
fn an_unknown_key_in_the_environment_is_refused_with_the_variable_and_the_closest_key() {
    let stderr = refused(Binary::new().env("SWITCHYARD__SERVER__PROT", "9000"));
    assert_line(
        &stderr,
        "error: unknown key server.prot (from SWITCHYARD__SERVER__PROT); did you mean server.port (SWITCHYARD__SERVER__PORT)?",
    );
}

#[test]
fn an_unknown_key_like_no_known_one_is_refused_with_the_keys_of_its_table() {
    assert_refused(
        "[auth]\ncolour = \"blue\"\n",
        "error: unknown key auth.colour in {file}; the keys of auth are mode, open_on_any_address",
    );
}

#[test]
fn an_unknown_section_is_refused_with_the_closest_section() {
    assert_refused(
        "[tool_server.weather]\n",
        "error: unknown key tool_server in {file}; did you mean tool_servers?",
    );
}

#[test]
fn an_unknown_key_of_a_named_provider_is_refused_with_its_full_key() {
    assert_refused(
        "[providers.local]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = [\"llama3.1\"]\n",
        "error: unknown key providers.local.model in {file}; did you mean providers.local.models?",
    );
}

#[test]
fn an_unknown_key_of_a_tool_is_refused_with_its_place_in_the_list() {
    assert_refused(
        "[[tool_servers.weather.tools]]\nname = \"get_weather\"\nurl = \"http://127.0.0.1:9100/w\"\nheader = { A = \"b\" }\n",
        "error: unknown key tool_servers.weather.tools[0].header in {file}; did you mean tool_servers.weather.tools[0].headers?",
    );
}

#[test]
fn an_unknown_key_of_the_llm_table_is_refused_although_it_shares_keys_with_providers() {
    let stderr = refused(Binary::new().env("SWITCHYARD__LLM__BASEURL", "http://x"));
    assert_line(
        &stderr,
        "error: unknown key llm.baseurl (from SWITCHYARD__LLM__BASEURL); did you mean llm.base_url (SWITCHYARD__LLM__BASE_URL)?",
    );
}

#[test]
fn a_value_of_the_wrong_type_does_not_hide_the_other_problems_of_the_configuration() {
    // Read as serde reads, then checked as `serve` checks: both kinds in one pass.
    let file = ConfigFile::new(
        "[server]\nport = \"eighty\"\nbody_limit_bytes = 0\n[runs]\nlease_ttl_ms = 0\n\
         [[tool_servers.s.tools]]\nname = \"t\"\nurl = \"ftp://x\"\n",
    );
    let stderr = refused(Binary::new().config_file(&file.path));
    let path = &file.path;
    for line in [
        format!("error: server.port in {path}: expected u16, found string \"eighty\""),
        format!("error: server.body_limit_bytes in {path}: must be positive"),
        format!(
            "error: runs.lease_ttl_ms in {path}: must be longer than runs.sweep_interval_ms \
             (5000): leases are renewed every sweep"
        ),
        format!(
            "error: tool_servers.s.tools[0].url in {path}: \"ftp://x/\" is not an http:// or \
             https:// URL"
        ),
    ] {
        assert_line(&stderr, &line);
    }
    // A check involving a value that could not be read would be about its default instead:
    // it is left out.
    let stderr = refused(Binary::new().config_file(
        &ConfigFile::new("[runs]\nsweep_interval_ms = \"x\"\nlease_ttl_ms = 0\n").path,
    ));
    assert!(stderr.contains("runs.sweep_interval_ms"), "{stderr}");
    assert!(!stderr.contains("lease_ttl_ms"), "{stderr}");
}

#[test]
fn a_trace_sample_ratio_outside_zero_to_one_and_a_collector_that_is_not_http_are_refused() {
    let file = ConfigFile::new(
        "[telemetry]\notlp_endpoint = \"grpc://collector:4317\"\nsample_ratio = 1.5\n",
    );
    let stderr = refused(Binary::new().config_file(&file.path));
    let path = &file.path;
    assert_line(
        &stderr,
        &format!("error: telemetry.sample_ratio in {path}: must be between 0 and 1"),
    );
    assert_line(
        &stderr,
        &format!(
            "error: telemetry.otlp_endpoint in {path}: \"grpc://collector:4317\" is not an http:// or https:// URL"
        ),
    );
}

#[test]
fn a_value_of_the_wrong_type_in_the_file_names_its_key_and_file() {
    assert_refused(
        "[server]\nport = \"abc\"\n",
        "error: server.port in {file}: expected u16, found string \"abc\"",
    );
}

#[test]
fn a_value_of_the_wrong_type_in_the_environment_names_its_key_and_variable() {
    let stderr = refused(Binary::new().env("SWITCHYARD__LLM__MODELS", "gpt-4o"));
    assert_line(
        &stderr,
        "error: llm.models (from SWITCHYARD__LLM__MODELS): expected a sequence, found string \"gpt-4o\"",
    );
}

#[test]
fn a_number_out_of_range_names_its_key() {
    let stderr = refused(Binary::new().env("SWITCHYARD__SERVER__PORT", "70000"));
    assert_line(
        &stderr,
        "error: server.port (from SWITCHYARD__SERVER__PORT): expected u16, found unsigned int `70000`",
    );
}

#[test]
fn a_value_outside_its_choices_is_refused_with_the_closest_choice() {
    assert_refused(
        "[auth]\nmode = \"opne\"\n",
        "error: auth.mode in {file}: \"opne\" is not one of keys, open; did you mean open?",
    );
}

#[test]
fn a_missing_required_key_is_named() {
    assert_refused(
        "[[tool_servers.weather.tools]]\nname = \"get_weather\"\n",
        "error: tool_servers.weather.tools[0].url is missing in {file}: it has no default and must be set",
    );
}

#[test]
fn a_configuration_file_that_does_not_exist_is_refused() {
    let outcome = Binary::new()
        .config_file("/nonexistent.toml")
        .run(&["check-config"]);
    assert_eq!(outcome.code, 2);
    assert_line(
        &outcome.stderr,
        "error: configuration file /nonexistent.toml does not exist",
    );
}

#[test]
fn a_file_that_is_not_toml_is_refused_with_the_line_at_fault() {
    let file = ConfigFile::new("[server\nport = 1\n");
    let stderr = refused(Binary::new().config_file(&file.path));
    assert_line(&stderr, "error: TOML parse error at line 1, column 8");
    assert!(stderr.contains(&format!(" in {}", file.path)), "{stderr}");
    // From the folder above the file's, where a path relative to the working directory would
    // be shorter: the file is still named as it was given.
    let above = std::path::Path::new(&file.path).ancestors().nth(2).unwrap();
    let outcome = Binary::new()
        .current_dir(above)
        .config_file(&file.path)
        .run(&["check-config"]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains(&format!(" in {}", file.path)),
        "{}",
        outcome.stderr
    );
}

#[test]
fn every_reading_problem_of_file_and_environment_is_reported_at_once_one_per_line() {
    let file = ConfigFile::new("[llm]\nmodles = [\"a\"]\n[server]\nport = \"abc\"\n");
    let stderr = refused(
        Binary::new()
            .config_file(&file.path)
            .env("SWITCHYARD__RUNS__LEASE_TTL", "1"),
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            format!(
                "error: unknown key llm.modles in {}; did you mean llm.models?",
                file.path
            ),
            "error: unknown key runs.lease_ttl (from SWITCHYARD__RUNS__LEASE_TTL); did you mean runs.lease_ttl_ms (SWITCHYARD__RUNS__LEASE_TTL_MS)?".into(),
            format!(
                "error: server.port in {}: expected u16, found string \"abc\"",
                file.path
            ),
        ]
    );
}

// Providers and models.

#[test]
fn an_empty_model_list_is_refused() {
    assert_refused(
        "[llm]\nmodels = []\n",
        "error: llm.models in {file}: is empty, and no [providers.NAME] table lists a model either: no request could be served",
    );
    assert_refused(
        "[providers.local]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodels = []\n",
        "error: providers.local.models in {file}: is empty: the provider would serve no model",
    );
}

#[test]
fn an_empty_model_name_is_refused() {
    assert_refused(
        "[llm]\nmodels = [\"gpt-4o\", \"\"]\n",
        "error: llm.models[1] in {file}: is empty: write a model name, or \"*\" for every model no other provider lists",
    );
}

#[test]
fn a_named_provider_without_base_url_is_refused() {
    assert_refused(
        "[providers.local]\nmodels = [\"llama3.1\"]\n",
        "error: providers.local.base_url: is missing: a provider in [providers] needs its own base_url (such as \"http://127.0.0.1:11434/v1\")",
    );
}

#[test]
fn a_base_url_that_is_not_http_is_refused_wherever_it_comes_from() {
    assert_refused(
        "[providers.local]\nbase_url = \"ftp://127.0.0.1/v1\"\nmodels = [\"llama3.1\"]\n",
        "error: providers.local.base_url in {file}: \"ftp://127.0.0.1/v1\" is not an http:// or https:// URL",
    );
    let stderr = refused(Binary::new().env("SWITCHYARD__LLM__BASE_URL", "localhost:11434/v1"));
    assert_line(
        &stderr,
        "error: llm.base_url (from SWITCHYARD__LLM__BASE_URL): \"localhost:11434/v1\" is not an http:// or https:// URL",
    );
    let stderr = refused(Binary::new().env("OPENAI_BASE_URL", "127.0.0.1:11434"));
    assert_line(
        &stderr,
        "error: llm.base_url (from OPENAI_BASE_URL): \"127.0.0.1:11434\" is not an http:// or https:// URL (relative URL without a base)",
    );
}

#[test]
fn an_api_key_env_naming_an_unset_variable_is_refused() {
    assert_refused(
        "[llm]\napi_key_env = \"SWITCHYARD_TEST_UNSET_KEY\"\n",
        "error: llm.api_key_env in {file}: names the environment variable SWITCHYARD_TEST_UNSET_KEY, which is not set",
    );
}

#[test]
fn an_api_key_written_where_its_variable_goes_is_refused_without_showing_it() {
    let file = ConfigFile::new("[llm]\napi_key_env = \"sk-live-1234\"\n");
    let stderr = refused(Binary::new().config_file(&file.path));
    assert_line(
        &stderr,
        &format!(
            "error: llm.api_key_env in {}: is not the name of an environment variable (letters, digits and _): it takes the name of the variable that holds the key, not the key",
            file.path
        ),
    );
    assert!(!stderr.contains("sk-live-1234"), "{stderr}");
}

#[test]
fn a_public_provider_without_any_key_is_refused_and_a_local_one_needs_none() {
    let stderr = refused(Binary::new().env("OPENAI_API_KEY", ""));
    assert_line(
        &stderr,
        "error: llm.api_key: the provider at https://api.openai.com/v1 needs an API key and none is set: set llm.api_key, llm.api_key_env or OPENAI_API_KEY (a server on this machine or a private network needs none)",
    );
    assert_refused(
        "[providers.groq]\nbase_url = \"https://api.groq.com/openai/v1\"\nmodels = [\"llama-3.1-8b-instant\"]\n",
        "error: providers.groq.api_key: the provider at https://api.groq.com/openai/v1 needs an API key and none is set: set providers.groq.api_key or providers.groq.api_key_env (a server on this machine or a private network needs none)",
    );
    let outcome = Binary::new()
        .envs(&[
            ("OPENAI_API_KEY", ""),
            ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
        ])
        .run(&["check-config"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
}

#[test]
fn a_model_routed_by_two_providers_is_refused() {
    assert_refused(
        "[providers.local]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodels = [\"gpt-4o\"]\n",
        "error: providers.local.models[0] in {file}: \"gpt-4o\" is routed by llm.models already; a model has one provider",
    );
}

#[test]
fn a_concurrency_cap_of_zero_is_refused() {
    assert_refused(
        "[llm]\nmax_concurrent_requests = 0\n",
        "error: llm.max_concurrent_requests in {file}: must be positive (leave it out for no limit)",
    );
}

#[test]
fn a_fallback_for_or_to_a_model_nobody_routes_is_refused() {
    let toml = "[fallbacks]\n\"gpt4o\" = { model = \"llama3.1\" }\n";
    let file = ConfigFile::new(toml);
    let stderr = refused(Binary::new().config_file(&file.path));
    assert_line(
        &stderr,
        &format!(
            "error: fallbacks.gpt4o in {}: no provider routes the model \"gpt4o\" (llm.models, providers.NAME.models), so it never falls back; did you mean gpt-4o?",
            file.path
        ),
    );
    assert_line(
        &stderr,
        &format!(
            "error: fallbacks.gpt4o.model in {}: no provider routes the model \"llama3.1\" (llm.models, providers.NAME.models)",
            file.path
        ),
    );
}

// Server, database, runs.

#[test]
fn a_database_url_of_another_kind_is_refused_with_its_password_hidden() {
    let stderr = refused(Binary::new().env("SWITCHYARD__DATABASE__URL", "mysql://app:pw@db/x"));
    assert_line(
        &stderr,
        "error: database.url (from SWITCHYARD__DATABASE__URL): \"mysql://app:***@db/x\" is not a database URL: it starts with sqlite://, postgres:// or postgresql://",
    );
    let stderr =
        refused(Binary::new().env("SWITCHYARD__DATABASE__URL", "postgres://app:pw@db:port/x"));
    assert_line(
        &stderr,
        "error: database.url (from SWITCHYARD__DATABASE__URL): \"postgres://***@db:port/x\" is not a valid URL: invalid port number",
    );
}

#[test]
fn a_listen_address_with_a_port_is_refused() {
    assert_refused(
        "[server]\nhost = \"0.0.0.0:8080\"\n",
        "error: server.host in {file}: \"0.0.0.0:8080\" is not an address to listen on: write an IP address or a host name, and the port as server.port",
    );
}

#[test]
fn a_zero_where_a_count_or_size_is_needed_is_refused() {
    let file = ConfigFile::new(
        "[server]\nbody_limit_bytes = 0\nmax_connections = 0\n[database]\nmax_connections = 0\n[tools]\nmax_concurrency = 0\nmax_turns = 0\n[runs]\nevent_batch_max = 0\n",
    );
    let stderr = refused(Binary::new().config_file(&file.path));
    for key in [
        "server.body_limit_bytes",
        "server.max_connections",
        "database.max_connections",
        "tools.max_concurrency",
        "tools.max_turns",
        "runs.event_batch_max",
    ] {
        assert_line(
            &stderr,
            &format!("error: {key} in {}: must be positive", file.path),
        );
    }
}

#[test]
fn open_mode_on_a_public_address_is_refused() {
    let stderr = refused(Binary::new().envs(&[
        ("SWITCHYARD__AUTH__MODE", "open"),
        ("SWITCHYARD__SERVER__HOST", "0.0.0.0"),
    ]));
    assert_line(
        &stderr,
        "error: auth.mode (from SWITCHYARD__AUTH__MODE): \"open\" serves anyone who can connect, without API keys, so it listens on loopback only, not on server.host = \"0.0.0.0\"; use API keys (auth.mode = \"keys\"), or set auth.open_on_any_address = true",
    );
}

#[test]
fn a_lease_no_longer_than_the_sweep_is_refused() {
    assert_refused(
        "[runs]\nlease_ttl_ms = 5000\n",
        "error: runs.lease_ttl_ms in {file}: must be longer than runs.sweep_interval_ms (5000): leases are renewed every sweep",
    );
}

// Tools and tool servers.

#[test]
fn a_url_in_the_fetch_url_allow_list_is_refused() {
    assert_refused(
        "[tools.fetch_url]\nallowed_hosts = [\"https://example.com\"]\n",
        "error: tools.fetch_url.allowed_hosts[0] in {file}: \"https://example.com\" is not a host name: write example.com, or .example.com for it and its subdomains",
    );
}

/// A tool server `weather` with one tool, `extra` added to its table.
fn weather_tool(extra: &str) -> String {
    format!(
        "[[tool_servers.weather.tools]]\nname = \"get_weather\"\nurl = \"http://127.0.0.1:9100/weather\"\n{extra}\n"
    )
}

#[test]
fn a_tool_url_that_is_not_http_is_refused_with_its_secrets_hidden() {
    assert_refused(
        "[[tool_servers.weather.tools]]\nname = \"get_weather\"\nurl = \"ftp://u:pw@h/w?api_key=sk-1\"\n",
        "error: tool_servers.weather.tools[0].url in {file}: \"ftp://u:***@h/w?api_key=***\" is not an http:// or https:// URL",
    );
}

#[test]
fn a_tool_method_that_is_not_a_known_one_is_refused() {
    assert_refused(
        &weather_tool("method = \"PSOT\""),
        "error: tool_servers.weather.tools[0].method in {file}: \"PSOT\" is not one of GET, POST, PUT, PATCH, DELETE",
    );
}

#[test]
fn a_tool_header_naming_an_unset_variable_is_refused() {
    assert_refused(
        &weather_tool("headers = { Authorization = \"Bearer ${SWITCHYARD_TEST_UNSET_TOKEN}\" }"),
        "error: tool_servers.weather.tools[0].headers.Authorization in {file}: names the environment variable SWITCHYARD_TEST_UNSET_TOKEN, which is not set",
    );
}

#[test]
fn a_tool_header_name_that_http_cannot_carry_is_refused() {
    assert_refused(
        &weather_tool("headers = { \"X Token\" = \"x\" }"),
        "error: tool_servers.weather.tools[0].headers.\"X Token\" in {file}: is not a valid header name",
    );
}

#[test]
fn a_tool_without_a_name_is_refused() {
    assert_refused(
        "[[tool_servers.weather.tools]]\nname = \"\"\nurl = \"http://127.0.0.1:9100/weather\"\n",
        "error: tool_servers.weather.tools[0].name in {file}: is empty",
    );
}

#[test]
fn tools_under_the_builtin_label_are_refused() {
    assert_refused(
        "[[tool_servers.builtin.tools]]\nname = \"mine\"\nurl = \"http://127.0.0.1:9100/mine\"\n",
        "error: tool_servers.builtin.tools: the label 'builtin' is reserved for the compiled-in tools; it takes only require_approval",
    );
}

#[test]
fn a_tool_server_that_names_two_tools_alike_is_refused() {
    // Another server's tool of the same name is not a problem: a tool belongs to its server.
    let tool = "[[tool_servers.math.tools]]\nname = \"calculator\"\nurl = \"http://127.0.0.1:9100/calc\"\n";
    assert_refused(
        &format!("{tool}{tool}"),
        "error: tool_servers.math.tools[1].name: tool \"calculator\" is defined twice by tool server \"math\"",
    );
}

#[test]
fn a_tool_with_an_invalid_parameter_schema_is_refused() {
    assert_refused(
        &weather_tool("parameters = { type = \"objekt\" }"),
        "error: tool_servers.weather.tools[0].parameters: tool \"get_weather\" of tool server \"weather\" has an invalid parameter schema: \"objekt\" is not valid under any of the schemas listed in the 'anyOf' keyword",
    );
}

#[test]
fn a_hosted_tool_type_that_does_not_exist_is_refused_with_the_closest_one() {
    assert_refused(
        "[tools.hosted]\nweb_serch = \"builtin\"\n",
        "error: tools.hosted.web_serch: \"web_serch\" is not a hosted tool type (such as web_search, file_search, code_interpreter, image_generation); did you mean web_search?",
    );
}

#[test]
fn a_hosted_tool_mapped_to_a_server_that_does_not_exist_is_refused() {
    assert_refused(
        &format!(
            "{}[tools.hosted]\nweb_search = \"waether\"\n",
            weather_tool("")
        ),
        "error: tools.hosted.web_search: names the tool server \"waether\", which is not configured; did you mean weather?",
    );
}

#[test]
fn disabling_a_tool_that_does_not_exist_is_refused_with_the_closest_name() {
    assert_refused(
        "[tools]\ndisabled = [\"fetch_ur\"]\n",
        "error: tools.disabled[0]: no tool is named \"fetch_ur\"; did you mean fetch_url?",
    );
}

// Warnings: printed, and the configuration is used.

#[test]
fn a_key_sent_over_plain_http_to_a_public_host_is_a_warning() {
    let file = ConfigFile::new(
        "[providers.remote]\nbase_url = \"http://models.example.com/v1\"\napi_key = \"k\"\nmodels = [\"m\"]\n",
    );
    let outcome = Binary::new().config_file(&file.path).run(&["check-config"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_line(
        &outcome.stderr,
        &format!(
            "warning: providers.remote.base_url in {}: http://models.example.com/v1 is plain http to a host that is not on this machine or a private network: the API key travels unencrypted; use https",
            file.path
        ),
    );
}

#[test]
fn a_key_set_both_inline_and_by_variable_is_a_warning() {
    let file = ConfigFile::new("[llm]\napi_key = \"sk-1\"\napi_key_env = \"HOME\"\n");
    let outcome = Binary::new().config_file(&file.path).run(&["check-config"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_line(
        &outcome.stderr,
        &format!(
            "warning: llm.api_key in {}: is set, and so is llm.api_key_env: api_key is used, the variable is not read",
            file.path
        ),
    );
}

#[test]
fn a_variable_with_one_underscore_after_the_prefix_is_a_warning() {
    let outcome = Binary::new()
        .env("SWITCHYARD_SERVER__PORT", "9000")
        .run(&["check-config"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_line(
        &outcome.stderr,
        "warning: SWITCHYARD_SERVER__PORT is not read: configuration variables start with SWITCHYARD__ (two underscores)",
    );
    assert!(outcome.stdout.contains("port = 8080"), "{}", outcome.stdout);
}

// `serve` and the database.

/// Waits for `child` to exit (at most 20 s); its exit code and stderr.
fn exit_of(mut child: std::process::Child) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn serve_refuses_to_start_with_the_message_check_config_gives() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |toml: &ConfigFile| {
        Binary::new()
            .config_file(&toml.path)
            .env("SWITCHYARD__SERVER__PORT", "0")
            .database(&format!("sqlite://{}/s.db", dir.path().display()))
            .start(&["serve"])
    };
    // A problem of reading, then one of the values.
    let typo = ConfigFile::new("[llm]\nmodles = []\n");
    let bad_method = ConfigFile::new(&weather_tool("method = \"PSOT\""));
    for (toml, line) in [
        (
            &typo,
            "error: unknown key llm.modles in {file}; did you mean llm.models?",
        ),
        (
            &bad_method,
            "error: tool_servers.weather.tools[0].method in {file}: \"PSOT\" is not one of GET, POST, PUT, PATCH, DELETE",
        ),
    ] {
        let (code, stderr) = exit_of(serve(toml));
        assert_eq!(code, 2, "{stderr}");
        assert_line(&stderr, &line.replace("{file}", &toml.path));
        assert_eq!(
            stderr,
            refused(Binary::new().config_file(&toml.path)),
            "the same as check-config"
        );
    }
    assert!(
        !dir.path().join("s.db").exists(),
        "the database is not touched"
    );
}

#[test]
fn check_config_touches_neither_the_database_nor_the_port() {
    let outcome = Binary::new()
        .envs(&[
            (
                "SWITCHYARD__DATABASE__URL",
                "postgres://postgres@127.0.0.1:1/x",
            ),
            ("SWITCHYARD__SERVER__PORT", "1"),
        ])
        .run(&["check-config"]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
}

#[test]
fn an_unreachable_database_is_reported_with_its_cause_not_a_pool_timeout() {
    let url = "postgres://postgres:db-secret@127.0.0.1:1/x";
    let switchyard = Binary::new()
        .env("SWITCHYARD__SERVER__PORT", "0")
        .database(url);
    // Both wait for the database a few seconds (it may be starting): side by side.
    let children = [switchyard.start(&["serve"]), switchyard.start(&["migrate"])];
    for child in children {
        let (code, stderr) = exit_of(child);
        assert_eq!(code, 1, "{stderr}");
        assert_line(
            &stderr,
            "error: cannot open the database at postgres://postgres:***@127.0.0.1:1/x: database unavailable: Connection refused (os error 111), still after 5 s of trying",
        );
        assert!(!stderr.contains("db-secret"), "{stderr}");
    }
}
