//! Consensus teams: several Orchestrators answer one question independently,
//! each with a verdict. The coordinator tallies the verdicts for the record
//! and for the Arbiter; it never decides. The Arbiter does.

use arbiter_protocol::{
    ConsensusEntry, ConsensusOutcome, DecisionVotes, MemberVerdict, MissingVerdict, Verdict,
    member_name,
};

/// The members of a consensus when the summons gives no count.
pub(crate) const DEFAULT_MEMBERS: u32 = 3;

/// The tally of a consensus team of `members`, pure: `verdicts` holds the
/// members that reported (or failed); whoever is not in it had not
/// reported. Decisions are grouped trimmed and ignoring case; a member
/// without a verdict counts as "no verdict".
pub(crate) fn tally(number: u32, members: u32, verdicts: &[MemberVerdict]) -> ConsensusEntry {
    let all: Vec<MemberVerdict> = (1..=members)
        .map(|m| {
            verdicts
                .iter()
                .find(|v| v.member == m)
                .cloned()
                .unwrap_or(MemberVerdict {
                    member: m,
                    verdict: None,
                    missing: Some(MissingVerdict::NotReported),
                })
        })
        .collect();
    let mut decisions: Vec<(String, DecisionVotes)> = Vec::new();
    let mut no_verdict = Vec::new();
    for v in &all {
        let Some(verdict) = v.verdict.as_ref().filter(|d| !d.decision.trim().is_empty()) else {
            no_verdict.push(v.member);
            continue;
        };
        let decision = verdict.decision.trim();
        let key = decision.to_lowercase();
        match decisions.iter_mut().find(|(k, _)| *k == key) {
            Some((_, votes)) => votes.members.push(v.member),
            None => decisions.push((
                key,
                DecisionVotes {
                    decision: decision.to_owned(),
                    members: vec![v.member],
                },
            )),
        }
    }
    // Most votes first; among equals, the one its first member gave first.
    let mut decisions: Vec<DecisionVotes> = decisions.into_iter().map(|(_, d)| d).collect();
    decisions.sort_by_key(|d| (std::cmp::Reverse(d.members.len()), d.members[0]));
    let outcome = match decisions.as_slice() {
        [] => ConsensusOutcome::NoVerdict,
        [_] if no_verdict.is_empty() => ConsensusOutcome::Unanimous,
        [first, second, ..] if first.members.len() == second.members.len() => ConsensusOutcome::Tie,
        _ => ConsensusOutcome::Split,
    };
    ConsensusEntry {
        number,
        members,
        outcome,
        decisions,
        no_verdict,
        verdicts: all,
    }
}

/// A member's verdict as the Arbiter reads it, ahead of its report.
pub(crate) fn verdict_line(number: u32, member: u32, verdict: &MemberVerdict) -> String {
    let name = member_name(number, Some(member));
    match (&verdict.verdict, verdict.missing) {
        (
            Some(Verdict {
                decision,
                confidence,
                reasons,
            }),
            _,
        ) => {
            let mut out = format!(
                "{name}'s verdict: \"{}\" (confidence {confidence} %).",
                decision.trim()
            );
            if reasons.is_empty() {
                out.push_str(" No reasons given.");
            } else {
                out.push_str(" Reasons:");
                for reason in reasons {
                    out.push_str("\n- ");
                    out.push_str(reason);
                }
            }
            out
        }
        (None, Some(MissingVerdict::Failed)) => format!("{name} failed: no verdict."),
        (None, _) => format!("{name} gave no verdict."),
    }
}

/// What a consensus member's brief says, around the question.
pub(crate) fn member_brief(number: u32, member: u32, members: u32, question: &str) -> String {
    format!(
        "You are {}, one of {members} members of a consensus: each member answers the same \
         question independently, in a workspace of its own, and sees none of the others' \
         answers. The question:\n{question}\n\nWhen you report your answer (expects_response \
         true), give your verdict in `verdict`: `decision` (your answer in a few words, e.g. \
         \"ship\" or \"hold\"; the members' decisions are compared as written, ignoring case), \
         `confidence` (0 to 100) and `reasons` (one short sentence each). The Arbiter reads \
         every member's verdict and report, and decides.",
        member_name(number, Some(member))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(member: u32, decision: &str) -> MemberVerdict {
        MemberVerdict {
            member,
            verdict: Some(Verdict {
                decision: decision.to_owned(),
                confidence: 70,
                reasons: vec!["because".to_owned()],
            }),
            missing: None,
        }
    }

    fn without(member: u32, why: MissingVerdict) -> MemberVerdict {
        MemberVerdict {
            member,
            verdict: None,
            missing: Some(why),
        }
    }

    #[test]
    fn the_tally_table() {
        // Name, members, verdicts in, the outcome, the line the console shows.
        let cases: Vec<(&str, u32, Vec<MemberVerdict>, ConsensusOutcome, &str)> = vec![
            (
                "unanimous, spelled three ways",
                3,
                vec![said(1, "Ship"), said(2, " ship "), said(3, "SHIP")],
                ConsensusOutcome::Unanimous,
                "unanimous: \"Ship\" (II.1, II.2, II.3)",
            ),
            (
                "2 against 1",
                3,
                vec![said(2, "hold"), said(1, "ship"), said(3, "Ship")],
                ConsensusOutcome::Split,
                "split 2–1: \"ship\" (II.1, II.3) vs \"hold\" (II.2)",
            ),
            (
                "a tie",
                4,
                vec![
                    said(1, "hold"),
                    said(2, "ship"),
                    said(3, "ship"),
                    said(4, "hold"),
                ],
                ConsensusOutcome::Tie,
                "tie 2–2: \"hold\" (II.1, II.4) vs \"ship\" (II.2, II.3)",
            ),
            (
                "a member reported without a verdict",
                3,
                vec![
                    said(1, "ship"),
                    without(2, MissingVerdict::NoVerdict),
                    said(3, "ship"),
                ],
                ConsensusOutcome::Split,
                "split 2–1: \"ship\" (II.1, II.3) vs no verdict (II.2)",
            ),
            (
                "a member failed, another never reported",
                3,
                vec![said(1, "hold"), without(3, MissingVerdict::Failed)],
                ConsensusOutcome::Split,
                "split 1–2: \"hold\" (II.1) vs no verdict (II.2, II.3)",
            ),
            (
                "an empty decision is no verdict",
                2,
                vec![said(1, "  "), said(2, "ship")],
                ConsensusOutcome::Split,
                "split 1–1: \"ship\" (II.2) vs no verdict (II.1)",
            ),
            (
                "nobody gave a verdict",
                2,
                vec![without(1, MissingVerdict::Failed)],
                ConsensusOutcome::NoVerdict,
                "no verdict from any member: no verdict (II.1, II.2)",
            ),
        ];
        for (name, members, verdicts, outcome, line) in cases {
            let entry = tally(2, members, &verdicts);
            assert_eq!(entry.outcome, outcome, "{name}");
            assert_eq!(entry.summary(), line, "{name}");
            assert_eq!(entry.verdicts.len(), members as usize, "{name}");
            let counted: usize = entry
                .decisions
                .iter()
                .map(|d| d.members.len())
                .sum::<usize>()
                + entry.no_verdict.len();
            assert_eq!(
                counted, members as usize,
                "{name}: every member counted once"
            );
        }
        // Whoever had not reported is named so in the record.
        let late = tally(2, 3, &[said(1, "hold"), without(3, MissingVerdict::Failed)]);
        assert_eq!(late.verdicts[1].missing, Some(MissingVerdict::NotReported));
        assert_eq!(late.verdicts[2].missing, Some(MissingVerdict::Failed));
    }

    #[test]
    fn a_verdict_reads_verbatim_ahead_of_its_report() {
        let mut v = said(1, " ship ");
        if let Some(verdict) = v.verdict.as_mut() {
            verdict.reasons = vec!["tests pass".to_owned(), "no open \"bugs\"".to_owned()];
        }
        assert_eq!(
            verdict_line(2, 1, &v),
            "Orchestrator II.1's verdict: \"ship\" (confidence 70 %). Reasons:\n- tests pass\n- \
             no open \"bugs\""
        );
        assert_eq!(
            verdict_line(2, 3, &without(3, MissingVerdict::Failed)),
            "Orchestrator II.3 failed: no verdict."
        );
        assert_eq!(
            verdict_line(2, 2, &without(2, MissingVerdict::NoVerdict)),
            "Orchestrator II.2 gave no verdict."
        );
    }
}
