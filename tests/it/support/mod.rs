//! What the tests start, one way each, and how they look at what they get:
//!
//! * [`TestApp`]: the application in this process (`TestApp::start()`, `TestApp::builder()`);
//! * [`Binary`]: the real binary as a process (`.spawn()` an instance, `.run(args)` a command);
//! * [`backends()`]: the databases a test runs on (a fresh one each; [`Database`]);
//! * a scripted fake upstream ([`FakeLlm`], [`Turn`], [`Step`]) behind every app and instance;
//! * an SSE client ([`Sse`]) and the auditors every stream and Response object are checked with.

mod app;
mod audit;
mod backends;
mod binary;
mod sse;

pub use app::{TestApp, http_tool};
pub use audit::{
    assert_numbering, assert_response_keys, audit_log, describe, is_pause, is_terminal,
};
pub use backends::{Database, backends, run_sql};
pub use binary::{Binary, ConfigFile, Instance, Output, first_listed_key};
pub use fake_llm::{FakeLlm, Step, Turn};
pub use sse::{
    Sse, SseEvent, assert_items_do_not_interleave, done_items, parse_sse, read_sse, read_until_cut,
};

/// Serves `router` on `127.0.0.1:0` for the rest of the test (a tool endpoint, say); its
/// base URL, `http://127.0.0.1:PORT`.
pub async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}
