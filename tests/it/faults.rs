//! Regression tests for faults: a cancel through a replica that does not execute the run, a
//! crash between a run's final state and its terminal event, U+0000 in stored text, readers
//! that stop reading, a graceful stop, two processes on one SQLite file, and a randomized race
//! of everything that can end a paused run.
//!
//! They describe what clients see, through the HTTP API and real processes only. Every log is
//! checked by one auditor ([`audit_log`]) and against the stored state
//! ([`assert_state_matches`]). PostgreSQL variants run when `TEST_DATABASE_URL` is set;
//! `TEST_BACKEND=sqlite|postgres` keeps one backend. Randomized tests print their seed;
//! `FAULTS_SEED=N` replays the same random choices (timing still varies).
//! `TEST_BINARY_LOGS=1` shows the logs of the spawned processes. The sizes of the
//! stalled-reader and race tests can be changed with `FAULTS_STALL_*` and `FAULTS_RACE_*`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchyard::config::Config;
use tokio::io::AsyncWriteExt;

use crate::support::{
    Binary, Database, FakeLlm, Instance, Sse, SseEvent, Step, TestApp, Turn, audit_log, backends,
    describe, http_tool, is_pause, is_terminal, parse_sse, run_sql, serve,
};

/// How long any request may take to answer, and a stream to end once it should.
const LIVENESS: Duration = Duration::from_secs(10);

/// The status the log's last terminal event reports.
fn logged_status(log: &Sse) -> String {
    let last = log
        .events
        .iter()
        .rev()
        .find(|e| is_terminal(&e.event))
        .unwrap_or_else(|| panic!("no terminal event: {}", describe(log)));
    last.data["response"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The stored run says what its log's last terminal event says (a pause that a continuation
/// completed is `completed`, like the pause's `response.completed`).
async fn assert_state_matches(api: &Api, id: &str, log: &Sse) {
    let (status, run) = api.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200, "{id}: {run}");
    assert_eq!(
        run["status"].as_str().unwrap_or_default(),
        logged_status(log),
        "{id}: the stored status is the one its log ends with: {}",
        describe(log)
    );
}

/// The events as parsed (comments such as heartbeats left out), for comparing two reads.
fn frames(sse: &Sse) -> Vec<(String, Option<String>, Value)> {
    sse.events
        .iter()
        .map(|e| (e.event.clone(), e.id.clone(), e.data.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Clients.

/// A client of one instance; every request must answer within [`LIVENESS`].
#[derive(Clone)]
struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    fn of(app: &TestApp) -> Api {
        Api {
            base: app.base.clone(),
            client: reqwest::Client::new(),
        }
    }

    fn at(address: &str) -> Api {
        Api {
            base: format!("http://{address}"),
            client: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// Sends a request; its status and JSON body (or the body as a string).
    async fn send(&self, what: String, request: reqwest::RequestBuilder) -> (u16, Value) {
        let answer = tokio::time::timeout(LIVENESS, async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let text = response.text().await?;
            Ok::<_, reqwest::Error>((status, text))
        })
        .await;
        match answer {
            Err(_) => panic!("{what} did not answer within {LIVENESS:?}"),
            Ok(Err(e)) => panic!("{what} failed: {e}"),
            Ok(Ok((status, text))) => (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            ),
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let request = self.client.get(self.url(path));
        self.send(format!("GET {}{path}", self.base), request).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let request = self.client.post(self.url(path)).json(body);
        self.send(format!("POST {}{path}", self.base), request)
            .await
    }

    async fn status(&self, id: &str) -> String {
        let (code, run) = self.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(code, 200, "GET {id}: {run}");
        run["status"].as_str().unwrap_or_default().to_string()
    }

    /// The whole log, replayed; what arrived within [`LIVENESS`] if it does not end.
    async fn replay(&self, id: &str) -> Sse {
        self.replay_for(id, LIVENESS).await
    }

    /// The log as replayed for at most `within`.
    async fn replay_for(&self, id: &str, within: Duration) -> Sse {
        let url = self.url(&format!("/v1/responses/{id}?stream=true"));
        let response = tokio::time::timeout(LIVENESS, self.client.get(url).send())
            .await
            .unwrap_or_else(|_| panic!("the replay of {id} did not start within {LIVENESS:?}"))
            .unwrap();
        read_for(response, within).await
    }

    /// Polls until the run is in a final status (not `queued` or `in_progress`) or `within`
    /// passed; the last answer.
    async fn wait_until_stopped(&self, id: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (_, run) = self.get(&format!("/v1/responses/{id}")).await;
            let running = run["status"] == "in_progress" || run["status"] == "queued";
            if !running || Instant::now() >= deadline {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reads an SSE response until it ends or `within` passed; keeps the whole frames.
async fn read_for(response: reqwest::Response, within: Duration) -> Sse {
    let status = response.status().as_u16();
    let mut body = response.bytes_stream();
    let deadline = tokio::time::Instant::now() + within;
    let mut raw = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await {
        raw.extend_from_slice(&chunk);
    }
    whole_frames(status, &raw)
}

/// The complete frames of what arrived (a frame cut in half is not an event the client saw).
fn whole_frames(status: u16, raw: &[u8]) -> Sse {
    let mut raw = String::from_utf8_lossy(raw).into_owned();
    let whole = raw.rfind("\n\n").map_or(0, |end| end + 2);
    raw.truncate(whole);
    parse_sse(status, "text/event-stream".into(), raw)
}

/// A stream read in the background, inspectable while it arrives.
struct Live {
    status: u16,
    raw: Arc<Mutex<Vec<u8>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Live {
    async fn start(request: reqwest::RequestBuilder) -> Live {
        let response = tokio::time::timeout(LIVENESS, request.send())
            .await
            .expect("the stream started within 10 s")
            .unwrap();
        let status = response.status().as_u16();
        let raw: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = raw.clone();
        let reader = tokio::spawn(async move {
            let mut body = response.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                sink.lock().unwrap().extend_from_slice(&chunk);
            }
        });
        Live {
            status,
            raw,
            reader,
        }
    }

    /// A streamed run created on `api`.
    async fn create(api: &Api, body: Value) -> Live {
        let mut body = body;
        body["stream"] = json!(true);
        Live::start(api.client.post(api.url("/v1/responses")).json(&body)).await
    }

    fn so_far(&self) -> Sse {
        whole_frames(self.status, &self.raw.lock().unwrap())
    }

    /// Waits until what arrived satisfies `done`.
    async fn wait_for(&self, what: &str, done: impl Fn(&[SseEvent]) -> bool) {
        let deadline = Instant::now() + LIVENESS;
        while !done(&self.so_far().events) {
            assert!(
                Instant::now() < deadline,
                "the stream did not show {what} within {LIVENESS:?}: {}",
                describe(&self.so_far())
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The run's id, once `response.created` arrived.
    async fn response_id(&self) -> String {
        self.wait_for("response.created", |events| !events.is_empty())
            .await;
        self.so_far().response_id()
    }

    /// What the stream carried once it ended, or after `within` (then `false`: still open).
    async fn finish(mut self, within: Duration) -> (Sse, bool) {
        let ended = tokio::time::timeout(within, &mut self.reader).await.is_ok();
        self.reader.abort();
        (self.so_far(), ended)
    }
}

/// A small deterministic generator (SplitMix64); the seed is printed so a failure repeats
/// with `FAULTS_SEED`.
struct Rng(u64);

impl Rng {
    fn seeded(test: &str) -> Rng {
        let seed = std::env::var("FAULTS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: seed {seed} (FAULTS_SEED={seed} repeats it)");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `count` words, `w0 w1 …`: a text answer of that many deltas.
fn words(count: usize) -> String {
    (0..count)
        .map(|n| format!("w{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn deltas(events: &[SseEvent]) -> usize {
    events
        .iter()
        .filter(|e| e.event == "response.output_text.delta")
        .count()
}

fn backend(url: &str) -> &'static str {
    if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A cancel through a replica that is not executing the run.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_another_replica_stops_the_run_where_it_executes_on_postgres() {
    let llm = FakeLlm::start().await.unwrap();
    let Some(db) = Database::postgres().await else {
        return;
    };
    // Two processes on one database, with one fake LLM.
    let instance = Binary::new().database(&db.url).upstream(&llm);
    let (a, b) = (instance.spawn(), instance.spawn());
    let (a_api, b_api) = (Api::at(&a.address), Api::at(&b.address));
    // About five seconds of text on A.
    llm.push(Turn::text(&words(50)).paced(100));
    let live = Live::create(
        &a_api,
        json!({"model": "gpt-4o-mini", "input": "count slowly"}),
    )
    .await;
    let id = live.response_id().await;
    live.wait_for("three deltas", |events| deltas(events) >= 3)
        .await;

    let (status, cancelled) = b_api
        .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200, "the cancel through B answers: {cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // A's client sees the run end: response.failed (status cancelled), [DONE], nothing after.
    let (seen, ended) = live.finish(LIVENESS).await;
    assert!(
        ended,
        "A's stream ends within {LIVENESS:?} of the cancel: {}",
        describe(&seen)
    );
    audit_log(&seen);
    assert_eq!(seen.last().event, "response.failed", "{}", describe(&seen));
    assert_eq!(seen.last().data["response"]["status"], "cancelled");

    // B replays exactly that; both say cancelled.
    let replay = b_api.replay(&id).await;
    audit_log(&replay);
    assert_eq!(
        frames(&replay),
        frames(&seen),
        "B replays what A's client saw"
    );
    for api in [&a_api, &b_api] {
        assert_eq!(api.status(&id).await, "cancelled", "{}", api.base);
        assert_state_matches(api, &id, &replay).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_cancelled_through_another_replica_at_random_moments_all_end_cleanly_on_postgres() {
    let llm = FakeLlm::start().await.unwrap();
    let Some(db) = Database::postgres().await else {
        return;
    };
    // Two processes on one database, with one fake LLM.
    let instance = Binary::new().database(&db.url).upstream(&llm);
    let (a, b) = (instance.spawn(), instance.spawn());
    let (a_api, b_api) = (Api::at(&a.address), Api::at(&b.address));
    let mut rng = Rng::seeded("cancel through another replica");
    let count = 10;
    for _ in 0..count {
        // About 300 ms of text each.
        llm.push(Turn::text(&words(20)).paced(15));
    }
    let mut runs = Vec::new();
    for n in 0..count {
        let delay = Duration::from_millis(rng.below(400));
        let (a, b) = (a_api.clone(), b_api.clone());
        runs.push(tokio::spawn(async move {
            let live = Live::create(
                &a,
                json!({"model": "gpt-4o-mini", "input": format!("run {n}")}),
            )
            .await;
            let id = live.response_id().await;
            tokio::time::sleep(delay).await;
            let (status, answer) = b
                .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
                .await;
            assert_eq!(
                status, 200,
                "run {n} ({id}), cancel after {delay:?}: {answer}"
            );
            let (seen, ended) = live.finish(LIVENESS).await;
            assert!(ended, "run {n}: A's stream ended: {}", describe(&seen));
            audit_log(&seen);
            let replay = b.replay(&id).await;
            audit_log(&replay);
            assert_eq!(
                frames(&replay),
                frames(&seen),
                "run {n}: B replays A's stream"
            );
            for api in [&a, &b] {
                assert_state_matches(api, &id, &replay).await;
            }
            // The cancel answered with the run as it ended: cancelled, or completed first.
            assert_eq!(
                answer["status"].as_str().unwrap_or_default(),
                logged_status(&replay),
                "run {n}: the cancel's answer is the run's end"
            );
            format!(
                "run {n}: cancel after {delay:?} → {}",
                logged_status(&replay)
            )
        }));
    }
    for run in runs {
        eprintln!("{}", run.await.unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// 2. A crash between a run's final state and its terminal event.

/// Makes the database refuse frames holding a `response.completed` event until `until` (wall
/// clock): a trigger that ends by itself, so nothing needs the database while the service runs.
async fn refuse_completed_events_until(url: &str, until: SystemTime) {
    let secs = until.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let statements = if url.starts_with("sqlite") {
        let julian = secs / 86_400.0 + 2_440_587.5;
        vec![format!(
            "CREATE TRIGGER refuse_completed BEFORE INSERT ON response_event_frames \
             WHEN NEW.events LIKE '%,\"response.completed\",%' AND julianday('now') < {julian} \
             BEGIN SELECT RAISE(ABORT, 'fault injected by the test'); END"
        )]
    } else {
        vec![
            format!(
                "CREATE FUNCTION refuse_completed() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF clock_timestamp() < to_timestamp({secs}) THEN \
                 RAISE EXCEPTION 'fault injected by the test'; END IF; RETURN NEW; END $$"
            ),
            "CREATE TRIGGER refuse_completed BEFORE INSERT ON response_event_frames FOR EACH ROW \
             WHEN (NEW.events LIKE '%,\"response.completed\",%') \
             EXECUTE FUNCTION refuse_completed()"
                .to_string(),
        ]
    };
    run_sql(url, &statements).await;
}

/// While the terminal event of a run cannot be written, the stored run never shows a final
/// status without it in its log; once it can, the run ends with a whole log.
async fn the_final_state_and_the_terminal_event_commit_together(url: &str) {
    let llm = FakeLlm::start().await.unwrap();
    // The migrations, applied by the binary (`switchyard migrate`), which then exits.
    let migrated = Binary::new().database(url).run(&["migrate"]);
    assert_eq!(
        migrated.code, 0,
        "migrations applied to {url}: {}",
        migrated.stderr
    );
    let refused_for = Duration::from_secs(5);
    let until = SystemTime::now() + refused_for;
    let phase_one_ends = Instant::now() + refused_for - Duration::from_millis(300);
    refuse_completed_events_until(url, until).await;
    let quick = [
        ("SWITCHYARD__RUNS__SWEEP_INTERVAL_MS", "100"),
        ("SWITCHYARD__RUNS__LEASE_TTL_MS", "500"),
    ];
    let instance = Binary::new().database(url).upstream(&llm).envs(&quick);
    let mut a = instance.spawn();
    let a_api = Api::at(&a.address);
    llm.push(Turn::text("an answer whose ending cannot be stored yet"));
    let live = Live::create(&a_api, json!({"model": "gpt-4o-mini", "input": "answer"})).await;
    let id = live.response_id().await;
    assert!(
        Instant::now() + Duration::from_secs(1) < phase_one_ends,
        "the set-up took too long to observe the fault"
    );

    // The fault holds: whenever the run shows a final status, its log has the ending.
    let mut seen = BTreeSet::new();
    while Instant::now() < phase_one_ends {
        let status = a_api.status(&id).await;
        seen.insert(status.clone());
        if status != "in_progress" && status != "queued" {
            let log = a_api.replay_for(&id, Duration::from_secs(5)).await;
            assert!(
                log.events.iter().any(|e| is_terminal(&e.event)),
                "{}: the stored run is {status}, but its log has no terminal event \
                 (the final state committed without it): {}",
                backend(url),
                describe(&log)
            );
            audit_log(&log);
            assert_eq!(logged_status(&log), status);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = a_api.replay_for(&id, Duration::from_millis(300)).await;
    if a_api.status(&id).await == "in_progress" {
        assert!(
            !log.events.iter().any(|e| is_terminal(&e.event)),
            "a terminal event is logged while the run is in progress: {}",
            describe(&log)
        );
    }

    // The fault is gone: the run ends, by whatever way the service recovers — on its own, or
    // after the instance is killed and another started on the same database.
    tokio::time::sleep(until.duration_since(SystemTime::now()).unwrap_or_default()).await;
    let mut serving = a_api.clone();
    let mut run = serving
        .wait_until_stopped(&id, Duration::from_secs(3))
        .await;
    let mut how = "by the instance that ran it";
    let mut next = None;
    if run["status"] == "in_progress" || run["status"] == "queued" {
        a.kill();
        let b = next.insert(instance.spawn());
        serving = Api::at(&b.address);
        run = serving.wait_until_stopped(&id, LIVENESS).await;
        how = "after the instance was killed and another started";
    }
    assert!(
        run["status"] != "in_progress" && run["status"] != "queued",
        "{}: the run ends once its events can be written: {run}",
        backend(url)
    );
    let log = serving.replay(&id).await;
    audit_log(&log);
    assert_state_matches(&serving, &id, &log).await;
    eprintln!(
        "{}: statuses while refused: {seen:?}; ended {} {how}; {} events",
        backend(url),
        run["status"],
        log.events.len()
    );
    drop((live, next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_shows_a_final_state_whose_terminal_event_is_not_logged_on_sqlite() {
    let db = Database::sqlite();
    the_final_state_and_the_terminal_event_commit_together(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_shows_a_final_state_whose_terminal_event_is_not_logged_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    the_final_state_and_the_terminal_event_commit_together(&db.url).await;
}

// ---------------------------------------------------------------------------------------------
// 3. U+0000 in every stored text field.

/// Every string in a JSON value.
fn strings(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) => found.push(s.clone()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    found
}

/// An HTTP tool endpoint whose answer has a NUL in it.
async fn nul_tool_endpoint() -> String {
    let app = axum::Router::new().route("/nul", axum::routing::post(|| async { "x\u{0}y" }));
    format!("{}/nul", serve(app).await)
}

/// The tool server `nul`: one HTTP tool, `fetch_nul`, at `endpoint` (answering `x\0y`).
fn nul_tool_server(config: &mut Config, endpoint: &str) {
    config.tool_servers.insert(
        "nul".into(),
        switchyard::config::ToolServerConfig {
            tools: vec![http_tool("fetch_nul", endpoint.to_string(), None)],
            ..Default::default()
        },
    );
}

fn lookup_tool(description: &str) -> Value {
    json!({"type": "function", "name": "lookup", "description": description,
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}})
}

/// The replay of each run is whole and matches the stored run.
async fn assert_whole(api: &Api, ids: &[&str]) {
    for id in ids {
        let log = api.replay(id).await;
        audit_log(&log);
        assert_state_matches(api, id, &log).await;
    }
}

/// Every text the model was sent contains each of `texts` somewhere.
fn assert_sent(llm: &FakeLlm, texts: &[&str], db: &str) {
    let sent: Vec<String> = llm.requests().iter().flat_map(strings).collect();
    for text in texts {
        assert!(
            sent.iter().any(|s| s.contains(text)),
            "{db}: the model was sent {text:?}"
        );
    }
}

/// Text with U+0000 that the model and a tool produce: a tool result, a client call's
/// arguments, the answer. Stored and given back exactly, on both backends.
#[tokio::test]
async fn nul_characters_from_the_model_and_a_tool_are_stored_and_given_back_exactly() {
    const TOOL_RESULT: &str = "x\u{0}y";
    const ARGS: &str = "{\"q\":\"x\u{0}y\"}";
    const ANSWER: &str = "an\u{0}swer";
    let endpoint = nul_tool_endpoint().await;
    for database in backends().await {
        let url = &database.url;
        let db = backend(url);
        let app = TestApp::builder()
            .database(url)
            .config(|c| nul_tool_server(c, &endpoint))
            .start()
            .await;
        let api = Api::of(&app);
        app.llm
            .push(Turn::tool_call("call_tool", "fetch_nul", "{}"));
        app.llm.push(Turn::tool_call("call_q", "lookup", ARGS));
        app.llm.push(Turn::text(ANSWER));
        let tools = json!([lookup_tool("Looks things up"), {"type": "mcp", "server_label": "nul"}]);
        let (status, paused) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "look it up", "tools": tools}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {paused}");
        let id = paused["id"].as_str().unwrap().to_string();
        assert_eq!(
            paused["required_action"]["submit_tool_outputs"]["tool_calls"][0]["function"]["arguments"],
            ARGS,
            "{db}: {paused}"
        );
        let (_, stored) = api.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(stored["status"], "completed", "{db}: paused: {stored}");
        assert!(
            !stored["required_action"].is_null(),
            "{db}: paused: {stored}"
        );

        let (status, done) = api
            .post(
                &format!("/v1/responses/{id}/submit_tool_outputs"),
                &json!({"tool_outputs": [{"tool_call_id": "call_q", "output": "found"}]}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {done}");
        assert_eq!(done["status"], "completed", "{db}: {done}");

        let (status, stored) = api.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(status, 200, "{db}: {stored}");
        assert_eq!(stored["status"], "completed", "{db}: {stored}");
        assert!(stored["required_action"].is_null(), "{db}: {stored}");
        let output = stored["output"].as_array().unwrap();
        let call = output
            .iter()
            .find(|i| i["type"] == "mcp_call")
            .unwrap_or_else(|| panic!("{db}: no mcp_call in {stored}"));
        assert_eq!(call["output"], TOOL_RESULT, "{db}: {call}");
        let asked = output
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap_or_else(|| panic!("{db}: no function_call in {stored}"));
        assert_eq!(asked["arguments"], ARGS, "{db}: {asked}");
        let answer = output.last().unwrap();
        assert_eq!(answer["content"][0]["text"], ANSWER, "{db}: {stored}");
        assert_whole(&api, &[&id]).await;
        assert_sent(&app.llm, &[TOOL_RESULT, ARGS], db);
    }
}

/// Text with U+0000 in what clients send: the input, instructions, metadata, a tool's
/// description, tool outputs (submitted, and in a continuation). Stored and given back
/// exactly.
#[tokio::test]
async fn nul_characters_in_requests_are_stored_and_given_back_exactly() {
    const NUL: &str = "a\u{0}b";
    const OUTPUT: &str = "o\u{0}ut";
    const CONTINUED: &str = "c\u{0}ont";
    const MESSAGE: &str = "m\u{0}sg";
    for database in backends().await {
        let url = &database.url;
        let db = backend(url);
        let app = TestApp::builder().database(url).start().await;
        let api = Api::of(&app);
        app.llm
            .push(Turn::tool_call("call_q", "lookup", r#"{"q":"first"}"#));
        app.llm
            .push(Turn::tool_call("call_r", "lookup", r#"{"q":"again"}"#));
        app.llm.push(Turn::text("done"));
        let (status, paused) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "instructions": NUL, "metadata": {"note": NUL},
                        "tools": [lookup_tool(NUL)],
                        "input": [{"type": "message", "role": "user", "content": NUL}]}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {paused}");
        assert!(!paused["required_action"].is_null(), "{db}: {paused}");
        let first = paused["id"].as_str().unwrap().to_string();

        let (status, again) = api
            .post(
                &format!("/v1/responses/{first}/submit_tool_outputs"),
                &json!({"tool_outputs": [{"tool_call_id": "call_q", "output": OUTPUT}]}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {again}");
        assert_eq!(
            again["required_action"]["submit_tool_outputs"]["tool_calls"][0]["id"], "call_r",
            "{db}: {again}"
        );

        let (status, done) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "previous_response_id": first, "input": [
                    {"type": "function_call_output", "call_id": "call_r", "output": CONTINUED},
                    {"type": "message", "role": "user", "content": MESSAGE},
                ]}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {done}");
        assert_eq!(done["status"], "completed", "{db}: {done}");
        let second = done["id"].as_str().unwrap().to_string();

        let (status, stored) = api.get(&format!("/v1/responses/{first}")).await;
        assert_eq!(status, 200, "{db}: {stored}");
        assert_eq!(stored["status"], "completed", "{db}: {stored}");
        assert_eq!(stored["instructions"], NUL, "{db}");
        assert_eq!(stored["metadata"]["note"], NUL, "{db}");
        assert_eq!(stored["tools"][0]["description"], NUL, "{db}");
        let (status, stored_second) = api.get(&format!("/v1/responses/{second}")).await;
        assert_eq!(status, 200, "{db}: {stored_second}");
        assert_eq!(stored_second["status"], "completed", "{db}");

        // The input as given.
        for (id, texts) in [(&first, [NUL, OUTPUT]), (&second, [CONTINUED, MESSAGE])] {
            let (status, items) = api
                .get(&format!("/v1/responses/{id}/input_items?order=asc"))
                .await;
            assert_eq!(status, 200, "{db}: {items}");
            let given = strings(&items["data"]);
            for text in texts {
                assert!(given.iter().any(|t| t == text), "{db}: {text:?} in {items}");
            }
        }
        assert_whole(&api, &[&first, &second]).await;
        assert_sent(&app.llm, &[NUL, OUTPUT, CONTINUED, MESSAGE], db);
    }
}

/// An id with a NUL (in the path, or as `previous_response_id`) is an unknown id, not a
/// server error.
#[tokio::test]
async fn an_id_with_a_nul_character_is_unknown_not_a_server_error() {
    for database in backends().await {
        let url = &database.url;
        let db = backend(url);
        let app = TestApp::builder().database(url).start().await;
        let api = Api::of(&app);
        let mut wrong = Vec::new();
        for path in [
            "/v1/responses/resp_%00x",
            "/v1/responses/resp_%00x?stream=true",
            "/v1/responses/resp_%00x/input_items",
        ] {
            let (status, body) = api.get(path).await;
            if status != 404 {
                wrong.push(format!("GET {path}: {status} {body}"));
            }
        }
        for path in [
            "/v1/responses/resp_%00x/cancel",
            "/v1/responses/resp_%00x/submit_tool_outputs",
        ] {
            let body = json!({"tool_outputs": [{"tool_call_id": "call_q", "output": "x"}]});
            let (status, reply) = api.post(path, &body).await;
            if status != 404 {
                wrong.push(format!("POST {path}: {status} {reply}"));
            }
        }
        let (status, reply) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "hi", "previous_response_id": "resp_\u{0}x"}),
            )
            .await;
        if status != 400 || reply["error"]["code"] != "previous_response_not_found" {
            wrong.push(format!("previous_response_id with a NUL: {status} {reply}"));
        }
        assert!(
            wrong.is_empty(),
            "{db}: 404 for each path, 400 previous_response_not_found for the previous id:\n{}",
            wrong.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Readers that stop reading.

/// A request on a connection with a small receive buffer; its answer is read only up to the
/// run's id (`resp_…`), then never again.
async fn stalled_request(addr: SocketAddr, request: String) -> (String, tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buffer = [0u8; 512];
    let id = tokio::time::timeout(LIVENESS, async {
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(
                n > 0,
                "the connection closed: {}",
                String::from_utf8_lossy(&head)
            );
            head.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&head);
            if let Some(at) = text.find("\"id\":\"resp_")
                && text.len() >= at + 6 + 37
            {
                return text[at + 6..at + 6 + 37].to_string();
            }
        }
    })
    .await
    .expect("the stream's first event within 10 s");
    (id, stream)
}

fn raw_request(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> String {
    let body = body.map(Value::to_string).unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fast turn of `count` deltas of `bytes` bytes.
fn big_turn(count: usize, bytes: usize) -> Turn {
    let delta = "x".repeat(bytes);
    let mut steps: Vec<Step> = (0..count)
        .map(|_| Step::Text {
            text: delta.clone(),
        })
        .collect();
    steps.push(Step::Finish {
        reason: "stop".into(),
    });
    Turn { steps }
}

/// Starts a big streamed run whose client stops reading after its id.
async fn stalled_run(api: &Api, n: usize) -> (String, tokio::net::TcpStream) {
    let addr = api.addr();
    let body = json!({"model": "gpt-4o-mini", "input": format!("big {n}"), "stream": true});
    stalled_request(
        addr,
        raw_request(addr, "POST", "/v1/responses", Some(&body)),
    )
    .await
}

/// Opens a stalled replay of `id` after `after` (`None`: the whole log).
async fn stalled_replay(addr: SocketAddr, id: &str, after: Option<u64>) -> tokio::net::TcpStream {
    let cursor = after
        .map(|n| format!("&starting_after={n}"))
        .unwrap_or_default();
    let path = format!("/v1/responses/{id}?stream=true{cursor}");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(raw_request(addr, "GET", &path, None).as_bytes())
        .await
        .unwrap();
    stream
}

/// Big runs streamed fast, each followed live by clients that stop reading: `followers`
/// replays opened while it runs, besides its own streamed POST.
async fn stalled_big_runs(
    app: &TestApp,
    first: usize,
    count: usize,
    followers: usize,
    turn: &Turn,
    stalled: &mut Vec<tokio::net::TcpStream>,
) -> Vec<String> {
    let api = Api::of(app);
    let mut ids = Vec::new();
    for n in first..first + count {
        app.llm.push(turn.clone());
        let (id, stream) = stalled_run(&api, n).await;
        stalled.push(stream);
        for _ in 0..followers {
            stalled.push(stalled_replay(api.addr(), &id, None).await);
        }
        ids.push(id);
    }
    ids
}

/// Polls the runs until each is `completed`; every poll must answer. The bound is for
/// liveness, not speed (a starved run never completes): a debug build on two busy cores takes
/// 11–15 s for the four big runs, so it is well above that.
async fn wait_until_completed(api: &Api, ids: &[String], db: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in ids {
        let left = deadline.saturating_duration_since(Instant::now());
        let run = api.wait_until_stopped(id, left).await;
        assert_eq!(run["status"], "completed", "{db}: big run {id}");
    }
}

/// Clients that stop reading hold nothing that serves everyone else (the database pool).
/// With two connections, big runs followed live by clients that stop reading, and replays of
/// their stored logs that are never read, must leave the service able to answer reads, store
/// a new run and finish the running ones.
///
/// What a stalled connection buffers (its socket and the HTTP server's buffer) is about
/// 3.5 MB on loopback; each run streams more (about 5 MB in 20,000 small events, fast), so
/// its stalled followers stop for good while it goes on: they fall behind it (more events
/// than their live channel holds arrive at once) and must catch up from the store. (Found
/// by experiment: with fewer, bigger events, or fewer runs at once, the stall was rare.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_stop_reading_do_not_starve_other_requests() {
    let runs = env_or("FAULTS_STALL_RUNS", 4);
    let deltas_per_run = env_or("FAULTS_STALL_DELTAS", 20_000);
    let delta_bytes = env_or("FAULTS_STALL_DELTA_BYTES", 16);
    let followers = env_or("FAULTS_STALL_FOLLOWERS", 1);
    let replays = env_or("FAULTS_STALL_REPLAYS", 8);
    let mut rng = Rng::seeded("stalled readers");
    let turn = big_turn(deltas_per_run, delta_bytes);
    for database in backends().await {
        let url = &database.url;
        let db = backend(url);
        let app = TestApp::builder()
            .database(url)
            .config(|c| c.database.max_connections = 2)
            .start()
            .await;
        let api = Api::of(&app);
        let (status, other) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "a small run"}),
            )
            .await;
        assert_eq!(status, 200, "{db}: {other}");
        let other = other["id"].as_str().unwrap().to_string();
        let started = Instant::now();

        // Big runs followed live by stalled clients: every poll answers, and they complete.
        let mut stalled = Vec::new();
        let ids = stalled_big_runs(&app, 0, runs, followers, &turn, &mut stalled).await;
        wait_until_completed(&api, &ids, db).await;
        let completed = started.elapsed();

        // Stalled replays of their stored logs, from random points.
        for n in 0..replays {
            let after = rng.below(deltas_per_run as u64 / 2);
            stalled.push(stalled_replay(api.addr(), &ids[n % ids.len()], Some(after)).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;

        // Still served: another run, and a new one.
        let (status, body) = api.get(&format!("/v1/responses/{other}")).await;
        assert_eq!(status, 200, "{db}: GET of another run: {body}");
        let (status, body) = api
            .post(
                "/v1/responses",
                &json!({"model": "gpt-4o-mini", "input": "still there?"}),
            )
            .await;
        assert_eq!(status, 200, "{db}: a new run: {body}");
        assert_eq!(body["status"], "completed", "{db}: a new run: {body}");
        eprintln!(
            "{db}: {runs} runs of {deltas_per_run} deltas of {delta_bytes} bytes completed in \
             {completed:?}; {} stalled clients; all served in {:?}",
            stalled.len(),
            started.elapsed()
        );
        drop(stalled);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. A graceful stop (SIGTERM) hands running runs on instead of failing them.

/// A short sweep and lease (a run an instance let go of is taken over within a second or
/// two), and a one-second grace period.
const GRACEFUL: [(&str, &str); 3] = [
    ("SWITCHYARD__SERVER__SHUTDOWN_GRACE_SECONDS", "1"),
    ("SWITCHYARD__RUNS__SWEEP_INTERVAL_MS", "200"),
    ("SWITCHYARD__RUNS__LEASE_TTL_MS", "1000"),
];

const TAKEN_OVER: &str = "finished after the takeover";

/// A streamed run and a background run executing on `a`, each a turn of about six seconds,
/// until A's client saw a few deltas. Returns their ids and the stream.
async fn start_long_runs(a: &Api, llm: &FakeLlm) -> (String, String, Live) {
    llm.push(Turn::text(&words(60)).paced(100));
    llm.push(Turn::text(&words(60)).paced(100));
    llm.push(Turn::text(TAKEN_OVER));
    llm.push(Turn::text(TAKEN_OVER));
    let live = Live::create(a, json!({"model": "gpt-4o-mini", "input": "streamed job"})).await;
    let streamed = live.response_id().await;
    let (status, queued) = a
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "background job", "background": true}),
        )
        .await;
    assert_eq!(status, 200, "{queued}");
    let background = queued["id"].as_str().unwrap().to_string();
    // Both are executing on A: the model was asked for both turns, and the stream shows text.
    let deadline = Instant::now() + LIVENESS;
    while llm.requests().len() < 2 {
        assert!(Instant::now() < deadline, "A started both runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    live.wait_for("three deltas", |events| deltas(events) >= 3)
        .await;
    (streamed, background, live)
}

/// SIGTERM: A exits cleanly within [`LIVENESS`]. Returns what A's client saw and how long A
/// took to exit.
async fn terminate(a: &mut Instance, live: Live) -> (Sse, Duration) {
    let stopping = Instant::now();
    a.terminate();
    let exit = a.exited(LIVENESS).await;
    let took = stopping.elapsed();
    assert!(exit.is_some(), "A exits within {LIVENESS:?} of SIGTERM");
    assert!(exit.unwrap().success(), "A exits cleanly: {exit:?}");
    let (seen, _) = live.finish(Duration::from_secs(1)).await;
    (seen, took)
}

/// Both runs end `completed` where `b` serves them, with whole logs that continue what A's
/// client saw, and the model was asked again for the turns A was cutting.
async fn assert_taken_over(
    b: &Api,
    llm: &FakeLlm,
    streamed: &str,
    background: &str,
    seen: &Sse,
) -> String {
    let mut notes = Vec::new();
    for id in [streamed, background] {
        let run = b.wait_until_stopped(id, Duration::from_secs(15)).await;
        assert_eq!(
            run["status"], "completed",
            "{id} is completed by the next instance: {run}"
        );
        let last = run["output"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["content"][0]["text"], TAKEN_OVER, "{id}: {run}");
        let log = b.replay(id).await;
        audit_log(&log);
        assert_eq!(
            log.events.iter().filter(|e| is_terminal(&e.event)).count(),
            1,
            "one terminal event: {}",
            describe(&log)
        );
        assert_state_matches(b, id, &log).await;
        notes.push(format!("{id}: {} events", log.events.len()));
        if id == streamed {
            assert!(
                frames(&log).starts_with(&frames(seen)),
                "the log goes on from what A's client saw: seen {}\nlog {}",
                describe(seen),
                describe(&log)
            );
        }
    }
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        4,
        "each run's cut turn was asked for again, once"
    );
    for input in ["streamed job", "background job"] {
        let asked: Vec<&Value> = requests
            .iter()
            .filter(|r| strings(&r["messages"]).iter().any(|s| s == input))
            .map(|r| &r["messages"])
            .collect();
        assert_eq!(asked.len(), 2, "{input}: asked twice");
        assert_eq!(asked[0], asked[1], "{input}: the same turn again");
    }
    notes.join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_hands_running_runs_to_another_instance_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    let llm = FakeLlm::start().await.unwrap();
    // A alone first, so that both runs execute on A; then B beside it.
    let instance = Binary::new()
        .database(&db.url)
        .upstream(&llm)
        .envs(&GRACEFUL);
    let mut a = instance.spawn();
    let (streamed, background, live) = start_long_runs(&Api::at(&a.address), &llm).await;
    let b = instance.spawn();
    let (seen, took) = terminate(&mut a, live).await;
    let notes = assert_taken_over(&Api::at(&b.address), &llm, &streamed, &background, &seen).await;
    eprintln!("postgres: A exited {took:?} after SIGTERM; {notes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_hands_running_runs_to_the_next_process_on_sqlite() {
    let db = Database::sqlite();
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new()
        .database(&db.url)
        .upstream(&llm)
        .envs(&GRACEFUL);
    let mut a = instance.spawn();
    let (streamed, background, live) = start_long_runs(&Api::at(&a.address), &llm).await;
    let (seen, took) = terminate(&mut a, live).await;
    // The next process on the same file.
    let b = instance.spawn();
    let notes = assert_taken_over(&Api::at(&b.address), &llm, &streamed, &background, &seen).await;
    eprintln!("sqlite: A exited {took:?} after SIGTERM; {notes}");
}

// ---------------------------------------------------------------------------------------------
// 6. Two processes on one SQLite file.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_on_the_same_sqlite_file_refuses_to_start() {
    let db = Database::sqlite();
    let url = &db.url;
    let llm = FakeLlm::start().await.unwrap();
    let instance = Binary::new().database(url).upstream(&llm);
    let a = instance.spawn();
    let a_api = Api::at(&a.address);

    let mut second = instance
        .clone()
        .env("SWITCHYARD__SERVER__PORT", "0")
        .env("RUST_LOG", "info")
        .start(&[]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let exit = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if exit.is_none() {
        second.kill().unwrap();
    }
    let output = second.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let exit = exit.unwrap_or_else(|| {
        panic!("the second instance on {url} did not exit within 5 s; it said:\n{said}")
    });
    assert!(!exit.success(), "it exits with a failure: {exit:?}\n{said}");
    assert!(
        said.contains("in use by another switchyard instance"),
        "it says why:\n{said}"
    );

    // The first goes on serving.
    let (status, _) = a_api.get("/healthz").await;
    assert_eq!(status, 200);
    llm.push(Turn::text("still serving"));
    let (status, run) = a_api
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "there?"}),
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"][0]["content"][0]["text"], "still serving");
}

// ---------------------------------------------------------------------------------------------
// 7. A randomized race of everything that ends a paused run.

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

/// What one racer got.
struct Answer {
    racer: &'static str,
    delay_ms: u64,
    status: u16,
    body: Value,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.body["error"] {
            Value::Null => format!(
                "{} status={}",
                self.body["id"].as_str().unwrap_or_default(),
                self.body["status"]
            ),
            error => error.to_string(),
        };
        write!(
            f,
            "{} after {} ms: HTTP {} {what}",
            self.racer, self.delay_ms, self.status
        )
    }
}

/// A 400 the contract documents for a racer that came too late (or too early).
fn documented_refusal(racer: &str, body: &Value) -> bool {
    let message = body["error"]["message"].as_str().unwrap_or_default();
    let too_late =
        |prefix: &str, suffix: &str| message.starts_with(prefix) && message.ends_with(suffix);
    body["error"]["type"] == "invalid_request_error"
        && match racer {
            "submit" => too_late("Runs in status \"", "\" do not accept tool outputs."),
            "continue" => {
                too_late("Previous response with id '", "' is still in progress.")
                    || (message.starts_with("Previous response with id '")
                        && message.contains("' is no longer waiting for tool outputs (it is "))
            }
            _ => false,
        }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_cancels_continuations_and_expiry_racing_on_paused_runs_leave_whole_logs() {
    let rounds = env_or("FAULTS_RACE_ROUNDS", 6);
    let per_round = env_or("FAULTS_RACE_RUNS", 12);
    let ttl_ms = 300;
    let mut rng = Rng::seeded("race on paused runs");
    for database in backends().await {
        let url = &database.url;
        let db = backend(url);
        let app = TestApp::builder()
            .database(url)
            .config(|c| {
                c.runs.requires_action_ttl_ms = ttl_ms;
                c.runs.sweep_interval_ms = 50;
            })
            .start()
            .await;
        let api = Api::of(&app);
        let reset = format!("http://{}/control/reset", app.llm.addr());
        let mut outcomes: std::collections::BTreeMap<String, usize> = Default::default();
        let mut continuations = Vec::new();
        let mut paused_runs = Vec::new();
        for round in 0..rounds {
            let reply = api.client.post(&reset).send().await.unwrap();
            assert!(reply.status().is_success());
            let mut paused = Vec::new();
            for n in 0..per_round {
                let call = format!("call_{round}_{n}");
                app.llm.push(Turn::tool_call(
                    &call,
                    "get_weather",
                    r#"{"city": "Paris"}"#,
                ));
                let (status, run) = api
                    .post(
                        "/v1/responses",
                        &json!({"model": "gpt-4o-mini", "input": "Weather in Paris?",
                                "tools": [weather_tool()]}),
                    )
                    .await;
                assert_eq!(status, 200, "{db}: {run}");
                assert!(!run["required_action"].is_null(), "{db}: paused: {run}");
                paused.push((run["id"].as_str().unwrap().to_string(), call));
            }
            for _ in 0..2 * per_round {
                app.llm.push(Turn::text("It is sunny in Paris").paced(20));
            }
            let mut racers = Vec::new();
            for (id, call) in &paused {
                // The racers of a run start together, each a few milliseconds apart, at a
                // moment that may be after the pause expired.
                let moment = rng.below(ttl_ms * 4 / 3);
                for racer in ["submit", "cancel", "continue"] {
                    let delay_ms = moment + rng.below(10);
                    let (api, id, call) = (api.clone(), id.clone(), call.clone());
                    racers.push(tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        let (path, body) = match racer {
                            "submit" => (
                                format!("/v1/responses/{id}/submit_tool_outputs"),
                                json!({"tool_outputs": [{"tool_call_id": call, "output": "sunny"}]}),
                            ),
                            "cancel" => (format!("/v1/responses/{id}/cancel"), json!({})),
                            _ => (
                                "/v1/responses".to_string(),
                                json!({"model": "gpt-4o-mini", "previous_response_id": id,
                                       "input": [{"type": "function_call_output",
                                                  "call_id": call, "output": "sunny"}]}),
                            ),
                        };
                        let (status, body) = api.post(&path, &body).await;
                        (id, Answer { racer, delay_ms, status, body })
                    }));
                }
            }
            let mut answers: std::collections::HashMap<String, Vec<Answer>> = Default::default();
            for racer in racers {
                let (id, answer) = racer.await.unwrap();
                answers.entry(id).or_default().push(answer);
            }

            for (id, _) in &paused {
                let answers = &answers[id];
                for answer in answers {
                    let fine = answer.status == 200
                        || (answer.status == 400 && documented_refusal(answer.racer, &answer.body));
                    assert!(fine, "{db}: {id}: {answer:?}\nall: {answers:#?}");
                    if answer.racer == "continue" && answer.status == 200 {
                        let next = answer.body["id"].as_str().unwrap().to_string();
                        continuations.push(next);
                    }
                }
                let log = api.replay(id).await;
                audit_log(&log);
                assert_state_matches(&api, id, &log).await;
                let submitted = answers
                    .iter()
                    .any(|a| a.racer == "submit" && a.status == 200);
                let resumes = log
                    .events
                    .iter()
                    .filter(|e| e.event == "response.in_progress")
                    .count()
                    - 1;
                assert_eq!(
                    submitted,
                    resumes == 1,
                    "{db}: {id}: a run is resumed exactly when a submission was accepted: \
                     {answers:#?}\n{}",
                    describe(&log)
                );
                let ended = if is_pause(log.last()) {
                    "completed by a continuation".to_string()
                } else if submitted {
                    format!("resumed, then {}", logged_status(&log))
                } else {
                    logged_status(&log)
                };
                *outcomes.entry(ended).or_default() += 1;
                paused_runs.push(id.clone());
            }
        }
        for id in &continuations {
            let run = api.wait_until_stopped(id, LIVENESS).await;
            assert_ne!(run["status"], "in_progress", "{db}: {id}");
            let log = api.replay(id).await;
            audit_log(&log);
            assert_state_matches(&api, id, &log).await;
        }
        eprintln!(
            "{db}: {} paused runs, {} continuations: {outcomes:?}",
            paused_runs.len(),
            continuations.len()
        );
    }
}
