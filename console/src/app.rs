//! The state of the full-screen console: the conversation, the statuses, the
//! input, the scroll position. It changes only through [`App::apply`] (what
//! NATS brought) and [`App::key`]/[`App::paste`]/[`App::mouse`] (what the human
//! did), so it can be driven and drawn in tests without a terminal.

use std::time::{Duration, Instant};

use arbiter_protocol::{ArbiterDelta, LogEntry, OrchestratorStatus, SessionState, SessionStatus};
use crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEvent, MouseEventKind,
};

use crate::approval::Approvals;
use crate::command::Typed;
use crate::conversation::{Conversation, Kind};
use crate::input::Input;
use crate::vitals::Vitals;

/// Rows one mouse-wheel step scrolls.
const WHEEL_ROWS: usize = 3;

/// Something the NATS side of the console reports.
#[derive(Debug, Clone)]
pub enum FeedEvent {
    /// The next entry of the session log (replayed, then live).
    Log(LogEntry),
    /// A log entry that could not be decoded.
    Malformed {
        detail: String,
    },
    Session(SessionStatus),
    /// The session's status as the bucket held it on attaching: its last
    /// change, `age` old by its `at` (zero if its clock is ahead of ours).
    StoredSession {
        status: SessionStatus,
        age: Duration,
    },
    Orchestrator(OrchestratorStatus),
    Delta(ArbiterDelta),
    /// The connection to NATS went down (`false`) or came back (`true`).
    Connection {
        up: bool,
    },
    /// The feed has subscribed to the session and opened its log: the session
    /// exists for this console (and can be resumed).
    Attached,
    /// A message the human sent could not be published.
    NotSent {
        message_id: String,
        text: String,
        error: String,
    },
    /// Something went wrong that the human should know about; the console goes on.
    Trouble(String),
}

/// What the caller must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Publish this message on `session.<id>.human`.
    Send { message_id: String, text: String },
    /// Restore the terminal and exit.
    Quit,
    /// Clear and redraw the whole screen (Ctrl-L).
    Redraw,
    /// Ring the terminal's bell: a tool call waits for the human's word.
    Bell,
}

/// Where the conversation view is.
#[derive(Debug, Clone, Default)]
pub struct Scroll {
    /// First row shown, counted from the top of the conversation; `None`
    /// follows the live tail.
    pub top: Option<usize>,
    /// Rows of the whole conversation at the last draw.
    pub rows: usize,
    /// Rows the conversation area had at the last draw.
    pub height: usize,
}

impl Scroll {
    fn max_top(&self) -> usize {
        self.rows.saturating_sub(self.height)
    }

    /// The first row to show, given the current size.
    pub fn first_row(&self) -> usize {
        self.top
            .map_or(self.max_top(), |top| top.min(self.max_top()))
    }

    /// Rows below the view, hidden because the view is scrolled up.
    pub fn rows_below(&self) -> usize {
        self.max_top().saturating_sub(self.first_row())
    }

    pub fn up(&mut self, rows: usize) {
        self.top = Some(self.first_row().saturating_sub(rows));
    }

    pub fn down(&mut self, rows: usize) {
        let top = self.first_row() + rows;
        self.top = (top < self.max_top()).then_some(top);
    }

    fn page(&self) -> usize {
        self.height.saturating_sub(2).max(1)
    }
}

/// Whether NATS is reachable, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Up,
    /// Down since this moment; the client is reconnecting.
    Down {
        since: Instant,
    },
}

/// The whole state of one full-screen console.
#[derive(Debug, Clone)]
pub struct App {
    pub session_id: String,
    /// The server, credentials hidden, for the banner.
    pub nats_url: String,
    pub conversation: Conversation,
    /// The tool calls waiting for the human's word, for the prompt.
    pub approvals: Approvals,
    pub vitals: Vitals,
    pub input: Input,
    pub scroll: Scroll,
    pub show_musings: bool,
    pub connection: Connection,
    /// Whether the feed ever attached to the session.
    pub attached: bool,
    /// The checkpoints the log names, for `/rewind`.
    pub checkpoints: crate::rewind::Checkpoints,
    /// A `/rewind` waiting for the human's `y`: the line then sent.
    pub asking: Option<String>,
    /// The Orchestrators whose handed-over branch was shown (their ids).
    branches_shown: Vec<String>,
}

impl App {
    pub fn new(session_id: &str, nats_url: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            nats_url: arbiter_bus::redact_url(nats_url),
            conversation: Conversation::default(),
            approvals: Approvals::default(),
            vitals: Vitals::new(session_id),
            input: Input::default(),
            scroll: Scroll::default(),
            show_musings: false,
            connection: Connection::Up,
            attached: false,
            checkpoints: crate::rewind::Checkpoints::default(),
            asking: None,
            branches_shown: Vec::new(),
        }
    }

    /// Takes a session status, published or (`age` old) read from the bucket.
    fn take_session(&mut self, status: SessionStatus, age: Option<Duration>, now: Instant) {
        if status.session_id == self.session_id {
            self.approvals.status(&status);
        }
        let (idle, last_seq, at) = (
            status.state == SessionState::Idle && status.queued == 0,
            status.last_seq,
            status.at,
        );
        let kept = match age {
            Some(age) => self.vitals.stored_session(status, age, now),
            None => self.vitals.session(status, now),
        };
        if kept && idle {
            self.conversation.idle(last_seq, at);
        }
    }

    /// Takes in what the feed reported, `now` being when it arrived.
    pub fn apply(&mut self, event: FeedEvent, now: Instant) {
        match event {
            FeedEvent::Log(entry) => {
                self.vitals.log(&entry);
                self.approvals.log(&entry);
                self.checkpoints.log(&entry);
                if let Some(text) = self.conversation.log(&entry) {
                    self.input.remember(&text);
                }
            }
            FeedEvent::Malformed { detail } => self.conversation.notice(
                Kind::Error,
                &format!("a malformed log entry was skipped: {detail}"),
            ),
            FeedEvent::Session(status) => self.take_session(status, None, now),
            FeedEvent::StoredSession { status, age } => {
                self.take_session(status, Some(age), now);
            }
            FeedEvent::Orchestrator(status) => {
                if status.session_id == self.session_id
                    && let Some(branch) = &status.branch
                    && !self.branches_shown.contains(&status.orch_id)
                {
                    self.branches_shown.push(status.orch_id.clone());
                    self.conversation.notice(
                        Kind::Event,
                        &crate::rewind::branch_line(status.number, branch),
                    );
                }
                self.vitals.orchestrator(status, now);
            }
            FeedEvent::Delta(delta) => {
                if delta.session_id == self.session_id {
                    self.conversation.delta(&delta);
                }
            }
            FeedEvent::Connection { up } => {
                self.vitals.connection(up, now);
                match (up, self.connection) {
                    (true, _) => self.connection = Connection::Up,
                    (false, Connection::Up) => self.connection = Connection::Down { since: now },
                    (false, Connection::Down { .. }) => {}
                }
            }
            FeedEvent::Attached => self.attached = true,
            FeedEvent::NotSent {
                message_id,
                text,
                error,
            } => {
                self.conversation.not_sent(&message_id);
                self.approvals.not_sent(&message_id);
                self.conversation
                    .notice(Kind::Error, &format!("message not sent: {error}"));
                if self.input.is_empty() {
                    self.input.set_text(&text);
                }
            }
            FeedEvent::Trouble(text) => self.conversation.notice(Kind::Error, &text),
        }
    }

    /// What the caller must do once a batch of feed events is in: ring the
    /// bell when an approval waits that it has not rung for (an approval
    /// asked and answered within the batch, as a replay brings them, does not).
    pub fn after_feed(&mut self) -> Option<Action> {
        self.approvals.bell().then_some(Action::Bell)
    }

    /// Takes in a terminal event; the returned action is for the caller.
    pub fn event(&mut self, event: &Event) -> Option<Action> {
        match event {
            Event::Key(key) => self.key(key),
            Event::Paste(text) => {
                self.paste(text);
                None
            }
            Event::Mouse(mouse) => {
                self.mouse(mouse);
                None
            }
            _ => None,
        }
    }

    pub fn key(&mut self, key: &KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        // A rewind asked about: `y` sends it, any other key leaves it.
        if let Some(line) = self.asking.take() {
            if matches!(key.code, KeyCode::Char('y' | 'Y')) && !ctrl && !alt {
                return self.send_now(crate::command::typed(&line), line);
            }
            self.conversation.notice(Kind::Event, "Not rewound.");
            return None;
        }
        match key.code {
            KeyCode::Char('c' | 'd') if ctrl => return Some(Action::Quit),
            KeyCode::Char('l') if ctrl => return Some(Action::Redraw),
            KeyCode::Char('t') if ctrl => self.show_musings = !self.show_musings,
            KeyCode::Char('j') if ctrl => self.input.newline(),
            KeyCode::Enter if alt || shift || ctrl => self.input.newline(),
            KeyCode::Enter => return self.submit(),
            KeyCode::Char('a') if ctrl => self.input.home(),
            KeyCode::Char('e') if ctrl => self.input.end(),
            KeyCode::Char('u') if ctrl => self.input.kill_to_start(),
            KeyCode::Char('k') if ctrl => self.input.kill_to_end(),
            KeyCode::Char('w') if ctrl => self.input.delete_word(),
            KeyCode::Char(c)
                if !ctrl && !alt && self.input.is_empty() && answer_key(c).is_some() =>
            {
                if let Some(action) = self.answer(c) {
                    return Some(action);
                }
                self.input.insert_char(c);
            }
            KeyCode::Char(c) if !ctrl => self.input.insert_char(c),
            KeyCode::Backspace => self.input.backspace(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Left => self.input.left(),
            KeyCode::Right => self.input.right(),
            KeyCode::Home => self.input.home(),
            KeyCode::End if ctrl => self.scroll.top = None,
            KeyCode::End if self.scroll.top.is_some() => self.scroll.top = None,
            KeyCode::End => self.input.end(),
            KeyCode::Up => self.browse(Input::up, Input::history_prev),
            KeyCode::Down => self.browse(Input::down, Input::history_next),
            KeyCode::PageUp => self.scroll.up(self.scroll.page()),
            KeyCode::PageDown => self.scroll.down(self.scroll.page()),
            _ => {}
        }
        None
    }

    /// Up or Down: to the next line of the input if there is one that way,
    /// else (at once on a single line) through the history.
    fn browse(&mut self, line: fn(&mut Input) -> bool, history: fn(&mut Input) -> bool) {
        if !line(&mut self.input) {
            history(&mut self.input);
        }
    }

    /// `y`, `a` or `n` on an empty input while an approval waits for this
    /// console: the answer to the oldest, as `/allow 3`, `/always 3` or
    /// `/deny 3` typed would be. `None`: nothing waits, the key is a letter.
    fn answer(&mut self, key: char) -> Option<Action> {
        let (asked, _) = self.approvals.next()?;
        let text = format!("{} {}", answer_key(key)?, asked.approval);
        self.send(text)
    }

    fn submit(&mut self) -> Option<Action> {
        let text = self.input.submit()?;
        self.send(text)
    }

    /// The action a typed line calls for: a message to send, or (a command
    /// shown here, or one that cannot be read) none. A line typed elsewhere
    /// than the input (`arbiter-web`'s box) goes through here too.
    pub fn send(&mut self, text: String) -> Option<Action> {
        let typed = crate::command::typed(&text);
        match &typed {
            Typed::Wrong(why) => {
                // Not sent: the line comes back to be put right.
                self.conversation.notice(Kind::Error, why);
                self.input.set_text(&text);
                return None;
            }
            Typed::Show => {
                let summary = crate::budget::summary(self.vitals.session_status());
                self.conversation.notice(Kind::Event, &summary);
                return None;
            }
            Typed::Rewind { checkpoint, stop } => {
                let known = match self.checkpoints.resolve(checkpoint) {
                    Ok(known) => known.clone(),
                    Err(why) => {
                        self.conversation
                            .notice(Kind::Error, &format!("/rewind: {why}; nothing was sent"));
                        self.input.set_text(&text);
                        return None;
                    }
                };
                // Live Orchestrators are stopped first: the console asks.
                let working: Vec<String> = self
                    .vitals
                    .team()
                    .iter()
                    .map(|a| arbiter_protocol::member_name(a.number, a.member))
                    .collect();
                let stop = *stop || !working.is_empty();
                let question = crate::rewind::question(&known, &working);
                self.conversation.notice(
                    Kind::Approval,
                    &format!("{question} Press y to rewind, any other key to leave it."),
                );
                let flag = if stop { " --stop" } else { "" };
                self.asking = Some(format!("/rewind{flag} {}", known.commit));
                self.scroll.top = None;
                return None;
            }
            Typed::Words
            | Typed::Stop
            | Typed::Change(_)
            | Typed::Approval(_)
            | Typed::Policy(_) => {}
        }
        self.send_now(typed, text)
    }

    /// Sends a line already checked (and, for a rewind, confirmed).
    fn send_now(&mut self, typed: Typed, text: String) -> Option<Action> {
        let message_id = uuid::Uuid::now_v7().to_string();
        match typed {
            // An answer is logged as the approval's answered entry, not as
            // the human's words: the prompt moves on until the log has it.
            Typed::Approval(reply) => self.approvals.sent(&message_id, reply.approval),
            _ => self.conversation.sending(&message_id, &text),
        }
        // What one sends, one wants to see answered.
        self.scroll.top = None;
        Some(Action::Send { message_id, text })
    }

    pub fn paste(&mut self, text: &str) {
        self.input.insert_str(text);
    }

    pub fn mouse(&mut self, mouse: &MouseEvent) {
        match mouse.kind {
            MouseEventKind::ScrollUp => self.scroll.up(WHEEL_ROWS),
            MouseEventKind::ScrollDown => self.scroll.down(WHEEL_ROWS),
            _ => {}
        }
    }

    /// How long NATS has been unreachable, if it is.
    pub fn down_for(&self, now: Instant) -> Option<Duration> {
        match self.connection {
            Connection::Up => None,
            Connection::Down { since } => Some(now.saturating_duration_since(since)),
        }
    }
}

/// The command a prompt key answers with.
fn answer_key(key: char) -> Option<&'static str> {
    match key.to_ascii_lowercase() {
        'y' => Some("/allow"),
        'a' => Some("/always"),
        'n' => Some("/deny"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{ArbiterEntry, HumanEntry, LogBody};
    use chrono::Utc;
    use pretty_assertions::assert_eq;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    fn press(app: &mut App, code: KeyCode) -> Option<Action> {
        app.key(&key(code, KeyModifiers::NONE))
    }

    fn type_str(app: &mut App, s: &str) {
        for c in s.chars() {
            press(app, KeyCode::Char(c));
        }
    }

    fn log(seq: u64, body: LogBody) -> FeedEvent {
        FeedEvent::Log(LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: Utc::now(),
            body,
        })
    }

    #[test]
    fn enter_sends_and_newline_keys_do_not() {
        let mut app = App::new("s", "nats://u:p@h:4222");
        assert_eq!(app.nats_url, "nats://<credentials>@h:4222");
        assert_eq!(press(&mut app, KeyCode::Enter), None, "nothing to send");
        type_str(&mut app, "one");
        app.key(&key(KeyCode::Enter, KeyModifiers::ALT));
        type_str(&mut app, "two");
        app.key(&key(KeyCode::Char('j'), KeyModifiers::CONTROL));
        type_str(&mut app, "three");
        assert_eq!(app.input.lines(), ["one", "two", "three"]);
        let Some(Action::Send { message_id, text }) = press(&mut app, KeyCode::Enter) else {
            panic!("Enter sends");
        };
        assert_eq!(text, "one\ntwo\nthree");
        assert!(app.input.is_empty());
        assert_eq!(app.conversation.pending()[0].message_id, message_id);

        app.apply(
            log(
                1,
                LogBody::Human(HumanEntry {
                    message_id,
                    text: text.clone(),
                }),
            ),
            Instant::now(),
        );
        assert!(app.conversation.pending().is_empty());
        assert_eq!(app.input.history(), [text]);
    }

    #[test]
    fn up_and_down_browse_history_only_on_a_single_line() {
        let mut app = App::new("s", "nats://h");
        for text in ["first", "second"] {
            type_str(&mut app, text);
            press(&mut app, KeyCode::Enter);
        }
        press(&mut app, KeyCode::Up);
        assert_eq!(app.input.text(), "second");
        press(&mut app, KeyCode::Up);
        assert_eq!(app.input.text(), "first");
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Down);
        assert_eq!(app.input.text(), "");

        type_str(&mut app, "a");
        app.key(&key(KeyCode::Char('j'), KeyModifiers::CONTROL));
        type_str(&mut app, "b");
        press(&mut app, KeyCode::Up);
        assert_eq!(app.input.cursor(), (0, 1), "Up moves within the input");
        assert_eq!(app.input.text(), "a\nb");
        press(&mut app, KeyCode::Up);
        assert_eq!(
            app.input.text(),
            "second",
            "past the first line, the history"
        );
        press(&mut app, KeyCode::Down);
        assert_eq!(app.input.text(), "a\nb", "the draft comes back");
    }

    #[test]
    fn history_goes_on_through_a_recalled_multi_line_entry() {
        let mut app = App::new("s", "nats://h");
        type_str(&mut app, "one");
        press(&mut app, KeyCode::Enter);
        type_str(&mut app, "a");
        app.key(&key(KeyCode::Enter, KeyModifiers::ALT));
        type_str(&mut app, "b");
        press(&mut app, KeyCode::Enter);
        type_str(&mut app, "two");
        press(&mut app, KeyCode::Enter);
        type_str(&mut app, "draft");

        let mut seen = Vec::new();
        for _ in 0..5 {
            press(&mut app, KeyCode::Up);
            seen.push((app.input.text(), app.input.cursor()));
        }
        assert_eq!(
            seen,
            [
                ("two".to_owned(), (0, 3)),
                ("a\nb".to_owned(), (1, 1)),
                ("a\nb".to_owned(), (0, 1)),
                ("one".to_owned(), (0, 3)),
                ("one".to_owned(), (0, 3)),
            ]
        );
        seen.clear();
        for _ in 0..4 {
            press(&mut app, KeyCode::Down);
            seen.push((app.input.text(), app.input.cursor()));
        }
        assert_eq!(
            seen,
            [
                ("a\nb".to_owned(), (1, 1)),
                ("two".to_owned(), (0, 3)),
                ("draft".to_owned(), (0, 5)),
                ("draft".to_owned(), (0, 5)),
            ]
        );
    }

    #[test]
    fn quit_musings_and_paste() {
        let mut app = App::new("s", "nats://h");
        for c in ['c', 'd'] {
            assert_eq!(
                app.key(&key(KeyCode::Char(c), KeyModifiers::CONTROL)),
                Some(Action::Quit)
            );
        }
        app.key(&key(KeyCode::Char('t'), KeyModifiers::CONTROL));
        assert!(app.show_musings);
        app.event(&Event::Paste("line one\nline two".into()));
        assert_eq!(app.input.lines(), ["line one", "line two"]);
    }

    #[test]
    fn scrolling_pages_and_returns_to_the_tail() {
        let mut app = App::new("s", "nats://h");
        app.scroll.rows = 100;
        app.scroll.height = 20;
        assert_eq!(app.scroll.first_row(), 80);
        press(&mut app, KeyCode::PageUp);
        assert_eq!(app.scroll.first_row(), 62);
        assert_eq!(app.scroll.rows_below(), 18);
        app.mouse(&MouseEvent {
            kind: MouseEventKind::ScrollUp,
            column: 0,
            row: 0,
            modifiers: KeyModifiers::NONE,
        });
        assert_eq!(app.scroll.first_row(), 59);
        // New rows do not move a scrolled view.
        app.scroll.rows = 150;
        assert_eq!(app.scroll.first_row(), 59);
        press(&mut app, KeyCode::PageDown);
        assert_eq!(app.scroll.top, Some(77));
        press(&mut app, KeyCode::End);
        assert_eq!(app.scroll.top, None, "End returns to the live tail");
        press(&mut app, KeyCode::PageUp);
        for _ in 0..10 {
            press(&mut app, KeyCode::PageDown);
        }
        assert_eq!(app.scroll.top, None, "paging past the end follows again");
        type_str(&mut app, "x");
        press(&mut app, KeyCode::Home);
        press(&mut app, KeyCode::End);
        assert_eq!(
            app.input.cursor(),
            (0, 1),
            "End at the tail moves the cursor"
        );
    }

    #[test]
    fn a_failed_send_comes_back_to_the_input() {
        let mut app = App::new("s", "nats://h");
        type_str(&mut app, "hello");
        let Some(Action::Send { message_id, .. }) = press(&mut app, KeyCode::Enter) else {
            panic!("Enter sends");
        };
        app.apply(
            FeedEvent::NotSent {
                message_id,
                text: "hello".into(),
                error: "timed out".into(),
            },
            Instant::now(),
        );
        assert!(app.conversation.pending().is_empty());
        assert_eq!(app.input.text(), "hello");
        assert_eq!(
            app.conversation.entries().last().unwrap().text,
            "message not sent: timed out"
        );
    }

    #[test]
    fn connection_state_is_tracked_from_the_first_loss() {
        let t0 = Instant::now();
        let mut app = App::new("s", "nats://h");
        app.apply(FeedEvent::Connection { up: false }, t0);
        app.apply(
            FeedEvent::Connection { up: false },
            t0 + Duration::from_secs(3),
        );
        assert_eq!(
            app.down_for(t0 + Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        app.apply(FeedEvent::Connection { up: true }, t0);
        assert_eq!(app.down_for(t0), None);
        assert!(!app.attached);
        app.apply(FeedEvent::Attached, t0);
        assert!(app.attached);
        app.apply(
            log(1, LogBody::Arbiter(ArbiterEntry { text: "x".into() })),
            t0,
        );
        assert_eq!(app.conversation.entries().len(), 1);
    }
}
