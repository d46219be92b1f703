//! The secure deployment end to end: a real nats-server from the config
//! `arbiter-admin init` writes (TLS verifying clients, JWT operator mode),
//! every process on its own role's credential.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod direct;

mod security {
    pub mod deleted;
    pub mod permissions;
    pub mod refusals;
    pub mod remote;
}
