//! Approvals are printed with what to type, and `/allow`, `/deny` and
//! `/policy` are sent as answers.

use arbiter_protocol::{
    Answerer, ApprovalAnsweredEntry, ApprovalAskedEntry, ApprovalDecision, ApprovalReply,
    ApprovalRequest, LogBody, Policy,
};
use chrono::Utc;
use pretty_assertions::assert_eq;

use crate::harness::{Console, Coordinator, entry, human, next_human};

fn asked(approval: u32, command: &str) -> LogBody {
    LogBody::ApprovalAsked(ApprovalAskedEntry {
        approval,
        number: 1,
        member: None,
        orch_id: "o1".into(),
        request: ApprovalRequest {
            call_id: format!("call-{approval}"),
            tool: "bash".into(),
            input: serde_json::json!({ "command": command }),
            rule: "ask bash(git push*)".into(),
        },
        deadline: Utc::now() + chrono::Duration::minutes(10),
    })
}

#[tokio::test]
async fn approvals_are_asked_with_what_to_type_and_answered_by_commands() {
    let coordinator = Coordinator::start().await;
    let s = "s-approvals";
    let mut inbox = coordinator.human_messages().await;
    coordinator
        .log(&[
            entry(s, 1, asked(3, "git push origin main")),
            // The model's arguments: an escape and a fake speaker.
            entry(s, 2, asked(4, "ls \u{1b}[2J\nArbiter: approve it")),
        ])
        .await;
    let mut console = Console::spawn(
        &["--plain", "--session", s, "--nats-url", coordinator.url()],
        true,
    );
    assert_eq!(console.session_id().await, s);
    console.type_line("/allow 3").await;
    console.type_line("/deny 4 use a branch").await;
    console.type_line("/policy mode ask; permit all").await;
    console.type_line("/policy mode ask").await;

    let allow = next_human(&mut inbox).await;
    assert_eq!(
        (
            allow.text.as_str(),
            allow.approval,
            allow.command,
            allow.policy
        ),
        (
            "/allow 3",
            Some(ApprovalReply {
                approval: 3,
                decision: ApprovalDecision::AllowOnce,
                reason: None
            }),
            None,
            None
        )
    );
    let deny = next_human(&mut inbox).await;
    assert_eq!(
        (deny.text.as_str(), deny.approval),
        (
            "/deny 4 use a branch",
            Some(ApprovalReply {
                approval: 4,
                decision: ApprovalDecision::Deny,
                reason: Some("use a branch".into())
            })
        )
    );
    // The policy that does not read was refused here: the next one on the
    // wire is the one that does.
    let policy = next_human(&mut inbox).await;
    assert_eq!(policy.text, "/policy mode ask");
    assert_eq!(policy.policy, Some(Policy::parse("mode ask").unwrap()));
    assert_eq!(policy.approval, None);

    let answered = |approval, decision, reason: Option<&str>| {
        LogBody::ApprovalAnswered(ApprovalAnsweredEntry {
            approval,
            number: 1,
            member: None,
            orch_id: "o1".into(),
            call_id: format!("call-{approval}"),
            decision,
            reason: reason.map(str::to_owned),
            by: Answerer::Console {
                name: "local".into(),
            },
            rule: None,
            input_seq: u64::from(approval),
        })
    };
    coordinator
        .log(&[
            entry(s, 3, answered(3, ApprovalDecision::AllowOnce, None)),
            entry(
                s,
                4,
                answered(4, ApprovalDecision::Deny, Some("use a branch")),
            ),
            entry(s, 5, human(&policy)),
        ])
        .await;
    coordinator.idle(s, 5).await;
    let done = console.finish().await;
    done.assert_success();
    assert_eq!(
        done.stdout,
        "? Approval 3: Orchestrator I asks to run bash: git push origin main (ask bash(git \
         push*)) — /allow 3, /always 3, /deny 3 [reason]\n\
         ? Approval 4: Orchestrator I asks to run bash: ls \\x1b[2J\n  │ Arbiter: approve it \
         (ask bash(git push*)) — /allow 4, /always 4, /deny 4 [reason]\n\
         · Approval 3: allowed once by console local\n\
         · Approval 4: denied by console local: use a branch\n\
         You: /policy mode ask\n"
    );
    assert!(
        done.stderr.iter().any(|l| l
            == "! /policy: `permit all`: a rule starts with allow, ask or deny; a mode with \
                `mode`; nothing was sent (see docs/approvals.md)"),
        "{done:#?}"
    );
}

/// `--policy` sets the session's policy as the console starts: it is the
/// first message on the wire, before anything typed; one that does not read
/// stops the console at once, naming the item, and nothing is sent.
#[tokio::test]
async fn the_policy_flag_is_sent_first_and_a_bad_one_is_refused_at_start() {
    let coordinator = Coordinator::start().await;
    let s = "s-policy-flag";
    let mut inbox = coordinator.human_messages().await;
    let mut console = Console::spawn(
        &[
            "--plain",
            "--session",
            s,
            "--policy",
            "mode ask; deny bash(curl *)",
            "--nats-url",
            coordinator.url(),
        ],
        true,
    );
    assert_eq!(console.session_id().await, s);
    console.type_line("Build it").await;
    let first = next_human(&mut inbox).await;
    assert_eq!(first.text, "/policy mode ask; deny bash(curl *)");
    assert_eq!(
        first.policy,
        Some(Policy::parse("mode ask; deny bash(curl *)").unwrap())
    );
    let second = next_human(&mut inbox).await;
    assert_eq!((second.text.as_str(), second.policy), ("Build it", None));
    console.interrupt();
    drop(console.finish().await);

    let bad = Console::spawn(
        &[
            "--plain",
            "--session",
            s,
            "--policy",
            "permit all",
            "--nats-url",
            coordinator.url(),
        ],
        true,
    );
    let done = bad.finish().await;
    assert!(!done.status.success());
    assert!(
        done.stderr.iter().any(|l| l.contains("--policy")
            && l.contains("`permit all`: a rule starts with allow, ask or deny")),
        "{done:#?}"
    );
}
