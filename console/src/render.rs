//! How log entries look in the line modes: one plain-text line (or block, for
//! multi-line text) per entry, or one compact JSON object per line.

use arbiter_protocol::{LogBody, LogEntry, orchestrator_name, roman};

/// How the console prints the log on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// `You: …`, `Arbiter: …`, `· Orchestrator I summoned: …`; musings hidden unless asked for.
    #[default]
    Plain,
    /// Each [`LogEntry`] re-serialised as one compact JSON line, musings included.
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
        OutputMode::Json => serde_json::to_string(entry).map(Some),
    }
}

/// The plain-text form of an entry; `None` for a musing unless `show_musings`.
/// Multi-line text is kept as is.
pub fn plain(entry: &LogEntry, show_musings: bool) -> Option<String> {
    let line = match &entry.body {
        LogBody::Human(e) => format!("You: {}", e.text),
        LogBody::Arbiter(e) => format!("Arbiter: {}", e.text),
        LogBody::ArbiterToOrchestrator(e) => {
            format!("Arbiter → {}: {}", orchestrator_name(e.number), e.text)
        }
        LogBody::Orchestrator(e) if e.expects_response => {
            format!("{}: {}", orchestrator_name(e.number), e.text)
        }
        LogBody::Orchestrator(e) => format!("{} (note): {}", orchestrator_name(e.number), e.text),
        LogBody::Musing(e) if show_musings => format!("Arbiter (musing): {}", e.text),
        LogBody::Musing(_) => return None,
        LogBody::Summoned(e) => {
            format!("· {} summoned: {}", orchestrator_name(e.number), e.brief)
        }
        LogBody::Released(e) => format!("· {} released.", released_names(&e.numbers)),
        LogBody::System(e) => format!("· System: {}", e.text),
        LogBody::Error(e) => format!("! Error: {}", e.error),
    };
    Some(line)
}

/// `Orchestrator I`, `Orchestrator I, II`; `Orchestrators` when the list is empty.
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
        ArbiterEntry, ArbiterToOrchestratorEntry, ErrorEntry, HumanEntry, ModelErrorKind,
        MusingEntry, OrchestratorEntry, ReleasedEntry, Role, SummonedEntry, SystemEntry, WireError,
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
                number: 1,
                orch_id: "o1".into(),
                pool: "default".into(),
                brief: "Build it.".into(),
            }),
            LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
                number: 1,
                orch_id: "o1".into(),
                text: "Proceed.".into(),
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                number: 1,
                orch_id: "o1".into(),
                expects_response: false,
                text: "Halfway.".into(),
            }),
            LogBody::Orchestrator(OrchestratorEntry {
                number: 4,
                orch_id: "o4".into(),
                expects_response: true,
                text: "Which one?".into(),
            }),
            LogBody::Musing(MusingEntry {
                text: "Hmm.".into(),
            }),
            LogBody::Released(ReleasedEntry { numbers: vec![1] }),
            LogBody::Released(ReleasedEntry {
                numbers: vec![1, 2, 9],
            }),
            LogBody::Released(ReleasedEntry { numbers: vec![] }),
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
    fn plain_lines() {
        let got: Vec<Option<String>> = bodies()
            .into_iter()
            .enumerate()
            .map(|(i, b)| plain(&entry(i as u64 + 1, b), false))
            .collect();
        let want: Vec<Option<String>> = vec![
            Some("You: hello".into()),
            Some("Arbiter: Two lines:\nthe second.".into()),
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
}
