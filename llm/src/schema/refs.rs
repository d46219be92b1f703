//! Local `$ref`s resolved in place: every reference to the root's `$defs` /
//! `definitions` (or to `#`) is replaced by a copy of its target, so that the
//! definitions can be dropped. A reference back into a schema that is being
//! expanded (a recursive type) cannot be inlined: it is left as it is and
//! reported.

use serde_json::{Map, Value};

/// A `$ref` that points back at a schema it is inside of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cycle {
    /// Where the reference is, as `$.properties.children.items`.
    pub path: String,
    /// The reference, as written (`#`, `#/$defs/Tree`).
    pub reference: String,
}

/// Inlines every resolvable local `$ref` under `root` and drops the root's
/// definitions; returns the recursive references, which stay (dangling, if
/// they pointed into the definitions). References that cannot be resolved
/// (external, or to a definition that is not there) also stay. Idempotent.
pub(crate) fn inline(root: &mut Value) -> Vec<Cycle> {
    let Value::Object(map) = root else {
        return Vec::new();
    };
    let mut defs = Map::new();
    for key in ["definitions", "$defs"] {
        if let Some(Value::Object(found)) = map.remove(key) {
            for (name, schema) in found {
                defs.insert(format!("#/{key}/{}", escape(&name)), schema);
            }
        }
    }
    if !contains_ref(root) {
        return Vec::new();
    }
    defs.insert("#".to_owned(), root.clone());
    let mut cycles = Vec::new();
    let mut stack = vec!["#".to_owned()];
    walk(root, "$", &defs, &mut stack, &mut cycles);
    cycles
}

fn walk(
    value: &mut Value,
    path: &str,
    defs: &Map<String, Value>,
    stack: &mut Vec<String>,
    cycles: &mut Vec<Cycle>,
) {
    match value {
        Value::Object(map) => {
            let target = match map.get("$ref") {
                Some(Value::String(reference)) => defs
                    .get(reference.as_str())
                    .map(|target| (reference.clone(), target)),
                _ => None,
            };
            let Some((reference, target)) = target else {
                walk_children(map, path, defs, stack, cycles);
                return;
            };
            if stack.contains(&reference) {
                cycles.push(Cycle {
                    path: path.to_owned(),
                    reference,
                });
                return;
            }
            let mut expanded = target.clone();
            stack.push(reference);
            walk(&mut expanded, path, defs, stack, cycles);
            stack.pop();
            map.remove("$ref");
            walk_children(map, path, defs, stack, cycles);
            // Keywords beside the `$ref` (a description) are the more specific.
            if let Value::Object(expanded) = expanded {
                for (key, schema) in expanded {
                    map.entry(key).or_insert(schema);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, &format!("{path}[{i}]"), defs, stack, cycles);
            }
        }
        _ => {}
    }
}

fn walk_children(
    map: &mut Map<String, Value>,
    path: &str,
    defs: &Map<String, Value>,
    stack: &mut Vec<String>,
    cycles: &mut Vec<Cycle>,
) {
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            // Data, not schemas.
            "enum" | "const" | "default" | "examples" | "required" => {}
            "properties" => {
                if let Value::Object(props) = child {
                    for (name, prop) in props.iter_mut() {
                        let at = format!("{path}.properties.{name}");
                        walk(prop, &at, defs, stack, cycles);
                    }
                }
            }
            _ => walk(child, &format!("{path}.{key}"), defs, stack, cycles),
        }
    }
}

fn contains_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(contains_ref),
        Value::Array(items) => items.iter().any(contains_ref),
        _ => false,
    }
}

/// A definition name as a JSON Pointer segment.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shared_definitions_are_inlined_and_cycles_reported() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/Leaf", "description": "first"},
                "b": {"type": "array", "items": {"$ref": "#/definitions/Leaf"}},
                "c": {"$ref": "#/$defs/Node"}
            },
            "$defs": {
                "Leaf": {"type": "object", "properties": {"x": {"type": "integer"}},
                         "description": "a leaf"},
                "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}
            },
            "definitions": {"Leaf": {"type": "string"}}
        });
        let cycles = inline(&mut schema);
        assert_eq!(
            cycles,
            vec![Cycle {
                path: "$.properties.c.properties.next".into(),
                reference: "#/$defs/Node".into()
            }]
        );
        assert_eq!(
            schema["properties"]["a"],
            json!({"type": "object", "properties": {"x": {"type": "integer"}},
                   "description": "first"})
        );
        assert_eq!(
            schema["properties"]["b"]["items"],
            json!({"type": "string"})
        );
        assert_eq!(
            schema["properties"]["c"]["properties"]["next"],
            json!({"$ref": "#/$defs/Node"})
        );
        assert!(schema.get("$defs").is_none() && schema.get("definitions").is_none());
        // Again: nothing changes.
        let before = schema.clone();
        inline(&mut schema);
        assert_eq!(schema, before);
    }

    #[test]
    fn a_reference_to_the_root_is_a_cycle_and_unknown_ones_stay() {
        let mut tree = json!({"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#"}},
            "other": {"$ref": "https://example.com/x.json"}
        }});
        let cycles = inline(&mut tree);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].path, "$.properties.children.items");
        assert_eq!(
            tree["properties"]["other"],
            json!({"$ref": "https://example.com/x.json"})
        );
    }
}
