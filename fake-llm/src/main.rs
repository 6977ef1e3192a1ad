//! `fake-llm [--listen ADDR]`: the scripted chat-completions server as a process, for the
//! client-compatibility suite and benchmarks. Prints `listening on http://ADDR` when bound.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().unwrap_or(listen),
            other => {
                eprintln!("usage: fake-llm [--listen ADDR] (unknown argument {other:?})");
                std::process::exit(2);
            }
        }
    }
    fake_llm::serve(&listen).await
}
