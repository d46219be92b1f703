//! The form of the Arbiter's reply, pure: its JSON Schema as a union keyed
//! by `intent` (and, for a summons, by `strategy`), each member carrying
//! only the fields that intent uses, and only those the deployment offers.
//! The decision comes first: `intent` and `message` are the only fields
//! every member requires (a team's `strategy` too), and a server that
//! compiles the schema into a grammar writes the required ones first, in
//! name order. A member's field descriptions
//! are `ArbiterOutput`'s own (one source for the words).
//!
//! A reply is taken back to the member it chose before it is checked
//! (`arbiter_llm::schema::fit_to_variant`): a field that does not belong
//! there (a solo summons' `count`) is dropped with a log line, not refused.

use arbiter_llm::Profile;
use arbiter_protocol::ArbiterOutput;
use serde_json::{Map, Value, json};

use crate::Config;

/// What the deployment offers the Arbiter, and so what its form may say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offer {
    /// Team strategies (parallel, sequential, consensus) and `members`.
    pub teams: bool,
    /// The judgement fields of a summons: `directive`, `emergency`,
    /// `complexity`, `risk`, `consensus` (the last two with teams only).
    pub judgement: bool,
    /// A summons' stricter `policy`.
    pub policy: bool,
    /// `memory` on every reply.
    pub memory: bool,
    /// A summons' `needs`: the MCP servers its Orchestrator must have.
    pub needs: bool,
    /// The pools a summons may name: `None` when not known (any name, the
    /// router checks it); one pool or none leaves the field out.
    pub pools: Option<Vec<String>>,
    /// The runtimes a summons may name (`native`, `claude-code`, `codex`):
    /// `None` for all three; one or none leaves the field out.
    pub runtimes: Option<Vec<String>>,
}

impl Offer {
    /// The offer of a coordinator's settings: everything for a frontier
    /// model; for `profile = "small"` only what a small model fills well
    /// (no teams, no judgement fields, no policy or memory, no pool or
    /// runtime: the coordinator's own).
    pub(crate) fn of(config: &Config) -> Self {
        match config.model.profile {
            Profile::Full => Self {
                teams: config.team_cap > 1,
                judgement: true,
                policy: true,
                memory: true,
                needs: true,
                pools: None,
                runtimes: None,
            },
            Profile::Small => Self {
                teams: false,
                judgement: false,
                policy: false,
                memory: false,
                needs: false,
                pools: Some(vec![config.pool.clone()]),
                runtimes: Some(Vec::new()),
            },
        }
    }
}

impl Offer {
    /// The offer once the fleet was seen: the pools and runtimes that
    /// workers offer (`seen`, as `(pool, runtime)`; the coordinator's own
    /// pool and runtime always among them), in name order, so a model
    /// cannot name one nobody serves; with one of each the fields are left
    /// out. Nothing seen, or the `small` profile (which names neither):
    /// the offer as it was.
    pub(crate) fn with_fleet(mut self, config: &Config, seen: &[(String, String)]) -> Self {
        if seen.is_empty() || config.model.profile == Profile::Small {
            return self;
        }
        let mut pools: Vec<String> = seen.iter().map(|(pool, _)| pool.clone()).collect();
        pools.push(config.pool.clone());
        let mut runtimes: Vec<String> = seen.iter().map(|(_, rt)| rt.clone()).collect();
        runtimes.extend(config.orchestrator_runtime.clone());
        for list in [&mut pools, &mut runtimes] {
            list.sort();
            list.dedup();
        }
        self.pools = Some(pools);
        self.runtimes = Some(runtimes);
        self
    }
}

/// The model-facing schema of the Arbiter's reply under `offer`: a root
/// `anyOf`, one member per intent, a summons one per strategy offered.
pub(crate) fn arbiter_schema(offer: &Offer) -> Value {
    let flat = arbiter_llm::schema::for_model::<ArbiterOutput>();
    let field = |name: &str| -> Value { not_null(flat["properties"][name].clone()) };
    let one_of = |name: &str, value: &str| -> Value {
        let mut prop = field(name);
        prop["enum"] = json!([value]);
        prop
    };
    let mut members = Vec::new();
    let mut member = |intent: &str, strategy: Option<(&str, bool)>, fields: &[&str]| {
        let mut properties = Map::new();
        let mut required = vec![json!("intent"), json!("message")];
        properties.insert("intent".into(), one_of("intent", intent));
        properties.insert("message".into(), field("message"));
        if let Some((value, needed)) = strategy {
            properties.insert("strategy".into(), one_of("strategy", value));
            if needed {
                required.push(json!("strategy"));
            }
        }
        for name in fields {
            // A pool or runtime: any when not listed, an enum of several,
            // left out with one (or none).
            let listed = |list: &Option<Vec<String>>| match list {
                None => Some(field(name)),
                Some(values) if values.len() > 1 => {
                    let mut prop = field(name);
                    prop["enum"] = json!(values);
                    Some(prop)
                }
                Some(_) => None,
            };
            let prop = match *name {
                "pool" => listed(&offer.pools),
                "runtime" => listed(&offer.runtimes),
                other => Some(field(other)),
            };
            if let Some(prop) = prop {
                properties.insert((*name).to_owned(), prop);
            }
        }
        members.push(json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }));
    };
    let memory: &[&str] = if offer.memory { &["memory"] } else { &[] };
    let members_field: &[&str] = if offer.teams { &["members"] } else { &[] };
    member("address_human", None, memory);
    member(
        "address_orchestrator",
        None,
        &[members_field, memory].concat(),
    );
    let mut summons: Vec<&str> = vec!["pool", "runtime"];
    if offer.needs {
        summons.push("needs");
    }
    if offer.judgement {
        summons.extend(["directive", "emergency", "complexity"]);
    }
    if offer.policy {
        summons.push("policy");
    }
    summons.extend(memory);
    let mut solo = summons.clone();
    if offer.judgement && offer.teams {
        solo.extend(["risk", "consensus"]);
    }
    // Without teams a solo summons has no `strategy` at all: one a model
    // writes anyway (a small model's `parallel`) is dropped, not refused.
    let solo_strategy = offer.teams.then_some(("solo", false));
    member("summon_orchestrator", solo_strategy, &solo);
    if offer.teams {
        let with = |more: &[&'static str]| [summons.as_slice(), more].concat();
        member(
            "summon_orchestrator",
            Some(("parallel", true)),
            &with(&["count", "briefs"]),
        );
        member(
            "summon_orchestrator",
            Some(("sequential", true)),
            // Required by the router, not here: a grammar writes required
            // fields in name order, and `briefs` would come before `intent`.
            &with(&["briefs"]),
        );
        member(
            "summon_orchestrator",
            Some(("consensus", true)),
            &with(&["count"]),
        );
    }
    member(
        "release_orchestrators",
        None,
        &[members_field, memory].concat(),
    );
    member("musings", None, &[]);
    json!({ "anyOf": members })
}

/// `schema` without its `null` alternative: in a union member an optional
/// field is one left out, not one given as null (the strict dialect adds
/// the null back where it needs it).
fn not_null(mut schema: Value) -> Value {
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema["type"] = only;
        }
    }
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(branches)) = schema.get_mut("anyOf") {
        branches.retain(|b| b.get("type").is_none_or(|t| t != "null"));
        if let [only] = branches.as_slice() {
            let mut only = only.clone();
            if let (Some(description), Value::Object(map)) =
                (schema.get("description").cloned(), &mut only)
            {
                map.entry("description").or_insert(description);
            }
            return only;
        }
    }
    schema
}

#[cfg(test)]
mod tests;
