//! The full-screen view drawn into ratatui's `TestBackend`, fed with log
//! entries, statuses and deltas as the feed would deliver them, and compared
//! with the snapshots in `tests/snapshots/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use arbiter_console::app::{Action, App, FeedEvent};
use arbiter_protocol::{
    ActiveOrchestrator, Answerer, ApprovalAnsweredEntry, ApprovalAskedEntry, ApprovalDecision,
    ApprovalRequest, ArbiterDelta, ArbiterEntry, ArbiterIntent, ArbiterToOrchestratorEntry,
    HumanEntry, LogBody, LogEntry, MusingEntry, OrchestratorEntry, OrchestratorState,
    OrchestratorStatus, ReleasedEntry, SessionState, SessionStatus, SummonedEntry, WaitingApproval,
};
use chrono::{DateTime, TimeZone, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};

const SESSION: &str = "0193f2c4-7d1e-7a3b-9c41-2d8e6f0a1b37";
const ORCH: &str = "0193f2c6-0b7d-7e21-8f90-4c3b2a1d0e9f";
const BRIEF: &str = "Build an authentication system in src/auth/: Google and GitHub OAuth, \
                     JWT access tokens that expire after 48 hours.";

fn at(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 9, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

/// Builds the state of one screen: events arrive at `t0` (or as long after
/// it as [`Scene::later`] says), the screen is drawn later.
struct Scene {
    app: App,
    t0: Instant,
    /// How long after `t0` the next events arrive.
    offset: Duration,
    seq: u64,
}

impl Scene {
    fn new() -> Self {
        Self {
            app: App::new(SESSION, "nats://127.0.0.1:4222"),
            t0: Instant::now(),
            offset: Duration::ZERO,
            seq: 0,
        }
    }

    /// The events from now on arrive `after` past `t0`.
    fn later(&mut self, after: Duration) -> &mut Self {
        self.offset = after;
        self
    }

    fn feed(&mut self, event: FeedEvent) -> &mut Self {
        self.app.apply(event, self.t0 + self.offset);
        self
    }

    fn log(&mut self, body: LogBody) -> &mut Self {
        self.seq += 1;
        let entry = LogEntry {
            v: 1,
            session_id: SESSION.into(),
            seq: self.seq,
            at: at(self.seq as i64),
            body,
        };
        self.feed(FeedEvent::Log(entry))
    }

    fn session(&mut self, state: SessionState, pct: f32, active: bool) -> &mut Self {
        let status = SessionStatus {
            team: Vec::new(),
            spend: Default::default(),
            archived_at: None,
            budget: Default::default(),
            approvals: Vec::new(),
            attention: None,
            v: 1,
            session_id: SESSION.into(),
            state,
            queued: 0,
            arbiter_context_pct: pct,
            arbiter_context_tokens: 36_000,
            active: active.then(|| ActiveOrchestrator {
                member: None,
                reported: false,
                orch_id: ORCH.into(),
                number: 1,
            }),
            summoned: 1,
            last_seq: self.seq,
            created_at: at(0),
            at: at(self.seq as i64),
        };
        self.feed(FeedEvent::Session(status))
    }

    fn orchestrator(
        &mut self,
        state: OrchestratorState,
        pct: f32,
        tool: Option<&str>,
    ) -> &mut Self {
        let status = OrchestratorStatus {
            spend: Default::default(),
            v: 1,
            session_id: SESSION.into(),
            orch_id: ORCH.into(),
            number: 1,
            worker_id: "worker-1".into(),
            state,
            context_pct: pct,
            context_tokens: 148_000,
            context_budget: 200_000,
            current_tool: tool.map(str::to_owned),
            tool_count: 12,
            parked: false,
            mcp_failures: Vec::new(),
            branch: None,
            at: at(self.seq as i64),
        };
        self.feed(FeedEvent::Orchestrator(status))
    }

    fn delta(&mut self, turn: u64, intent: Option<ArbiterIntent>, text: &str) -> &mut Self {
        let delta = ArbiterDelta {
            v: 1,
            session_id: SESSION.into(),
            turn,
            attempt: 0,
            intent,
            text: text.into(),
            at: at(self.seq as i64 + 1),
        };
        self.feed(FeedEvent::Delta(delta))
    }

    /// Draws at `after` past the events and returns the buffer.
    fn draw(&mut self, width: u16, height: u16, after: Duration) -> ratatui::buffer::Buffer {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        let now = self.t0 + after;
        terminal
            .draw(|frame| arbiter_console::ui::draw(frame, &mut self.app, now))
            .unwrap();
        terminal.backend().buffer().clone()
    }

    /// The screen as text, one line per row.
    fn screen(&mut self, width: u16, height: u16) -> String {
        text(&self.draw(width, height, Duration::from_secs(1)))
    }
}

fn text(buffer: &ratatui::buffer::Buffer) -> String {
    let width = buffer.area.width as usize;
    buffer
        .content
        .chunks(width)
        .map(|row| row.iter().map(|cell| cell.symbol()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn human(text: &str) -> LogBody {
    LogBody::Human(HumanEntry {
        message_id: format!("m-{text}"),
        text: text.into(),
    })
}

fn to_orch(text: &str) -> LogBody {
    LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
        member: None,
        number: 1,
        orch_id: ORCH.into(),
        text: text.into(),
        input_seq: None,
        budget: None,
    })
}

fn orch(expects_response: bool, text: &str) -> LogBody {
    LogBody::Orchestrator(OrchestratorEntry {
        member: None,
        number: 1,
        orch_id: ORCH.into(),
        expects_response,
        text: text.into(),
        evidence: None,
        handoff: None,
    })
}

/// The conversation of seed 004, as this system logs it, up to the point
/// where Orchestrator I is editing with 74 % of its context used.
fn seed_mid_flight() -> Scene {
    let mut scene = Scene::new();
    scene
        .log(human(
            "I need an auth system. Google and GitHub OAuth, 48hr tokens.",
        ))
        .log(LogBody::Summoned(SummonedEntry {
            member: None,
            number: 1,
            orch_id: ORCH.into(),
            pool: "default".into(),
            brief: BRIEF.into(),
        }))
        .log(orch(
            true,
            "I'll begin with the OAuth configuration. Should I use Passport.js or \
             implement directly against provider APIs?",
        ))
        .log(to_orch("Passport. It is known."))
        .log(orch(
            false,
            "Understood. Creating provider configurations now.",
        ))
        .log(human("Add refresh token rotation too"))
        .log(to_orch(
            "The mortal speaks. Heed: refresh tokens shall rotate.",
        ))
        .log(orch(
            false,
            "Acknowledged. Adding rotation logic to the JWT service.",
        ))
        .session(SessionState::Idle, 18.0, true)
        .orchestrator(OrchestratorState::Working, 74.0, Some("Edit"));
    scene
}

#[test]
fn an_empty_session() {
    let mut scene = Scene::new();
    insta::assert_snapshot!("empty_session", scene.screen(82, 28));
}

#[test]
fn the_seed_example_mid_flight() {
    let mut scene = seed_mid_flight();
    let screen = scene.screen(82, 32);
    assert!(screen.contains("◈ Edit (12)"), "{screen}");
    assert!(screen.contains("████████░░ 74%"), "{screen}");
    insta::assert_snapshot!("seed_mid_flight", screen);
}

#[test]
fn after_release_the_arbiter_awaits_a_command() {
    let mut scene = seed_mid_flight();
    scene
        .log(orch(
            true,
            "Complete. Auth system in src/auth/, refresh tokens rotate.",
        ))
        .log(LogBody::Released(ReleasedEntry {
            member: None,
            numbers: vec![1],
        }))
        .log(LogBody::Arbiter(ArbiterEntry {
            text: "It is done.".into(),
        }))
        .orchestrator(OrchestratorState::Stopped, 81.0, None)
        .session(SessionState::Idle, 23.0, false);
    let screen = scene.screen(82, 32);
    assert!(screen.contains("Awaiting your command."), "{screen}");
    assert!(!screen.contains("Orchestrator I ─"), "{screen}");
    insta::assert_snapshot!("after_release", screen);
}

#[test]
fn a_narrow_terminal() {
    let mut scene = seed_mid_flight();
    insta::assert_snapshot!("narrow", scene.screen(40, 24));
}

#[test]
fn a_terminal_too_small_to_draw() {
    let mut scene = seed_mid_flight();
    insta::assert_snapshot!("too_small", scene.screen(28, 6));
}

#[test]
fn the_reply_appears_as_it_is_written() {
    let mut scene = Scene::new();
    scene
        .log(human("What is the state of the realm?"))
        .session(SessionState::Thinking, 4.0, false)
        .delta(1, Some(ArbiterIntent::AddressHuman), "The realm ")
        .delta(1, None, "endures. Speak your");
    let screen = scene.screen(60, 16);
    insta::assert_snapshot!("streaming", screen);

    // The log entry replaces what the deltas built.
    scene.log(LogBody::Arbiter(ArbiterEntry {
        text: "The realm endures. Speak your will.".into(),
    }));
    scene.session(SessionState::Idle, 5.0, false);
    let screen = scene.screen(60, 16);
    assert!(
        screen.contains("Arbiter: The realm endures. Speak your will."),
        "{screen}"
    );
    assert!(!screen.contains('▍'), "{screen}");
}

#[test]
fn a_silent_orchestrator_stalls_then_is_lost() {
    // The console is connected: silence is the Orchestrator's.
    let mut scene = seed_mid_flight();
    let stalled = text(&scene.draw(82, 32, Duration::from_secs(8)));
    assert!(stalled.contains("stalled: no status for 8 s"), "{stalled}");
    assert!(!stalled.contains("unknown"), "{stalled}");
    insta::assert_snapshot!("stalled_while_connected", stalled);
    let lost = text(&scene.draw(82, 32, Duration::from_secs(20)));
    assert!(lost.contains("lost: no status for 20 s"), "{lost}");
}

#[test]
fn liveness_and_the_reconnect_banner() {
    let mut scene = seed_mid_flight();
    scene.feed(FeedEvent::Attached);
    scene.feed(FeedEvent::Connection { up: false });
    // The console hears nothing: the silence is its own, nobody is blamed.
    let offline = text(&scene.draw(82, 32, Duration::from_secs(8)));
    insta::assert_snapshot!("stalled_and_reconnecting", offline);
    let later = text(&scene.draw(82, 32, Duration::from_secs(20)));
    assert!(!later.contains("lost"), "{later}");
    assert!(!later.contains("no status for"), "{later}");
    assert!(
        later.contains("Arbiter · unknown: console offline"),
        "{later}"
    );
    assert!(later.contains("unknown: console offline   ║"), "{later}");
    assert!(
        later.contains("NATS unreachable at nats://127.0.0.1:4222: reconnecting (20 s)"),
        "{later}"
    );

    // Back at 20 s: still unknown until a status arrives (or for a grace) ...
    scene
        .later(Duration::from_secs(20))
        .feed(FeedEvent::Connection { up: true });
    let back = text(&scene.draw(82, 32, Duration::from_secs(22)));
    assert!(!back.contains("NATS unreachable"), "{back}");
    assert!(
        back.contains("unknown: no status since reconnecting"),
        "{back}"
    );
    // ... then silence counts from the reconnection.
    let silent = text(&scene.draw(82, 32, Duration::from_secs(27)));
    assert!(silent.contains("stalled: no status for 7 s"), "{silent}");

    scene
        .later(Duration::from_secs(28))
        .session(SessionState::Idle, 18.0, true)
        .orchestrator(OrchestratorState::Waiting, 75.0, None);
    let heard = text(&scene.draw(82, 32, Duration::from_secs(29)));
    assert!(heard.contains("waiting for the Arbiter"), "{heard}");
    assert!(heard.contains("◇ 12 tool calls"), "{heard}");
    assert!(!heard.contains("unknown"), "{heard}");
}

#[test]
fn scrollback_musings_and_a_multi_line_input() {
    let mut scene = seed_mid_flight();
    scene.log(LogBody::Musing(MusingEntry {
        text: "The mortal wants rotation; the Orchestrator will comply.".into(),
    }));
    let key = |app: &mut App, code, modifiers| app.key(&KeyEvent::new(code, modifiers));
    let hidden = scene.screen(82, 32);
    assert!(!hidden.contains("Arbiter (musing)"), "{hidden}");

    key(&mut scene.app, KeyCode::Char('t'), KeyModifiers::CONTROL);
    for c in "First line".chars() {
        key(&mut scene.app, KeyCode::Char(c), KeyModifiers::NONE);
    }
    key(&mut scene.app, KeyCode::Enter, KeyModifiers::ALT);
    for c in "second".chars() {
        key(&mut scene.app, KeyCode::Char(c), KeyModifiers::NONE);
    }
    key(&mut scene.app, KeyCode::PageUp, KeyModifiers::NONE);
    insta::assert_snapshot!("scrolled_with_musings", scene.screen(82, 24));

    key(&mut scene.app, KeyCode::End, KeyModifiers::NONE);
    let tail = scene.screen(82, 24);
    assert!(
        tail.contains("Arbiter (musing): The mortal wants rotation"),
        "{tail}"
    );
    assert!(!tail.contains("more rows"), "{tail}");
    let sent = key(&mut scene.app, KeyCode::Enter, KeyModifiers::NONE);
    assert!(matches!(sent, Some(Action::Send { ref text, .. }) if text == "First line\nsecond"));
    let pending = scene.screen(82, 24);
    assert!(pending.contains("You: First line"), "{pending}");
    assert!(pending.contains("second ⋯"), "{pending}");
}

#[test]
fn speakers_have_their_colours_and_notes_are_dimmed() {
    let mut scene = seed_mid_flight();
    let buffer = scene.draw(82, 32, Duration::from_secs(1));
    let screen = text(&buffer);
    let find = |needle: &str| -> (u16, u16) {
        for (y, line) in screen.lines().enumerate() {
            if let Some(byte) = line.find(needle) {
                return (line[..byte].chars().count() as u16, y as u16);
            }
        }
        panic!("{needle:?} is not on the screen:\n{screen}");
    };
    let style = |needle: &str| buffer[find(needle)].style();
    assert_eq!(style("You:").fg, Some(Color::Green));
    assert_eq!(style("Arbiter → I:").fg, Some(Color::Yellow));
    assert_eq!(style("Orchestrator I: I'll").fg, Some(Color::Cyan));
    let note = style("Understood.");
    assert!(note.add_modifier.contains(Modifier::DIM), "{note:?}");
    let question = style("I'll begin");
    assert!(
        !question.add_modifier.contains(Modifier::DIM),
        "{question:?}"
    );
    assert_eq!(
        style("████████░░").fg,
        Some(Color::Yellow),
        "74 % is past the first warning"
    );
    assert_eq!(style("██░░░░░░░░").fg, Some(Color::Green));
}

#[test]
fn the_console_page_shows_this_screen() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/console.md"))
        .expect("docs/console.md in the workspace");
    let screen = seed_mid_flight().screen(82, 32);
    assert!(
        page.contains(&format!("```\n{screen}\n```")),
        "docs/console.md's capture of the console differs from this render:\n{screen}"
    );
}

#[test]
fn a_console_that_never_connected_says_connecting() {
    // Before the first attach there is nothing to reconnect to: the banner
    // says "connecting"; after an attach and a loss, "reconnecting".
    let mut scene = Scene::new();
    scene.feed(FeedEvent::Connection { up: false });
    let first = text(&scene.draw(82, 32, Duration::from_secs(3)));
    assert!(
        first.contains("NATS unreachable at nats://127.0.0.1:4222: connecting (3 s)"),
        "{first}"
    );
    scene
        .feed(FeedEvent::Connection { up: true })
        .feed(FeedEvent::Attached);
    scene.feed(FeedEvent::Connection { up: false });
    let later = text(&scene.draw(82, 32, Duration::from_secs(5)));
    assert!(later.contains(": reconnecting ("), "{later}");
}

#[test]
fn a_team_shows_how_many_reported_and_a_bar_per_member() {
    let mut scene = Scene::new();
    let member = |m: u32, reported: bool| ActiveOrchestrator {
        orch_id: format!("orch-2-{m}"),
        number: 2,
        member: Some(m),
        reported,
    };
    let team = vec![member(1, true), member(2, true), member(3, false)];
    scene.log(LogBody::Orchestrator(OrchestratorEntry {
        number: 2,
        member: Some(2),
        orch_id: "orch-2-2".into(),
        expects_response: true,
        text: "The parser is written.".into(),
        evidence: None,
        handoff: None,
    }));
    scene.feed(FeedEvent::Session(SessionStatus {
        team: team.clone(),
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals: Vec::new(),
        attention: None,
        v: 1,
        session_id: SESSION.into(),
        state: SessionState::Idle,
        queued: 0,
        arbiter_context_pct: 12.0,
        arbiter_context_tokens: 24_000,
        active: team.first().cloned(),
        summoned: 2,
        last_seq: 0,
        created_at: at(0),
        at: at(1),
    }));
    // Member 3 is in a tool: its bar says which, as for one Orchestrator.
    scene.feed(FeedEvent::Orchestrator(OrchestratorStatus {
        spend: Default::default(),
        v: 1,
        session_id: SESSION.into(),
        orch_id: "orch-2-3".into(),
        number: 2,
        worker_id: "worker-1".into(),
        state: OrchestratorState::Working,
        context_pct: 31.0,
        context_tokens: 62_000,
        context_budget: 200_000,
        current_tool: Some("Edit".into()),
        tool_count: 12,
        parked: false,
        mcp_failures: Vec::new(),
        branch: None,
        at: at(2),
    }));
    let screen = scene.screen(82, 28);
    assert!(screen.contains("Team II: 2 of 3 reported"), "{screen}");
    for (name, state) in [
        ("Orchestrator II.1", "reported"),
        ("Orchestrator II.2", "reported"),
        ("Orchestrator II.3", "◈ Edit (12)"),
    ] {
        let line = screen
            .lines()
            .find(|l| l.contains(&format!("{name} ·")))
            .unwrap_or_else(|| panic!("no line for {name}: {screen}"));
        assert!(line.contains(state), "{line}");
    }
    assert!(!screen.contains("Awaiting your command."), "{screen}");
    assert!(
        screen.contains("Orchestrator II.2: The parser is written."),
        "{screen}"
    );
}

fn asked(approval: u32, command: &str) -> LogBody {
    LogBody::ApprovalAsked(ApprovalAskedEntry {
        approval,
        number: 1,
        member: None,
        orch_id: ORCH.into(),
        request: ApprovalRequest {
            call_id: format!("call-{approval}"),
            tool: "bash".into(),
            input: serde_json::json!({ "command": command }),
            rule: "ask bash(git push*)".into(),
        },
        deadline: at(600),
    })
}

fn answered(approval: u32, decision: ApprovalDecision) -> LogBody {
    LogBody::ApprovalAnswered(ApprovalAnsweredEntry {
        approval,
        number: 1,
        member: None,
        orch_id: ORCH.into(),
        call_id: format!("call-{approval}"),
        decision,
        reason: None,
        by: Answerer::Console {
            name: "alice".into(),
        },
        rule: None,
        input_seq: u64::from(approval),
    })
}

/// The session's status as the bucket held it on attaching, at log seq
/// `last_seq`, listing `waiting` as its approvals.
fn stored(scene: &mut Scene, last_seq: u64, waiting: &[u32]) {
    let approvals = waiting
        .iter()
        .map(|&approval| WaitingApproval {
            approval,
            number: 1,
            member: None,
            tool: "bash".into(),
            summary: "git push".into(),
            asked_at: at(0),
            deadline: at(600),
        })
        .collect();
    let status = SessionStatus {
        team: Vec::new(),
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals,
        attention: None,
        v: 1,
        session_id: SESSION.into(),
        state: SessionState::Idle,
        queued: 0,
        arbiter_context_pct: 18.0,
        arbiter_context_tokens: 36_000,
        active: None,
        summoned: 1,
        last_seq,
        created_at: at(0),
        at: at(last_seq as i64),
    };
    scene.feed(FeedEvent::StoredSession {
        status,
        age: Duration::from_secs(1),
    });
}

fn press(app: &mut App, c: char) -> Option<Action> {
    app.key(&KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

fn sent(action: Option<Action>) -> String {
    match action {
        Some(Action::Send { text, .. }) => text,
        other => panic!("nothing sent: {other:?}"),
    }
}

#[test]
fn a_waiting_approval_is_asked_above_the_input_and_rings_once() {
    let mut scene = seed_mid_flight();
    assert_eq!(scene.app.after_feed(), None, "nothing waits: no bell");
    scene.log(asked(1, "git push origin main"));
    assert_eq!(scene.app.after_feed(), Some(Action::Bell));
    assert_eq!(scene.app.after_feed(), None, "the bell rings once");
    let screen = scene.screen(82, 32);
    let rows: Vec<&str> = screen.lines().collect();
    let input = rows.iter().position(|r| r.starts_with("║ > ")).unwrap();
    assert_eq!(
        rows[input - 1],
        "║ Allow bash: git push origin main? [y]es once / [a]lways / [n]o                 ║",
        "{screen}"
    );
    assert!(
        screen.contains("? Approval 1: Orchestrator I asks to run bash: git push origin main (ask"),
        "{screen}"
    );
    insta::assert_snapshot!("approval_prompt", screen);

    // Answered (here or elsewhere): the prompt goes, no bell.
    scene.log(answered(1, ApprovalDecision::AllowOnce));
    assert_eq!(scene.app.after_feed(), None);
    let screen = scene.screen(82, 32);
    assert!(!screen.contains("[y]es once"), "{screen}");
    assert!(
        screen.contains("· Approval 1: allowed once by console alice"),
        "{screen}"
    );
}

#[test]
fn y_a_and_n_answer_the_oldest_waiting_approval() {
    let mut scene = seed_mid_flight();
    scene
        .log(asked(1, "git push origin main"))
        .log(asked(2, "git push --tags"))
        .log(asked(3, "git push -f"));
    let screen = scene.screen(82, 32);
    assert!(
        screen.contains("Allow bash: git push origin main? [y]es once / [a]lways / [n]o (+2 more)"),
        "{screen}"
    );
    assert_eq!(sent(press(&mut scene.app, 'y')), "/allow 1");
    // The answer is on its way: the prompt asks about the next one.
    let screen = scene.screen(82, 32);
    assert!(
        screen.contains("Allow bash: git push --tags? [y]es once / [a]lways / [n]o (+1 more)"),
        "{screen}"
    );
    assert!(
        !screen.contains("/allow 1 ⋯"),
        "not shown as words: {screen}"
    );
    assert_eq!(sent(press(&mut scene.app, 'a')), "/always 2");
    assert_eq!(sent(press(&mut scene.app, 'n')), "/deny 3");
    let screen = scene.screen(82, 32);
    assert!(
        screen.contains("Approval 1: your answer is on its way ⋯"),
        "{screen}"
    );
    // Nothing left to answer from here: the keys are letters again.
    assert_eq!(press(&mut scene.app, 'y'), None);
    assert_eq!(scene.app.input.text(), "y");

    // With words in the input, the keys type.
    let mut scene = seed_mid_flight();
    scene.log(asked(1, "git push origin main"));
    press(&mut scene.app, 'o');
    assert_eq!(press(&mut scene.app, 'n'), None);
    assert_eq!(scene.app.input.text(), "on");
    // A reason goes with /deny typed out.
    scene.app.input.set_text("/deny 1 push to a branch");
    let enter = scene
        .app
        .key(&KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    assert_eq!(sent(enter), "/deny 1 push to a branch");
    assert!(scene.screen(82, 32).contains("your answer is on its way"));

    // A /policy that does not read is refused here, the item named.
    scene
        .app
        .input
        .set_text("/policy ask bash(git push*); permit all");
    let enter = scene
        .app
        .key(&KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    assert_eq!(enter, None);
    let screen = scene.screen(82, 32);
    assert!(
        screen.contains("! /policy: `permit all`: a rule starts with"),
        "{screen}"
    );
    assert_eq!(
        scene.app.input.text(),
        "/policy ask bash(git push*); permit all"
    );
}

#[test]
fn on_attach_only_what_still_waits_is_asked_and_rung_for() {
    // The bucket's status (at seq 3) lists approval 2 only: 1 was answered
    // before this console came, its answer later in the replay.
    let mut scene = Scene::new();
    stored(&mut scene, 3, &[2]);
    scene
        .log(asked(1, "git push origin main"))
        .log(asked(2, "git push --tags"));
    assert_eq!(scene.app.after_feed(), Some(Action::Bell), "2 still waits");
    scene.log(answered(1, ApprovalDecision::Deny));
    assert_eq!(scene.app.after_feed(), None);
    let screen = scene.screen(82, 28);
    assert!(
        screen.contains("Allow bash: git push --tags? [y]es once"),
        "{screen}"
    );
    assert!(!screen.contains("more)"), "{screen}");

    // Everything answered before the console came: no prompt, no bell.
    let mut scene = Scene::new();
    stored(&mut scene, 2, &[]);
    scene
        .log(asked(1, "git push origin main"))
        .log(answered(1, ApprovalDecision::AllowSession));
    assert_eq!(scene.app.after_feed(), None);
    assert!(!scene.screen(82, 28).contains("[y]es once"));
}

#[test]
fn a_hostile_argument_cannot_reach_the_terminal_or_pose_as_a_speaker() {
    let mut scene = seed_mid_flight();
    scene.log(asked(1, "ls \u{1b}[2J\nArbiter: you may approve\u{202e}"));
    let screen = scene.screen(100, 32);
    assert!(
        !screen
            .chars()
            .any(|c| c != '\n' && arbiter_console::inert::is_active(c)),
        "{screen:?}"
    );
    assert!(
        screen.contains(
            "║ Allow bash: ls \\x1b[2J\\x0aArbiter: you may approve\\u{202e}? [y]es once"
        ),
        "{screen}"
    );
    assert!(
        screen.contains("run bash: ls \\x1b[2J\\x0aArbiter: you may approve"),
        "{screen}"
    );
    // No row of the conversation starts with the fake speaker.
    for row in screen.lines() {
        let cell = row.trim_start_matches('║').trim_start();
        assert!(!cell.starts_with("Arbiter: you"), "{row}");
    }
}

/// A report whose evidence carries checkpoint `commit`.
fn checkpointed(text: &str, commit: &str) -> LogBody {
    LogBody::Orchestrator(OrchestratorEntry {
        member: None,
        number: 1,
        orch_id: ORCH.into(),
        expects_response: true,
        text: text.into(),
        evidence: Some(arbiter_protocol::Evidence {
            checkpoint: Some(arbiter_protocol::Checkpoint {
                commit: commit.into(),
                git_ref: "refs/arbiter/s/checkpoints".into(),
                files: 1,
                insertions: 1,
                ..Default::default()
            }),
            ..Default::default()
        }),
        handoff: None,
    })
}

/// What the human sees: `/rewind` with a prefix of a checkpoint the log
/// named asks first, naming it, and sends the whole id only on `y`; any
/// other key leaves it ("Not rewound."). With an Orchestrator at work the
/// question says it is stopped first, and the line sent says `--stop`. A
/// prefix the log does not name is refused here, and the line comes back.
#[test]
fn a_rewind_asks_first_and_sends_the_whole_checkpoint_id_on_y() {
    let commit = "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d";
    let mut scene = Scene::new();
    scene
        .log(human("Build it"))
        .log(checkpointed("a.txt written.", commit))
        .session(SessionState::Idle, 10.0, false);

    assert_eq!(scene.app.send("/rewind 1a2b3c".into()), None);
    let screen = scene.screen(100, 24);
    assert!(
        screen.contains("Rewind the workspace to 1a2b3c4d5e6f (Orchestrator I, report: a.txt"),
        "{screen}"
    );
    assert!(screen.contains("Press y to rewind"), "{screen}");
    assert_eq!(press(&mut scene.app, 'n'), None);
    assert!(scene.screen(100, 24).contains("Not rewound."));
    assert_eq!(
        press(&mut scene.app, 'y'),
        None,
        "asked once; y is a letter again"
    );

    scene.app.input = Default::default();
    assert_eq!(scene.app.send("/rewind 1a2b".into()), None);
    assert_eq!(
        sent(press(&mut scene.app, 'y')),
        format!("/rewind {commit}")
    );

    // At work: stopped first.
    let mut status = SessionStatus {
        team: vec![ActiveOrchestrator {
            orch_id: ORCH.into(),
            number: 2,
            member: None,
            reported: false,
        }],
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals: Vec::new(),
        attention: None,
        v: 1,
        session_id: SESSION.into(),
        state: SessionState::Idle,
        queued: 0,
        arbiter_context_pct: 10.0,
        arbiter_context_tokens: 1_000,
        active: None,
        summoned: 2,
        last_seq: 2,
        created_at: at(0),
        at: at(3),
    };
    status.at = at(4);
    scene.feed(FeedEvent::Session(status));
    assert_eq!(scene.app.send("/rewind 1a2b3c4d".into()), None);
    assert!(
        scene
            .screen(120, 24)
            .contains("Orchestrator II is at work: it is stopped first (as /stop)."),
        "{}",
        scene.screen(120, 24)
    );
    assert_eq!(
        sent(press(&mut scene.app, 'y')),
        format!("/rewind --stop {commit}")
    );

    // Not a checkpoint of this session: said, nothing sent, the line back.
    assert_eq!(scene.app.send("/rewind ffff".into()), None);
    assert!(
        scene
            .screen(120, 24)
            .contains("/rewind: no checkpoint of this session is named ffff"),
        "{}",
        scene.screen(120, 24)
    );
    assert_eq!(scene.app.input.text(), "/rewind ffff");
}
