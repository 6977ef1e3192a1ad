//! What the inspector's pages show, made from stored runs: a row of the run list, and a run's
//! timeline read from its event log (the times the events were emitted, never the times rows
//! were written). Plain strings only: the templates escape every one of them.

use std::collections::HashMap;

use serde_json::Value;

use crate::engine::Inspection;
use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::protocol::transcript::Entry as Transcribed;
use crate::store::{RunState, StoredRun};
use crate::time::UnixMillis;

/// What a page may show of a run's content (`[ui] show_content`).
#[derive(Clone, Copy)]
pub struct Content {
    pub shown: bool,
}

impl Content {
    /// `text`, or the size of what is hidden.
    pub fn text(self, text: &str) -> String {
        if self.shown {
            text.to_owned()
        } else {
            format!("(hidden: {} bytes)", text.len())
        }
    }
}

/// One line of the run list.
pub struct Row {
    pub id: String,
    pub status: String,
    pub model: String,
    pub started: String,
    pub duration: String,
    pub tokens: String,
    pub tools_called: usize,
    pub waiting: bool,
}

impl Row {
    pub fn of(run: &StoredRun, now: UnixMillis) -> Row {
        let body = &run.body;
        Row {
            id: body.id.clone(),
            status: run.state.as_str().to_owned(),
            model: body.model.clone(),
            started: chrono::DateTime::from_timestamp_millis(run.created_at.as_millis())
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default(),
            duration: run_duration(run, now),
            tokens: body
                .usage
                .as_ref()
                .map_or_else(|| "–".to_owned(), |u| u.total_tokens.to_string()),
            tools_called: body.output.iter().filter(|item| is_call(item)).count(),
            waiting: run.state == RunState::RequiresAction,
        }
    }
}

fn is_call(item: &Item) -> bool {
    matches!(
        item,
        Item::FunctionCall(_)
            | Item::CustomToolCall(_)
            | Item::LocalShellCall(_)
            | Item::McpCall(_)
    )
}

/// A JSON value as text: a string as it is, anything else as its JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// From its creation to its last change once it stopped or paused, or to now (a pause's wait
/// for its client included).
fn run_duration(run: &StoredRun, now: UnixMillis) -> String {
    let settled = run.state.is_final() || run.state == RunState::RequiresAction;
    let end = if settled { run.updated_at } else { now };
    seconds(end.as_millis() - run.created_at.as_millis())
}

/// `2026-11-29 00:41:02 UTC`.
pub fn utc(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A duration in milliseconds, for people: `840 ms`, `3.2 s`, `4 min 05 s`.
pub fn seconds(millis: i64) -> String {
    let millis = millis.max(0);
    if millis < 1_000 {
        format!("{millis} ms")
    } else if millis < 60_000 {
        format!("{:.1} s", millis as f64 / 1_000.0)
    } else {
        format!("{} min {:02} s", millis / 60_000, (millis % 60_000) / 1_000)
    }
}

/// One entry of a run's timeline.
pub struct Entry {
    /// Since the run's first event.
    pub at: String,
    /// When it happened, UTC.
    pub when: String,
    pub duration: Option<String>,
    /// `model`, `tool`, `approval`, `run`: what kind of step it is (a CSS class too).
    pub kind: &'static str,
    pub title: String,
    /// Labelled values (text shown as it is, in a `<pre>`).
    pub fields: Vec<(String, String)>,
    /// Still being written.
    pub open: bool,
}

/// The item entries under construction, by item id.
struct Open {
    index: usize,
    started: i64,
    partial: String,
}

/// The model turn (from 1) each item of the transcript came from, by item id.
fn turns_of(transcript: &[Transcribed]) -> HashMap<String, usize> {
    let mut turn = 1;
    let mut turns = HashMap::new();
    for entry in transcript {
        match entry {
            Transcribed::TurnEnd => turn += 1,
            Transcribed::Item(item) => {
                turns.insert(item.id().to_owned(), turn);
            }
        }
    }
    turns
}

/// Whether an event of an item is the model's part of it (streaming the item) rather than the
/// service's (running a server tool call).
fn model_part(event_type: &str, item_type: Option<&str>) -> bool {
    !(event_type.starts_with("response.mcp_call.")
        || (event_type == "response.output_item.done" && item_type == Some("mcp_call")))
}

/// A run's timeline from its event log: its lifecycle (created, queued, running, paused,
/// resumed, stopped), each model turn (from when the model was asked — the run's start, or the
/// end of the tool calls before it — to the last thing it streamed) and each output item from
/// its `added` to its `done`, with the output a client submitted for a call beside the call.
pub fn timeline(inspection: &Inspection, content: Content) -> Vec<Entry> {
    let outputs = submitted_outputs(&inspection.input);
    let turns = turns_of(&inspection.run.transcript);
    // Items of the turn being streamed are not in the transcript yet: they are the next turn's.
    let pending_turn = turns.values().max().map_or(1, |last| last + 1);
    // The model turn being shown: its number, its entry, when it was asked.
    let mut turn: Option<(usize, usize, i64)> = None;
    let mut asked_at = inspection.events.first().map_or(0, |e| e.created_at);
    let mut item_types: HashMap<String, String> = HashMap::new();
    let final_items: HashMap<String, Value> = inspection
        .run
        .body
        .output
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .filter_map(|v| Some((v["id"].as_str()?.to_owned(), v)))
        .collect();
    let Some(first) = inspection.events.first() else {
        return Vec::new();
    };
    let origin = first.created_at;
    let mut entries: Vec<Entry> = Vec::new();
    let mut open: HashMap<String, Open> = HashMap::new();
    let mut running_before = false;
    for event in &inspection.events {
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        let stamp = |entry_kind, title: String| Entry {
            at: format!("+{}", seconds(event.created_at - origin)),
            when: utc(event.created_at),
            duration: None,
            kind: entry_kind,
            title,
            fields: Vec::new(),
            open: false,
        };
        if let (Some((number, index, started)), Some(id)) = (
            turn,
            data["item_id"].as_str().or(data["item"]["id"].as_str()),
        ) && turns.get(id).copied().unwrap_or(pending_turn) == number
            && model_part(&event.event_type, item_types.get(id).map(String::as_str))
        {
            entries[index].duration = Some(seconds(event.created_at - started));
        }
        if event.event_type == "response.output_item.done" {
            // The next turn is asked for once what came before it is done.
            asked_at = event.created_at;
        }
        match event.event_type.as_ref() {
            "response.created" => entries.push(stamp("run", "Run created".into())),
            "response.queued" => entries.push(stamp("run", "Queued".into())),
            "response.in_progress" => {
                let title = if running_before { "Resumed" } else { "Running" };
                running_before = true;
                asked_at = event.created_at;
                turn = None;
                entries.push(stamp("run", title.into()));
            }
            "response.output_item.added" => {
                let item = &data["item"];
                let Some(id) = item["id"].as_str() else {
                    continue;
                };
                if let Some(kind) = item["type"].as_str() {
                    item_types.insert(id.to_owned(), kind.to_owned());
                }
                // Tools listed before a turn are the service's, not the model's.
                let number = turns.get(id).copied().or_else(|| {
                    let running = !inspection.run.state.is_final()
                        && inspection.run.state != RunState::RequiresAction;
                    running.then_some(pending_turn)
                });
                if let Some(number) = number
                    && item["type"] != "mcp_list_tools"
                    && turn.is_none_or(|(current, _, _)| current != number)
                {
                    let mut entry = stamp("turn", format!("Model turn {number}"));
                    entry.at = format!("+{}", seconds(asked_at - origin));
                    entry.when = utc(asked_at);
                    turn = Some((number, entries.len(), asked_at));
                    entries.push(entry);
                }
                let mut entry = stamp("model", String::new());
                describe(&mut entry, item, &outputs, content);
                entry.open = true;
                open.insert(
                    id.to_owned(),
                    Open {
                        index: entries.len(),
                        started: event.created_at,
                        partial: String::new(),
                    },
                );
                entries.push(entry);
            }
            kind if kind.ends_with(".delta") => {
                if let (Some(id), Some(delta)) = (data["item_id"].as_str(), data["delta"].as_str())
                    && let Some(item) = open.get_mut(id)
                {
                    item.partial.push_str(delta);
                    let entry = &mut entries[item.index];
                    entry.fields = vec![("So far".into(), content.text(&item.partial))];
                }
            }
            "response.output_item.done" => {
                let item = &data["item"];
                let Some(id) = item["id"].as_str() else {
                    continue;
                };
                if let Some(started) = open.remove(id) {
                    let entry = &mut entries[started.index];
                    let item = final_items.get(id).unwrap_or(item);
                    describe(entry, item, &outputs, content);
                    entry.duration = Some(seconds(event.created_at - started.started));
                    entry.open = false;
                }
            }
            "response.completed" | "response.failed" | "response.incomplete" => {
                entries.push(stopped(
                    stamp("run", String::new()),
                    &data["response"],
                    content,
                ));
            }
            "error" => {
                let mut entry = stamp("error", "Error".into());
                let message = data["error"]["message"]
                    .as_str()
                    .or(data["message"].as_str())
                    .unwrap_or_default();
                entry.fields = vec![("Message".into(), content.text(message))];
                entries.push(entry);
            }
            _ => {}
        }
    }
    entries
}

/// A stop or pause, as its terminal event's response tells it.
fn stopped(mut entry: Entry, response: &Value, content: Content) -> Entry {
    let status = response["status"].as_str().unwrap_or_default();
    let paused = !response["required_action"].is_null();
    entry.title = match (paused, status) {
        (true, _) => "Paused: waiting for the client".to_owned(),
        (false, "completed") => "Completed".to_owned(),
        (false, "failed") => "Failed".to_owned(),
        (false, "incomplete") => "Stopped incomplete".to_owned(),
        (false, "cancelled") => "Cancelled".to_owned(),
        (false, other) => format!("Stopped ({other})"),
    };
    if status == "failed" || status == "cancelled" || status == "incomplete" {
        entry.kind = "error";
    }
    if let Some(message) = response["error"]["message"].as_str() {
        entry.fields.push(("Error".into(), content.text(message)));
    }
    if let Some(reason) = response["incomplete_details"]["reason"].as_str() {
        entry.fields.push(("Reason".into(), reason.to_owned()));
    }
    if let Some(usage) = response.get("usage").filter(|u| !u.is_null()) {
        entry.fields.push((
            "Tokens".into(),
            format!(
                "{} in, {} out, {} in all",
                usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]
            ),
        ));
    }
    entry
}

/// The title and fields of an output item's entry.
fn describe(entry: &mut Entry, item: &Value, outputs: &HashMap<String, String>, content: Content) {
    let text = |v: &Value| content.text(v.as_str().unwrap_or_default());
    let name = item["name"].as_str().unwrap_or_default();
    entry.fields.clear();
    match item["type"].as_str().unwrap_or_default() {
        "message" => {
            entry.kind = "model";
            entry.title = "Model message".into();
            let said: Vec<&str> = item["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|part| part["text"].as_str().or(part["refusal"].as_str()))
                .collect();
            entry
                .fields
                .push(("Text".into(), content.text(&said.join("\n"))));
        }
        "reasoning" => {
            entry.kind = "model";
            entry.title = "Model reasoning".into();
            let said: Vec<&str> = ["summary", "content"]
                .iter()
                .flat_map(|key| item[*key].as_array().into_iter().flatten())
                .filter_map(|part| part["text"].as_str())
                .collect();
            if !said.is_empty() {
                entry
                    .fields
                    .push(("Summary".into(), content.text(&said.join("\n"))));
            }
        }
        "function_call" | "custom_tool_call" | "local_shell_call" => {
            entry.kind = "tool";
            entry.title = format!("Client tool call: {name}");
            let arguments = item
                .get("arguments")
                .or(item.get("input"))
                .or(item.get("action"))
                .map(as_text)
                .unwrap_or_default();
            entry
                .fields
                .push(("Arguments".into(), content.text(&arguments)));
            let call_id = item["call_id"].as_str().unwrap_or_default();
            entry.fields.push(("Call id".into(), call_id.to_owned()));
            if let Some(output) = outputs.get(call_id) {
                entry
                    .fields
                    .push(("Output (from the client)".into(), content.text(output)));
            }
        }
        "mcp_call" => {
            entry.kind = "tool";
            let server = item["server_label"].as_str().unwrap_or_default();
            entry.title = format!("Server tool call: {server} / {name}");
            entry
                .fields
                .push(("Arguments".into(), text(&item["arguments"])));
            if !item["output"].is_null() {
                entry.fields.push(("Output".into(), text(&item["output"])));
            }
            if !item["error"].is_null() {
                let error = as_text(&item["error"]);
                entry.fields.push(("Error".into(), content.text(&error)));
            }
        }
        "mcp_list_tools" => {
            entry.kind = "tool";
            let server = item["server_label"].as_str().unwrap_or_default();
            entry.title = format!("Tools listed: {server}");
            let names: Vec<&str> = item["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|tool| tool["name"].as_str())
                .collect();
            entry.fields.push(("Tools".into(), names.join(", ")));
        }
        "mcp_approval_request" => {
            entry.kind = "approval";
            let server = item["server_label"].as_str().unwrap_or_default();
            entry.title = format!("Approval asked: {server} / {name}");
            entry
                .fields
                .push(("Arguments".into(), text(&item["arguments"])));
        }
        other => {
            entry.kind = "model";
            entry.title = format!("Item: {other}");
            entry
                .fields
                .push(("Item".into(), content.text(&item.to_string())));
        }
    }
}

/// The outputs the client gave for its calls (input items of the resumed run), by call id.
fn submitted_outputs(input: &[Item]) -> HashMap<String, String> {
    input
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .filter(|v| {
            v["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output"))
        })
        .filter_map(|v| Some((v["call_id"].as_str()?.to_owned(), as_text(&v["output"]))))
        .collect()
}

/// The last stored event's number: the page's live follower goes on after it.
pub fn last_sequence(events: &[EventRecord]) -> Option<u64> {
    events.last().map(|e| e.sequence_number)
}

/// The input a person gave, as `(role or type, text)` lines.
pub fn input_lines(input: &[Item], content: Content) -> Vec<(String, String)> {
    input
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .map(|v| {
            let kind = v["role"]
                .as_str()
                .or(v["type"].as_str())
                .unwrap_or_default()
                .to_owned();
            let text = match &v["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => match &v["output"] {
                    Value::Null => v.to_string(),
                    output => as_text(output),
                },
            };
            (kind, content.text(&text))
        })
        .collect()
}
