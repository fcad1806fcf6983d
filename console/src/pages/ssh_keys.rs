//! The SSH keys section of `/account`: the account's public keys (label, fingerprint, whether each may also sign
//! in to the API, when it was added), adding one by pasting its `.pub` line, and removing one behind a second
//! click. A registered key authenticates `git push` over SSH (`git@{git_host}:<username>/<app>.git`) with no token,
//! which is how most people push to Render, Heroku or GitHub; each form calls the route an HTTP client would
//! (`GET`, `POST /ssh-keys`, `DELETE /ssh-keys/{key_id}`), so the console adds no rule of its own.

use axum::extract::Path;
use axum::http::Method;
use axum::response::Response;
use axum::routing::post;
use serde_json::json;

use super::see;
use crate::ConsoleRouter;
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form};
use crate::session::{Person, Write};
use slipway_rest::ssh_keys::{KeyList, KeyView};

/// The form's id, which a refusal names to come back to it.
pub const ADD_FORM: &str = "add-ssh-key";

/// The routes of the section's forms.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/account/ssh-keys", post(add))
        .route("/account/ssh-keys/{key_id}/remove", post(remove))
}

/// The section: the keys, how to push with one, and the add form (`form`, with a refused add's fields).
pub async fn section(person: &Person, git_host: &str, form: Form<'_>) -> Markup {
    let csrf = html::csrf_field(&person.session.csrf);
    let keys = match person.api.read::<KeyList>("/ssh-keys").await {
        Ok(keys) => html::table(
            &["label", "fingerprint", "API sign-in", "added", ""],
            &keys
                .ssh_keys
                .iter()
                .map(|key| row(key, &csrf))
                .collect::<Vec<_>>(),
            "No SSH keys yet: git over SSH needs one.",
        ),
        Err(f) => html::banner(
            "warning",
            &format!(
                "The keys cannot be read now: {}",
                html::sentence(&f.message)
            ),
        ),
    };
    let remote = format!("git@{}:{}/<app>.git", git_host, person.session.username);
    html! {
        section.card #ssh-keys {
            h2 { "SSH keys" }
            p {
                "With a key here, git pushes over SSH without a token: " code #ssh-remote { (remote) } " "
                button type="button" data-copy="ssh-remote" { "Copy" }
            }
            (keys)
            h3 { "Add a key" }
            (form.alert())
            form method="post" action="/account/ssh-keys" id=(ADD_FORM) {
                (csrf)
                label {
                    "Public key "
                    textarea name="public_key" rows="3" required placeholder="ssh-ed25519 AAAA… you@laptop" {
                        (form.typed("public_key").unwrap_or_default())
                    }
                }
                label {
                    "Label "
                    input name="label" value=[form.value("label", "")]
                        maxlength=(slipway_rest::ssh_keys::LABEL_MAX_CHARS) placeholder="the key's comment";
                }
                label {
                    input type="checkbox" name="api_login" value="on" checked[form.typed("api_login") == Some("on")];
                    " Also let this key sign in to the API (" code { "POST /auth/ssh-key" } ")"
                }
                button type="submit" { "Add key" }
            }
            p.hint {
                "Paste the line of your " code { "~/.ssh/id_ed25519.pub" } "; only " code { "ssh-ed25519" }
                " keys are taken, and a key belongs to one account."
            }
        }
    }
}

/// One key's row, with its remove button behind a second click.
fn row(key: &KeyView, csrf: &Markup) -> Vec<Markup> {
    let label = &key.label;
    vec![
        html! { (label) },
        html! { code { (key.fingerprint_sha256) } },
        html! { @if key.api_login { "yes" } @else { "no" } },
        html::time(&key.created_at),
        html::Destructive {
            action: &format!("/account/ssh-keys/{}/remove", seg(&key.id.to_string())),
            hidden: csrf,
            opener: "Remove",
            consequence: &format!(
                "Git over SSH with the key “{label}” is refused from now on, and so is its API sign-in."
            ),
            button: "Remove the key",
        }
        .html(),
    ]
}

async fn add(write: Write) -> Response {
    let body = json!({
        "public_key": write.fields.get("public_key"),
        "label": write.fields.opt("label"),
        "api_login": write.fields.get("api_login") == "on",
    });
    match write
        .person
        .api
        .write(Method::POST, "/ssh-keys", &body)
        .await
    {
        Ok(_) => see("/account?done=key-added#ssh-keys"),
        Err(f) => {
            retry::refused(&write, ADD_FORM, &f, "/account", async |retry| {
                super::account::page(&write.person, None, Some(retry)).await
            })
            .await
        }
    }
}

async fn remove(Path(key_id): Path<String>, write: Write) -> Response {
    match write
        .person
        .api
        .delete(&format!("/ssh-keys/{}", seg(&key_id)))
        .await
    {
        Ok(_) => see("/account?done=key-removed#ssh-keys"),
        Err(f) => write.person.refused(&f, "/account"),
    }
}
