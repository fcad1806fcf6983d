//! `POST /registrations` and `POST /auth/ssh-key`: an agent makes its own `starter` account by signing a message
//! with an Ed25519 SSH key, and later gets a fresh token by signing again. No bearer: the signature is the proof
//! (see [`slipway_core::registration::proof`]). Both bodies are read strictly: a field the route does not take, a
//! missing one or one of the wrong type answers 422 with each problem listed; a value that breaks its rule (the
//! username's pattern, the label's length) or a proof that does not hold answers 400 saying why.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use chrono::{DateTime, Duration, Utc};
use rand::RngExt;
use serde::Serialize;
use serde_json::{Map, Value};
use slipway_crds::names::Username;
use slipway_crds::plans::Plan;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::Json;
use slipway_auth::{scopes, token};
use slipway_core::error::{ApiError, ErrorEnvelope, FieldProblem};
use slipway_core::registration::proof::{self, Ed25519Key, Purpose};
use slipway_core::registration::{MAX_LOGIN_TOKENS, STARTER, TOKEN_DAYS};
use slipway_core::state::AppState;
use slipway_store::db::registrations::{self, NewRegistration, NotCreated};
use slipway_store::db::tokens::NewToken;

/// Longest key label.
pub const LABEL_MAX_CHARS: usize = 64;
/// Label of a registration's key and token when none is sent.
pub const DEFAULT_LABEL: &str = "registration";
/// How many random usernames are tried before the route gives up with 409.
const ALLOCATION_TRIES: usize = 4;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(ssh_login))
}

/// `POST /registrations` request.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct RegistrationRequest {
    /// One OpenSSH `ssh-ed25519` public key line.
    public_key: String,
    /// Unix seconds, within 300 s of the server's clock.
    timestamp: i64,
    /// The armored SSH signature (`ssh-keygen -Y sign -n svc-register`) over
    /// `svc-register\n<username>\n<timestamp>\n` (the username line empty when none is requested).
    signature: String,
    /// The username wanted: `^agent[a-z0-9]{5,35}$`, the same as the signed line. Absent: `agent` and 8 random
    /// characters.
    username: Option<String>,
    /// A name for the key and token, at most 64 characters; default `registration`.
    label: Option<String>,
}

/// `POST /auth/ssh-key` request.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SshLoginRequest {
    /// The registered key's OpenSSH line.
    public_key: String,
    /// Unix seconds, within 300 s of the server's clock.
    timestamp: i64,
    /// The armored SSH signature (`ssh-keygen -Y sign -n svc-login`) over
    /// `svc-login\n<SHA256:fingerprint as ssh-keygen -l prints it>\n<timestamp>\n`.
    signature: String,
}

/// Where the next steps are.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NextSteps {
    /// Bind an email address (moves the account to `basic`).
    pub verify_email: String,
    /// Get a fresh token with the same key.
    pub renew_token: String,
}

/// `POST /registrations` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Registration {
    /// The new account's id.
    pub user_id: Uuid,
    /// Its username.
    pub username: String,
    /// Its plan: `starter`.
    pub plan: String,
    /// A 30-day token with the nine default scopes and `email:bind` (shown once).
    pub token: String,
    /// When the token expires.
    pub token_expires_at: DateTime<Utc>,
    /// The registered key's id (`/ssh-keys`).
    pub ssh_key_id: Uuid,
    /// Its `SHA256:` fingerprint, the subject line of `svc-login` messages.
    pub fingerprint_sha256: String,
    /// The host of git over SSH (`git@<host>:<owner>/<app>.git`).
    pub git_ssh_host: String,
    /// The `starter` row of `GET /plans`.
    pub limits: Plan,
    /// The routes to call next.
    pub next: NextSteps,
}

/// `POST /auth/ssh-key` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Renewal {
    /// A 30-day token with the nine default scopes and `email:bind` (shown once).
    pub token: String,
    /// When it expires.
    pub token_expires_at: DateTime<Utc>,
    /// The account's id.
    pub user_id: Uuid,
    /// Its username.
    pub username: String,
}

/// The address a request came from (the TCP peer); unspecified when served without a socket.
#[derive(Debug, Clone, Copy)]
pub struct Source(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for Source {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Source(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
        ))
    }
}

/// What a body field must be.
#[derive(Debug, Clone, Copy)]
enum Kind {
    String { max_chars: Option<usize> },
    Integer,
}

/// One field a body takes.
struct FieldRule {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn field(name: &'static str, kind: Kind, required: bool) -> FieldRule {
    FieldRule {
        name,
        kind,
        required,
    }
}

/// The fields of a proof: the key, the time and the signature (the whole body of an SSH login).
const PROOF_FIELDS: [FieldRule; 3] = [
    field(
        "public_key",
        Kind::String {
            max_chars: Some(16_384),
        },
        true,
    ),
    field("timestamp", Kind::Integer, true),
    field(
        "signature",
        Kind::String {
            max_chars: Some(16_384),
        },
        true,
    ),
];

/// What a registration takes besides its proof.
/// Their values' own rules (the username's pattern, the label's length) are checked after the body's shape, and a
/// value that breaks one is invalid input (400), as everywhere else in the API.
const REGISTRATION_EXTRA_FIELDS: [FieldRule; 2] = [
    field("username", Kind::String { max_chars: None }, false),
    field("label", Kind::String { max_chars: None }, false),
];

const REGISTRATION_FIELDS: [&[FieldRule]; 2] = [&PROOF_FIELDS, &REGISTRATION_EXTRA_FIELDS];
const LOGIN_FIELDS: [&[FieldRule]; 1] = [&PROOF_FIELDS];

/// A body read against `rules`: every problem at once, as a 422.
struct Checked(Map<String, Value>);

impl Checked {
    fn new(body: Map<String, Value>, rule_sets: &[&[FieldRule]]) -> Result<Self, ApiError> {
        let rules = || rule_sets.iter().flat_map(|set| set.iter());
        let mut problems = Vec::new();
        for name in body.keys() {
            if !rules().any(|r| r.name == name) {
                problems.push(FieldProblem::new(name, "unknown field"));
            }
        }
        for rule in rules() {
            match (body.get(rule.name), rule.kind) {
                (None | Some(Value::Null), _) => {
                    if rule.required {
                        problems.push(FieldProblem::new(rule.name, "required"));
                    }
                }
                (Some(Value::String(s)), Kind::String { max_chars }) => {
                    if max_chars.is_some_and(|max| s.chars().count() > max) {
                        problems.push(FieldProblem::new(
                            rule.name,
                            format!("at most {} characters", max_chars.unwrap_or_default()),
                        ));
                    }
                }
                (Some(v), Kind::Integer) if v.as_i64().is_some() => {}
                (Some(_), Kind::String { .. }) => {
                    problems.push(FieldProblem::new(rule.name, "must be a string"));
                }
                (Some(_), Kind::Integer) => {
                    problems.push(FieldProblem::new(
                        rule.name,
                        "must be an integer (Unix seconds)",
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(Self(body))
        } else {
            Err(ApiError::Validation(problems))
        }
    }

    fn string(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(Value::as_str)
    }

    fn integer(&self, name: &str) -> i64 {
        self.0.get(name).and_then(Value::as_i64).unwrap_or_default()
    }
}

/// The pattern of the username a registration asks for.
pub const USERNAME_PATTERN: &str = "^agent[a-z0-9]{5,35}$";

/// The username a registration asks for: [`USERNAME_PATTERN`].
pub fn is_agent_username(name: &str) -> bool {
    name.strip_prefix("agent").is_some_and(|rest| {
        (5..=35).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// `agent` and 8 random lowercase letters and digits.
fn allocate_username() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let rest: String = (0..8)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect();
    format!("agent{rest}")
}

/// The scopes of registration and SSH-login tokens: the nine defaults and `email:bind`.
fn bound_scopes() -> Vec<String> {
    let mut scopes = scopes::default_scopes();
    scopes.push(scopes::EMAIL_BIND.to_owned());
    scopes
}

/// 400: the signature was used before.
pub fn replayed() -> ApiError {
    ApiError::bad_request(
        "this signature was used before; sign a new message with the current time",
    )
}

/// Create a `starter` account for an agent, proven by an SSH signature.
#[utoipa::path(post, path = "/registrations", tag = "registration", request_body = RegistrationRequest,
    responses((status = 200, body = Registration),
              (status = 400, body = ErrorEnvelope, description = "bad_request: the username does not match ^agent[a-z0-9]{5,35}$, the label is not 1-64 characters, the key is not ssh-ed25519, the timestamp is outside 300 s, or the signature does not verify over the message in namespace svc-register (or was used before)"),
              (status = 409, body = ErrorEnvelope, description = "conflict: the username is taken, the key is registered, or no free username was found"),
              (status = 422, body = ErrorEnvelope, description = "validation_failed: unknown, missing or mistyped fields, listed in error.fields"),
              (status = 429, body = ErrorEnvelope, description = "too_many_requests: the budget of the source address or of the platform is spent (Retry-After)"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: the platform operator closed registration")))]
async fn register(
    State(state): State<AppState>,
    Source(source): Source,
    Json(body): Json<Map<String, Value>>,
) -> Result<Json<Registration>, ApiError> {
    let limits = state.limits().registration;
    if !limits.open {
        return Err(ApiError::Unavailable(
            "registration is closed on this platform".into(),
        ));
    }
    let body = Checked::new(body, &REGISTRATION_FIELDS)?;
    let key = Ed25519Key::parse(body.string("public_key").unwrap_or_default())
        .map_err(ApiError::bad_request)?;
    let requested = body.string("username");
    if let Some(name) = requested
        && !is_agent_username(name)
    {
        return Err(ApiError::bad_request(format!(
            "username {name:?} does not match ^agent[a-z0-9]{{5,35}}$"
        )));
    }
    let label = body.string("label").map_or(DEFAULT_LABEL, str::trim);
    if label.is_empty()
        || label.chars().count() > LABEL_MAX_CHARS
        || label.chars().any(char::is_control)
    {
        return Err(ApiError::bad_request(
            "label must be 1-64 characters without control characters",
        ));
    }
    let timestamp = body.integer("timestamp");
    let verified = key
        .verify(
            Purpose::Register,
            requested.unwrap_or_default(),
            timestamp,
            body.string("signature").unwrap_or_default(),
            Utc::now().timestamp(),
        )
        .map_err(ApiError::bad_request)?;
    state.spend_registration(source).await?.map_err(|wait| {
        ApiError::Throttled(
            "this address has made as many registrations as it may this hour".into(),
            wait,
        )
    })?;
    let scopes = bound_scopes();
    let plaintext = token::generate();
    let token_hash = token::hash(&plaintext);
    let token_expires_at = Utc::now() + Duration::days(TOKEN_DAYS);
    let tries = if requested.is_some() {
        1
    } else {
        ALLOCATION_TRIES
    };
    for _ in 0..tries {
        let username: Username = match requested {
            Some(name) => name.parse()?,
            None => allocate_username().parse()?,
        };
        let new = NewRegistration {
            username: &username,
            plan: STARTER,
            public_key: &key.line,
            fingerprint: &key.fingerprint,
            label,
            signature_hash: &verified.signature_hash,
            signature_expires_at: proof::remembered_until(timestamp),
            token_hash: &token_hash,
            scopes: &scopes,
            token_expires_at,
            global_per_hour: limits.global_per_hour,
            source,
        };
        match registrations::register(state.db(), &new).await? {
            Ok(made) => {
                return Ok(Json(Registration {
                    user_id: made.user.id,
                    username: made.user.username,
                    plan: made.user.plan,
                    token: plaintext,
                    token_expires_at,
                    ssh_key_id: made.key.id,
                    fingerprint_sha256: made.key.fingerprint_sha256,
                    git_ssh_host: state.names().git_host.clone(),
                    limits: Plan::by_tier(STARTER)
                        .copied()
                        .ok_or_else(|| anyhow::anyhow!("the starter plan is missing"))?,
                    next: NextSteps {
                        verify_email: "POST /me/email-verifications".into(),
                        renew_token: "POST /auth/ssh-key".into(),
                    },
                }));
            }
            Err(NotCreated::Budget(wait)) => {
                return Err(ApiError::Throttled(
                    "the platform has taken as many registrations as it may this hour".into(),
                    wait,
                ));
            }
            Err(NotCreated::Replayed) => return Err(replayed()),
            Err(NotCreated::KeyTaken) => {
                return Err(ApiError::Conflict(format!(
                    "the key {} is already registered; sign in with POST /auth/ssh-key",
                    key.fingerprint
                )));
            }
            Err(NotCreated::UsernameTaken) if requested.is_some() => {
                return Err(ApiError::Conflict(format!(
                    "the username {username} is taken"
                )));
            }
            Err(NotCreated::UsernameTaken) => continue,
        }
    }
    Err(ApiError::Conflict(
        "no free username was found; send the request again".into(),
    ))
}

/// Get a fresh token for the account of an SSH key that has API login, proven by an SSH signature.
#[utoipa::path(post, path = "/auth/ssh-key", tag = "registration", request_body = SshLoginRequest,
    responses((status = 200, body = Renewal),
              (status = 400, body = ErrorEnvelope, description = "the key is not ssh-ed25519, the timestamp is outside 300 s, or the signature does not verify over the message in namespace svc-login (or was used before)"),
              (status = 404, body = ErrorEnvelope, description = "no key with API login has this fingerprint"),
              (status = 422, body = ErrorEnvelope, description = "validation_failed: unknown, missing or mistyped fields, listed in error.fields"),
              (status = 429, body = ErrorEnvelope, description = "too_many_requests: the key signed in 60 times this hour (Retry-After)")))]
async fn ssh_login(
    State(state): State<AppState>,
    Json(body): Json<Map<String, Value>>,
) -> Result<Json<Renewal>, ApiError> {
    let body = Checked::new(body, &LOGIN_FIELDS)?;
    let key = Ed25519Key::parse(body.string("public_key").unwrap_or_default())
        .map_err(ApiError::bad_request)?;
    let timestamp = body.integer("timestamp");
    let verified = key
        .verify(
            Purpose::Login,
            &key.fingerprint,
            timestamp,
            body.string("signature").unwrap_or_default(),
            Utc::now().timestamp(),
        )
        .map_err(ApiError::bad_request)?;
    state.spend_login(&key.fingerprint).await?.map_err(|wait| {
        ApiError::Throttled(
            format!(
                "this key has signed in {} times this hour, as many as it may",
                slipway_core::registration::LOGINS_PER_KEY_PER_HOUR
            ),
            wait,
        )
    })?;
    let (stored, user) = registrations::login_key(state.db(), &key.fingerprint)
        .await?
        .ok_or(ApiError::Missing(
            "not_found",
            format!(
                "no key with API login has the fingerprint {}",
                key.fingerprint
            ),
        ))?;
    let scopes = bound_scopes();
    let plaintext = token::generate();
    let token_expires_at = Utc::now() + Duration::days(TOKEN_DAYS);
    let label = format!("ssh login ({})", stored.label);
    let new = NewToken {
        user_id: user.id,
        hash: token::hash(&plaintext),
        label: Some(&label),
        scopes: &scopes,
        is_agent: true,
        expires_at: Some(token_expires_at),
        parent_id: None,
        only_path: None,
        audience: None,
    };
    registrations::login(
        state.db(),
        &verified.signature_hash,
        proof::remembered_until(timestamp),
        &new,
        MAX_LOGIN_TOKENS,
    )
    .await?
    .ok_or_else(replayed)?;
    // Tokens the cap revoked stop at once in this process (others hear of it from the database), and end their
    // external SQL sessions now, not at the next periodic check.
    state.tokens().forget_all();
    state.sql_sessions().recheck_soon();
    Ok(Json(Renewal {
        token: plaintext,
        token_expires_at,
        user_id: user.id,
        username: user.username,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_usernames_follow_the_pattern() {
        assert!(is_agent_username("agentabcde"));
        assert!(is_agent_username(&format!("agent{}", "a".repeat(35))));
        for bad in [
            "agentabcd",
            "agentABCDE",
            "agent-abcd",
            "botabcdefg",
            "agent",
            "",
        ] {
            assert!(!is_agent_username(bad), "{bad}");
        }
        assert!(!is_agent_username(&format!("agent{}", "a".repeat(36))));
        for _ in 0..50 {
            let name = allocate_username();
            assert!(is_agent_username(&name), "{name}");
            assert!(name.parse::<Username>().is_ok(), "{name}");
        }
    }

    #[test]
    fn bodies_are_read_strictly_with_every_problem_listed() {
        // A label's length is a value rule (400 after the shape); its type is the shape's.
        let body =
            serde_json::json!({"public_key": 7, "signature": "s", "extra": true, "label": 65});
        let Err(ApiError::Validation(problems)) = Checked::new(
            body.as_object().cloned().unwrap_or_default(),
            &REGISTRATION_FIELDS,
        ) else {
            panic!("not a validation error")
        };
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["extra", "public_key", "timestamp", "label"],
            "{problems:?}"
        );
        let ok = serde_json::json!({"public_key": "k", "signature": "s", "timestamp": 1, "username": null});
        assert!(
            Checked::new(
                ok.as_object().cloned().unwrap_or_default(),
                &REGISTRATION_FIELDS
            )
            .is_ok()
        );
        let float = serde_json::json!({"public_key": "k", "signature": "s", "timestamp": 1.5});
        assert!(
            Checked::new(
                float.as_object().cloned().unwrap_or_default(),
                &LOGIN_FIELDS
            )
            .is_err()
        );
    }
}
