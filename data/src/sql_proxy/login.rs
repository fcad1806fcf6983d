//! Whether a login may reach a database, and as which role. The password is an access token, checked by the same
//! code as a REST request's bearer ([`slipway_core::caller::authenticate`]: unknown, expired and revoked tokens, and tokens
//! good for one download path, are refused; the login spends one request of the token's budget). The token must
//! carry `db:*` and belong to the account the username names; the database must name a channel of an app that
//! account owns, whose external access toggle is on and whose database is ready.
//!
//! Shared apps are not reachable here: only the owner's account resolves an app's database names (a member's
//! `<app>` would be ambiguous with their own apps, and reading every row is an admin's dump, not a member's).
//!
//! Every refusal is the same to the client (see [`super::wire::login_refused`]); [`Refusal`] is what the logs and
//! the metrics say.

use slipway_crds::Template;
use slipway_crds::names::Username;
use uuid::Uuid;

use super::target;
use slipway_auth::scopes;
use slipway_core::state::AppState;

/// Why a login was refused (the metric label and the log line; never the client's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Unknown, expired, revoked, path-limited or over-budget token.
    Token,
    /// The token lacks `db:*`.
    Scope,
    /// The token belongs to another account than the username names.
    User,
    /// The database names no channel of the account's apps (or a static one).
    Database,
    /// The app's external SQL access toggle is off.
    Toggle,
    /// The channel's database is not ready, or its password does not open.
    NotReady,
    /// The client broke the protocol or went away.
    Protocol,
}

impl Refusal {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Token => "token",
            Refusal::Scope => "scope",
            Refusal::User => "user",
            Refusal::Database => "database",
            Refusal::Toggle => "toggle",
            Refusal::NotReady => "not_ready",
            Refusal::Protocol => "protocol",
        }
    }
}

/// A login that may go through: who, to what, as whom.
#[derive(Clone)]
pub struct Grant {
    /// The token used (revoking it ends the session).
    pub token_id: Uuid,
    /// The account.
    pub username: String,
    /// The app (turning its toggle off ends the session).
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
    /// The channel's database on the data server.
    pub db_name: String,
    /// Its write role.
    pub role: String,
    /// The role's password.
    pub password: String,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("token_id", &self.token_id)
            .field("username", &self.username)
            .field("app_id", &self.app_id)
            .field("channel_id", &self.channel_id)
            .field("db_name", &self.db_name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Checks a login: `user` and `database` from the StartupMessage, `password` from the PasswordMessage.
pub async fn check(
    state: &AppState,
    user: &str,
    database: &str,
    password: &str,
) -> Result<Grant, (Refusal, String)> {
    let caller = slipway_core::caller::authenticate(state, password)
        .await
        .map_err(|e| (Refusal::Token, e.to_string()))?;
    if caller.username != user {
        return Err((
            Refusal::User,
            format!("the token belongs to {}", caller.username),
        ));
    }
    caller
        .require_scope(scopes::DB)
        .map_err(|_| (Refusal::Scope, "the token lacks db:*".to_owned()))?;
    let owner: Username = user
        .parse()
        .map_err(|_| (Refusal::User, "the stored username is invalid".to_owned()))?;
    let target = target::resolve(state.cache(), &owner, database).ok_or_else(|| {
        (
            Refusal::Database,
            "no channel of the account's apps has this name".to_owned(),
        )
    })?;
    if target.app.spec.template == Template::Static {
        return Err((Refusal::Database, "static channels have no database".into()));
    }
    if !target.app.spec.external_db_access_enabled {
        return Err((Refusal::Toggle, "external SQL access is off".into()));
    }
    let uid = |meta: &Option<String>| meta.as_deref().and_then(|u| u.parse::<Uuid>().ok());
    let (Some(app_id), Some(channel_id)) = (
        uid(&target.app.metadata.uid),
        uid(&target.channel.metadata.uid),
    ) else {
        return Err((Refusal::Database, "the resources have no uid yet".into()));
    };
    let record = slipway_core::channel_database::ready_record(&target.channel, channel_id, state)
        .await
        .map_err(|e| (Refusal::NotReady, e.to_string()))?;
    let (password, _) = record.passwords(state.keyring()).map_err(|e| {
        (
            Refusal::NotReady,
            format!("the password does not open: {e}"),
        )
    })?;
    Ok(Grant {
        token_id: caller.token_id,
        username: caller.username,
        app_id,
        channel_id,
        db_name: record.db_name,
        role: record.role_name,
        password,
    })
}
