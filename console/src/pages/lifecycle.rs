//! What changes an app as a whole from its page: adding and deleting channels, the access toggles, and deleting
//! the app. Each form posts here, and each handler calls the route an HTTP client would (`POST` and `DELETE` of
//! channels, `PATCH` and `DELETE /apps/{id}`); a refusal comes back on the page with what was typed
//! ([`crate::retry`]). The sections are offered by the role table, as every form is.

use axum::extract::Path;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

use super::{may, see};
use crate::ConsoleRouter;
use crate::html::{self, Markup, html, seg};
use crate::retry::Form;
use crate::session::Write;
use slipway_core::access::Action;
use slipway_rest::in_process::Failure;
use slipway_rest::views::{AppView, ChannelView};

/// The routes of these forms.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/apps/{app_id}/channels", post(create_channel))
        .route(
            "/apps/{app_id}/channels/{channel_id}/delete",
            post(delete_channel),
        )
        .route("/apps/{app_id}/settings", post(change_setting))
        .route("/apps/{app_id}/delete", post(delete_app))
}

/// One of the app's access toggles, on or off.
struct Setting {
    /// Its field in the app's `PATCH` body and view.
    field: &'static str,
    /// What the page calls it.
    name: &'static str,
    /// Whether it is on.
    on: fn(&AppView) -> bool,
}

/// The app's access toggles.
const SETTINGS: &[Setting] = &[
    Setting {
        field: "external_db_access_enabled",
        name: "External SQL access",
        on: |app| app.external_db_access_enabled,
    },
    Setting {
        field: "external_blob_access_enabled",
        name: "External object-store access",
        on: |app| app.external_blob_access_enabled,
    },
    Setting {
        field: "port_forwarding_enabled",
        name: "Port forwarding",
        on: |app| app.port_forwarding_enabled,
    },
];
/// The agent-access override: owner only, and three-valued (on, off or the account's default, null).
const AGENT_ACCESS: &str = "agent_protected_actions_enabled";

/// The form that adds a channel bound to a branch, for those who may.
pub fn new_channel(app: &AppView, here: &str, csrf: &Markup, form: Form<'_>) -> Markup {
    html! {
        @if may(app, Action::ManageChannels) {
            details.card open[form.typed("name").is_some()] {
                summary { "Add a channel" }
                (form.alert())
                form #create-channel method="post" action={ (here) "/channels" } {
                    (csrf)
                    label {
                        "Name "
                        input name="name" value=[form.value("name", "")] required
                            pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" maxlength="40";
                    }
                    label { "Deploys from branch " input name="branch" value=[form.value("branch", "")] required; }
                    button type="submit" { "Add the channel" }
                }
                p.hint { "A push to that branch is stored; the channel's page deploys it." }
            }
        }
    }
}

/// The settings table, with a switch on each row for those who may change it.
pub fn settings(app: &AppView, here: &str, csrf: &Markup, form: Form<'_>) -> Markup {
    let changes = may(app, Action::ChangeSettings);
    let switch = |field: &str, to: &str, label: &str| {
        html! {
            form.inline method="post" action={ (here) "/settings" } {
                (csrf)
                input type="hidden" name="setting" value=(field);
                input type="hidden" name="value" value=(to);
                button.quiet type="submit" { (label) }
            }
        }
    };
    let mut rows: Vec<Vec<Markup>> = SETTINGS
        .iter()
        .map(|setting| {
            let (field, name, on) = (setting.field, setting.name, (setting.on)(app));
            let plan =
                (field == "port_forwarding_enabled").then_some(if app.port_forwarding_available {
                    " (the plan includes it)"
                } else {
                    " (the plan does not include it)"
                });
            let action = match (changes, on) {
                (false, _) => Markup::default(),
                (true, true) => switch(field, "off", "Turn off"),
                (true, false) => switch(field, "on", "Turn on"),
            };
            vec![
                html! { (name) },
                html! { @if on { "on" } @else { "off" } (plan.unwrap_or_default()) },
                action,
            ]
        })
        .collect();
    let effective = app.agent_protected_actions_effective;
    let overridden = app.agent_protected_actions_enabled;
    let agent_choices = [
        ("on", "Allow"),
        ("off", "Refuse"),
        ("default", "Use the account's default"),
    ]
    .into_iter()
    .filter(|(to, _)| {
        !matches!(
            (*to, overridden),
            ("on", Some(true)) | ("off", Some(false)) | ("default", None)
        )
    });
    rows.push(vec![
        html! { "Agent access to protected actions" },
        html! {
            @if effective { "on" } @else { "off" }
            @if overridden.is_none() { " (the account's default)" }
        },
        html! {
            @if may(app, Action::ChangeAgentAccess) {
                @for (i, (to, label)) in agent_choices.enumerate() {
                    @if i > 0 { " " }
                    (switch(AGENT_ACCESS, to, label))
                }
            }
        },
    ]);
    html! {
        h2 #settings { "Settings" }
        (form.alert())
        (html::table(&["setting", "value", ""], &rows, ""))
    }
}

/// The app's deletion for its owner: typing its name is the confirmation.
pub fn delete(app: &AppView, here: &str, csrf: &Markup, form: Form<'_>) -> Markup {
    html! {
        @if may(app, Action::DeleteApp) {
            section.card.danger-zone {
                h2 { "Delete this app" }
                p {
                    "Stops every channel and deletes the app with its repository, environment, channels, their \
                     databases and buckets; its custom domains are freed and its members lose it at once. This \
                     cannot be undone."
                }
                (form.alert())
                form #delete-app method="post" action={ (here) "/delete" } {
                    (csrf)
                    label {
                        "Type the app's name, " b { (app.name) } ", to confirm "
                        input name="confirm" value=[form.value("confirm", "")] required autocomplete="off";
                    }
                    button.danger type="submit" { "Delete the app" }
                }
            }
        }
    }
}

/// The channel's deletion, behind a second click, for those who may; `prod` is never deleted.
pub fn delete_channel_button(
    app: &AppView,
    channel: &ChannelView,
    here: &str,
    csrf: &Markup,
) -> Markup {
    if !may(app, Action::ManageChannels) || channel.name == "prod" {
        return Markup::default();
    }
    html::Destructive {
        action: &format!("{here}/delete"),
        hidden: csrf,
        opener: "Delete this channel",
        consequence: &format!(
            "The channel {} stops serving: its container, routes, database and bucket go with it, and its custom domains are freed.",
            channel.name
        ),
        button: "Delete the channel",
    }
    .html()
}

async fn create_channel(Path(app_id): Path<String>, write: Write) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    let body = json!({
        "name": write.fields.get("name"),
        "git_ref_binding": format!("branch:{}", write.fields.get("branch")),
    });
    match write
        .person
        .api
        .write_as::<ChannelView>(Method::POST, &format!("{here}/channels"), &body)
        .await
    {
        Ok(channel) => see(&format!(
            "{here}/channels/{}?done=channel-created",
            seg(&channel.id)
        )),
        Err(f) => super::app::refused("create-channel", &app_id, &write, &f).await,
    }
}

async fn delete_channel(
    Path((app_id, channel_id)): Path<(String, String)>,
    write: Write,
) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    match write
        .person
        .api
        .delete(&format!("{here}/channels/{}", seg(&channel_id)))
        .await
    {
        Ok(_) => see(&format!("{here}?done=channel-deleted")),
        Err(f) => write
            .person
            .refused(&f, &format!("{here}/channels/{}", seg(&channel_id))),
    }
}

async fn change_setting(Path(app_id): Path<String>, write: Write) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    let setting = write.fields.get("setting");
    let known = setting == AGENT_ACCESS || SETTINGS.iter().any(|s| s.field == setting);
    let value = match (setting, write.fields.get("value")) {
        _ if !known => None,
        (AGENT_ACCESS, "default") => Some(Value::Null),
        (_, "on") => Some(Value::Bool(true)),
        (_, "off") => Some(Value::Bool(false)),
        _ => None,
    };
    let Some(value) = value else {
        let failure = Failure::bad_request("pick a setting and turn it on or off");
        return super::app::refused("settings", &app_id, &write, &failure).await;
    };
    match write
        .person
        .api
        .write(
            Method::PATCH,
            &here,
            &Value::Object([(setting.to_owned(), value)].into_iter().collect()),
        )
        .await
    {
        Ok(_) => see(&format!("{here}?done=setting-saved")),
        Err(f) => super::app::refused("settings", &app_id, &write, &f).await,
    }
}

async fn delete_app(Path(app_id): Path<String>, write: Write) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    let app: AppView = match write.person.api.read(&here).await {
        Ok(app) => app,
        Err(f) => return write.person.refused(&f, &here),
    };
    let name = &app.name;
    if write.fields.raw("confirm") != name {
        let failure = Failure::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("type the app's name, {name}, exactly, to delete it"),
        );
        return super::app::refused("delete-app", &app_id, &write, &failure).await;
    }
    match write.person.api.delete(&here).await {
        Ok(_) => see("/apps?done=deleted"),
        Err(f) => super::app::refused("delete-app", &app_id, &write, &f).await,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::app;
    use super::*;

    const HERE: &str = "/apps/a1";

    fn channel(name: &str) -> ChannelView {
        super::super::fixtures::channel(name, "running", None)
    }

    fn none() -> Form<'static> {
        Form::of(None, "")
    }

    // The parts as the text a browser gets, with no CSRF field.
    fn settings(app: &AppView, here: &str, _: &str, form: Form<'_>) -> String {
        super::settings(app, here, &Markup::default(), form).into_string()
    }
    fn new_channel(app: &AppView, here: &str, _: &str, form: Form<'_>) -> String {
        super::new_channel(app, here, &Markup::default(), form).into_string()
    }
    fn delete(app: &AppView, here: &str, _: &str, form: Form<'_>) -> String {
        super::delete(app, here, &Markup::default(), form).into_string()
    }
    fn delete_channel_button(app: &AppView, channel: &ChannelView, here: &str, _: &str) -> String {
        super::delete_channel_button(app, channel, here, &Markup::default()).into_string()
    }

    #[test]
    fn a_member_reads_the_settings_and_changes_nothing() {
        let member = app("member");
        let table = settings(&member, HERE, "", none());
        assert!(table.contains("External SQL access"), "{table}");
        assert!(!table.contains("<form"), "{table}");
        assert_eq!(new_channel(&member, HERE, "", none()), "");
        assert_eq!(delete(&member, HERE, "", none()), "");
    }

    #[test]
    fn an_admin_switches_settings_but_neither_agent_access_nor_the_app_itself() {
        let admin = app("admin");
        let table = settings(&admin, HERE, "", none());
        assert!(table.contains(r#"name="setting" value="external_db_access_enabled"><input type="hidden" name="value" value="off">"#), "{table}");
        assert!(table.contains(r#"name="setting" value="port_forwarding_enabled"><input type="hidden" name="value" value="on">"#), "{table}");
        assert!(!table.contains(AGENT_ACCESS), "{table}");
        assert!(new_channel(&admin, HERE, "", none()).contains("create-channel"));
        assert_eq!(delete(&admin, HERE, "", none()), "");
    }

    #[test]
    fn the_owner_sets_agent_access_to_what_it_is_not_and_deletes_by_name() {
        let owner = app("owner");
        let table = settings(&owner, HERE, "", none());
        assert!(
            table.contains("off (the account&#39;s default)")
                || table.contains("off (the account's default)"),
            "{table}"
        );
        assert!(
            table.contains(r#"value="on"><button class="quiet" type="submit">Allow"#),
            "{table}"
        );
        assert!(
            table.contains(r#"value="off"><button class="quiet" type="submit">Refuse"#),
            "{table}"
        );
        assert!(
            !table.contains("Use the account"),
            "already the default: {table}"
        );
        let delete = delete(&owner, HERE, "", none());
        assert!(
            delete.contains("<b>web</b>") && delete.contains("/apps/a1/delete"),
            "{delete}"
        );
    }

    #[test]
    fn prod_is_never_offered_for_deletion() {
        let owner = app("owner");
        let prod = channel("prod");
        let staging = channel("staging");
        assert_eq!(delete_channel_button(&owner, &prod, "/c", ""), "");
        assert!(delete_channel_button(&owner, &staging, "/c", "").contains("Delete the channel"));
        assert_eq!(
            delete_channel_button(&app("member"), &staging, "/c", ""),
            ""
        );
    }
}
