//! Properties of the two stream decoders (issue #39, fuzzing): a recorded
//! stream, changed at random (an event dropped, repeated or moved, its data
//! cut short or a value in it replaced), is folded by the assembler. It may
//! fail, with an error; it may not panic, and what it yields holds
//! together: at most one `Completed`, and last; every tool call's input a
//! JSON object; a `Completed` reply's tool calls the ones yielded.

use proptest::prelude::*;
use serde_json::Value;

use crate::http::Assemble;

/// One change to a stream of `(event, data)`.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    Drop(usize),
    Repeat(usize),
    Move(usize, usize),
    Cut(usize, usize),
    Replace(usize, usize, Value),
}

pub(crate) fn change() -> impl Strategy<Value = Change> {
    let value = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        Just(serde_json::json!({})),
        Just(serde_json::json!([1, "x"])),
    ];
    prop_oneof![
        any::<usize>().prop_map(Change::Drop),
        any::<usize>().prop_map(Change::Repeat),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Change::Move(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Change::Cut(a, b)),
        (any::<usize>(), any::<usize>(), value).prop_map(|(a, b, v)| Change::Replace(a, b, v)),
    ]
}

/// The leaves of `value`, as JSON pointers.
fn leaves(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                leaves(v, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

fn apply(stream: &mut Vec<(String, String)>, change: &Change) {
    if stream.is_empty() {
        return;
    }
    let n = stream.len();
    match change {
        Change::Drop(i) => {
            stream.remove(i % n);
        }
        Change::Repeat(i) => {
            let event = stream[i % n].clone();
            stream.insert(i % n, event);
        }
        Change::Move(a, b) => stream.swap(a % n, b % n),
        Change::Cut(i, at) => {
            let data = &mut stream[i % n].1;
            let cut = data
                .char_indices()
                .map(|(k, _)| k)
                .nth(at % data.chars().count().max(1))
                .unwrap_or(0);
            data.truncate(cut);
        }
        Change::Replace(i, leaf, new) => {
            let data = &mut stream[i % n].1;
            if let Ok(mut v) = serde_json::from_str::<Value>(data) {
                let mut all = Vec::new();
                leaves(&v, String::new(), &mut all);
                if !all.is_empty()
                    && let Some(slot) = v.pointer_mut(&all[leaf % all.len()])
                {
                    *slot = new.clone();
                }
                *data = v.to_string();
            }
        }
    }
}

/// Folds `stream` with `assembler` and checks what it yields: the check the
/// fuzz targets make too (`crate::fuzz::fold`). `Ok(true)`: it completed.
fn fold(assembler: impl Assemble, stream: &[(String, String)]) -> Result<bool, TestCaseError> {
    crate::fuzz::fold(assembler, stream, false).map_err(TestCaseError::fail)
}

/// The property itself: `recorded` with `changes` applied, folded by
/// `assembler`, holds together; unchanged, it completes.
pub(crate) fn holds(
    assembler: impl Assemble,
    recorded: Vec<(String, String)>,
    changes: &[Change],
) -> Result<(), TestCaseError> {
    let mut stream = recorded;
    for c in changes {
        apply(&mut stream, c);
    }
    let completed = fold(assembler, &stream)?;
    if changes.is_empty() {
        prop_assert!(completed, "the recorded stream did not complete");
    }
    Ok(())
}

/// The cases a run tries (`PROPTEST_CASES` for more).
pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000)
}
