//! How a run executing here is told to stop, and why; and the registry of those runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why a run stops before its model is done. When several reasons come, the strongest
/// holds: a run nobody may write to any more cannot be cancelled or handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum StopReason {
    /// The service is stopping: the run is handed to another instance (or this one after a
    /// restart) at the next safe point.
    HandOver = 1,
    /// A client cancelled it.
    Cancel = 2,
    /// Its events could not be stored for a reason a retry will not cure: it fails.
    Refused = 3,
    /// Its events could not be stored because the database could not be reached: it is
    /// handed over, for whoever holds it next to continue from what is stored.
    Unstored = 4,
    /// This instance no longer holds its lease: another one executes it now.
    Lost = 5,
}

impl StopReason {
    fn from_u8(value: u8) -> Option<StopReason> {
        [
            StopReason::HandOver,
            StopReason::Cancel,
            StopReason::Refused,
            StopReason::Unstored,
            StopReason::Lost,
        ]
        .into_iter()
        .find(|reason| *reason as u8 == value)
    }
}

/// A run's stop signal: a token its steps wait on, and the reason.
#[derive(Debug, Default)]
pub struct RunControl {
    token: CancellationToken,
    reason: AtomicU8,
}

impl RunControl {
    pub fn stop(&self, reason: StopReason) {
        self.reason.fetch_max(reason as u8, Ordering::SeqCst);
        self.token.cancel();
    }

    pub fn reason(&self) -> Option<StopReason> {
        StopReason::from_u8(self.reason.load(Ordering::SeqCst))
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// A run executing here: its control, and whether its task has stopped.
struct LiveRun {
    control: Arc<RunControl>,
    stopped: watch::Receiver<bool>,
}

/// The runs executing in this process.
#[derive(Default)]
pub(crate) struct LiveRuns {
    runs: Mutex<HashMap<String, LiveRun>>,
}

impl LiveRuns {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, LiveRun>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a run about to execute here; the sender says when its task has stopped.
    pub fn add(&self, id: &str, control: Arc<RunControl>) -> watch::Sender<bool> {
        let (stopped_tx, stopped) = watch::channel(false);
        self.lock()
            .insert(id.to_string(), LiveRun { control, stopped });
        stopped_tx
    }

    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// How many runs execute here.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Tells a run executing here to stop; returns a receiver that turns `true` once its task
    /// has stopped, or `None` when it does not execute here.
    pub fn stop(&self, id: &str, reason: StopReason) -> Option<watch::Receiver<bool>> {
        let runs = self.lock();
        let run = runs.get(id)?;
        run.control.stop(reason);
        Some(run.stopped.clone())
    }

    /// Tells every run executing here to stop.
    pub fn stop_all(&self, reason: StopReason) -> usize {
        let runs = self.lock();
        for run in runs.values() {
            run.control.stop(reason);
        }
        runs.len()
    }

    pub fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strongest_reason_to_stop_holds() {
        let control = RunControl::default();
        assert_eq!(control.reason(), None);
        control.stop(StopReason::Cancel);
        control.stop(StopReason::HandOver);
        assert_eq!(control.reason(), Some(StopReason::Cancel));
        control.stop(StopReason::Lost);
        assert_eq!(control.reason(), Some(StopReason::Lost));
        assert!(control.token().is_cancelled());
    }
}
