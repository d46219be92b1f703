//! Which steps tell the webhooks what (docs/notifications.md). Most events
//! are decided where their entry is logged (`failed` in `outputs.rs`,
//! `route.rs` and `turn.rs`, `budget` in `budget.rs`, `needs_input` in
//! `approval.rs`, `guard.rs` and `turn.rs`); this file holds `completed`:
//! the session settled after its Orchestrators were released.

use arbiter_protocol::{LogBody, NotificationKind};

use crate::rules::Core;
use crate::state::Effect;

/// Characters of the Arbiter's last words a `completed` event quotes.
const QUOTED_CHARS: usize = 200;

impl Core {
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
            let quoted: String = said.chars().take(QUOTED_CHARS).collect();
            let cut = if said.chars().count() > QUOTED_CHARS {
                "…"
            } else {
                ""
            };
            summary.push_str(&format!(" It said: {quoted}{cut}"));
        }
        self.notify(NotificationKind::Completed, summary);
    }
}
