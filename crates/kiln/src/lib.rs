//! kiln: a self-hosted, Lambda-compatible serverless platform.
//!
//! Request path: [`api`] (HTTP, SigV4) → [`controller`] (registry, scheduling, async queue) →
//! [`agent`] (instances in sandboxes, through the `kiln-sandbox` crate) → [`runtime`] (what each
//! language needs inside the sandbox).

pub mod agent;
pub mod api;
pub mod auth;
pub mod burst;
pub mod cli;
pub mod cluster;
pub mod console;
pub mod controller;
pub mod function;
pub mod history;
pub mod http_event;
pub mod logs;
pub mod metrics;
pub mod objects;
pub mod predict;
pub mod runtime;
pub mod schedules;
pub mod server;
pub mod session;
pub mod sync;
pub mod zip_util;

/// An error and its sources on one line, `: `-separated: many errors' own message is only the
/// outermost part (tonic's is "transport error", hyper's "error trying to connect").
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
