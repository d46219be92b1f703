//! The hand-written JSON Schema validator Arbiter used before `jsonschema`,
//! kept here only as the baseline `arbiter-bench validate` measures against.

use serde_json::{Map, Value};

/// `Ok` when `value` matches `schema`; else the first mismatch, with its path.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "$")
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
