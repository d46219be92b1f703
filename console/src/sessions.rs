//! `arbiter-console sessions`: every session the sessions bucket knows, with
//! its state and last activity, newest first.

use arbiter_protocol::{SessionState, SessionStatus, orchestrator_name, subjects};
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{
    GetStreamError, GetStreamErrorKind, KeyValueError, KeyValueErrorKind,
};
use chrono::{DateTime, Utc};
use tokio::io::AsyncWrite;
use unicode_width::UnicodeWidthStr;

use crate::inert;
use crate::session::CLIENT_NAME;
use crate::{ConsoleError, Result, write_line};

/// Reads every session's latest status from the bucket, newest activity first.
/// A value that cannot be decoded is skipped with a warning.
pub async fn list(nats: &arbiter_bus::NatsOptions) -> Result<Vec<SessionStatus>> {
    let conn = arbiter_bus::connect_with(nats, CLIENT_NAME, arbiter_bus::Reach::FailFast).await?;
    list_on(&async_nats::jetstream::new(conn.client)).await
}

/// [`list`] over a connection the caller holds (`arbiter-web`'s).
pub async fn list_on(js: &async_nats::jetstream::Context) -> Result<Vec<SessionStatus>> {
    let error = |e: &dyn std::fmt::Display| ConsoleError::Sessions {
        bucket: subjects::SESSIONS_BUCKET.to_owned(),
        message: e.to_string(),
    };
    let bucket = match js.get_key_value(subjects::SESSIONS_BUCKET).await {
        Ok(bucket) => bucket,
        // No coordinator has run against this server yet: no sessions.
        Err(e) if is_missing_bucket(&e) => return Ok(Vec::new()),
        Err(e) => return Err(error(&e)),
    };
    // Listed from the subjects the bucket holds: a console may make no
    // consumer, which a KV key listing is (docs/security.md).
    let keys = arbiter_bus::direct::keys(&bucket, "")
        .await
        .map_err(|e| error(&e))?;
    let mut statuses = Vec::new();
    for key in keys {
        let Some(bytes) = bucket.get(&key).await.map_err(|e| error(&e))? else {
            continue;
        };
        let name = format!("{}/{key}", subjects::SESSIONS_BUCKET);
        match arbiter_bus::decode::<SessionStatus>(&name, &bytes) {
            Ok(status) => statuses.push(status),
            Err(e) => {
                tracing::warn!(error = %inert::one_line(&e.to_string()), "session status skipped");
            }
        }
    }
    statuses.sort_by(|a, b| {
        b.at.cmp(&a.at)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
    Ok(statuses)
}

/// Whether the bucket does not exist (as opposed to not being readable: no
/// JetStream, no permission, no answer).
fn is_missing_bucket(e: &KeyValueError) -> bool {
    e.kind() == KeyValueErrorKind::GetBucket
        && std::error::Error::source(e)
            .and_then(|source| source.downcast_ref::<GetStreamError>())
            .is_some_and(|source| {
                matches!(
                    source.kind(),
                    GetStreamErrorKind::JetStream(js) if js.error_code() == ErrorCode::STREAM_NOT_FOUND
                )
            })
}

/// Lists the sessions on `out`: a table, or one JSON `SessionStatus` per line.
/// With no session at all, nothing goes to `out` (and `no sessions` to stderr).
pub async fn print<W: AsyncWrite + Unpin>(
    nats: &arbiter_bus::NatsOptions,
    json: bool,
    mut out: W,
) -> Result<()> {
    let statuses = list(nats).await?;
    if json {
        for status in &statuses {
            write_line(&mut out, &inert::json_line(status)?).await?;
        }
    } else if statuses.is_empty() {
        write_line(&mut tokio::io::stderr(), "no sessions").await?;
    } else {
        for line in table(&statuses, Utc::now()) {
            write_line(&mut out, &line).await?;
        }
        let waiting = statuses.iter().filter(|s| attention(s).is_some()).count();
        if waiting > 0 {
            let hint = match waiting {
                1 => "1 session needs you".to_owned(),
                n => format!("{n} sessions need you"),
            };
            write_line(
                &mut tokio::io::stderr(),
                &format!("{hint}: arbiter-console approvals"),
            )
            .await?;
        }
    }
    Ok(())
}

/// Why a session needs the human, if it does: `2 approvals waiting`,
/// `waits for your word` (the Arbiter wrote to them), `something failed`. The
/// table marks its state with it (`! working, 2 approvals waiting`).
pub fn attention(status: &SessionStatus) -> Option<String> {
    use arbiter_protocol::NotificationKind as K;
    let approvals = match status.approvals.len() {
        0 => None,
        1 => Some("1 approval waiting".to_owned()),
        n => Some(format!("{n} approvals waiting")),
    };
    let other = status.attention.as_ref().and_then(|a| match a.kind {
        K::NeedsInput => Some("waits for your word"),
        K::Failed => Some("something failed"),
        K::Stalled => Some("stalled"),
        K::Budget => Some("at its budget"),
        K::Completed => None,
    });
    match (approvals, other) {
        (Some(a), Some(o)) => Some(format!("{a}, {o}")),
        (Some(a), None) => Some(a),
        (None, Some(o)) => Some(o.to_owned()),
        (None, None) => None,
    }
}

/// A session's state in a word or two: `working`, `thinking (2 queued)`.
pub fn state(s: &SessionStatus) -> String {
    match (s.state, s.queued) {
        // Read-only now: `arbiter-console --session <id>` prints its log from the archive.
        _ if s.archived_at.is_some() => "archived".to_owned(),
        // Its Orchestrator works on while the Arbiter waits.
        (SessionState::Idle, _) if s.active.is_some() => "working".to_owned(),
        (SessionState::Idle, _) => "idle".to_owned(),
        (SessionState::Thinking, 0) => "thinking".to_owned(),
        (SessionState::Thinking, queued) => format!("thinking ({queued} queued)"),
    }
}

/// The table `sessions` prints: a header, then one row per session.
pub fn table(statuses: &[SessionStatus], now: DateTime<Utc>) -> Vec<String> {
    let header = [
        "SESSION",
        "STATE",
        "ORCHESTRATOR",
        "SUMMONED",
        "TOKENS",
        "COST",
        "LAST ACTIVITY",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for s in statuses {
        let state = state(s);
        let state = match attention(s) {
            Some(mark) => format!("! {state}, {mark}"),
            None => state,
        };
        let active = s
            .active
            .as_ref()
            .map_or_else(|| "-".to_owned(), |a| orchestrator_name(a.number));
        let at = format!(
            "{} ({})",
            s.at.format("%Y-%m-%d %H:%M:%S UTC"),
            ago(now, s.at)
        );
        rows.push(vec![
            // The id comes from the bucket, whoever wrote it.
            inert::one_line(&s.session_id),
            state,
            active,
            s.summoned.to_string(),
            s.spend.total.tokens().to_string(),
            s.spend.total.cost_text(),
            at,
        ]);
    }
    columns(&rows)
}

/// The cells of `rows` in columns two spaces apart, the last one unpadded.
pub(crate) fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].width()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if c + 1 < columns {
                    line.push_str(&" ".repeat(widths[c] - cell.width() + 2));
                }
            }
            line
        })
        .collect()
}

/// `just now`, `42 s ago`, `3 min ago`, `5 h ago`, `2 d ago`.
pub fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds();
    match secs {
        ..5 => "just now".to_owned(),
        5..60 => format!("{secs} s ago"),
        60..3_600 => format!("{} min ago", secs / 60),
        3_600..86_400 => format!("{} h ago", secs / 3_600),
        _ => format!("{} d ago", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::ActiveOrchestrator;
    use chrono::{Duration, TimeZone};
    use pretty_assertions::assert_eq;

    fn status(id: &str, state: SessionState, at: DateTime<Utc>) -> SessionStatus {
        SessionStatus {
            team: Vec::new(),
            spend: Default::default(),
            archived_at: None,
            budget: Default::default(),
            approvals: Vec::new(),
            attention: None,
            v: 1,
            session_id: id.into(),
            state,
            queued: 0,
            arbiter_context_pct: 0.0,
            arbiter_context_tokens: 0,
            active: None,
            summoned: 0,
            last_seq: 0,
            created_at: at,
            at,
        }
    }

    #[test]
    fn the_table() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let mut busy = status(
            "s-busy",
            SessionState::Thinking,
            now - Duration::seconds(42),
        );
        busy.queued = 2;
        busy.summoned = 3;
        busy.active = Some(ActiveOrchestrator {
            member: None,
            reported: false,
            orch_id: "o3".into(),
            number: 3,
        });
        let old = status("0193a1b2-old", SessionState::Idle, now - Duration::hours(5));
        // The Arbiter waits; its Orchestrator still works: the session is at work.
        let mut working = status("s-work", SessionState::Idle, now - Duration::seconds(3));
        working.summoned = 1;
        working.active = Some(ActiveOrchestrator {
            member: None,
            reported: false,
            orch_id: "o1".into(),
            number: 1,
        });
        busy.spend.total = arbiter_protocol::Spend {
            requests: 3,
            input_tokens: 1000,
            output_tokens: 200,
            cost_nanos: 12_345_678,
            ..Default::default()
        };
        // A request on a model with no price: its tokens, its cost unknown.
        working.spend.total.record(Some([900, 20, 0, 0]), None);
        assert_eq!(
            table(&[busy, working, old], now),
            [
                "SESSION       STATE                ORCHESTRATOR      SUMMONED  TOKENS  COST          LAST ACTIVITY",
                "s-busy        thinking (2 queued)  Orchestrator III  3         1200    $0.0123       2026-11-22 11:59:18 UTC (42 s ago)",
                "s-work        working              Orchestrator I    1         920     cost unknown  2026-11-22 11:59:57 UTC (just now)",
                "0193a1b2-old  idle                 -                 0         0       $0.0000       2026-11-22 07:00:00 UTC (5 h ago)",
            ]
        );
    }

    #[test]
    fn an_archived_session_reads_archived() {
        // The human sees that it is read-only, whatever state it was left in.
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let mut old = status("s-old", SessionState::Idle, now - Duration::days(40));
        old.archived_at = Some(now - Duration::days(10));
        let rows = table(&[old], now);
        let cells: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(cells[..2], ["s-old", "archived"], "{:?}", rows[1]);
    }

    #[test]
    fn a_forged_session_id_stays_in_its_cell() {
        // The human sees the escape spelled out and the newline as \x0a: one
        // row, nothing cleared.
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let forged = status("x\u{1b}[2J\nfake\u{202e}", SessionState::Idle, now);
        let rows = table(&[forged], now);
        assert_eq!(rows.len(), 2);
        assert!(
            rows[1].starts_with("x\\x1b[2J\\x0afake\\u{202e}  idle"),
            "{:?}",
            rows[1]
        );
    }

    #[test]
    fn ages() {
        let now = Utc::now();
        let cases = [
            (0, "just now"),
            (59, "59 s ago"),
            (61, "1 min ago"),
            (7_200, "2 h ago"),
            (200_000, "2 d ago"),
        ];
        for (secs, want) in cases {
            assert_eq!(ago(now, now - Duration::seconds(secs)), want);
        }
        assert_eq!(
            ago(now, now + Duration::seconds(30)),
            "just now",
            "clock skew"
        );
    }
}
