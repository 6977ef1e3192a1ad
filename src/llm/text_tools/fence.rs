//! Fenced code blocks in the model's text: a call marker inside one is an example, not a call.
//! A line that starts (after at most three spaces) with three backticks opens a block, and the
//! next such line closes it, as CommonMark reads them (tildes and longer fences are read the
//! same way, which is what models write).

#[derive(Clone, Debug)]
pub(super) struct Fence {
    inside: bool,
    /// Where the current line is: its leading spaces and backticks so far, or `None` once the
    /// line can no longer open or close a fence.
    line: Option<(u8, u8)>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            inside: false,
            line: Some((0, 0)),
        }
    }
}

impl Fence {
    /// Reads more of the text.
    pub(super) fn advance(&mut self, text: &str) {
        for c in text.chars() {
            if c == '\n' {
                self.line = Some((0, 0));
                continue;
            }
            self.line = match (self.line, c) {
                (Some((spaces, 0)), ' ') if spaces < 3 => Some((spaces + 1, 0)),
                (Some((spaces, ticks)), '`' | '~') if ticks < 2 => Some((spaces, ticks + 1)),
                (Some((_, 2)), '`' | '~') => {
                    self.inside = !self.inside;
                    None
                }
                _ => None,
            };
        }
    }

    /// Whether a fence would be open after `text`.
    pub(super) fn inside_after(&self, text: &str) -> bool {
        let mut fence = self.clone();
        fence.advance(text);
        fence.inside
    }
}
