//! The event hub: every run's events go through one writer task that commits them to the
//! store in batches (group commit across runs) and only then publishes them to live
//! subscribers — an event is persisted before anyone can see it.
//!
//! Subscribers follow a run from any sequence number: they read the stored backlog, then the
//! live channel, and fill any gap (a lagging receiver) from the store, so a reader never misses
//! or repeats an event.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::Stream;
use futures_util::StreamExt;
use tokio::sync::{Notify, broadcast, mpsc, oneshot};

use crate::protocol::events::is_terminal;
use crate::store::{EventRecord, NewRun, RunEnding, RunState, RunStore, StoreError, WriteBatch};

/// Events buffered per live channel before a slow subscriber falls back to the store. The
/// buffer is allocated when the run starts, so it is part of every open run's memory.
const LIVE_CAPACITY: usize = 32;
/// Events read from the store per query when replaying.
const REPLAY_PAGE: u32 = 1000;
/// Queued events before emitters wait for the writer (back-pressure).
const QUEUE_CAPACITY: usize = 16 * 1024;
/// Delays between attempts to write a batch.
const RETRY_DELAYS_MS: [u64; 3] = [10, 100, 500];

enum Command {
    /// A new run, inserted in the next batch's transaction; answered once it is committed.
    Insert(Box<NewRun>, oneshot::Sender<Result<(), StoreError>>),
    /// A run's ending, applied in the next batch's transaction after its events.
    End(Box<RunEnding>, oneshot::Sender<Result<(), StoreError>>),
    Event(Arc<EventRecord>),
    /// Answered once everything queued before it for this run is written (or failed).
    Flush(Arc<str>, oneshot::Sender<Result<(), StoreError>>),
    /// Ends the run's live channel after everything queued before it, unless a later
    /// execution of the run (after a pause) opened it again since.
    Close(Arc<str>, u64),
}

/// A run's live channel, opened by the run's latest execution here (`generation`).
struct Live {
    generation: u64,
    sender: broadcast::Sender<Arc<EventRecord>>,
}

type Channels = Arc<Mutex<HashMap<Arc<str>, Live>>>;

/// Followers of runs executing elsewhere, waiting for news of new events.
type Wakers = Arc<Mutex<HashMap<Arc<str>, Weak<Notify>>>>;

/// How often a follower of a run executing elsewhere looks at the store when no
/// notification arrives (they are lost on a reconnect, and SQLite has none).
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a follower waits for the closing event of a run that has stopped.
const SETTLE_GRACE: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct EventHub {
    queue: mpsc::Sender<Command>,
    channels: Channels,
    wakers: Wakers,
    generations: Arc<AtomicU64>,
    store: Arc<dyn RunStore>,
}

/// A run's live channel as one execution of the run opened it.
#[derive(Clone)]
pub struct LiveChannel {
    hub: EventHub,
    response_id: Arc<str>,
    generation: u64,
}

impl LiveChannel {
    /// Ends the channel once the events queued so far are published — unless the run was
    /// resumed here since (its next execution owns the channel then).
    pub async fn close(&self) {
        let command = Command::Close(self.response_id.clone(), self.generation);
        let _ = self.hub.queue.send(command).await;
    }
}

/// Stops the writer after draining its queue.
pub struct HubWriter {
    task: tokio::task::JoinHandle<()>,
}

impl HubWriter {
    /// Waits until every queued event is written. Call after the last emitter is gone.
    pub async fn finish(self, hub: EventHub) {
        drop(hub);
        let _ = self.task.await;
    }
}

impl EventHub {
    /// Starts the writer task; it ends when every `EventHub` clone is dropped.
    pub fn start(store: Arc<dyn RunStore>, batch_max: usize) -> (EventHub, HubWriter) {
        let (queue, commands) = mpsc::channel(QUEUE_CAPACITY);
        let channels: Channels = Arc::default();
        let wakers: Wakers = Arc::default();
        let task = tokio::spawn(write_loop(
            commands,
            store.clone(),
            channels.clone(),
            wakers.clone(),
            batch_max.max(1),
        ));
        (
            EventHub {
                queue,
                channels,
                wakers,
                generations: Arc::default(),
                store,
            },
            HubWriter { task },
        )
    }

    /// Wakes local followers when another instance appends events (PostgreSQL). Runs until
    /// `stop` is cancelled.
    pub async fn listen(&self, stop: tokio_util::sync::CancellationToken) {
        let mut notifications = match self.store.appended_events().await {
            Ok(Some(stream)) => stream,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for events; followers will poll");
                return;
            }
        };
        loop {
            let id = tokio::select! {
                _ = stop.cancelled() => return,
                next = notifications.next() => match next {
                    Some(id) => id,
                    None => return,
                },
            };
            let waker = self.lock_wakers().get(id.as_str()).and_then(Weak::upgrade);
            if let Some(waker) = waker {
                waker.notify_waiters();
            }
        }
    }

    fn lock_wakers(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Weak<Notify>>> {
        lock(&self.wakers)
    }

    /// The notifier a follower of `id` waits on.
    fn waker(&self, id: &Arc<str>) -> Arc<Notify> {
        let mut wakers = self.lock_wakers();
        if let Some(waker) = wakers.get(id).and_then(Weak::upgrade) {
            return waker;
        }
        // Forget followers that have gone, while here.
        wakers.retain(|_, waker| waker.strong_count() > 0);
        let waker = Arc::new(Notify::new());
        wakers.insert(id.clone(), Arc::downgrade(&waker));
        waker
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Live>> {
        lock(&self.channels)
    }

    /// Opens the live channel of a run about to execute here. A channel still open from the
    /// run's previous execution (its closing is queued behind its last events) is kept, so its
    /// readers go on seeing the run live; this execution's [`LiveChannel::close`] ends it.
    pub fn open(&self, response_id: &Arc<str>) -> LiveChannel {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        self.channels()
            .entry(response_id.clone())
            .and_modify(|live| live.generation = generation)
            .or_insert_with(|| Live {
                generation,
                sender: broadcast::channel(LIVE_CAPACITY).0,
            });
        LiveChannel {
            hub: self.clone(),
            response_id: response_id.clone(),
            generation,
        }
    }

    pub async fn send(&self, event: Arc<EventRecord>) {
        // The writer only stops after every hub clone is dropped, so this cannot fail while
        // an emitter holds one.
        let _ = self.queue.send(Command::Event(event)).await;
    }

    /// Inserts a new run together with whatever else the writer commits next (group commit:
    /// one transaction for many runs). For runs without an idempotency key: a key conflict
    /// would fail the whole batch, so those go to the store directly.
    pub async fn insert_run(&self, run: NewRun) -> Result<(), StoreError> {
        self.queue_insert(run).await?.await
    }

    /// Queues a new run's insert (as `insert_run`) and returns at once; the answer comes once
    /// it is committed. Events sent for the run afterwards follow the insert; if it fails,
    /// they are dropped. Dropping the answer before it comes discards the run: nobody would
    /// execute it.
    pub async fn queue_insert(&self, run: NewRun) -> Result<Inserted, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Command::Insert(Box::new(run), reply))
            .await
            .map_err(|_| writer_stopped())?;
        Ok(Inserted(answer))
    }

    /// Applies a run's ending (its compare-and-set) in the writer's next transaction, after
    /// every event sent before it.
    pub async fn end_run(&self, ending: RunEnding) -> Result<(), StoreError> {
        self.ask(|reply| Command::End(Box::new(ending), reply))
            .await
    }

    /// Waits until the run's events sent so far are durable.
    pub async fn flush(&self, response_id: Arc<str>) -> Result<(), StoreError> {
        self.ask(|reply| Command::Flush(response_id, reply)).await
    }

    /// Queues a command and waits for the writer's answer.
    async fn ask(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<(), StoreError>>) -> Command,
    ) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send(command(tx))
            .await
            .map_err(|_| writer_stopped())?;
        rx.await.map_err(|_| writer_stopped())?
    }

    /// The run's events after `after` (from the start with `None`): the stored ones, then
    /// live ones until a terminal event, or until the run stops executing here.
    pub fn follow(
        &self,
        response_id: Arc<str>,
        after: Option<u64>,
    ) -> impl Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send + 'static {
        self.follow_from(response_id, after, true)
    }

    /// A new run's events: its live channel is open and nothing is stored yet, so the store
    /// need not be read first.
    pub fn follow_new(
        &self,
        response_id: Arc<str>,
    ) -> impl Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send + 'static {
        self.follow_from(response_id, None, false)
    }

    fn follow_from(
        &self,
        response_id: Arc<str>,
        after: Option<u64>,
        backlog: bool,
    ) -> impl Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send + 'static {
        // Subscribe before reading the backlog so nothing falls between the two.
        let live = self
            .channels()
            .get(&response_id)
            .map(|live| live.sender.subscribe());
        let is_live = live.is_some();
        let follower = Follower {
            waker: live.is_none().then(|| self.waker(&response_id)),
            settled_since: None,
            check_cursor: after.is_some(),
            store: self.store.clone(),
            response_id,
            next: after.map_or(0, |n| n + 1),
            live,
            buffer: std::collections::VecDeque::new(),
            // Without a live channel the store is the only source, whatever the caller said.
            check_store: backlog || !is_live,
            after_terminal: false,
            ended: false,
        };
        futures_util::stream::unfold(follower, |mut f| async move {
            match f.next().await {
                Ok(Some(event)) => Some((Ok(event), f)),
                Ok(None) => None,
                Err(e) => {
                    f.ended = true;
                    Some((Err(e), f))
                }
            }
        })
    }
}

struct Follower {
    /// Set when the run is not executing here: woken when another instance appends.
    waker: Option<Arc<Notify>>,
    /// When the follower first found the run stopped with no closing event stored yet.
    settled_since: Option<Instant>,
    /// The reader resumes after a cursor: whether the event there closed a segment is
    /// looked at first (then the stream ends at once unless the log goes on).
    check_cursor: bool,
    store: Arc<dyn RunStore>,
    response_id: Arc<str>,
    /// The next sequence number the reader expects.
    next: u64,
    live: Option<broadcast::Receiver<Arc<EventRecord>>>,
    buffer: std::collections::VecDeque<Arc<EventRecord>>,
    /// Whether the store may hold events the reader has not seen (at the start, after a gap).
    check_store: bool,
    /// The last event delivered ended a segment (completed, paused, failed): the stream ends
    /// unless the log goes on after it (a paused run that was resumed).
    after_terminal: bool,
    ended: bool,
}

impl Follower {
    async fn next(&mut self) -> Result<Option<Arc<EventRecord>>, StoreError> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                return Ok(Some(self.deliver(event)));
            }
            if self.ended {
                return Ok(None);
            }
            // Only for a run not executing here: a live run (just resumed after a pause,
            // say) goes on after the cursor.
            if self.check_cursor && self.live.is_some() {
                self.check_cursor = false;
            }
            if self.check_cursor {
                self.check_cursor = false;
                let cursor = self.next.saturating_sub(1);
                let at = self
                    .store
                    .events_after(&self.response_id, cursor.checked_sub(1), 1)
                    .await?;
                self.after_terminal = at
                    .first()
                    .is_some_and(|e| e.sequence_number == cursor && is_terminal(&e.event_type));
            }
            if self.after_terminal {
                self.ended = !self.fill_from_store().await?;
                continue;
            }
            // Whatever is stored beyond `next` first (the backlog, or a gap).
            if self.check_store {
                if self.fill_from_store().await? {
                    continue;
                }
                self.check_store = false;
            }
            let Some(live) = &mut self.live else {
                self.follow_stored().await?;
                continue;
            };
            match live.recv().await {
                Ok(event) if event.sequence_number < self.next => {}
                Ok(event) if event.sequence_number == self.next => {
                    return Ok(Some(self.deliver(event)));
                }
                // A gap (the receiver lagged or subscribed late): the store has the rest.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.check_store = true,
                Err(broadcast::error::RecvError::Closed) => {
                    self.live = None;
                    self.check_store = true;
                }
            }
        }
    }

    /// The run is not executing here: it may be queued or running on another instance.
    /// Either the stored log is complete (the run stopped or waits for the client), or new
    /// events are waited for.
    async fn follow_stored(&mut self) -> Result<(), StoreError> {
        let waker = self
            .waker
            .clone()
            .unwrap_or_else(|| Arc::new(Notify::new()));
        let notified = waker.notified();
        tokio::pin!(notified);
        // Registered before looking, so a notification in between is not missed.
        notified.as_mut().enable();
        let state = self.store.state_of(&self.response_id).await?;
        let settled = state.is_none_or(|s| s.is_final() || s == RunState::RequiresAction);
        if self.fill_from_store().await? {
            self.settled_since = None;
            return Ok(());
        }
        if settled {
            // The state changes before the closing event is written: give it a moment to
            // arrive (a log without one, after a crash, ends the stream anyway).
            let since = *self.settled_since.get_or_insert_with(Instant::now);
            if state.is_none() || since.elapsed() >= SETTLE_GRACE {
                self.ended = true;
                return Ok(());
            }
        }
        let _ = tokio::time::timeout(POLL_INTERVAL, notified).await;
        self.check_store = true;
        Ok(())
    }

    /// Reads stored events from `next` into the buffer; true when it found any.
    async fn fill_from_store(&mut self) -> Result<bool, StoreError> {
        let after = self.next.checked_sub(1);
        let events = self
            .store
            .events_after(&self.response_id, after, REPLAY_PAGE)
            .await?;
        let found = !events.is_empty();
        self.buffer.extend(events.into_iter().map(Arc::new));
        Ok(found)
    }

    fn deliver(&mut self, event: Arc<EventRecord>) -> Arc<EventRecord> {
        self.next = event.sequence_number + 1;
        self.after_terminal = is_terminal(&event.event_type) && self.buffer.is_empty();
        // Nothing can follow the run's last event: no need to look in the store for more.
        self.ended |= event.ends_run;
        event
    }
}

/// The answer to a queued insert: resolves once the run is committed (or failed to be).
pub struct Inserted(oneshot::Receiver<Result<(), StoreError>>);

impl std::future::Future for Inserted {
    type Output = Result<(), StoreError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|answer| answer.unwrap_or_else(|_| Err(writer_stopped())))
    }
}

fn writer_stopped() -> StoreError {
    StoreError::Database("the event writer has stopped".into())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

async fn write_loop(
    mut commands: mpsc::Receiver<Command>,
    store: Arc<dyn RunStore>,
    channels: Channels,
    wakers: Wakers,
    batch_max: usize,
) {
    let mut failed: HashSet<Arc<str>> = HashSet::new();
    // Runs whose insert failed: their events are dropped until their channel closes.
    let mut refused: HashSet<Arc<str>> = HashSet::new();
    let mut batch: Vec<Command> = Vec::with_capacity(batch_max);
    while commands.recv_many(&mut batch, batch_max).await > 0 {
        let events: Vec<EventRecord> = batch
            .iter()
            .filter_map(|c| match c {
                Command::Event(e) if !refused.contains(&e.response_id) => {
                    Some(EventRecord::clone(e))
                }
                _ => None,
            })
            .collect();
        // A run whose events could not be written gets no ending: its log has a hole.
        let skipped: HashSet<Arc<str>> = batch
            .iter()
            .filter_map(|c| match c {
                Command::End(ending, _) => failed.get(ending.id.as_str()).cloned(),
                _ => None,
            })
            .collect();
        let write = WriteBatch {
            runs: batch
                .iter()
                .filter_map(|c| match c {
                    Command::Insert(run, _) => Some(&**run),
                    _ => None,
                })
                .collect(),
            events: &events,
            endings: batch
                .iter()
                .filter_map(|c| match c {
                    Command::End(ending, _) if !skipped.contains(ending.id.as_str()) => {
                        Some(&**ending)
                    }
                    _ => None,
                })
                .collect(),
        };
        let written = write_batch(&*store, &write).await;
        drop(write);
        let (lost, not_inserted, mut ended) = written;
        let mut orphans = Vec::new();
        failed.extend(lost.iter().cloned());
        refused.extend(not_inserted.keys().map(|id| Arc::from(id.as_str())));
        wake_followers(&wakers, &events);
        for command in batch.drain(..) {
            match command {
                Command::End(ending, reply) => {
                    let result = if skipped.contains(ending.id.as_str()) {
                        Err(StoreError::Database(format!(
                            "events of {} could not be written",
                            ending.id
                        )))
                    } else {
                        ended.next().unwrap_or_else(|| {
                            Err(StoreError::Database("the ending was not written".into()))
                        })
                    };
                    let _ = reply.send(result);
                }
                Command::Insert(run, reply) => {
                    let result = match not_inserted.get(run.body.id.as_str()) {
                        Some(e) => Err(StoreError::Database(e.clone())),
                        None => Ok(()),
                    };
                    let inserted = result.is_ok();
                    if reply.send(result).is_err() && inserted {
                        // The request went away before it learned of its run: nobody knows
                        // the run's id and nothing will execute it.
                        orphans.push(*run);
                    }
                }
                Command::Event(event) => {
                    if lost.contains(&event.response_id) || refused.contains(&event.response_id) {
                        continue;
                    }
                    if let Some(live) = lock(&channels).get(&event.response_id) {
                        // No receivers is fine: nobody is watching.
                        let _ = live.sender.send(event);
                    }
                }
                Command::Flush(id, reply) => {
                    let result = if failed.remove(&id) {
                        Err(StoreError::Database(format!(
                            "events of {id} could not be written"
                        )))
                    } else {
                        Ok(())
                    };
                    let _ = reply.send(result);
                }
                Command::Close(id, generation) => {
                    // A later execution of the run (resumed here) owns the channel and the
                    // record of its failed events.
                    let mut channels = lock(&channels);
                    if channels.get(&id).is_none_or(|l| l.generation == generation) {
                        channels.remove(&id);
                        failed.remove(&id);
                        refused.remove(&id);
                    }
                }
            }
        }
        if !orphans.is_empty() {
            discard_orphans(&*store, &channels, orphans).await;
        }
    }
}

/// Deletes runs whose creating request went away while their insert was queued, with the
/// live channel that request opened.
async fn discard_orphans(store: &dyn RunStore, channels: &Channels, orphans: Vec<NewRun>) {
    for run in orphans {
        let id = run.body.id.as_str();
        lock(channels).remove(id);
        match store.delete_run(&run.tenant_id, id).await {
            Ok(()) => {
                tracing::info!(response_id = %id, "discarded a run whose request went away before it started")
            }
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "cannot discard a run whose request went away")
            }
        }
    }
}

/// Wakes this instance's followers of runs that are not executing here (queued, say, or
/// executing elsewhere until claimed here) when their events were just written here.
fn wake_followers(wakers: &Wakers, events: &[EventRecord]) {
    let wakers = lock(wakers);
    if wakers.is_empty() {
        return;
    }
    let mut last: Option<&Arc<str>> = None;
    for event in events {
        if last == Some(&event.response_id) {
            continue;
        }
        last = Some(&event.response_id);
        if let Some(waker) = wakers.get(&event.response_id).and_then(Weak::upgrade) {
            waker.notify_waiters();
        }
    }
}

/// Writes a batch (new runs and events) in one transaction, with retries; if it still fails,
/// writes run by run so that one run's bad row cannot lose the others'. Returns the runs whose
/// events were lost, and the new runs that could not be inserted (with the error).
async fn write_batch(
    store: &dyn RunStore,
    batch: &WriteBatch<'_>,
) -> (
    HashSet<Arc<str>>,
    HashMap<String, String>,
    std::vec::IntoIter<Result<(), StoreError>>,
) {
    if let Ok(ended) = write_with_retries(store, batch).await {
        return (HashSet::new(), HashMap::new(), ended.into_iter());
    }
    let mut not_inserted = HashMap::new();
    for run in &batch.runs {
        if let Err(e) = store.insert_run(run).await {
            tracing::error!(response_id = %run.body.id, error = %e, "a run could not be stored");
            not_inserted.insert(run.body.id.clone(), e.to_string());
        }
    }
    // The events of a run that is not stored are not written either.
    let events: Vec<EventRecord> = batch
        .events
        .iter()
        .filter(|e| !not_inserted.contains_key(&*e.response_id))
        .cloned()
        .collect();
    let lost = write_events_apart(store, &events).await;
    let mut ended = Vec::with_capacity(batch.endings.len());
    for ending in &batch.endings {
        if lost.contains(ending.id.as_str()) {
            // Its events just failed: no ending after a hole in the log.
            ended.push(Err(StoreError::Database(format!(
                "events of {} could not be written",
                ending.id
            ))));
            continue;
        }
        let update = ending.update();
        ended.push(
            store
                .transition(&ending.id, RunState::InProgress, ending.to, &update)
                .await,
        );
    }
    (lost, not_inserted, ended.into_iter())
}

/// Writes each run's events in a transaction of its own; returns the runs whose events were
/// lost.
async fn write_events_apart(store: &dyn RunStore, events: &[EventRecord]) -> HashSet<Arc<str>> {
    let mut by_run: HashMap<Arc<str>, Vec<EventRecord>> = HashMap::new();
    for event in events {
        by_run
            .entry(event.response_id.clone())
            .or_default()
            .push(event.clone());
    }
    let mut lost = HashSet::new();
    for (id, events) in by_run {
        if let Err(e) = store.append_events(&events).await {
            tracing::error!(response_id = %id, error = %e, "events could not be stored");
            lost.insert(id);
        }
    }
    lost
}

async fn write_with_retries(
    store: &dyn RunStore,
    batch: &WriteBatch<'_>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let mut result = store.write_batch(batch).await;
    for delay in RETRY_DELAYS_MS {
        let Err(e) = &result else { break };
        tracing::warn!(error = %e, runs = batch.runs.len(), events = batch.events.len(), "writing a batch failed; retrying");
        tokio::time::sleep(Duration::from_millis(delay)).await;
        result = store.write_batch(batch).await;
    }
    result
}
