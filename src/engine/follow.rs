//! A reader of a run's events: the stored log from any sequence number, then the run live —
//! from this instance's live channel while the run executes here, or from the store, woken by
//! other instances' notifications (or a poll), while it executes elsewhere. It fills any gap
//! (a lagging receiver) from the store, so a reader never misses or repeats an event.
//!
//! Every read of the store runs on a task of its own. A reader's stream is polled only while
//! its client takes what it sends; a read suspended halfway because its client stopped
//! reading would keep its pooled connection for as long (measured: 20 such readers made every
//! other request wait for a connection).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::{Notify, broadcast};
use tokio_util::task::TaskTracker;

use crate::protocol::events::{EventRecord, is_terminal};
use crate::store::{RunState, RunStore, StoreError};

/// Events read from the store per query when replaying.
const REPLAY_PAGE: u32 = 1000;
/// How often a follower of a run executing elsewhere looks at the store when no
/// notification arrives (they are lost on a reconnect, and SQLite has none).
const POLL_INTERVAL: Duration = Duration::from_millis(100);

pub(super) struct Follower {
    store: Arc<dyn RunStore>,
    reads: TaskTracker,
    response_id: Arc<str>,
    /// Set when the run is not executing here: woken when another instance appends.
    waker: Option<Arc<Notify>>,
    /// The reader resumes after a cursor: whether the event there closed a segment is
    /// looked at first (then the stream ends at once unless the log goes on).
    check_cursor: bool,
    /// The next sequence number the reader expects.
    next: u64,
    live: Option<broadcast::Receiver<Arc<EventRecord>>>,
    buffer: VecDeque<Arc<EventRecord>>,
    /// Whether the store may hold events the reader has not seen (at the start, after a gap).
    check_store: bool,
    /// The last event delivered ended a segment (completed, paused, failed): the stream ends
    /// unless the log goes on after it (a paused run that was resumed).
    after_terminal: bool,
    ended: bool,
}

impl Follower {
    pub fn new(
        store: Arc<dyn RunStore>,
        reads: TaskTracker,
        response_id: Arc<str>,
        after: Option<u64>,
        live: Option<broadcast::Receiver<Arc<EventRecord>>>,
        waker: Option<Arc<Notify>>,
        backlog: bool,
    ) -> Follower {
        let is_live = live.is_some();
        Follower {
            store,
            reads,
            response_id,
            waker,
            check_cursor: after.is_some(),
            next: after.map_or(0, |n| n + 1),
            live,
            buffer: VecDeque::new(),
            // Without a live channel the store is the only source, whatever the caller said.
            check_store: backlog || !is_live,
            after_terminal: false,
            ended: false,
        }
    }

    pub fn into_stream(
        self,
    ) -> impl Stream<Item = Result<Arc<EventRecord>, StoreError>> + Send + 'static {
        futures_util::stream::unfold(self, |mut f| async move {
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
                let at = self.events_after(cursor.checked_sub(1), 1).await?;
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
    /// Either the stored log is complete (the run stopped or waits for the client: its state
    /// and closing events are committed together), or new events are waited for.
    async fn follow_stored(&mut self) -> Result<(), StoreError> {
        let waker = self
            .waker
            .clone()
            .unwrap_or_else(|| Arc::new(Notify::new()));
        let notified = waker.notified();
        tokio::pin!(notified);
        // Registered before looking, so a notification in between is not missed.
        notified.as_mut().enable();
        let state = {
            let (store, id) = (self.store.clone(), self.response_id.clone());
            self.detached(async move { store.state_of(&id).await })
                .await?
        };
        let settled = state.is_none_or(|s| s.is_final() || s == RunState::RequiresAction);
        if self.fill_from_store().await? {
            return Ok(());
        }
        if settled {
            self.ended = true;
            return Ok(());
        }
        let _ = tokio::time::timeout(POLL_INTERVAL, notified).await;
        self.check_store = true;
        Ok(())
    }

    /// Reads stored events from `next` into the buffer; true when it found any.
    async fn fill_from_store(&mut self) -> Result<bool, StoreError> {
        let events = self
            .events_after(self.next.checked_sub(1), REPLAY_PAGE)
            .await?;
        let found = !events.is_empty();
        self.buffer.extend(events.into_iter().map(Arc::new));
        Ok(found)
    }

    async fn events_after(
        &self,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let (store, id) = (self.store.clone(), self.response_id.clone());
        self.detached(async move { store.events_after(&id, after, limit).await })
            .await
    }

    /// Runs a store read to its end on a task of its own, whether or not this follower is
    /// polled meanwhile.
    async fn detached<T: Send + 'static>(
        &self,
        read: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.reads
            .spawn(read)
            .await
            .map_err(|e| StoreError::unavailable(format!("a read of the event log failed: {e}")))?
    }

    fn deliver(&mut self, event: Arc<EventRecord>) -> Arc<EventRecord> {
        self.next = event.sequence_number + 1;
        self.after_terminal = is_terminal(&event.event_type) && self.buffer.is_empty();
        // Nothing can follow the run's last event: no need to look in the store for more.
        self.ended |= event.ends_run;
        event
    }
}
