//! What a channel's containers receive: layers of variables where a later layer wins, with the keys the platform
//! injects itself on top of all of them. Pure, so the precedence is tested without a database.
//!
//! Layers, weakest first: the App's `spec.envSecret`, the app defaults set through the API, the Channel's
//! `spec.envSecret`, the channel overrides set through the API. System keys win over everything; they are reserved
//! names, so no layer can hold them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use slipway_crds::Template;
use uuid::Uuid;

use super::{Kind, Scope};

/// One variable as a layer holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Name.
    pub key: String,
    /// env or secret.
    pub kind: Kind,
    /// App default or channel override.
    pub scope: Scope,
    /// The channel of an override.
    pub channel_id: Option<Uuid>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Plain value.
    pub value: String,
}

/// Merges `layers`, weakest first: a key in a later layer replaces the same key of an earlier one. Sorted by key.
pub fn resolve(layers: impl IntoIterator<Item = Vec<Entry>>) -> Vec<Entry> {
    let mut merged = BTreeMap::new();
    for layer in layers {
        for entry in layer {
            merged.insert(entry.key.clone(), entry);
        }
    }
    merged.into_values().collect()
}

/// The keys the platform injects into a channel's containers, by name. A static channel runs no container.
pub fn system_keys(template: Template) -> Vec<&'static str> {
    match template {
        Template::Static => Vec::new(),
        Template::App | Template::Docker => slipway_crds::names::RESERVED_ENV_KEYS
            .iter()
            .copied()
            // Labels on the container, not variables.
            .filter(|k| !matches!(*k, "SVC_USER" | "SVC_SHA"))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str, scope: Scope, kind: Kind) -> Entry {
        Entry {
            key: key.into(),
            kind,
            scope,
            channel_id: None,
            updated_at: DateTime::UNIX_EPOCH,
            value: value.into(),
        }
    }

    #[test]
    fn later_layers_win_and_keys_are_sorted() {
        let gitops_app = vec![
            entry("A", "gitops", Scope::App, Kind::Secret),
            entry("G", "g", Scope::App, Kind::Secret),
        ];
        let app = vec![
            entry("A", "app", Scope::App, Kind::Env),
            entry("B", "app", Scope::App, Kind::Secret),
        ];
        let channel = vec![entry("B", "override", Scope::Channel, Kind::Env)];
        let resolved = resolve([gitops_app, app, vec![], channel]);
        let view: Vec<(&str, &str, Scope, Kind)> = resolved
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str(), e.scope, e.kind))
            .collect();
        assert_eq!(
            view,
            [
                ("A", "app", Scope::App, Kind::Env),
                ("B", "override", Scope::Channel, Kind::Env),
                ("G", "g", Scope::App, Kind::Secret)
            ]
        );
    }

    #[test]
    fn system_keys_are_listed_for_containers_only() {
        assert!(system_keys(Template::Static).is_empty());
        let keys = system_keys(Template::App);
        for k in [
            "SVC_HTTP_PORT",
            "PORT",
            "SVC_FORWARD_PORT",
            "SVC_READY_FILE",
            "DATABASE_URL",
            "S3_REGION",
        ] {
            assert!(keys.contains(&k), "{k}");
        }
        assert!(
            !keys.contains(&"SVC_USER") && !keys.contains(&"SVC_SHA"),
            "labels, not variables"
        );
    }
}
