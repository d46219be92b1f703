//! Round trips of the wire's messages, as properties (issue #39, fuzzing):
//! every example of `docs/protocol.md`, mutated at random (a string, a
//! number or a value replaced, a key dropped, an unknown key added), is
//! decoded with the type its section documents. Whatever decodes must
//! encode, decode again to an equal value, and encode to the same JSON:
//! a reader and a writer of any version see the same message. Nothing may
//! panic. 2,000 cases a run, from a new random seed each time (proptest's
//! default); a failure prints the smallest input that shows it. The first
//! run found one: a percentage out of `f32`'s range decoded as an
//! infinity, which encodes as `null` (now refused when decoded,
//! `protocol::finite_f32`).

use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schemas::{examples, repo, typed};

/// The examples, typed, read once.
fn seeds() -> &'static [(&'static str, Value)] {
    static SEEDS: std::sync::OnceLock<Vec<(&'static str, Value)>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        examples(&repo().join("docs/protocol.md"))
            .iter()
            .filter_map(|e| typed(e).ok())
            .collect()
    })
}

/// One change to a JSON value: at the node `at` (an index into its nodes,
/// taken modulo their number), what to put there.
#[derive(Debug, Clone)]
enum Change {
    Text(usize, String),
    Number(usize, i64),
    Big(usize, u64),
    Float(usize, f64),
    Null(usize),
    Bool(usize, bool),
    Drop(usize),
    Add(usize, String, Value),
}

fn change() -> impl Strategy<Value = Change> {
    let text = prop_oneof![
        ".*",
        "[a-z_]{1,12}",
        Just(String::new()),
        Just("\u{1b}[2J\u{0}\u{202e}".to_owned())
    ];
    prop_oneof![
        (any::<usize>(), text.clone()).prop_map(|(at, s)| Change::Text(at, s)),
        (any::<usize>(), any::<i64>()).prop_map(|(at, n)| Change::Number(at, n)),
        (any::<usize>(), any::<u64>()).prop_map(|(at, n)| Change::Big(at, n)),
        (any::<usize>(), -1e300f64..1e300).prop_map(|(at, f)| Change::Float(at, f)),
        any::<usize>().prop_map(Change::Null),
        (any::<usize>(), any::<bool>()).prop_map(|(at, b)| Change::Bool(at, b)),
        any::<usize>().prop_map(Change::Drop),
        (any::<usize>(), "[a-z_]{1,10}", text).prop_map(|(at, k, s)| Change::Add(
            at,
            k,
            Value::String(s)
        )),
    ]
}

/// The paths of every node of `value` (object keys and array indexes).
fn nodes(value: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(path.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                path.push(k.clone());
                nodes(v, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                nodes(v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at_path<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, key| match v {
        Value::Object(map) => map.get_mut(key),
        Value::Array(items) => items.get_mut(key.parse::<usize>().ok()?),
        _ => None,
    })
}

fn apply(value: &mut Value, change: &Change) {
    let mut all = Vec::new();
    nodes(value, &mut Vec::new(), &mut all);
    let pick = |at: usize| all[at % all.len()].clone();
    let set = |value: &mut Value, at: usize, new: Value| {
        if let Some(node) = at_path(value, &pick(at)) {
            *node = new;
        }
    };
    match change {
        Change::Text(at, s) => set(value, *at, Value::String(s.clone())),
        Change::Number(at, n) => set(value, *at, Value::from(*n)),
        Change::Big(at, n) => set(value, *at, Value::from(*n)),
        Change::Float(at, f) => set(value, *at, Value::from(*f)),
        Change::Null(at) => set(value, *at, Value::Null),
        Change::Bool(at, b) => set(value, *at, Value::Bool(*b)),
        Change::Drop(at) => {
            let path = pick(*at);
            if let Some((last, parent)) = path.split_last()
                && let Some(Value::Object(map)) = at_path(value, parent)
            {
                map.remove(last);
            }
        }
        Change::Add(at, key, new) => {
            if let Some(Value::Object(map)) = at_path(value, &pick(*at)) {
                map.insert(key.clone(), new.clone());
            }
        }
    }
}

/// Decodes `value` as `T`; what decodes must round-trip.
fn round<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    value: &Value,
) -> Result<bool, TestCaseError> {
    let Ok(decoded) = serde_json::from_value::<T>(value.clone()) else {
        return Ok(false);
    };
    let encoded = serde_json::to_value(&decoded).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let again: T = serde_json::from_value(encoded.clone()).map_err(|e| {
        TestCaseError::fail(format!("what it encoded does not decode: {e}\n{encoded}"))
    })?;
    prop_assert_eq!(&again, &decoded, "decode ∘ encode changed the value");
    let twice = serde_json::to_value(&again).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(twice, encoded, "encoding is not stable");
    Ok(true)
}

fn round_as(ty: &str, value: &Value) -> Result<bool, TestCaseError> {
    use arbiter_protocol::*;
    match ty {
        "Evidence" => round::<Evidence>(value),
        "Handoff" => round::<Handoff>(value),
        "Spend" => round::<Spend>(value),
        "LogEntry" => round::<LogEntry>(value),
        "Summon" => round::<Summon>(value),
        "OrchestratorInput" => round::<OrchestratorInput>(value),
        "OrchestratorMessage" => round::<OrchestratorMessage>(value),
        "OrchestratorStatus" => round::<OrchestratorStatus>(value),
        "Control" => round::<Control>(value),
        "HumanMessage" => round::<HumanMessage>(value),
        "ArbiterDelta" => round::<ArbiterDelta>(value),
        "SessionStatus" => round::<SessionStatus>(value),
        "ArbiterOutput" => round::<ArbiterOutput>(value),
        "WorkerPresence" => round::<arbiter_worker::WorkerPresence>(value),
        other => Err(TestCaseError::reject(format!(
            "{other}: not a protocol type"
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_protocol_message_that_decodes_encodes_back_to_itself(
        pick in any::<usize>(),
        changes in proptest::collection::vec(change(), 0..4),
    ) {
        let seeds = seeds();
        prop_assume!(!seeds.is_empty());
        let (ty, seed) = &seeds[pick % seeds.len()];
        let mut value = seed.clone();
        for c in &changes {
            apply(&mut value, c);
        }
        round_as(ty, &value)?;
    }
}

/// The examples themselves, unchanged, all decode and round-trip (so the
/// property above starts from messages that are whole).
#[test]
fn every_example_round_trips_unchanged() {
    let seeds = seeds();
    assert!(seeds.len() >= 10, "{} examples", seeds.len());
    for (ty, value) in seeds {
        assert!(
            round_as(ty, value).unwrap_or_else(|e| panic!("{ty}: {e}\n{value}")),
            "{ty} does not decode: {value}"
        );
    }
}

/// The first case the property found, kept: a status whose percentage is
/// out of `f32`'s range is refused when decoded, saying why, instead of
/// decoding as an infinity that encodes as `null`.
#[test]
fn a_percentage_out_of_range_is_refused_not_turned_into_null() {
    let (_, status) = seeds()
        .iter()
        .find(|(ty, _)| *ty == "OrchestratorStatus")
        .expect("an OrchestratorStatus example")
        .clone();
    let mut status = status;
    status["context_pct"] = Value::from(-5.814826913214484e298);
    let err = serde_json::from_value::<arbiter_protocol::OrchestratorStatus>(status)
        .expect_err("refused");
    assert!(
        err.to_string().contains("out of range for a percentage"),
        "{err}"
    );
}
