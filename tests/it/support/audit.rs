//! The auditors: what every run's log must look like, however the run went, and what every
//! Response object carries.

use serde_json::Value;

use super::sse::{Sse, SseEvent};

/// Whether an event of this name is terminal: `response.completed` (a pause's too),
/// `response.failed` or `response.incomplete`.
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
/// the `pause` tests).
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

/// Every key SPEC §4 requires on a Response object.
pub const RESPONSE_KEYS: &[&str] = &[
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "error",
    "incomplete_details",
    "instructions",
    "model",
    "output",
    "parallel_tool_calls",
    "previous_response_id",
    "tools",
    "tool_choice",
    "truncation",
    "text",
    "reasoning",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "user",
    "usage",
    "required_action",
];

/// Asserts that a Response object has every key of [`RESPONSE_KEYS`].
pub fn assert_response_keys(response: &Value) {
    let object = response.as_object().expect("a response object");
    for key in RESPONSE_KEYS {
        assert!(object.contains_key(*key), "missing key {key} in {response}");
    }
}

/// Asserts sequence numbers 0..n, each SSE `id:` equal to its event's number.
pub fn assert_numbering(sse: &Sse) {
    for (n, event) in sse.events.iter().enumerate() {
        assert_eq!(
            event.data["sequence_number"], n as u64,
            "event {n}: {:?}",
            event.data
        );
        assert_eq!(event.id.as_deref(), Some(n.to_string().as_str()));
        assert_eq!(event.data["type"], event.event);
    }
}
