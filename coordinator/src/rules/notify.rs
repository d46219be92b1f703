//! Which steps tell the webhooks what (docs/notifications.md). Most events
//! are decided where their entry is logged (`failed` in `outputs.rs`,
//! `route.rs` and `turn.rs`, `budget` in `budget.rs`, `needs_input` in
//! `approval.rs`, `guard.rs` and `turn.rs`); this file holds `completed`
//! (the session settled after its Orchestrators were released) and
//! `stalled` (at work, and nothing new in its log for `--stall-after-secs`).

use arbiter_protocol::{LogBody, NotificationKind, member_name};

use crate::rules::{Core, Now};
use crate::state::Effect;

/// Characters of the Arbiter's last words a `completed` event quotes.
const QUOTED_CHARS: usize = 200;

/// `text` cut to [`QUOTED_CHARS`], with `…` when cut.
fn quoted(text: &str) -> String {
    let mut quoted: String = text.chars().take(QUOTED_CHARS).collect();
    if text.chars().count() > QUOTED_CHARS {
        quoted.push('…');
    }
    quoted
}

impl Core {
    /// The Arbiter wrote to the human (the entry logged last): the shell
    /// asks whether a console follows the session, and when none does the
    /// webhooks hear `needs_input` about it (`Input::Unwatched`).
    pub(crate) fn ask_watchers(&mut self) {
        let said = self.step.effects.iter().rev().find_map(|e| match e {
            Effect::Log(entry) => match &entry.body {
                LogBody::Arbiter(a) => Some(a.text.clone()),
                _ => None,
            },
            _ => None,
        });
        let said = quoted(&said.unwrap_or_default());
        // The status says it to whoever looks (arbiter-web's sessions page).
        self.state.attention = Some(arbiter_protocol::Attention {
            kind: NotificationKind::NeedsInput,
            summary: format!("The Arbiter wrote to you: {said}"),
            seq: self.state.log_seq,
        });
        if !self.config.notifies(NotificationKind::NeedsInput) {
            return;
        }
        let summary =
            format!("The Arbiter wrote to you while no console was open on the session: {said}");
        self.step.tasks.push(crate::rules::Task::AskWatchers {
            seq: self.state.log_seq,
            summary,
        });
    }

    /// After a turn: a session whose Orchestrators were released and that
    /// now has none, nothing queued, no turn due, no hold and no handoff
    /// under way has settled: `completed`, once per release.
    pub(crate) fn notify_settled(&mut self) {
        if !self.state.released
            || !self.is_idle()
            || !self.state.team.is_empty()
            || self.state.hold.is_some()
        {
            return;
        }
        self.state.released = false;
        self.step.changed = true;
        let said = self.step.effects.iter().rev().find_map(|e| match e {
            Effect::Log(entry) => match &entry.body {
                LogBody::Arbiter(a) => Some(a.text.clone()),
                _ => None,
            },
            _ => None,
        });
        let mut summary =
            "Done: the Orchestrators are released and the Arbiter waits for you.".to_owned();
        if let Some(said) = said {
            summary.push_str(&format!(" It said: {}", quoted(&said)));
        }
        self.notify(NotificationKind::Completed, summary);
    }

    /// Whether the session is at work with nobody else to wait for: the
    /// Arbiter thinking or input queued, or an Orchestrator working (not
    /// waiting on its question); no hold, no approval waiting (those are
    /// `needs_input`), and not told of this stall yet.
    fn stall_watched(&self) -> bool {
        !self.config.stall_after.is_zero()
            && !self.state.stall_told
            && self.state.hold.is_none()
            && self.state.approvals.waiting.is_empty()
            && (self.state.turn_in_flight
                || !self.state.queue.is_empty()
                || self.state.team.iter().any(|a| !a.asked))
    }

    /// When the session counts as stalled, on the monotonic clock, if it
    /// is watched.
    pub(crate) fn stall_deadline(&self, now: Now) -> Option<tokio::time::Instant> {
        if !self.stall_watched() {
            return None;
        }
        let since = self.state.progress_at?;
        let due = since + chrono::Duration::from_std(self.config.stall_after).ok()?;
        Some(now.mono + (due - now.wall).to_std().unwrap_or_default())
    }

    /// Nothing new in the log for `stall_after` while at work: `stalled`,
    /// once until something new comes.
    pub(crate) fn check_stall(&mut self) {
        if !self.stall_watched() {
            return;
        }
        let Some(since) = self.state.progress_at else {
            return;
        };
        let quiet = self.now.wall - since;
        if quiet.to_std().unwrap_or_default() < self.config.stall_after {
            return;
        }
        self.state.stall_told = true;
        self.step.changed = true;
        let working: Vec<String> = self
            .state
            .team
            .iter()
            .filter(|a| !a.asked)
            .map(|a| member_name(a.number, a.member))
            .collect();
        let who = if working.is_empty() {
            "the Arbiter has work queued or in flight".to_owned()
        } else {
            format!("{} at work", working.join(", "))
        };
        let summary = format!(
            "Stalled: nothing new in the log for {} min while {who}; the last entry was at {} UTC.",
            quiet.num_minutes(),
            since.format("%H:%M")
        );
        self.notify(NotificationKind::Stalled, summary);
    }
}
