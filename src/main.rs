//! The command line: parse arguments, set up logging, load the configuration, run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard::app::{Application, redact_url};
use switchyard::config::Config;
use switchyard::telemetry;

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "A Responses-style API server for tool-calling LLM runs"
)]
struct Cli {
    /// A TOML file overriding config/default.toml (environment variables override both).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Print the effective configuration (secrets redacted) and exit.
    CheckConfig,
    /// Exit 0 when the configured instance answers /readyz (for container health checks).
    Probe,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The only subscriber of the process: it cannot be installed already.
    let _ = telemetry::init(telemetry::Sink::Stdout);
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(config).await,
        Command::Migrate => migrate(config).await,
        Command::CheckConfig => {
            print!("{}", config.to_redacted_toml());
            Ok(())
        }
        Command::Probe => probe(&config).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "exiting");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    tracing::info!(
        database = %redact_url(&config.database.url),
        providers = config.providers().len(),
        "starting"
    );
    Application::build(config)
        .await?
        .run_until(shutdown_signal())
        .await
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    let store = switchyard::store::connect(&config.database.url, 1).await?;
    store.ping().await?;
    println!("migrations applied to {}", redact_url(&config.database.url));
    Ok(())
}

/// Asks this host's instance whether it is ready.
async fn probe(config: &Config) -> anyhow::Result<()> {
    let host = match config.server.host.as_str() {
        "0.0.0.0" | "::" => "127.0.0.1",
        host => host,
    };
    let url = format!("http://{host}:{}/readyz", config.server.port);
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(2))
        .build()?;
    let status = client.get(&url).send().await?.status();
    anyhow::ensure!(status.is_success(), "{url} answered {status}");
    Ok(())
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
