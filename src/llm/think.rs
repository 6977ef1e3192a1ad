//! `<think>…</think>` at the start of a model's content, as models served without a reasoning
//! parser write their reasoning (DeepSeek-R1 and its distillations, QwQ, Qwen3 through
//! llama-server with `--reasoning-format none`), split from the answer while it streams.
//!
//! Tags may arrive split across chunks: a trailing fragment that could begin the tag being
//! looked for is held back until the next chunk decides it, and never shown as text. Only a
//! block at the start (after whitespace) counts: once answer text has been passed on, the rest
//! of the turn is answer text, so a model that writes about the tag is not cut.

use std::collections::VecDeque;

use super::{LlmError, ModelEvent};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where the splitter is in the content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Only whitespace so far: a `<think>` may still come.
    Start,
    Thinking,
    /// Just after `</think>`: the whitespace that separates the answer is dropped.
    Separating,
    Answer,
}

#[derive(Debug)]
pub struct ThinkSplitter {
    phase: Phase,
    /// Text not yet passed on: leading whitespace, or a fragment that may be a tag.
    held: String,
}

impl Default for ThinkSplitter {
    fn default() -> Self {
        ThinkSplitter {
            phase: Phase::Start,
            held: String::new(),
        }
    }
}

type Out = VecDeque<Result<ModelEvent, LlmError>>;

impl ThinkSplitter {
    /// Splits one content delta into reasoning and text events. Once the answer has begun,
    /// each delta is passed on as it came, without a copy (the path of every text delta).
    pub fn feed(&mut self, delta: String, out: &mut Out) {
        if self.phase == Phase::Answer {
            push_text(out, delta);
            return;
        }
        self.held.push_str(&delta);
        loop {
            match self.phase {
                Phase::Start => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.phase = Phase::Thinking;
                        continue;
                    }
                    if !OPEN.starts_with(trimmed) {
                        // Answer text: everything held is passed on as it was.
                        self.phase = Phase::Answer;
                        push_text(out, std::mem::take(&mut self.held));
                    }
                    return;
                }
                Phase::Thinking => {
                    if let Some(at) = self.held.find(CLOSE) {
                        let after = self.held.split_off(at + CLOSE.len());
                        self.held.truncate(at);
                        push_reasoning(out, std::mem::take(&mut self.held));
                        self.held = after;
                        self.phase = Phase::Separating;
                        continue;
                    }
                    let keep = partial_suffix(&self.held, CLOSE);
                    let rest = self.held.split_off(self.held.len() - keep);
                    push_reasoning(out, std::mem::replace(&mut self.held, rest));
                    return;
                }
                // The answer usually starts with a blank line after the tag.
                Phase::Separating => {
                    let answer = self.held.trim_start();
                    if !answer.is_empty() {
                        push_text(out, answer.to_string());
                        self.phase = Phase::Answer;
                    }
                    self.held.clear();
                    return;
                }
                Phase::Answer => return,
            }
        }
    }

    /// The content ended: what is held is what it looked like (an unclosed block is
    /// reasoning; a lone fragment is text).
    pub fn finish(&mut self, out: &mut Out) {
        let held = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Thinking => push_reasoning(out, held),
            Phase::Start | Phase::Answer => push_text(out, held),
            Phase::Separating => {}
        }
        self.phase = Phase::Answer;
    }
}

/// The length of the longest end of `text` that begins `tag` (without being all of it).
/// Tags are ASCII, so such an end starts on a character boundary.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.len() >= n && text.as_bytes()[text.len() - n..] == tag.as_bytes()[..n])
        .unwrap_or(0)
}

fn push_text(out: &mut Out, text: String) {
    if !text.is_empty() {
        out.push_back(Ok(ModelEvent::TextDelta(text)));
    }
}

fn push_reasoning(out: &mut Out, text: String) {
    if !text.is_empty() {
        out.push_back(Ok(ModelEvent::ReasoningDelta(text)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasoning and the text the splitter makes of `chunks`, each concatenated.
    fn split(chunks: &[&str]) -> (String, String) {
        let mut splitter = ThinkSplitter::default();
        let mut out = Out::new();
        for chunk in chunks {
            splitter.feed(chunk.to_string(), &mut out);
        }
        splitter.finish(&mut out);
        let (mut reasoning, mut text) = (String::new(), String::new());
        for event in out {
            match event {
                Ok(ModelEvent::ReasoningDelta(r)) => reasoning.push_str(&r),
                Ok(ModelEvent::TextDelta(t)) => text.push_str(&t),
                other => panic!("unexpected {other:?}"),
            }
        }
        (reasoning, text)
    }

    #[test]
    fn a_think_block_is_reasoning_wherever_the_chunks_split_its_tags() {
        let whole = "<think>Paris is the capital.</think>\n\nThe answer is Paris — ünïcode.";
        // Every way of cutting the content in two and in three pieces.
        let bounds: Vec<usize> = (0..=whole.len())
            .filter(|i| whole.is_char_boundary(*i))
            .collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|b| **b >= a) {
                let chunks = [&whole[..a], &whole[a..b], &whole[b..]];
                let (reasoning, text) = split(&chunks);
                assert_eq!(reasoning, "Paris is the capital.", "{chunks:?}");
                assert_eq!(text, "The answer is Paris — ünïcode.", "{chunks:?}");
            }
        }
    }

    #[test]
    fn text_without_a_leading_block_is_passed_on_whole_and_at_once() {
        assert_eq!(
            split(&["Hello ", "<think>x</think>"]).1,
            "Hello <think>x</think>"
        );
        assert_eq!(
            split(&["  <th", "ing>"]),
            (String::new(), "  <thing>".into())
        );
        assert_eq!(split(&["<thi"]), (String::new(), "<thi".into()));
        let mut splitter = ThinkSplitter::default();
        let mut out = Out::new();
        splitter.feed("Hi".into(), &mut out);
        assert_eq!(out.len(), 1, "decided text is not held back");
    }

    #[test]
    fn an_unclosed_block_is_reasoning_and_partial_tags_inside_it_are_kept() {
        assert_eq!(
            split(&["<think>a </th", "b </thi"]),
            ("a </thb </thi".into(), String::new())
        );
    }
}
