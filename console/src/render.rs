//! How log entries look in the line modes: one plain-text line (or block, for
//! multi-line text, its later lines marked) per entry, or one compact JSON
//! object per line.

use arbiter_protocol::{
    ConsensusEntry, Escalation, LogBody, LogEntry, OrchestratorEntry, StrategyEntry, member_name,
    orchestrator_name, roman,
};

use crate::inert;

/// How the console prints the log on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// `You: …`, `Arbiter: …`, `· Orchestrator I summoned: …`; musings hidden unless asked for.
    #[default]
    Plain,
    /// Each [`LogEntry`] re-serialised as one compact JSON line, musings
    /// included; active characters are `\uXXXX` escapes ([`inert::json_line`]).
    Json,
}

/// What `entry` prints as in `mode`, without the final newline; `None` when it is hidden.
pub fn render(
    entry: &LogEntry,
    mode: OutputMode,
    show_musings: bool,
) -> Result<Option<String>, serde_json::Error> {
    match mode {
        OutputMode::Plain => Ok(plain(entry, show_musings)),
        OutputMode::Json => inert::json_line(entry).map(Some),
    }
}

/// How a console shows a new Arbiter generation: `Arbiter, generation 2
/// took over: context 6100 → 900 tokens …`, and who wrote the packet.
pub fn arbiter_handoff(e: &arbiter_protocol::ArbiterHandoffEntry) -> String {
    let open: Vec<&str> = e.packet.open.iter().map(|o| o.id.as_str()).collect();
    let open = if open.is_empty() {
        "no open items".to_owned()
    } else {
        format!("open: {}", open.join(", "))
    };
    let by = match &e.built_by_coordinator {
        Some(why) => format!(" The coordinator built the packet from the records ({why})."),
        None => String::new(),
    };
    format!(
        "Arbiter, generation {} took over: context {} → {} tokens; from its predecessor's packet \
         ({} Orchestrator line(s), {open}) and its last {} exchange(s).{by}",
        e.generation,
        e.context_tokens_before,
        e.context_tokens_after,
        e.packet.orchestrators.len(),
        e.kept_exchanges,
    )
}

/// The plain-text form of an entry; `None` for a musing unless `show_musings`.
/// The words are made inert ([`inert::block`]): escape sequences and other
/// active characters are shown escaped, and every line after the first starts
/// with [`inert::CONTINUATION`], so no text can pose as another speaker.
pub fn plain(entry: &LogEntry, show_musings: bool) -> Option<String> {
    let (label, text) = match &entry.body {
        LogBody::Human(e) => ("You: ".to_owned(), e.text.as_str()),
        LogBody::Arbiter(e) => ("Arbiter: ".to_owned(), e.text.as_str()),
        LogBody::ArbiterToOrchestrator(e) => (
            format!("Arbiter → {}: ", member_name(e.number, e.member)),
            e.text.as_str(),
        ),
        LogBody::Orchestrator(e) if e.expects_response => (
            format!("{}: ", member_name(e.number, e.member)),
            e.text.as_str(),
        ),
        LogBody::Orchestrator(e) => (
            format!("{} (note): ", member_name(e.number, e.member)),
            e.text.as_str(),
        ),
        LogBody::Musing(e) if show_musings => ("Arbiter (musing): ".to_owned(), e.text.as_str()),
        LogBody::Musing(_) => return None,
        LogBody::Summoned(e) => (
            format!("· {} summoned: ", member_name(e.number, e.member)),
            e.brief.as_str(),
        ),
        LogBody::Released(e) => match (e.member, e.numbers.as_slice()) {
            (Some(m), [n]) => (format!("· {} released.", member_name(*n, Some(m))), ""),
            _ => (format!("· {} released.", released_names(&e.numbers)), ""),
        },
        LogBody::Strategy(e) => return Some(inert::block("· Strategy: ", &strategy(e))),
        LogBody::Consensus(e) => return Some(inert::block("· ", &consensus(e))),
        LogBody::Step(_) => return None,
        LogBody::System(e) => ("· System: ".to_owned(), e.text.as_str()),
        LogBody::ApprovalAsked(e) => return Some(crate::approval::asked_plain(e)),
        LogBody::ApprovalAnswered(e) => {
            let label = format!("· Approval {}: ", e.approval);
            return Some(inert::block(&label, &e.line()));
        }
        LogBody::Error(e) => return Some(inert::block("! Error: ", &e.error.to_string())),
        LogBody::ArbiterHandoff(e) => return Some(inert::block("· ", &arbiter_handoff(e))),
        LogBody::Rewound(e) => return Some(inert::block("· ", &rewound(e))),
    };
    let mut out = inert::block(&label, text);
    if let LogBody::Orchestrator(e) = &entry.body
        && let Some(line) = evidence_line(e)
    {
        out.push('\n');
        out.push_str(&inert::block(line.label(), &line.text));
    }
    if let LogBody::Orchestrator(e) = &entry.body
        && let Some(handoff) = &e.handoff
    {
        out.push('\n');
        out.push_str(&inert::block("· Handoff: ", &handoff.counts()));
    }
    Some(out)
}

/// A rewind as the log shows it.
pub fn rewound(e: &arbiter_protocol::RewoundEntry) -> String {
    let short: String = e.checkpoint.chars().take(12).collect();
    format!(
        "Rewound to checkpoint {short} by console {}: the next Orchestrator starts from it, \
         the workspace put back as it was there before its first step. Write to go on.",
        e.console
    )
}

/// The line under an Orchestrator's report that shows its worker's evidence:
/// the summary, or the check a claim of work with nothing to show calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceLine {
    /// A report of work done with no tool call and no file change.
    pub flagged: bool,
    /// Not yet made inert.
    pub text: String,
}

impl EvidenceLine {
    /// What the line modes print before it.
    pub fn label(&self) -> &'static str {
        if self.flagged {
            "! Check: "
        } else {
            "· Evidence: "
        }
    }
}

/// The evidence line of a report (`expects_response: true`) that carries
/// evidence; notes and reports from older workers get none.
pub fn evidence_line(entry: &OrchestratorEntry) -> Option<EvidenceLine> {
    if !entry.expects_response {
        return None;
    }
    let evidence = entry.evidence.as_ref()?;
    Some(
        match evidence.flag(entry.number, entry.member, &entry.text) {
            Some(flag) => EvidenceLine {
                flagged: true,
                text: format!("{flag}. Nothing of it shows in the workspace."),
            },
            None => EvidenceLine {
                flagged: false,
                text: evidence.summary(),
            },
        },
    )
}

/// `Orchestrator I`, `Orchestrator I, II`; `Orchestrators` when the list is empty.
/// The audit line of a summons: the strategy, where it went, the human's
/// directive verbatim and as read, and the reason when it was refused.
pub fn strategy(e: &StrategyEntry) -> String {
    let who = match (e.number, e.members) {
        (Some(n), 1) => orchestrator_name(n),
        (Some(n), m) => format!(
            "{} ({})",
            orchestrator_name(n),
            (1..=m)
                .map(|i| format!("{}.{i}", roman(n)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (None, _) => "nothing summoned".to_owned(),
    };
    let mut text = format!(
        "{} for {who}, pool {:?}, runtime {:?}.",
        e.strategy.as_str(),
        e.pool,
        e.runtime.as_deref().unwrap_or("any")
    );
    match (e.risk, e.complexity) {
        (Some(r), Some(c)) => text.push_str(&format!(" Risk {r}, complexity {c}.")),
        (Some(r), None) => text.push_str(&format!(" Risk {r}.")),
        (None, Some(c)) => text.push_str(&format!(" Complexity {c}.")),
        (None, None) => {}
    }
    match e.escalation {
        Some(Escalation::Escalated { threshold }) => text.push_str(&format!(
            " Escalated from solo to a consensus: the risk is at or above {threshold}."
        )),
        Some(Escalation::KeptSolo) => {
            text.push_str(" Kept solo on the human's word, whatever the risk.")
        }
        Some(Escalation::Forced) => {
            text.push_str(" A consensus on the human's word, whatever the risk.")
        }
        None => {}
    }
    if let Some(d) = &e.directive {
        text.push_str(&format!(" The human's directive, verbatim: {:?}", d.words));
        if let Some(p) = &d.parsed {
            text.push_str(&format!(" (read as: {p}"));
            if let Some(c) = d.confidence {
                text.push_str(&format!("; confidence {c} %"));
            }
            text.push(')');
        }
        text.push('.');
    }
    if let Some(why) = &e.rejected {
        text.push_str(&format!(" Refused: {why}"));
    }
    text
}

/// The tally of a consensus team: `Consensus on Orchestrator II: split 2–1:
/// "ship" (II.1, II.3) vs "hold" (II.2)`. A split or a tie is for the human to see.
pub fn consensus(e: &ConsensusEntry) -> String {
    format!(
        "Consensus on {}: {}",
        orchestrator_name(e.number),
        e.summary()
    )
}

fn released_names(numbers: &[u32]) -> String {
    if numbers.is_empty() {
        return "Orchestrators".to_owned();
    }
    let numerals: Vec<String> = numbers.iter().copied().map(roman).collect();
    format!("Orchestrator {}", numerals.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{
        ArbiterEntry, ArbiterToOrchestratorEntry, CommandRun, ErrorEntry, Evidence, FileChanges,
        HumanEntry, ModelErrorKind, MusingEntry, OrchestratorEntry, ReleasedEntry, Role,
        SummonedEntry, SystemEntry, ToolCalls, WireError,
    };
    use chrono::Utc;
    use pretty_assertions::assert_eq;

    fn entry(seq: u64, body: LogBody) -> LogEntry {
        LogEntry {
            v: arbiter_protocol::VERSION,
            session_id: "s1".into(),
            seq,
            at: Utc::now(),
            body,
        }
    }

    #[test]
    fn a_split_consensus_is_shown_with_who_said_what() {
        use arbiter_protocol::{ConsensusOutcome, DecisionVotes, MemberVerdict, MissingVerdict};
        let votes = |decision: &str, members: &[u32]| DecisionVotes {
            decision: decision.into(),
            members: members.to_vec(),
        };
        let tally = ConsensusEntry {
            number: 2,
            members: 4,
            outcome: ConsensusOutcome::Split,
            decisions: vec![votes("ship", &[1, 3]), votes("hold\nnow", &[2])],
            no_verdict: vec![4],
            verdicts: vec![MemberVerdict {
                member: 4,
                verdict: None,
                missing: Some(MissingVerdict::Failed),
            }],
        };
        // A decision cannot start a line of its own: its later lines are marked.
        assert_eq!(
            plain(&entry(1, LogBody::Consensus(tally)), false).unwrap(),
            format!(
                "· Consensus on Orchestrator II: split 2–1–1: \"ship\" (II.1, II.3) vs \"hold\n{}now\" \
                 (II.2) vs no verdict (II.4)",
                inert::CONTINUATION
            )
        );
    }

    #[test]
    fn a_team_shows_member_numbers_and_the_strategy_entry_its_audit_line() {
        let show = |body: LogBody| plain(&entry(1, body), false).unwrap();
        assert_eq!(
            show(LogBody::Strategy(StrategyEntry {
                number: Some(2),
                strategy: arbiter_protocol::SummonStrategy::Parallel,
                members: 3,
                pool: "default".into(),
                runtime: None,
                directive: Some(arbiter_protocol::Directive {
                    words: "three at once".into(),
                    parsed: Some("parallel, 3".into()),
                    confidence: Some(80),
                }),
                rejected: None,
                risk: None,
                complexity: None,
                escalation: None,
            })),
            "· Strategy: parallel for Orchestrator II (II.1, II.2, II.3), pool \"default\", \
             runtime \"any\". The human's directive, verbatim: \"three at once\" (read as: \
             parallel, 3; confidence 80 %)."
        );
        assert_eq!(
            show(LogBody::Strategy(StrategyEntry {
                number: None,
                strategy: arbiter_protocol::SummonStrategy::Parallel,
                members: 0,
                pool: "default".into(),
                runtime: None,
                directive: None,
                rejected: Some("count 0.".into()),
                risk: None,
                complexity: None,
                escalation: None,
            })),
            "· Strategy: parallel for nothing summoned, pool \"default\", runtime \"any\". \
             Refused: count 0."
        );
        assert_eq!(
            show(LogBody::Strategy(StrategyEntry {
                number: Some(3),
                strategy: arbiter_protocol::SummonStrategy::Solo,
                members: 1,
                pool: "default".into(),
                runtime: None,
                directive: Some(arbiter_protocol::Directive {
                    words: "skip consensus, just do it".into(),
                    parsed: None,
                    confidence: None,
                }),
                rejected: None,
                risk: Some(9),
                complexity: None,
                escalation: Some(Escalation::KeptSolo),
            })),
            "· Strategy: solo for Orchestrator III, pool \"default\", runtime \"any\". Risk \
             9. Kept solo on the human's word, whatever the risk. The human's directive, \
             verbatim: \"skip consensus, just do it\"."
        );
        assert_eq!(
            show(LogBody::Strategy(StrategyEntry {
                number: Some(4),
                strategy: arbiter_protocol::SummonStrategy::Consensus,
                members: 3,
                pool: "default".into(),
                runtime: None,
                directive: None,
                rejected: None,
                risk: Some(9),
                complexity: Some(6),
                escalation: Some(Escalation::Escalated { threshold: 8 }),
            })),
            "· Strategy: consensus for Orchestrator IV (IV.1, IV.2, IV.3), pool \"default\", \
             runtime \"any\". Risk 9, complexity 6. Escalated from solo to a consensus: the \
             risk is at or above 8."
        );
        assert_eq!(
            show(LogBody::Summoned(SummonedEntry {
                member: Some(2),
                number: 2,
                orch_id: "o2".into(),
                pool: "default".into(),
                brief: "Part two.".into(),
            })),
            "· Orchestrator II.2 summoned: Part two."
        );
        assert_eq!(
            show(LogBody::Orchestrator(OrchestratorEntry {
                member: Some(3),
                number: 2,
                orch_id: "o3".into(),
                expects_response: true,
                text: "Done.".into(),
                evidence: None,
                handoff: None,
            })),
            "Orchestrator II.3: Done."
        );
        assert_eq!(
            show(LogBody::Released(ReleasedEntry {
                member: Some(1),
                numbers: vec![2],
            })),
            "· Orchestrator II.1 released."
        );
    }

    fn bodies() -> Vec<LogBody> {
        vec![
            LogBody::Human(HumanEntry {
                message_id: "m1".into(),
                text: "hello".into(),
            }),
            LogBody::Arbiter(ArbiterEntry {
                text: "Two lines:\nthe second.".into(),
            }),
            LogBody::Summoned(SummonedEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                pool: "default".into(),
                brief: "Build it.".into(),
            }),
            LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                text: "Proceed.".into(),
                input_seq: None,
                budget: None,
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                expects_response: false,
                text: "Halfway.".into(),
                evidence: None,
                handoff: None,
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                member: None,
                number: 4,
                orch_id: "o4".into(),
                expects_response: true,
                text: "Which one?".into(),
                evidence: None,
                handoff: None,
            }),
            LogBody::Musing(MusingEntry {
                text: "Hmm.".into(),
            }),
            LogBody::Released(ReleasedEntry {
                member: None,
                numbers: vec![1],
            }),
            LogBody::Released(ReleasedEntry {
                member: None,
                numbers: vec![1, 2, 9],
            }),
            LogBody::Released(ReleasedEntry {
                member: None,
                numbers: vec![],
            }),
            LogBody::System(SystemEntry {
                text: "No Orchestrator is active.".into(),
            }),
            LogBody::Error(ErrorEntry {
                error: WireError::Model {
                    role: Role::Arbiter,
                    class: ModelErrorKind::Overloaded,
                    message: "529 overloaded".into(),
                },
            }),
        ]
    }

    #[test]
    fn a_new_arbiter_generation_reads_as_one_event_line() {
        let packet: arbiter_protocol::ArbiterPacket = serde_json::from_value(serde_json::json!({
            "goal": "g", "preferences": [], "decisions": [],
            "orchestrators": [{"number": 1, "line": "built T1"}],
            "open": [{"id": "T2", "what": "x"}, {"id": "T3", "what": "y"}], "active": null}))
        .unwrap();
        let mut e = arbiter_protocol::ArbiterHandoffEntry {
            generation: 2,
            packet: Box::new(packet),
            built_by_coordinator: None,
            kept_exchanges: 2,
            context_tokens_before: 6100,
            context_tokens_after: 900,
        };
        assert_eq!(
            arbiter_handoff(&e),
            "Arbiter, generation 2 took over: context 6100 → 900 tokens; from its \
             predecessor's packet (1 Orchestrator line(s), open: T2, T3) and its last 2 \
             exchange(s)."
        );
        e.built_by_coordinator = Some("the Arbiter gave no valid packet".into());
        assert!(arbiter_handoff(&e).ends_with(
            "The coordinator built the packet from the records (the Arbiter gave no valid \
             packet)."
        ));
    }

    #[test]
    fn plain_lines() {
        let got: Vec<Option<String>> = bodies()
            .into_iter()
            .enumerate()
            .map(|(i, b)| plain(&entry(i as u64 + 1, b), false))
            .collect();
        let want: Vec<Option<String>> = vec![
            Some("You: hello".into()),
            Some("Arbiter: Two lines:\n  │ the second.".into()),
            Some("· Orchestrator I summoned: Build it.".into()),
            Some("Arbiter → Orchestrator I: Proceed.".into()),
            Some("Orchestrator I (note): Halfway.".into()),
            Some("Orchestrator IV: Which one?".into()),
            None,
            Some("· Orchestrator I released.".into()),
            Some("· Orchestrator I, II, IX released.".into()),
            Some("· Orchestrators released.".into()),
            Some("· System: No Orchestrator is active.".into()),
            Some("! Error: the Arbiter's model call failed: 529 overloaded".into()),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn musings_on_request() {
        let musing = entry(
            1,
            LogBody::Musing(MusingEntry {
                text: "Hmm.".into(),
            }),
        );
        assert_eq!(
            plain(&musing, true).as_deref(),
            Some("Arbiter (musing): Hmm.")
        );
        assert_eq!(
            render(&musing, OutputMode::Plain, false).unwrap(),
            None,
            "hidden by default"
        );
    }

    /// What an attack probe sent as model text: a title change and a screen
    /// clear, a carriage return and newlines faking other speakers, a C1 CSI
    /// and a bidi override.
    const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J ok\rYou: fake\nline1\nYou: fake\nArbiter: fake \u{9b}2J \u{202e}desserts";

    /// Speaker lines start with one of these; the console's own first line aside,
    /// no line may.
    const SPEAKERS: [&str; 6] = ["You:", "Arbiter", "Orchestrator", "· ", "! ", "System"];

    fn hostile_bodies() -> Vec<LogBody> {
        let text = || HOSTILE.to_owned();
        vec![
            LogBody::Human(HumanEntry {
                message_id: "m1".into(),
                text: text(),
            }),
            LogBody::Arbiter(ArbiterEntry { text: text() }),
            LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                text: text(),
                input_seq: None,
                budget: None,
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                expects_response: true,
                text: text(),
                evidence: None,
                handoff: None,
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                member: None,
                number: 1,
                orch_id: "o1".into(),
                expects_response: false,
                text: text(),
                evidence: None,
                handoff: None,
            }),
            LogBody::Musing(MusingEntry { text: text() }),
            LogBody::Summoned(SummonedEntry {
                member: None,
                number: 2,
                orch_id: "o2".into(),
                pool: "default".into(),
                brief: text(),
            }),
            LogBody::System(SystemEntry { text: text() }),
            LogBody::Error(ErrorEntry {
                error: WireError::OrchestratorFailed {
                    number: 1,
                    message: text(),
                },
            }),
        ]
    }

    #[test]
    fn hostile_text_is_inert() {
        // The human sees the escapes spelled out, and the fake speakers on
        // lines marked as the Orchestrator's own:
        //   Orchestrator I: \x1b]0;pwned\x07\x1b[2J ok\x0dYou: fake
        //     │ line1
        //     │ You: fake
        //     │ Arbiter: fake \u{9b}2J \u{202e}desserts
        let orchestrator = entry(1, hostile_bodies().swap_remove(3));
        assert_eq!(
            plain(&orchestrator, false).unwrap(),
            "Orchestrator I: \\x1b]0;pwned\\x07\\x1b[2J ok\\x0dYou: fake\n  │ line1\n  │ You: fake\n  │ Arbiter: fake \\u{9b}2J \\u{202e}desserts"
        );
        for (i, body) in hostile_bodies().into_iter().enumerate() {
            let text = plain(&entry(i as u64 + 1, body), true).unwrap();
            assert!(
                !text.chars().any(|c| c != '\n' && inert::is_active(c)),
                "a raw control character: {text:?}"
            );
            // The first line is the entry's own; the fake speakers come after.
            for line in text.split('\n').skip(1) {
                assert!(line.starts_with("  │ "), "an unmarked line: {line:?}");
                assert!(
                    !SPEAKERS.iter().any(|s| line.starts_with(s)),
                    "a line poses as a speaker: {line:?}"
                );
            }
        }
    }

    #[test]
    fn hostile_json_is_escaped_and_the_same_value() {
        // A program reads the same entry back; a human who looks at the line
        // in a terminal sees \u001b, \u009b and \u202e spelled out.
        for (i, body) in hostile_bodies().into_iter().enumerate() {
            let e = entry(i as u64 + 1, body);
            let line = render(&e, OutputMode::Json, false).unwrap().unwrap();
            assert!(!line.chars().any(inert::is_active), "{line:?}");
            let back: LogEntry = serde_json::from_str(&line).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn json_lines_round_trip() {
        for (i, body) in bodies().into_iter().enumerate() {
            let e = entry(i as u64 + 1, body);
            let line = render(&e, OutputMode::Json, false).unwrap().unwrap();
            assert!(!line.contains('\n'), "{line}");
            let back: LogEntry = serde_json::from_str(&line).unwrap();
            assert_eq!(back, e);
        }
    }

    fn report(text: &str, expects_response: bool, evidence: Option<Evidence>) -> LogBody {
        LogBody::Orchestrator(OrchestratorEntry {
            member: None,
            number: 1,
            orch_id: "o1".into(),
            expects_response,
            text: text.into(),
            evidence,
            handoff: None,
        })
    }

    #[test]
    fn a_report_shows_its_evidence_on_the_next_line() {
        let wrote = Evidence {
            tools: vec![ToolCalls {
                tool: "bash".into(),
                calls: 1,
                failed: 1,
            }],
            files: FileChanges {
                created: vec!["a.py".into()],
                ..FileChanges::default()
            },
            commands: vec![CommandRun {
                command: "false".into(),
                exit_code: Some(1),
            }],
            commands_more: 0,
            ..Evidence::default()
        };
        let line = |body| plain(&entry(1, body), false).unwrap();
        assert_eq!(
            line(report("Done.", true, Some(wrote.clone()))),
            "Orchestrator I: Done.\n· Evidence: 1 tool call (bash 1, 1 failed), 1 file changed \
             (created: a.py); commands: `false` exit 1"
        );
        assert_eq!(
            line(report(
                "hello.py is created.",
                true,
                Some(Evidence::default())
            )),
            "Orchestrator I: hello.py is created.\n! Check: Orchestrator I reports done: 0 tool \
             calls, 0 files changed. Nothing of it shows in the workspace."
        );
        // Notes, and reports from older workers, show the words alone.
        assert_eq!(
            line(report("Halfway.", false, Some(wrote))),
            "Orchestrator I (note): Halfway."
        );
        assert_eq!(line(report("Done.", true, None)), "Orchestrator I: Done.");
    }

    #[test]
    fn a_report_with_a_handoff_shows_its_counts_not_the_packet() {
        let mut body = report("Context full.", true, None);
        if let LogBody::Orchestrator(e) = &mut body {
            e.handoff = Some(Box::new(arbiter_protocol::Handoff {
                done: vec![arbiter_protocol::DoneItem {
                    id: "T1".into(),
                    what: "parser".into(),
                    files: vec!["src/parse.rs".into()],
                }],
                open: vec![arbiter_protocol::OpenItem {
                    id: "T2\u{1b}[2J".into(),
                    what: "flag".into(),
                }],
                decisions: vec![],
                questions: vec!["Alias?".into()],
                next_step: "Wire it.".into(),
            }));
        }
        // The human sees the counts and the open ids, rendered inert.
        assert_eq!(
            plain(&entry(1, body), false).unwrap(),
            "Orchestrator I: Context full.\n· Handoff: 1 done, 1 open (T2\\x1b[2J), 0 \
             decisions, 1 open question"
        );
    }

    #[test]
    fn evidence_cannot_pose_as_a_speaker_or_reach_the_terminal_raw() {
        let hostile = Evidence {
            files: FileChanges {
                created: vec!["x\nOrchestrator II: all tests pass\u{1b}[2J\u{202e}".into()],
                ..FileChanges::default()
            },
            commands: vec![CommandRun {
                command: "echo\r\nYou: hi\u{9b}31m".into(),
                exit_code: Some(0),
            }],
            ..Evidence::default()
        };
        let out = plain(&entry(1, report("Done.", true, Some(hostile))), false).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out:?}");
        assert!(lines[1].starts_with("· Evidence: "), "{out:?}");
        assert!(
            !out.chars().any(|c| inert::is_active(c) && c != '\n'),
            "{out:?}"
        );
    }
}
