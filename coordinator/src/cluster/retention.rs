//! The retention sweeper: sessions idle past `--archive-after` are archived
//! (kept readable, compacted), archived ones older than `--delete-after`
//! deleted. The work itself is `arbiter_bus::retention`, which
//! `arbiter-admin sessions` uses too. The sweeper also keeps the set of
//! archived sessions the intake refuses human lines for.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_bus::retention::{self, Limits, RetentionError};
use chrono::Utc;

use crate::Shared;

/// Sessions idle this long are archived, by default.
pub const DEFAULT_ARCHIVE_AFTER: Duration = Duration::from_secs(30 * 86_400);
/// How often the sweeper looks, by default.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What the coordinator keeps and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// The limits every stream gets at start (an explicit update).
    pub limits: Limits,
    /// Idle sessions are archived after this long; `None`: never.
    pub archive_after: Option<Duration>,
    /// Archived sessions are deleted after this long; `None`: never.
    pub delete_after: Option<Duration>,
    /// How often the sweeper looks.
    pub sweep_every: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            archive_after: Some(DEFAULT_ARCHIVE_AFTER),
            delete_after: None,
            sweep_every: DEFAULT_SWEEP_EVERY,
        }
    }
}

/// Sessions known to be archived: their human lines are dropped.
#[derive(Default)]
pub(crate) struct Archived(Mutex<HashSet<String>>);

impl Archived {
    pub(crate) fn contains(&self, session_id: &str) -> bool {
        self.0
            .lock()
            .map(|set| set.contains(session_id))
            .unwrap_or(false)
    }

    pub(crate) fn insert(&self, session_id: &str) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(session_id.to_owned());
        }
    }

    fn replace(&self, ids: HashSet<String>) {
        if let Ok(mut set) = self.0.lock() {
            *set = ids;
        }
    }
}

/// Runs the sweeper until the task is aborted.
pub(crate) async fn sweep(shared: Arc<Shared>) {
    let config = shared.config.retention.clone();
    loop {
        if let Err(e) = once(&shared, &config).await {
            tracing::warn!(error = %e, "retention sweep failed; trying again later");
        }
        tokio::time::sleep(config.sweep_every).await;
    }
}

/// One pass over every session's status.
async fn once(shared: &Shared, config: &Retention) -> arbiter_bus::Result<()> {
    let bus = &shared.bus;
    let now = Utc::now();
    let age = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    let mut archived = HashSet::new();
    for status in retention::list(bus).await? {
        let id = status.session_id.clone();
        if let Some(at) = status.archived_at {
            if config.delete_after.is_some_and(|d| now - at >= age(d)) {
                match retention::delete(bus, &id, false).await {
                    Ok(_) => {
                        tracing::info!(session.id = %id, "archived session deleted (--delete-after)")
                    }
                    Err(e) => {
                        tracing::warn!(session.id = %id, error = %e, "could not delete an archived session")
                    }
                }
            }
            archived.insert(id);
            continue;
        }
        let idle = config
            .archive_after
            .is_some_and(|d| now - status.at >= age(d));
        if !idle || retention::live(&status).is_some() {
            continue;
        }
        match retention::archive(bus, &id, false).await {
            Ok(report) => {
                tracing::info!(session.id = %id, entries = report.log_entries, records = report.records, live_bytes = report.live_bytes, archive_bytes = report.archive_bytes, "idle session archived");
                archived.insert(id);
            }
            Err(RetentionError::Live { .. } | RetentionError::Archived(_)) => {}
            Err(e) => {
                tracing::warn!(session.id = %id, error = %e, "could not archive an idle session")
            }
        }
    }
    shared.archived.replace(archived);
    Ok(())
}
