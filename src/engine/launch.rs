//! Where every execution of a run starts. A new run (`create.rs`) is *prepared* from its
//! request; a stored run continuing here (after `submit_tool_outputs` in `pause.rs`, a claim
//! from the queue in `maintenance.rs`, a takeover or a restart in `recovery.rs`) is *loaded*
//! from the database, which prepares its request again, and *resumed*. Both end in
//! [`Engine::launch`], which starts the run's task on this instance. Nothing here imports the
//! files that call it.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use serde_json::json;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::control::{RunControl, StopReason};
use super::emitter::EventEmitter;
use super::lifecycle::{Ending, StoredEnd, end_stored};
use super::run::{
    self, Admission, Decision, Model, Output, Place, RunTask, Sealing, Start, Tools, Waits,
};
use super::toolset::{Listing, ToolSet};
use super::usage::KeyRuns;
use super::{Engine, EngineError, RunOutcome, StartedRun, events};
use crate::auth::{Caller, KeyPolicy};
use crate::llm::{LlmClient, ModelRequest};
use crate::protocol::field::FieldError;
use crate::protocol::items::Item;
use crate::protocol::request::CreateResponse;
use crate::protocol::response::{ResponseObject, Usage};
use crate::protocol::tools::{
    ToolDecl, check_tool_limits, parse_tool_choice, parse_tools, parse_tools_at,
};
use crate::protocol::transcript::Entry;
use crate::seal::ReasoningSeal;
use crate::store::{Lease, RunState, StoredRun};
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
    /// Its reasoning items carry their reasoning sealed (`encrypted_content`): the client
    /// asked for it, or keeps the conversation on its side (`store: false`).
    pub seal_reasoning: bool,
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
    /// A new run's body as its insert serialised it.
    pub body_json: Option<Arc<str>>,
}

/// What a stored run needs to continue: its request as prepared at creation, its chain, and
/// its input items as stored when it was loaded.
pub(super) struct Loaded {
    prepared: Prepared,
    history: Vec<Entry>,
    input: Vec<Item>,
}

/// A stored run about to continue here, already held by this instance (each way here is a
/// transition of the state table).
pub(super) struct Resumption {
    /// As stored before it continues (its body says how it last stopped, and its usage so
    /// far).
    pub run: StoredRun,
    /// The sequence number its next event gets.
    pub next_sequence: u64,
    pub stream: bool,
    /// Approval answers to act on first.
    pub decisions: Vec<Decision>,
    /// Input items appended since it was loaded (the outputs that resume it).
    pub appended: Vec<Item>,
}

impl Resumption {
    /// A run continuing where its log ends, with nothing new from a client (a claim or a
    /// takeover).
    pub fn unattended(run: StoredRun, next_sequence: u64) -> Resumption {
        Resumption {
            run,
            next_sequence,
            stream: false,
            decisions: Vec::new(),
            appended: Vec::new(),
        }
    }
}

impl Engine {
    /// Everything a run needs from its request: the model's client, the resolved tools, the
    /// per-turn model request and the limits. Shared by new and resumed runs. Tool servers
    /// already `announced` in the chain are not announced again.
    pub(super) async fn prepare(
        &self,
        request: &CreateResponse,
        input: &[Item],
        announced: &HashSet<&str>,
        policy: Option<&KeyPolicy>,
    ) -> Result<Prepared, EngineError> {
        let (model, client) = self.route(request, policy)?;
        let declared = declared_tools(request, input)?;
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
        model_request.renamed = tools.renamed();
        if !model_request.tools.is_empty() {
            model_request.tool_choice = tools.choice.clone();
        }
        let limits = self.run_limits(request);
        Ok(Prepared {
            model,
            client,
            tools,
            listings,
            model_request,
            limits,
            seal_reasoning: request.store == Some(false)
                || request
                    .include
                    .iter()
                    .flatten()
                    .any(|i| i == "reasoning.encrypted_content"),
        })
    }

    /// The request's model and the client that routes it, if the caller's key may use it.
    fn route(
        &self,
        request: &CreateResponse,
        policy: Option<&KeyPolicy>,
    ) -> Result<(String, Arc<dyn LlmClient>), EngineError> {
        let model = match request.model.as_deref() {
            Some(model) if !model.is_empty() => model.to_string(),
            _ => {
                return Err(
                    FieldError::new("model", "Missing required parameter: 'model'.").into(),
                );
            }
        };
        let client = self.client_for(&model, policy)?;
        Ok((model, client))
    }

    /// The client that routes `model`, if the caller's key may use it; else
    /// `model_not_found`, naming the models the caller may use (creation and compaction alike).
    pub(super) fn client_for(
        &self,
        model: &str,
        policy: Option<&KeyPolicy>,
    ) -> Result<Arc<dyn LlmClient>, EngineError> {
        let allowed = policy.is_none_or(|p| p.allows_model(model));
        if let Some(client) = self.inner.models.route(model).filter(|_| allowed) {
            return Ok(client);
        }
        let message = format!(
            "The model '{model}' does not exist or you do not have access to it. {}",
            self.models_for(policy)
        );
        Err(EngineError::Invalid(
            FieldError::new("model", message),
            Some("model_not_found"),
        ))
    }

    /// The models a key with `policy` may use, as a sentence: those its policy names that the
    /// service routes, or every model the configuration lists; and whether any other name is
    /// routed too (a provider with `"*"`).
    fn models_for(&self, policy: Option<&KeyPolicy>) -> String {
        /// More names than this are counted, not listed.
        const SHOWN: usize = 20;
        let router = &self.inner.models;
        let restricted = policy.and_then(|p| p.models.as_ref());
        let names: Vec<&str> = match restricted {
            Some(allowed) => allowed
                .iter()
                .filter(|m| router.route(m).is_some())
                .map(String::as_str)
                .collect(),
            None => router.models().iter().map(|(m, _)| m.as_str()).collect(),
        };
        let any = router.routes_any() && restricted.is_none();
        if names.is_empty() {
            return match any {
                true => "Any model name may be used.".into(),
                false => "There is no model you may use.".into(),
            };
        }
        let mut listed: Vec<String> = names.iter().take(SHOWN).map(|m| format!("'{m}'")).collect();
        if names.len() > SHOWN {
            listed.push(format!("and {} more", names.len() - SHOWN));
        }
        let tail = match any {
            true => " (and any other name: the service routes every model)",
            false => "",
        };
        format!("Models you may use: {}{tail}.", listed.join(", "))
    }

    /// The limits and policies a run of `request` works under.
    fn run_limits(&self, request: &CreateResponse) -> run::RunLimits {
        let settings = &self.inner.settings;
        run::RunLimits {
            max_turns: settings.tools.max_turns,
            max_concurrency: settings.tools.max_concurrency,
            on_error: settings.tools.on_error,
            max_tool_calls: request.max_tool_calls,
            parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
            pause_ttl: settings.requires_action_ttl,
            max_output_bytes: settings.limits.max_tool_output_bytes,
        }
    }

    /// Rebuilds a stored run's request from its body, prepares it as at creation (a model or
    /// tool server gone from the configuration is an error here) and reads its chain.
    /// Servers announced in `seen` (the run's own transcript) are not announced again.
    pub(super) async fn load(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
        seen: &[Entry],
        key_id: Option<&str>,
    ) -> Result<Loaded, EngineError> {
        let request = body.request();
        // The run goes on under the policy of the key that created it.
        let key = match key_id {
            Some(id) => self.inner.store.key_by_id(id).await?,
            None => None,
        };
        let key = key.map(crate::auth::api_key).transpose()?;
        let history = self.history_of(tenant_id, body).await?;
        let input = self.inner.store.input_items(tenant_id, &body.id).await?;
        let items = history
            .iter()
            .chain(seen)
            .filter_map(Entry::item)
            .chain(&input);
        let policy = key.as_ref().map(|k| &k.policy);
        let prepared = self
            .prepare(&request, &input, &announced(items), policy)
            .await?;
        Ok(Loaded {
            prepared,
            history,
            input,
        })
    }

    /// Continues the run on a task here, its log after `next_sequence - 1`.
    pub(super) fn resume(&self, loaded: Loaded, resumption: Resumption) -> StartedRun {
        let run = resumption.run;
        let mut context = loaded.history;
        let input = loaded.input.into_iter().chain(resumption.appended);
        context.extend(input.map(Entry::Item));
        let mut body = run.body;
        let prior_usage = body.reopen();
        let launch = Launch {
            tenant_id: run.tenant_id,
            body,
            context,
            transcript: run.transcript,
            next_sequence: resumption.next_sequence,
            resumed: true,
            stream: resumption.stream,
            decisions: resumption.decisions,
            prior_usage,
            admission: None,
            cancel_requested: run.cancel_requested,
            key_id: run.key_id,
            body_json: None,
        };
        self.launch(loaded.prepared, launch)
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
            .map(|key| KeyRuns::enter(&self.inner.key_runs, key));
        let task = self.task(prepared, launch, place, done);
        let engine = self.clone();
        // Boxed: an async block keeps a future it captures and awaits twice (as the captured
        // value and as the awaited state); a box makes the second copy a pointer.
        let execution = Box::pin(AssertUnwindSafe(Box::new(task).execute()).catch_unwind());
        let span = crate::telemetry::run_span(&id);
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
        done: oneshot::Sender<RunOutcome>,
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
        let seal = &self.inner.settings.seal;
        let sealing = prepared.seal_reasoning.then(|| Sealing {
            seal: seal.clone(),
            tenant: launch.tenant_id.clone(),
        });
        RunTask {
            out: Output {
                emitter,
                body: launch.body,
                transcript: launch.transcript,
                sealing,
            },
            model: Model {
                client: prepared.client,
                request: prepared.model_request,
                context: open_sealed(seal, &launch.tenant_id, launch.context),
                prior: launch.prior_usage.clone().unwrap_or_default(),
                usage: launch.prior_usage.unwrap_or_default(),
            },
            tools: Tools {
                set: prepared.tools,
                limits: prepared.limits,
                calls_used,
                turned_back: false,
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
                body_json: launch.body_json,
            },
            done: Some(done),
        }
    }

    /// After a run task panicked: fails the run, after its last stored event.
    async fn after_panic(&self, tenant_id: &str, id: &str) {
        tracing::error!("the run task panicked");
        let Ok(run) = self.inner.store.get_run(tenant_id, id).await else {
            return;
        };
        if run.state == RunState::InProgress {
            self.give_up(run, "The run stopped because of an internal error.")
                .await;
        }
    }

    /// Fails a run this instance holds that cannot continue here.
    pub(super) async fn give_up(&self, mut run: StoredRun, why: &str) {
        let ending = Ending::Abandoned(why.to_string());
        let end = StoredEnd {
            tenant_id: &run.tenant_id,
            from: run.state,
            body: &mut run.body,
            transcript: None,
        };
        match end_stored(&*self.inner.store, self.holder(), end, &ending).await {
            Ok(()) => {
                tracing::warn!(response_id = %run.body.id, why, "failed a run that cannot continue")
            }
            Err(e) => {
                tracing::error!(response_id = %run.body.id, error = %e, "cannot fail a run that cannot continue")
            }
        }
    }

    /// This instance's lease from `now`.
    pub(super) fn lease(&self, now: UnixMillis) -> Lease {
        Lease {
            holder: self.holder().to_string(),
            until: now.plus(self.inner.settings.lease_ttl),
        }
    }

    /// A 429 when the caller's key has as many runs executing here as it may.
    pub(super) fn check_concurrency(&self, caller: &Caller) -> Result<(), EngineError> {
        let Some(key) = &caller.key else {
            return Ok(());
        };
        let Some(limit) = key.policy.max_concurrent_runs else {
            return Ok(());
        };
        if self.inner.key_runs.count(&key.id) >= limit {
            return Err(EngineError::RateLimited {
                message: format!(
                    "This API key may have {limit} runs in progress at once; retry when one has stopped."
                ),
                retry_after_secs: 1,
            });
        }
        Ok(())
    }
}

/// The request's tools and those its input items declare (`additional_tools`), each with the
/// path that names it in the request.
fn declared_tools(
    request: &CreateResponse,
    input: &[Item],
) -> Result<Vec<(String, ToolDecl)>, FieldError> {
    let mut declared: Vec<(String, ToolDecl)> =
        parse_tools(request.tools.as_deref().unwrap_or_default())?
            .into_iter()
            .enumerate()
            .map(|(index, decl)| (format!("tools[{index}]"), decl))
            .collect();
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
    Ok(declared)
}

/// Tool servers already announced (`mcp_list_tools`) among these items. A listing that
/// failed (an MCP server that was not connected) announced nothing: the server is listed again.
pub(super) fn announced<'a>(items: impl Iterator<Item = &'a Item>) -> HashSet<&'a str> {
    items
        .filter_map(|item| match item {
            Item::McpListTools(listing) if listing.error.is_none() => {
                Some(listing.server_label.as_str())
            }
            _ => None,
        })
        .collect()
}

/// The context with the reasoning a client gave back sealed (`encrypted_content`) opened, so
/// that the model may be shown it again; a blob that does not open (another deployment's key,
/// another provider's blob) is dropped with a warning, and the run goes on without it. Provider
/// state (`crate::llm::opaque`) is not sealed, and stays as it is.
fn open_sealed(seal: &ReasoningSeal, tenant: &str, mut context: Vec<Entry>) -> Vec<Entry> {
    for entry in &mut context {
        let Entry::Item(Item::Reasoning(reasoning)) = entry else {
            continue;
        };
        let Some(blob) = reasoning.encrypted_content.as_deref() else {
            continue;
        };
        if !reasoning.text().is_empty() || crate::llm::opaque::is_opaque(blob) {
            continue;
        }
        match seal.open(tenant, blob) {
            Some(text) => {
                reasoning.content = Some(vec![json!({"type": "reasoning_text", "text": text})]);
            }
            None => {
                tracing::warn!(item = %reasoning.id, "a reasoning item's encrypted_content does not open here; the model is not shown it");
                reasoning.encrypted_content = None;
            }
        }
    }
    context
}
