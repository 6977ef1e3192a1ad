//! The engine: creates runs, executes them on tracked tasks (not tied to any HTTP connection),
//! and answers questions about them. It knows nothing of axum; the api layer maps
//! [`EngineError`] to HTTP.
//!
//! Its rooms: `create` (new runs), `launch` (where every execution of a run starts: a new run
//! prepared from its request, or a stored one loaded and resumed), `chain` (what a
//! continuation inherits), `replay` (items a client replays), `pause` (`submit_tool_outputs`,
//! continuations, expiry), `recovery` (completing the log of a run whose instance stopped,
//! then taking it over), `cancel`, `lifecycle` (every ending), `maintenance` (leases, sweeps,
//! claiming queued runs, shutdown), `run/` (one run's execution), `hub` and `follow` (the
//! event log, stored then published), `control` (stopping a run).

mod cancel;
mod chain;
mod compact;
pub mod control;
mod conversations;
mod create;
pub mod emitter;
mod error;
mod executor;
mod follow;
pub mod hub;
mod launch;
mod lifecycle;
mod maintenance;
mod pause;
mod recovery;
mod replay;
mod request_servers;
mod run;
mod toolset;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ToolsConfig;
use crate::llm::ModelRouter;
use crate::protocol::events::EventRecord;
use crate::protocol::field::FieldError;
use crate::protocol::items::Item;
use crate::protocol::limits::RequestLimits;
use crate::protocol::response::ResponseObject;
pub use crate::store::{DEFAULT_TENANT, IdempotencyKey};
use crate::store::{Order, RunFilter, RunState, RunStore, StoreError, StoredRun};
use crate::tools::registry::ToolRegistry;
pub use chain::SocketMemory;
use control::LiveRuns;
pub use error::{Cause, EngineError, UpstreamFailure, UpstreamFailureKind};
use hub::EventHub;

/// How far chains of `previous_response_id` are followed.
const MAX_CHAIN_DEPTH: usize = 1000;

/// How a run ended, for a client waiting without a stream.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub response: ResponseObject,
    pub end: RunEnd,
}

#[derive(Clone, Debug)]
pub enum RunEnd {
    /// It stopped, or paused for the client.
    Stopped,
    /// The upstream model failed it.
    UpstreamFailed(UpstreamFailure),
    /// This instance let go of it (it is stopping) or lost it: another instance continues
    /// it, and `GET /v1/responses/{id}` follows it there.
    ContinuesElsewhere,
}

/// A run that has started.
pub struct StartedRun {
    pub id: String,
    /// Its events from the first, when the client asked for a stream.
    pub events: Option<EventStream>,
    /// Resolves when the run stops.
    pub outcome: oneshot::Receiver<RunOutcome>,
    /// The answer without waiting (a queued background run).
    pub immediate: Option<ResponseObject>,
}

pub type EventStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<Arc<EventRecord>, EngineError>> + Send>>;

/// The most events of one run the inspector reads (a long text run has one per delta).
pub const INSPECTED_EVENTS: usize = 20_000;

/// One run as the run inspector shows it.
#[derive(Debug)]
pub struct Inspection {
    pub run: StoredRun,
    /// Its stored event log, in order.
    pub events: Vec<EventRecord>,
    pub input: Vec<Item>,
}

/// A page of a run's input items.
#[derive(Clone, Debug)]
pub struct ItemPage {
    pub limit: u32,
    pub descending: bool,
    /// The id of the item the page starts after.
    pub after: Option<String>,
}

impl ItemPage {
    fn order(&self) -> Order {
        match self.descending {
            true => Order::Descending,
            false => Order::Ascending,
        }
    }
}

#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// This process's identity as a lease holder.
    pub instance_id: String,
    /// How long a lease holds without renewal.
    pub lease_ttl: Duration,
    /// Tool execution limits and policies.
    pub tools: ToolsConfig,
    /// How long a run waits in `requires_action` before it expires.
    pub requires_action_ttl: Duration,
    /// How often leases are renewed and overdue runs swept.
    pub sweep_interval: Duration,
    /// Background runs executed here at once.
    pub max_background: usize,
    /// How often queued runs are looked for.
    pub claim_interval: Duration,
    /// How long stopped runs are kept.
    pub retention: Duration,
    /// How long an idempotency key holds.
    pub idempotency_ttl: Duration,
    /// What one request may ask for.
    pub limits: RequestLimits,
    /// Seals reasoning given to clients in `encrypted_content`, and opens it again.
    pub seal: Arc<crate::seal::ReasoningSeal>,
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn RunStore>,
    hub: EventHub,
    models: ModelRouter,
    registry: Arc<ToolRegistry>,
    settings: EngineSettings,
    /// Run tasks; waited for at shutdown.
    runs: TaskTracker,
    /// Cancelled at the very end: background maintenance stops.
    stop_maintenance: CancellationToken,
    maintenance: TaskTracker,
    /// Runs executing in this process.
    live: LiveRuns,
    /// Wakes this instance's claimer when it queues a background run.
    queued: tokio::sync::Notify,
    /// Slots for background runs executing here.
    background_slots: Arc<tokio::sync::Semaphore>,
    /// Runs executing here per API key, for their concurrent-run limits.
    key_runs: Arc<usage::KeyRuns>,
    /// Token usage not yet written.
    usage: Arc<usage::UsageMeter>,
    /// When the database was last pinged because it could not be reached.
    last_probe: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Engine {
    pub fn new(
        store: Arc<dyn RunStore>,
        hub: EventHub,
        models: ModelRouter,
        registry: Arc<ToolRegistry>,
        settings: EngineSettings,
    ) -> Engine {
        let slots = settings.max_background.max(1);
        Engine {
            inner: Arc::new(Inner {
                store,
                hub,
                models,
                registry,
                settings,
                runs: TaskTracker::new(),
                stop_maintenance: CancellationToken::new(),
                maintenance: TaskTracker::new(),
                live: LiveRuns::default(),
                queued: tokio::sync::Notify::new(),
                background_slots: Arc::new(tokio::sync::Semaphore::new(slots)),
                key_runs: Arc::default(),
                usage: Arc::default(),
                last_probe: std::sync::Mutex::new(None),
            }),
        }
    }

    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// The MCP servers this instance is not ready without yet
    /// ([`ToolRegistry::awaited`](crate::tools::registry::ToolRegistry::awaited)).
    pub fn mcp_servers_awaited(&self) -> Vec<&str> {
        let bound = std::time::Duration::from_millis(self.inner.settings.tools.mcp_ready_wait_ms);
        self.inner.registry.awaited(bound)
    }

    /// The hub, so the application can drain it after shutdown.
    pub fn hub(&self) -> &EventHub {
        &self.inner.hub
    }

    /// `(model, provider)` pairs this service routes.
    pub fn models(&self) -> &[(String, String)] {
        self.inner.models.models()
    }

    /// A 503 at once while the database cannot be reached (rather than a request that waits
    /// for it to time out); at most once a second, a quick ping finds whether it is back.
    async fn check_database(&self) -> Result<(), EngineError> {
        if !self.inner.hub.database_unreachable() {
            return Ok(());
        }
        let probe = {
            let mut last = self
                .inner
                .last_probe
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if probe
            && let Ok(Ok(())) =
                tokio::time::timeout(Duration::from_secs(1), self.inner.store.ping()).await
        {
            self.inner.hub.database_reachable();
            return Ok(());
        }
        Err(EngineError::Unavailable(StoreError::unavailable(
            "the database cannot be reached",
        )))
    }

    /// Samples the gauges that are read rather than kept: runs executing here, and stored
    /// runs by state (within a second; left as they were when the database does not answer).
    pub async fn sample_metrics(&self) {
        crate::metrics::runs_executing(self.inner.live.count());
        let counted =
            tokio::time::timeout(Duration::from_secs(1), self.inner.store.count_unfinished()).await;
        match counted {
            Ok(Ok(counts)) => {
                for state in [
                    RunState::Queued,
                    RunState::InProgress,
                    RunState::RequiresAction,
                ] {
                    let count = counts
                        .iter()
                        .find_map(|(s, n)| (*s == state).then_some(*n))
                        .unwrap_or(0);
                    crate::metrics::stored_runs(state.as_str(), count);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot count the stored runs for metrics"),
            Err(_) => tracing::warn!(
                "cannot count the stored runs for metrics: no answer within a second"
            ),
        }
    }

    fn holder(&self) -> &str {
        &self.inner.settings.instance_id
    }

    pub async fn get(&self, tenant_id: &str, id: &str) -> Result<ResponseObject, EngineError> {
        let run = self.get_run(tenant_id, id).await?;
        // A `store: false` run that stopped is being deleted: it is gone already.
        if !run.body.store && run.state.is_final() {
            return Err(EngineError::NotFound(id.to_string()));
        }
        Ok(run.body)
    }

    /// Everything the run inspector shows of one run: the run, its stored event log (up to
    /// [`INSPECTED_EVENTS`]) and its input items.
    pub async fn inspect(&self, tenant_id: &str, id: &str) -> Result<Inspection, EngineError> {
        let run = self.get_run(tenant_id, id).await?;
        if !run.body.store && run.state.is_final() {
            return Err(EngineError::NotFound(id.to_string()));
        }
        let store = &self.inner.store;
        let mut events = Vec::new();
        loop {
            let after = events.last().map(|e: &EventRecord| e.sequence_number);
            let page = store.events_after(id, after, 2_000).await?;
            let done = page.len() < 2_000;
            events.extend(page);
            if done || events.len() >= INSPECTED_EVENTS {
                break;
            }
        }
        let input = store.input_items(tenant_id, id).await?;
        Ok(Inspection { run, events, input })
    }

    /// Up to `limit` of the tenant's responses (`GET /v1/responses`), newest first, after the
    /// one with id `after`, and whether more follow.
    pub async fn list(
        &self,
        tenant_id: &str,
        filter: &RunFilter,
        limit: u32,
        after: Option<&str>,
    ) -> Result<(Vec<StoredRun>, bool), EngineError> {
        Ok(self
            .inner
            .store
            .list_runs(tenant_id, filter, limit, after)
            .await?)
    }

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, EngineError> {
        match self.inner.store.get_run(tenant_id, id).await {
            Ok(run) => Ok(run),
            Err(StoreError::NotFound) => Err(EngineError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// The run's stored events after `after`, then live ones while it runs.
    pub async fn follow(
        &self,
        tenant_id: &str,
        id: &str,
        after: Option<u64>,
    ) -> Result<EventStream, EngineError> {
        self.get_run(tenant_id, id).await?;
        Ok(events(self.inner.hub.follow(Arc::from(id), after)))
    }

    pub async fn delete(&self, tenant_id: &str, id: &str) -> Result<(), EngineError> {
        match self.inner.store.delete_run(tenant_id, id).await {
            Ok(()) => Ok(()),
            Err(StoreError::NotFound) => Err(EngineError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn input_items(
        &self,
        tenant_id: &str,
        id: &str,
        page: &ItemPage,
    ) -> Result<(Vec<Item>, bool), EngineError> {
        self.get_run(tenant_id, id).await?;
        let listed = self
            .inner
            .store
            .list_input_items(
                tenant_id,
                id,
                page.limit,
                page.order(),
                page.after.as_deref(),
            )
            .await;
        match listed {
            Ok(found) => Ok(found),
            Err(StoreError::NotFound) => Err(FieldError::new(
                "after",
                format!(
                    "Invalid 'after': no input item with id '{}' in this response.",
                    page.after.as_deref().unwrap_or_default()
                ),
            )
            .into()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A stream of stored events as the api sees it.
fn events(
    stream: impl Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send + 'static,
) -> EventStream {
    Box::pin(stream.map(|event| event.map_err(EngineError::from)))
}
