//! The Arbiter packet: what an Arbiter generation leaves for the next one
//! when its own context passes its threshold. The coordinator asks for it
//! between turns (its schema is the reply's output schema), validates it,
//! and starts the next generation from the system prompt, the packet and
//! the last few exchanges verbatim. It reuses the pieces of the
//! Orchestrator's packet ([`crate::handoff`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::handoff::{Decision, MAX_ITEM_ID, OpenItem};

/// An Arbiter's handoff: everything the next Arbiter generation needs of
/// the conversation so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArbiterPacket {
    /// The human's goal for this session, in one or two sentences.
    pub goal: String,
    /// The human's stated preferences and constraints, one each, as they said them.
    pub preferences: Vec<String>,
    /// Decisions taken so far, each with its reason.
    pub decisions: Vec<Decision>,
    /// The Orchestrators so far, one line per generation, oldest first.
    pub orchestrators: Vec<GenerationLine>,
    /// Work that remains, one item each. Keep the ids items were given.
    pub open: Vec<OpenItem>,
    /// The Orchestrator at work now, if any.
    pub active: Option<ActiveLine>,
}

/// One Orchestrator generation, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationLine {
    /// The Orchestrator's number (1 for Orchestrator I).
    pub number: u32,
    /// What it did and how it ended, in one line.
    pub line: String,
}

/// The Orchestrator at work while the Arbiter hands off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActiveLine {
    /// Its number (1 for Orchestrator I).
    pub number: u32,
    /// What it is doing.
    pub doing: String,
}

impl ArbiterPacket {
    /// What the schema cannot say: a goal, open ids present, short, on one
    /// line and used once, one line per generation. The error is written
    /// for the model, which is asked to repair its reply.
    pub fn check(&self) -> Result<(), String> {
        if self.goal.trim().is_empty() {
            return Err("goal must say what the human wants".to_owned());
        }
        let mut seen = std::collections::BTreeSet::new();
        for item in &self.open {
            let id = item.id.trim();
            if id.is_empty() {
                return Err("open: every item needs a non-empty id".to_owned());
            }
            if id.len() > MAX_ITEM_ID || id.contains(['\n', '\r']) {
                return Err(format!(
                    "open: the id {id:?} must be one line of at most {MAX_ITEM_ID} bytes"
                ));
            }
            if !seen.insert(id.to_owned()) {
                return Err(format!("open: the id {id:?} is used twice"));
            }
        }
        let mut numbers = std::collections::BTreeSet::new();
        for generation in &self.orchestrators {
            if generation.line.contains(['\n', '\r']) {
                return Err(format!(
                    "orchestrators: the line of Orchestrator {} must be one line",
                    generation.number
                ));
            }
            if !numbers.insert(generation.number) {
                return Err(format!(
                    "orchestrators: Orchestrator {} has two lines; one per generation",
                    generation.number
                ));
            }
        }
        Ok(())
    }

    /// The packet as the next generation reads it: its JSON as written.
    pub fn verbatim(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// How the next Arbiter generation reads it: a header, then the packet.
    pub fn for_successor(&self, generation: u32) -> String {
        format!(
            "[You are Arbiter generation {generation}. Your predecessor's context filled; \
             this is the packet it left you, as written. The exchanges after it are its last \
             ones, verbatim. Carry on from here.]\n{}",
            self.verbatim()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet() -> ArbiterPacket {
        ArbiterPacket {
            goal: "Build the ten items.".into(),
            preferences: vec!["Rust only".into()],
            decisions: vec![Decision {
                decision: "TOML".into(),
                why: "the human asked".into(),
            }],
            orchestrators: vec![GenerationLine {
                number: 1,
                line: "built T1; 9 open".into(),
            }],
            open: vec![OpenItem {
                id: "T2".into(),
                what: "build T2".into(),
            }],
            active: Some(ActiveLine {
                number: 2,
                doing: "T2".into(),
            }),
        }
    }

    #[test]
    fn a_good_packet_passes_and_travels_as_written() {
        let p = packet();
        assert_eq!(p.check(), Ok(()));
        let text = p.for_successor(2);
        let (header, json) = text.split_once('\n').unwrap();
        assert!(header.contains("Arbiter generation 2"), "{header}");
        assert_eq!(serde_json::from_str::<ArbiterPacket>(json).unwrap(), p);
    }

    #[test]
    fn a_blank_goal_a_double_id_and_a_double_generation_are_refused() {
        let mut p = packet();
        p.goal = " ".into();
        assert!(p.check().unwrap_err().contains("goal"));
        let mut p = packet();
        p.open.push(p.open[0].clone());
        assert!(p.check().unwrap_err().contains("used twice"));
        let mut p = packet();
        p.orchestrators.push(p.orchestrators[0].clone());
        assert!(p.check().unwrap_err().contains("two lines"));
        let extra = serde_json::json!({"goal": "g", "preferences": [], "decisions": [],
            "orchestrators": [], "open": [], "active": null, "mood": "tired"});
        assert!(serde_json::from_value::<ArbiterPacket>(extra).is_err());
    }
}
