//! What a line the human typed is, in every mode: words for the Arbiter,
//! `/stop`, a `/budget` change or look, an answer to a waiting approval
//! (`/allow 3`, `/always 3`, `/deny 3 use a branch`) or the session's
//! `/policy`. A command that cannot be read is refused here, with what to
//! write, and never sent; one that can goes as a [`HumanMessage`] with its
//! field set and the typed line as its `text`.

use arbiter_protocol::budget::{BudgetCommand, parse_command};
use arbiter_protocol::{
    ApprovalDecision, ApprovalReply, BudgetChange, HumanCommand, HumanMessage, Policy, VERSION,
};
use chrono::Utc;

/// What a typed line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Typed {
    /// Words for the Arbiter: sent as they are.
    Words,
    /// `/stop`: sent with `command` set.
    Stop,
    /// A cap to change: sent with `budget` set.
    Change(BudgetChange),
    /// `/budget` alone: shown here, nothing sent.
    Show,
    /// `/allow n`, `/always n`, `/deny n [reason]`: sent with `approval` set.
    Approval(ApprovalReply),
    /// `/policy …`: sent with `policy` set (`/policy clear`: the default).
    Policy(Policy),
    /// `/rewind [--stop] <checkpoint>`: sent with `rewind` set (and with
    /// `command: stop` for `--stop`) once the checkpoint is a full commit
    /// id; the screen resolves a short one and asks first.
    Rewind { checkpoint: String, stop: bool },
    /// A command that cannot be read: why, nothing sent.
    Wrong(String),
}

/// Where the policy syntax is described, for the errors that name it.
const POLICY_DOC: &str = "docs/approvals.md";

pub(crate) fn typed(text: &str) -> Typed {
    if text.trim() == "/stop" {
        return Typed::Stop;
    }
    if let Some(budget) = parse_command(text) {
        return match budget {
            Ok(BudgetCommand::Show) => Typed::Show,
            Ok(BudgetCommand::Set(change)) => Typed::Change(change),
            Err(why) => Typed::Wrong(format!("/budget: {why}")),
        };
    }
    let trimmed = text.trim_start();
    let (word, rest) = trimmed
        .split_once(char::is_whitespace)
        .unwrap_or((trimmed, ""));
    match word {
        "/allow" => approval(word, rest, ApprovalDecision::AllowOnce),
        "/always" => approval(word, rest, ApprovalDecision::AllowSession),
        "/deny" => approval(word, rest, ApprovalDecision::Deny),
        "/policy" => policy(rest),
        "/rewind" => rewind(rest),
        _ => Typed::Words,
    }
}

/// `/rewind [--stop] <checkpoint>`: a checkpoint's id, whole or its first
/// 4 or more hex digits (which the screen resolves from the log).
fn rewind(rest: &str) -> Typed {
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    let stop = words.first() == Some(&"--stop");
    if stop {
        words.remove(0);
    }
    let usage = "write /rewind <checkpoint>; `arbiter-console checkpoints` lists them";
    match words[..] {
        [id] if id.len() >= 4 && id.len() <= 40 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Typed::Rewind {
                checkpoint: id.to_ascii_lowercase(),
                stop,
            }
        }
        [] => Typed::Wrong(format!("/rewind: name the checkpoint ({usage})")),
        _ => Typed::Wrong(format!(
            "/rewind: {:?} is not a checkpoint's id ({usage})",
            words.join(" ")
        )),
    }
}

/// `/allow 3`, `/always 3`: the number alone; `/deny 3`, and what follows
/// the number is the reason (the model reads it as the tool's result).
fn approval(word: &str, rest: &str, decision: ApprovalDecision) -> Typed {
    let usage = match decision {
        ApprovalDecision::Deny => format!("{word} <number> [reason]"),
        _ => format!("{word} <number>"),
    };
    let rest = rest.trim();
    let (number, reason) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if number.is_empty() {
        return Typed::Wrong(format!(
            "{word}: name the approval by its number (write {usage})"
        ));
    }
    let Ok(approval) = number.trim_start_matches('#').parse::<u32>() else {
        return Typed::Wrong(format!(
            "{word}: {number:?} is not an approval's number (write {usage})"
        ));
    };
    let reason = reason.trim();
    if decision != ApprovalDecision::Deny && !reason.is_empty() {
        return Typed::Wrong(format!(
            "{word}: only the number (write {usage}); a reason goes with /deny"
        ));
    }
    Typed::Approval(ApprovalReply {
        approval,
        decision,
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
    })
}

/// `/policy <rules>`, checked here so that a mistake is said before
/// anything is sent; `/policy clear` goes back to the workers' own.
fn policy(rest: &str) -> Typed {
    let rest = rest.trim();
    if rest.is_empty() {
        return Typed::Wrong(format!(
            "/policy: give the session's policy, e.g. `/policy mode ask; deny write(**/.env)`, \
             or `/policy clear` (see {POLICY_DOC})"
        ));
    }
    if rest == "clear" {
        return Typed::Policy(Policy::default());
    }
    match Policy::parse(rest) {
        Ok(policy) => Typed::Policy(policy),
        Err(e) => Typed::Wrong(format!(
            "/policy: `{}`: {}; nothing was sent (see {POLICY_DOC})",
            e.item, e.reason
        )),
    }
}

/// The message a typed line is sent as, naming the console's workspace.
pub(crate) fn message(
    session_id: &str,
    message_id: &str,
    text: String,
    workspace: Option<&str>,
) -> HumanMessage {
    let typed = typed(&text);
    HumanMessage {
        v: VERSION,
        session_id: session_id.to_owned(),
        message_id: message_id.to_owned(),
        command: matches!(typed, Typed::Stop | Typed::Rewind { stop: true, .. })
            .then_some(HumanCommand::Stop),
        text,
        sent_at: Utc::now(),
        budget: match &typed {
            Typed::Change(change) => Some(*change),
            _ => None,
        },
        workspace: workspace.map(str::to_owned),
        approval: match &typed {
            Typed::Approval(reply) => Some(reply.clone()),
            _ => None,
        },
        rewind: match &typed {
            Typed::Rewind { checkpoint, .. } if arbiter_protocol::Rewind::is_commit(checkpoint) => {
                Some(arbiter_protocol::Rewind {
                    checkpoint: checkpoint.clone(),
                })
            }
            _ => None,
        },
        policy: match typed {
            Typed::Policy(policy) => Some(policy),
            _ => None,
        },
    }
}

/// `--policy`: the session's policy, sent as `/policy …` before the console
/// attaches, so that it rides on the first summons. It was checked when the
/// console started.
pub(crate) async fn send_policy(config: &crate::Config, session_id: &str) -> crate::Result<()> {
    let Some(policy) = &config.policy else {
        return Ok(());
    };
    let conn = arbiter_bus::connect_with(
        &config.nats,
        crate::session::CLIENT_NAME,
        arbiter_bus::Reach::FailFast,
    )
    .await?;
    let bus = arbiter_bus::Bus::open(
        conn,
        arbiter_protocol::roles::NatsRole::Console,
        arbiter_bus::Reach::FailFast,
    )
    .await?;
    let message_id = uuid::Uuid::now_v7().to_string();
    let text = format!("/policy {policy}");
    let message = message(session_id, &message_id, text, config.workspace.as_deref());
    bus.publish_js(
        arbiter_protocol::subjects::session_human_from(session_id, &config.identity),
        &message_id,
        &arbiter_bus::TraceContext::none(),
        &message,
    )
    .await?;
    Ok(())
}

/// Checks `--policy` as `/policy` would: the error names the item.
pub fn check_policy(text: &str) -> std::result::Result<(), String> {
    match typed(&format!("/policy {text}")) {
        Typed::Policy(_) => Ok(()),
        Typed::Wrong(why) => Err(why.trim_start_matches("/policy: ").to_owned()),
        _ => Err(format!("{text:?} is not a policy")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{BudgetLimit, BudgetScope};
    use pretty_assertions::assert_eq;

    fn reply(approval: u32, decision: ApprovalDecision, reason: Option<&str>) -> Typed {
        Typed::Approval(ApprovalReply {
            approval,
            decision,
            reason: reason.map(str::to_owned),
        })
    }

    fn wrong(text: &str) -> String {
        match typed(text) {
            Typed::Wrong(why) => why,
            other => panic!("{text:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn lines_are_words_changes_or_refused() {
        assert_eq!(typed("hello"), Typed::Words);
        assert_eq!(typed(" /stop "), Typed::Stop);
        assert_eq!(typed("/budget"), Typed::Show);
        assert_eq!(
            typed("/budget session $5"),
            Typed::Change(BudgetChange {
                scope: BudgetScope::Session,
                limit: BudgetLimit::CostNanos(5_000_000_000)
            })
        );
        assert!(
            wrong("/budget session lots").starts_with("/budget: \"lots\" is not an amount"),
            "{}",
            wrong("/budget session lots")
        );
        let message = message("s", "m", "/budget orchestrator 2M tokens".into(), None);
        assert_eq!(
            message.budget.map(|b| b.limit),
            Some(BudgetLimit::Tokens(2_000_000))
        );
        assert_eq!(message.command, None);
        assert_eq!(
            super::message("s", "m", "/stop".into(), None).command,
            Some(HumanCommand::Stop)
        );
    }

    #[test]
    fn approval_answers() {
        use ApprovalDecision::{AllowOnce, AllowSession, Deny};
        let cases = [
            ("/allow 3", reply(3, AllowOnce, None)),
            ("  /allow   12  ", reply(12, AllowOnce, None)),
            ("/allow #4", reply(4, AllowOnce, None)),
            ("/always 3", reply(3, AllowSession, None)),
            ("/deny 3", reply(3, Deny, None)),
            ("/deny 3 use a branch", reply(3, Deny, Some("use a branch"))),
            (
                "/deny 3   push to a branch\nand open a PR ",
                reply(3, Deny, Some("push to a branch\nand open a PR")),
            ),
            // Not a command: words for the Arbiter.
            ("/allowed 3", Typed::Words),
            ("please /allow 3", Typed::Words),
        ];
        for (text, want) in cases {
            assert_eq!(typed(text), want, "{text:?}");
        }
        assert_eq!(
            wrong("/allow"),
            "/allow: name the approval by its number (write /allow <number>)"
        );
        assert_eq!(
            wrong("/deny three"),
            "/deny: \"three\" is not an approval's number (write /deny <number> [reason])"
        );
        assert_eq!(
            wrong("/always 3 because"),
            "/always: only the number (write /always <number>); a reason goes with /deny"
        );
        assert_eq!(wrong("/allow -1").split(':').next(), Some("/allow"));

        let sent = message("s", "m", "/deny 3 use a branch".into(), Some("w"));
        assert_eq!(
            (sent.text.as_str(), sent.approval, sent.command, sent.policy),
            (
                "/deny 3 use a branch",
                Some(ApprovalReply {
                    approval: 3,
                    decision: Deny,
                    reason: Some("use a branch".into())
                }),
                None,
                None
            )
        );
    }

    #[test]
    fn a_policy_is_checked_before_it_is_sent() {
        assert_eq!(
            typed("/policy mode ask; deny write(**/.env)"),
            Typed::Policy(Policy::parse("mode ask; deny write(**/.env)").unwrap())
        );
        assert_eq!(typed("/policy clear"), Typed::Policy(Policy::default()));
        // The item that is wrong is named; nothing goes out.
        assert_eq!(
            wrong("/policy mode ask; permit bash"),
            "/policy: `permit bash`: a rule starts with allow, ask or deny; a mode with \
             `mode`; nothing was sent (see docs/approvals.md)"
        );
        assert!(wrong("/policy").contains("/policy clear"));
        let sent = message("s", "m", "/policy clear".into(), None);
        assert_eq!(sent.policy, Some(Policy::default()));
        assert_eq!(sent.approval, None);
        let sent = message("s", "m", "/policy ask bash(git push*)".into(), None);
        assert_eq!(
            sent.policy.map(|p| p.to_string()),
            Some("mode auto; ask bash(git push*)".into())
        );
    }
}
