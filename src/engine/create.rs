//! New runs: validated, resolved against the configuration (`Engine::prepare`), stored, and
//! started on a task of their own (`Engine::launch`, in `launch.rs`); background runs are
//! queued instead; a retried request with the same `Idempotency-Key` gets its run.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::oneshot;

use super::emitter::record_lifecycle;
use super::launch::{Launch, Prepared, announced};
use super::replay::ResolvedInput;
use super::run::{Admission, Decision};
use super::{Engine, EngineError, EventStream, SocketMemory, StartedRun, events, pause};
use crate::auth::Caller;
use crate::protocol::events::Lifecycle;
use crate::protocol::field::FieldError;
use crate::protocol::ids;
use crate::protocol::items::Item;
use crate::protocol::request::CreateResponse;
use crate::protocol::response::{ResponseObject, ResponseStatus};
use crate::protocol::transcript::Entry;
use crate::store::{IdempotencyKey, IdempotentRequest, NewRun, RunState, StoreError, StoredRun};
use crate::time::UnixMillis;

impl Engine {
    /// Validates the request, stores the run and starts executing it.
    pub async fn create(
        &self,
        caller: &Caller,
        request: CreateResponse,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<StartedRun, EngineError> {
        // Boxed (here and on a socket): the request's future is large, and the handler's
        // future around it is moved as it is served (measured: 10,000 instructions of copying
        // a text run).
        Box::pin(self.create_in(caller, request, idempotency, None)).await
    }

    /// Creates a response on a WebSocket connection, which remembers its most recent
    /// `store: false` response so that the next one can continue it.
    pub async fn create_on_socket(
        &self,
        caller: &Caller,
        request: CreateResponse,
        memory: &mut SocketMemory,
    ) -> Result<StartedRun, EngineError> {
        Box::pin(self.create_in(caller, request, None, Some(memory))).await
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
        let (history, previous) = match request.conversation_id()? {
            Some(conversation) => {
                let history = self
                    .conversation_context(tenant_id, &conversation, &resolved.items)
                    .await?;
                (history, None)
            }
            None => {
                self.previous(tenant_id, &request, memory.as_deref())
                    .await?
            }
        };
        let chain_items = history.iter().filter_map(Entry::item);
        let prepared = self
            .prepare(
                &request,
                &resolved.items,
                &announced(chain_items.chain(&resolved.items)),
                caller.policy(),
            )
            .await?;
        let decisions = self
            .answer_paused(tenant_id, previous, &history, &resolved)
            .await?;
        let input = resolved.items;
        let id = ids::new(ids::RESPONSE);
        let created_at = UnixMillis::now().as_secs();
        let body = ResponseObject::for_request(&id, &prepared.model, &request, created_at);
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
            body_json: None,
        };
        self.check_concurrency(caller)?;
        self.start_new(prepared, launch, input, idempotency).await
    }

    /// What the request continues: the chain's history and the previous run (stored), by
    /// `previous_response_id` — from the socket's memory when it remembers it (a `store:
    /// false` response on the same socket) — or nothing.
    async fn previous(
        &self,
        tenant_id: &str,
        request: &CreateResponse,
        memory: Option<&SocketMemory>,
    ) -> Result<(Vec<Entry>, Option<StoredRun>), EngineError> {
        let Some(previous) = request.previous_response_id.as_deref() else {
            return Ok((Vec::new(), None));
        };
        match memory.and_then(|memory| memory.context_of(previous)) {
            // The socket remembers it (it may not be stored): the context from memory, and the
            // stored run, if it is one (a paused run this request answers).
            Some(context) => Ok((
                context.to_vec(),
                self.inner.store.get_run(tenant_id, previous).await.ok(),
            )),
            None => {
                let (history, run) = self.chain(tenant_id, previous).await?;
                Ok((history, Some(run)))
            }
        }
    }

    /// Completes the paused runs this request answers (SPEC §9): the previous one, or those a
    /// replayed history answers; returns the approval decisions the new run acts on first.
    /// Every output must answer a call, every approval answer a pending request.
    async fn answer_paused(
        &self,
        tenant_id: &str,
        previous: Option<StoredRun>,
        history: &[Entry],
        resolved: &ResolvedInput,
    ) -> Result<Vec<Decision>, EngineError> {
        let replayed = previous.is_none();
        let paused = match previous {
            Some(previous) if previous.state == RunState::RequiresAction => vec![previous],
            Some(_) => Vec::new(),
            None => self.paused_by_replay(tenant_id, resolved).await?,
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
        pause::check_outputs_match_calls(history, &resolved.items, &waiting, &decided)?;
        let param = match replayed {
            true => "input",
            false => "previous_response_id",
        };
        let mut decisions = Vec::new();
        for run in paused {
            decisions.extend(
                self.complete_by_continuation(run, &resolved.items, param)
                    .await?,
            );
        }
        Ok(decisions)
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
        // Serialised once for the row and the run's first events.
        launch.body_json = serde_json::to_string(&launch.body).ok().map(Arc::from);
        let run = NewRun {
            tenant_id: tenant_id.clone(),
            state: RunState::InProgress,
            body: launch.body.clone(),
            body_json: launch.body_json.clone(),
            input_items: input,
            lease: Some(self.lease(now)),
            now,
            initial_events: Vec::new(),
            idempotency: idempotency.clone(),
            key_id: launch.key_id.clone(),
        };
        // A run in a conversation takes it as it is stored: the insert is awaited, and a
        // conversation another response holds is the client's 400 before anything runs.
        let queued = match (&run.idempotency, &run.body.conversation) {
            (None, None) => self.inner.hub.queue_insert(run).await.map(Some),
            _ => self.inner.store.insert_run(&run).await.map(|()| None),
        };
        let queued = match queued {
            Ok(queued) => queued,
            Err(e @ (StoreError::Locked | StoreError::NotFound))
                if launch.body.conversation.is_some() =>
            {
                return Err(super::conversations::not_taken(e, &launch.body));
            }
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
        // The row and both events carry the body: serialised once.
        let json = serde_json::to_string(&body).ok().map(Arc::<str>::from);
        let first =
            |kind, n| record_lifecycle(kind, &body, json.as_deref(), &response_id, &tenant, n);
        // With the run: a claimer anywhere continues the log after them.
        let initial_events = vec![first(Lifecycle::Created, 0), first(Lifecycle::Queued, 1)];
        let run = NewRun {
            tenant_id: tenant_id.to_string(),
            state: RunState::Queued,
            body: body.clone(),
            body_json: json.clone(),
            input_items: input,
            lease: None,
            now: UnixMillis::now(),
            initial_events,
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
            Err(e @ (StoreError::Locked | StoreError::NotFound))
                if run.body.conversation.is_some() =>
            {
                return Err(super::conversations::not_taken(e, &run.body));
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
        let Some(found) = self.recorded_request(tenant_id, key).await? else {
            return Ok(None);
        };
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

    /// The request recorded with this `Idempotency-Key`: `None` when the key is unknown or
    /// expired (an expired one is forgotten, so that it can be used afresh), a 400 when it came
    /// with another body.
    async fn recorded_request(
        &self,
        tenant_id: &str,
        key: &IdempotencyKey,
    ) -> Result<Option<IdempotentRequest>, EngineError> {
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
        Ok(Some(found))
    }
}
