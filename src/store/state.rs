//! The run state machine (SPEC §3) as one table, with the lease each change needs and leaves.
//!
//! Every change of a run's state or lease is a compare-and-set in the store, and the store
//! changes them only through a [`Transition`]: a row of this table. The named transitions are
//! looked up in the table when the program is compiled (a name that is not in it does not
//! compile); a run's own ending is looked up when it happens, and a pair the table does not
//! hold is refused before the database is asked.

/// The persisted state of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunState {
    Queued,
    InProgress,
    RequiresAction,
    Completed,
    Failed,
    Incomplete,
    Cancelled,
    Expired,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Queued,
        RunState::InProgress,
        RunState::RequiresAction,
        RunState::Completed,
        RunState::Failed,
        RunState::Incomplete,
        RunState::Cancelled,
        RunState::Expired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::InProgress => "in_progress",
            RunState::RequiresAction => "requires_action",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Incomplete => "incomplete",
            RunState::Cancelled => "cancelled",
            RunState::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A state the run never leaves.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Completed
                | RunState::Failed
                | RunState::Incomplete
                | RunState::Cancelled
                | RunState::Expired
        )
    }
}

/// What the run's lease must be for a change to apply. Only a running run holds a lease:
/// queued and paused runs hold none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Nobody holds it (the run is queued or waits for the client).
    Unheld,
    /// The caller holds it (the run's own steps and endings, and handing it over).
    HeldByCaller,
    /// Its holder let it run out (stopped without handing it over, or released it): anyone
    /// may take the run over.
    RunOut,
}

/// Who holds the lease after the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseAfter {
    Caller,
    Nobody,
}

/// A change the table allows: from a state to a state, under a guard on the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    from: RunState,
    to: RunState,
    guard: Guard,
    lease: LeaseAfter,
}

use Guard::*;
use LeaseAfter::*;
use RunState::*;

/// Every change of state or lease the service makes.
pub const TABLE: &[Transition] = &[
    // A worker claims a queued run.
    row(Queued, InProgress, Unheld, Caller),
    // The client cancels it before it starts; or it cannot start (its model or tools are gone).
    row(Queued, Cancelled, Unheld, Nobody),
    row(Queued, Failed, Unheld, Nobody),
    // Another instance takes over a run whose lease ran out; its holder hands it over.
    row(InProgress, InProgress, RunOut, Caller),
    row(InProgress, InProgress, HeldByCaller, Nobody),
    // The run's own endings.
    row(InProgress, RequiresAction, HeldByCaller, Nobody),
    row(InProgress, Completed, HeldByCaller, Nobody),
    row(InProgress, Failed, HeldByCaller, Nobody),
    row(InProgress, Incomplete, HeldByCaller, Nobody),
    row(InProgress, Cancelled, HeldByCaller, Nobody),
    // A paused run: resumed with its outputs, completed by a continuation, cancelled, expired.
    row(RequiresAction, InProgress, Unheld, Caller),
    row(RequiresAction, Completed, Unheld, Nobody),
    row(RequiresAction, Cancelled, Unheld, Nobody),
    row(RequiresAction, Expired, Unheld, Nobody),
];

const fn row(from: RunState, to: RunState, guard: Guard, lease: LeaseAfter) -> Transition {
    Transition {
        from,
        to,
        guard,
        lease,
    }
}

impl Transition {
    pub const CLAIM: Transition = Transition::named(Queued, InProgress, Unheld);
    pub const CANCEL_QUEUED: Transition = Transition::named(Queued, Cancelled, Unheld);
    pub const FAIL_QUEUED: Transition = Transition::named(Queued, Failed, Unheld);
    pub const TAKE_OVER: Transition = Transition::named(InProgress, InProgress, RunOut);
    pub const HAND_OVER: Transition = Transition::named(InProgress, InProgress, HeldByCaller);
    pub const RESUME: Transition = Transition::named(RequiresAction, InProgress, Unheld);
    pub const CONTINUE: Transition = Transition::named(RequiresAction, Completed, Unheld);
    pub const CANCEL_PAUSED: Transition = Transition::named(RequiresAction, Cancelled, Unheld);
    pub const EXPIRE: Transition = Transition::named(RequiresAction, Expired, Unheld);

    /// The row for `from → to` under `guard`; a name missing from the table fails the build.
    const fn named(from: RunState, to: RunState, guard: Guard) -> Transition {
        match Transition::find(from, to, guard) {
            Some(transition) => transition,
            None => panic!("a named transition is missing from the table"),
        }
    }

    const fn find(from: RunState, to: RunState, guard: Guard) -> Option<Transition> {
        let mut i = 0;
        while i < TABLE.len() {
            let t = TABLE[i];
            if t.from as u8 == from as u8 && t.to as u8 == to as u8 && t.guard as u8 == guard as u8
            {
                return Some(t);
            }
            i += 1;
        }
        None
    }

    /// A change of a run nobody holds (queued or paused) from `from` to `to`, if the table has
    /// it.
    pub fn unheld(from: RunState, to: RunState) -> Option<Transition> {
        Transition::find(from, to, Unheld)
    }

    /// A running run's own ending in `to`, if the table has it.
    pub fn ending(to: RunState) -> Option<Transition> {
        Transition::find(InProgress, to, HeldByCaller).filter(|t| t.to != InProgress)
    }

    pub const fn from(self) -> RunState {
        self.from
    }

    pub const fn to(self) -> RunState {
        self.to
    }

    pub const fn guard(self) -> Guard {
        self.guard
    }

    pub const fn lease(self) -> LeaseAfter {
        self.lease
    }
}

/// Whether the table has a way from `from` to `to`.
pub fn allowed(from: RunState, to: RunState) -> bool {
    TABLE.iter().any(|t| t.from == from && t.to == to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_of_states_is_allowed_exactly_when_the_spec_lists_it() {
        // SPEC §3, plus in_progress → in_progress: the lease moving to another instance.
        let spec: &[(RunState, &[RunState])] = &[
            (Queued, &[InProgress, Cancelled, Failed]),
            (
                InProgress,
                &[
                    InProgress,
                    RequiresAction,
                    Completed,
                    Failed,
                    Incomplete,
                    Cancelled,
                ],
            ),
            (RequiresAction, &[InProgress, Completed, Cancelled, Expired]),
            (Completed, &[]),
            (Failed, &[]),
            (Incomplete, &[]),
            (Cancelled, &[]),
            (Expired, &[]),
        ];
        for from in RunState::ALL {
            let allowed_to = spec
                .iter()
                .find(|(state, _)| *state == from)
                .map(|(_, to)| *to)
                .unwrap_or_default();
            for to in RunState::ALL {
                assert_eq!(
                    allowed(from, to),
                    allowed_to.contains(&to),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn final_states_have_no_way_out() {
        for from in RunState::ALL.into_iter().filter(|s| s.is_final()) {
            assert!(RunState::ALL.into_iter().all(|to| !allowed(from, to)));
        }
    }

    #[test]
    fn only_a_running_run_holds_a_lease() {
        for t in TABLE {
            let held_before = t.guard != Unheld;
            assert_eq!(held_before, t.from == InProgress, "{t:?}");
            if t.lease == Caller {
                assert_eq!(t.to, InProgress, "{t:?}");
            }
        }
    }

    #[test]
    fn a_run_ends_only_under_its_own_lease() {
        for to in RunState::ALL {
            match Transition::ending(to) {
                Some(t) => {
                    assert!(to.is_final() || to == RequiresAction, "{t:?}");
                    assert_eq!(t.guard(), HeldByCaller);
                }
                None => assert!(matches!(to, Queued | InProgress | Expired), "{to:?}"),
            }
        }
    }
}
