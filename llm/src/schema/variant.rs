//! Schemas whose root is a union of objects, each member told apart by
//! properties of one allowed value (`intent: {enum: ["musings"]}`): the
//! flat form the strict APIs take, and a reply taken back to its member.

use serde_json::{Map, Value};

/// A root `anyOf` (or `oneOf`) whose every member is an object becomes one
/// object: every member's properties (the first member's schema for a
/// name, with the `enum`s of every member that has it joined), `required`
/// holding what every member requires. Anything else is left as it is.
/// The strict APIs refuse a union at the root; what a reply in this form
/// says is taken back to one member by [`fit_to_variant`].
pub fn flatten_root_union(schema: &mut Value) {
    let Value::Object(root) = schema else {
        return;
    };
    let key = if root.contains_key("anyOf") {
        "anyOf"
    } else {
        "oneOf"
    };
    let Some(Value::Array(members)) = root.get(key) else {
        return;
    };
    if members.is_empty() || !members.iter().all(|m| m.get("properties").is_some()) {
        return;
    }
    let mut properties = Map::new();
    let mut required: Option<Vec<Value>> = None;
    for member in members {
        for (name, prop) in member["properties"].as_object().into_iter().flatten() {
            match properties.get_mut(name) {
                None => {
                    properties.insert(name.clone(), prop.clone());
                }
                Some(kept) => join_enums(kept, prop),
            }
        }
        let own: Vec<Value> = member
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        required = Some(match required {
            None => own,
            Some(all) => all.into_iter().filter(|r| own.contains(r)).collect(),
        });
    }
    root.remove(key);
    root.insert("type".into(), Value::String("object".into()));
    root.insert("properties".into(), Value::Object(properties));
    root.insert(
        "required".into(),
        Value::Array(required.unwrap_or_default()),
    );
    root.insert("additionalProperties".into(), Value::Bool(false));
}

fn join_enums(kept: &mut Value, other: &Value) {
    let Some(more) = other.get("enum").and_then(Value::as_array) else {
        return;
    };
    if let Some(Value::Array(values)) = kept.get_mut("enum") {
        for value in more {
            if !values.contains(value) {
                values.push(value.clone());
            }
        }
    }
}

/// Takes `value` (a reply) to the member of `schema`'s root union that it
/// chose: the first member whose one-value properties it matches (a
/// required one present and equal; an optional one absent or equal; a
/// value no member has, such as an unknown strategy, matches none, and is
/// refused by validation with the values there are). Properties that
/// member does not have are removed, as are nulls in properties it does
/// not require (the flat form has every property, OpenAI's sends nulls).
/// Returns the names removed that had a value: the caller logs them. A
/// schema without a root union, or a value no member matches, is left as
/// it is (validation then says what is wrong).
pub fn fit_to_variant(value: &mut Value, schema: &Value) -> Vec<String> {
    let Some(members) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let Value::Object(object) = value else {
        return Vec::new();
    };
    let Some(member) = members.iter().find(|m| matches(m, object)) else {
        return Vec::new();
    };
    let Some(properties) = member.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required = super::validate::required(member);
    let mut dropped = Vec::new();
    object.retain(|name, v| {
        if !properties.contains_key(name) {
            if !v.is_null() {
                dropped.push(name.clone());
            }
            return false;
        }
        let keep = !v.is_null() || required.contains(&name.as_str());
        if !keep && !v.is_null() {
            dropped.push(name.clone());
        }
        keep
    });
    dropped
}

/// Whether `object` matches `member`'s one-value properties.
fn matches(member: &Value, object: &Map<String, Value>) -> bool {
    let Some(properties) = member.get("properties").and_then(Value::as_object) else {
        return false;
    };
    let required = super::validate::required(member);
    properties.iter().all(|(name, prop)| {
        let Some([only]) = prop
            .get("enum")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        else {
            return true;
        };
        let is_required = required.contains(&name.as_str());
        match object.get(name).filter(|v| !v.is_null()) {
            Some(given) => given == only,
            None => !is_required,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn union() -> Value {
        json!({"anyOf": [
            {"type": "object", "properties": {
                "intent": {"type": "string", "enum": ["say"]},
                "message": {"type": "string"}},
             "required": ["intent", "message"], "additionalProperties": false},
            {"type": "object", "properties": {
                "intent": {"type": "string", "enum": ["go"]},
                "message": {"type": "string"},
                "strategy": {"type": "string", "enum": ["solo"]},
                "pool": {"type": "string", "enum": ["a", "b"]}},
             "required": ["intent", "message"], "additionalProperties": false},
            {"type": "object", "properties": {
                "intent": {"type": "string", "enum": ["go"]},
                "message": {"type": "string"},
                "strategy": {"type": "string", "enum": ["team"]},
                "count": {"type": "integer"}},
             "required": ["intent", "message", "strategy"], "additionalProperties": false}
        ]})
    }

    #[test]
    fn the_flat_form_has_every_members_properties_and_their_values() {
        let mut flat = union();
        flatten_root_union(&mut flat);
        assert_eq!(flat["required"], json!(["intent", "message"]));
        assert_eq!(flat["properties"]["intent"]["enum"], json!(["say", "go"]));
        assert_eq!(
            flat["properties"]["strategy"]["enum"],
            json!(["solo", "team"])
        );
        assert!(flat["properties"]["count"].is_object());
        assert!(flat.get("anyOf").is_none());
        // Not a union of objects: untouched.
        let mut plain = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        let before = plain.clone();
        flatten_root_union(&mut plain);
        assert_eq!(plain, before);
    }

    #[test]
    fn a_reply_is_fitted_to_the_member_it_chose() {
        // (what the reply was, what it becomes, the names dropped with a value)
        let cases = [
            (
                json!({"intent": "say", "message": "hi", "pool": null, "count": 3}),
                json!({"intent": "say", "message": "hi"}),
                vec!["count"],
            ),
            (
                json!({"intent": "go", "message": "m", "count": 3, "pool": "a"}),
                json!({"intent": "go", "message": "m", "pool": "a"}),
                vec!["count"],
            ),
            (
                json!({"intent": "go", "message": "m", "strategy": "team", "count": 2, "pool": "a"}),
                json!({"intent": "go", "message": "m", "strategy": "team", "count": 2}),
                vec!["pool"],
            ),
            // A strategy no member has: left for validation to refuse.
            (
                json!({"intent": "go", "message": "m", "strategy": "chain"}),
                json!({"intent": "go", "message": "m", "strategy": "chain"}),
                vec![],
            ),
            // No member: left for validation to explain.
            (
                json!({"intent": "yell", "message": "m", "count": 1}),
                json!({"intent": "yell", "message": "m", "count": 1}),
                vec![],
            ),
        ];
        for (mut reply, after, dropped) in cases {
            let names = fit_to_variant(&mut reply, &union());
            assert_eq!(reply, after);
            assert_eq!(names, dropped);
        }
    }
}
