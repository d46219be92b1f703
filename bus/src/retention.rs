//! Bounded disk: the limits every stream gets (applied by an explicit
//! `STREAM.UPDATE`, since `declare` never changes an existing stream's
//! limits), and a session's archive or deletion. Archiving moves a session's
//! log, its step records and its Orchestrators' records into one compressed
//! object of the archive bucket and purges the live subjects; the session
//! stays readable (`read_archive`). The coordinator's sweeper and
//! `arbiter-admin sessions` both go through here (docs/protocol.md,
//! "Retention").

use std::collections::BTreeSet;
use std::io::{Read, Write};

use arbiter_protocol::{SessionState, SessionStatus, roles, subjects};
use async_nats::jetstream::{self, stream};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Bus, BusError};

/// Bytes a stream may hold by default (each stream, each bucket's stream).
pub const DEFAULT_STREAM_MAX_BYTES: i64 = 1024 * 1024 * 1024;
/// Messages kept per subject of `ARBITER_ORCH` (inputs and control of one
/// Orchestrator; its outputs are records, in `ARBITER_ORCH_STATE`): older ones were taken long ago, and the newest, which
/// restores read for the next seq, is always kept.
pub const ORCH_MSGS_PER_SUBJECT: i64 = 1_000;

/// The limits applied to every stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `max_bytes` of each stream and bucket stream.
    pub stream_max_bytes: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            stream_max_bytes: DEFAULT_STREAM_MAX_BYTES,
        }
    }
}

/// Why a retention operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("no session {0:?} (arbiter-admin sessions list shows them)")]
    NoSuchSession(String),
    #[error("session {id} is live ({why}); wait until it is idle, or pass --force")]
    Live { id: String, why: String },
    #[error("session {0} is already archived")]
    Archived(String),
    #[error("the archive of session {id} cannot be read: {message}")]
    Unreadable { id: String, message: String },
}

pub type Result<T, E = RetentionError> = std::result::Result<T, E>;

/// `config` with the limits of its stream: records (sessions, state,
/// Orchestrator state, summonses) refuse new writes when full (`discard:
/// new`: loud, never a silent loss of a record); `ARBITER_ORCH` keeps the
/// newest [`ORCH_MSGS_PER_SUBJECT`] per subject. `ARBITER_ORCH_STATE` allows
/// the `Nats-Rollup` header an ended Orchestrator's snapshot carries. No
/// stream gets a `max_age`: records must outlive the sessions they hold,
/// however long those idle (and the 120 s duplicate window forbids any
/// `max_age` under 120 s); idle sessions leave by archive or delete.
pub fn limited(mut config: stream::Config, limits: &Limits) -> stream::Config {
    config.max_bytes = limits.stream_max_bytes;
    config.discard = stream::DiscardPolicy::New;
    if config.name == subjects::ORCH_STREAM {
        config.discard = stream::DiscardPolicy::Old;
        config.max_messages_per_subject = ORCH_MSGS_PER_SUBJECT;
    }
    if config.name == subjects::ORCH_STATE_STREAM {
        config.allow_rollup = true;
    }
    config
}

/// Gives every existing stream and bucket stream the limits by
/// `STREAM.UPDATE` where they differ; the names of those changed. A lowered
/// per-subject limit trims a subject only at its next write.
pub async fn apply_limits(js: &jetstream::Context, limits: &Limits) -> crate::Result<Vec<String>> {
    let mut changed = Vec::new();
    for name in roles::all_streams() {
        let mut stream = match js.get_stream(&name).await {
            Ok(stream) => stream,
            Err(_) => continue,
        };
        let have = stream
            .info()
            .await
            .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?
            .config
            .clone();
        let mut want = have.clone();
        if name.starts_with("ARBITER_") {
            want = limited(want, limits);
        } else {
            // Bucket streams keep their own discard policy.
            want.max_bytes = limits.stream_max_bytes;
        }
        if want != have {
            let allow_rollup = want.allow_rollup;
            match js.update_stream(want).await {
                Ok(_) => changed.push(name),
                // The server reserves `max_bytes` against its own storage
                // limit: one that cannot keeps the stream's limits as they
                // were, but still allows rollups where they are wanted.
                Err(e) if e.to_string().contains("10047") => {
                    tracing::warn!(
                        stream = %name,
                        max_bytes = limits.stream_max_bytes,
                        "the server cannot reserve this much storage for the stream; its limits are left as they were (lower --stream-max-bytes, or raise the server's max_file_store)"
                    );
                    if allow_rollup && !have.allow_rollup {
                        let mut rollup = have.clone();
                        rollup.allow_rollup = true;
                        js.update_stream(rollup).await.map_err(|e| {
                            crate::js_error(format!("allowing rollups on stream {name}"), e)
                        })?;
                    }
                }
                Err(e) => {
                    return Err(crate::js_error(
                        format!("setting the limits of stream {name}"),
                        e,
                    ));
                }
            }
        }
    }
    if !changed.is_empty() {
        tracing::info!(streams = ?changed, max_bytes = limits.stream_max_bytes, "stream limits applied");
    }
    Ok(changed)
}

/// Bytes and messages each stream holds now (`STREAM.INFO`).
pub async fn stream_bytes(js: &jetstream::Context) -> crate::Result<Vec<(String, u64, u64)>> {
    let mut out = Vec::new();
    for name in roles::all_streams() {
        if let Ok(mut stream) = js.get_stream(&name).await {
            let info = stream
                .info()
                .await
                .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?;
            out.push((name, info.state.bytes, info.state.messages));
        }
    }
    Ok(out)
}

/// Every session's latest status, newest activity first (undecodable values skipped).
pub async fn list(bus: &Bus) -> crate::Result<Vec<SessionStatus>> {
    let what = "listing the sessions";
    let mut keys = bus
        .sessions_kv
        .keys()
        .await
        .map_err(|e| crate::js_error(what, e))?;
    let mut out = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| crate::js_error(what, e))?;
        if let Some(status) = status(bus, &key).await? {
            out.push(status);
        }
    }
    out.sort_by(|a, b| {
        b.at.cmp(&a.at)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
    Ok(out)
}

/// One session's latest status; `None` when the bucket has none.
pub async fn status(bus: &Bus, session_id: &str) -> crate::Result<Option<SessionStatus>> {
    if !subjects::is_valid_token(session_id) {
        return Ok(None);
    }
    let bytes = bus
        .sessions_kv
        .get(session_id)
        .await
        .map_err(|e| crate::js_error(format!("reading the status of {session_id}"), e))?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// Why a session counts as live (an Arbiter turn in flight, input queued,
/// an Orchestrator active); `None` when it is idle.
pub fn live(status: &SessionStatus) -> Option<String> {
    if let Some(active) = &status.active {
        return Some(format!(
            "Orchestrator {} ({}) is active",
            arbiter_protocol::orchestrator_name(active.number),
            active.orch_id
        ));
    }
    if status.state == SessionState::Thinking || status.queued > 0 {
        return Some("an Arbiter turn is in flight".into());
    }
    None
}

/// One line of an archive (JSON lines, gzip-compressed).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArchiveLine {
    /// First line: the session's status when it was archived.
    Header {
        v: u32,
        session_id: String,
        archived_at: DateTime<Utc>,
        status: Box<SessionStatus>,
    },
    /// A log entry, as it was on `session.<id>.log`.
    Log { entry: Value },
    /// A session step record (pointers resolved).
    State { record: Value },
    /// An Orchestrator state record (pointers resolved; after the end, its snapshot).
    OrchState { orch_id: String, record: Value },
}

/// What an archive or a delete did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub log_entries: usize,
    pub records: usize,
    pub orchestrators: usize,
    /// Bytes of the live messages moved (payloads).
    pub live_bytes: u64,
    /// Bytes of the compressed archive (0 for a delete).
    pub archive_bytes: u64,
}

/// Archives `session_id`: writes its archive, marks its status archived
/// (fenced on the status revision read, so a session that woke meanwhile is
/// left alone), then purges its live subjects. Refused for a live session
/// unless `force`.
pub async fn archive(bus: &Bus, session_id: &str, force: bool) -> Result<Report> {
    let (status, revision) = checked(bus, session_id, force).await?;
    let gathered = gather(bus, session_id).await?;
    let now = Utc::now();
    let mut lines = vec![ArchiveLine::Header {
        v: arbiter_protocol::VERSION,
        session_id: session_id.to_owned(),
        archived_at: now,
        status: Box::new(status.clone()),
    }];
    // A session archived before and written to since (a line that reached
    // a coordinator before it learnt of the archive): the earlier archive
    // comes first, so nothing archived is lost.
    // An archive whose status mark was refused (the session woke) left its
    // lines live too: those are taken once.
    if let Ok(earlier) = read_archive(bus, session_id).await {
        let live: std::collections::HashSet<String> = gathered
            .lines
            .iter()
            .filter_map(|l| serde_json::to_string(l).ok())
            .collect();
        lines.extend(earlier.lines.into_iter().filter(|l| {
            !matches!(l, ArchiveLine::Header { .. })
                && serde_json::to_string(l).is_ok_and(|text| !live.contains(&text))
        }));
    }
    lines.extend(gathered.lines.iter().cloned());
    let compressed = compress(&lines).map_err(|e| RetentionError::Unreadable {
        id: session_id.to_owned(),
        message: e.to_string(),
    })?;
    let archive_bytes = compressed.len() as u64;
    let store = bus
        .js
        .get_object_store(subjects::ARCHIVE_BUCKET)
        .await
        .map_err(|e| crate::js_error("opening the archive bucket", e))?;
    store
        .put(
            subjects::session_archive(session_id).as_str(),
            &mut compressed.as_slice(),
        )
        .await
        .map_err(|e| crate::js_error(format!("writing the archive of {session_id}"), e))?;
    let mut archived = status;
    archived.archived_at = Some(now);
    let bytes = serde_json::to_vec(&archived).unwrap_or_default();
    bus.sessions_kv
        .update(session_id, bytes.into(), revision)
        .await
        .map_err(|e| {
            crate::js_error(
                format!("marking {session_id} archived (did it wake meanwhile?)"),
                e,
            )
        })?;
    purge(bus, session_id, &gathered).await?;
    Ok(Report {
        archive_bytes,
        ..gathered.report
    })
}

/// Deletes `session_id`: its live subjects, its archive and its status.
/// Refused for a live session unless `force`.
pub async fn delete(bus: &Bus, session_id: &str, force: bool) -> Result<Report> {
    let status = match checked(bus, session_id, force).await {
        Ok((status, _)) => status,
        Err(RetentionError::Archived(_)) => status(bus, session_id)
            .await?
            .ok_or_else(|| RetentionError::NoSuchSession(session_id.into()))?,
        Err(e) => return Err(e),
    };
    let gathered = gather(bus, session_id).await?;
    purge(bus, session_id, &gathered).await?;
    if status.archived_at.is_some()
        && let Ok(store) = bus.js.get_object_store(subjects::ARCHIVE_BUCKET).await
    {
        store
            .delete(subjects::session_archive(session_id).as_str())
            .await
            .map_err(|e| crate::js_error(format!("deleting the archive of {session_id}"), e))?;
    }
    bus.sessions_kv
        .purge(session_id)
        .await
        .map_err(|e| crate::js_error(format!("deleting the status of {session_id}"), e))?;
    Ok(gathered.report)
}

/// The session's status and its revision, if it may be archived or deleted.
async fn checked(bus: &Bus, session_id: &str, force: bool) -> Result<(SessionStatus, u64)> {
    let missing = || RetentionError::NoSuchSession(session_id.to_owned());
    if !subjects::is_valid_token(session_id) {
        return Err(missing());
    }
    let entry = bus
        .sessions_kv
        .entry(session_id)
        .await
        .map_err(|e| crate::js_error(format!("reading the status of {session_id}"), e))?
        .filter(|e| e.operation == jetstream::kv::Operation::Put)
        .ok_or_else(missing)?;
    let status: SessionStatus =
        serde_json::from_slice(&entry.value).map_err(|e| RetentionError::Unreadable {
            id: session_id.to_owned(),
            message: format!("its status: {e}"),
        })?;
    if status.archived_at.is_some() {
        return Err(RetentionError::Archived(session_id.to_owned()));
    }
    if !force && let Some(why) = live(&status) {
        return Err(RetentionError::Live {
            id: session_id.to_owned(),
            why,
        });
    }
    Ok((status, entry.revision))
}

/// A session's live data, read.
struct Gathered {
    lines: Vec<ArchiveLine>,
    orch_ids: BTreeSet<String>,
    /// Blob objects the pointer records named: (bucket, name).
    blobs: Vec<(&'static str, String)>,
    report: Report,
}

async fn gather(bus: &Bus, session_id: &str) -> Result<Gathered> {
    let mut g = Gathered {
        lines: Vec::new(),
        orch_ids: BTreeSet::new(),
        blobs: Vec::new(),
        report: Report::default(),
    };
    let log = subjects::session_log_filters(session_id);
    let messages = bus
        .replay_subjects(subjects::SESSIONS_STREAM, &log)
        .await?
        .map(|(msgs, _)| msgs.into_iter().map(|m| m.payload.clone()).collect())
        .unwrap_or_else(Vec::<bytes::Bytes>::new);
    for msg in messages {
        g.report.live_bytes += msg.len() as u64;
        // Since protocol v2 the session's step records ride on its log
        // entries (`step`); the archive keeps them apart, as before. One
        // that rides on an input (protocol v3) is sealed, and stays so:
        // `{"sealed": …}` (only a coordinator's key opens it).
        let mut entry = resolve(bus, subjects::SESSION_BLOBS_BUCKET, &msg, &mut g.blobs).await;
        // The entries name the session's Orchestrators too (a sealed
        // record's cannot be read here).
        collect_orch_ids(&entry, &mut g.orch_ids);
        let carried = entry.as_object_mut().and_then(|m| {
            m.remove("step").or_else(|| {
                m.remove("sealed")
                    .map(|sealed| serde_json::json!({ "sealed": sealed }))
            })
        });
        if let Some(record) = carried {
            g.report.records += 1;
            collect_orch_ids(&record, &mut g.orch_ids);
            g.lines.push(ArchiveLine::State { record });
        }
        let step_only = entry
            .get("body")
            .and_then(|b| b.get("type"))
            .and_then(Value::as_str)
            == Some("step");
        if !step_only {
            g.report.log_entries += 1;
            g.lines.push(ArchiveLine::Log { entry });
        }
    }
    // Sessions stored before protocol v2 keep their records on their own subject.
    let state = subjects::session_state(session_id);
    for msg in replay(bus, subjects::STATE_STREAM, &state).await? {
        g.report.live_bytes += msg.len() as u64;
        g.report.records += 1;
        let record = resolve(bus, subjects::SESSION_BLOBS_BUCKET, &msg, &mut g.blobs).await;
        collect_orch_ids(&record, &mut g.orch_ids);
        g.lines.push(ArchiveLine::State { record });
    }
    for orch_id in g.orch_ids.clone() {
        // Its `.state` records and its `.out` ones (a step that output something).
        let subject = subjects::orch_records(&orch_id);
        for msg in replay(bus, subjects::ORCH_STATE_STREAM, &subject).await? {
            g.report.live_bytes += msg.len() as u64;
            g.report.records += 1;
            let record = resolve(bus, subjects::ORCH_BLOBS_BUCKET, &msg, &mut g.blobs).await;
            g.lines.push(ArchiveLine::OrchState {
                orch_id: orch_id.clone(),
                record,
            });
        }
    }
    g.report.orchestrators = g.orch_ids.len();
    Ok(g)
}

/// Payloads of every message on `subject`, oldest first.
async fn replay(bus: &Bus, stream: &str, subject: &str) -> Result<Vec<bytes::Bytes>> {
    Ok(bus
        .replay_subject(stream, subject)
        .await?
        .map(|(msgs, _)| msgs.into_iter().map(|m| m.payload.clone()).collect())
        .unwrap_or_default())
}

/// A record as JSON, the whole record in place of a pointer (`blob`).
async fn resolve(
    bus: &Bus,
    bucket: &'static str,
    payload: &[u8],
    blobs: &mut Vec<(&'static str, String)>,
) -> Value {
    let value: Value = serde_json::from_slice(payload).unwrap_or(Value::Null);
    let Some(name) = value.get("blob").and_then(Value::as_str).map(str::to_owned) else {
        return value;
    };
    blobs.push((bucket, name.clone()));
    let read = async {
        let store = bus.js.get_object_store(bucket).await.ok()?;
        let mut object = store.get(name.as_str()).await.ok()?;
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut object, &mut bytes)
            .await
            .ok()?;
        serde_json::from_slice::<Value>(&bytes).ok()
    };
    read.await.unwrap_or(value)
}

/// Every `orch_id` string anywhere in a session record (its summonses, its active Orchestrator).
fn collect_orch_ids(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "orch_id"
                    && let Some(id) = v.as_str()
                    && subjects::is_valid_token(id)
                {
                    out.insert(id.to_owned());
                }
                collect_orch_ids(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_orch_ids(v, out)),
        _ => {}
    }
}

/// Purges the session's live subjects, its Orchestrators' subjects and the
/// blobs its pointer records named.
async fn purge(bus: &Bus, session_id: &str, g: &Gathered) -> Result<()> {
    let mut targets = vec![
        (
            subjects::SESSIONS_STREAM,
            format!("{}.session.{session_id}.>", subjects::PREFIX),
        ),
        (subjects::STATE_STREAM, subjects::session_state(session_id)),
    ];
    for orch_id in &g.orch_ids {
        targets.push((
            subjects::ORCH_STREAM,
            format!("{}.orch.{orch_id}.>", subjects::PREFIX),
        ));
        targets.push((subjects::ORCH_STATE_STREAM, subjects::orch_records(orch_id)));
    }
    for (stream, filter) in targets {
        let s = bus
            .js
            .get_stream(stream)
            .await
            .map_err(|e| crate::js_error(format!("opening {stream}"), e))?;
        s.purge()
            .filter(filter.as_str())
            .await
            .map_err(|e| crate::js_error(format!("purging {filter}"), e))?;
    }
    for (bucket, name) in &g.blobs {
        if let Ok(store) = bus.js.get_object_store(*bucket).await
            && let Err(e) = store.delete(name.as_str()).await
        {
            tracing::warn!(error = %e, %name, "could not delete a record's blob");
        }
    }
    Ok(())
}

fn compress(lines: &[ArchiveLine]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for line in lines {
        serde_json::to_writer(&mut encoder, line)?;
        encoder.write_all(b"\n")?;
    }
    encoder.finish()
}

/// An archived session as its archive holds it.
#[derive(Debug, Clone)]
pub struct Archive {
    pub status: SessionStatus,
    pub archived_at: DateTime<Utc>,
    /// The log entries, oldest first, as JSON.
    pub log: Vec<Value>,
    pub lines: Vec<ArchiveLine>,
}

/// Reads the archive of `session_id` (bucket [`subjects::ARCHIVE_BUCKET`]).
pub async fn read_archive(bus: &Bus, session_id: &str) -> Result<Archive> {
    let unreadable = |message: String| RetentionError::Unreadable {
        id: session_id.to_owned(),
        message,
    };
    let store = bus
        .js
        .get_object_store(subjects::ARCHIVE_BUCKET)
        .await
        .map_err(|e| unreadable(format!("opening the archive bucket: {e}")))?;
    let name = subjects::session_archive(session_id);
    // By direct gets, with no consumer (a console may make none); through
    // the object store's own reader for a credential from before.
    let read = crate::direct::object(
        &bus.client,
        Some(&bus.alarms),
        &store,
        subjects::ARCHIVE_BUCKET,
        &name,
    )
    .await;
    let compressed = match read {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(unreadable(format!("no object {name} in the archive"))),
        Err(BusError::NotAllowed { .. }) => {
            let mut object = store
                .get(name.as_str())
                .await
                .map_err(|e| unreadable(e.to_string()))?;
            let mut compressed = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut object, &mut compressed)
                .await
                .map_err(|e| unreadable(e.to_string()))?;
            compressed
        }
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let mut text = String::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_string(&mut text)
        .map_err(|e| unreadable(e.to_string()))?;
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        lines.push(
            serde_json::from_str::<ArchiveLine>(line).map_err(|e| unreadable(e.to_string()))?,
        );
    }
    let Some(ArchiveLine::Header {
        status,
        archived_at,
        ..
    }) = lines.first().cloned()
    else {
        return Err(unreadable("it has no header line".into()));
    };
    let log = lines
        .iter()
        .filter_map(|l| match l {
            ArchiveLine::Log { entry } => Some(entry.clone()),
            _ => None,
        })
        .collect();
    let mut status = *status;
    status.archived_at = Some(archived_at);
    Ok(Archive {
        status,
        archived_at,
        log,
        lines,
    })
}

/// An age setting that is not one [`parse_age`] reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: write <n>s, <n>m, <n>h, <n>d or off")]
pub struct BadAge {
    /// The setting as given, trimmed.
    pub text: String,
}

/// Parses an age setting: `<n>s`, `<n>m`, `<n>h`, `<n>d`, or `off` (`None`).
pub fn parse_age(text: &str) -> std::result::Result<Option<std::time::Duration>, BadAge> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") || text == "0" {
        return Ok(None);
    }
    let bad = || BadAge {
        text: text.to_owned(),
    };
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    Ok(Some(std::time::Duration::from_secs(n * seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse() {
        use std::time::Duration;
        assert_eq!(parse_age("30d"), Ok(Some(Duration::from_secs(30 * 86_400))));
        assert_eq!(parse_age("2s"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(parse_age("off"), Ok(None));
        assert_eq!(
            parse_age(" 3 weeks ").unwrap_err().to_string(),
            "\"3 weeks\": write <n>s, <n>m, <n>h, <n>d or off"
        );
    }

    #[test]
    fn orch_ids_are_found_anywhere_in_a_record() {
        let record = serde_json::json!({
            "snapshot": {"active": {"orch_id": "o-2", "number": 2}},
            "outbox": [{"summon": {"orch_id": "o-1"}}, {"input": {"orch_id": "bad.id"}}],
        });
        let mut ids = BTreeSet::new();
        collect_orch_ids(&record, &mut ids);
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), vec!["o-1", "o-2"]);
    }

    #[test]
    fn records_refuse_new_writes_when_full_and_orch_state_allows_rollups() {
        let limits = Limits {
            stream_max_bytes: 1 << 20,
        };
        for config in crate::setup::stream_configs() {
            let name = config.name.clone();
            let limited = limited(config, &limits);
            assert_eq!(limited.max_bytes, 1 << 20, "{name}");
            assert_eq!(
                limited.max_age,
                std::time::Duration::ZERO,
                "{name}: no max_age"
            );
            let want_discard = if name == subjects::ORCH_STREAM {
                stream::DiscardPolicy::Old
            } else {
                stream::DiscardPolicy::New
            };
            assert_eq!(limited.discard, want_discard, "{name}");
            assert_eq!(
                limited.allow_rollup,
                name == subjects::ORCH_STATE_STREAM,
                "{name}"
            );
        }
    }
}
