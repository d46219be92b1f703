//! A human line from a client, exactly as a console sends one: the
//! console's own state reads it (`App::send`: words, `/stop`, `/allow 3`,
//! `/budget …`, `/policy …`; a command that cannot be read is refused with
//! the console's words and never sent) and the console's own feed
//! publishes it under this process's credential. The call then waits a
//! little for the session's log to show it, and says what it saw.

use std::time::{Duration, Instant};

use arbiter_console::app::{Action, App, FeedEvent};
use arbiter_console::conversation::Kind;
use arbiter_console::feed::Feed;
use arbiter_protocol::{Answerer, LogBody, SessionStatus};

use crate::link::Link;

/// How long the log has to show a line before the call returns without it.
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// What became of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The session's log shows it as entry `seq`.
    Logged { seq: u64 },
    /// An answer to an approval: what the log said of it, at `seq`.
    Answered { seq: u64, text: String },
    /// Nothing was sent: the console shows this here (`/budget` alone).
    Shown(String),
    /// Published, or still being published, and not in the log within
    /// [`CONFIRM_WITHIN`]; the last trouble the feed reported, if any.
    Unconfirmed(Option<String>),
}

impl Sent {
    /// The outcome in a sentence, for the client.
    pub fn words(&self) -> String {
        match self {
            Sent::Logged { seq } => format!("sent; the session's log holds it as entry {seq}"),
            Sent::Answered { seq, text } => format!("sent; the log says (entry {seq}): {text}"),
            Sent::Shown(text) => text.clone(),
            Sent::Unconfirmed(trouble) => {
                let mut words = format!(
                    "handed to NATS, but the session's log has not shown it within {} s (is a \
                     coordinator running?); follow with status and read",
                    CONFIRM_WITHIN.as_secs()
                );
                if let Some(trouble) = trouble {
                    words.push_str(&format!("; the feed said: {trouble}"));
                }
                words
            }
        }
    }

    /// The log entry that shows it, if one does.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Sent::Logged { seq } | Sent::Answered { seq, .. } => Some(*seq),
            Sent::Shown(_) | Sent::Unconfirmed(_) => None,
        }
    }
}

/// Sends `text` to `session` as the human, naming `workspace` (a new
/// session starts with that workspace's memory). `status` is the session's
/// latest, for `/budget` and to tell an answer's log entry from older ones.
pub async fn line(
    link: &Link,
    session: &str,
    text: String,
    workspace: Option<String>,
    status: Option<SessionStatus>,
) -> Result<Sent, String> {
    let baseline = status.as_ref().map_or(0, |s| s.last_seq);
    let mut app = App::new(session, "");
    if let Some(status) = status {
        app.apply(
            FeedEvent::StoredSession {
                status,
                age: Duration::ZERO,
            },
            Instant::now(),
        );
    }
    let shown_before = app.conversation.entries().len();
    let Some(Action::Send { message_id, text }) = app.send(text) else {
        // Refused, or shown here: the console's own words for it.
        let notice = app.conversation.entries()[shown_before..].last().cloned();
        return match notice {
            Some(n) if n.kind == Kind::Error => Err(n.text),
            Some(n) => Ok(Sent::Shown(n.text)),
            None => Err("the line was not sent".to_owned()),
        };
    };
    // An answer to an approval is logged as the approval's answer, not as
    // the human's words (the console keeps it out of its pending lines).
    let answer = !app
        .conversation
        .pending()
        .iter()
        .any(|p| p.message_id == message_id);
    let mut feed = Feed::start(link.nats(), session, link.identity()).in_workspace(workspace);
    feed.send(message_id.clone(), text);
    let mut trouble = None;
    let deadline = tokio::time::Instant::now() + CONFIRM_WITHIN;
    loop {
        let event = match tokio::time::timeout_at(deadline, feed.events.recv()).await {
            Err(_) => return Ok(Sent::Unconfirmed(trouble)),
            Ok(None) => return Err("the session's feed stopped before the line was sent".into()),
            Ok(Some(event)) => event,
        };
        match event {
            FeedEvent::NotSent {
                message_id: id,
                error,
                ..
            } if id == message_id => {
                return Err(format!(
                    "not sent: {}",
                    arbiter_console::inert::one_line(&error)
                ));
            }
            FeedEvent::Trouble(text) => trouble = Some(arbiter_console::inert::one_line(&text)),
            FeedEvent::Log(entry) => match &entry.body {
                LogBody::Human(h) if h.message_id == message_id => {
                    return Ok(Sent::Logged { seq: entry.seq });
                }
                LogBody::ApprovalAnswered(a)
                    if answer
                        && entry.seq > baseline
                        && matches!(&a.by, Answerer::Console { name } if name == link.identity()) =>
                {
                    return Ok(Sent::Answered {
                        seq: entry.seq,
                        text: arbiter_console::inert::one_line(&format!(
                            "Approval {}: {}",
                            a.approval,
                            a.line()
                        )),
                    });
                }
                // The coordinator's word on an answer that changed nothing.
                LogBody::System(s) if answer && entry.seq > baseline => {
                    return Ok(Sent::Answered {
                        seq: entry.seq,
                        text: arbiter_console::inert::one_line(&s.text),
                    });
                }
                _ => {}
            },
            _ => {}
        }
    }
}
