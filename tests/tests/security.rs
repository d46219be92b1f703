//! The secure deployment end to end: a real nats-server from the config
//! `arbiter-admin init` writes (TLS verifying clients, JWT operator mode),
//! every process on its own role's credential.

pub mod deleted;
pub mod flood;
pub mod permissions;
pub mod plaintext;
pub mod reference_worker;
pub mod refusals;
pub mod relay;
pub mod remote;
