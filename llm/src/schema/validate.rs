//! Checks a JSON value against a normalised schema with the `jsonschema`
//! crate (every keyword of draft 2020-12; formats are not asserted), and
//! words the first mismatch for the model that must repair its reply: where
//! (`$.tags[0]`), and what was expected and what came.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::{Location, LocationSegment};
use jsonschema::{ValidationError, Validator};
use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};

/// `Ok` when `value` matches `schema`; else the first mismatch, with its path.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    Checker::new(schema)?.check(value)
}

/// Distinct schemas [`Checker::cached`] keeps compiled (a process has a few:
/// one per output type, and per caller-given schema).
pub const CACHED_SCHEMAS: usize = 32;

/// A schema compiled once, to check many values against.
#[derive(Debug)]
pub struct Checker {
    validator: Validator,
}

impl Checker {
    /// Compiles `schema`; an error says why it cannot be used.
    pub fn new(schema: &Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("the output schema cannot be used: {e}"))?;
        Ok(Self { validator })
    }

    /// [`Checker::new`], compiled once per process for each distinct
    /// schema: a structured call or a parsed reply reuses the compiled
    /// validator instead of compiling its schema again (most of the
    /// CPU a reply's check cost). Schemas are compared by value; at most
    /// [`CACHED_SCHEMAS`] are kept, further ones are compiled each time.
    pub fn cached(schema: &Value) -> Result<Arc<Self>, String> {
        static CACHE: Mutex<Vec<(Value, Arc<Checker>)>> = Mutex::new(Vec::new());
        let found = CACHE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(cached, _)| cached == schema)
            .map(|(_, checker)| checker.clone());
        if let Some(checker) = found {
            return Ok(checker);
        }
        let checker = Arc::new(Self::new(schema)?);
        let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() < CACHED_SCHEMAS && !cache.iter().any(|(cached, _)| cached == schema) {
            cache.push((schema.clone(), checker.clone()));
        }
        Ok(checker)
    }

    /// `Ok` when `value` matches; else the first mismatch, with its path.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => Err(explain(&error)),
        }
    }
}

/// Removes `null` from properties a schema does not require: OpenAI strict
/// mode makes the model send `null` for an optional field it would omit.
pub fn strip_optional_nulls(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            let required = required(schema);
            map.retain(|k, v| !v.is_null() || required.contains(&k.as_str()));
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, v) in map.iter_mut() {
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    strip_optional_nulls(v, sub);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|v| strip_optional_nulls(v, sub));
            }
        }
        _ => {}
    }
}

/// The names `schema` lists as `required`.
pub(super) fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// One mismatch in words: `$.path: what is wrong`.
fn explain(error: &ValidationError<'_>) -> String {
    let path = json_path(error.instance_path());
    let value = error.instance();
    let what = match error.kind() {
        ValidationErrorKind::Required { property } => match property.as_str() {
            Some(name) => format!("missing required property {name:?}"),
            None => format!("missing required property {property}"),
        },
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let names: Vec<String> = unexpected.iter().map(|k| format!("{k:?}")).collect();
            match names.as_slice() {
                [one] => format!("unexpected property {one}"),
                _ => format!("unexpected properties {}", names.join(", ")),
            }
        }
        ValidationErrorKind::Type { kind } => {
            let names: Vec<&str> = match kind {
                TypeKind::Single(t) => vec![t.as_str()],
                TypeKind::Multiple(set) => set.iter().map(|t| t.as_str()).collect(),
            };
            format!("expected {}, got {}", names.join(" or "), describe(value))
        }
        ValidationErrorKind::Enum { options } => {
            let list: Vec<String> = options
                .as_array()
                .map(|o| o.iter().map(Value::to_string).collect())
                .unwrap_or_else(|| vec![options.to_string()]);
            format!("{value} is not one of {}", list.join(", "))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("expected {expected_value}, got {value}")
        }
        ValidationErrorKind::MinItems { limit } => format!(
            "expected at least {limit} items, got {}",
            value.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::FalseSchema => "no value is allowed here".to_owned(),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // Each branch's first mismatch, so the model sees every shape it missed.
            let branches: Vec<String> = context
                .iter()
                .filter_map(|errors| errors.first())
                .map(explain)
                .collect();
            format!(
                "matches none of the allowed shapes ({})",
                branches.join("; ")
            )
        }
        // Anything else (bounds, patterns) the normaliser should have
        // dropped; the crate's own words, which name the keyword.
        _ => error.to_string(),
    };
    format!("{path}: {what}")
}

/// A JSON pointer as the path the model reads: `/tags/0/name` is `$.tags[0].name`.
fn json_path(location: &Location) -> String {
    let mut path = String::from("$");
    for segment in location.segments() {
        match segment {
            LocationSegment::Property(name) => {
                path.push('.');
                path.push_str(&name);
            }
            LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let shown = value.to_string();
    if shown.chars().count() > 60 {
        kind.to_owned()
    } else {
        format!("{kind} ({shown})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "intent": {"type": "string", "enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "note": {"type": ["string", "null"]},
                "n": {"type": "integer"},
                "shape": {"anyOf": [
                    {"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"], "additionalProperties": false},
                    {"type": "string"}
                ]}
            },
            "required": ["intent"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_schema_is_compiled_once_and_checks_as_a_fresh_one() {
        let s = schema();
        let first = Checker::cached(&s).unwrap();
        let again = Checker::cached(&s.clone()).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same schema compiled twice"
        );
        let bad = json!({"intent": "a", "tags": [1]});
        assert_eq!(first.check(&bad), Checker::new(&s).unwrap().check(&bad));
        let other = json!({"type": "string"});
        assert!(!Arc::ptr_eq(&first, &Checker::cached(&other).unwrap()));
        assert!(Checker::cached(&other).unwrap().check(&json!(1)).is_err());
    }

    #[test]
    fn accepts_and_rejects_with_paths() {
        let s = schema();
        assert_eq!(
            validate(
                &json!({"intent": "a", "tags": ["x"], "n": 3, "shape": {"r": 1.5}}),
                &s
            ),
            Ok(())
        );
        assert_eq!(
            validate(&json!({"intent": "a", "shape": "round"}), &s),
            Ok(())
        );
        let err = |v: Value| validate(&v, &s).unwrap_err();
        assert_eq!(err(json!({})), "$: missing required property \"intent\"");
        assert_eq!(
            err(json!({"intent": "c"})),
            "$.intent: \"c\" is not one of \"a\", \"b\""
        );
        assert_eq!(
            err(json!({"intent": "a", "x": 1})),
            "$: unexpected property \"x\""
        );
        assert_eq!(
            err(json!({"intent": "a", "tags": []})),
            "$.tags: expected at least 1 items, got 0"
        );
        assert_eq!(
            err(json!({"intent": "a", "tags": [1]})),
            "$.tags[0]: expected string, got a number (1)"
        );
        assert_eq!(
            err(json!({"intent": "a", "n": 1.5})),
            "$.n: expected integer, got a number (1.5)"
        );
        assert!(
            err(json!({"intent": "a", "shape": {"r": "x"}})).starts_with("$.shape: matches none")
        );
        assert_eq!(err(json!([])), "$: expected object, got an array ([])");
    }

    /// What the hand-written validator let through: it ignored `$ref`,
    /// `not`, `uniqueItems` and bounds, and took `oneOf` for `anyOf`.
    #[test]
    fn every_keyword_of_a_given_schema_is_enforced() {
        let s = json!({
            "$defs": {"id": {"type": "string", "minLength": 2}},
            "type": "object",
            "properties": {
                "id": {"$ref": "#/$defs/id"},
                "tags": {"type": "array", "uniqueItems": true},
                "n": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                "m": {"not": {"enum": [13]}}
            }
        });
        assert_eq!(
            validate(&json!({"id": "ab", "tags": [1, 2], "n": 1.5}), &s),
            Ok(())
        );
        let err = |v: Value| validate(&v, &s).unwrap_err();
        assert_eq!(
            err(json!({"id": 7})),
            "$.id: expected string, got a number (7)"
        );
        assert!(err(json!({"id": "a"})).starts_with("$.id: "), "too short");
        assert!(
            err(json!({"tags": [1, 1]})).starts_with("$.tags: "),
            "not unique"
        );
        assert!(
            err(json!({"n": 2})).starts_with("$.n: "),
            "both branches of oneOf"
        );
        assert!(err(json!({"m": 13})).starts_with("$.m: "), "not");
    }

    #[test]
    fn optional_nulls_are_stripped_required_ones_kept() {
        let mut v = json!({"intent": null, "note": null, "tags": null});
        strip_optional_nulls(&mut v, &schema());
        assert_eq!(v, json!({"intent": null}));
    }
}
