//! The command line: parse arguments, set up logging, load the configuration, run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard::app::{Application, Checked, open_database, redact_url};
use switchyard::auth::{self, KeyPolicy};
use switchyard::config::{Config, ConfigError};
use switchyard::telemetry;

/// The version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SWITCHYARD_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "switchyard",
    version = VERSION,
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
    /// Check the configuration as `serve` does (without opening the database or listening),
    /// print it (secrets redacted) and exit; 2 when it cannot be used.
    CheckConfig {
        /// Also ask each provider for its model list, as `serve` does at start, and say what
        /// each answered on stderr, one line a provider; 1 when one cannot serve requests.
        #[arg(long)]
        probe: bool,
    },
    /// Exit 0 when the configured instance answers /readyz (for container health checks).
    Probe,
    /// Manage API keys (in the configured database; every instance sees them at once).
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Make a key and print its secret (on stdout, alone; it is shown only this once).
    Create {
        /// The tenant the key belongs to (made if it is new).
        #[arg(long)]
        tenant: String,
        /// A label to recognise the key by.
        #[arg(long)]
        name: String,
        /// Tool servers the key may use (comma-separated; all when left out); `@request` lets it
        /// name MCP servers by URL where `[tools.request_mcp]` allows their host.
        #[arg(long, value_delimiter = ',')]
        tool_servers: Option<Vec<String>>,
        /// Server tools the key may not use (comma-separated, e.g. fetch_url).
        #[arg(long, value_delimiter = ',')]
        deny_tools: Vec<String>,
        /// Models the key may use (comma-separated; all when left out).
        #[arg(long, value_delimiter = ',')]
        models: Option<Vec<String>>,
        /// Requests a minute the key may send to each instance.
        #[arg(long)]
        requests_per_minute: Option<u32>,
        /// Runs the key may have executing at once on each instance.
        #[arg(long)]
        max_concurrent_runs: Option<u32>,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key by its id (`key_…`): every instance refuses it within 5 seconds.
    Revoke { id: String },
    /// Token usage recorded per day, tenant, key and model.
    Usage {
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// mimalloc instead of the system's allocator: a text run allocates and frees per stream event
/// (19 % of a loaded profile was in glibc's `malloc`/`free`). Measured against the system
/// allocator and jemalloc (docs/benchmarks.md, "Issue 30: the allocator"): 9.7 % fewer
/// instructions per text run (jemalloc 7.4 %), more runs/s at ×32, and no more memory (jemalloc
/// held 8 % more). Built without its transparent huge pages (`no_thp`): asking the kernel for
/// them made a service holding 10,000 idle streams hold 34.6 KiB per stream instead of 29.9
/// (the system allocator: 30.1), and 70 MiB before any stream instead of 57.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The only subscriber of the process: it cannot be installed already. The service logs to
    // stdout; the other commands print their answer there (a key, the configuration), so
    // their logs go to stderr.
    let serving = matches!(cli.command, None | Some(Command::Serve));
    let sink = match serving {
        true => telemetry::Sink::Stdout,
        false => telemetry::Sink::Stderr,
    };
    // Loaded first: the service's traces are configured there (a configuration that cannot be
    // read is said on stderr, without logging).
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            let _ = telemetry::init(sink);
            return refuse(&e);
        }
    };
    // Traces only for a configuration `serve` accepts (else it is refused below, as always).
    let traces = match serving && config.validate().errors.is_empty() {
        true => match telemetry::init_service(sink, &config.telemetry) {
            Ok(traces) => traces,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(2);
            }
        },
        false => {
            let _ = telemetry::init(sink);
            None
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => match check(&config) {
            Ok(checked) => serve(config, checked).await,
            Err(e) => return refuse(&e),
        },
        Command::Migrate => migrate(config).await,
        Command::CheckConfig { probe } => match check(&config) {
            Ok(_) => {
                print!("{}", config.to_redacted_toml());
                if probe {
                    return probe_providers(&config).await;
                }
                Ok(())
            }
            Err(e) => return refuse(&e),
        },
        Command::Probe => probe(&config).await,
        Command::Keys(command) => keys(config, command).await,
    };
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let chain = switchyard::error::cause_chain(e.as_ref());
            tracing::error!(error = %chain, "exiting");
            eprintln!("error: {chain}");
            ExitCode::FAILURE
        }
    }
}

/// What `serve` checks before it starts (`check-config` runs exactly this): the
/// configuration's values, its tool servers and its providers. Warnings go to stderr.
fn check(config: &Config) -> Result<Checked, ConfigError> {
    let checked = Checked::new(config, Vec::new())?;
    for warning in &checked.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(checked)
}

/// Says every problem of a configuration on stderr, one a line, and exits with 2.
fn refuse(error: &ConfigError) -> ExitCode {
    for warning in error.warnings() {
        eprintln!("warning: {warning}");
    }
    for problem in error.problems() {
        eprintln!("error: {problem}");
    }
    ExitCode::from(2)
}

async fn serve(config: Config, checked: Checked) -> anyhow::Result<()> {
    tracing::info!(
        database = %redact_url(&config.database.url),
        providers = config.providers().len(),
        "starting"
    );
    Application::build_checked(config, checked)
        .await?
        .run_until(shutdown_signal())
        .await
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    let store = open_database(&config, 1).await?;
    store.ping().await?;
    println!("{}: {}", redact_url(&config.database.url), store.schema());
    Ok(())
}

async fn keys(config: Config, command: KeysCommand) -> anyhow::Result<()> {
    refuse_new_sqlite_file(&config.database.url)?;
    let store = open_database(&config, 1).await?;
    match command {
        KeysCommand::Create {
            tenant,
            name,
            tool_servers,
            deny_tools,
            models,
            requests_per_minute,
            max_concurrent_runs,
        } => {
            anyhow::ensure!(
                !tenant.is_empty() && !name.is_empty(),
                "--tenant and --name must not be empty"
            );
            let policy = KeyPolicy {
                tool_servers,
                denied_tools: deny_tools,
                models,
                requests_per_minute,
                max_concurrent_runs,
            };
            let (key, secret) = auth::create_key(&*store, &tenant, &name, &policy).await?;
            eprintln!(
                "created {} for tenant {:?} ({:?}); its secret is below, shown only this once",
                key.id, key.tenant_id, key.name
            );
            println!("{secret}");
        }
        KeysCommand::List { tenant } => {
            println!(
                "{:<38} {:<16} {:<16} {:<14} {:<8} policy",
                "id", "tenant", "name", "prefix", "status"
            );
            for key in store.list_keys(tenant.as_deref()).await? {
                let status = if key.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                println!(
                    "{:<38} {:<16} {:<16} {:<14} {:<8} {}",
                    key.id, key.tenant_id, key.name, key.prefix, status, key.policy
                );
            }
        }
        KeysCommand::Revoke { id } => {
            let revoked = store
                .revoke_key(&id, switchyard::time::UnixMillis::now())
                .await?;
            anyhow::ensure!(revoked, "no active key with id {id:?}");
            println!("revoked {id}");
        }
        KeysCommand::Usage { tenant } => {
            println!(
                "{:<10} {:<16} {:<38} {:<20} {:>6} {:>12} {:>12} {:>12}",
                "day", "tenant", "key", "model", "runs", "input", "cached", "output"
            );
            for row in store.usage(tenant.as_deref()).await? {
                println!(
                    "{:<10} {:<16} {:<38} {:<20} {:>6} {:>12} {:>12} {:>12}",
                    row.day,
                    row.tenant_id,
                    row.key_id,
                    row.model,
                    row.runs,
                    row.input_tokens,
                    row.cached_tokens,
                    row.output_tokens
                );
            }
        }
    }
    Ok(())
}

/// `keys` works on the server's database: run without its settings (another folder, another
/// `--config`, no `SWITCHYARD__DATABASE__URL`), it would make a new empty SQLite file whose
/// keys no server reads. Making the database is `migrate`'s (or `serve`'s) to do.
fn refuse_new_sqlite_file(url: &str) -> anyhow::Result<()> {
    if !url.starts_with("sqlite:") {
        return Ok(());
    }
    let Some(file) = switchyard::store::sqlite::database_file(url)? else {
        return Ok(());
    };
    if file.exists() {
        return Ok(());
    }
    let shown = std::path::absolute(&file).unwrap_or(file);
    anyhow::bail!(
        "there is no database at {} (database.url = {:?}): `switchyard keys` works on the \
         server's database and does not make a new one. Give it the server's database settings \
         (the same --config file or SWITCHYARD__DATABASE__URL, from the same folder when the \
         path is relative), or make the database first with `switchyard migrate`",
        shown.display(),
        redact_url(url)
    )
}

/// Probes every provider as `serve` does at start, one line each on stderr (the
/// configuration is on stdout); 1 when one cannot serve requests as configured.
async fn probe_providers(config: &Config) -> ExitCode {
    let probes = switchyard::llm::probe::probe_all(&config.providers()).await;
    for probe in &probes {
        eprintln!("{}", probe.line());
    }
    match probes.iter().any(|probe| probe.failed()) {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
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
