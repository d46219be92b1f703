//! Tool-call approvals on the worker (docs/tools.md, "Approvals"; the
//! policy syntax is docs/approvals.md). Every call an Orchestrator's model
//! makes is decided by its policy layers (`arbiter_protocol::Layers`: the
//! worker's floor, `--policy`, under the session's from the summons) before
//! it runs: `allow` runs it, `deny` answers it with an error naming the
//! rule, `ask` stores an `approval_needed` output and waits, in its slot,
//! for the answer the coordinator stores as the Orchestrator's next input.
//!
//! What is waited for is kept in the snapshot ([`Pending`]): the request
//! from the step that publishes it, the answer from the step that takes it,
//! both before the call runs. So a worker that takes the Orchestrator over
//! neither asks again nor runs a call no allow was stored for, and one
//! that finds an allow stored runs the call without asking.
//!
//! A subagent (the `task` tool) is checked by the same layers, but cannot
//! wait for the human: what would ask is denied, and its model is told to
//! leave the call to its Orchestrator.

use arbiter_protocol::approval::{Action, Decision};
use arbiter_protocol::{Answerer, ApprovalAnsweredEntry, Layers, Policy};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::ToolOutcome;

/// A call that waits for the human's word, from the step that asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Pending {
    /// The model's `tool_use` id: the call in the stored transcript.
    pub call_id: String,
    pub tool: String,
    /// What asked: `ask bash(git push*)`, `mode ask`.
    pub rule: String,
    /// The answer, once taken (stored, with its `in_seq`, before the call
    /// runs or its denial is given to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<ApprovalAnsweredEntry>,
}

/// The layers an Orchestrator starts (or goes on) with: those its records
/// hold, else this worker's floor under the summons' (the session's)
/// policy, refused when that would loosen the floor. A worker that takes
/// an Orchestrator over keeps the stored layers, and adds its own floor
/// when that differs: a call is then held to both.
pub(crate) fn layers_for(
    floor: &Policy,
    summoned: Vec<Policy>,
    stored: Option<Layers>,
) -> Result<Layers, String> {
    match stored {
        Some(mut layers) => {
            if layers.floor != *floor && !layers.tighter.contains(floor) {
                layers.tighter.push(floor.clone());
            }
            Ok(layers)
        }
        None => Layers::new(floor.clone(), summoned)
            .map_err(|loosening| format!("the summons' policy was refused: {loosening}")),
    }
}

/// The decision on a call; no layers (records from before approvals):
/// every call runs, as it did then.
pub(crate) fn decide(layers: Option<&Layers>, tool: &str, input: &Value) -> Decision {
    match layers {
        Some(layers) => layers.decide(tool, input),
        None => Decision {
            action: Action::Allow,
            by: "mode auto".to_owned(),
        },
    }
}

/// What the model reads for a call its policy denies.
pub(crate) fn denied(tool: &str, by: &str) -> String {
    format!(
        "{tool}: denied by the policy: `{by}`. The call did not run; do without it, or tell the \
         Arbiter what you need and why."
    )
}

/// What the model reads for a call the human (or the wait running out) denied.
pub(crate) fn refused(answer: &ApprovalAnsweredEntry) -> String {
    match (&answer.by, answer.reason.as_deref()) {
        (Answerer::Timeout, Some(reason)) => {
            format!("Not run: the call waited for the human's approval and was denied: {reason}")
        }
        (Answerer::Timeout, None) => "Not run: the call waited for the human's approval and \
                                      nobody answered in time. Go on without it, or ask the \
                                      Arbiter to have the human approve it."
            .to_owned(),
        (by, Some(reason)) => format!("The human denied this call ({by}): {reason}"),
        (by, None) => format!(
            "The human denied this call ({by}); it did not run. Do without it, or ask the \
             Arbiter what the human wants instead."
        ),
    }
}

/// A subagent's call: `None` runs it, `Some` is the error its model reads
/// instead (a denial, or an `ask`, which a subagent cannot wait for).
pub(crate) fn subagent_gate(
    layers: Option<&Layers>,
    tool: &str,
    input: &Value,
) -> Option<ToolOutcome> {
    let decision = decide(layers, tool, input);
    match decision.action {
        Action::Allow => None,
        Action::Deny => Some(ToolOutcome::error(denied(tool, &decision.by))),
        Action::Ask => Some(ToolOutcome::error(format!(
            "{tool}: this call needs the human's approval (`{}`), which a subagent cannot wait \
             for: leave this call to your Orchestrator. Say in your report that it is needed and \
             why; the call did not run.",
            decision.by
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::ApprovalDecision;
    use serde_json::json;

    fn policy(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    #[test]
    fn a_session_policy_that_loosens_the_floor_is_refused_naming_both_rules() {
        let floor = policy("ask bash(git push*)");
        let error = layers_for(&floor, vec![policy("allow bash(git push*)")], None).unwrap_err();
        assert!(
            error.contains(
                "`allow bash(git push*)` asks for more than the worker allows (`ask bash(git push*)`)"
            ),
            "{error}"
        );
        let layers = layers_for(&floor, vec![policy("deny bash(rm *)")], None).unwrap();
        assert_eq!(layers.tighter.len(), 1);
        assert_eq!(
            layers
                .decide("bash", &json!({"command": "rm -rf x"}))
                .action,
            Action::Deny
        );
    }

    #[test]
    fn the_arbiters_policy_is_a_layer_of_its_own_and_may_not_loosen_either() {
        let floor = policy("ask bash(git push*)");
        let layers = layers_for(
            &floor,
            vec![policy("deny bash(rm *)"), policy("deny bash(curl *)")],
            None,
        )
        .unwrap();
        let curl = json!({"command": "curl example.com"});
        assert_eq!(layers.decide("bash", &curl).action, Action::Deny);
        let error = layers_for(
            &floor,
            vec![policy("deny bash(rm *)"), policy("mode auto; allow bash")],
            None,
        )
        .unwrap_err();
        assert!(
            error.starts_with("the summons' policy was refused: `allow bash` asks for more"),
            "{error}"
        );
    }

    #[test]
    fn a_takeover_keeps_the_stored_layers_and_adds_its_own_floor() {
        let stored = layers_for(&policy("ask bash(git push*)"), vec![], None).unwrap();
        let own = policy("deny bash(curl*)");
        let layers = layers_for(&own, vec![], Some(stored.clone())).unwrap();
        let push = json!({"command": "git push origin main"});
        let curl = json!({"command": "curl example.com"});
        assert_eq!(layers.decide("bash", &push).action, Action::Ask);
        assert_eq!(layers.decide("bash", &curl).action, Action::Deny);
        // The same floor: nothing added.
        let same = layers_for(&stored.floor, vec![], Some(stored.clone())).unwrap();
        assert_eq!(same, stored);
    }

    #[test]
    fn no_layers_run_every_call() {
        let d = decide(None, "bash", &json!({"command": "rm -rf /"}));
        assert_eq!(d.action, Action::Allow);
    }

    #[test]
    fn a_subagent_is_denied_what_would_ask_and_what_is_denied() {
        let layers = layers_for(
            &policy("ask bash(git push*); deny write(**/.env)"),
            vec![],
            None,
        )
        .unwrap();
        let push = subagent_gate(Some(&layers), "bash", &json!({"command": "git push"})).unwrap();
        assert!(push.is_error);
        assert!(
            push.content.contains(
                "needs the human's approval (`ask bash(git push*)`), which a subagent cannot wait for: leave this call to your Orchestrator"
            ),
            "{}",
            push.content
        );
        let env = subagent_gate(
            Some(&layers),
            "write",
            &json!({"path": "a/.env", "content": ""}),
        )
        .unwrap();
        assert!(
            env.content
                .contains("denied by the policy: `deny write(**/.env)`"),
            "{}",
            env.content
        );
        assert!(subagent_gate(Some(&layers), "bash", &json!({"command": "ls"})).is_none());
    }

    fn answer(by: Answerer, reason: Option<&str>) -> ApprovalAnsweredEntry {
        ApprovalAnsweredEntry {
            approval: 1,
            number: 1,
            member: None,
            orch_id: "o".into(),
            call_id: "c".into(),
            decision: ApprovalDecision::Deny,
            reason: reason.map(str::to_owned),
            by,
            rule: None,
            input_seq: 2,
        }
    }

    #[test]
    fn a_denial_says_who_and_why() {
        let alice = Answerer::Console {
            name: "alice".into(),
        };
        assert_eq!(
            refused(&answer(alice.clone(), Some("use a branch"))),
            "The human denied this call (console alice): use a branch"
        );
        assert!(
            refused(&answer(alice, None))
                .starts_with("The human denied this call (console alice);")
        );
        let timeout = refused(&answer(
            Answerer::Timeout,
            Some("nobody answered within 10 min"),
        ));
        assert!(
            timeout.contains("nobody answered within 10 min"),
            "{timeout}"
        );
        assert!(refused(&answer(Answerer::Timeout, None)).contains("nobody answered in time"));
    }
}
