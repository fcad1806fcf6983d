//! How tools name things: an app by `app_name` (its name for the caller's own app, `owner/name` for a shared one,
//! or its UUID) and a channel by `channel` (its name). `app_id` and `channel_id` are the deprecated spellings and
//! still work. Resolution reads the same routes a client would (`GET /apps`, `GET /apps/{id}`), so an app the
//! caller cannot see resolves to the same 404 as one that does not exist.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::rest::{Failure, Rest, segment};

/// The app a tool acts on.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct AppAddress {
    /// The app: its name as listed (`blog`), `owner/name` for an app shared with you (`alice/blog`), or its UUID.
    #[serde(default)]
    pub app_name: Option<String>,
    /// Deprecated: the app's UUID. Use `app_name`.
    #[serde(default)]
    #[schemars(extend("deprecated" = true))]
    pub app_id: Option<String>,
}

/// The channel of an app a tool acts on.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ChannelAddress {
    /// The channel's name, e.g. `prod`.
    #[serde(default)]
    pub channel: Option<String>,
    /// Deprecated: the channel's UUID. Use `channel`.
    #[serde(default)]
    #[schemars(extend("deprecated" = true))]
    pub channel_id: Option<String>,
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
        let channels = self.view["channels"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let field = |c: &Value, key: &str| c[key].as_str().map(str::to_owned);
        let found = match (&address.channel, &address.channel_id) {
            (Some(name), _) => channels
                .iter()
                .find(|c| c["name"].as_str() == Some(name.as_str())),
            (None, Some(id)) => channels
                .iter()
                .find(|c| c["id"].as_str() == Some(id.as_str())),
            (None, None) => return Err(Failure::bad_request("`channel` is required")),
        };
        found
            .and_then(|c| field(c, "id"))
            .ok_or_else(|| Failure::not_found("channel"))
    }

    /// The id of the channel named by `address`, or `None` when it names none (an app-wide setting).
    pub fn optional_channel_id(&self, address: &ChannelAddress) -> Result<Option<String>, Failure> {
        if address.channel.is_none() && address.channel_id.is_none() {
            return Ok(None);
        }
        self.channel_id(address).map(Some)
    }

    /// `/apps/{id}/channels/{channel_id}` of the channel named by `address`.
    pub fn channel_path(&self, address: &ChannelAddress) -> Result<String, Failure> {
        Ok(format!(
            "{}/channels/{}",
            self.path(),
            segment(&self.channel_id(address)?)
        ))
    }
}

/// Resolves `address` for the caller behind `rest`.
pub async fn app(rest: &Rest, address: &AppAddress) -> Result<ResolvedApp, Failure> {
    let given = address
        .app_name
        .as_deref()
        .or(address.app_id.as_deref())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Failure::bad_request("`app_name` is required"))?;
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
    fn a_channel_is_found_by_name_or_by_its_deprecated_id() {
        let app = ResolvedApp {
            id: "a".into(),
            view: json!({"channels": [{"id": "c1", "name": "prod"}, {"id": "c2", "name": "dev"}]}),
        };
        let by_name = ChannelAddress {
            channel: Some("dev".into()),
            channel_id: None,
        };
        assert_eq!(app.channel_path(&by_name).unwrap(), "/apps/a/channels/c2");
        let by_id = ChannelAddress {
            channel: None,
            channel_id: Some("c1".into()),
        };
        assert_eq!(app.channel_id(&by_id).unwrap(), "c1");
        assert_eq!(
            app.channel_id(&ChannelAddress::default())
                .unwrap_err()
                .status,
            400
        );
        let missing = ChannelAddress {
            channel: Some("qa".into()),
            channel_id: None,
        };
        assert_eq!(app.channel_id(&missing).unwrap_err().status, 404);
    }
}
