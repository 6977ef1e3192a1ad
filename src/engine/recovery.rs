//! Taking over a run whose instance stopped: died (its lease ran out), or handed it over. The
//! run continues from its last checkpoint (the last completed model turn, and the server calls
//! dispatched since); the event log is completed first: items left open are closed
//! `incomplete`, and a dispatched call with no recorded result is reported to the model as
//! interrupted — it is never run twice. (Read-only calls are not recorded as started: the
//! model is asked for their turn again, and they run again.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use super::emitter::EventEmitter;
use super::launch::Resumption;
use super::{Engine, EngineError};
use crate::protocol::events::{Event, EventRecord};
use crate::protocol::items::{Item, ItemStatus};
use crate::protocol::response::ResponseStatus;
use crate::protocol::transcript::Entry;
use crate::store::StoredRun;
use crate::time::UnixMillis;

/// Events read per query while rebuilding a log.
const PAGE: u32 = 1000;

/// How long the runs a previous process left wait at most, after a start, for the MCP servers
/// to list their tools before they are taken over.
pub(super) const DISCOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

const INTERRUPTED: &str =
    "The call was interrupted: the instance running it stopped. It was not run again.";

/// The output as the event log shows it, and which items were still open.
fn rebuild_output(events: &[EventRecord]) -> (Vec<Item>, BTreeSet<usize>) {
    let mut items: BTreeMap<usize, Value> = BTreeMap::new();
    let mut open = BTreeSet::new();
    // Text streamed into items still open: their answer, reasoning, or reasoning summary.
    let mut text: HashMap<usize, String> = HashMap::new();
    let mut summarised = BTreeSet::new();
    for event in events {
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        let index = data
            .get("output_index")
            .and_then(Value::as_u64)
            .map(|i| i as usize);
        match (event.event_type.as_ref(), index) {
            ("response.output_item.added", Some(index)) => {
                items.insert(index, data["item"].clone());
                open.insert(index);
            }
            ("response.output_item.done", Some(index)) => {
                items.insert(index, data["item"].clone());
                open.remove(&index);
            }
            ("response.reasoning_summary_part.added", Some(index)) => {
                summarised.insert(index);
            }
            (
                "response.output_text.delta"
                | "response.reasoning_text.delta"
                | "response.reasoning_summary_text.delta",
                Some(index),
            ) => {
                text.entry(index)
                    .or_default()
                    .push_str(data["delta"].as_str().unwrap_or_default());
            }
            _ => {}
        }
    }
    for index in &open {
        let (Some(item), Some(text)) = (items.get_mut(index), text.get(index)) else {
            continue;
        };
        if item["type"] == "message" {
            item["content"] =
                json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]);
        } else if item["type"] == "reasoning" {
            // An item streams either its text or its summary (see `run::output`).
            match summarised.contains(index) {
                true => item["summary"] = json!([{"type": "summary_text", "text": text}]),
                false => item["content"] = json!([{"type": "reasoning_text", "text": text}]),
            }
        }
    }
    let output = items
        .into_values()
        .filter_map(|value| serde_json::from_value::<Item>(value).ok())
        .collect();
    (output, open)
}

impl Engine {
    /// Takes over runs whose lease ran out (their instance stopped without handing them
    /// over) or that were handed over: on start, and then periodically. With `everything`,
    /// every running run not executing here counts (one process serves an SQLite file: whatever
    /// it did not start itself was left by a previous process). A run that cannot be
    /// continued is failed.
    pub async fn recover_abandoned(&self, everything: bool) -> Result<usize, EngineError> {
        let (ids, now) = self.abandoned(everything).await?;
        self.recover_all(ids, now).await
    }

    /// The runs [`Engine::recover_abandoned`] would take over now, and the time they count
    /// as abandoned before.
    pub async fn abandoned(
        &self,
        everything: bool,
    ) -> Result<(Vec<String>, UnixMillis), EngineError> {
        let now = if everything {
            UnixMillis::MAX
        } else {
            UnixMillis::now()
        };
        let stale = self.inner.store.stale_runs(now).await?;
        let ids = stale
            .into_iter()
            .map(|run| run.body.id)
            .filter(|id| !self.inner.live.contains(id))
            .collect();
        Ok((ids, now))
    }

    async fn recover_all(&self, ids: Vec<String>, now: UnixMillis) -> Result<usize, EngineError> {
        let mut taken = 0;
        for id in ids {
            if self.recover(&id, now).await? {
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Takes over the runs a previous process left (`ids`, from [`Engine::abandoned`]) in the
    /// background, once every MCP server has listed its tools or failed to (at most
    /// `DISCOVERY_WAIT`): a run taken over goes on with the tools it is offered then, and the
    /// start does not wait for slow servers. The runs stay unclaimed meanwhile.
    pub fn recover_after_discovery(&self, ids: Vec<String>, now: UnixMillis) {
        let engine = self.clone();
        self.inner.maintenance.spawn(async move {
            let settled = engine.inner.registry.discovery_settled();
            tokio::select! {
                _ = engine.inner.stop_maintenance.cancelled() => return,
                waited = tokio::time::timeout(DISCOVERY_WAIT, settled) => {
                    if waited.is_err() {
                        tracing::warn!("taking runs over before every MCP server has listed its tools");
                    }
                }
            }
            match engine.recover_all(ids, now).await {
                Ok(0) => {}
                Ok(runs) => tracing::warn!(
                    runs,
                    "took over runs left unfinished by a previous process"
                ),
                Err(e) => tracing::error!(error = %e, "cannot take over the runs a previous process left"),
            }
        });
    }

    /// Takes over one run whose lease ran out before `now`; false when another instance got
    /// it first.
    pub(super) async fn recover(&self, id: &str, now: UnixMillis) -> Result<bool, EngineError> {
        let lease = self.lease(UnixMillis::now());
        // Several instances may find it; one claims it.
        let Some(run) = self.inner.store.claim_stale(id, &lease, now).await? else {
            return Ok(false);
        };
        if let Err(e) = Box::pin(self.take_over(run.clone())).await {
            tracing::error!(response_id = %id, error = %e, "cannot take over a run; failing it");
            self.give_up(
                run,
                "The run was interrupted: the instance executing it stopped.",
            )
            .await;
        }
        Ok(true)
    }

    /// Continues a run this instance has just claimed from one that stopped.
    async fn take_over(&self, run: StoredRun) -> Result<(), EngineError> {
        let id = run.body.id.clone();
        let store = &self.inner.store;
        let mut events = Vec::new();
        loop {
            let after = events.last().map(|e: &EventRecord| e.sequence_number);
            let page = store.events_after(&id, after, PAGE).await?;
            let done = page.len() < PAGE as usize;
            events.extend(page);
            if done {
                break;
            }
        }
        let next = events.last().map_or(0, |e| e.sequence_number + 1);
        let mut emitter = EventEmitter::new(
            self.inner.hub.clone(),
            Arc::from(id.as_str()),
            Arc::from(run.tenant_id.as_str()),
            next,
        );
        let (mut output, open) = rebuild_output(&events);
        close_open_items(&mut emitter, &mut output, open).await;
        let mut transcript = run.transcript.clone();
        let interrupted = settle_calls(&mut emitter, &mut output, &mut transcript).await;
        keep_announcements(&output, &mut transcript);
        if !matches!(transcript.last(), None | Some(Entry::TurnEnd)) {
            transcript.push(Entry::TurnEnd);
        }
        emitter.flush().await?;
        tracing::warn!(
            response_id = %id,
            events = events.len(),
            interrupted,
            "took over a run from an instance that stopped"
        );

        let mut body = run.body.clone();
        body.output = output;
        body.status = ResponseStatus::InProgress;
        let now = UnixMillis::now();
        store
            .checkpoint(&id, self.holder(), &body, &transcript, now)
            .await?;
        let run = StoredRun {
            body,
            transcript,
            ..run
        };
        let loaded = match self
            .load(
                &run.tenant_id,
                &run.body,
                &run.transcript,
                run.key_id.as_deref(),
            )
            .await
        {
            Ok(loaded) => loaded,
            Err(e) => {
                let why = format!("The run cannot continue: {e}");
                self.give_up(run, &why).await;
                return Ok(());
            }
        };
        let resumption = Resumption::unattended(run, emitter.next_sequence());
        self.resume(loaded, resumption);
        Ok(())
    }
}

/// The log first: what was open when the run's instance stopped is closed, incomplete.
async fn close_open_items(emitter: &mut EventEmitter, output: &mut [Item], open: BTreeSet<usize>) {
    for index in open {
        if let Some(item) = output.get_mut(index) {
            *item.status_mut() = Some(ItemStatus::Incomplete);
            let event = Event::OutputItemDone {
                output_index: index,
                item: item.clone(),
            };
            emitter.emit(event).await;
        }
    }
}

/// Then the transcript: dispatched calls take their logged result, or are reported
/// interrupted (shown in the log if they were not). Returns how many were interrupted.
async fn settle_calls(
    emitter: &mut EventEmitter,
    output: &mut Vec<Item>,
    transcript: &mut [Entry],
) -> usize {
    let logged: HashMap<String, Item> = output
        .iter()
        .filter(|item| {
            matches!(item, Item::McpCall(c) if matches!(c.status, Some(ItemStatus::Completed | ItemStatus::Failed)))
        })
        .map(|item| (item.id().to_string(), item.clone()))
        .collect();
    let mut interrupted = 0;
    for entry in transcript.iter_mut() {
        let Entry::Item(item) = entry else { continue };
        let Item::McpCall(call) = item else { continue };
        if call.status != Some(ItemStatus::InProgress) {
            continue;
        }
        if let Some(result) = logged.get(&call.id) {
            *item = result.clone();
            continue;
        }
        interrupted += 1;
        call.status = Some(ItemStatus::Failed);
        call.error = Some(json!({"type": "mcp_tool_execution_error", "content": INTERRUPTED}));
        let failed = Item::McpCall(call.clone());
        match output.iter().position(|o| o.id() == call.id) {
            // Shown before the crash: its item now says why it failed.
            Some(index) => output[index] = failed,
            None => {
                let output_index = output.len();
                output.push(failed.clone());
                emitter
                    .emit(Event::OutputItemAdded {
                        output_index,
                        item: failed.clone(),
                    })
                    .await;
                emitter
                    .emit(Event::OutputItemDone {
                        output_index,
                        item: failed,
                    })
                    .await;
            }
        }
    }
    interrupted
}

/// Tool servers announced before the first checkpoint are not announced again.
fn keep_announcements(output: &[Item], transcript: &mut Vec<Entry>) {
    let announced: Vec<Entry> = output
        .iter()
        .filter(|item| {
            matches!(item, Item::McpListTools(l) if l.status == Some(ItemStatus::Completed))
                && !transcript
                    .iter()
                    .filter_map(Entry::item)
                    .any(|seen| seen.id() == item.id())
        })
        .cloned()
        .map(Entry::Item)
        .collect();
    transcript.splice(0..0, announced);
}
