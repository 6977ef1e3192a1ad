//! What every handler shares: the engine, the authenticator and the serving settings.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Authenticator;
use crate::engine::Engine;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub auth: Arc<Authenticator>,
    pub body_limit: usize,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    pub heartbeat: Duration,
    /// The run inspector's switches.
    pub ui: crate::config::UiConfig,
    /// Set as shutdown begins: `/readyz` answers 503 from then on.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}
