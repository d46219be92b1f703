//! `/budget` in a console: a line that changes one of the session's caps
//! goes to the coordinator as a `HumanMessage` with `budget` set (see
//! [`crate::command`]); `/budget` alone shows the caps and what is left,
//! from the session's status, as this file words them.

use arbiter_protocol::SessionStatus;

/// The caps and what is left, in one line, for `/budget`.
pub fn summary(status: Option<&SessionStatus>) -> String {
    let Some(status) = status else {
        return "Budget: the session has no status yet (is the coordinator running?)".to_owned();
    };
    let budget = &status.budget;
    let mut text = format!(
        "Budget: session {} ({}; spent {})",
        budget.session.text(),
        budget.session.left_text(&status.spend.total),
        status.spend.total.cost_text()
    );
    text.push_str(&format!(
        "; each Orchestrator {}",
        budget.orchestrator.text()
    ));
    if let Some(active) = &status.active {
        let spent = status
            .spend
            .orchestrator(&active.orch_id)
            .copied()
            .unwrap_or_default();
        if !budget.orchestrator.is_none() {
            text.push_str(&format!(
                " ({}: {})",
                arbiter_protocol::orchestrator_name(active.number),
                budget.orchestrator.left_text(&spent)
            ));
        }
    }
    if budget.held {
        text.push_str(". Held at the session's cap: raise it (/budget session <amount>) to go on.");
    }
    text
}

/// For the status area: `cap $5.00, $1.23 of $5.00 left`, or `held at
/// the budget cap`; nothing when the session has no cap.
pub fn status_words(status: &SessionStatus) -> Option<String> {
    let budget = &status.budget;
    if budget.held {
        return Some("held at the budget cap (/budget)".to_owned());
    }
    if budget.session.is_none() {
        return None;
    }
    Some(budget.session.left_text(&status.spend.total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::Cap;

    #[test]
    fn the_summary_says_what_is_left() {
        let mut status: SessionStatus = serde_json::from_value(serde_json::json!({
            "session_id": "s", "state": "idle", "queued": 0, "arbiter_context_pct": 0.0,
            "arbiter_context_tokens": 0, "summoned": 0, "last_seq": 0,
            "created_at": "2026-11-26T00:00:00Z", "at": "2026-11-26T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(status_words(&status), None);
        status
            .spend
            .total
            .record(Some([1000, 0, 0, 0]), Some(1_000_000_000));
        status.budget.session = Cap {
            tokens: None,
            cost_nanos: Some(5_000_000_000),
        };
        assert_eq!(
            summary(Some(&status)),
            "Budget: session $5.00 ($4.00 of $5.00 left; spent $1.00); each Orchestrator none"
        );
        assert_eq!(status_words(&status).unwrap(), "$4.00 of $5.00 left");
        status.budget.held = true;
        assert!(
            summary(Some(&status)).ends_with(
                "Held at the session's cap: raise it (/budget session <amount>) to go on."
            )
        );
    }
}
