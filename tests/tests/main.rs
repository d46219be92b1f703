//! Arbiter's end-to-end tests, as one test binary (`e2e`): each module is
//! one subject (its `//!` line says what it shows), over real nats-server
//! processes, the real binaries and mock model servers. One binary links
//! once instead of forty times; nextest still runs every test in a process
//! of its own, so no test shares a process with another. Run one module
//! with `scripts/test -E 'test(/^failover::/)'`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared by the modules below.
mod common;
mod direct;
mod sandbox;

mod approvals;
mod approvals_worker;
mod arbiter_handoff;
mod bad_input;
mod bench;
mod binaries;
mod budget;
mod checkpoints;
mod claude_code;
mod cluster;
mod codex;
mod conformance;
mod consensus;
mod console_tui;
mod conversation;
mod coordinators;
mod cost;
mod directed;
mod durability;
mod emergency;
mod evidence;
mod failover;
mod forged;
mod handoff;
mod harness;
mod limits;
mod live_words;
mod mcp_client;
mod mcp_server;
mod memory;
mod providers_e2e;
mod readme;
mod request_budget;
mod retention;
mod roundtrip;
mod routing;
mod runaway;
mod runtime_capacity;
mod runtime_context;
mod runtime_presence;
mod runtime_tools;
mod runtimes;
mod schemas;
mod security;
mod small_model;
mod soak;
// team_budget: decisions tested as table cases in coordinator/src/rules/tests/budget.rs.
mod team_faults;
mod teams;
mod telemetry;
mod web;
mod webhooks;
