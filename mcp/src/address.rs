//! How tools name things: an app by `app_name` (its name for the caller's own app, `owner/name` for a shared one,
//! or its UUID) and a channel by `channel` (its name). The deprecated spellings `app_id` and `channel_id` retired
//! after 2026-10-01: a call that still uses one is told so ([`super::arguments`]). Resolution reads the same routes
//! a client would (`GET /apps`, `GET /apps/{id}`), so an app the caller cannot see resolves to the same 404 as one
//! that does not exist.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use slipway_rest::in_process::{Failure, Rest, segment};

/// The app a tool acts on.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AppAddress {
    /// The app: its name as listed (`blog`), `owner/name` for an app shared with you (`alice/blog`), or its UUID.
    pub app_name: String,
}

/// The channel of an app a tool acts on.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChannelAddress {
    /// The channel's name, e.g. `prod`.
    pub channel: String,
}

/// An app as resolved: its id and, for channel lookups, the app as `GET /apps/{id}` answers it.
#[derive(Debug, Clone)]
pub struct ResolvedApp {
    /// The app's id.
    pub id: String,
    /// The app (`GET /apps/{id}`), channels included.
    pub view: Value,
}

impl ResolvedApp {
    /// `/apps/{id}`.
    pub fn path(&self) -> String {
        format!("/apps/{}", segment(&self.id))
    }

    /// The id of the channel named by `address`; 404 when the app has no such channel.
    pub fn channel_id(&self, address: &ChannelAddress) -> Result<String, Failure> {
        self.channel_named(&address.channel)
    }

    /// The id of the channel `name`, or `None` when no channel is named (an app-wide setting).
    pub fn optional_channel_id(&self, name: Option<&str>) -> Result<Option<String>, Failure> {
        name.map(|name| self.channel_named(name)).transpose()
    }

    /// `/apps/{id}/channels/{channel_id}` of the channel named by `address`.
    pub fn channel_path(&self, address: &ChannelAddress) -> Result<String, Failure> {
        Ok(format!(
            "{}/channels/{}",
            self.path(),
            segment(&self.channel_id(address)?)
        ))
    }

    fn channel_named(&self, name: &str) -> Result<String, Failure> {
        self.view["channels"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"].as_str() == Some(name))
            .and_then(|c| c["id"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| Failure::not_found("channel"))
    }
}

/// Resolves `address` for the caller behind `rest`.
pub async fn app(rest: &Rest, address: &AppAddress) -> Result<ResolvedApp, Failure> {
    let given = address.app_name.trim();
    if given.is_empty() {
        return Err(Failure::bad_request(
            "argument `app_name` must not be empty",
        ));
    }
    if Uuid::parse_str(given).is_ok() {
        let view = rest.get(&format!("/apps/{}", segment(given))).await?;
        return Ok(ResolvedApp {
            id: given.to_owned(),
            view,
        });
    }
    let listed = rest.get("/apps").await?;
    let apps = listed["apps"].as_array().cloned().unwrap_or_default();
    let chosen = pick(&apps, given)?;
    let id = chosen["id"]
        .as_str()
        .ok_or_else(|| Failure::not_found("app"))?
        .to_owned();
    Ok(ResolvedApp {
        id,
        view: chosen.clone(),
    })
}

/// The listed app `given` names: `owner/name` matches any visible app, a bare name only the caller's own.
fn pick<'a>(apps: &'a [Value], given: &str) -> Result<&'a Value, Failure> {
    let name_of = |a: &Value| a["name"].as_str().unwrap_or_default().to_owned();
    let owner_of = |a: &Value| a["owner_username"].as_str().unwrap_or_default().to_owned();
    if let Some((owner, name)) = given.split_once('/') {
        return apps
            .iter()
            .find(|a| owner_of(a) == owner && name_of(a) == name)
            .ok_or_else(|| Failure::not_found("app"));
    }
    if let Some(own) = apps
        .iter()
        .find(|a| name_of(a) == given && a["role"].as_str() == Some("owner"))
    {
        return Ok(own);
    }
    match apps.iter().find(|a| name_of(a) == given) {
        Some(shared) => Err(Failure::new(
            axum::http::StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "app not found among your own apps; the app shared with you is named {}/{given}",
                owner_of(shared)
            ),
        )),
        None => Err(Failure::not_found("app")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed() -> Vec<Value> {
        vec![
            json!({"id": "1", "name": "blog", "owner_username": "alice", "role": "member"}),
            json!({"id": "2", "name": "shop", "owner_username": "me", "role": "owner"}),
            json!({"id": "3", "name": "shop", "owner_username": "bob", "role": "admin"}),
        ]
    }

    #[test]
    fn a_bare_name_is_the_callers_own_app() {
        let apps = listed();
        assert_eq!(pick(&apps, "shop").unwrap()["id"], "2");
        assert_eq!(pick(&apps, "bob/shop").unwrap()["id"], "3");
        assert_eq!(pick(&apps, "me/shop").unwrap()["id"], "2");
    }

    #[test]
    fn a_shared_app_needs_its_owner_and_says_so() {
        let apps = listed();
        let failure = pick(&apps, "blog").unwrap_err();
        assert_eq!(failure.status, 404);
        assert!(
            failure.message.contains("alice/blog"),
            "{}",
            failure.message
        );
        assert_eq!(pick(&apps, "alice/blog").unwrap()["id"], "1");
        assert_eq!(pick(&apps, "carol/blog").unwrap_err().status, 404);
        assert_eq!(pick(&apps, "nothing").unwrap_err().message, "app not found");
    }

    #[test]
    fn a_channel_is_found_by_name() {
        let app = ResolvedApp {
            id: "a".into(),
            view: json!({"channels": [{"id": "c1", "name": "prod"}, {"id": "c2", "name": "dev"}]}),
        };
        let named = |name: &str| ChannelAddress {
            channel: name.into(),
        };
        assert_eq!(
            app.channel_path(&named("dev")).unwrap(),
            "/apps/a/channels/c2"
        );
        assert_eq!(app.channel_id(&named("prod")).unwrap(), "c1");
        assert_eq!(app.optional_channel_id(None).unwrap(), None);
        assert_eq!(
            app.optional_channel_id(Some("dev")).unwrap().as_deref(),
            Some("c2")
        );
        assert_eq!(app.channel_id(&named("qa")).unwrap_err().status, 404);
        assert_eq!(
            app.channel_id(&named("c1")).unwrap_err().status,
            404,
            "not by id"
        );
    }
}
