//! The real `arbiter-console` binary in its line modes, against a real
//! nats-server, with the test playing the coordinator's part by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod approvals;
mod errors;
mod harness;
mod inert;
mod replay;
mod sending;
