//! A turn's server calls run concurrently and are shown one item at a time: the first to
//! produce output or finish takes the stream, the others wait their turn, so each item's
//! events stay contiguous. The model gets the results in its own call order. A turn that also
//! has client calls after server calls shows everything in the model's call order instead:
//! each client call's item once the server calls before it are shown.

use std::collections::VecDeque;

use super::RunTask;
use super::output::call_item;
use super::turn::Deferred;
use crate::engine::executor::{CallEvent, ServerCall, TurnCalls};
use crate::engine::lifecycle::Ending;
use crate::protocol::items::Item;
use crate::protocol::transcript::Entry;
use crate::tools::{ToolErrorKind, ToolResult};

/// A server call once it has its result.
pub(super) struct Presented {
    pub call: ServerCall,
    pub result: ToolResult,
    pub chunks: Vec<String>,
}

/// What is known of each call while they are presented.
struct Progress {
    chunks: Vec<Vec<String>>,
    results: Vec<Option<ToolResult>>,
    /// Calls waiting to take the stream, in the order they became ready.
    ready: VecDeque<usize>,
    is_ready: Vec<bool>,
    /// The call shown now, and its item's place in the output.
    speaker: Option<(usize, usize)>,
    /// Each call's final item, in the model's call order.
    items: Vec<Option<Item>>,
    remaining: usize,
    /// Client calls waiting for the server calls before them; while there are any, calls
    /// are shown in the model's order.
    deferred: VecDeque<Deferred>,
    /// The next call to show, in that order.
    next: usize,
    /// The deferred calls' items once shown, each with how many server calls precede it.
    shown_deferred: Vec<(usize, Item)>,
}

impl Progress {
    /// Every item of the turn's calls in the model's call order, for the transcript.
    fn in_call_order(self) -> Vec<Item> {
        let mut deferred = self.shown_deferred.into_iter().peekable();
        let mut ordered = Vec::new();
        for (slot, item) in self.items.into_iter().enumerate() {
            while let Some((_, item)) = deferred.next_if(|(after, _)| *after <= slot) {
                ordered.push(item);
            }
            ordered.extend(item);
        }
        ordered.extend(deferred.map(|(_, item)| item));
        ordered
    }
}

impl RunTask {
    /// Presents the turn's server calls; a stop closes the call being shown and keeps the
    /// finished results.
    pub(super) async fn present(
        &mut self,
        mut calls: TurnCalls,
        deferred: Vec<Deferred>,
    ) -> Result<Vec<Presented>, Ending> {
        let count = calls.calls.len();
        let mut p = Progress {
            chunks: vec![Vec::new(); count],
            results: vec![None; count],
            ready: VecDeque::new(),
            is_ready: vec![false; count],
            speaker: None,
            items: vec![None; count],
            remaining: count,
            deferred: deferred.into(),
            next: 0,
            shown_deferred: Vec::new(),
        };
        while p.remaining > 0 {
            if self.show_next(&calls, &mut p).await {
                continue;
            }
            let event = tokio::select! {
                _ = self.place.control.token().cancelled() => {
                    self.cut_short(&calls, p).await;
                    return Err(self.stop_ending());
                }
                event = calls.next_event() => event,
            };
            let slot = match event {
                Some(CallEvent::Output(slot, text)) => {
                    p.chunks[slot].push(text);
                    slot
                }
                Some(CallEvent::Done(slot, result)) => {
                    p.results[slot] = Some(result);
                    slot
                }
                None => break,
            };
            let hidden_running = calls.calls[slot].options.hidden && p.results[slot].is_none();
            if !p.is_ready[slot] && !hidden_running {
                p.is_ready[slot] = true;
                p.ready.push_back(slot);
            }
        }
        self.show_deferred(&mut p).await;
        let results = std::mem::take(&mut p.results);
        let chunks = std::mem::take(&mut p.chunks);
        // The model gets the results in its own call order, whatever order they were shown in.
        self.out
            .transcript
            .extend(p.in_call_order().into_iter().map(Entry::Item));
        Ok(calls
            .calls
            .drain(..)
            .zip(results)
            .zip(chunks)
            .map(|((call, result), chunks)| Presented {
                call,
                result: result.unwrap_or_else(unfinished),
                chunks,
            })
            .collect())
    }

    /// Moves the stream on: the next ready call takes it, or the one showing finishes.
    /// False when nothing moved (the calls must progress first).
    async fn show_next(&mut self, calls: &TurnCalls, p: &mut Progress) -> bool {
        self.show_deferred(p).await;
        let next = match p.deferred.is_empty() {
            true => p.ready.pop_front(),
            // In the model's order: only the next call may take the stream.
            false => p
                .ready
                .iter()
                .position(|slot| *slot == p.next)
                .and_then(|at| p.ready.remove(at)),
        };
        if p.speaker.is_none()
            && let Some(slot) = next
        {
            let call = &calls.calls[slot];
            if call.options.hidden {
                // Hidden calls never take the stream; they become ready only when done.
                let result = p.results[slot].clone().unwrap_or_else(unfinished);
                p.items[slot] = Some(Item::McpCall(call_item(call, &result)));
                p.remaining -= 1;
                p.next = slot + 1;
                return true;
            }
            let output_index = self.out.open_call(call).await;
            p.speaker = Some((slot, output_index));
        }
        if let Some((slot, output_index)) = p.speaker
            && let Some(result) = p.results[slot].clone()
        {
            let item = self
                .out
                .close_call(&calls.calls[slot], output_index, &result)
                .await;
            p.items[slot] = Some(item);
            p.remaining -= 1;
            p.speaker = None;
            p.next = slot + 1;
            return true;
        }
        false
    }

    /// Shows the deferred client calls whose server calls before them are all shown.
    async fn show_deferred(&mut self, p: &mut Progress) {
        while p.speaker.is_none()
            && let Some(call) = p.deferred.front()
            && (call.after <= p.next || p.remaining == 0)
        {
            let Some(call) = p.deferred.pop_front() else {
                break;
            };
            let shown = self
                .out
                .client_call(
                    call.kind,
                    &call.call_id,
                    &call.name,
                    &call.arguments,
                    call.namespace,
                )
                .await;
            let item = match shown {
                Ok(pending) => {
                    self.waits.calls.push(pending);
                    // Shown; placed in the transcript in call order with the others.
                    self.out.transcript.pop().and_then(|entry| match entry {
                        Entry::Item(item) => Some(item),
                        Entry::TurnEnd => None,
                    })
                }
                Err(reason) => {
                    let result = ToolResult::failure(ToolErrorKind::Refused, reason);
                    let output_index = self.out.open_call(&call.refused).await;
                    Some(
                        self.out
                            .close_call(&call.refused, output_index, &result)
                            .await,
                    )
                }
            };
            p.shown_deferred.extend(item.map(|item| (call.after, item)));
        }
    }

    /// The run stops while its calls run: the one shown closes as cancelled (or
    /// interrupted, when the run is handed over); finished calls are kept.
    async fn cut_short(&mut self, calls: &TurnCalls, mut p: Progress) {
        if let Some((slot, output_index)) = p.speaker.take() {
            let reason = match self.stop_ending() {
                Ending::HandedOver => {
                    "The call was interrupted: the instance running it stopped. It was not run again."
                }
                _ => "The call was cancelled.",
            };
            let cut = ToolResult::failure(ToolErrorKind::Cancelled, reason);
            let item = self
                .out
                .close_call(&calls.calls[slot], output_index, &cut)
                .await;
            p.items[slot] = Some(item);
        }
        self.out
            .transcript
            .extend(p.in_call_order().into_iter().map(Entry::Item));
    }
}

fn unfinished() -> ToolResult {
    ToolResult::failure(ToolErrorKind::Cancelled, "The call did not finish.")
}
