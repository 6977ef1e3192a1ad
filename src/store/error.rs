//! What can go wrong in the store: one error type at its boundary, so that nothing above it
//! matches on sqlx's. A failure the database reported keeps the error it came from
//! ([`Cause`]): `source()` is the `sqlx::Error` itself, and a log line can show the whole chain.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::state::RunState;

#[derive(Clone, Debug)]
pub enum StoreError {
    NotFound,
    /// A compare-and-set found the run in another state, or under another lease.
    Conflict {
        actual: RunState,
    },
    Corrupt(Cause),
    /// Another request already holds this idempotency key.
    KeyTaken,
    /// Another response holds the conversation (one at a time).
    Locked,
    /// The database cannot be reached or is overloaded: trying again later may work.
    Unavailable(Cause),
    /// The database refused the statement or its data: trying it again will not help.
    Rejected(Cause),
}

/// Why the database (or the data in it) failed: the text the error shows and the error it came
/// from, if any. Cloning it is cheap (a batch's error goes to every run of the batch).
#[derive(Clone)]
pub struct Cause {
    /// The text shown; `None`: the source's own.
    message: Option<Arc<str>>,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl Cause {
    /// A cause told in words, with no error beneath it.
    pub fn new(message: impl Into<Arc<str>>) -> Cause {
        Cause {
            message: Some(message.into()),
            source: None,
        }
    }

    /// The error itself, shown as it shows itself.
    pub fn of(source: impl Error + Send + Sync + 'static) -> Cause {
        Cause {
            message: None,
            source: Some(Arc::new(source)),
        }
    }

    /// The same error, shown as `message` says it.
    pub fn saying(self, message: impl Into<Arc<str>>) -> Cause {
        Cause {
            message: Some(message.into()),
            ..self
        }
    }
}

impl From<Box<dyn Error + Send + Sync>> for Cause {
    /// An error already boxed (a database's own, out of sqlx), shown as it shows itself.
    fn from(source: Box<dyn Error + Send + Sync>) -> Cause {
        Cause {
            message: None,
            source: Some(Arc::from(source)),
        }
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::new(message)
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause::new(message)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.message, &self.source) {
            (Some(message), _) => f.write_str(message),
            (None, Some(source)) => source.fmt(f),
            (None, None) => Ok(()),
        }
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            None => fmt::Debug::fmt(&self.to_string(), f),
            Some(source) => f
                .debug_struct("Cause")
                .field("message", &self.message)
                .field("source", source)
                .finish(),
        }
    }
}

impl StoreError {
    /// Whether the same write may succeed if tried again.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// `Unavailable`, told in words.
    pub fn unavailable(message: impl Into<Arc<str>>) -> StoreError {
        StoreError::Unavailable(Cause::new(message))
    }

    /// `Rejected`, told in words.
    pub fn rejected(message: impl Into<Arc<str>>) -> StoreError {
        StoreError::Rejected(Cause::new(message))
    }

    /// `Corrupt`, told in words.
    pub fn corrupt(message: impl Into<Arc<str>>) -> StoreError {
        StoreError::Corrupt(Cause::new(message))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound => f.write_str("not found"),
            StoreError::Conflict { actual } => write!(f, "conflict: the run is {actual:?}"),
            StoreError::Corrupt(cause) => write!(f, "stored data is invalid: {cause}"),
            StoreError::KeyTaken => f.write_str("the idempotency key is taken"),
            StoreError::Locked => f.write_str("another response holds the conversation"),
            StoreError::Unavailable(cause) => write!(f, "database unavailable: {cause}"),
            StoreError::Rejected(cause) => write!(f, "database error: {cause}"),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Corrupt(cause)
            | StoreError::Unavailable(cause)
            | StoreError::Rejected(cause) => {
                let source: &(dyn Error + 'static) = cause.source.as_deref()?;
                Some(source)
            }
            StoreError::NotFound
            | StoreError::Conflict { .. }
            | StoreError::KeyTaken
            | StoreError::Locked => None,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(Cause::of(e))
            }
            sqlx::Error::Database(ref db) if !transient_code(db.code().as_deref()) => {
                StoreError::Rejected(Cause::of(e))
            }
            sqlx::Error::Encode(_)
            | sqlx::Error::TypeNotFound { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::Configuration(_)
            | sqlx::Error::Migrate(_) => StoreError::Rejected(Cause::of(e)),
            other => StoreError::Unavailable(Cause::of(other)),
        }
    }
}

/// Database error codes that a retry may get past: PostgreSQL's connection failures (class
/// 08), serialization failures and deadlocks (40), lack of resources (53) and an operator
/// stopping the server (57), all five characters long; SQLite's busy and locked (5 and 6,
/// with their extended codes in the high bits), shorter numbers.
pub(super) fn transient_code(code: Option<&str>) -> bool {
    match code {
        Some(code) if code.len() == 5 => ["08", "40", "53", "57"]
            .iter()
            .any(|class| code.starts_with(class)),
        Some(code) => code.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6)),
        None => false,
    }
}

/// A database cannot hold U+0000 in a text value (PostgreSQL refuses it): a key that holds one
/// names nothing stored, so it is not looked up at all.
pub(super) fn findable(key: &str) -> Result<(), StoreError> {
    if key.contains('\0') {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_keeps_the_sqlx_error_as_its_source_and_its_text() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = StoreError::from(sqlx::Error::Io(io));
        assert!(error.is_transient());
        assert_eq!(
            error.to_string(),
            "database unavailable: error communicating with database: refused"
        );
        let source = error.source().unwrap();
        let sqlx = source.downcast_ref::<sqlx::Error>().unwrap();
        assert!(matches!(sqlx, sqlx::Error::Io(_)));
        // The sqlx error's own cause is one step further down, cloned or not.
        let below = error
            .clone()
            .source()
            .unwrap()
            .source()
            .unwrap()
            .to_string();
        assert_eq!(below, "refused");
    }

    #[test]
    fn an_error_told_in_words_shows_them_and_has_no_source() {
        let error = StoreError::unavailable("the event writer has stopped");
        assert_eq!(
            error.to_string(),
            "database unavailable: the event writer has stopped"
        );
        assert!(error.source().is_none());
        assert_eq!(
            format!("{error:?}"),
            "Unavailable(\"the event writer has stopped\")"
        );
        let retold = Cause::of(std::io::Error::other("inner")).saying("outer");
        assert_eq!(
            StoreError::Rejected(retold.clone()).to_string(),
            "database error: outer"
        );
        assert_eq!(
            StoreError::Rejected(retold).source().unwrap().to_string(),
            "inner"
        );
    }
}
