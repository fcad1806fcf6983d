//! The one check of a tool call's arguments, made from the tool's own input schema before anything is called. An
//! argument the tool does not take is refused, naming it and the ones the tool takes, rather than ignored: a
//! misspelt `chanel` would otherwise set the app-wide value, and `kind: "secret"` would store a plain variable. A
//! retired alias (`app_id`, `channel_id`) says what replaced it; a missing or mistyped argument is named. What the
//! schema's top level does not describe (an edit inside `edits`) is named by its path when the arguments are read.

use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;
use serde_json::Value;

use slipway_rest::in_process::Failure;

/// The arguments that retired after 2026-10-01, each with its replacement and what that names.
const RETIRED: [(&str, &str, &str); 2] = [
    (
        "app_id",
        "app_name",
        "the app's name, owner/name for an app shared with you, or its UUID",
    ),
    ("channel_id", "channel", "the channel's name, e.g. prod"),
];

/// Refuses `arguments` of `tool` unless they fit its input `schema`: only its properties, each of its JSON type
/// (and range), and every required one present.
pub fn check(tool: &str, schema: &JsonObject, arguments: &JsonObject) -> Result<(), Failure> {
    let empty = JsonObject::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, value) in arguments {
        let Some(property) = properties.get(name) else {
            return Err(Failure::bad_request(not_taken(tool, name, properties)));
        };
        check_value(name, property, value)?;
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !arguments.contains_key(name) {
            return Err(Failure::bad_request(format!(
                "argument `{name}` is required; {tool} takes {}",
                listed(properties)
            )));
        }
    }
    Ok(())
}

/// `arguments` read as `A`; a value that does not read is named by its path.
pub fn read<A: DeserializeOwned>(arguments: JsonObject) -> Result<A, Failure> {
    serde_path_to_error::deserialize(Value::Object(arguments)).map_err(|e| {
        let path = e.path().to_string();
        Failure::bad_request(if path == "." {
            format!("arguments: {}", e.inner())
        } else {
            format!("argument `{path}`: {}", e.inner())
        })
    })
}

/// Why `tool` does not take `name`: retired, or unknown.
fn not_taken(tool: &str, name: &str, properties: &JsonObject) -> String {
    match RETIRED
        .iter()
        .find(|(old, new, _)| *old == name && properties.contains_key(*new))
    {
        Some((old, new, what)) => {
            format!("argument `{old}` retired after 2026-10-01; use `{new}` ({what})")
        }
        None => format!(
            "unknown argument `{name}`; {tool} takes {}",
            listed(properties)
        ),
    }
}

/// The arguments a tool takes, for a message.
fn listed(properties: &JsonObject) -> String {
    if properties.is_empty() {
        return "no arguments".to_owned();
    }
    let names: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
    names.join(", ")
}

/// Refuses `value` of argument `name` unless it is of a type `property` allows, within its bounds.
fn check_value(name: &str, property: &Value, value: &Value) -> Result<(), Failure> {
    let types: Vec<&str> = match property.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        // A schema without a top-level type (a reference) is checked when the arguments are read.
        _ => return Ok(()),
    };
    let kind = kind_of(value);
    let fits = types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
    if !fits {
        let wanted: Vec<&str> = types
            .iter()
            .filter(|t| **t != "null")
            .map(|t| described(t))
            .collect();
        return Err(Failure::bad_request(format!(
            "argument `{name}` must be {}",
            wanted.join(" or ")
        )));
    }
    if let Some(number) = value.as_f64() {
        let bound = |key: &str| property.get(key).and_then(Value::as_f64);
        if let Some(minimum) = bound("minimum").filter(|m| number < *m) {
            return Err(Failure::bad_request(format!(
                "argument `{name}` must be at least {minimum}"
            )));
        }
        if let Some(maximum) = bound("maximum").filter(|m| number > *m) {
            return Err(Failure::bad_request(format!(
                "argument `{name}` must be at most {maximum}"
            )));
        }
    }
    Ok(())
}

/// The JSON schema type of `value` (`integer` for a whole number).
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A schema type as a message says it.
fn described(kind: &str) -> &str {
    match kind {
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "true or false",
        "string" => "a string",
        "array" => "an array",
        "object" => "an object",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> JsonObject {
        json!({
            "type": "object",
            "properties": {
                "app_name": {"type": "string"},
                "channel": {"type": ["string", "null"]},
                "limit": {"type": ["integer", "null"], "format": "int64"},
                "offset": {"type": ["integer", "null"], "minimum": 0},
                "secret": {"type": ["boolean", "null"]},
                "edits": {"type": ["object", "null"], "additionalProperties": {"type": "array"}},
            },
            "required": ["app_name"],
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    fn refusal(arguments: Value) -> String {
        let failure = check("tool", &schema(), arguments.as_object().unwrap()).unwrap_err();
        assert_eq!(
            (failure.status, failure.code.as_str()),
            (400, "bad_request")
        );
        failure.message
    }

    #[test]
    fn arguments_that_fit_pass() {
        let fits = json!({"app_name": "blog", "channel": null, "limit": 5, "offset": 0, "secret": false,
                          "edits": {"a": []}});
        check("tool", &schema(), fits.as_object().unwrap()).unwrap();
    }

    #[test]
    fn an_unknown_argument_is_named_with_the_ones_the_tool_takes() {
        let message = refusal(json!({"app_name": "blog", "chanel": "prod"}));
        assert!(
            message.starts_with("unknown argument `chanel`; tool takes "),
            "{message}"
        );
        for taken in ["`app_name`", "`channel`", "`limit`", "`secret`"] {
            assert!(message.contains(taken), "{message}");
        }
        let message = check(
            "list_apps",
            &JsonObject::new(),
            json!({"x": 1}).as_object().unwrap(),
        )
        .unwrap_err()
        .message;
        assert_eq!(
            message,
            "unknown argument `x`; list_apps takes no arguments"
        );
    }

    #[test]
    fn a_retired_alias_says_what_replaced_it() {
        let message = refusal(json!({"app_id": "0b0e", "channel": "prod"}));
        assert!(
            message.starts_with("argument `app_id` retired after 2026-10-01; use `app_name`"),
            "{message}"
        );
        let message = refusal(json!({"app_name": "blog", "channel_id": "c1"}));
        assert!(message.contains("use `channel`"), "{message}");
    }

    #[test]
    fn a_missing_or_mistyped_argument_is_named() {
        assert!(refusal(json!({})).starts_with("argument `app_name` is required"));
        assert_eq!(
            refusal(json!({"app_name": "blog", "limit": "5"})),
            "argument `limit` must be an integer"
        );
        assert_eq!(
            refusal(json!({"app_name": "blog", "limit": 1.5})),
            "argument `limit` must be an integer"
        );
        assert_eq!(
            refusal(json!({"app_name": 42})),
            "argument `app_name` must be a string"
        );
        assert_eq!(
            refusal(json!({"app_name": "blog", "secret": "yes"})),
            "argument `secret` must be true or false"
        );
        assert_eq!(
            refusal(json!({"app_name": "blog", "offset": -1})),
            "argument `offset` must be at least 0"
        );
    }

    #[test]
    fn what_the_schema_does_not_describe_is_named_by_its_path_when_read() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Edit {
            old_string: String,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Arguments {
            edits: std::collections::BTreeMap<String, Vec<Edit>>,
        }
        let arguments = json!({"edits": {"a.txt": [{"old_string": 5}]}});
        let failure = read::<Arguments>(arguments.as_object().cloned().unwrap()).unwrap_err();
        assert!(
            failure
                .message
                .starts_with("argument `edits.a.txt[0].old_string`: invalid type: integer `5`"),
            "{}",
            failure.message
        );
    }
}
