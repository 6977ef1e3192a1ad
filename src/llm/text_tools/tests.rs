//! Every reply of a corpus of tricky ones, fed in every way it may be chunked (split once at
//! every character, one character at a time, and many seeded random chunkings), yields the
//! same pieces as when fed whole, and those are the expected ones. Since text is never taken
//! back once passed on, the same text in the end means that no delta ever carried a fragment
//! of a marker.

use serde_json::json;

use super::*;

fn text(t: &str) -> Piece {
    Piece::Text(t.into())
}

fn call(name: &str, arguments: Value) -> Piece {
    Piece::Call(ParsedCall {
        name: name.into(),
        arguments,
        repaired: false,
    })
}

fn repaired(name: &str, arguments: Value) -> Piece {
    Piece::Call(ParsedCall {
        name: name.into(),
        arguments,
        repaired: true,
    })
}

/// The pieces of `chunks` fed in order, adjacent texts joined.
fn parse(protocol: TextProtocol, chunks: &[&str]) -> Vec<Piece> {
    let mut parser = match protocol {
        TextProtocol::Json => AnyParser::Json(json::JsonReplyParser::new()),
        marked => AnyParser::Marked(TextCallParser::new(marked)),
    };
    let mut out = Vec::new();
    for chunk in chunks {
        let mut pieces = Vec::new();
        match &mut parser {
            AnyParser::Marked(p) => p.feed(chunk, &mut pieces),
            AnyParser::Json(p) => p.feed(chunk, &mut pieces),
        }
        join(&mut out, pieces);
    }
    let mut pieces = Vec::new();
    match &mut parser {
        AnyParser::Marked(p) => p.finish(&mut pieces),
        AnyParser::Json(p) => p.finish(&mut pieces),
    }
    join(&mut out, pieces);
    out
}

fn join(out: &mut Vec<Piece>, pieces: Vec<Piece>) {
    for piece in pieces {
        match (out.last_mut(), piece) {
            (Some(Piece::Text(last)), Piece::Text(more)) => last.push_str(&more),
            (_, piece) => out.push(piece),
        }
    }
}

/// Every way of chunking `reply` this test tries.
fn chunkings(reply: &str) -> Vec<Vec<&str>> {
    let bounds: Vec<usize> = (0..=reply.len())
        .filter(|&i| reply.is_char_boundary(i))
        .collect();
    let mut all = vec![vec![reply]];
    for &at in &bounds {
        all.push(vec![&reply[..at], &reply[at..]]);
    }
    all.push(bounds.windows(2).map(|w| &reply[w[0]..w[1]]).collect());
    // Seeded random cuts (a linear congruential generator: the same cuts every run).
    let mut seed: u64 = 0x5eed;
    for _ in 0..200 {
        let mut cuts = vec![0];
        for &at in &bounds[1..bounds.len() - 1] {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if (seed >> 33).is_multiple_of(4) {
                cuts.push(at);
            }
        }
        cuts.push(reply.len());
        all.push(cuts.windows(2).map(|w| &reply[w[0]..w[1]]).collect());
    }
    all
}

fn check(protocol: TextProtocol, reply: &str, expected: &[Piece]) {
    for chunks in chunkings(reply) {
        assert_eq!(
            parse(protocol, &chunks),
            expected,
            "{reply:?} fed as {chunks:?}"
        );
    }
}

#[test]
fn hermes_replies_yield_the_same_text_and_calls_however_they_are_chunked() {
    let weather = json!({"city": "Paris"});
    let cases: Vec<(&str, Vec<Piece>)> = vec![
        ("Plain text, no call.", vec![text("Plain text, no call.")]),
        (
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            vec![text("Let me check."), call("get_weather", weather.clone())],
        ),
        (
            "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"n\": 2}}</tool_call>\n",
            vec![call("a", json!({})), call("b", json!({"n": 2}))],
        ),
        (
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n\nDone.",
            vec![call("get_weather", weather.clone()), text("Done.")],
        ),
        (
            "Call it so:\n```\n<tool_call>{\"name\": \"x\"}</tool_call>\n```\nThat is all.",
            vec![text("Call it so:\n```\n<tool_call>{\"name\": \"x\"}</tool_call>\n```\nThat is all.")],
        ),
        (
            "```\nexample\n```\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
            vec![text("```\nexample\n```"), call("a", json!({}))],
        ),
        (
            "Ça va — 東京 🌧️\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich 🌧️\"}}</tool_call>",
            vec![text("Ça va — 東京 🌧️"), call("get_weather", json!({"city": "Zürich 🌧️"}))],
        ),
        (
            "a <tool> b < c <tool_cal d </tool_call> e",
            vec![text("a <tool> b < c <tool_cal d </tool_call> e")],
        ),
        (
            "<tool_call>{'name': 'f', 'arguments': {'ok': True}}</tool_call>",
            vec![repaired("f", json!({"ok": true}))],
        ),
        (
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
            vec![call("f", json!({"q": 1}))],
        ),
        (
            "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1}}\n",
            vec![text("Sure."), repaired("f", json!({"q": 1}))],
        ),
        (
            "<tool_call>{\"name\": \"f\", \"argu",
            vec![Piece::Malformed {
                raw: "<tool_call>{\"name\": \"f\", \"argu".into(),
                reason: "the block is not closed with </tool_call>; the call is not JSON (EOF while parsing a string at line 1 column 19)".into(),
            }],
        ),
        (
            "<tool_call>[1, 2]</tool_call> after",
            vec![
                Piece::Malformed {
                    raw: "<tool_call>[1, 2]</tool_call>".into(),
                    reason: "the call is not a JSON object with \"name\" and \"arguments\"".into(),
                },
                text("after"),
            ],
        ),
        ("Trailing spaces stay.  ", vec![text("Trailing spaces stay.  ")]),
    ];
    for (reply, expected) in cases {
        check(TextProtocol::Hermes, reply, &expected);
    }
}

#[test]
fn vcp_replies_yield_the_same_text_and_calls_however_they_are_chunked() {
    let cases: Vec<(&str, Vec<Piece>)> = vec![
        (
            "我来查一下。\n<<<[TOOL_REQUEST]>>>\ntool_name:「始」get_weather「末」,\ncity:「始」Zürich「末」\n<<<[END_TOOL_REQUEST]>>>\n好的。",
            vec![
                text("我来查一下。"),
                call("get_weather", json!({"city": "Zürich"})),
                text("好的。"),
            ],
        ),
        (
            "<<<[TOOL_REQUEST]>>>\ntool_name:「始」note「末」,\ntext:「始」line one\nline <<<[two]>>>「末」,\ntext:「始」last wins「末」\n<<<[END_TOOL_REQUEST]>>>",
            vec![call("note", json!({"text": "last wins"}))],
        ),
        (
            "<<<[TOOL_REQUEST]>>>\ncity:「始」Paris「末」\n<<<[END_TOOL_REQUEST]>>>",
            vec![Piece::Malformed {
                raw: "<<<[TOOL_REQUEST]>>>\ncity:「始」Paris「末」\n<<<[END_TOOL_REQUEST]>>>"
                    .into(),
                reason: "the block has no tool_name:「始」…「末」".into(),
            }],
        ),
        (
            "<<<[ not a request ]>>>",
            vec![text("<<<[ not a request ]>>>")],
        ),
    ];
    for (reply, expected) in cases {
        check(TextProtocol::Vcp, reply, &expected);
    }
}

#[test]
fn json_replies_yield_the_same_text_and_calls_however_they_are_chunked() {
    let cases: Vec<(&str, Vec<Piece>)> = vec![
        (
            r#"{"response": "Ça va — \"quoted\"\n東京 \ud83c\udf27 \u00e9 🌧️"}"#,
            vec![text("Ça va — \"quoted\"\n東京 🌧 é 🌧️")],
        ),
        (
            r#" { "tool_calls": [{"name": "get_weather", "arguments": {"city": "Zürich"}}, {"name": "b", "arguments": {}}] }"#,
            vec![
                call("get_weather", json!({"city": "Zürich"})),
                call("b", json!({})),
            ],
        ),
        (
            r#"{"tool_call": {"name": "a", "arguments": {"n": 1}}}"#,
            vec![call("a", json!({"n": 1}))],
        ),
        (
            "The model ignored the format.",
            vec![text("The model ignored the format.")],
        ),
        (
            r#"{"tool_calls": [{"name": 'a', "arguments": {}},]}"#,
            vec![repaired("a", json!({}))],
        ),
        (
            r#"{"answer": 42"#,
            vec![Piece::Malformed {
                raw: r#"{"answer": 42"#.into(),
                reason: "the reply is not a JSON object with \"response\" or \"tool_calls\"".into(),
            }],
        ),
    ];
    for (reply, expected) in cases {
        check(TextProtocol::Json, reply, &expected);
    }
}
