//! The SSH keys section of `/account`: the account's public keys (label, fingerprint, whether each may also sign
//! in to the API, when it was added), adding one by pasting its `.pub` line, and removing one behind a second
//! click. A registered key authenticates `git push` over SSH (`git@{git_host}:<username>/<app>.git`) with no token,
//! which is how most people push to Render, Heroku or GitHub; each form calls the route an HTTP client would
//! (`GET`, `POST /ssh-keys`, `DELETE /ssh-keys/{key_id}`), so the console adds no rule of its own.

use axum::extract::Path;
use axum::http::Method;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

use super::{list, see, text};
use crate::ConsoleRouter;
use crate::html::{self, esc, seg};
use crate::retry::{self, Form};
use crate::session::{Person, Write};

/// The form's id, which a refusal names to come back to it.
pub const ADD_FORM: &str = "add-ssh-key";

/// The routes of the section's forms.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/account/ssh-keys", post(add))
        .route("/account/ssh-keys/{key_id}/remove", post(remove))
}

/// The section's HTML: the keys, how to push with one, and the add form (`form`, with a refused add's fields).
pub async fn section(person: &Person, git_host: &str, form: Form<'_>) -> String {
    let csrf = html::csrf_field(&person.session.csrf);
    let keys = match person.api.get("/ssh-keys").await {
        Ok(keys) => html::table(
            &["label", "fingerprint", "API sign-in", "added", ""],
            &list(&keys, "ssh_keys")
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
    format!(
        r#"<section class="card" id="ssh-keys"><h2>SSH keys</h2>
<p>With a key here, git pushes over SSH without a token: <code id="ssh-remote">{remote}</code> <button type="button" data-copy="ssh-remote">Copy</button></p>
{keys}
<h3>Add a key</h3>
{alert}<form method="post" action="/account/ssh-keys" id="{ADD_FORM}">{csrf}
<label>Public key <textarea name="public_key" rows="3" required placeholder="ssh-ed25519 AAAA… you@laptop">{typed_key}</textarea></label>
<label>Label <input name="label"{label} maxlength="{max}" placeholder="the key's comment"></label>
<label><input type="checkbox" name="api_login" value="on"{api_login}> Also let this key sign in to the API (<code>POST /auth/ssh-key</code>)</label>
<button type="submit">Add key</button></form>
<p class="hint">Paste the line of your <code>~/.ssh/id_ed25519.pub</code>; only <code>ssh-ed25519</code> keys are taken, and a key belongs to one account.</p></section>"#,
        remote = esc(&remote),
        alert = form.alert(),
        typed_key = esc(form.typed("public_key").unwrap_or_default()),
        label = form.value("label", ""),
        max = slipway_rest::ssh_keys::LABEL_MAX_CHARS,
        api_login = if form.typed("api_login") == Some("on") {
            " checked"
        } else {
            ""
        },
    )
}

/// One key's row, with its remove button behind a second click.
fn row(key: &Value, csrf: &str) -> Vec<String> {
    let label = text(key, "label");
    vec![
        esc(label),
        format!("<code>{}</code>", esc(text(key, "fingerprint_sha256"))),
        if key["api_login"].as_bool() == Some(true) {
            "yes".into()
        } else {
            "no".into()
        },
        html::time(text(key, "created_at")),
        html::Destructive {
            action: &format!("/account/ssh-keys/{}/remove", seg(text(key, "id"))),
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
