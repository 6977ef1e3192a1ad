//! New runs: validated, resolved against the configuration (`prepare`), stored, and started
//! on a task of their own (`launch`, which every execution of a run goes through); background
//! runs are queued instead; a retried request with the same `Idempotency-Key` gets its run.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::{FutureExt, StreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::control::{RunControl, StopReason};
use super::emitter::{EventEmitter, record};
use super::lifecycle::{Ending, StoredEnd, end_stored};
use super::run::{self, Admission, Decision, Model, Output, Place, RunTask, Start, Tools, Waits};
use super::toolset::{Listing, ToolSet};
use super::{Engine, EngineError, EventStream, SocketMemory, StartedRun, announced, events, pause};
use crate::auth::{Caller, KeyPolicy};
use crate::llm::{LlmClient, ModelRequest};
use crate::protocol::events::Event;
use crate::protocol::ids;
use crate::protocol::items::Item;
use crate::protocol::request::{CreateResponse, FieldError};
use crate::protocol::response::{
    DEFAULT_PENALTY, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, ResponseObject, ResponseStatus, Usage,
};
use crate::protocol::tools::{
    ToolDecl, check_tool_limits, echo_tools, parse_tool_choice, parse_tools, parse_tools_at,
};
use crate::protocol::transcript::Entry;
use crate::store::{IdempotencyKey, NewRun, RunState, StoreError};
use crate::time::UnixMillis;

/// What `prepare` resolves from a request.
pub(super) struct Prepared {
    pub model: String,
    pub client: Arc<dyn LlmClient>,
    pub tools: ToolSet,
    /// Tool servers to announce with `mcp_list_tools` (first use in the chain).
    pub listings: Vec<Listing>,
    pub model_request: ModelRequest,
    pub limits: run::RunLimits,
}

/// Where a run starts from: new, or continued from the database.
pub(super) struct Launch {
    pub tenant_id: String,
    pub body: ResponseObject,
    /// The chain's history and this run's input items.
    pub context: Vec<Entry>,
    pub transcript: Vec<Entry>,
    pub next_sequence: u64,
    pub resumed: bool,
    pub stream: bool,
    /// Approval answers to act on before the first model turn.
    pub decisions: Vec<Decision>,
    /// Usage of the run's earlier activations (before a pause).
    pub prior_usage: Option<Usage>,
    /// A new run whose insert is being committed.
    pub admission: Option<Admission>,
    /// A client asked to cancel the run while nobody executed it: it stops at once.
    pub cancel_requested: bool,
    /// The API key that created it.
    pub key_id: Option<String>,
}

impl Engine {
    /// Validates the request, stores the run and starts executing it.
    pub async fn create(
        &self,
        caller: &Caller,
        request: CreateResponse,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        self.create_in(caller, request, idempotency, None).await
    }

    /// Creates a response on a WebSocket connection, which remembers its most recent
    /// `store: false` response so that the next one can continue it.
    pub async fn create_on_socket(
        &self,
        caller: &Caller,
        request: CreateResponse,
        memory: &mut SocketMemory,
    ) -> Result<StartedRun, EngineError> {
        self.create_in(caller, request, None, Some(memory)).await
    }

    async fn create_in(
        &self,
        caller: &Caller,
        request: CreateResponse,
        idempotency: Option<IdempotencyKey>,
        memory: Option<&mut SocketMemory>,
    ) -> Result<StartedRun, EngineError> {
        let tenant_id = caller.tenant_id.as_str();
        if self.inner.runs.is_closed() {
            return Err(EngineError::ShuttingDown);
        }
        self.check_database().await?;
        let stream = request.stream == Some(true);
        if let Some(key) = &idempotency
            && let Some(existing) = self.idempotent_run(tenant_id, key, stream).await?
        {
            return Ok(existing);
        }
        request.validate(&self.inner.settings.limits)?;
        let resolved = self
            .resolve_input(tenant_id, request.input_entries()?)
            .await?;
        if resolved.items.is_empty() && request.previous_response_id.is_none() {
            return Err(FieldError::new("input", "Missing required parameter: 'input'.").into());
        }
        let remembered = request
            .previous_response_id
            .as_deref()
            .and_then(|id| memory.as_deref()?.context_of(id));
        let (history, previous) = match (&request.previous_response_id, remembered) {
            // The socket remembers it (it may not be stored): the context from memory, and the
            // stored run, if it is one (a paused run this request answers).
            (Some(previous), Some(context)) => (
                context.to_vec(),
                self.inner.store.get_run(tenant_id, previous).await.ok(),
            ),
            (Some(previous), None) => {
                let (history, run) = self.chain(tenant_id, previous).await?;
                (history, Some(run))
            }
            (None, _) => (Vec::new(), None),
        };
        let prepared = self
            .prepare(
                &request,
                &resolved.items,
                &announced(
                    history
                        .iter()
                        .filter_map(Entry::item)
                        .chain(&resolved.items),
                ),
                caller.policy(),
            )
            .await?;
        // The paused runs this request answers: the previous one, or those a replayed history
        // answers (SPEC §9).
        let replayed = previous.is_none();
        let paused = match previous {
            Some(previous) if previous.state == RunState::RequiresAction => vec![previous],
            Some(_) => Vec::new(),
            None => self.paused_by_replay(tenant_id, &resolved).await?,
        };
        let waiting: Vec<_> = paused
            .iter()
            .flat_map(|p| pause::pending_approvals(&p.body))
            .collect();
        // A replayed approval answer whose request was decided before is history: it never
        // runs the call again.
        let decided = |id: &str| {
            replayed
                && (resolved.knows_approval_request(id)
                    || resolved
                        .items
                        .iter()
                        .any(|item| matches!(item, Item::McpApprovalRequest(r) if r.id == id)))
        };
        pause::check_outputs_match_calls(&history, &resolved.items, &waiting, &decided)?;
        let input = resolved.items;
        let mut decisions = Vec::new();
        for run in paused {
            // The continuation answers the paused run's calls (SPEC §9).
            let param = if replayed {
                "input"
            } else {
                "previous_response_id"
            };
            decisions.extend(self.complete_by_continuation(run, &input, param).await?);
        }

        let id = ids::new(ids::RESPONSE);
        let body = initial_body(&id, &prepared.model, &request);
        if request.background == Some(true) {
            return self.enqueue(caller, body, input, stream, idempotency).await;
        }
        let mut context = history;
        context.extend(input.iter().cloned().map(Entry::Item));
        if let Some(memory) = memory {
            memory.started(&id, &context);
        }
        let launch = Launch {
            tenant_id: tenant_id.to_string(),
            body,
            context,
            transcript: Vec::new(),
            next_sequence: 0,
            resumed: false,
            stream,
            decisions,
            prior_usage: None,
            admission: None,
            cancel_requested: false,
            key_id: caller.key_id().map(str::to_string),
        };
        self.check_concurrency(caller)?;
        self.start_new(prepared, launch, input, idempotency).await
    }

    /// Stores a new run and starts it. Without an idempotency key its insert goes with the
    /// event writer's next batch, and the run starts meanwhile (see `run::Admission`).
    async fn start_new(
        &self,
        prepared: Prepared,
        mut launch: Launch,
        input: Vec<Item>,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        let now = UnixMillis::now();
        let tenant_id = launch.tenant_id.clone();
        let run = NewRun {
            tenant_id: tenant_id.clone(),
            state: RunState::InProgress,
            body: launch.body.clone(),
            input_items: input,
            lease: Some(self.lease(now)),
            now,
            initial_events: Vec::new(),
            idempotency: idempotency.clone(),
            key_id: launch.key_id.clone(),
        };
        let queued = match &run.idempotency {
            None => self.inner.hub.queue_insert(run).await.map(Some),
            Some(_) => self.inner.store.insert_run(&run).await.map(|()| None),
        };
        let queued = match queued {
            Ok(queued) => queued,
            // A concurrent retry with the same key got there first: answer with its run.
            Err(StoreError::KeyTaken) if idempotency.is_some() => {
                let key = idempotency.as_ref().ok_or(StoreError::KeyTaken)?;
                return match self.idempotent_run(&tenant_id, key, launch.stream).await? {
                    Some(existing) => Ok(existing),
                    None => Err(StoreError::KeyTaken.into()),
                };
            }
            Err(e) => return Err(e.into()),
        };
        let Some(inserted) = queued else {
            return Ok(self.launch(prepared, launch));
        };
        let (report, admitted) = oneshot::channel();
        launch.admission = Some(Admission { inserted, report });
        let started = self.launch(prepared, launch);
        // The run's task reports whether its insert committed (it stops if not).
        admitted.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the run stopped before it was stored".into(),
            ))
        })?;
        Ok(started)
    }

    /// Everything a run needs from its request: the model's client, the resolved tools, the
    /// per-turn model request and the limits. Shared by new and resumed runs. Tool servers
    /// already `announced` in the chain are not announced again.
    pub(super) async fn prepare(
        &self,
        request: &CreateResponse,
        input: &[Item],
        announced: &std::collections::HashSet<&str>,
        policy: Option<&KeyPolicy>,
    ) -> Result<Prepared, EngineError> {
        let model = match request.model.as_deref() {
            Some(model) if !model.is_empty() => model.to_string(),
            _ => {
                return Err(
                    FieldError::new("model", "Missing required parameter: 'model'.").into(),
                );
            }
        };
        let allowed = policy.is_none_or(|p| p.allows_model(&model));
        let Some(client) = self.inner.models.route(&model).filter(|_| allowed) else {
            return Err(EngineError::Invalid(
                FieldError::new(
                    "model",
                    format!("The model '{model}' does not exist or you do not have access to it."),
                ),
                Some("model_not_found"),
            ));
        };
        let mut declared: Vec<(String, ToolDecl)> =
            parse_tools(request.tools.as_deref().unwrap_or_default())?
                .into_iter()
                .enumerate()
                .map(|(index, decl)| (format!("tools[{index}]"), decl))
                .collect();
        // Tools an input item declares (`additional_tools`) join the request's.
        for (index, item) in input.iter().enumerate() {
            if let Item::AdditionalTools(more) = item {
                let path = format!("input[{index}].tools");
                let parsed = parse_tools_at(&more.tools, &path)?;
                declared.extend(
                    parsed
                        .into_iter()
                        .enumerate()
                        .map(|(n, decl)| (format!("{path}[{n}]"), decl)),
                );
            }
        }
        check_tool_limits(&declared, &self.inner.settings.limits)?;
        let choice = request
            .tool_choice
            .as_ref()
            .map(parse_tool_choice)
            .transpose()?;
        let named = self.request_servers(&declared, policy).await?;
        let declarations: Vec<ToolDecl> = declared.into_iter().map(|(_, decl)| decl).collect();
        let tools = ToolSet::resolve(
            &self.inner.registry,
            named,
            &declarations,
            choice.as_ref(),
            policy,
        )?;
        let listings = tools
            .listings
            .iter()
            .filter(|listing| !announced.contains(listing.server_label.as_str()))
            .cloned()
            .collect();
        let mut model_request = run::model_request(&model, request);
        model_request.tools = tools.specs();
        if !model_request.tools.is_empty() {
            model_request.tool_choice = tools.choice.clone();
        }
        let settings = &self.inner.settings;
        let limits = run::RunLimits {
            max_turns: settings.tools.max_turns,
            max_concurrency: settings.tools.max_concurrency,
            on_error: settings.tools.on_error,
            max_tool_calls: request.max_tool_calls,
            parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
            pause_ttl: settings.requires_action_ttl,
            max_output_bytes: settings.limits.max_tool_output_bytes,
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

    /// Starts a run's task; the run is stored (or being stored) as `in_progress` under this
    /// instance's lease. Every execution of a run starts here.
    pub(super) fn launch(&self, prepared: Prepared, launch: Launch) -> StartedRun {
        let id = launch.body.id.clone();
        let response_id: Arc<str> = Arc::from(id.as_str());
        let control = Arc::new(RunControl::default());
        if launch.cancel_requested {
            control.stop(StopReason::Cancel);
        }
        let live = self.inner.hub.open(&response_id, control.clone());
        let events = launch
            .stream
            .then(|| match launch.next_sequence.checked_sub(1) {
                None => events(self.inner.hub.follow_new(response_id.clone())),
                after => events(self.inner.hub.follow(response_id.clone(), after)),
            });
        let (done, outcome) = oneshot::channel();
        let stopped = self.inner.live.add(&id, control.clone());
        let tenant_id: Arc<str> = Arc::from(launch.tenant_id.as_str());
        let place = Place {
            store: self.inner.store.clone(),
            tenant_id: launch.tenant_id.clone(),
            holder: self.holder().to_string(),
            live: live.clone(),
            control,
            key_id: launch.key_id.clone(),
            usage: self.inner.usage.clone(),
        };
        // Counted against its key's concurrent runs while it executes here.
        let key_run = launch
            .key_id
            .as_deref()
            .map(|key| super::usage::KeyRuns::enter(&self.inner.key_runs, key));
        let task = self.task(prepared, launch, place, done);
        let engine = self.clone();
        // Boxed: an async block keeps a future it captures and awaits twice (as the captured
        // value and as the awaited state); a box makes the second copy a pointer.
        let execution = Box::pin(AssertUnwindSafe(Box::new(task).execute()).catch_unwind());
        let span = tracing::info_span!("run", response_id = %id);
        let run = async move {
            // A bug must not leave the run in progress for ever: fail it and close its log.
            if execution.await.is_err() {
                Box::pin(engine.after_panic(&tenant_id, &response_id)).await;
                live.close().await;
            }
            engine.inner.live.remove(&response_id);
            drop(key_run);
            let _ = stopped.send(true);
        };
        self.inner.runs.spawn(run.instrument(span));
        StartedRun {
            id,
            events,
            outcome,
            immediate: None,
        }
    }

    /// A run's task, from what it was prepared and launched with.
    fn task(
        &self,
        prepared: Prepared,
        launch: Launch,
        place: Place,
        done: oneshot::Sender<super::RunOutcome>,
    ) -> RunTask {
        let calls_used = launch
            .transcript
            .iter()
            .filter(|entry| matches!(entry, Entry::Item(Item::McpCall(_))))
            .count() as u64;
        let emitter = EventEmitter::new(
            self.inner.hub.clone(),
            Arc::from(launch.body.id.as_str()),
            Arc::from(launch.tenant_id.as_str()),
            launch.next_sequence,
        );
        RunTask {
            out: Output {
                emitter,
                body: launch.body,
                transcript: launch.transcript,
            },
            model: Model {
                client: prepared.client,
                request: prepared.model_request,
                context: launch.context,
                prior: launch.prior_usage.clone().unwrap_or_default(),
                usage: launch.prior_usage.unwrap_or_default(),
            },
            tools: Tools {
                set: prepared.tools,
                limits: prepared.limits,
                calls_used,
            },
            waits: Waits {
                decisions: launch.decisions,
                ..Waits::default()
            },
            place,
            start: Start {
                resumed: launch.resumed,
                listings: prepared.listings,
                admission: launch.admission,
                awaiting_first_token: None,
            },
            done: Some(done),
        }
    }

    /// After a run task panicked: fails the run, after its last stored event.
    async fn after_panic(&self, tenant_id: &str, id: &str) {
        tracing::error!("the run task panicked");
        let Ok(mut run) = self.inner.store.get_run(tenant_id, id).await else {
            return;
        };
        if run.state != RunState::InProgress {
            return;
        }
        let ending = Ending::Abandoned("The run stopped because of an internal error.".into());
        let end = StoredEnd {
            tenant_id,
            from: run.state,
            body: &mut run.body,
            transcript: None,
        };
        if let Err(e) = end_stored(&*self.inner.store, self.holder(), end, &ending).await {
            tracing::error!(error = %e, "cannot fail a run whose task panicked");
        }
    }

    /// Stores a background run as `queued` with its first events, and wakes the claimer.
    async fn enqueue(
        &self,
        caller: &Caller,
        mut body: ResponseObject,
        input: Vec<Item>,
        stream: bool,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        let tenant_id = caller.tenant_id.as_str();
        body.status = ResponseStatus::Queued;
        let response_id: Arc<str> = Arc::from(body.id.as_str());
        let tenant: Arc<str> = Arc::from(tenant_id);
        let created = Event::Created {
            response: Box::new(body.clone()),
        };
        let queued = Event::Queued {
            response: Box::new(body.clone()),
        };
        let run = NewRun {
            tenant_id: tenant_id.to_string(),
            state: RunState::Queued,
            body: body.clone(),
            input_items: input,
            lease: None,
            now: UnixMillis::now(),
            // With the run: a claimer anywhere continues the log after them.
            initial_events: vec![
                record(&created, &response_id, &tenant, 0),
                record(&queued, &response_id, &tenant, 1),
            ],
            idempotency,
            key_id: caller.key_id().map(str::to_string),
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
        let events = stream.then(|| events(self.inner.hub.follow(response_id, None)));
        let (_, outcome) = oneshot::channel();
        Ok(StartedRun {
            id: body.id.clone(),
            events,
            outcome,
            immediate: Some(body),
        })
    }

    /// The run an earlier request with this `Idempotency-Key` created: the same run again
    /// (streamed from its first event, or once it stops), a 400 when the body differs or the
    /// run is gone, or `None` when the key is unknown or expired.
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
        let ttl = self.inner.settings.idempotency_ttl;
        let now = UnixMillis::now();
        if found.created_at < now.minus(ttl) {
            // Expired: forget it so the key can be used afresh.
            self.inner
                .store
                .prune(UnixMillis::from_millis(0), now.minus(ttl))
                .await?;
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
        // The run may be gone while its key is kept: deleted by the client, or a
        // `store: false` run that stopped. It cannot be answered again, and running the
        // request anew would break the key's promise that the model is asked once.
        let gone = || {
            EngineError::Invalid(
                FieldError::new(
                    "Idempotency-Key",
                    format!(
                        "The response {id} made with the Idempotency-Key '{}' no longer exists; send the request with a new key.",
                        key.key
                    ),
                ),
                Some("idempotency_key_reused"),
            )
        };
        let response_id: Arc<str> = Arc::from(id.as_str());
        let (_, outcome) = oneshot::channel();
        if stream {
            if self.inner.store.state_of(&id).await?.is_none() {
                return Err(gone());
            }
            let events: EventStream = events(self.inner.hub.follow(response_id, None));
            return Ok(Some(StartedRun {
                id,
                events: Some(events),
                outcome,
                immediate: None,
            }));
        }
        // A background run was answered at once the first time: so is the retry, with where
        // the run is now.
        match self.get_run(tenant_id, &id).await {
            Ok(run) if run.body.background => {
                return Ok(Some(StartedRun {
                    id,
                    events: None,
                    outcome,
                    immediate: Some(run.body),
                }));
            }
            Ok(_) => {}
            Err(EngineError::NotFound(_)) => return Err(gone()),
            Err(e) => return Err(e),
        }
        // Running: answer when it stops, as the first request will.
        let mut events = std::pin::pin!(self.inner.hub.follow(response_id, None));
        while let Some(event) = events.next().await {
            event?;
        }
        let body = match self.get_run(tenant_id, &id).await {
            Ok(run) => run.body,
            Err(EngineError::NotFound(_)) => return Err(gone()),
            Err(e) => return Err(e),
        };
        Ok(Some(StartedRun {
            id,
            events: None,
            outcome,
            immediate: Some(body),
        }))
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
        created_at: UnixMillis::now().as_secs(),
        completed_at: None,
        status: ResponseStatus::InProgress,
        error: None,
        incomplete_details: None,
        instructions: request.instructions.clone(),
        model: model.to_string(),
        output: Vec::new(),
        parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
        previous_response_id: request.previous_response_id.clone(),
        tools: echo_tools(request.tools.as_deref().unwrap_or_default()),
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
        temperature: request.temperature.unwrap_or(DEFAULT_TEMPERATURE),
        top_p: request.top_p.unwrap_or(DEFAULT_TOP_P),
        presence_penalty: request.presence_penalty.unwrap_or(DEFAULT_PENALTY),
        frequency_penalty: request.frequency_penalty.unwrap_or(DEFAULT_PENALTY),
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
