//! The event hub: every run's events go through one writer task that orders them, commits
//! them to the store in batches (group commit across runs), and only then publishes them to
//! live subscribers — an event is persisted before anyone can see it. What the store could not
//! write is never published, and the run it belongs to is told to stop.
//!
//! The writer also renews this instance's leases and lets go of them, between two batches:
//! statements that lock many rows never run beside its batch, so they cannot deadlock with it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures_util::{Stream, StreamExt};
use tokio::sync::{Notify, broadcast, mpsc, oneshot};
use tokio_util::task::TaskTracker;

use super::control::{RunControl, StopReason};
use super::follow::Follower;
use crate::protocol::events::EventRecord;
use crate::store::{Loss, NewRun, Notification, RunEnding, RunStore, StoreError, WriteBatch};
use crate::time::UnixMillis;

/// Events buffered per live channel before a slow subscriber falls back to the store. The
/// buffer is allocated when the run starts, so it is part of every open run's memory.
const LIVE_CAPACITY: usize = 32;
/// Queued events before emitters wait for the writer (back-pressure).
const QUEUE_CAPACITY: usize = 16 * 1024;

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

enum Command {
    /// A new run, inserted in the next batch's transaction; answered once it is committed.
    Insert(Box<NewRun>, Reply<()>),
    /// A run's ending with its closing events, in the next batch after its other events.
    End(Box<RunEnding>, Reply<()>),
    Event(Arc<EventRecord>),
    /// Answered once everything queued before it for this run is written (or failed).
    Flush(Arc<str>, Reply<()>),
    /// Ends the run's live channel after everything queued before it, unless a later
    /// execution of the run (after a pause) opened it again since.
    Close(Arc<str>, u64),
    /// Extends this instance's lease on these runs; answers those a client asked to cancel.
    Renew(Vec<String>, UnixMillis, Reply<Vec<String>>),
    /// Lets go of every run this instance holds.
    Release(Reply<u64>),
}

/// A run's live channel, opened by the run's latest execution here (`generation`).
struct Live {
    generation: u64,
    sender: broadcast::Sender<Arc<EventRecord>>,
    /// Told when the run's events could not be stored.
    control: Arc<RunControl>,
}

/// Run ids are looked up per event (publishing, fencing).
type RunIds = crate::protocol::ids::RunIdHasher;

type Channels = Arc<Mutex<HashMap<Arc<str>, Live, RunIds>>>;

/// Followers of runs executing elsewhere, waiting for news of new events.
type Wakers = Arc<Mutex<HashMap<Arc<str>, Weak<Notify>, RunIds>>>;

#[derive(Clone)]
pub struct EventHub {
    queue: mpsc::Sender<Command>,
    channels: Channels,
    wakers: Wakers,
    generations: Arc<AtomicU64>,
    store: Arc<dyn RunStore>,
    /// Store reads of followers, each on a task of its own (see `Follower`).
    reads: TaskTracker,
    /// The writer's last batch found the database unreachable (cleared by the next that
    /// commits): new work is refused at once meanwhile.
    unreachable: Arc<std::sync::atomic::AtomicBool>,
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
    /// Starts the writer task for `holder`, this instance's name as a lease holder; the task
    /// ends when every `EventHub` clone is dropped.
    pub fn start(
        store: Arc<dyn RunStore>,
        holder: String,
        batch_max: usize,
    ) -> (EventHub, HubWriter) {
        let (queue, commands) = mpsc::channel(QUEUE_CAPACITY);
        let channels: Channels = Arc::default();
        let wakers: Wakers = Arc::default();
        let unreachable: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let writer = Writer {
            store: store.clone(),
            holder,
            channels: channels.clone(),
            wakers: wakers.clone(),
            lost: HashSet::default(),
            refused: HashSet::default(),
            unreachable: unreachable.clone(),
        };
        let task = tokio::spawn(writer.run(commands, batch_max.max(1)));
        (
            EventHub {
                queue,
                channels,
                wakers,
                generations: Arc::default(),
                store,
                reads: TaskTracker::new(),
                unreachable,
            },
            HubWriter { task },
        )
    }

    /// Acts on news from other instances sharing the database (PostgreSQL): wakes local
    /// followers of runs that got events, and tells `cancel` of cancel requests. Runs until
    /// `stop` is cancelled.
    pub(crate) async fn listen(
        &self,
        stop: tokio_util::sync::CancellationToken,
        cancel: impl Fn(&str),
    ) {
        let mut notifications = match self.store.notifications().await {
            Ok(Some(stream)) => stream,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for notifications; followers poll and cancel requests wait for the next sweep");
                return;
            }
        };
        loop {
            let news = tokio::select! {
                _ = stop.cancelled() => return,
                next = notifications.next() => match next {
                    Some(news) => news,
                    None => return,
                },
            };
            match news {
                Notification::Appended(id) => {
                    let waker = lock(&self.wakers).get(id.as_str()).and_then(Weak::upgrade);
                    if let Some(waker) = waker {
                        waker.notify_waiters();
                    }
                }
                Notification::CancelRequested(id) => cancel(&id),
            }
        }
    }

    /// The notifier a follower of `id` waits on.
    pub(super) fn waker(&self, id: &Arc<str>) -> Arc<Notify> {
        let mut wakers = lock(&self.wakers);
        if let Some(waker) = wakers.get(id).and_then(Weak::upgrade) {
            return waker;
        }
        // Forget followers that have gone, while here.
        wakers.retain(|_, waker| waker.strong_count() > 0);
        let waker = Arc::new(Notify::new());
        wakers.insert(id.clone(), Arc::downgrade(&waker));
        waker
    }

    /// Opens the live channel of a run about to execute here. A channel still open from the
    /// run's previous execution (its closing is queued behind its last events) is kept, so its
    /// readers go on seeing the run live; this execution's [`LiveChannel::close`] ends it.
    pub fn open(&self, response_id: &Arc<str>, control: Arc<RunControl>) -> LiveChannel {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        lock(&self.channels)
            .entry(response_id.clone())
            .and_modify(|live| {
                live.generation = generation;
                live.control = control.clone();
            })
            .or_insert_with(|| Live {
                generation,
                sender: broadcast::channel(LIVE_CAPACITY).0,
                control,
            });
        LiveChannel {
            hub: self.clone(),
            response_id: response_id.clone(),
            generation,
        }
    }

    /// Whether the writer's last batch found the database unreachable.
    pub fn database_unreachable(&self) -> bool {
        self.unreachable.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The database answered again.
    pub fn database_reachable(&self) {
        self.unreachable
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    pub async fn send(&self, event: Arc<EventRecord>) {
        // The writer only stops after every hub clone is dropped, so this cannot fail while
        // an emitter holds one.
        let _ = self.queue.send(Command::Event(event)).await;
    }

    /// Queues a new run's insert with whatever else the writer commits next (group commit:
    /// one transaction for many runs) and returns at once; the answer comes once it is
    /// committed. Events sent for the run afterwards follow the insert; if it fails, they are
    /// dropped. Dropping the answer before it comes discards the run: nobody would execute
    /// it. For runs without an idempotency key (a key conflict would fail the whole batch).
    pub async fn queue_insert(&self, run: NewRun) -> Result<Inserted, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Command::Insert(Box::new(run), reply))
            .await
            .map_err(|_| writer_stopped())?;
        Ok(Inserted(answer))
    }

    /// Applies a run's ending (its compare-and-set and closing events) in the writer's next
    /// transaction, after every event sent before it.
    pub async fn end_run(&self, ending: RunEnding) -> Result<(), StoreError> {
        self.ask(|reply| Command::End(Box::new(ending), reply))
            .await
    }

    /// Waits until the run's events sent so far are durable.
    pub async fn flush(&self, response_id: Arc<str>) -> Result<(), StoreError> {
        self.ask(|reply| Command::Flush(response_id, reply)).await
    }

    /// Extends this instance's lease on `ids` (those it still holds) until `until`; returns
    /// the ids a client asked to cancel.
    pub async fn renew(
        &self,
        ids: Vec<String>,
        until: UnixMillis,
    ) -> Result<Vec<String>, StoreError> {
        self.ask(|reply| Command::Renew(ids, until, reply)).await
    }

    /// Lets go of every run this instance holds, for another instance to take over.
    pub async fn release_all(&self) -> Result<u64, StoreError> {
        self.ask(Command::Release).await
    }

    /// Queues a command and waits for the writer's answer.
    async fn ask<T>(&self, command: impl FnOnce(Reply<T>) -> Command) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send(command(tx))
            .await
            .map_err(|_| writer_stopped())?;
        rx.await.map_err(|_| writer_stopped())?
    }

    /// The run's events after `after` (from the start with `None`): the stored ones, then
    /// live ones until the run stops (or waits for its client).
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
        let live = lock(&self.channels)
            .get(&response_id)
            .map(|live| live.sender.subscribe());
        let waker = live.is_none().then(|| self.waker(&response_id));
        Follower::new(
            self.store.clone(),
            self.reads.clone(),
            response_id,
            after,
            live,
            waker,
            backlog,
        )
        .into_stream()
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
    StoreError::Unavailable("the event writer has stopped".into())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer task's state.
struct Writer {
    store: Arc<dyn RunStore>,
    holder: String,
    channels: Channels,
    wakers: Wakers,
    /// Runs whose events could not be written: nothing more of them is, until their
    /// execution here ends (a later event would follow a hole in the log).
    lost: HashSet<Arc<str>, RunIds>,
    /// Runs whose insert failed: their events are dropped until their channel closes.
    refused: HashSet<Arc<str>, RunIds>,
    /// See [`EventHub::database_unreachable`].
    unreachable: Arc<std::sync::atomic::AtomicBool>,
}

impl Writer {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>, batch_max: usize) {
        let mut batch: Vec<Command> = Vec::with_capacity(batch_max);
        while commands.recv_many(&mut batch, batch_max).await > 0 {
            let events: Vec<EventRecord> = batch
                .iter()
                .filter_map(|c| match c {
                    Command::Event(e) if !self.dropped(&e.response_id) => {
                        Some(EventRecord::clone(e))
                    }
                    _ => None,
                })
                .collect();
            let write = WriteBatch {
                holder: &self.holder,
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
                        // A run whose events were lost gets no ending after the hole.
                        Command::End(ending, _) if !self.lost.contains(ending.id.as_str()) => {
                            Some(&**ending)
                        }
                        _ => None,
                    })
                    .collect(),
            };
            let written = !write.is_empty();
            let rows = write.runs.len() + write.events.len() + write.endings.len();
            let started = std::time::Instant::now();
            let outcome = self.store.write_batch(&write).await;
            if written {
                crate::metrics::writer_commit(rows, started.elapsed());
            }
            drop(write);
            // Only a batch that wrote something says whether the database can be reached.
            if written {
                self.unreachable
                    .store(outcome.unreachable, std::sync::atomic::Ordering::Relaxed);
            }
            for (id, loss) in &outcome.lost {
                self.lose(id, loss);
            }
            self.refused
                .extend(outcome.not_inserted.keys().map(|id| Arc::from(id.as_str())));
            wake_followers(&self.wakers, &events);
            wake_followers(
                &self.wakers,
                batch.iter().filter_map(|c| match c {
                    Command::End(ending, _) => ending.events.first(),
                    _ => None,
                }),
            );
            let mut endings = outcome.endings.into_iter();
            let mut orphans = Vec::new();
            for command in batch.drain(..) {
                self.answer(command, &outcome.not_inserted, &mut endings, &mut orphans)
                    .await;
            }
            if !orphans.is_empty() {
                discard_orphans(&*self.store, &self.channels, orphans).await;
            }
        }
    }

    /// Whether events of the run are no longer written.
    fn dropped(&self, id: &Arc<str>) -> bool {
        self.lost.contains(id) || self.refused.contains(id)
    }

    /// The run's events were not written: it stops, for the reason the loss gives.
    fn lose(&mut self, id: &Arc<str>, loss: &Loss) {
        let reason = match loss {
            Loss::NotHeld => StopReason::Lost,
            Loss::Failed(e) if e.is_transient() => StopReason::Unstored,
            Loss::Failed(_) => StopReason::Refused,
        };
        tracing::warn!(response_id = %id, ?loss, "events of a run were not stored; it stops here");
        if let Some(live) = lock(&self.channels).get(id) {
            live.control.stop(reason);
        }
        self.lost.insert(id.clone());
    }

    /// Answers a command of the batch just written, in the order they came.
    async fn answer(
        &mut self,
        command: Command,
        not_inserted: &HashMap<String, StoreError>,
        endings: &mut impl Iterator<Item = Result<(), StoreError>>,
        orphans: &mut Vec<NewRun>,
    ) {
        match command {
            Command::End(ending, reply) => {
                let result = if self.lost.contains(ending.id.as_str()) {
                    Err(StoreError::unavailable(format!(
                        "events of {} could not be written",
                        ending.id
                    )))
                } else {
                    endings.next().unwrap_or_else(|| {
                        Err(StoreError::Unavailable("the ending was not written".into()))
                    })
                };
                if result.is_ok() {
                    // Its closing events, now that they are stored with the ending.
                    self.publish(ending.events.into_iter().map(Arc::new));
                }
                let _ = reply.send(result);
            }
            Command::Insert(run, reply) => {
                let result = match not_inserted.get(run.body.id.as_str()) {
                    Some(e) => Err(e.clone()),
                    None => Ok(()),
                };
                let inserted = result.is_ok();
                if reply.send(result).is_err() && inserted {
                    // The request went away before it learned of its run: nobody knows the
                    // run's id and nothing will execute it.
                    orphans.push(*run);
                }
            }
            Command::Event(event) => {
                if !self.dropped(&event.response_id) {
                    self.publish(std::iter::once(event));
                }
            }
            Command::Flush(id, reply) => {
                let result = if self.lost.contains(&id) {
                    Err(StoreError::unavailable(format!(
                        "events of {id} could not be written"
                    )))
                } else {
                    Ok(())
                };
                let _ = reply.send(result);
            }
            Command::Close(id, generation) => {
                // A later execution of the run (resumed here) owns the channel and the
                // record of its lost events.
                let mut channels = lock(&self.channels);
                if channels.get(&id).is_none_or(|l| l.generation == generation) {
                    channels.remove(&id);
                    self.lost.remove(&id);
                    self.refused.remove(&id);
                }
            }
            Command::Renew(ids, until, reply) => {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let _ = reply.send(self.store.renew_leases(&self.holder, &ids, until).await);
            }
            Command::Release(reply) => {
                let _ = reply.send(self.store.release_leases(&self.holder).await);
            }
        }
    }

    /// Hands stored events to their run's live subscribers.
    fn publish(&self, events: impl Iterator<Item = Arc<EventRecord>>) {
        let channels = lock(&self.channels);
        // A run's events come one after another: its channel is looked up once for them.
        let mut last: Option<(Arc<str>, Option<&Live>)> = None;
        for event in events {
            let live = match &last {
                Some((id, live)) if *id == event.response_id => *live,
                _ => {
                    let live = channels.get(&event.response_id);
                    last = Some((event.response_id.clone(), live));
                    live
                }
            };
            if let Some(live) = live {
                // No receivers is fine: nobody is watching.
                let _ = live.sender.send(event);
            }
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
fn wake_followers<'a>(wakers: &Wakers, events: impl IntoIterator<Item = &'a EventRecord>) {
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
