//! `fake-llm [--listen ADDR] [--deltas N --first-token-ms MS --inter-token-ms MS]`: the
//! scripted chat-completions server as a process, for the client-compatibility suite and
//! benchmarks. Prints `listening on http://ADDR` when bound. With `--deltas`, an unscripted
//! request gets N synthetic text deltas instead of an echo; with `--call-tools`, one that
//! offers tools and ends with a user message calls the first tool (arguments from its schema);
//! with `--persona NAME`, it plays that provider (`openai`, `deepseek`, `vllm`, …); with
//! `--tool-text hermes|vcp|json`, a model without function calling that writes its calls in
//! its text (a request with `tools` is refused).

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    let mut synthetic: Option<fake_llm::Synthetic> = None;
    let mut persona = fake_llm::Persona::Generic;
    let mut tool_text = None;
    let number = |value: Option<String>| -> u64 {
        value.and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: fake-llm: a number is expected");
            std::process::exit(2)
        })
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().unwrap_or(listen),
            "--deltas" => synthetic.get_or_insert_default().deltas = number(args.next()) as usize,
            "--first-token-ms" => {
                synthetic.get_or_insert_default().first_token_ms = number(args.next())
            }
            "--inter-token-ms" => {
                synthetic.get_or_insert_default().inter_token_ms = number(args.next())
            }
            "--tool-turns" => {
                synthetic.get_or_insert_default().tool_turns = number(args.next()) as usize
            }
            "--call-tools" => synthetic.get_or_insert_default().call_tools = true,
            "--persona" => {
                let name = args.next().unwrap_or_default();
                persona = fake_llm::Persona::parse(&name).unwrap_or_else(|| {
                    eprintln!("usage: fake-llm: unknown persona {name:?}");
                    std::process::exit(2)
                });
            }
            "--tool-text" => {
                let name = args.next().unwrap_or_default();
                tool_text = Some(fake_llm::ToolText::parse(&name).unwrap_or_else(|| {
                    eprintln!("usage: fake-llm: unknown tool text {name:?} (hermes, vcp, json)");
                    std::process::exit(2)
                }));
            }
            other => {
                eprintln!(
                    "usage: fake-llm [--listen ADDR] [--deltas N] [--first-token-ms MS] [--inter-token-ms MS] [--tool-turns N] [--call-tools] [--persona NAME] [--tool-text hermes|vcp|json] (unknown argument {other:?})"
                );
                std::process::exit(2);
            }
        }
    }
    fake_llm::serve(&listen, synthetic, persona, tool_text).await
}
