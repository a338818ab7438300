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
