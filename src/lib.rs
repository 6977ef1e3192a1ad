//! switchyard: an HTTP service for tool-calling LLM runs with a Responses-style API.
//!
//! A request flows api → engine → (llm, tools) → store; events flow engine → hub → store and
//! subscribers → api (SSE). The route of one streamed `POST /v1/responses`, file by file:
//!
//! 1. **Accept.** `app.rs` binds the listener and serves `api::router` (`api/mod.rs`): a
//!    request id, an access line (`api/access.rs`), the caller from its API key (`auth.rs`).
//! 2. **Parse.** `api/responses.rs` (`create`) reads the body with `api/extract.rs` into
//!    `protocol/request.rs`'s `CreateResponse`; a bad field is a `protocol/field.rs`
//!    `FieldError`, a 400 naming it.
//! 3. **Validate.** `engine/create.rs` (`create_in`): the request's own checks
//!    (`CreateResponse::validate`, limits in `protocol/limits.rs`), replayed items resolved
//!    (`engine/replay.rs`), the chain of `previous_response_id` (`engine/chain.rs`), then
//!    `engine/launch.rs` (`prepare`) routes the model (`llm/router.rs`) and resolves the tools
//!    (`protocol/tools.rs`, `engine/toolset.rs`, the registry in `tools/registry.rs`); paused
//!    runs the request answers are completed (`engine/pause.rs`).
//! 4. **Store.** The Response object is made from the request
//!    (`protocol/response.rs`, `ResponseObject::for_request`); `engine/create.rs`
//!    (`start_new`) hands the new run to the event writer (`engine/hub.rs`), whose next batch
//!    commits it (`store::RunStore::write_batch`, `store/`) while the run starts.
//! 5. **Execute.** `engine/launch.rs` (`launch`) starts the run's task (`engine/run/mod.rs`,
//!    `RunTask::execute`): model turns in `engine/run/turn.rs` through `llm/openai.rs`
//!    (chat completions, streamed), output items and their events in `engine/run/output.rs`
//!    and `engine/emitter.rs`, server tools run by `engine/executor.rs` (`tools/`) and
//!    presented one at a time by `engine/run/present.rs`; every ending, a pause included,
//!    goes through `engine/lifecycle.rs`.
//! 6. **Stream.** Each event is stored by the hub's writer before it is published;
//!    `engine/follow.rs` follows the log (live, or replayed from the store on any replica)
//!    and `api/sse.rs` writes it as Server-Sent Events (`api/websocket.rs` on a socket).
//!
//! A paused run continues through `engine/pause.rs` (`submit_tool_outputs`), a queued one
//! through `engine/maintenance.rs` (claims), an abandoned one through `engine/recovery.rs`:
//! each loads the run and resumes it in `engine/launch.rs`. An error on the way becomes an
//! `engine/error.rs` `EngineError` (an upstream's error reply is read and judged in
//! `llm/refusal.rs` first), then the client's `error.rs` `ApiError`.
//!
//! The run inspector (`/ui`, `api/ui/`) reads and changes runs through the same engine calls:
//! `Engine::list` and `Engine::inspect` for its pages, `submit_tool_outputs` and `cancel` for its
//! forms, `follow` for a live page.

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
pub mod seal;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod tools;
