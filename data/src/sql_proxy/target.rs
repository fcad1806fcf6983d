//! Which channel a database name in a connection string means: `<app>` is the app's `prod` channel and
//! `<app>-<channel>` any other, among the apps the connecting account owns.
//!
//! App and channel names both may hold `-`, so one name can read several ways (`a-b-c`: app `a-b-c`, channel `c` of
//! app `a-b`, channel `b-c` of app `a`). The readings are tried in that order, the whole name as an app first and
//! then the longest app name first, and the first that names an existing channel wins: the same order every time,
//! so a name always means the same database while the account's apps stay the same. `<app>-prod` is not a second
//! name for prod.

use std::sync::Arc;

use slipway_crds::names::Username;
use slipway_crds::{App, Channel, labels};

use slipway_core::platform::cache::Cache;

/// The channel a database name resolved to.
#[derive(Debug, Clone)]
pub struct Target {
    /// The app (owned by the connecting account).
    pub app: Arc<App>,
    /// Its channel.
    pub channel: Arc<Channel>,
}

/// The (app, channel) readings of a database name, in the order they are tried.
pub fn readings(database: &str) -> Vec<(&str, &str)> {
    let mut readings = vec![(database, "prod")];
    readings.extend(
        database
            .char_indices()
            .rev()
            .filter(|&(_, c)| c == '-')
            .map(|(at, _)| (&database[..at], &database[at + 1..]))
            .filter(|(app, channel)| !app.is_empty() && !channel.is_empty() && *channel != "prod"),
    );
    readings
}

/// The channel `database` names among the apps `owner` owns, from the cache; `None` when it names none.
pub fn resolve(cache: &Cache, owner: &Username, database: &str) -> Option<Target> {
    let namespace = labels::user_namespace(owner);
    let apps = cache.apps_in(&namespace);
    readings(database)
        .into_iter()
        .find_map(|(app_name, channel_name)| {
            let app = apps.iter().find(|a| {
                a.metadata.name.as_deref() == Some(app_name) && a.spec.owner == owner.as_str()
            })?;
            let channel = cache
                .channels_of(&namespace, app_name)
                .into_iter()
                .find(|c| c.channel_name() == channel_name)?;
            Some(Target {
                app: app.clone(),
                channel,
            })
        })
}

/// The database name of `channel` of `app` (owned by `owner`) in a connection string (`<app>` for prod,
/// `<app>-<channel>` otherwise), with the (app, channel) that name reaches instead when another of the owner's
/// channels takes it first ([`readings`]' order): an app named `shop-dev` takes `shop-dev` from channel `dev` of
/// app `shop`, which no name then reaches. `None` beside the name when it reaches this channel, or nothing yet (a
/// channel the cache has not seen).
pub fn name_of(
    cache: &Cache,
    owner: &Username,
    app: &str,
    channel: &str,
) -> (String, Option<(String, String)>) {
    let name = if channel == "prod" {
        app.to_owned()
    } else {
        format!("{app}-{channel}")
    };
    let shadow = resolve(cache, owner, &name).and_then(|target| {
        let reached = (
            target.app.metadata.name.clone().unwrap_or_default(),
            target.channel.channel_name().to_owned(),
        );
        (reached.0 != app || reached.1 != channel).then_some(reached)
    });
    (name, shadow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_name_is_prod_then_the_longest_app_name_first() {
        assert_eq!(readings("shop"), [("shop", "prod")]);
        assert_eq!(
            readings("shop-dev"),
            [("shop-dev", "prod"), ("shop", "dev")]
        );
        assert_eq!(
            readings("a-b-c"),
            [("a-b-c", "prod"), ("a-b", "c"), ("a", "b-c")]
        );
    }

    #[test]
    fn prod_has_one_name_and_empty_parts_are_no_reading() {
        assert_eq!(readings("shop-prod"), [("shop-prod", "prod")]);
        assert_eq!(readings("-x"), [("-x", "prod")]);
        assert_eq!(readings("x-"), [("x-", "prod")]);
        assert_eq!(
            readings("a--b"),
            [("a--b", "prod"), ("a-", "b"), ("a", "-b")]
        );
    }
}
