//! A provider that fails is tried again, and a model can fall back to another: retries with
//! exponential backoff and jitter for a connection that fails, a 429 and a 5xx, only before the
//! first streamed byte (what was streamed is never asked for again, so no output is
//! duplicated), honouring the upstream's `Retry-After`; a per-provider limit of requests at
//! once; a fallback model on another provider when the first fails before it streamed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::{LlmClient, LlmError, ModelRequest, ModelStream};

/// How a provider's requests are retried.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// The first wait; each next one doubles, up to `max`.
    pub initial: Duration,
    pub max: Duration,
}

/// A provider's client with its retries and its limit of requests at once.
pub struct Resilient {
    inner: Arc<dyn LlmClient>,
    provider: String,
    retry: RetryPolicy,
    /// Requests (streams) at once; `None`: unlimited.
    slots: Option<Arc<Semaphore>>,
    /// How long a request may wait for a slot.
    slot_wait: Duration,
}

impl Resilient {
    pub fn new(
        inner: Arc<dyn LlmClient>,
        provider: &str,
        retry: RetryPolicy,
        max_concurrent: Option<usize>,
        slot_wait: Duration,
    ) -> Resilient {
        Resilient {
            inner,
            provider: provider.to_string(),
            retry,
            slots: max_concurrent.map(|n| Arc::new(Semaphore::new(n.max(1)))),
            slot_wait,
        }
    }

    /// The wait before attempt `attempt` (1 = the first retry), or `None` when the failure
    /// is not worth another attempt.
    fn backoff(&self, attempt: u32, error: &LlmError) -> Option<Duration> {
        if attempt > self.retry.retries {
            return None;
        }
        let retry_after = match error {
            LlmError::Connect(_) => None,
            LlmError::Status {
                status,
                retry_after,
                ..
            } if *status == 429 || *status >= 500 => *retry_after,
            _ => return None,
        };
        let exponential = self
            .retry
            .initial
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(self.retry.max);
        // Full jitter: a wait anywhere up to the exponential one, so clients that failed
        // together do not come back together.
        let jittered = exponential.mul_f64(random_fraction());
        match retry_after {
            // Asked to wait longer than this service waits: give up now, and say so.
            Some(wait) if wait > self.retry.max => None,
            Some(wait) => Some(wait.max(jittered)),
            None => Some(jittered),
        }
    }
}

/// A model turn being streamed: holds its provider's request slot, and records the turn's
/// length when its stream is dropped (ended, failed or abandoned).
struct TurnInFlight {
    provider: String,
    model: String,
    started: Instant,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for TurnInFlight {
    fn drop(&mut self) {
        crate::metrics::upstream_turn(&self.provider, &self.model, self.started.elapsed());
    }
}

/// A number in [0, 1), from the operating system's randomness.
fn random_fraction() -> f64 {
    (uuid::Uuid::new_v4().as_u128() as u64 >> 11) as f64 / (1u64 << 53) as f64
}

#[async_trait]
impl LlmClient for Resilient {
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, LlmError> {
        let permit = match &self.slots {
            None => None,
            Some(slots) => {
                let acquire = slots.clone().acquire_owned();
                match tokio::time::timeout(self.slot_wait, acquire).await {
                    Ok(Ok(permit)) => Some(permit),
                    _ => {
                        return Err(LlmError::Timeout {
                            what: "free a request slot (its provider's max_concurrent_requests)",
                            after: self.slot_wait,
                        });
                    }
                }
            }
        };
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            match self.inner.stream(request).await {
                Ok(stream) => {
                    // The slot is held, and the turn timed, until the stream is dropped.
                    let turn = TurnInFlight {
                        provider: self.provider.clone(),
                        model: request.model.clone(),
                        started,
                        _permit: permit,
                    };
                    return Ok(Box::pin(stream.map(move |event| {
                        if let Err(error) = &event {
                            crate::metrics::upstream_error(&turn.provider, error.code());
                        }
                        event
                    })));
                }
                Err(error) => {
                    crate::metrics::upstream_error(&self.provider, error.code());
                    attempt += 1;
                    let Some(wait) = self.backoff(attempt, &error) else {
                        let took = started.elapsed();
                        crate::metrics::upstream_turn(&self.provider, &request.model, took);
                        return Err(error);
                    };
                    tracing::warn!(
                        provider = %self.provider,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        error = %crate::redact::urls_in(&error.to_string()),
                        "the upstream model failed before streaming; trying again"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// A model whose provider failed before it streamed is asked of another model (on another
/// provider). A request the upstream refused as the request's fault (400, 413, 422) is not:
/// the fallback would refuse the same body the same way (a parameter, a tool schema, a
/// context that a fallback, usually the smaller model, cannot hold either), and the client is
/// told the real reason. A model the provider does not have (`model_not_found`) is a fault of
/// the provider's configuration, and is asked of the fallback like any other failure.
pub struct Fallback {
    pub primary: Arc<dyn LlmClient>,
    pub fallback: Arc<dyn LlmClient>,
    /// The model asked of the fallback.
    pub model: String,
}

#[async_trait]
impl LlmClient for Fallback {
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, LlmError> {
        match self.primary.stream(request).await {
            Ok(stream) => Ok(stream),
            Err(error) if refused_for_itself(&error) => Err(error),
            Err(error) => {
                tracing::warn!(
                    model = %request.model,
                    fallback = %self.model,
                    error = %crate::redact::urls_in(&error.to_string()),
                    "the upstream model failed; asking its fallback"
                );
                let mut request = request.clone();
                request.model = self.model.clone();
                self.fallback.stream(&request).await
            }
        }
    }
}

/// Whether the upstream refused the request for what it asks, not for the model it names.
fn refused_for_itself(error: &LlmError) -> bool {
    error
        .refusal()
        .is_some_and(|refusal| refusal.code.as_deref() != Some("model_not_found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Never;

    #[async_trait]
    impl LlmClient for Never {
        async fn stream(&self, _: &ModelRequest) -> Result<ModelStream, LlmError> {
            Err(LlmError::Connect("down".into()))
        }
    }

    fn resilient(retries: u32) -> Resilient {
        let retry = RetryPolicy {
            retries,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        Resilient::new(Arc::new(Never), "p", retry, None, Duration::from_secs(1))
    }

    #[test]
    fn retries_back_off_with_jitter_and_only_for_what_may_pass() {
        let r = resilient(3);
        let status = |status: u16, retry_after: Option<u64>| LlmError::Status {
            status,
            body: Default::default(),
            retry_after: retry_after.map(Duration::from_secs),
        };
        for attempt in 1..=3 {
            let wait = r
                .backoff(attempt, &LlmError::Connect(String::new()))
                .unwrap();
            assert!(
                wait <= Duration::from_millis(100 << (attempt - 1)),
                "{wait:?}"
            );
        }
        assert!(r.backoff(4, &LlmError::Connect(String::new())).is_none());
        assert!(r.backoff(1, &status(500, None)).is_some());
        assert!(
            r.backoff(1, &status(400, None)).is_none(),
            "a client error is not retried"
        );
        assert!(r.backoff(1, &LlmError::Protocol(String::new())).is_none());
        assert_eq!(
            r.backoff(1, &status(429, Some(1))),
            Some(Duration::from_secs(1))
        );
        assert!(
            r.backoff(1, &status(429, Some(60))).is_none(),
            "longer than this service waits"
        );
    }
}
