//! Checks a JSON value against a normalised schema: the keywords the
//! normaliser leaves (`type`, `enum`, `properties`, `required`,
//! `additionalProperties`, `items`, `minItems`, `anyOf`, `allOf`) are
//! enforced; anything else is left to the type's own deserialiser.

use serde_json::{Map, Value};

/// `Ok` when `value` matches `schema`; else the first mismatch, with its path.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "$")
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

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn check(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let Value::Object(s) = schema else {
        // `true` / `false` schemas.
        return match schema {
            Value::Bool(false) => Err(format!("{path}: no value is allowed here")),
            _ => Ok(()),
        };
    };
    if let Some(types) = s.get("type") {
        let names: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.iter().any(|t| is_type(value, t)) {
            return Err(format!(
                "{path}: expected {}, got {}",
                names.join(" or "),
                describe(value)
            ));
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!("{path}: {value} is not one of {}", list.join(", ")));
    }
    if let Some(constant) = s.get("const")
        && constant != value
    {
        return Err(format!("{path}: expected {constant}, got {value}"));
    }
    if let Value::Object(map) = value {
        check_object(map, s, path)?;
    }
    if let Value::Array(items) = value {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return Err(format!(
                "{path}: expected at least {min} items, got {}",
                items.len()
            ));
        }
        if let Some(sub) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(item, sub, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Some(Value::Array(branches)) = s.get("allOf") {
        for branch in branches {
            check(value, branch, path)?;
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            let errors: Vec<String> = branches
                .iter()
                .filter_map(|b| check(value, b, path).err())
                .collect();
            if errors.len() == branches.len() && !branches.is_empty() {
                return Err(format!(
                    "{path}: matches none of the allowed shapes ({})",
                    errors.join("; ")
                ));
            }
        }
    }
    Ok(())
}

fn check_object(
    map: &Map<String, Value>,
    s: &Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    for name in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(name) {
            return Err(format!("{path}: missing required property {name:?}"));
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    for (key, v) in map {
        let sub_path = format!("{path}.{key}");
        match (
            props.and_then(|p| p.get(key)),
            s.get("additionalProperties"),
        ) {
            (Some(sub), _) => check(v, sub, &sub_path)?,
            (None, Some(Value::Bool(false))) => {
                return Err(format!("{path}: unexpected property {key:?}"));
            }
            (None, Some(extra @ Value::Object(_))) => check(v, extra, &sub_path)?,
            (None, _) => {}
        }
    }
    Ok(())
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
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

    #[test]
    fn optional_nulls_are_stripped_required_ones_kept() {
        let mut v = json!({"intent": null, "note": null, "tags": null});
        strip_optional_nulls(&mut v, &schema());
        assert_eq!(v, json!({"intent": null}));
    }
}
