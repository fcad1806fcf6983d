//! The tool catalogue: each tool's name, description, argument schema, hints, and the call it makes. A tool is a
//! typed argument struct (its doc comments are the schema's descriptions) and an async function from it to the
//! route(s) it calls; [`tool`] erases the types so the catalogue is one list, and checks every call's arguments
//! against the tool's schema ([`super::arguments`]) before reading them.

mod apps;
mod code;
mod data;
mod env;
mod keys;
mod network;
mod notes;
mod observe;

use std::future::Future;
use std::sync::{Arc, LazyLock};

use futures::future::BoxFuture;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::address::{AppAddress, ChannelAddress};
use super::arguments;
use slipway_rest::in_process::{Failure, Rest, with_query};

/// What a tool needs to act: the REST API as its caller sees it, and the API's public origin (for links the
/// caller follows itself, such as a snapshot's download).
#[derive(Clone)]
pub struct Ctx {
    /// The caller's view of the REST API.
    pub rest: Rest,
    /// The API's configured public origin (`https://api.example.com`); `None` when none is configured. Never the
    /// request's `Host`, which its sender chooses.
    pub public_base: Option<String>,
}

/// A tool's successful answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A JSON document (also sent as the result's structured content when it is an object).
    Json(Value),
    /// Plain text.
    Text(String),
}

/// What a tool answers.
pub type Reply = Result<Output, Failure>;

/// The behaviour hints of a tool (MCP's annotations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// Changes nothing.
    pub read_only: bool,
    /// May remove or overwrite what cannot be got back.
    pub destructive: bool,
    /// Calling it twice with the same arguments does what calling it once did.
    pub idempotent: bool,
}

/// Reads only.
pub const READS: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
};
/// Adds something new each call.
pub const ADDS: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: false,
};
/// Sets a state; repeating it changes nothing more.
pub const SETS: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: true,
};
/// Removes or replaces data; repeating it changes nothing more.
pub const DESTROYS: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: true,
};

type Run = dyn Fn(Ctx, JsonObject) -> BoxFuture<'static, Reply> + Send + Sync;

/// One tool of the catalogue.
pub struct ToolDef {
    /// The tool's name (`list_apps`).
    pub name: &'static str,
    description: &'static str,
    hints: Hints,
    schema: Arc<JsonObject>,
    run: Box<Run>,
}

impl ToolDef {
    /// The tool as `tools/list` shows it.
    pub fn describe(&self) -> Tool {
        Tool::new(self.name, self.description, self.schema.clone()).annotate(
            ToolAnnotations::new()
                .read_only(self.hints.read_only)
                .destructive(self.hints.destructive)
                .idempotent(self.hints.idempotent)
                .open_world(false),
        )
    }

    /// Calls the tool with its JSON arguments; arguments that do not fit its schema answer 400 `bad_request`.
    pub fn call(&self, ctx: Ctx, arguments: JsonObject) -> BoxFuture<'static, Reply> {
        (self.run)(ctx, arguments)
    }

    /// The tool's hints.
    pub fn hints(&self) -> Hints {
        self.hints
    }

    /// The argument schema.
    pub fn schema(&self) -> &JsonObject {
        &self.schema
    }

    /// The description.
    pub fn description(&self) -> &'static str {
        self.description
    }
}

/// A tool taking arguments `A` and running `run`.
pub fn tool<A, F, Fut>(
    name: &'static str,
    description: &'static str,
    hints: Hints,
    run: F,
) -> ToolDef
where
    A: DeserializeOwned + JsonSchema + 'static,
    F: Fn(Ctx, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let run = Arc::new(run);
    let schema = input_schema::<A>();
    ToolDef {
        name,
        description,
        hints,
        schema: schema.clone(),
        run: Box::new(move |ctx, given| {
            let (run, schema) = (run.clone(), schema.clone());
            Box::pin(async move {
                arguments::check(name, &schema, &given)?;
                let arguments = arguments::read::<A>(given)?;
                run(ctx, arguments).await
            })
        }),
    }
}

/// The input schema of arguments `A`, saying that it takes no other arguments (a call with another is refused).
fn input_schema<A: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = rmcp::handler::server::common::schema_for_type::<A>();
    Arc::make_mut(&mut schema).insert("additionalProperties".into(), Value::Bool(false));
    schema
}

/// Arguments naming an app.
#[derive(Debug, serde::Deserialize, JsonSchema)]
pub struct OfApp {
    /// The app.
    #[serde(flatten)]
    pub app: AppAddress,
}

/// Arguments naming a channel of an app.
#[derive(Debug, serde::Deserialize, JsonSchema)]
pub struct OfChannel {
    /// The app.
    #[serde(flatten)]
    pub app: AppAddress,
    /// Its channel.
    #[serde(flatten)]
    pub channel: ChannelAddress,
}

/// Paging arguments.
#[derive(Debug, Default, serde::Deserialize, JsonSchema)]
pub struct Page {
    /// Entries per page, 1 to 200 (default 50).
    #[serde(default)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page; omitted for the first.
    #[serde(default)]
    pub cursor: Option<String>,
}

impl Page {
    /// `path` with this page's query.
    pub fn query(self, path: &str) -> String {
        with_query(
            path,
            &[
                ("limit", self.limit.map(|l| l.to_string())),
                ("cursor", self.cursor),
            ],
        )
    }
}

/// Arguments of a paged list of an app.
#[derive(Debug, serde::Deserialize, JsonSchema)]
pub struct AppPage {
    /// The app.
    #[serde(flatten)]
    pub app: AppAddress,
    /// The page.
    #[serde(flatten)]
    pub page: Page,
}

/// Arguments of a tool that takes none.
#[derive(Debug, Default, serde::Deserialize, JsonSchema)]
pub struct NoArguments {}

/// Every tool, in the spec's order.
pub fn catalogue() -> &'static [ToolDef] {
    static CATALOGUE: LazyLock<Vec<ToolDef>> = LazyLock::new(|| {
        [
            apps::tools(),
            code::tools(),
            env::tools(),
            data::tools(),
            network::tools(),
            keys::tools(),
            observe::tools(),
            notes::tools(),
        ]
        .into_iter()
        .flatten()
        .collect()
    });
    &CATALOGUE
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    catalogue().iter().find(|t| t.name == name)
}

/// A JSON answer.
pub fn json(value: Value) -> Reply {
    Ok(Output::Json(value))
}

/// A download link as tools answer it, from a download token a route minted: the URL, the header that opens it,
/// a `curl` line, and when it stops working.
pub fn download_link(ctx: &Ctx, token: &Value) -> Reply {
    json(
        serde_json::json!({"download": download_of(ctx, token), "expires_at": token["expires_at"]}),
    )
}

/// The `{url, headers, curl}` of a download token, on the API's public origin. Without a configured one the `url`
/// is the path alone, to be taken relative to the address the client reached the MCP server at, and there is no
/// `curl` line: the request's `Host` names whatever its sender likes, and the link carries a bearer token.
pub fn download_of(ctx: &Ctx, token: &Value) -> Value {
    let path = token["download_url"].as_str().unwrap_or_default();
    let authorization = format!("Bearer {}", token["token"].as_str().unwrap_or_default());
    match &ctx.public_base {
        Some(base) => {
            let url = format!("{base}{path}");
            serde_json::json!({
                "url": url,
                "headers": {"Authorization": authorization},
                "curl": format!("curl -fSLOJ -H 'Authorization: {authorization}' '{url}'"),
            })
        }
        None => serde_json::json!({"url": path, "headers": {"Authorization": authorization}}),
    }
}

/// `value` without its null fields, for compact request bodies.
pub fn body(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_tool_has_a_unique_name_a_description_and_described_arguments() {
        let mut names = HashSet::new();
        for tool in catalogue() {
            assert!(names.insert(tool.name), "{} is listed twice", tool.name);
            assert!(
                tool.description().len() >= 20,
                "{} needs a description an agent can act on",
                tool.name
            );
            assert_eq!(
                tool.schema().get("type").and_then(Value::as_str),
                Some("object"),
                "{}'s arguments are an object",
                tool.name
            );
            let properties = tool
                .schema()
                .get("properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (argument, schema) in properties {
                let described = schema.get("description").and_then(Value::as_str);
                assert!(
                    described.is_some_and(|d| !d.is_empty()),
                    "{}.{argument} has no description",
                    tool.name
                );
                assert!(
                    schema.get("type").is_some()
                        || schema.get("anyOf").is_some()
                        || schema.get("$ref").is_some()
                        || schema.get("oneOf").is_some(),
                    "{}.{argument} has no schema",
                    tool.name
                );
            }
        }
    }

    #[test]
    fn a_schema_requires_what_the_server_requires_and_takes_nothing_else() {
        let optional_channel = ["set_env", "delete_env", "list_env", "get_blob_usage"];
        for tool in catalogue() {
            let schema = tool.schema();
            assert_eq!(
                schema.get("additionalProperties"),
                Some(&Value::Bool(false))
            );
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let takes = |argument: &str| {
                schema
                    .get("properties")
                    .is_some_and(|p| p.get(argument).is_some())
            };
            if takes("app_name") && tool.name != "get_blob_usage" {
                assert!(required.contains(&"app_name"), "{}", tool.name);
            }
            if takes("channel") && !optional_channel.contains(&tool.name) {
                assert!(required.contains(&"channel"), "{}", tool.name);
            }
            assert!(!takes("app_id") && !takes("channel_id"), "{}", tool.name);
        }
    }

    #[test]
    fn a_read_only_tool_is_never_destructive() {
        for tool in catalogue() {
            let hints = tool.hints();
            assert!(!(hints.read_only && hints.destructive), "{}", tool.name);
        }
    }
}
