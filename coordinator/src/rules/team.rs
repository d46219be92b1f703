//! Teams of Orchestrators: several live at once in one session, numbered
//! by generation and member (II.1, II.2…). A parallel team's first reports
//! are gathered and reach the Arbiter in one input, when every member has
//! reported or the team wait ran out, whichever comes first.

use arbiter_protocol::{
    LogBody, MemberVerdict, MissingVerdict, SystemEntry, Verdict, member_name, orchestrator_name,
};
use chrono::Utc;

use crate::rules::{Core, Now};
use crate::state::{Active, Gather, Pending};

/// Which live Orchestrators an `address_orchestrator` or
/// `release_orchestrators` reaches, pure: the members it names, or, when it
/// names none, the only live one (to address) or all of them (to release).
pub(crate) fn pick_members(
    team: &[Active],
    named: Option<&[u32]>,
    release: bool,
) -> Result<Vec<Active>, String> {
    let Some(named) = named.filter(|n| !n.is_empty()) else {
        return match team {
            [] if release => Ok(Vec::new()),
            [] => Err(
                "no Orchestrator is active, so the message was not delivered. \
                       Speak to the human, or summon an Orchestrator with a complete brief."
                    .to_owned(),
            ),
            [one] => Ok(vec![one.clone()]),
            _ if release => Ok(team.to_vec()),
            many => Err(format!(
                "{} Orchestrators are live ({}), so the message was not delivered: \
                 name the members it is for (members: [1, 2…]).",
                many.len(),
                names(many)
            )),
        };
    };
    let mut picked: Vec<Active> = Vec::new();
    for &m in named {
        // Member numbers name the members of a team; a solo Orchestrator is member 1.
        match team
            .iter()
            .find(|a| a.member.unwrap_or(1) == m && !picked.contains(a))
        {
            Some(a) => picked.push(a.clone()),
            None if picked.iter().any(|a| a.member.unwrap_or(1) == m) => {}
            None => {
                let live = if team.is_empty() {
                    "none is live".to_owned()
                } else {
                    format!("live: {}", names(team))
                };
                return Err(format!(
                    "there is no live member {m} ({live}), so nothing was done. \
                     Name live members only."
                ));
            }
        }
    }
    Ok(picked)
}

fn names(team: &[Active]) -> String {
    team.iter()
        .map(|a| member_name(a.number, a.member))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one input that carries a parallel team's reports to the Arbiter.
pub(crate) fn team_input(
    number: u32,
    members: u32,
    reports: &[(u32, String)],
    waited_secs: Option<u64>,
    sequential: bool,
    consensus: Option<&str>,
) -> String {
    let team = orchestrator_name(number);
    let mut sorted = reports.to_vec();
    sorted.sort_by_key(|(m, _)| *m);
    let mut out = if let Some(tally) = consensus {
        format!(
            "The consensus {team} ({members} members): {} of {members} reported. The tally \
             of their verdicts: {tally}.",
            sorted.len()
        )
    } else if sequential {
        format!(
            "The chain {team} ({members} links, sequential): {} of {members} reported.",
            sorted.len()
        )
    } else {
        format!(
            "The team {team} ({members} members, parallel): {} of {members} reported.",
            sorted.len()
        )
    };
    if let Some(secs) = waited_secs {
        let missing: Vec<String> = (1..=members)
            .filter(|m| !sorted.iter().any(|(r, _)| r == m))
            .map(|m| member_name(number, Some(m)))
            .collect();
        out.push_str(&format!(
            " Not reported within {secs} s: {} (still at work; address or release them).",
            missing.join(", ")
        ));
    }
    out.push_str(if consensus.is_some() {
        " The tally decides nothing: the decision is yours. Each member answered the same \
         question independently, in a workspace of its own; each member's verdict and \
         report follow, verbatim."
    } else if sequential {
        " Each link was briefed with the report of the one before it, in the session's \
         workspace."
    } else {
        " Each worked in a workspace of its own: merging their work is a brief for an \
         Orchestrator, nothing was merged."
    });
    for (_, report) in sorted {
        out.push_str("\n\n");
        out.push_str(&report);
    }
    out
}

impl Core {
    /// A parallel team of generation `number` is having its reports gathered.
    pub(crate) fn gathers(&self, number: u32) -> bool {
        self.state
            .gather
            .as_ref()
            .is_some_and(|g| g.number == number)
    }

    /// Starts gathering a parallel team's reports.
    pub(crate) fn gather(&mut self, number: u32, members: u32) {
        self.state.gather = Some(Gather {
            number,
            members,
            reports: Vec::new(),
            deadline: self.team_deadline(),
            sequential: false,
            links: std::collections::VecDeque::new(),
            purpose: String::new(),
            pool: String::new(),
            runtime: None,
            needs: Vec::new(),
            consensus: false,
            verdicts: Vec::new(),
        });
    }

    pub(crate) fn team_deadline(&self) -> chrono::DateTime<Utc> {
        let wait =
            chrono::Duration::from_std(self.config.team_wait).unwrap_or(chrono::Duration::MAX);
        self.now.wall + wait
    }

    /// A chain's link `prev` reported `report`: the next link is summoned
    /// with it verbatim in its brief, then `prev` is released.
    fn next_link(&mut self, prev: u32, report: &str) {
        let deadline = self.team_deadline();
        let Some(gather) = self.state.gather.as_mut() else {
            return;
        };
        let Some(brief) = gather.links.pop_front() else {
            return;
        };
        gather.deadline = deadline;
        let (number, links) = (gather.number, gather.members);
        let (purpose, pool, runtime, needs) = (
            gather.purpose.clone(),
            gather.pool.clone(),
            gather.runtime.clone(),
            gather.needs.clone(),
        );
        let link = prev + 1;
        let brief = format!(
            "{}\n\nThe report of {}, verbatim:\n{report}",
            chain_brief(number, link, links, &purpose, &brief),
            member_name(number, Some(prev))
        );
        self.start_member(
            number,
            Some(link),
            false,
            brief,
            &pool,
            runtime,
            needs,
            None,
            None,
            false,
        );
        let done: Vec<Active> = self
            .state
            .team
            .iter()
            .filter(|a| a.number == number && a.member == Some(prev))
            .cloned()
            .collect();
        self.release(done);
    }

    /// Takes member `member`'s first report (and a consensus member's
    /// verdict) into the gather; the team's reports go to the Arbiter once
    /// every member is in.
    pub(crate) fn gathered(&mut self, member: u32, pending: Pending, verdict: Option<Verdict>) {
        let raw = match &pending {
            Pending::Orchestrator { text, .. } => Some(text.clone()),
            _ => None,
        };
        let text = match &pending {
            Pending::Team { .. } => return,
            Pending::Human { text, .. } => text.clone(),
            other => other.words(),
        };
        let Some(gather) = self.state.gather.as_mut() else {
            return;
        };
        let text = if gather.consensus {
            // Its verdict first, then its report, both verbatim.
            let missing = match (&verdict, &raw) {
                (Some(_), _) => None,
                (None, Some(_)) => Some(MissingVerdict::NoVerdict),
                (None, None) => Some(MissingVerdict::Failed),
            };
            let verdict = MemberVerdict {
                member,
                verdict,
                missing,
            };
            let line = crate::rules::consensus::verdict_line(gather.number, member, &verdict);
            gather.verdicts.push(verdict);
            format!("{line}\n{text}")
        } else {
            text
        };
        gather.reports.push((member, text));
        self.step.changed = true;
        let chained = gather.sequential && !gather.links.is_empty();
        let all_in = gather.reports.len() >= gather.members as usize;
        match raw {
            // The chain goes on with the next link.
            Some(report) if chained => self.next_link(member, &report),
            // A link that failed ends its chain: what came in goes on now.
            None if chained => self.deliver_gather(None),
            _ if all_in => self.deliver_gather(None),
            _ => {}
        }
    }

    /// When the team wait runs out, if a team is being gathered.
    pub(crate) fn gather_deadline(&self, now: Now) -> Option<tokio::time::Instant> {
        let gather = self.state.gather.as_ref()?;
        let left = (gather.deadline - now.wall).to_std().unwrap_or_default();
        Some(now.mono + left)
    }

    /// The team wait ran out: what is in goes to the Arbiter.
    pub(crate) fn expire_gather(&mut self) {
        if self
            .state
            .gather
            .as_ref()
            .is_some_and(|g| g.deadline <= self.now.wall)
        {
            self.deliver_gather(Some(self.config.team_wait.as_secs()));
        }
    }

    pub(crate) fn deliver_gather(&mut self, waited_secs: Option<u64>) {
        let Some(gather) = self.state.gather.take() else {
            return;
        };
        let Gather {
            number,
            members,
            reports,
            sequential,
            consensus,
            verdicts,
            ..
        } = gather;
        let text = format!(
            "{} of {members} members of the team {} reported; their reports go to the \
             Arbiter together{}.",
            reports.len(),
            orchestrator_name(number),
            match waited_secs {
                Some(secs) => format!(" (the team wait of {secs} s ran out)"),
                None => String::new(),
            }
        );
        self.log(LogBody::System(SystemEntry { text }));
        // The tally is for the record and the Arbiter; the Arbiter decides.
        let consensus = consensus.then(|| {
            let entry = crate::rules::consensus::tally(number, members, &verdicts);
            let line = entry.summary();
            self.log(LogBody::Consensus(entry));
            line
        });
        self.enqueue(Pending::Team {
            number,
            members,
            reports,
            waited_secs,
            sequential,
            consensus,
        });
    }
}

/// The brief of link `link` of a chain of `links`, before its predecessor's report.
pub(crate) fn chain_brief(
    number: u32,
    link: u32,
    links: u32,
    purpose: &str,
    brief: &str,
) -> String {
    format!(
        "You are {}, link {link} of {links} of a chain: each link is summoned when the one \
         before it reports, with its report, and works in the session's workspace. The \
         chain's purpose: {purpose}\n\nYour part:\n{brief}",
        member_name(number, Some(link))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(number: u32, member: Option<u32>) -> Active {
        Active {
            orch_id: format!("o{number}-{}", member.unwrap_or(0)),
            number,
            member,
            reported: false,
            inputs_sent: 0,
            outputs_seen: 0,
            session_inputs: false,
            asked: false,
            reminded: false,
        }
    }

    /// Name, the live team, the members named, release or address, and what it reaches.
    type Case<'a> = (
        &'a str,
        &'a [Active],
        Option<&'a [u32]>,
        bool,
        Result<Vec<&'a str>, &'a str>,
    );

    #[test]
    fn the_members_decision_table() {
        let solo = vec![member(1, None)];
        let team = vec![member(2, Some(1)), member(2, Some(2)), member(2, Some(3))];
        let ids = |r: Result<Vec<Active>, String>| -> Result<Vec<String>, String> {
            r.map(|v| v.into_iter().map(|a| a.orch_id).collect())
        };
        let cases: Vec<Case> = vec![
            (
                "address: the only live one",
                &solo,
                None,
                false,
                Ok(vec!["o1-0"]),
            ),
            (
                "address: a solo one named as member 1",
                &solo,
                Some(&[1]),
                false,
                Ok(vec!["o1-0"]),
            ),
            (
                "address: nobody live",
                &[],
                None,
                false,
                Err("no Orchestrator is active"),
            ),
            (
                "address: a team, nobody named",
                &team,
                None,
                false,
                Err(
                    "3 Orchestrators are live (Orchestrator II.1, Orchestrator II.2, Orchestrator II.3)",
                ),
            ),
            (
                "address: two members",
                &team,
                Some(&[3, 1]),
                false,
                Ok(vec!["o2-3", "o2-1"]),
            ),
            (
                "address: a member named twice",
                &team,
                Some(&[2, 2]),
                false,
                Ok(vec!["o2-2"]),
            ),
            (
                "address: a member that is not live",
                &team,
                Some(&[4]),
                false,
                Err("there is no live member 4 (live: Orchestrator II.1"),
            ),
            (
                "release: the whole team",
                &team,
                None,
                true,
                Ok(vec!["o2-1", "o2-2", "o2-3"]),
            ),
            (
                "release: one member",
                &team,
                Some(&[2]),
                true,
                Ok(vec!["o2-2"]),
            ),
            ("release: nobody live", &[], None, true, Ok(vec![])),
            (
                "release: a member of nobody",
                &[],
                Some(&[1]),
                true,
                Err("there is no live member 1 (none is live)"),
            ),
        ];
        for (name, live, named, release, want) in cases {
            let got = ids(pick_members(live, named, release));
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "{name}"),
                (Err(want), Err(got)) => assert!(got.starts_with(want), "{name}: {got}"),
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn a_teams_reports_are_one_input_in_member_order() {
        let reports = vec![
            (2, "Orchestrator II.2: parser done.".to_owned()),
            (1, "Orchestrator II.1: lexer done.".to_owned()),
        ];
        assert_eq!(
            team_input(2, 2, &reports, None, false, None),
            "The team Orchestrator II (2 members, parallel): 2 of 2 reported. Each worked in \
             a workspace of its own: merging their work is a brief for an Orchestrator, \
             nothing was merged.\n\nOrchestrator II.1: lexer done.\n\nOrchestrator II.2: \
             parser done."
        );
        let late = team_input(2, 3, &reports[..1], Some(60), false, None);
        assert!(
            late.starts_with(
                "The team Orchestrator II (3 members, parallel): 1 of 3 reported. Not \
                 reported within 60 s: Orchestrator II.1, Orchestrator II.3 (still at work"
            ),
            "{late}"
        );
    }
}
