//! The handoff packet: what an Orchestrator leaves for the one that comes
//! after it. It is typed (and its schema is part of the Orchestrator's
//! output schema) so that nothing of it depends on the Arbiter's paraphrase:
//! the coordinator stores it and hands it to the successor as written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::orchestrator_name;

/// Longest item id, in bytes.
pub const MAX_ITEM_ID: usize = 64;

/// An Orchestrator's handoff: the state of its stretch of the work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    /// Work finished, one item each, with the files it touched.
    pub done: Vec<DoneItem>,
    /// Work that remains, one item each. Keep the ids of items you were given.
    pub open: Vec<OpenItem>,
    /// Decisions made, each with its reason.
    pub decisions: Vec<Decision>,
    /// Questions still open, for the Arbiter or the human.
    pub questions: Vec<String>,
    /// The next concrete step for whoever carries on.
    pub next_step: String,
}

/// A finished item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DoneItem {
    /// The item's id (keep the id it was given, e.g. "T3").
    pub id: String,
    /// What was done.
    pub what: String,
    /// Workspace paths created or changed for it.
    pub files: Vec<String>,
}

/// An item that remains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenItem {
    /// The item's id (keep the id it was given, e.g. "T4").
    pub id: String,
    /// What remains to be done.
    pub what: String,
}

/// A decision and why it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub decision: String,
    pub why: String,
}

impl Handoff {
    /// What the schema cannot say: ids are present, short, on one line and
    /// used once; the next step is not blank. The error is written for the
    /// model, which is asked to repair its reply.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        let ids = self
            .done
            .iter()
            .map(|d| ("done", d.id.as_str()))
            .chain(self.open.iter().map(|o| ("open", o.id.as_str())));
        for (list, id) in ids {
            let id = id.trim();
            if id.is_empty() {
                return Err(format!("handoff.{list}: every item needs a non-empty id"));
            }
            if id.len() > MAX_ITEM_ID || id.contains(['\n', '\r']) {
                return Err(format!(
                    "handoff.{list}: the id {id:?} must be one line of at most {MAX_ITEM_ID} bytes"
                ));
            }
            if !seen.insert(id.to_owned()) {
                return Err(format!(
                    "handoff: the id {id:?} is used twice; each item, done or open, has its own id"
                ));
            }
        }
        if self.next_step.trim().is_empty() {
            return Err("handoff.next_step must say what to do next".to_owned());
        }
        Ok(())
    }

    /// The packet as it travels to the successor: its JSON, exactly as the
    /// Orchestrator's worker published it.
    pub fn verbatim(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The one line the Arbiter reads of Orchestrator `number`'s packet:
    /// counts and open ids, never the packet itself.
    pub fn compact_line(&self, number: u32) -> String {
        format!(
            "[Handoff of {}: {}; it goes verbatim to the next Orchestrator you summon]",
            orchestrator_name(number),
            self.counts()
        )
    }

    /// `1 done, 2 open (T2, T3), 1 decision, 0 open questions`: what the
    /// Arbiter and the consoles show of a packet.
    pub fn counts(&self) -> String {
        let open: Vec<&str> = self.open.iter().map(|o| o.id.trim()).collect();
        let open = if open.is_empty() {
            String::new()
        } else {
            format!(" ({})", open.join(", "))
        };
        format!(
            "{} done, {} open{open}, {} decision{}, {} open question{}",
            self.done.len(),
            self.open.len(),
            self.decisions.len(),
            plural(self.decisions.len()),
            self.questions.len(),
            plural(self.questions.len()),
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A predecessor's packet, as it travels with a summons and sits in the
/// session's records until the next summons takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PriorHandoff {
    /// The number of the Orchestrator that wrote it.
    pub number: u32,
    pub orch_id: String,
    pub packet: Handoff,
}

impl PriorHandoff {
    /// How the successor reads it: a header line, then the packet's JSON as
    /// it was written. It follows the Arbiter's brief in the same message.
    pub fn for_successor(&self) -> String {
        format!(
            "[Handoff packet of {}, your predecessor, as it wrote it (the Arbiter did not \
             rewrite it). Items keep their ids: report each as done or open in your own \
             handoff.]\n{}",
            orchestrator_name(self.number),
            self.packet.verbatim()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet() -> Handoff {
        Handoff {
            done: vec![DoneItem {
                id: "T1".into(),
                what: "parser".into(),
                files: vec!["src/parse.rs".into()],
            }],
            open: vec![
                OpenItem {
                    id: "T2".into(),
                    what: "CLI".into(),
                },
                OpenItem {
                    id: "T3".into(),
                    what: "docs".into(),
                },
            ],
            decisions: vec![Decision {
                decision: "TOML".into(),
                why: "the human asked".into(),
            }],
            questions: vec![],
            next_step: "Wire the flag in src/cli.rs.".into(),
        }
    }

    #[test]
    fn a_good_packet_passes_and_reads_as_one_line() {
        let p = packet();
        assert_eq!(p.check(), Ok(()));
        assert_eq!(
            p.compact_line(2),
            "[Handoff of Orchestrator II: 1 done, 2 open (T2, T3), 1 decision, 0 open \
             questions; it goes verbatim to the next Orchestrator you summon]"
        );
        let back: Handoff = serde_json::from_str(&p.verbatim()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn bad_ids_and_a_blank_next_step_are_refused() {
        let mut p = packet();
        p.open[1].id = "T1".into();
        assert!(p.check().unwrap_err().contains("used twice"));
        let mut p = packet();
        p.done[0].id = "  ".into();
        assert!(p.check().unwrap_err().contains("non-empty id"));
        let mut p = packet();
        p.open[0].id = "a\nb".into();
        assert!(p.check().unwrap_err().contains("one line"));
        let mut p = packet();
        p.next_step = " ".into();
        assert!(p.check().unwrap_err().contains("next_step"));
    }
}
