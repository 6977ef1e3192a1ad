//! The run state machine (SPEC §3) as one table. Every change of state goes through
//! [`transition_allowed`] and then a compare-and-set in the store; a transition the table
//! refuses is reported as an error, never a crash.

use crate::store::{RunState, RunStore, RunUpdate, StoreError};

/// `(from, to)` pairs the service may perform.
pub const TRANSITIONS: &[(RunState, RunState)] = &[
    (RunState::Queued, RunState::InProgress),
    (RunState::Queued, RunState::Cancelled),
    (RunState::Queued, RunState::Failed),
    (RunState::InProgress, RunState::RequiresAction),
    (RunState::InProgress, RunState::Completed),
    (RunState::InProgress, RunState::Failed),
    (RunState::InProgress, RunState::Incomplete),
    (RunState::InProgress, RunState::Cancelled),
    (RunState::RequiresAction, RunState::InProgress),
    (RunState::RequiresAction, RunState::Completed),
    (RunState::RequiresAction, RunState::Cancelled),
    (RunState::RequiresAction, RunState::Expired),
];

pub fn transition_allowed(from: RunState, to: RunState) -> bool {
    TRANSITIONS.contains(&(from, to))
}

/// The one way the engine changes a run's state: the table first, then the store's
/// compare-and-set. A refused transition comes back as `Conflict` with the state the run is
/// in, exactly like a lost compare-and-set — callers handle both as "the run moved on".
pub async fn transition(
    store: &dyn RunStore,
    id: &str,
    from: RunState,
    to: RunState,
    update: &RunUpdate<'_>,
) -> Result<(), StoreError> {
    check(from, to).inspect_err(|_| {
        tracing::error!(response_id = %id, from = from.as_str(), to = to.as_str(), "transition refused by the state table");
    })?;
    store.transition(id, from, to, update).await
}

/// The table's verdict on a transition, as the store would report a lost compare-and-set.
pub fn check(from: RunState, to: RunState) -> Result<(), StoreError> {
    if transition_allowed(from, to) {
        Ok(())
    } else {
        Err(StoreError::Conflict { actual: from })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_of_states_is_allowed_exactly_when_the_spec_lists_it() {
        use RunState::*;
        let spec: &[(RunState, &[RunState])] = &[
            (Queued, &[InProgress, Cancelled, Failed]),
            (
                InProgress,
                &[RequiresAction, Completed, Failed, Incomplete, Cancelled],
            ),
            (RequiresAction, &[InProgress, Completed, Cancelled, Expired]),
            (Completed, &[]),
            (Failed, &[]),
            (Incomplete, &[]),
            (Cancelled, &[]),
            (Expired, &[]),
        ];
        for from in RunState::ALL {
            let allowed = spec
                .iter()
                .find(|(state, _)| *state == from)
                .map(|(_, to)| *to)
                .unwrap_or_default();
            for to in RunState::ALL {
                assert_eq!(
                    transition_allowed(from, to),
                    allowed.contains(&to),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn final_states_have_no_way_out() {
        for from in RunState::ALL.into_iter().filter(|s| s.is_final()) {
            assert!(
                RunState::ALL
                    .into_iter()
                    .all(|to| !transition_allowed(from, to))
            );
        }
    }
}
