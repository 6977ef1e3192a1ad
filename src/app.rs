//! The application: built from a configuration, bound to a listener (port 0 works in tests),
//! served until a shutdown signal, then stopped in a fixed order.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::api::{AppState, router};
use crate::auth::Authenticator;
use crate::config::{AuthMode, Config, ConfigError, Findings, ServerConfig};
use crate::engine::hub::{EventHub, HubWriter};
use crate::engine::{Engine, EngineSettings};
use crate::llm::ModelRouter;
use crate::llm::probe::Probes;
use crate::store::{self, Backend, sqlite::InstanceLock};
use crate::tools::ToolHandler;
use crate::tools::mcp::McpServers;
use crate::tools::registry::{RegistryError, ToolRegistry};

/// After the runs stop, how long open connections get to finish their last bytes.
const CONNECTION_DRAIN: Duration = Duration::from_secs(5);

pub struct Application {
    listener: TcpListener,
    connections: ConnectionLimits,
    /// Set as shutdown begins (`/readyz` answers 503).
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// How long requests are still served once `/readyz` answers 503.
    drain_delay: Duration,
    addr: SocketAddr,
    engine: Engine,
    tools: Arc<ToolRegistry>,
    /// The MCP servers' connections (and the commands started for them).
    mcp: McpServers,
    /// The providers' probes at start, still waiting for an answer.
    probes: Probes,
    writer: HubWriter,
    router: axum::Router,
    grace: Duration,
    /// This instance's claim on an SQLite file, let go when it has stopped.
    _lock: Option<InstanceLock>,
}

/// What `serve` makes of a configuration before it touches the database or the network: the
/// configuration validated, its tool registry (schemas, header variables) and its model
/// router. `check-config` builds the same, so the two cannot disagree about a configuration.
pub struct Checked {
    registry: Arc<ToolRegistry>,
    models: ModelRouter,
    /// Problems that do not stop the service; the caller shows them.
    pub warnings: Vec<String>,
}

impl Checked {
    /// Validates `config` and builds what it describes, with `tools` (handlers compiled into
    /// an embedding program, each with its tool server label) added; every problem found,
    /// one per line, when it cannot be used.
    pub fn new(
        config: &Config,
        tools: Vec<(String, Arc<dyn ToolHandler>)>,
    ) -> Result<Checked, ConfigError> {
        let Findings {
            mut errors,
            warnings,
        } = config.validate();
        let validated = errors.is_empty();
        let registry = match ToolRegistry::from_config_with(config, tools) {
            Ok(registry) => Some(registry),
            Err(found) => {
                // A tool the validation refused cannot be built either: said once is enough.
                let found = found
                    .into_iter()
                    .filter(|e| validated || !matches!(e, RegistryError::HttpTool { .. }));
                errors.extend(found.map(|e| e.to_string()));
                None
            }
        };
        let models = match ModelRouter::from_config(config) {
            Ok(models) => Some(models),
            Err(e) => {
                errors.push(format!("llm: {e}"));
                None
            }
        };
        match (registry, models) {
            (Some(registry), Some(models)) if errors.is_empty() => Ok(Checked {
                registry: Arc::new(registry),
                models,
                warnings,
            }),
            _ => Err(ConfigError::Invalid { errors, warnings }),
        }
    }
}

/// Opens the configured database (applying migrations); an error says which database and
/// why (`Connection refused`), its password hidden.
pub async fn open_database(
    config: &Config,
    max_connections: u32,
) -> anyhow::Result<Arc<dyn store::RunStore>> {
    store::connect(&config.database.url, max_connections)
        .await
        .with_context(|| {
            format!(
                "cannot open the database at {}",
                redact_url(&config.database.url)
            )
        })
}

impl Application {
    /// Checks the configuration ([`Checked`]), opens the database (applying migrations),
    /// recovers runs left behind by a previous process, and binds the listener.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        Application::build_with_tools(config, Vec::new()).await
    }

    /// As [`Application::build`], with extra compiled-in tool handlers, each with its tool
    /// server label (`builtin` or a new one).
    pub async fn build_with_tools(
        config: Config,
        tools: Vec<(String, Arc<dyn ToolHandler>)>,
    ) -> anyhow::Result<Application> {
        let checked = Checked::new(&config, tools)?;
        Application::build_checked(config, checked).await
    }

    /// As [`Application::build`], for a configuration [`Checked`] already.
    pub async fn build_checked(config: Config, checked: Checked) -> anyhow::Result<Application> {
        let Checked {
            registry, models, ..
        } = checked;
        // One instance serves an SQLite file: a second one stops here, saying why.
        let lock = match config.database.url.starts_with("sqlite:") {
            true => InstanceLock::acquire(&config.database.url)?,
            false => None,
        };
        let store = open_database(&config, config.database.max_connections).await?;
        tracing::info!(schema = %store.schema(), "database ready");
        if crate::metrics::install().is_none() {
            tracing::warn!("another metrics recorder is installed: /metrics answers 503");
        }
        crate::metrics::register_models(models.models());
        let instance_id = uuid::Uuid::now_v7().simple().to_string();
        let (hub, writer) = EventHub::start(
            store.clone(),
            instance_id.clone(),
            config.runs.event_batch_max,
        );
        let settings = engine_settings(&config, instance_id);
        let engine = Engine::new(store.clone(), hub, models, registry.clone(), settings);
        // One process serves an SQLite file (it holds the lock), so whatever it finds
        // running was left by a previous process.
        let everything = store.backend() == Backend::Sqlite;
        // With MCP servers, the runs left behind are taken over once the servers have listed
        // their tools (in the background, after the listener is bound), so that they go on
        // with those tools; without, at once.
        let left = match config.mcp_servers.is_empty() {
            true => {
                let recovered = engine.recover_abandoned(everything).await?;
                if recovered > 0 {
                    tracing::warn!(
                        runs = recovered,
                        "took over runs left unfinished by a previous process"
                    );
                }
                None
            }
            false => Some(engine.abandoned(everything).await?),
        };
        engine.start_maintenance();

        let address = format!("{}:{}", config.server.host, config.server.port);
        let listener = TcpListener::bind(&address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let addr = listener.local_addr()?;
        // Connecting to MCP servers and listing their tools happens in the background: a
        // slow or absent server does not hold up the start.
        let mcp = McpServers::start(&config, registry.clone());
        // Each provider is asked for its model list, in the background too: a wrong base_url
        // or key is a warning in the log at start, not a surprise at the first request.
        let probed = match config.llm.probe_at_start {
            true => config.providers(),
            false => Vec::new(),
        };
        let probes = Probes::start(probed);
        if let Some((ids, now)) = left.filter(|(ids, _)| !ids.is_empty()) {
            engine.recover_after_discovery(ids, now);
        }
        let stopping: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let state = app_state(&config, &engine, store, stopping.clone());
        Ok(Application {
            listener,
            connections: ConnectionLimits::new(&config.server),
            stopping,
            addr,
            engine,
            tools: registry,
            mcp,
            probes,
            writer,
            router: router(state),
            grace: Duration::from_secs(config.server.shutdown_grace_seconds),
            drain_delay: Duration::from_millis(config.server.drain_delay_ms),
            _lock: lock,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tool registry (MCP servers' tools appear in it as they are discovered).
    pub fn tools(&self) -> Arc<ToolRegistry> {
        self.tools.clone()
    }

    /// Serves until `signal` resolves, then shuts down:
    /// 1. answer `/readyz` with 503, serve as before for the drain delay (a load balancer
    ///    polling readiness stops routing here), then stop accepting connections;
    /// 2. let running runs finish within the grace period, then hand the rest over;
    /// 3. give open connections a moment to send their last events;
    /// 4. disconnect from the MCP servers, stopping the commands started for them, and stop
    ///    the providers' probes still waiting;
    /// 5. drain the event writer so every emitted event is stored.
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(address = %self.addr, "listening");
        let stop_accepting = CancellationToken::new();
        let mut server = tokio::spawn(serve_http(
            self.listener,
            self.router,
            self.connections,
            stop_accepting.clone(),
        ));

        tokio::select! {
            _ = signal => {}
            result = &mut server => {
                // The server stopped by itself: that is an error worth surfacing.
                result??;
                anyhow::bail!("the HTTP server stopped unexpectedly");
            }
        }
        tracing::info!(
            drain_delay_ms = self.drain_delay.as_millis(),
            grace_seconds = self.grace.as_secs(),
            "shutting down"
        );
        // Not ready from now on: a load balancer stops sending new requests here.
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(self.drain_delay).await;
        stop_accepting.cancel();
        self.engine.shutdown(self.grace).await;
        if tokio::time::timeout(CONNECTION_DRAIN, &mut server)
            .await
            .is_err()
        {
            tracing::warn!("closing connections still open after the runs stopped");
            server.abort();
        }
        self.mcp.shutdown().await;
        self.probes.shutdown().await;
        let hub: EventHub = self.engine.hub().clone();
        drop(self.engine);
        self.writer.finish(hub).await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// What every handler shares.
fn app_state(
    config: &Config,
    engine: &Engine,
    store: Arc<dyn store::RunStore>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
) -> AppState {
    AppState {
        engine: engine.clone(),
        auth: Arc::new(authenticator(config, store)),
        body_timeout: Duration::from_secs(config.server.body_read_timeout_seconds.max(1)),
        stopping,
        body_limit: config.server.body_limit_bytes,
        ui: config.ui.clone(),
        heartbeat: Duration::from_secs(config.server.heartbeat_seconds.max(1)),
    }
}

/// The engine's settings from `[runs]`, `[tools]` and `[limits]`, with floors on the intervals
/// and on `max_background`, where zero cannot work (`tokio::time::interval` panics on a zero
/// period).
fn engine_settings(config: &Config, instance_id: String) -> EngineSettings {
    EngineSettings {
        instance_id,
        lease_ttl: Duration::from_millis(config.runs.lease_ttl_ms),
        tools: config.tools.clone(),
        requires_action_ttl: Duration::from_millis(config.runs.requires_action_ttl_ms),
        sweep_interval: Duration::from_millis(config.runs.sweep_interval_ms.max(10)),
        max_background: config.runs.max_background.max(1),
        claim_interval: Duration::from_millis(config.runs.claim_interval_ms.max(10)),
        retention: Duration::from_secs(config.runs.retention_hours.saturating_mul(3600)),
        idempotency_ttl: Duration::from_secs(
            config.runs.idempotency_ttl_hours.saturating_mul(3600),
        ),
        limits: config.limits.clone(),
        seal: Arc::new(reasoning_seal(config)),
    }
}

/// The seal of `[reasoning]`, saying when the process had to make its own key.
fn reasoning_seal(config: &Config) -> crate::seal::ReasoningSeal {
    let (seal, warning) = crate::seal::ReasoningSeal::from_config(&config.reasoning);
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
    seal
}

/// Who may call the API: the keys in `store`, or anyone with `auth.mode = "open"`, which is
/// warned about at every start because it is meant for local use only.
fn authenticator(config: &Config, store: Arc<dyn store::RunStore>) -> Authenticator {
    let open = config.auth.mode == AuthMode::Open;
    if open {
        tracing::warn!(
            "auth.mode = \"open\": requests need no API key and all share one tenant; for local use only"
        );
    }
    Authenticator::new(store, open)
}

/// Serves HTTP/1.1 on `listener` until `stop_accepting` is cancelled, then lets open
/// connections finish their current response and returns. Dropping the future closes every
/// connection at once.
///
/// Its own accept loop rather than `axum::serve`, for what an open stream costs: `axum::serve`
/// rebuilds the router's route table for every connection (≈ 4.6 KiB each), and hyper's
/// default reads from a connection while its response streams, to notice the client leaving,
/// which keeps a second read buffer (16 KiB) per open stream. With half-close allowed, a client
/// that leaves is noticed at the next write instead: the next event or the heartbeat.
async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    stop_accepting: CancellationToken,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .half_close(true)
        .header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    // Tells open connections to finish their current response and close.
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the limit, new connections wait in the listen queue.
        let slot = tokio::select! {
            _ = stop_accepting.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            _ = stop_accepting.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            // The client gave up before it was accepted: nothing to wait for.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                // Out of file descriptors, say: the connections that are open still need
                // serving, so wait a moment instead of stopping or spinning.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Every event leaves at once instead of waiting for a delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        // The peer's address, for the access line (`ConnectInfo`, as axum's own `serve` does).
        let service = router.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        );
        let service = TowerToHyperService::new(service);
        // With upgrades: `GET /v1/responses` may become a WebSocket.
        let connection = http
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades();
        let closing = closing.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                _ = closing.cancelled() => {
                    // Finish the response under way, then close (an upgraded socket is the
                    // handler's, which the run's own shutdown ends).
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    closing.cancel();
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// What one connection may take of the server.
#[derive(Clone, Copy)]
struct ConnectionLimits {
    header_read_timeout: Duration,
    max_connections: usize,
}

impl ConnectionLimits {
    /// The limits `[server]` sets (a header read timeout of at least a second).
    fn new(server: &ServerConfig) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(server.header_read_timeout_seconds.max(1)),
            max_connections: server.max_connections,
        }
    }
}

/// A database URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    crate::redact::url(url)
}
