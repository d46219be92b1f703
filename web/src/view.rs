//! One session as a page shows it, made from the console's own state
//! ([`App`]): the same entries, speakers and status lines as the terminal.
//! Everything in it is text: templates escape it and the script sets it
//! with `textContent`, so nothing a model wrote is ever markup.

use std::sync::Arc;
use std::time::Instant;

use arbiter_console::app::{App, Connection};
use arbiter_console::conversation::{Entry, Kind};
use arbiter_console::ui::conversation::{speaker, streaming_speaker};
use serde::Serialize;

/// Characters of one entry a page shows; the rest is cut with a note of how
/// much (the terminal wraps everything; a browser tab would not survive a
/// 1 MB line repeated).
pub const MAX_TEXT: usize = 16_384;
/// The width the status lines are laid out for, as on an 80-column terminal.
const STATUS_WIDTH: usize = 76;

/// One line of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// CSS classes: the kind (`human`, `arbiter`, `orch`, `note`…) and an
    /// Orchestrator's colour (`o1`…`o6`).
    pub class: String,
    pub speaker: String,
    pub text: String,
    /// A musing: shown only when asked for.
    pub musing: bool,
}

impl Line {
    fn of(entry: &Entry) -> Self {
        Self::new(entry.kind, speaker(entry.kind), &entry.text)
    }

    fn new(kind: Kind, speaker: String, text: &str) -> Self {
        let class = match kind {
            Kind::Human => "human".to_owned(),
            Kind::Arbiter => "arbiter".to_owned(),
            Kind::ArbiterToOrchestrator(..) => "arbiter to".to_owned(),
            Kind::Orchestrator(n, _) => format!("orch o{}", colour(n)),
            Kind::Note(n, _) => format!("note o{}", colour(n)),
            Kind::Musing => "musing".to_owned(),
            Kind::Event => "event".to_owned(),
            Kind::Approval => "approval".to_owned(),
            Kind::Evidence => "evidence".to_owned(),
            Kind::Check => "check".to_owned(),
            Kind::Error => "error".to_owned(),
        };
        Self {
            class,
            speaker,
            // Entries are escaped already (escaping is idempotent); the
            // reply being written and unsent lines are not.
            text: cut(&arbiter_console::inert::escape(text)),
            musing: kind == Kind::Musing,
        }
    }
}

fn colour(n: u32) -> u32 {
    (n.max(1) - 1) % 6 + 1
}

/// `text` cut at [`MAX_TEXT`] characters, saying how many were left out.
pub fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        None => text.to_owned(),
        Some((at, _)) => {
            let left = text[at..].chars().count();
            format!(
                "{}… [{left} more characters; `arbiter-console --json` shows them all]",
                &text[..at]
            )
        }
    }
}

/// A tool call waiting for the human's word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waiting {
    pub approval: u32,
    pub text: String,
}

/// Everything a session page shows, at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    /// The feed has attached to the session.
    pub attached: bool,
    pub connected: bool,
    /// Attached, and the log is replayed as far as the session's status says it goes.
    pub caught_up: bool,
    /// The log's entries (append-only while the view lives).
    pub entries: Vec<Arc<Line>>,
    /// After them: the reply being written and messages not yet in the log.
    pub tail: Vec<Line>,
    /// The status area's rows, as the terminal draws them.
    pub status: Vec<String>,
    pub cost: String,
    pub approvals: Vec<Waiting>,
}

impl View {
    /// The view of `app` now; entries `previous` already holds are reused.
    pub fn of(app: &App, now: Instant, previous: &View) -> View {
        let shown = app.conversation.entries();
        let mut entries = if shown.len() >= previous.entries.len() {
            previous.entries.clone()
        } else {
            Vec::new()
        };
        entries.extend(shown[entries.len()..].iter().map(|e| Arc::new(Line::of(e))));
        let mut tail = Vec::new();
        if let Some(streaming) = app.conversation.streaming() {
            let mut line = Line::new(
                Kind::Arbiter,
                streaming_speaker(streaming, &app.vitals),
                &streaming.text,
            );
            line.text.push('▍');
            line.class.push_str(" streaming");
            tail.push(line);
        }
        for pending in app.conversation.pending() {
            let mut line = Line::new(Kind::Human, speaker(Kind::Human), &pending.text);
            line.text.push_str(" ⋯");
            line.class.push_str(" pending");
            tail.push(line);
        }
        let status = arbiter_console::ui::status::lines(&app.vitals, now, STATUS_WIDTH)
            .into_iter()
            .map(|line| {
                line.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
                    .trim_end()
                    .to_owned()
            })
            .collect();
        let session = app.vitals.session_status();
        let caught_up =
            app.attached && session.is_none_or(|s| s.last_seq <= app.conversation.last_seq());
        View {
            attached: app.attached,
            connected: app.connection == Connection::Up,
            caught_up,
            entries,
            tail,
            status,
            cost: session.map_or_else(String::new, |s| s.spend.total.cost_text()),
            approvals: app
                .approvals
                .waiting()
                .iter()
                .map(|a| Waiting {
                    approval: a.approval,
                    text: cut(&arbiter_console::inert::escape(&format!(
                        "{} asks to run {}: {}",
                        a.who, a.tool, a.what
                    ))),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_saying_how_much_was_left_out() {
        let long = "é".repeat(MAX_TEXT + 10);
        let shown = cut(&long);
        assert!(shown.starts_with(&"é".repeat(MAX_TEXT)));
        assert!(
            shown.contains("… [10 more characters"),
            "{}",
            &shown[shown.len() - 80..]
        );
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn speakers_and_classes_follow_the_terminal() {
        let orch = Line::new(
            Kind::Orchestrator(2, Some(1)),
            speaker(Kind::Orchestrator(2, Some(1))),
            "x",
        );
        assert_eq!(orch.speaker, "Orchestrator II.1: ");
        assert_eq!(orch.class, "orch o2");
        let to = Line::new(
            Kind::ArbiterToOrchestrator(1, None),
            speaker(Kind::ArbiterToOrchestrator(1, None)),
            "x",
        );
        assert_eq!(to.speaker, "Arbiter → I: ");
        assert_eq!(
            Line::new(Kind::Note(7, None), String::new(), "").class,
            "note o1"
        );
        assert!(Line::new(Kind::Musing, String::new(), "").musing);
    }
}
