//! A session's checkpoints from the console (docs/checkpoints.md): the ones
//! its log names (each report's or note's evidence carries the checkpoint
//! its worker made), `/rewind` to one, and on the command line
//! `arbiter-console checkpoints`, `rewind` and `diff`.
//!
//! The console has no workspace: it knows the checkpoints from the log, and
//! a rewind is a message to the session, whose next Orchestrator's worker
//! restores the files. Only `diff` reads the repository itself, where the
//! console runs (or `--repo`).

use std::path::Path;

use arbiter_bus::{Bus, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{LogBody, LogEntry, member_name, subjects};
use serde::Serialize;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite};

use crate::session::CLIENT_NAME;
use crate::{ConsoleError, Result, inert, write_line};

/// Characters of an output's first line a checkpoint's label keeps.
const LABEL_CHARS: usize = 60;
/// Log entries read per request while listing.
const BATCH: usize = 256;

/// A checkpoint the log names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Known {
    pub commit: String,
    /// `Orchestrator I, report: a.txt written.`: whose, and its first line.
    pub label: String,
    pub files: u64,
    pub insertions: u64,
    pub deletions: u64,
    /// The log entry that named it.
    pub seq: u64,
}

impl Known {
    /// Its line in a list: the short id, the diffstat, the label (inert).
    pub fn line(&self) -> String {
        let short: String = self.commit.chars().take(12).collect();
        let files = if self.files == 1 { "file" } else { "files" };
        inert::one_line(&format!(
            "{short}  {} {files}, +{} -{}  {}",
            self.files, self.insertions, self.deletions, self.label
        ))
    }
}

/// The checkpoints a session's log names, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Checkpoints {
    known: Vec<Known>,
}

impl Checkpoints {
    /// Takes one log entry: an Orchestrator's output with a checkpoint.
    pub fn log(&mut self, entry: &LogEntry) {
        let LogBody::Orchestrator(e) = &entry.body else {
            return;
        };
        let Some(checkpoint) = e.evidence.as_ref().and_then(|ev| ev.checkpoint.as_ref()) else {
            return;
        };
        if self.known.iter().any(|k| k.commit == checkpoint.commit) {
            return;
        }
        let first: String = e
            .text
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(LABEL_CHARS)
            .collect();
        let kind = if e.expects_response { "report" } else { "note" };
        self.known.push(Known {
            commit: checkpoint.commit.clone(),
            label: format!("{}, {kind}: {first}", member_name(e.number, e.member)),
            files: checkpoint.files,
            insertions: checkpoint.insertions,
            deletions: checkpoint.deletions,
            seq: entry.seq,
        });
    }

    pub fn all(&self) -> &[Known] {
        &self.known
    }

    /// The checkpoint `id` names: its whole commit id, or a prefix of it
    /// that only one checkpoint of the session has.
    pub fn resolve(&self, id: &str) -> std::result::Result<&Known, String> {
        let id = id.to_ascii_lowercase();
        let found: Vec<&Known> = self
            .known
            .iter()
            .filter(|k| k.commit.starts_with(&id))
            .collect();
        match found.as_slice() {
            [one] => Ok(one),
            [] if self.known.is_empty() => Err(format!(
                "no checkpoint is named {id}: the session's log names none yet (its workspace \
                 is not a git repository, or nothing was changed)"
            )),
            [] => Err(format!(
                "no checkpoint of this session is named {id} (`arbiter-console checkpoints` \
                 lists them)"
            )),
            _ => Err(format!(
                "{id} names {} checkpoints: give more of its digits",
                found.len()
            )),
        }
    }
}

/// The question a rewind asks first: `working` are the live Orchestrators
/// that the rewind stops first.
pub fn question(known: &Known, working: &[String]) -> String {
    let short: String = known.commit.chars().take(12).collect();
    let first = match working {
        [] => String::new(),
        [one] => format!("{one} is at work: it is stopped first (as /stop). "),
        many => format!(
            "{} are at work: they are stopped first (as /stop). ",
            many.join(", ")
        ),
    };
    inert::one_line(&format!(
        "{first}Rewind the workspace to {short} ({})? What was done after it stays in the \
         checkpoints.",
        known.label
    ))
}

/// What the console shows when an Orchestrator's work was handed over as a
/// branch (its stopped status names it).
pub fn branch_line(number: u32, branch: &arbiter_protocol::Branch) -> String {
    // A member's (or a chain link's) branch ends `<n>.<m>`.
    let member = branch
        .name
        .rsplit('/')
        .next()
        .and_then(|last| last.split_once('.'))
        .and_then(|(_, m)| m.parse::<u32>().ok());
    let name = member_name(number, member);
    let files = if branch.files == 1 { "file" } else { "files" };
    let mut line = format!(
        "{name}'s work is on branch {} ({} {files}, commit {})",
        branch.name,
        branch.files,
        branch.commit.chars().take(12).collect::<String>()
    );
    if let Some(to) = &branch.pushed_to {
        line.push_str(&format!("; pushed to {to}"));
    }
    if let Some(pr) = &branch.pull_request {
        line.push_str(&format!("; pull request: {pr}"));
    }
    if let Some(problem) = &branch.problem {
        line.push_str(&format!("; {problem}"));
    }
    line.push('.');
    inert::one_line(&line)
}

/// Reads the checkpoints a live session's log names.
async fn read(bus: &Bus, session_id: &str) -> Result<Checkpoints> {
    let filter = subjects::session_log(session_id);
    let mut checkpoints = Checkpoints::default();
    let mut from = 1;
    loop {
        let batch = arbiter_bus::direct::batch(
            &bus.client,
            Some(&bus.alarms),
            subjects::SESSIONS_STREAM,
            &filter,
            from,
            BATCH,
        )
        .await?;
        for message in &batch.messages {
            if let Ok(entry) = serde_json::from_slice::<LogEntry>(&message.payload) {
                checkpoints.log(&entry);
            }
        }
        match batch.messages.last() {
            Some(last) if batch.pending > 0 => from = last.seq + 1,
            _ => break,
        }
    }
    Ok(checkpoints)
}

async fn open(nats: &NatsOptions, session_id: &str) -> Result<Bus> {
    if !subjects::is_valid_token(session_id) {
        return Err(ConsoleError::InvalidSessionId {
            id: session_id.to_owned(),
        });
    }
    let conn = arbiter_bus::connect_with(nats, CLIENT_NAME, Reach::FailFast).await?;
    Ok(Bus::open(conn, NatsRole::Console, Reach::FailFast).await?)
}

/// The checkpoint `id` names among those the session's log names, and the
/// connection it was read on; a clear error when there is none.
async fn find(nats: &NatsOptions, session_id: &str, id: &str) -> Result<(Bus, Known)> {
    let bus = open(nats, session_id).await?;
    let known = read(&bus, session_id)
        .await?
        .resolve(id)
        .map_err(|why| refused(session_id, why))?
        .clone();
    Ok((bus, known))
}

fn refused(session_id: &str, message: String) -> ConsoleError {
    ConsoleError::Checkpoint {
        session_id: session_id.to_owned(),
        message,
    }
}

/// `arbiter-console checkpoints --session ID`: one line per checkpoint,
/// oldest first (`json`: one object per line).
pub async fn list<W: AsyncWrite + Unpin>(
    nats: &NatsOptions,
    session_id: &str,
    json: bool,
    mut out: W,
) -> Result<()> {
    let bus = open(nats, session_id).await?;
    let checkpoints = read(&bus, session_id).await?;
    if checkpoints.all().is_empty() && !json {
        return write_line(
            &mut out,
            "No checkpoints: the session's log names none (its workspace is not a git \
             repository, or nothing was changed yet).",
        )
        .await;
    }
    for known in checkpoints.all() {
        let line = if json {
            serde_json::to_string(known)?
        } else {
            known.line()
        };
        write_line(&mut out, &line).await?;
    }
    Ok(())
}

/// `arbiter-console rewind --session ID <checkpoint>`: asks on `input`
/// (unless `yes`), sends the rewind, and prints what the log says of it.
pub async fn rewind<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    nats: &NatsOptions,
    identity: &str,
    session_id: &str,
    (id, stop, yes): (&str, bool, bool),
    mut input: R,
    mut out: W,
) -> Result<()> {
    let (bus, known) = find(nats, session_id, id).await?;
    if !yes {
        write_line(&mut out, &format!("{} [y/N]", question(&known, &[]))).await?;
        let mut answer = String::new();
        input.read_line(&mut answer).await?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return write_line(&mut out, "Not rewound.").await;
        }
    }
    let message_id = uuid::Uuid::now_v7().to_string();
    let text = if stop {
        format!("/rewind --stop {}", known.commit)
    } else {
        format!("/rewind {}", known.commit)
    };
    let message = crate::command::message(session_id, &message_id, text, None);
    let said = crate::stop::send_and_hear(&bus, identity, &message, |body| match body {
        LogBody::Rewound(e) => Some(Ok(crate::render::rewound(&e))),
        LogBody::System(s) if s.text.starts_with("The rewind") => Some(Err(s.text)),
        _ => None,
    })
    .await?;
    match said {
        Some(Ok(text)) => write_line(&mut out, &inert::one_line(&text)).await,
        Some(Err(text)) => Err(refused(session_id, inert::one_line(&text))),
        None => Err(refused(
            session_id,
            format!(
                "the rewind was sent, but the log did not say what became of it within {} s \
                 (is the coordinator running?)",
                crate::stop::CONFIRM_WITHIN.as_secs()
            ),
        )),
    }
}

/// `arbiter-console diff --session ID <checkpoint> [--repo DIR]`: the
/// checkpoint's change against the one before, from the repository at
/// `repo` (the session's workspace, where the console runs on its worker's
/// machine), as `git show --stat --patch` prints it.
pub async fn diff<W: AsyncWrite + Unpin>(
    nats: &NatsOptions,
    session_id: &str,
    id: &str,
    repo: &Path,
    mut out: W,
) -> Result<()> {
    let (_, known) = find(nats, session_id, id).await?;
    let shown = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.pager=cat",
            "show",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--stat",
            "--patch",
            &known.commit,
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    if !shown.status.success() {
        return Err(refused(
            session_id,
            format!(
                "checkpoint {} is not in the repository at {} ({}): run this where the \
                 session's workspace is, or give it with --repo",
                &known.commit[..12.min(known.commit.len())],
                repo.display(),
                inert::one_line(String::from_utf8_lossy(&shown.stderr).trim())
            ),
        ));
    }
    // What the model wrote, shown inert on the terminal.
    for line in String::from_utf8_lossy(&shown.stdout).lines() {
        write_line(&mut out, &inert::one_line(line)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{Checkpoint, Evidence, OrchestratorEntry};

    fn output(seq: u64, number: u32, text: &str, commit: &str) -> LogEntry {
        LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: chrono::Utc::now(),
            body: LogBody::Orchestrator(OrchestratorEntry {
                number,
                member: None,
                orch_id: format!("o{number}"),
                expects_response: true,
                text: text.into(),
                evidence: Some(Evidence {
                    checkpoint: Some(Checkpoint {
                        commit: commit.into(),
                        git_ref: "refs/arbiter/s/checkpoints".into(),
                        files: 2,
                        insertions: 5,
                        deletions: 1,
                        ..Checkpoint::default()
                    }),
                    ..Evidence::default()
                }),
                handoff: None,
            }),
        }
    }

    #[test]
    fn a_handed_over_branch_is_said_with_where_it_went() {
        let mut branch = arbiter_protocol::Branch {
            name: "arbiter/s/2.3".into(),
            commit: "0123456789abcdef".into(),
            files: 1,
            pushed_to: Some("origin".into()),
            pull_request: Some("https://forge/pr/7\x1b[2J".into()),
            problem: None,
        };
        assert_eq!(
            branch_line(2, &branch),
            "Orchestrator II.3's work is on branch arbiter/s/2.3 (1 file, commit 0123456789ab); \
             pushed to origin; pull request: https://forge/pr/7\\x1b[2J."
        );
        branch.name = "arbiter/s/2".into();
        branch.pushed_to = None;
        branch.pull_request = None;
        branch.problem = Some("not pushed to /srv/r.git: refused".into());
        assert_eq!(
            branch_line(2, &branch),
            "Orchestrator II's work is on branch arbiter/s/2 (1 file, commit 0123456789ab); not \
             pushed to /srv/r.git: refused."
        );
    }

    #[test]
    fn checkpoints_are_named_by_a_unique_prefix_and_listed_with_their_diffstat() {
        let mut known = Checkpoints::default();
        assert!(
            known
                .resolve("abcd")
                .unwrap_err()
                .contains("names none yet")
        );
        known.log(&output(3, 1, "a.txt written.\nmore", &"ab12".repeat(10)));
        known.log(&output(
            7,
            2,
            "\x1b[31mb.txt\x1b[0m written.",
            &"ab34".repeat(10),
        ));
        known.log(&output(7, 2, "again", &"ab34".repeat(10)));
        assert_eq!(known.all().len(), 2, "a checkpoint seen twice is one");
        assert_eq!(known.resolve("ab12").unwrap().seq, 3);
        assert_eq!(known.resolve("AB34AB").unwrap().seq, 7);
        assert!(
            known
                .resolve("ab")
                .unwrap_err()
                .contains("names 2 checkpoints")
        );
        assert!(known.resolve("ffff").unwrap_err().contains("lists them"));
        assert_eq!(
            known.all()[0].line(),
            "ab12ab12ab12  2 files, +5 -1  Orchestrator I, report: a.txt written."
        );
        let line = known.all()[1].line();
        assert!(!line.contains('\x1b'), "{line:?}");
        assert_eq!(
            question(
                known.all().first().unwrap(),
                &["Orchestrator II".to_owned()]
            ),
            "Orchestrator II is at work: it is stopped first (as /stop). Rewind the workspace \
             to ab12ab12ab12 (Orchestrator I, report: a.txt written.)? What was done after it \
             stays in the checkpoints."
        );
    }
}
