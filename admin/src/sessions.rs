//! `arbiter-admin sessions list|archive|delete`: the sessions the sessions
//! bucket knows, archived (log and records into one compressed object,
//! still readable by the console) or deleted. A live session (an Arbiter
//! turn in flight, an Orchestrator active) is refused unless forced. The
//! work is `arbiter_bus::retention`, which the coordinator's sweeper uses too.

use arbiter_bus::retention::{self, Report};
use arbiter_protocol::SessionStatus;
use arbiter_protocol::roles::NatsRole;

/// Connects as the admin and opens the bus.
async fn open(nats: &arbiter_bus::NatsOptions) -> arbiter_bus::Result<arbiter_bus::Bus> {
    let conn =
        arbiter_bus::connect_with(nats, "arbiter-admin", arbiter_bus::Reach::FailFast).await?;
    arbiter_bus::Bus::open(conn, NatsRole::Admin, arbiter_bus::Reach::FailFast).await
}

/// Every session, newest activity first.
pub async fn list(nats: &arbiter_bus::NatsOptions) -> retention::Result<Vec<SessionStatus>> {
    let bus = open(nats).await?;
    Ok(retention::list(&bus).await?)
}

/// Archives one session.
pub async fn archive(
    nats: &arbiter_bus::NatsOptions,
    session_id: &str,
    force: bool,
) -> retention::Result<Report> {
    let bus = open(nats).await?;
    retention::archive(&bus, session_id, force).await
}

/// Deletes one session (live subjects, archive, status).
pub async fn delete(
    nats: &arbiter_bus::NatsOptions,
    session_id: &str,
    force: bool,
) -> retention::Result<Report> {
    let bus = open(nats).await?;
    retention::delete(&bus, session_id, force).await
}

/// One line of `sessions list`: id, state, last activity, log entries.
pub fn row(status: &SessionStatus) -> String {
    let state = match (&status.archived_at, retention::live(status)) {
        (Some(at), _) => format!("archived {}", at.format("%Y-%m-%d %H:%M")),
        (None, Some(_)) => "live".to_owned(),
        (None, None) => "idle".to_owned(),
    };
    format!(
        "{}  {:<24}  last active {}  {} log entries",
        status.session_id,
        state,
        status.at.format("%Y-%m-%d %H:%M:%S"),
        status.last_seq
    )
}
