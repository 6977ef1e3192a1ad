//! Wall-clock instants as the service stores and compares them: milliseconds since the Unix
//! epoch. A type of its own so that seconds, milliseconds and durations cannot be mixed up.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    sqlx::Type,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct UnixMillis(i64);

impl UnixMillis {
    /// Later than any instant the service meets: "every lease has run out by then".
    pub const MAX: UnixMillis = UnixMillis(i64::MAX);

    pub fn now() -> UnixMillis {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        UnixMillis(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    pub const fn from_millis(millis: i64) -> UnixMillis {
        UnixMillis(millis)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch, as the wire's timestamps count.
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    pub fn plus(self, duration: Duration) -> UnixMillis {
        UnixMillis(self.0.saturating_add(millis(duration)))
    }

    pub fn minus(self, duration: Duration) -> UnixMillis {
        UnixMillis(self.0.saturating_sub(millis(duration)))
    }

    /// The UTC day it falls on, `YYYY-MM-DD`.
    pub fn utc_day(self) -> String {
        chrono::DateTime::from_timestamp_millis(self.0)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default()
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_move_by_durations_without_overflowing_and_count_whole_seconds() {
        let t = UnixMillis::from_millis(1_999);
        assert_eq!(t.plus(Duration::from_millis(1)).as_millis(), 2_000);
        assert_eq!(t.minus(Duration::from_secs(2)).as_millis(), -1);
        assert_eq!(t.as_secs(), 1);
        assert_eq!(
            UnixMillis::MAX.plus(Duration::from_secs(1)),
            UnixMillis::MAX
        );
        assert!(UnixMillis::now() > UnixMillis::from_millis(1_700_000_000_000));
    }
}
