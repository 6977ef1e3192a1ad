//! The engine: creates runs, executes them on tracked tasks (not tied to any HTTP connection),
//! and answers questions about them. It knows nothing of axum; the api layer maps
//! [`EngineError`] to HTTP.

pub mod emitter;
mod executor;
pub mod hub;
mod pause;
mod recovery;
mod run;
pub mod state;
mod toolset;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::panic::AssertUnwindSafe;

use futures_util::{FutureExt, Stream};
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ToolsConfig;
use crate::llm::{LlmError, ModelRouter};
use crate::protocol::ids;
use crate::protocol::items::{Item, ItemStatus};
use crate::protocol::request::{CreateResponse, FieldError};
use crate::protocol::response::{ResponseError, ResponseObject, ResponseStatus};
use crate::protocol::tools::{parse_tool_choice, parse_tools};
use crate::protocol::transcript::Entry;
use crate::store::{
    EventRecord, IdempotencyKey, ItemPage, NewRun, RunState, RunStore, StoreError, StoredRun,
};
use crate::tools::registry::ToolRegistry;
use emitter::EventEmitter;
use hub::{EventHub, LiveChannel};
use toolset::ToolSet;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How far chains of `previous_response_id` are followed.
const MAX_CHAIN_DEPTH: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{}", .0.message)]
    Invalid(FieldError, Option<&'static str>),
    #[error("response {0} not found")]
    NotFound(String),
    #[error("the service is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<FieldError> for EngineError {
    fn from(e: FieldError) -> EngineError {
        EngineError::Invalid(e, None)
    }
}

/// How a run ended, for a client waiting without a stream.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub response: ResponseObject,
    /// The upstream failure that ended the run, if that is how it ended.
    pub upstream_failure: Option<LlmError>,
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
    std::pin::Pin<Box<dyn Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send>>;

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
    /// Cancelled when the grace period is over: running runs stop and fail.
    stop_runs: CancellationToken,
    /// Cancelled at the very end: background maintenance stops.
    stop_maintenance: CancellationToken,
    maintenance: TaskTracker,
    /// Runs executing in this process, for cancel.
    live: std::sync::Mutex<HashMap<String, LiveRun>>,
    /// Wakes this instance's claimer when it queues a background run.
    queued: tokio::sync::Notify,
    /// Slots for background runs executing here.
    background_slots: Arc<tokio::sync::Semaphore>,
}

/// A run executing here: how to cancel it and how to see that it stopped.
struct LiveRun {
    cancelled: Arc<AtomicBool>,
    stop: CancellationToken,
    stopped: watch::Receiver<bool>,
}

impl Engine {
    pub fn new(
        store: Arc<dyn RunStore>,
        hub: EventHub,
        models: ModelRouter,
        registry: Arc<ToolRegistry>,
        settings: EngineSettings,
    ) -> Engine {
        let settings_slots = settings.max_background.max(1);
        Engine {
            inner: Arc::new(Inner {
                store,
                hub,
                models,
                registry,
                settings,
                runs: TaskTracker::new(),
                stop_runs: CancellationToken::new(),
                stop_maintenance: CancellationToken::new(),
                maintenance: TaskTracker::new(),
                live: std::sync::Mutex::new(HashMap::new()),
                queued: tokio::sync::Notify::new(),
                background_slots: Arc::new(tokio::sync::Semaphore::new(settings_slots)),
            }),
        }
    }

    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// `(model, provider)` pairs this service routes.
    pub fn models(&self) -> &[(String, String)] {
        self.inner.models.models()
    }

    /// Validates the request, stores the run and starts executing it.
    pub async fn create(
        &self,
        tenant_id: &str,
        request: CreateResponse,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        if self.inner.runs.is_closed() {
            return Err(EngineError::ShuttingDown);
        }
        let stream = request.stream == Some(true);
        if let Some(key) = &idempotency
            && let Some(existing) = self.idempotent_run(tenant_id, key, stream).await?
        {
            return Ok(existing);
        }
        request.validate()?;
        let input = request.input_items()?;
        if input.is_empty() && request.previous_response_id.is_none() {
            return Err(FieldError::new("input", "Missing required parameter: 'input'.").into());
        }
        let (history, previous) = match &request.previous_response_id {
            Some(previous) => {
                let (history, run) = self.chain(tenant_id, previous).await?;
                (history, Some(run))
            }
            None => (Vec::new(), None),
        };
        let prepared = self.prepare(
            &request,
            &announced(history.iter().filter_map(Entry::item).chain(&input)),
        )?;
        let waiting = previous
            .as_ref()
            .filter(|p| p.state == RunState::RequiresAction)
            .map(|p| pause::pending_approvals(&p.body))
            .unwrap_or_default();
        pause::check_outputs_match_calls(&history, &input, &waiting)?;
        let mut decisions = Vec::new();
        if let Some(previous) = previous
            && previous.state == RunState::RequiresAction
        {
            // The standard continuation answers the paused run's calls (SPEC §9).
            decisions = self.complete_by_continuation(previous, &input).await?;
        }

        let id = ids::new(ids::RESPONSE);
        let body = initial_body(&id, &prepared.model, &request);
        if request.background == Some(true) {
            return self
                .enqueue(tenant_id, body, input, stream, idempotency)
                .await;
        }
        let now = now_ms();
        let run = NewRun {
            tenant_id: tenant_id.to_string(),
            state: RunState::InProgress,
            body: body.clone(),
            input_items: input.clone(),
            lease_owner: Some(self.inner.settings.instance_id.clone()),
            lease_expires_at: Some(now + self.inner.settings.lease_ttl.as_millis() as i64),
            now_ms: now,
            initial_events: Vec::new(),
            idempotency: idempotency.clone(),
        };
        let response_id: Arc<str> = Arc::from(id.as_str());
        let live = self.inner.hub.open(&response_id);
        let queued = if run.idempotency.is_none() {
            // Committed with the event writer's next batch, together with other runs; the
            // run starts meanwhile (see `run::Admission`).
            self.inner.hub.queue_insert(run).await.map(Some)
        } else {
            self.inner.store.insert_run(&run).await.map(|()| None)
        };
        let queued = match queued {
            Ok(queued) => queued,
            Err(e) => {
                live.close().await;
                // A concurrent retry with the same key got there first: answer with its run.
                if let (StoreError::KeyTaken, Some(key)) = (&e, &idempotency)
                    && let Some(existing) = self.idempotent_run(tenant_id, key, stream).await?
                {
                    return Ok(existing);
                }
                return Err(e.into());
            }
        };
        let (admission, admitted) = match queued {
            Some(inserted) => {
                let (report, admitted) = oneshot::channel();
                (Some(run::Admission { inserted, report }), Some(admitted))
            }
            None => (None, None),
        };
        let mut context = history;
        context.extend(input.into_iter().map(Entry::Item));
        let launch = Launch {
            tenant_id: tenant_id.to_string(),
            body,
            context,
            transcript: Vec::new(),
            next_sequence: 0,
            resumed: false,
            stream: request.stream == Some(true),
            decisions,
            prior_usage: None,
            admission,
        };
        let started = self.launch(prepared, launch);
        if let Some(admitted) = admitted {
            // The run's task reports whether its insert committed (it stops if not).
            admitted.await.unwrap_or_else(|_| {
                Err(StoreError::Database(
                    "the run stopped before it was stored".into(),
                ))
            })?;
        }
        Ok(started)
    }

    /// Everything a run needs from its request: the model's client, the resolved tools, the
    /// per-turn model request and the limits. Shared by new and resumed runs.
    fn prepare(
        &self,
        request: &CreateResponse,
        announced: &HashSet<&str>,
    ) -> Result<Prepared, EngineError> {
        let model = match request.model.as_deref() {
            Some(model) if !model.is_empty() => model.to_string(),
            _ => {
                return Err(
                    FieldError::new("model", "Missing required parameter: 'model'.").into(),
                );
            }
        };
        let Some(client) = self.inner.models.route(&model) else {
            return Err(EngineError::Invalid(
                FieldError::new(
                    "model",
                    format!("The model '{model}' does not exist or you do not have access to it."),
                ),
                Some("model_not_found"),
            ));
        };
        let declarations = parse_tools(request.tools.as_deref().unwrap_or_default())?;
        let choice = request
            .tool_choice
            .as_ref()
            .map(parse_tool_choice)
            .transpose()?;
        let tools = ToolSet::resolve(&self.inner.registry, &declarations, choice.as_ref())?;
        // A tool server is announced the first time it is used in a chain.
        let listings = tools
            .listings
            .iter()
            .filter(|(label, _)| !announced.contains(label.as_str()))
            .cloned()
            .collect();
        let mut model_request = run::model_request(&model, request);
        model_request.tools = tools.specs();
        if !model_request.tools.is_empty() {
            model_request.tool_choice = tools.choice.clone();
        }
        let limits = run::RunLimits {
            max_turns: self.inner.settings.tools.max_turns,
            max_concurrency: self.inner.settings.tools.max_concurrency,
            on_error: self.inner.settings.tools.on_error,
            max_tool_calls: request.max_tool_calls,
            parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
            pause_ttl: self.inner.settings.requires_action_ttl,
        };
        Ok(Prepared {
            model,
            client,
            tools,
            listings,
            model_request,
            limits,
        })
    }

    /// Starts a run's task; the run is already stored as `in_progress` under this instance.
    fn launch(&self, prepared: Prepared, launch: Launch) -> StartedRun {
        let id = launch.body.id.clone();
        let response_id: Arc<str> = Arc::from(id.as_str());
        let live = self.inner.hub.open(&response_id);
        let events = launch
            .stream
            .then(|| match launch.next_sequence.checked_sub(1) {
                None => Box::pin(self.inner.hub.follow_new(response_id.clone())) as EventStream,
                after => Box::pin(self.inner.hub.follow(response_id.clone(), after)) as EventStream,
            });
        let (done, outcome) = oneshot::channel();
        let stop = self.inner.stop_runs.child_token();
        let cancelled = Arc::new(AtomicBool::new(false));
        let (stopped_tx, stopped) = watch::channel(false);
        self.live().insert(
            id.clone(),
            LiveRun {
                cancelled: cancelled.clone(),
                stop: stop.clone(),
                stopped,
            },
        );
        let tool_calls_used = launch
            .transcript
            .iter()
            .filter(|entry| matches!(entry, Entry::Item(Item::McpCall(_))))
            .count() as u64;
        let task = run::RunTask {
            store: self.inner.store.clone(),
            live: live.clone(),
            emitter: EventEmitter::new(
                self.inner.hub.clone(),
                response_id.clone(),
                Arc::from(launch.tenant_id.as_str()),
                launch.next_sequence,
            ),
            client: prepared.client,
            request: prepared.model_request,
            context: launch.context,
            usage: launch.prior_usage.clone().unwrap_or_default(),
            body: launch.body,
            transcript: launch.transcript,
            tools: prepared.tools,
            listings: prepared.listings,
            limits: prepared.limits,
            tenant_id: launch.tenant_id.clone(),
            stop,
            done: Some(done),
            tool_calls_used,
            cancelled,
            resumed: launch.resumed,
            pending: Vec::new(),
            pending_approvals: Vec::new(),
            decisions: launch.decisions,
            owner: self.inner.settings.instance_id.clone(),
            lost: false,
            admission: launch.admission,
        };
        let engine = self.clone();
        let tenant = launch.tenant_id;
        // Boxed: an async block keeps a future it captures and awaits twice (as the captured
        // value and as the awaited state); a box makes the second copy a pointer.
        let execution = Box::pin(AssertUnwindSafe(Box::new(task).execute()).catch_unwind());
        let fut = async move {
            // A bug must not leave the run in progress for ever: fail it and close its log.
            if execution.await.is_err() {
                Box::pin(engine.after_panic(&tenant, &response_id, &live)).await;
            }
            engine.live().remove(&*response_id);
            let _ = stopped_tx.send(true);
        };
        self.inner.runs.spawn(fut);
        StartedRun {
            id,
            events,
            outcome,
            immediate: None,
        }
    }

    /// After a run task panicked: fails the run and closes its log.
    async fn after_panic(&self, tenant: &str, response_id: &str, live: &LiveChannel) {
        tracing::error!(response_id = %response_id, "the run task panicked");
        if let Ok(run) = self.inner.store.get_run(tenant, response_id).await
            && !run.state.is_final()
        {
            self.abandon(run, "The run stopped because of an internal error.")
                .await;
        }
        live.close().await;
    }

    /// Stores a background run as `queued` with its first events, and wakes the claimer.
    async fn enqueue(
        &self,
        tenant_id: &str,
        mut body: ResponseObject,
        input: Vec<Item>,
        stream: bool,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        body.status = ResponseStatus::Queued;
        let response_id: Arc<str> = Arc::from(body.id.as_str());
        let mut emitter = EventEmitter::new(
            self.inner.hub.clone(),
            response_id.clone(),
            Arc::from(tenant_id),
            0,
        );
        let created = crate::protocol::events::Event::Created {
            response: Box::new(body.clone()),
        };
        let queued = crate::protocol::events::Event::Queued {
            response: Box::new(body.clone()),
        };
        let run = NewRun {
            tenant_id: tenant_id.to_string(),
            state: RunState::Queued,
            body: body.clone(),
            input_items: input,
            lease_owner: None,
            lease_expires_at: None,
            now_ms: now_ms(),
            // With the run: a claimer anywhere continues the log after them.
            initial_events: vec![emitter.record(&created), emitter.record(&queued)],
            idempotency,
        };
        match self.inner.store.insert_run(&run).await {
            Ok(()) => {}
            Err(StoreError::KeyTaken) => {
                if let Some(key) = &run.idempotency
                    && let Some(existing) = self.idempotent_run(tenant_id, key, stream).await?
                {
                    return Ok(existing);
                }
                return Err(StoreError::KeyTaken.into());
            }
            Err(e) => return Err(e.into()),
        }
        self.inner.queued.notify_one();
        let events =
            stream.then(|| Box::pin(self.inner.hub.follow(response_id, None)) as EventStream);
        let (_, outcome) = oneshot::channel();
        Ok(StartedRun {
            id: body.id.clone(),
            events,
            outcome,
            immediate: Some(body),
        })
    }

    /// The run an earlier request with this `Idempotency-Key` created: the same run again
    /// (streamed from its first event, or once it stops), a 400 when the body differs, or
    /// `None` when the key is unknown or expired.
    async fn idempotent_run(
        &self,
        tenant_id: &str,
        key: &IdempotencyKey,
        stream: bool,
    ) -> Result<Option<StartedRun>, EngineError> {
        let Some(found) = self
            .inner
            .store
            .find_idempotent(tenant_id, &key.key)
            .await?
        else {
            return Ok(None);
        };
        let ttl = self.inner.settings.idempotency_ttl.as_millis() as i64;
        if found.created_at < now_ms() - ttl {
            // Expired: forget it so the key can be used afresh.
            self.inner.store.prune(0, now_ms() - ttl).await?;
            return Ok(None);
        }
        if found.request_hash != key.request_hash {
            return Err(EngineError::Invalid(
                FieldError::new(
                    "",
                    format!(
                        "The Idempotency-Key '{}' was already used with a different request body.",
                        key.key
                    ),
                ),
                Some("idempotency_key_reused"),
            ));
        }
        let id = found.response_id;
        let response_id: Arc<str> = Arc::from(id.as_str());
        let (_, outcome) = oneshot::channel();
        if stream {
            let events = Box::pin(self.inner.hub.follow(response_id, None)) as EventStream;
            return Ok(Some(StartedRun {
                id,
                events: Some(events),
                outcome,
                immediate: None,
            }));
        }
        // Running: answer when it stops, as the first request will.
        let events = self.inner.hub.follow(response_id, None);
        let mut events = std::pin::pin!(events);
        while let Some(event) = futures_util::StreamExt::next(&mut events).await {
            event?;
        }
        let body = match self.get_run(tenant_id, &id).await {
            Ok(run) => run.body,
            Err(EngineError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(StartedRun {
            id,
            events: None,
            outcome,
            immediate: Some(body),
        }))
    }

    /// Takes queued runs from the database while this instance has free slots.
    async fn claim(&self) -> Result<(), EngineError> {
        loop {
            let free = self.inner.background_slots.available_permits();
            if free == 0 {
                return Ok(());
            }
            let settings = &self.inner.settings;
            let now = now_ms();
            let claimed = self
                .inner
                .store
                .claim_queued(
                    &settings.instance_id,
                    now + settings.lease_ttl.as_millis() as i64,
                    now,
                    free as u32,
                )
                .await?;
            if claimed.is_empty() {
                return Ok(());
            }
            for run in claimed {
                let Ok(permit) = self.inner.background_slots.clone().try_acquire_owned() else {
                    break;
                };
                let id = run.body.id.clone();
                if let Err(e) = self.start_claimed(run, permit).await {
                    tracing::error!(response_id = %id, error = %e, "cannot start a claimed run");
                }
            }
        }
    }

    /// Starts a run this instance claimed: its context comes from the database.
    async fn start_claimed(
        &self,
        run: StoredRun,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), EngineError> {
        let mut body = run.body.clone();
        body.status = ResponseStatus::InProgress;
        let id = body.id.clone();
        let tenant_id = run.tenant_id.clone();
        self.inner
            .store
            .checkpoint(
                &id,
                &self.inner.settings.instance_id,
                &body,
                &run.transcript,
                now_ms(),
            )
            .await?;
        let input = self.inner.store.input_items(&tenant_id, &id).await?;
        let seen: Vec<Entry> = input.iter().cloned().map(Entry::Item).collect();
        let (prepared, history) = match self.prepare_stored(&tenant_id, &body, &seen).await {
            Ok(prepared) => prepared,
            Err(e) => {
                // The configuration changed since it was queued (a model or tool server is gone).
                self.abandon(
                    StoredRun {
                        state: RunState::InProgress,
                        body,
                        ..run
                    },
                    &format!("The run cannot start: {e}"),
                )
                .await;
                return Ok(());
            }
        };
        let next_sequence = self
            .inner
            .store
            .last_sequence_number(&id)
            .await?
            .map_or(0, |n| n + 1);
        let mut context = history;
        context.extend(input.into_iter().map(Entry::Item));
        let launch = Launch {
            tenant_id,
            body,
            context,
            transcript: run.transcript,
            next_sequence,
            resumed: true,
            stream: false,
            decisions: Vec::new(),
            prior_usage: None,
            admission: None,
        };
        let started = self.launch(prepared, launch);
        // The slot is free again when the run stops.
        self.inner.maintenance.spawn(async move {
            let _ = started.outcome.await;
            drop(permit);
        });
        Ok(())
    }

    /// What a stored run needs to continue: its request rebuilt from the stored body, then
    /// prepared as at creation, and its chain's history. `seen` are items of the run itself
    /// (a server already announced in them is not announced again).
    async fn prepare_stored(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
        seen: &[Entry],
    ) -> Result<(Prepared, Vec<Entry>), EngineError> {
        let request = pause::request_from_body(body);
        let history = self.history_of(tenant_id, body).await?;
        let items = history.iter().chain(seen).filter_map(Entry::item);
        let prepared = self.prepare(&request, &announced(items))?;
        Ok((prepared, history))
    }

    /// The history a stored run continues: its chain, or nothing if an ancestor is gone.
    pub(super) async fn history_of(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
    ) -> Result<Vec<Entry>, EngineError> {
        match &body.previous_response_id {
            Some(previous) => match self.chain(tenant_id, previous).await {
                Ok((history, _)) => Ok(history),
                Err(EngineError::Invalid(..)) => Ok(Vec::new()),
                Err(e) => Err(e),
            },
            None => Ok(Vec::new()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The model context a continuation inherits: every earlier input and output along the
    /// chain, oldest first. Instructions are not inherited (SPEC §9).
    async fn chain(
        &self,
        tenant_id: &str,
        previous: &str,
    ) -> Result<(Vec<Entry>, StoredRun), EngineError> {
        let not_found = || {
            EngineError::Invalid(
                FieldError::new(
                    "previous_response_id",
                    format!("Previous response with id '{previous}' not found."),
                ),
                Some("previous_response_not_found"),
            )
        };
        let first = match self.inner.store.get_run(tenant_id, previous).await {
            Ok(run) => run,
            Err(StoreError::NotFound) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        if matches!(first.state, RunState::Queued | RunState::InProgress) {
            return Err(FieldError::new(
                "previous_response_id",
                format!("Previous response with id '{previous}' is still in progress."),
            )
            .into());
        }
        let mut segments: Vec<Vec<Entry>> = Vec::new();
        let previous_run = first.clone();
        let mut current = Some(first);
        while let Some(run) = current.take() {
            if segments.len() >= MAX_CHAIN_DEPTH {
                return Err(FieldError::new(
                    "previous_response_id",
                    format!("The chain of previous responses is longer than {MAX_CHAIN_DEPTH}."),
                )
                .into());
            }
            let mut segment: Vec<Entry> = self
                .inner
                .store
                .input_items(tenant_id, &run.body.id)
                .await?
                .into_iter()
                .map(Entry::Item)
                .collect();
            // What the model saw, hidden tool calls included (runs stored before the
            // transcript existed have only their output).
            if run.transcript.is_empty() {
                segment.extend(run.body.output.iter().cloned().map(Entry::Item));
            } else {
                segment.extend(run.transcript.iter().cloned());
            }
            segments.push(segment);
            if let Some(parent) = &run.body.previous_response_id {
                current = match self.inner.store.get_run(tenant_id, parent).await {
                    Ok(run) => Some(run),
                    // A deleted ancestor ends the chain; what remains is still usable.
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                };
            }
        }
        Ok((segments.into_iter().rev().flatten().collect(), previous_run))
    }

    pub async fn get(&self, tenant_id: &str, id: &str) -> Result<ResponseObject, EngineError> {
        Ok(self.get_run(tenant_id, id).await?.body)
    }

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, EngineError> {
        match self.inner.store.get_run(tenant_id, id).await {
            Ok(run) => Ok(run),
            Err(StoreError::NotFound) => Err(EngineError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// The run's stored events after `after`, then live ones while it runs here.
    pub async fn follow(
        &self,
        tenant_id: &str,
        id: &str,
        after: Option<u64>,
    ) -> Result<EventStream, EngineError> {
        self.get_run(tenant_id, id).await?;
        Ok(Box::pin(self.inner.hub.follow(Arc::from(id), after)))
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
        match self.inner.store.list_input_items(tenant_id, id, page).await {
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

    /// Takes over runs whose instance is gone (their lease ran out): on start, and then
    /// periodically. With `all`, every running run not held by this instance counts (one
    /// process owns an SQLite file). A run that cannot be continued is failed.
    pub async fn recover_abandoned(&self, all: bool) -> Result<usize, EngineError> {
        let now = if all { i64::MAX } else { now_ms() };
        let settings = &self.inner.settings;
        let stale = self
            .inner
            .store
            .stale_runs(now, &settings.instance_id)
            .await?;
        let mut taken = 0;
        for run in stale {
            let until = now_ms() + settings.lease_ttl.as_millis() as i64;
            let id = run.body.id.clone();
            // Several instances may find it; one claims it.
            if !self
                .inner
                .store
                .claim_stale(&id, &settings.instance_id, until, now)
                .await?
            {
                continue;
            }
            taken += 1;
            if let Err(e) = self.take_over(run.clone()).await {
                tracing::error!(response_id = %id, error = %e, "cannot take over a run; failing it");
                self.abandon(
                    run,
                    "The run was interrupted: the instance executing it stopped.",
                )
                .await;
            }
        }
        Ok(taken)
    }

    /// Ends a run nobody executes any more: its open items are closed `incomplete`, its log
    /// gets `error` and `response.failed`, and its state becomes `failed`.
    async fn abandon(&self, run: StoredRun, message: &str) {
        let mut body = run.body.clone();
        for item in &mut body.output {
            close_incomplete(item);
        }
        body.status = ResponseStatus::Failed;
        body.error = Some(ResponseError {
            code: "server_error".into(),
            message: message.into(),
        });
        let events = vec![
            run::error_event("server_error", message),
            crate::protocol::events::Event::Failed {
                response: Box::new(body.clone()),
            },
        ];
        match self
            .end_stored_run(&run, RunState::Failed, &body, events)
            .await
        {
            Ok(()) => tracing::warn!(response_id = %body.id, "failed an abandoned run"),
            // Another instance got there first, or the run moved on: nothing to do.
            Err(e @ (StoreError::Conflict { .. } | StoreError::NotFound)) => {
                tracing::info!(response_id = %body.id, error = %e, "abandoned run not failed")
            }
            Err(e) => {
                tracing::error!(response_id = %body.id, error = %e, "cannot fail an abandoned run")
            }
        }
    }

    /// Starts lease renewal, the sweeps for abandoned and expired runs, the listener for
    /// events appended by other instances, and the store's upkeep.
    pub fn start_maintenance(&self) {
        let hub = self.inner.hub.clone();
        let stop = self.inner.stop_maintenance.clone();
        self.inner
            .maintenance
            .spawn(async move { hub.listen(stop).await });
        let store = self.inner.store.clone();
        let stop = self.inner.stop_maintenance.clone();
        self.inner
            .maintenance
            .spawn(async move { store.upkeep(stop).await });
        let engine = self.clone();
        let stop = self.inner.stop_runs.clone();
        self.inner.maintenance.spawn(async move {
            let interval = engine.inner.settings.claim_interval;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = engine.inner.queued.notified() => {}
                    _ = tokio::time::sleep(interval) => {}
                }
                // No new runs once shutting down.
                if engine.inner.runs.is_closed() {
                    break;
                }
                if let Err(e) = engine.claim().await {
                    tracing::warn!(error = %e, "claiming queued runs failed");
                }
            }
        });
        let engine = self.clone();
        let period = self.inner.settings.sweep_interval;
        let stop = self.inner.stop_maintenance.clone();
        self.inner.maintenance.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let settings = &engine.inner.settings;
                let until = now_ms() + settings.lease_ttl.as_millis() as i64;
                if let Err(e) = engine
                    .inner
                    .store
                    .renew_leases(&settings.instance_id, until)
                    .await
                {
                    tracing::warn!(error = %e, "lease renewal failed");
                }
                if let Err(e) = engine.recover_abandoned(false).await {
                    tracing::warn!(error = %e, "sweep for abandoned runs failed");
                }
                if let Err(e) = engine.expire_overdue().await {
                    tracing::warn!(error = %e, "sweep for expired runs failed");
                }
                let retention = settings.retention.as_millis() as i64;
                let keys = settings.idempotency_ttl.as_millis() as i64;
                match engine
                    .inner
                    .store
                    .prune(now_ms() - retention, now_ms() - keys)
                    .await
                {
                    Ok((0, 0)) => {}
                    Ok((runs, keys)) => {
                        tracing::info!(runs, keys, "pruned past the retention windows")
                    }
                    Err(e) => tracing::warn!(error = %e, "pruning failed"),
                }
            }
        });
    }

    /// Graceful stop: no new runs; running ones get `grace` to finish, then are cancelled
    /// and failed; anything still unfinished under this instance's lease is failed last.
    pub async fn shutdown(&self, grace: Duration) {
        let inner = &self.inner;
        inner.runs.close();
        if tokio::time::timeout(grace, inner.runs.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = inner.runs.len(),
                "grace period over; cancelling the remaining runs"
            );
            inner.stop_runs.cancel();
            if tokio::time::timeout(Duration::from_secs(10), inner.runs.wait())
                .await
                .is_err()
            {
                tracing::error!("runs did not stop after cancellation");
            }
        }
        inner.stop_maintenance.cancel();
        inner.maintenance.close();
        inner.maintenance.wait().await;
        let states = [RunState::Queued, RunState::InProgress];
        match inner
            .store
            .runs_owned_by(&inner.settings.instance_id, &states)
            .await
        {
            Ok(left) => {
                for run in left {
                    self.abandon(run, "The run was stopped because the service shut down.")
                        .await;
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot check for unfinished runs at shutdown"),
        }
    }

    /// The hub, so the application can drain it after shutdown.
    pub fn hub(&self) -> &EventHub {
        &self.inner.hub
    }
}

/// Tool servers already announced (`mcp_list_tools`) among these items.
fn announced<'a>(items: impl Iterator<Item = &'a Item>) -> HashSet<&'a str> {
    items
        .filter_map(|item| match item {
            Item::McpListTools(listing) => Some(listing.server_label.as_str()),
            _ => None,
        })
        .collect()
}

/// Marks an item that was still open as `incomplete`.
pub(crate) fn close_incomplete(item: &mut Item) {
    let status = item.status_mut();
    if *status == Some(ItemStatus::InProgress) {
        *status = Some(ItemStatus::Incomplete);
    }
}

/// The Response object as the run starts: every setting echoed, nothing produced yet.
fn initial_body(id: &str, model: &str, request: &CreateResponse) -> ResponseObject {
    let mut text = match &request.text {
        Some(Value::Object(object)) => object.clone(),
        _ => Map::new(),
    };
    text.entry("format")
        .or_insert_with(|| json!({"type": "text"}));
    ResponseObject {
        id: id.to_string(),
        object: "response".into(),
        created_at: now_ms() / 1000,
        completed_at: None,
        status: ResponseStatus::InProgress,
        error: None,
        incomplete_details: None,
        instructions: request.instructions.clone(),
        model: model.to_string(),
        output: Vec::new(),
        parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
        previous_response_id: request.previous_response_id.clone(),
        tools: request.tools.clone().unwrap_or_default(),
        tool_choice: request.tool_choice.clone().unwrap_or_else(|| json!("auto")),
        truncation: request
            .truncation
            .clone()
            .unwrap_or_else(|| "disabled".into()),
        text: Value::Object(text),
        reasoning: request
            .reasoning
            .clone()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"effort": null, "summary": null})),
        temperature: request.temperature,
        top_p: request.top_p,
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        top_logprobs: Some(request.top_logprobs.unwrap_or(0)),
        max_output_tokens: request.max_output_tokens,
        max_tool_calls: request.max_tool_calls,
        store: request.store.unwrap_or(true),
        background: request.background.unwrap_or(false),
        service_tier: Some(
            request
                .service_tier
                .clone()
                .unwrap_or_else(|| "default".into()),
        ),
        metadata: request.metadata.clone().unwrap_or_default(),
        safety_identifier: request.safety_identifier.clone(),
        prompt_cache_key: request.prompt_cache_key.clone(),
        user: request.user.clone(),
        usage: None,
        required_action: None,
    }
}

/// What `prepare` resolves from a request.
struct Prepared {
    model: String,
    client: Arc<dyn crate::llm::LlmClient>,
    tools: ToolSet,
    listings: Vec<(String, Vec<crate::protocol::items::McpToolInfo>)>,
    model_request: crate::llm::ModelRequest,
    limits: run::RunLimits,
}

/// Where a run starts from: new, or resumed from the database.
struct Launch {
    tenant_id: String,
    body: ResponseObject,
    /// The chain's history and this run's input items.
    context: Vec<Entry>,
    transcript: Vec<Entry>,
    next_sequence: u64,
    resumed: bool,
    stream: bool,
    /// Approval answers to act on before the first model turn.
    decisions: Vec<run::Decision>,
    /// Usage of the run's earlier activations (before a pause).
    prior_usage: Option<crate::protocol::response::Usage>,
    /// A new run whose insert is being committed.
    admission: Option<run::Admission>,
}
