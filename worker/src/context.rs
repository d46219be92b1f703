//! Context watch: how much of a role's context budget the last model call
//! filled, and the warnings the model sees past [`WARN_PCT`] and
//! [`CRITICAL_PCT`].

use arbiter_llm::Response;

/// Context use, in percent, past which the model is told to wrap up.
pub const WARN_PCT: f32 = 70.0;
/// Context use, in percent, past which the model is told to stop and report.
pub const CRITICAL_PCT: f32 = 85.0;

/// How the first warning begins; tests look for it.
pub const NOTICE_MARK: &str = "[system] Context notice";
/// How the critical warning begins; tests look for it.
pub const CRITICAL_MARK: &str = "[system] Context critical";

/// The context a call filled: every input token the provider reports, cache
/// reads and writes included. `None` when the provider reported no usage.
pub(crate) fn tokens_of(response: &Response) -> Option<u64> {
    response.context_tokens()
}

/// `tokens` as a percentage of `budget` (0 when there is no budget).
pub use arbiter_protocol::percent;

/// What an Orchestrator is told after a tool call at `pct` % of its context.
pub fn orchestrator_warning(pct: f32) -> Option<String> {
    if pct >= CRITICAL_PCT {
        Some(format!(
            "{CRITICAL_MARK}: {pct:.0}% of your context is used. Start no new work and no new \
             subagents. Report to the Arbiter now, with expects_response true and your `handoff` \
             packet: what you finished (with files), the open items by id, decisions and why, \
             open questions, and the next step."
        ))
    } else if pct >= WARN_PCT {
        Some(format!(
            "{NOTICE_MARK}: {pct:.0}% of your context is used. Bring the current thread of work \
             to a close, take on nothing large, and prepare to hand off. If you have not sent \
             one since this notice first came, send a note (expects_response false) carrying \
             your `handoff` packet as it stands, so that your successor can be readied."
        ))
    } else {
        None
    }
}

/// What a subagent is told after a tool call at `pct` % of its context.
pub fn subagent_warning(pct: f32) -> Option<String> {
    if pct >= CRITICAL_PCT {
        Some(format!(
            "{CRITICAL_MARK}: {pct:.0}% of your context is used. Stop now and write your final \
             report: what you did, what is left undone, and anything the Orchestrator must know."
        ))
    } else if pct >= WARN_PCT {
        Some(format!(
            "{NOTICE_MARK}: {pct:.0}% of your context is used. Finish what you are doing and \
             write your final report soon."
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_by_threshold() {
        assert_eq!(orchestrator_warning(69.9), None);
        assert!(orchestrator_warning(70.0).unwrap().starts_with(NOTICE_MARK));
        assert!(orchestrator_warning(84.9).unwrap().starts_with(NOTICE_MARK));
        assert!(
            orchestrator_warning(85.0)
                .unwrap()
                .starts_with(CRITICAL_MARK)
        );
        assert!(subagent_warning(90.0).unwrap().starts_with(CRITICAL_MARK));
        assert_eq!(subagent_warning(10.0), None);
    }

    #[test]
    fn percent_of_a_budget() {
        assert_eq!(percent(720, 1000), 72.0);
        assert_eq!(percent(5, 0), 0.0);
    }
}
