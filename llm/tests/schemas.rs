//! The schemas every model is given, per provider: golden snapshots, and a
//! walk that checks each against that provider's rules.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use arbiter_llm::schema::{self, Dialect};
use arbiter_protocol::{ArbiterOutput, ArbiterPacket, OrchestratorOutput};
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
        ("arbiter_packet", both::<ArbiterPacket>()),
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

/// Mutual recursion through an optional box and a list.
#[derive(Debug, Deserialize, JsonSchema)]
struct Question {
    text: String,
    answer: Option<Box<Answer>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Answer {
    text: String,
    follow_ups: Vec<Question>,
}

/// Holds a recursive type below a plain field.
#[derive(Debug, Deserialize, JsonSchema)]
struct Forum {
    title: String,
    first: Question,
}

#[test]
fn a_recursive_type_is_refused_with_a_clear_error() {
    let err = schema::try_for_model::<Tree>().unwrap_err();
    assert_eq!(
        err,
        schema::SchemaError::Recursive {
            type_name: "Tree".into(),
            path: "$.properties.children.items".into(),
            reference: "#".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "the schema of Tree is recursive ($.properties.children.items refers back to #); \
         model schemas cannot be recursive: give the type a fixed depth"
    );
    let recursive = |type_name: &str, path: &str, reference: &str| schema::SchemaError::Recursive {
        type_name: type_name.into(),
        path: path.into(),
        reference: reference.into(),
    };
    assert_eq!(
        schema::try_for_model::<Question>().unwrap_err(),
        recursive(
            "Question",
            "$.properties.answer.properties.follow_ups.items",
            "#"
        )
    );
    assert_eq!(
        schema::try_for_model::<Forum>().unwrap_err(),
        recursive(
            "Forum",
            "$.properties.first.properties.answer.properties.follow_ups.items\
             .properties.answer.anyOf[0].properties.follow_ups.items",
            "#/$defs/Question"
        )
    );
    // Parsing a reply as a recursive type says why instead of checking
    // against a schema with a dangling reference.
    let err = arbiter_llm::structured::parse::<Tree>(r#"{"name":"a","children":[]}"#).unwrap_err();
    assert!(err.contains("recursive"), "{err}");
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "the schema of Tree is recursive")]
fn for_model_asserts_on_a_recursive_type() {
    schema::for_model::<Tree>();
}

#[test]
fn the_walk_rejects_a_recursive_schema_normalise_cannot_inline() {
    let mut tree = json!({
        "type": "object",
        "properties": {"next": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}
    });
    schema::normalise(&mut tree, Dialect::Anthropic);
    let problems = schema::violations(&tree, Dialect::Anthropic);
    assert_eq!(
        problems,
        vec!["$.properties.next.properties.next: has $ref"]
    );
}

#[test]
fn shared_definitions_are_inlined_not_left_dangling() {
    // A schema written by hand (or by schemars without inlining) that refers
    // to one definition from two places.
    let mut shared = json!({
        "type": "object",
        "properties": {
            "owner": {"$ref": "#/$defs/Person", "description": "Who owns it."},
            "reviewers": {"type": "array", "items": {"$ref": "#/$defs/Person"}}
        },
        "required": ["owner", "reviewers"],
        "$defs": {
            "Person": {
                "type": "object",
                "description": "A person.",
                "properties": {"name": {"type": "string", "maxLength": 80}},
                "required": ["name"]
            }
        }
    });
    let mut strict = shared.clone();
    schema::normalise(&mut shared, Dialect::Anthropic);
    schema::normalise(&mut strict, Dialect::OpenAiStrict);
    let person = |description: &str| {
        json!({
            "type": "object",
            "description": description,
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": false
        })
    };
    assert_eq!(
        shared,
        json!({
            "type": "object",
            "properties": {
                "owner": person("Who owns it."),
                "reviewers": {"type": "array", "items": person("A person.")}
            },
            "required": ["owner", "reviewers"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        schema::violations(&shared, Dialect::Anthropic),
        Vec::<String>::new()
    );
    assert_eq!(
        schema::violations(&strict, Dialect::OpenAiStrict),
        Vec::<String>::new()
    );
    let reply = json!({"owner": {"name": "a"}, "reviewers": [{"name": "b"}, {"x": 1}]});
    let err = schema::validate(&reply, &shared).unwrap_err();
    assert!(err.starts_with("$.reviewers[1]"), "{err}");
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
