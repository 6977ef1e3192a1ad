//! A turn's server calls run concurrently and are shown one item at a time: the first to
//! produce output or finish takes the stream, the others wait their turn, so each item's
//! events stay contiguous. The model gets the results in its own call order.

use std::collections::VecDeque;

use super::RunTask;
use super::output::call_item;
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
}

impl RunTask {
    /// Presents the turn's server calls; a stop closes the call being shown and keeps the
    /// finished results.
    pub(super) async fn present(&mut self, mut calls: TurnCalls) -> Result<Vec<Presented>, Ending> {
        let count = calls.calls.len();
        let mut p = Progress {
            chunks: vec![Vec::new(); count],
            results: vec![None; count],
            ready: VecDeque::new(),
            is_ready: vec![false; count],
            speaker: None,
            items: vec![None; count],
            remaining: count,
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
        // The model gets the results in its own call order, whatever order they were shown in.
        self.out
            .transcript
            .extend(p.items.into_iter().flatten().map(Entry::Item));
        Ok(calls
            .calls
            .drain(..)
            .zip(p.results)
            .zip(p.chunks)
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
        if p.speaker.is_none()
            && let Some(slot) = p.ready.pop_front()
        {
            let call = &calls.calls[slot];
            if call.options.hidden {
                // Hidden calls never take the stream; they become ready only when done.
                let result = p.results[slot].clone().unwrap_or_else(unfinished);
                p.items[slot] = Some(Item::McpCall(call_item(call, &result)));
                p.remaining -= 1;
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
            return true;
        }
        false
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
            .extend(p.items.into_iter().flatten().map(Entry::Item));
    }
}

fn unfinished() -> ToolResult {
    ToolResult::failure(ToolErrorKind::Cancelled, "The call did not finish.")
}
