//! What each request field obeys, stated in the OpenAPI document: patterns, lengths, choices, ranges and the
//! fields a route needs, so that a client generated from the document checks a request before it sends it. The
//! values come from the constants the routes parse with (`slipway_crds::names`, spelled as patterns in
//! [`slipway_crds::patterns`], and the routes' own limits); the document is amended once it is assembled. A rule
//! that names a schema, field or parameter the document lacks fails the test below, so the table cannot drift
//! from the types.
//!
//! What the document cannot say stays in the descriptions and is checked by the routes alone: a hostname that
//! must fit 63 characters with its owner's name, an edit that must match a file, a domain under the platform's own.

use slipway_crds::forward::MAX_ALLOW_CIDRS;
use slipway_crds::names::{BINDING_PREFIX, BRANCH_MAX_LEN, BRANCH_REF_PREFIX, NAME_MAX_LEN};
use slipway_crds::patterns;
use utoipa::openapi::schema::{AllOf, AnyOf, ArrayItems, Object, Schema, SchemaType, Type};
use utoipa::openapi::{OpenApi, RefOr, Required};

use slipway_auth::scopes;

/// What a field obeys beyond its type.
#[derive(Debug, Clone)]
enum Rule {
    /// A string matching `pattern` (when given) of `min` to `max` characters.
    Text {
        pattern: Option<String>,
        min: Option<usize>,
        max: Option<usize>,
    },
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A whole number in `min..=max`.
    Whole { min: i64, max: i64 },
    /// A list of at most `max` entries, each obeying the rule.
    Each { max: usize, item: Box<Rule> },
    /// A map whose keys obey the rule.
    Keys(Box<Rule>),
}

fn pattern(pattern: String, max: usize) -> Rule {
    Rule::Text {
        pattern: Some(pattern),
        min: Some(1),
        max: Some(max),
    }
}

/// Text that holds more than whitespace, at most `max` characters.
fn words(max: usize) -> Rule {
    Rule::Text {
        pattern: Some("\\S".to_owned()),
        min: Some(1),
        max: Some(max),
    }
}

/// A label: more than whitespace, no control characters, at most `max` characters.
fn label(max: usize) -> Rule {
    Rule::Text {
        pattern: Some("^(?=.*\\S)[^\\u0000-\\u001F\\u007F-\\u009F]*$".to_owned()),
        min: Some(1),
        max: Some(max),
    }
}

/// A repository-relative path ([`slipway_repository::paths::RepoPath`]).
fn repo_path() -> Rule {
    pattern(
        slipway_repository::paths::PATTERN.to_owned(),
        slipway_repository::paths::PATH_MAX_LEN,
    )
}

fn at_most(max: usize) -> Rule {
    Rule::Text {
        pattern: None,
        min: None,
        max: Some(max),
    }
}

/// The rules of request bodies: (schema, field, rule).
fn body_rules() -> Vec<(&'static str, &'static str, Rule)> {
    let branch_ref = BRANCH_REF_PREFIX.len() + BRANCH_MAX_LEN;
    vec![
        (
            "CreateApp",
            "name",
            pattern(patterns::app_name(), NAME_MAX_LEN),
        ),
        (
            "CreateApp",
            "template",
            Rule::Choice(&["static", "app", "docker"]),
        ),
        (
            "CreateChannel",
            "name",
            pattern(patterns::new_channel_name(), NAME_MAX_LEN),
        ),
        (
            "CreateChannel",
            "git_ref_binding",
            pattern(patterns::binding(), BINDING_PREFIX.len() + BRANCH_MAX_LEN),
        ),
        (
            "DeployRequest",
            "sha",
            pattern(patterns::sha_or_branch(), BRANCH_MAX_LEN),
        ),
        (
            "DeployRequest",
            "ref",
            pattern(patterns::branch_ref(), branch_ref),
        ),
        (
            "ChangesetRequest",
            "ref",
            pattern(patterns::branch_ref(), branch_ref),
        ),
        ("ChangesetRequest", "message", words(usize::MAX)),
        (
            "ChangesetRequest",
            "changes",
            Rule::Keys(Box::new(repo_path())),
        ),
        (
            "ChangesetRequest",
            "edits",
            Rule::Keys(Box::new(repo_path())),
        ),
        (
            "ChangesetRequest",
            "patches",
            Rule::Keys(Box::new(repo_path())),
        ),
        (
            "SetEnv",
            "key",
            pattern(patterns::env_key(), slipway_crds::names::ENV_KEY_MAX_LEN),
        ),
        (
            "SetEnv",
            "value",
            at_most(slipway_store::env::MAX_VALUE_BYTES),
        ),
        ("SetEnv", "kind", Rule::Choice(&["env", "secret"])),
        (
            "AttachDomain",
            "domain",
            pattern(patterns::domain(), slipway_crds::names::DOMAIN_MAX_LEN + 1),
        ),
        (
            "Expose",
            "allow_cidrs",
            Rule::Each {
                max: MAX_ALLOW_CIDRS,
                item: Box::new(pattern(
                    patterns::allow_cidr(),
                    slipway_crds::names::CIDR_MAX_LEN,
                )),
            },
        ),
        (
            "RuntimeLogRequest",
            "command",
            at_most(slipway_core::log_sandbox::COMMAND_LIMIT),
        ),
        (
            "RuntimeLogRequest",
            "container_index",
            Rule::Whole {
                min: 0,
                max: i64::from(i32::MAX),
            },
        ),
        ("PutMember", "role", Rule::Choice(&["admin", "member"])),
        (
            "NewFeedback",
            "message",
            words(super::feedback::MAX_MESSAGE),
        ),
        ("NewThread", "title", words(super::notes::MAX_TITLE)),
        ("NewNote", "body", words(super::notes::MAX_NOTE)),
        ("Vote", "value", Rule::Whole { min: -1, max: 1 }),
        ("CreateToken", "label", at_most(super::tokens::MAX_LABEL)),
        (
            "CreateToken",
            "expires_in",
            Rule::Whole {
                min: 1,
                max: super::tokens::MAX_TOKEN_SECONDS,
            },
        ),
        (
            "CreateCredential",
            "scopes",
            Rule::Each {
                max: scopes::DEFAULT.len(),
                item: Box::new(Rule::Choice(&scopes::DEFAULT)),
            },
        ),
        (
            "CreateCredential",
            "expires_in",
            Rule::Whole {
                min: 1,
                max: super::tokens::MAX_CREDENTIAL_SECONDS,
            },
        ),
        ("AddKey", "label", label(super::ssh_keys::LABEL_MAX_CHARS)),
        (
            "RegistrationRequest",
            "username",
            pattern(super::registrations::USERNAME_PATTERN.to_owned(), 40),
        ),
        (
            "RegistrationRequest",
            "label",
            label(super::registrations::LABEL_MAX_CHARS),
        ),
    ]
}

/// Bodies that need one of these fields at least: (schema, fields).
const ONE_OF_FIELDS: &[(&str, &[&str])] = &[
    ("DeployRequest", &["sha", "ref"]),
    ("ChangesetRequest", &["changes", "edits", "patches"]),
];

/// The rules of query parameters: (path, parameter, rule, whether the route needs it).
fn query_rules() -> Vec<(&'static str, &'static str, Rule, bool)> {
    let branch_ref = BRANCH_REF_PREFIX.len() + BRANCH_MAX_LEN;
    let limit = Rule::Whole {
        min: 1,
        max: super::paging::MAX_LIMIT,
    };
    let mut rules = vec![
        (
            "/apps/{app_id}/channels/{channel_id}/logs",
            "max_bytes",
            Rule::Whole {
                min: 1,
                max: i64::try_from(super::deploys::MAX_WINDOW).unwrap_or(i64::MAX),
            },
            false,
        ),
        (
            "/apps/{app_id}/channels/{channel_id}/logs",
            "deploy",
            Rule::Text {
                pattern: None,
                min: Some(1),
                max: None,
            },
            true,
        ),
        ("/apps/{app_id}/blob", "path", repo_path(), true),
        ("/apps/{app_id}/blob", "ref", at_most(branch_ref), false),
        ("/apps/{app_id}/tree", "ref", at_most(branch_ref), false),
    ];
    // A cursor is the position of the last entry handed out: a positive whole number.
    let cursor = Rule::Text {
        pattern: Some("^[1-9][0-9]{0,17}$".to_owned()),
        min: Some(1),
        max: Some(18),
    };
    for paged in [
        "/feedback",
        "/apps/{app_id}/feedback",
        "/apps/{app_id}/activity",
        "/apps/{app_id}/threads",
        "/apps/{app_id}/threads/{number}/notes",
    ] {
        rules.push((paged, "limit", limit.clone(), false));
        rules.push((paged, "cursor", cursor.clone(), false));
    }
    rules
}

/// States the rules in `doc`.
pub fn document(doc: &mut OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (schema, field, rule) in body_rules() {
        let Some(object) = component(&mut components.schemas, schema) else {
            continue;
        };
        if let Some(property) = object.properties.get_mut(field) {
            apply(&rule, property);
        }
    }
    for (schema, fields) in ONE_OF_FIELDS {
        let Some(RefOr::T(found)) = components.schemas.get_mut(*schema) else {
            continue;
        };
        // A field that is there must hold a value: the route reads `null` as absent.
        if let Schema::Object(object) = found {
            for field in *fields {
                match object.properties.get_mut(*field) {
                    Some(RefOr::T(Schema::Object(property))) => not_null(&mut property.schema_type),
                    Some(RefOr::T(Schema::Array(property))) => not_null(&mut property.schema_type),
                    _ => {}
                }
            }
        }
        let mut any = AnyOf::new();
        for field in *fields {
            let mut needs = Object::new();
            needs.schema_type = SchemaType::AnyValue;
            needs.required = vec![(*field).to_owned()];
            any.items.push(RefOr::T(Schema::Object(needs)));
        }
        let description = match found {
            Schema::Object(o) => o.description.clone(),
            _ => None,
        };
        let mut all = AllOf::new();
        all.description = description;
        all.items = vec![RefOr::T(found.clone()), RefOr::T(Schema::AnyOf(any))];
        *found = Schema::AllOf(all);
    }
    for (path, name, rule, needed) in query_rules() {
        let Some(item) = doc.paths.paths.get_mut(path) else {
            continue;
        };
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            for parameter in operation.parameters.iter_mut().flatten() {
                let RefOr::T(parameter) = parameter else {
                    continue;
                };
                if parameter.name == name {
                    if needed {
                        parameter.required = Required::True;
                    }
                    if let Some(schema) = parameter.schema.as_mut() {
                        apply(&rule, schema);
                    }
                }
            }
        }
    }
}

/// The component schema `name` as an object.
fn component<'a>(
    schemas: &'a mut std::collections::BTreeMap<String, RefOr<Schema>>,
    name: &str,
) -> Option<&'a mut Object> {
    match schemas.get_mut(name) {
        Some(RefOr::T(Schema::Object(object))) => Some(object),
        _ => None,
    }
}

/// States `rule` on `schema` (a string, integer or array schema, nullable or not).
fn apply(rule: &Rule, schema: &mut RefOr<Schema>) {
    match (rule, schema) {
        (Rule::Each { max, item }, RefOr::T(Schema::Array(array))) => {
            array.max_items = Some(*max);
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                apply(item, items);
            }
        }
        (_, RefOr::T(Schema::Object(object))) => match rule {
            Rule::Text { pattern, min, max } => {
                object.pattern = pattern.clone();
                object.min_length = *min;
                object.max_length = max.filter(|m| *m != usize::MAX);
            }
            Rule::Choice(choices) => {
                let mut values: Vec<serde_json::Value> = choices
                    .iter()
                    .map(|c| serde_json::Value::from(*c))
                    .collect();
                if is_nullable(object) {
                    values.push(serde_json::Value::Null);
                }
                object.enum_values = Some(values);
            }
            Rule::Whole { min, max } => {
                object.minimum = Some(number(*min));
                object.maximum = Some(number(*max));
            }
            Rule::Keys(key) => {
                let mut names = RefOr::T(Schema::Object(Object::with_type(Type::String)));
                apply(key, &mut names);
                if let RefOr::T(names) = names {
                    object.property_names = Some(Box::new(names));
                }
            }
            Rule::Each { .. } => {}
        },
        _ => {}
    }
}

/// `schema_type` without `null`.
fn not_null(schema_type: &mut SchemaType) {
    if let SchemaType::Array(types) = schema_type {
        types.retain(|t| *t != Type::Null);
        if let [only] = types.as_slice() {
            *schema_type = SchemaType::Type(only.clone());
        }
    }
}

fn is_nullable(object: &Object) -> bool {
    matches!(&object.schema_type, SchemaType::Array(types) if types.contains(&Type::Null))
}

fn number(n: i64) -> utoipa::Number {
    utoipa::Number::Int(isize::try_from(n).unwrap_or(isize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn doc() -> Value {
        serde_json::to_value(super::super::openapi_router(|_| {}).1).unwrap_or_default()
    }

    #[test]
    fn every_rule_names_a_field_or_parameter_the_document_has() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        for (schema, field, _) in body_rules() {
            let object = match &schemas[schema]["allOf"] {
                Value::Array(parts) => parts[0].clone(),
                _ => schemas[schema].clone(),
            };
            assert!(
                object["properties"][field].is_object(),
                "{schema}.{field} is in the document"
            );
        }
        for (path, name, _, _) in query_rules() {
            let operation = doc["paths"][path]
                .as_object()
                .and_then(|item| item.values().next())
                .unwrap_or_else(|| panic!("{path} is in the document"));
            let parameters = operation["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                parameters.iter().any(|p| p["name"] == name),
                "{path} takes {name}"
            );
        }
    }

    #[test]
    fn the_document_states_the_names_rules() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        let name = &schemas["CreateApp"]["properties"]["name"];
        assert_eq!(name["maxLength"], 40);
        assert_eq!(name["pattern"], patterns::app_name());
        assert_eq!(
            schemas["CreateApp"]["properties"]["template"]["enum"],
            serde_json::json!(["static", "app", "docker", null])
        );
        assert_eq!(
            schemas["Expose"]["properties"]["allow_cidrs"]["maxItems"],
            16
        );
        let deploy = &schemas["DeployRequest"]["allOf"];
        assert_eq!(
            deploy[1]["anyOf"][1]["required"],
            serde_json::json!(["ref"])
        );
        assert_eq!(
            deploy[0]["properties"]["sha"]["type"], "string",
            "present means a value"
        );
        let changeset = &schemas["ChangesetRequest"]["allOf"][0]["properties"];
        assert_eq!(changeset["changes"]["type"], "object");
        assert_eq!(
            changeset["edits"]["propertyNames"]["pattern"],
            slipway_repository::paths::PATTERN
        );
        let logs = &doc["paths"]["/apps/{app_id}/channels/{channel_id}/logs"]["get"]["parameters"];
        let max_bytes = logs
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "max_bytes"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(max_bytes["schema"]["maximum"], 262_144);
    }
}
