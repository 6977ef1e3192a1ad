//! Measurements of switchyard; each subcommand prints markdown table rows.
//!
//! * `load --base URL --target switchyard|upstream (--rate R | --concurrency C)
//!   [--scenario text|tools|http-tools|http-tools-saved] [--duration-s S] [--pid PID]`:
//!   streamed runs, open loop at R runs/s or closed loop with C at once; per run the time to
//!   first byte, to the first text delta and to the end; every switchyard stream's sequence
//!   numbers are checked.
//!   `--target upstream` sends the same load to the chat-completions server directly, so the
//!   difference is switchyard's overhead. `load-header` prints the table header.
//! * `pause (--base URL | --upstream URL) [--runs N] [--concurrency C] [--pid PID]`: runs that
//!   stop for a definition-only tool and are resumed with streamed `submit_tool_outputs`;
//!   `--upstream` prints the baseline row instead. `pause-header` prints the table header.
//! * `resume --base URL [--runs N] [--reattaches N] [--starting-after N]`: reattach latency to
//!   stored logs.
//! * `idle --base URL --streams N --pid PID`: N streams held open at once against a slow
//!   upstream; the service's memory per open stream.

mod common;
mod idle;
mod load;
mod pause;
mod resume;

const USAGE: &str = "usage: switchyard-bench load|load-header|pause|pause-header|resume|idle --flag value … (see bench/src/main.rs)";

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let args: Vec<String> = args.collect();
    let result = match command.as_str() {
        "load-header" => {
            println!("{}", load::header());
            Ok(())
        }
        "load" => load::main(args).await,
        "pause-header" => {
            println!("{}", pause::header());
            Ok(())
        }
        "pause" => pause::main(args).await,
        "resume" => resume::main(args).await,
        "idle" => idle::main(args).await,
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}
