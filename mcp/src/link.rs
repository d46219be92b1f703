//! The process's NATS connection, as a console: made in the background at
//! start (and tried again every second until the server answers), then
//! kept by the client, which reconnects by itself. Every read through it
//! has a time limit, so a tool call that needs NATS fails with a sentence
//! instead of hanging when the server is gone.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use arbiter_bus::{Bus, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{SessionStatus, subjects};
use tokio::sync::watch;

/// The name its connection shows in the server's list.
pub const CLIENT_NAME: &str = "arbiter-mcp";
/// How long one NATS operation may take.
pub const OP_WAIT: Duration = Duration::from_secs(5);
/// How long a tool call waits for the first attempt to connect to end
/// (the process may have just started; on a loaded machine a TLS handshake
/// and binding the streams take seconds). A server that refuses at once
/// ends the attempt at once.
const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Pause between attempts to reach NATS.
const RECONNECT: Duration = Duration::from_secs(1);

/// Where the connection is.
#[derive(Clone)]
enum Reached {
    /// Not connected yet; why the last attempt failed, if one did.
    NotYet(Option<String>),
    Up(Box<Bus>),
}

/// The connection and what a tool needs to speak on it.
pub struct Link {
    nats: NatsOptions,
    identity: String,
    reached: watch::Receiver<Reached>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Link {
    /// Starts connecting in the background; returns at once.
    pub fn start(nats: NatsOptions, identity: String) -> Self {
        let (tx, reached) = watch::channel(Reached::NotYet(None));
        let task = tokio::spawn(connect(nats.clone(), tx));
        Self {
            nats,
            identity,
            reached,
            task,
        }
    }

    /// How to connect (a human line's feed opens a connection of its own).
    pub fn nats(&self) -> &NatsOptions {
        &self.nats
    }

    /// The console identity lines go under: the credential's name.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The connection, or why there is none. Until the first attempt has
    /// ended it waits a little for it; after a failed one it answers at once.
    pub async fn bus(&self) -> Result<Bus, String> {
        let mut reached = self.reached.clone();
        let _ = tokio::time::timeout(
            FIRST_CONNECT_WAIT,
            reached.wait_for(|r| !matches!(r, Reached::NotYet(None))),
        )
        .await;
        let url = arbiter_bus::redact_url(&self.nats.url);
        match &*reached.borrow() {
            Reached::Up(bus) => Ok((**bus).clone()),
            Reached::NotYet(None) => Err(format!("NATS at {url} is not reachable yet")),
            Reached::NotYet(Some(why)) => Err(format!("NATS at {url} is not reachable: {why}")),
        }
    }
}

/// Tries to connect until it works, saying each new reason once.
async fn connect(nats: NatsOptions, tx: watch::Sender<Reached>) {
    let mut told: Option<String> = None;
    loop {
        let opened = async {
            let conn = arbiter_bus::connect_with(&nats, CLIENT_NAME, Reach::FailFast).await?;
            Bus::open(conn, NatsRole::Console, Reach::FailFast).await
        };
        match opened.await {
            Ok(bus) => {
                tracing::info!("connected to NATS");
                tx.send_replace(Reached::Up(Box::new(bus)));
                return;
            }
            Err(e) => {
                let why = arbiter_console::inert::one_line(&e.to_string());
                if told.as_ref() != Some(&why) {
                    tracing::warn!(error = %why, "cannot reach NATS yet; trying again every second");
                    told = Some(why.clone());
                }
                tx.send_replace(Reached::NotYet(Some(why)));
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// `op`, given [`OP_WAIT`]; its error, or the wait running out, as one line
/// saying what was being done and that NATS failed it.
pub async fn timed<T, E: Display>(
    what: &str,
    op: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(OP_WAIT, op).await {
        Ok(Ok(value)) => Ok(value),
        // Said as NATS's, whatever the library calls it ("timed out", "no
        // answer within 3s"): the client learns where the trouble is.
        Ok(Err(e)) => Err(format!(
            "{what}: NATS failed it: {}",
            arbiter_console::inert::one_line(&e.to_string())
        )),
        Err(_) => Err(format!(
            "{what}: no answer from NATS within {} s (is it down?)",
            OP_WAIT.as_secs()
        )),
    }
}

/// A session id as a client gave it: a subject token, or why not.
pub fn session_id(id: &str) -> Result<&str, String> {
    let id = id.trim();
    if subjects::is_valid_token(id) {
        Ok(id)
    } else {
        Err(format!(
            "{:?} is not a session id: one is 1 to 64 letters, digits, - or _ \
             (start_session and list_sessions give them)",
            arbiter_console::inert::one_line(id)
        ))
    }
}

/// The session's latest status from the sessions bucket, if it has one.
pub async fn status(bus: &Bus, id: &str) -> Result<Option<SessionStatus>, String> {
    let value = timed(
        &format!("reading the status of session {id}"),
        bus.sessions_kv.get(id),
    )
    .await?;
    let Some(bytes) = value else {
        return Ok(None);
    };
    let key = format!("{}/{id}", subjects::SESSIONS_BUCKET);
    arbiter_bus::decode::<SessionStatus>(&key, &bytes)
        .map(Some)
        .map_err(|e| arbiter_console::inert::one_line(&e.to_string()))
}

/// What the system knows of a session.
pub enum Known {
    /// Its status (a coordinator has published one).
    Status(Box<SessionStatus>),
    /// A log but no status yet (it has just started).
    LogOnly,
}

/// The session if it exists (a status, or at least one log entry), else
/// an error that says so.
pub async fn known(bus: &Bus, id: &str) -> Result<Known, String> {
    if let Some(status) = status(bus, id).await? {
        return Ok(Known::Status(Box::new(status)));
    }
    let first = timed(
        &format!("reading the log of session {id}"),
        arbiter_bus::direct::batch(
            &bus.client,
            Some(&bus.alarms),
            subjects::SESSIONS_STREAM,
            &subjects::session_log(id),
            1,
            1,
        ),
    )
    .await?;
    if first.messages.is_empty() {
        Err(format!(
            "no session {id}: it has no status and no log (start one with start_session; \
             list_sessions shows those there are)"
        ))
    } else {
        Ok(Known::LogOnly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_a_subject_token() {
        assert_eq!(session_id(" s-1_A "), Ok("s-1_A"));
        for bad in ["", "a.b", "a*", "a b", &"x".repeat(65)] {
            let err = session_id(bad).unwrap_err();
            assert!(err.contains("is not a session id"), "{bad:?}: {err}");
        }
    }
}
