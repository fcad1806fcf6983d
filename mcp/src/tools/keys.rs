//! Credentials, SSH keys and the account's email verification.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ADDS, Ctx, DESTROYS, NoArguments, READS, SETS, ToolDef, body, json, tool};
use slipway_rest::in_process::segment;

/// `get_credentials` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetCredentials {
    /// Scopes of the new token, a subset of yours (e.g. `["repo:*"]`); omitted means all of yours.
    #[serde(default)]
    scopes: Option<Vec<String>>,
    /// Lifetime in seconds; omitted means the longest allowed.
    #[serde(default)]
    expires_in: Option<i64>,
}

/// `register_ssh_key` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RegisterKey {
    /// One OpenSSH public key line, e.g. `ssh-ed25519 AAAA... you@host`.
    public_key: String,
    /// A name to recognise the key by.
    #[serde(default)]
    label: Option<String>,
}

/// `delete_ssh_key` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfKey {
    /// The key's id, as `list_ssh_keys` lists it.
    key_id: String,
}

/// `request_email_verification` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EmailRequest {
    /// The address to verify; an 8-character code is mailed to it.
    email: String,
}

/// `complete_email_verification` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EmailCode {
    /// The code from the email.
    code: String,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "get_credentials",
            "Mint a short-lived access token for git over HTTPS or the REST API, with your scopes or fewer. The \
             token is shown once.",
            ADDS,
            |ctx: Ctx, a: GetCredentials| async move {
                let request = body(json!({"scopes": a.scopes, "expires_in": a.expires_in}));
                json(
                    ctx.rest
                        .write(Method::POST, "/credentials", &request)
                        .await?,
                )
            },
        ),
        tool(
            "register_ssh_key",
            "Register an SSH public key on your account, for git over SSH (git@<git host>:<owner>/<app>.git).",
            ADDS,
            |ctx: Ctx, a: RegisterKey| async move {
                let request = body(json!({"public_key": a.public_key, "label": a.label}));
                json(ctx.rest.write(Method::POST, "/ssh-keys", &request).await?)
            },
        ),
        tool(
            "list_ssh_keys",
            "List the SSH public keys registered on your account.",
            READS,
            |ctx: Ctx, _: NoArguments| async move { json(ctx.rest.get("/ssh-keys").await?) },
        ),
        tool(
            "delete_ssh_key",
            "Remove an SSH public key from your account; git over SSH stops accepting it at once.",
            DESTROYS,
            |ctx: Ctx, a: OfKey| async move {
                ctx.rest
                    .delete(&format!("/ssh-keys/{}", segment(&a.key_id)))
                    .await?;
                json(json!({"deleted": a.key_id}))
            },
        ),
        tool(
            "request_email_verification",
            "Mail a verification code to an address for your account (needs the `email:bind` scope, which \
             registration grants). Verifying moves a starter account to the basic plan.",
            ADDS,
            |ctx: Ctx, a: EmailRequest| async move {
                json(
                    ctx.rest
                        .write(
                            Method::POST,
                            "/me/email-verifications",
                            &json!({"email": a.email}),
                        )
                        .await?,
                )
            },
        ),
        tool(
            "complete_email_verification",
            "Confirm your address with the code that was mailed to it.",
            SETS,
            |ctx: Ctx, a: EmailCode| async move {
                json(
                    ctx.rest
                        .write(
                            Method::POST,
                            "/me/email-verifications/complete",
                            &json!({"code": a.code}),
                        )
                        .await?,
                )
            },
        ),
    ]
}
