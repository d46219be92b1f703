//! The schemas every model is given, per provider: golden snapshots, and a
//! walk that checks each against that provider's rules.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use arbiter_llm::schema::{self, Dialect};
use arbiter_protocol::{ArbiterOutput, OrchestratorOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A type with what schemars makes awkward: optional fields, a defaulted
/// list, bounded integers, a nested struct, a tagged enum, formats.
#[derive(Debug, Deserialize, JsonSchema)]
struct Plan {
    /// What to do.
    title: String,
    /// Optional notes.
    notes: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    /// A count.
    count: u32,
    ratio: f64,
    owner: Owner,
    step: Step,
    when: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Owner {
    name: String,
    email: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Step {
    Spawn { brief: String },
    Wait { seconds: u64 },
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Tree {
    name: String,
    children: Vec<Tree>,
}

fn both<T: JsonSchema>() -> (Value, Value) {
    let base = schema::for_model::<T>();
    let mut strict = base.clone();
    schema::normalise(&mut strict, Dialect::OpenAiStrict);
    (base, strict)
}

#[test]
fn every_model_facing_schema_keeps_its_providers_rules() {
    for (name, (anthropic, openai)) in [
        ("arbiter_output", both::<ArbiterOutput>()),
        ("orchestrator_output", both::<OrchestratorOutput>()),
        ("plan", both::<Plan>()),
    ] {
        assert_eq!(
            schema::violations(&anthropic, Dialect::Anthropic),
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(
            schema::violations(&openai, Dialect::OpenAiStrict),
            Vec::<String>::new(),
            "{name}"
        );
        insta::assert_json_snapshot!(format!("{name}.anthropic"), anthropic);
        insta::assert_json_snapshot!(format!("{name}.openai_strict"), openai);
        // Normalising twice changes nothing.
        let mut again = openai.clone();
        schema::normalise(&mut again, Dialect::OpenAiStrict);
        assert_eq!(again, openai, "{name}");
    }
}

#[test]
fn recursion_is_caught_by_the_walk() {
    let tree = schema::for_model::<Tree>();
    let problems = schema::violations(&tree, Dialect::Anthropic);
    assert!(
        problems.iter().any(|p| p.contains("has $ref")),
        "{problems:?}"
    );
}

#[test]
fn the_walk_reports_each_broken_rule() {
    let bad = json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1},
            "f": {"type": "string", "format": "uri"},
            "o": {"type": "object", "properties": {}},
            "x": {"oneOf": [{"const": 1}]},
            "l": {"type": "array", "minItems": 3}
        },
        "additionalProperties": false,
        "required": ["n"]
    });
    assert_eq!(
        schema::violations(&bad, Dialect::OpenAiStrict),
        vec![
            "$: property f is not required",
            "$: property l is not required",
            "$: property o is not required",
            "$: property x is not required",
            "$.properties.f: format uri",
            "$.properties.l: minItems 3",
            "$.properties.n: has minimum",
            "$.properties.o: object without additionalProperties:false",
            "$.properties.x: has oneOf",
            "$.properties.x.oneOf[0]: has const",
        ]
    );
    assert!(
        schema::violations(&json!({"type": "string"}), Dialect::OpenAiStrict)[0].contains("root")
    );
}

#[test]
fn a_strict_reply_with_nulls_for_optional_fields_parses_as_the_type() {
    let (_, strict) = both::<Plan>();
    let reply = json!({
        "title": "t", "notes": null, "tags": null, "count": 2, "ratio": 0.5,
        "owner": {"name": "n", "email": null},
        "step": {"kind": "wait", "seconds": 3},
        "when": "2026-11-21T12:00:00Z"
    });
    schema::validate(&reply, &strict).unwrap();
    let plan: Plan = arbiter_llm::structured::parse(&reply.to_string()).unwrap();
    assert!(plan.notes.is_none() && plan.tags.is_empty() && plan.owner.email.is_none());
    let wrong = json!({"title": "t", "count": 1, "ratio": 1, "owner": {"name": "n"},
                       "step": {"kind": "run"}, "when": "x"});
    let err = arbiter_llm::structured::parse::<Plan>(&wrong.to_string()).unwrap_err();
    assert!(err.starts_with("$.step: matches none"), "{err}");
}
