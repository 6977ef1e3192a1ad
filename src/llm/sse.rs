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

    /// Feeds bytes; returns the `data` of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = std::mem::take(&mut self.line);
            self.handle_line(&line, &mut out);
        }
        out
    }

    /// Ends the input: an event not followed by a blank line still counts.
    pub fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        let mut out = Vec::new();
        if !line.is_empty() {
            self.handle_line(&line, &mut out);
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
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            let value = String::from_utf8_lossy(value);
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
