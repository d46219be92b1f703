//! The cluster: how the coordinators share the sessions. `intake` reads
//! the two durable consumers and places each message (on this coordinator's
//! session, or forwarded), `lease` says who owns a session (fenced writes to
//! the lease bucket), `forward` hands a message to its owner, and
//! `retention` is the sweeper that archives and deletes idle sessions.

pub(crate) mod forward;
pub(crate) mod intake;
pub(crate) mod lease;
mod legacy;
mod payload;
pub mod retention;
