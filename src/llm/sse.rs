//! A Server-Sent Events decoder: bytes in, `data` payloads out. Handles `\n` and `\r\n`,
//! multi-line `data`, comments and fields it does not need.

#[derive(Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds bytes; returns the `data` of every event they complete. Whole lines are read
    /// where they lie; only a line split across reads is copied.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        // memchr scans a word at a time; a text run's chunks are read through here.
        while let Some(end) = memchr::memchr(b'\n', bytes) {
            let (piece, rest) = (&bytes[..end], &bytes[end + 1..]);
            bytes = rest;
            if self.line.is_empty() {
                self.handle_line(without_cr(piece), &mut out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(piece);
                self.handle_line(without_cr(&line), &mut out);
                // Its room is kept for the next split line.
                line.clear();
                self.line = line;
            }
        }
        self.line.extend_from_slice(bytes);
        out
    }

    /// Ends the input: an event not followed by a blank line still counts.
    pub fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        let mut out = Vec::new();
        if !line.is_empty() {
            self.handle_line(without_cr(&line), &mut out);
        }
        out.pop().or_else(|| self.data.take())
    }

    fn handle_line(&mut self, line: &[u8], out: &mut Vec<String>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(data);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            // Checked the quick way first: upstreams send valid UTF-8.
            let value = match std::str::from_utf8(value) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(value),
            };
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
    }
}

/// A line without the `\r` of a `\r\n` ending.
fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_are_joined() {
        let mut decoder = SseDecoder::new();
        assert!(decoder.feed(b"data: {\"a\"").is_empty());
        assert_eq!(
            decoder.feed(b":1}\r\n\r\ndata: [DONE]\n\n"),
            vec!["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn lines_split_at_every_byte_decode_as_whole_ones() {
        let stream = b"data: {\"a\":1}\r\n\r\n: ping\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
        let mut decoder = SseDecoder::new();
        let out: Vec<String> = stream.iter().flat_map(|b| decoder.feed(&[*b])).collect();
        assert_eq!(out, ["{\"a\":1}", "x\ny", "[DONE]"]);
        assert_eq!(SseDecoder::new().feed(stream), out);
    }

    #[test]
    fn comments_and_other_fields_are_ignored_and_multiline_data_is_joined() {
        let mut decoder = SseDecoder::new();
        let out = decoder.feed(b": ping\n\nevent: x\nid: 3\ndata: a\ndata: b\n\n");
        assert_eq!(out, vec!["a\nb"]);
    }

    #[test]
    fn a_last_event_without_blank_line_is_returned_by_finish() {
        let mut decoder = SseDecoder::new();
        assert!(decoder.feed(b"data: tail").is_empty());
        assert_eq!(decoder.finish().as_deref(), Some("tail"));
    }
}
