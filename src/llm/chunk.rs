//! The common shape of a streamed chat-completions chunk, read without serde: one choice whose
//! delta has at most its text, a finish reason, and scalars around them (`id`, `model`,
//! `created`, `index`, `role`, `logprobs: null` …). Nearly every chunk of a text reply has this
//! shape, and serde took about 5,000 instructions to read each one (12 % of a text run), most
//! of them in skipping the fields nobody reads. Anything else — an escape in a string, a
//! nested value where a scalar was expected, reasoning, tool calls, usage, an error, a second
//! choice, a repeated field, JSON that is not valid — is not read here: `read` says `None` and
//! the chunk goes to serde, which reads every shape (and says what is wrong with a bad one).

/// What a chunk of the common shape says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Common<'a> {
    /// `choices`: absent, empty, or its only choice.
    pub choices: Option<Option<Choice<'a>>>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct Choice<'a> {
    /// `delta`: absent or null, else its `content` when that is a string.
    pub delta: Option<Option<&'a str>>,
    pub finish_reason: Option<&'a str>,
}

/// The chunk, when it has the common shape and is valid JSON.
pub(super) fn read(payload: &str) -> Option<Common<'_>> {
    let mut cursor = Cursor {
        text: payload,
        at: 0,
    };
    let mut choices = None;
    let (mut error, mut usage) = (false, false);
    cursor.members(|cursor, key| match key {
        "choices" if choices.is_none() => {
            choices = Some(cursor.choices()?);
            Some(())
        }
        // Read (by serde) only when they say something.
        "error" if !error => {
            error = true;
            cursor.null()
        }
        "usage" if !usage => {
            usage = true;
            cursor.null()
        }
        "choices" | "error" | "usage" => None,
        _ => cursor.scalar().map(drop),
    })?;
    cursor.end()?;
    Some(Common { choices })
}

/// A JSON scalar.
enum Scalar<'a> {
    String(&'a str),
    Null,
    /// A number, `true` or `false`.
    Other,
}

/// A place in the text.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The next byte after white space, not taken.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(&byte) = bytes.get(self.at) {
            if !matches!(byte, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(byte);
            }
            self.at += 1;
        }
        None
    }

    /// Takes `byte`, after white space.
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Nothing but white space is left.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// An object's members, each value read by `value` (which sees the member's key).
    fn members(&mut self, mut value: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            value(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `choices`: an empty array, or an array of one choice.
    fn choices(&mut self) -> Option<Option<Choice<'a>>> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(None);
        }
        let (mut delta, mut finish_reason) = (None, None);
        let (mut seen_delta, mut seen_reason) = (false, false);
        self.members(|cursor, key| match key {
            "delta" if !seen_delta => {
                seen_delta = true;
                delta = cursor.delta()?;
                Some(())
            }
            "finish_reason" if !seen_reason => {
                seen_reason = true;
                finish_reason = cursor.text()?;
                Some(())
            }
            "delta" | "finish_reason" => None,
            _ => cursor.scalar().map(drop),
        })?;
        self.eat(b']')?;
        Some(Some(Choice {
            delta,
            finish_reason,
        }))
    }

    /// A delta (null, or an object with at most its text) as its text.
    fn delta(&mut self) -> Option<Option<Option<&'a str>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        let mut content = None;
        let mut seen = false;
        self.members(|cursor, key| match key {
            "content" if !seen => {
                seen = true;
                content = cursor.text()?;
                Some(())
            }
            // What the delta carries besides text is read by serde.
            "content" | "reasoning_content" | "reasoning" | "reasoning_details" | "tool_calls" => {
                None
            }
            _ => cursor.scalar().map(drop),
        })?;
        Some(Some(content))
    }

    /// A string or null.
    fn text(&mut self) -> Option<Option<&'a str>> {
        match self.scalar()? {
            Scalar::String(text) => Some(Some(text)),
            Scalar::Null => Some(None),
            Scalar::Other => None,
        }
    }

    fn null(&mut self) -> Option<()> {
        matches!(self.scalar()?, Scalar::Null).then_some(())
    }

    fn scalar(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => self.string().map(Scalar::String),
            b'n' => self.literal("null").map(|()| Scalar::Null),
            b't' => self.literal("true").map(|()| Scalar::Other),
            b'f' => self.literal("false").map(|()| Scalar::Other),
            b'-' | b'0'..=b'9' => self.number().map(|()| Scalar::Other),
            _ => None,
        }
    }

    /// A string without escapes (and so without control characters, which JSON escapes).
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        let start = self.at;
        let end = start + first_special(&bytes[start..])?;
        if bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // A quote is never part of a character of several bytes: `start..end` is whole ones.
        self.text.get(start..end)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(word).then(|| self.at += word.len())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            (*at > start).then_some(())
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => digits(&mut at)?,
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at)?;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            digits(&mut at)?;
        }
        self.at = at;
        Some(())
    }
}

/// Where the first quote, backslash or control character of `bytes` is. Eight bytes at a time
/// while eight are left (the text after a string is the rest of the chunk, so most strings end
/// within a word read from their start); a byte at a time took a third of the reader's
/// instructions.
fn first_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    // The high bit of each byte below `n` (1 ≤ n ≤ 0x80). A borrow only runs towards the
    // bytes after a marked one, so the first marked byte is exact.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let (quote, backslash) = (ONES * u64::from(b'"'), ONES * u64::from(b'\\'));
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let mut eight = [0; 8];
        eight.copy_from_slice(word);
        let word = u64::from_le_bytes(eight);
        let marked = below(word, 0x20) | below(word ^ quote, 1) | below(word ^ backslash, 1);
        if marked != 0 {
            return Some(at + marked.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let rest = words.remainder();
    let found = rest
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')?;
    Some(at + found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_special_byte_is_found_at_every_place_among_every_kind_of_neighbour() {
        let bytewise = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        };
        // Neighbours that a word-wise search could mistake: around the special bytes' values,
        // and bytes with the high bit set.
        let neighbours = [b'a', b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xc3, 0xff];
        for special in (0..0x20).chain([b'"', b'\\']) {
            for &neighbour in &neighbours {
                for length in 0..=19 {
                    for at in 0..=length {
                        let mut bytes = vec![neighbour; length];
                        if at < length {
                            bytes[at] = special;
                        }
                        // A second special byte after the first must not move the answer.
                        if at + 3 < length {
                            bytes[at + 3] = b'"';
                        }
                        assert_eq!(first_special(&bytes), bytewise(&bytes), "{bytes:?}");
                    }
                }
            }
        }
    }
}
