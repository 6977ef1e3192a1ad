//! switchyard: an HTTP service for tool-calling LLM runs with a Responses-style API.
//!
//! A request flows api → engine → (llm, store); events flow engine → hub → store and
//! subscribers → api (SSE).

pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod engine;
pub mod error;
pub mod llm;
pub mod metrics;
pub mod protocol;
pub mod redact;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod tools;
