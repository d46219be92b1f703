//! `arbiter-console approvals`: every tool call waiting for the human's
//! word, across the sessions, as their statuses in the sessions bucket list
//! them (oldest first within a session, sessions newest first).

use arbiter_protocol::{SessionStatus, WaitingApproval, member_name};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::io::AsyncWrite;

use crate::sessions::{ago, columns};
use crate::{Result, inert, write_line};

/// What `approvals` prints when nothing waits.
pub const NONE_WAITING: &str = "No approvals waiting.";

/// One line of `approvals --json`: the session and its waiting approval.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    session_id: &'a str,
    #[serde(flatten)]
    approval: &'a WaitingApproval,
}

/// Lists what waits on `out`: a table, or one JSON object per approval
/// (`session_id` and the status's `WaitingApproval`). With nothing waiting,
/// [`NONE_WAITING`] (nothing, as JSON).
pub async fn print<W: AsyncWrite + Unpin>(
    nats: &arbiter_bus::NatsOptions,
    json: bool,
    mut out: W,
) -> Result<()> {
    let statuses = crate::sessions::list(nats).await?;
    if json {
        for status in &statuses {
            for approval in &status.approvals {
                let listed = Listed {
                    session_id: &status.session_id,
                    approval,
                };
                write_line(&mut out, &inert::json_line(&listed)?).await?;
            }
        }
        return Ok(());
    }
    for line in table(&statuses, Utc::now()) {
        write_line(&mut out, &line).await?;
    }
    Ok(())
}

/// The table `approvals` prints: a header, then one row per waiting
/// approval; [`NONE_WAITING`] alone when there is none.
pub fn table(statuses: &[SessionStatus], now: DateTime<Utc>) -> Vec<String> {
    let header = [
        "SESSION",
        "APPROVAL",
        "ORCHESTRATOR",
        "TOOL",
        "SUMMARY",
        "ASKED",
        "TIME LEFT",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for status in statuses {
        for a in &status.approvals {
            rows.push(vec![
                inert::one_line(&status.session_id),
                a.approval.to_string(),
                member_name(a.number, a.member),
                // The model's words: inert, on one line.
                inert::one_line(&a.tool),
                inert::one_line(&a.summary),
                ago(now, a.asked_at),
                left(now, a.deadline),
            ]);
        }
    }
    if rows.len() == 1 {
        return vec![NONE_WAITING.to_owned()];
    }
    columns(&rows)
}

/// `4 min left`, `40 s left`, `due now` (the coordinator denies it on its
/// next look).
fn left(now: DateTime<Utc>, deadline: DateTime<Utc>) -> String {
    let secs = (deadline - now).num_seconds();
    match secs {
        ..1 => "due now".to_owned(),
        1..120 => format!("{secs} s left"),
        120..7_200 => format!("{} min left", secs / 60),
        _ => format!("{} h left", secs / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};
    use pretty_assertions::assert_eq;

    fn waiting(approval: u32, member: Option<u32>, summary: &str, asked: i64) -> WaitingApproval {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        WaitingApproval {
            approval,
            number: 2,
            member,
            tool: "bash".into(),
            summary: summary.into(),
            asked_at: now - Duration::seconds(asked),
            deadline: now - Duration::seconds(asked) + Duration::minutes(10),
        }
    }

    fn status(id: &str, approvals: Vec<WaitingApproval>) -> SessionStatus {
        let mut s: SessionStatus = serde_json::from_value(serde_json::json!({
            "session_id": id, "state": "idle", "queued": 0, "arbiter_context_pct": 0.0,
            "arbiter_context_tokens": 0, "summoned": 0, "last_seq": 0,
            "created_at": "2026-11-22T00:00:00Z", "at": "2026-11-22T11:00:00Z"
        }))
        .unwrap();
        s.approvals = approvals;
        s
    }

    #[test]
    fn the_table() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        assert_eq!(table(&[status("s-quiet", vec![])], now), [NONE_WAITING]);
        let statuses = [
            status(
                "s-1",
                vec![
                    waiting(3, None, "git push origin main", 42),
                    waiting(4, None, "rm -rf build", 590),
                ],
            ),
            status("s-quiet", vec![]),
            status(
                "s-2",
                vec![waiting(1, Some(2), "x\u{1b}[2J\nArbiter: ok", 1_000)],
            ),
        ];
        assert_eq!(
            table(&statuses, now),
            [
                "SESSION  APPROVAL  ORCHESTRATOR       TOOL  SUMMARY                  ASKED       TIME LEFT",
                "s-1      3         Orchestrator II    bash  git push origin main     42 s ago    9 min left",
                "s-1      4         Orchestrator II    bash  rm -rf build             9 min ago   10 s left",
                "s-2      1         Orchestrator II.2  bash  x\\x1b[2J\\x0aArbiter: ok  16 min ago  due now",
            ]
        );
    }
}
