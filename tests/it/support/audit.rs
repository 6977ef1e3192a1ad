//! The log auditor: what every run's log must look like, however the run went.

use super::{Sse, SseEvent};

pub fn is_terminal(event: &str) -> bool {
    matches!(
        event,
        "response.completed" | "response.failed" | "response.incomplete"
    )
}

/// A pause: `response.completed` whose response waits for the client.
pub fn is_pause(event: &SseEvent) -> bool {
    event.event == "response.completed" && !event.data["response"]["required_action"].is_null()
}

/// One line per event (the last 40), for failure messages.
pub fn describe(sse: &Sse) -> String {
    let skip = sse.events.len().saturating_sub(40);
    let mut lines: Vec<String> = sse
        .events
        .iter()
        .skip(skip)
        .map(|e| {
            let status = e.data["response"]["status"]
                .as_str()
                .map(|s| format!(" status={s}"))
                .unwrap_or_default();
            let pause = if is_pause(e) { " (pause)" } else { "" };
            format!(
                "  {:>5} id={} {}{status}{pause}",
                e.data["sequence_number"],
                e.id.as_deref().unwrap_or("-"),
                e.event
            )
        })
        .collect();
    if skip > 0 {
        lines.insert(0, format!("  … {skip} earlier events"));
    }
    let tail_start = sse.raw.len().saturating_sub(120);
    let tail_start = (tail_start..=sse.raw.len())
        .find(|i| sse.raw.is_char_boundary(*i))
        .unwrap_or(0);
    format!(
        "HTTP {}, {} events, [DONE]: {}\n{}\n  raw tail: {:?}",
        sse.status,
        sse.events.len(),
        sse.done,
        lines.join("\n"),
        &sse.raw[tail_start..]
    )
}

/// What may end a pause without resuming it: a cancel (`response.failed`, status
/// `cancelled`) or the expiry (`response.incomplete`, reason `tool_outputs_expired`).
pub fn ends_a_pause(event: &SseEvent) -> bool {
    let response = &event.data["response"];
    (event.event == "response.failed" && response["status"] == "cancelled")
        || (event.event == "response.incomplete"
            && response["incomplete_details"]["reason"] == "tool_outputs_expired")
}

/// The whole log of a run as a client reads it: numbered 0..n (the SSE `id:` equal to the
/// number), ended by a terminal event and `[DONE]` with nothing after; every earlier terminal
/// event is a pause (`response.completed` with a `required_action`) followed at once by the
/// resume (`response.in_progress`). A pause may also be the last event, or be followed, last,
/// by its cancellation or expiry (as a paused run is cancelled or expires today: SPEC §7,
/// tests/pause.rs).
pub fn audit_log(sse: &Sse) {
    let log = describe(sse);
    assert_eq!(sse.status, 200, "the log is served: {log}");
    assert!(!sse.events.is_empty(), "the log has events: {log}");
    for (n, event) in sse.events.iter().enumerate() {
        assert_eq!(
            event.data["sequence_number"], n as u64,
            "event {n} carries sequence number {n}: {log}"
        );
        assert_eq!(
            event.id.as_deref(),
            Some(n.to_string().as_str()),
            "event {n} has SSE id {n}: {log}"
        );
        assert_eq!(
            event.data["type"], event.event,
            "event {n}'s type matches its SSE event name: {log}"
        );
    }
    let last = sse.events.len() - 1;
    for (n, event) in sse.events[..last].iter().enumerate() {
        if is_terminal(&event.event) {
            assert!(
                is_pause(event),
                "event {n} ({}) ends the run, yet events follow it: {log}",
                event.event
            );
            let next = &sse.events[n + 1];
            assert!(
                next.event == "response.in_progress" || (n + 1 == last && ends_a_pause(next)),
                "the pause at {n} is followed by a resume (or, last, by its cancellation or \
                 expiry): {log}"
            );
        }
    }
    assert!(
        is_terminal(&sse.events[last].event),
        "the log ends with a terminal event: {log}"
    );
    assert!(sse.done, "the log ends with [DONE]: {log}");
    assert_eq!(
        sse.raw.matches("data: [DONE]").count(),
        1,
        "[DONE] once: {log}"
    );
    assert!(
        sse.raw.ends_with("data: [DONE]\n\n"),
        "nothing follows [DONE]: {log}"
    );
}

/// Runs SQL statements on a test's database, beside the service.
pub async fn run_sql(url: &str, statements: &[impl AsRef<str>]) {
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        for statement in statements {
            sqlx::query(statement.as_ref())
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        for statement in statements {
            sqlx::query(statement.as_ref())
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    }
}
