//! The service's integration tests, in one binary: a module per subject, and `support` for
//! what they start (the application in this process, the real binary, databases, a fake
//! upstream) and what they check every stream with. `cargo test --test it faults::` runs one
//! subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod api;
mod auth;
mod background;
mod cli;
mod clients;
mod config;
mod conversations;
mod crash;
mod faults;
mod hostile;
mod inspector;
mod lifecycle;
mod mcp;
mod openapi;
mod operate;
mod pause;
mod reasoning;
mod replicas;
mod schema;
mod store_contract;
mod text_tools;
mod tools;
mod traces;
mod upstream;
