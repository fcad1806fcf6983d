//! `/apps/{app_id}/channels/{cid}/domains`: attach, list, verify and detach custom domains. Each attached domain
//! is a `Domain` resource in the app's namespace, named after the domain, which the operator verifies and
//! certifies; these routes write it and read it back from the cache, and `kubectl get domains` shows the same.
//!
//! - Attach checks the name (the shared IDNA rules and the platform's own domain), then re-attach on the same
//!   channel (the existing row, same token), then `domain_taken` across every account, then the 5-domain limit —
//!   the rules the webhook applies to Domains written with kubectl.
//! - The Domain names its Channel as owner from its creation, so it goes with the channel and the app; deleting
//!   either through the API detaches its domains at once ([`super::domain_release`]).
//! - The verification token is derived from the new resource's uid ([`slipway_crds::domain::verification_token`]),
//!   so the records are answered at once, before the operator has written them.
//! - Verify asks the operator for a check (an annotation) and answers once the check is recorded.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use slipway_crds::domain::{VERIFY_ANNOTATION, dns_records};
use slipway_crds::names::{ChannelName, DomainName};
use slipway_crds::rules;
use slipway_crds::{Channel, DnsRecords, Domain, DomainPhase, DomainSpec};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::domain_release;
use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::claims;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::owners;
use slipway_core::state::AppState;

/// The longest a verify waits for the operator's check (two lookups, each retried once on a 3 s timeout, fit).
const VERIFY_WAIT: Duration = Duration::from_secs(30);
/// The longest an attach waits for a detached Domain of the same name in the namespace to finish going.
const TERMINATING_WAIT: Duration = Duration::from_secs(30);
/// How often it looks.
const TERMINATING_POLL: Duration = Duration::from_millis(100);

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_domains, attach_domain))
        .routes(routes!(verify_domain))
        .routes(routes!(detach_domain))
}

/// `POST .../domains` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AttachDomain {
    /// The hostname: any case, Unicode or `xn--`, with or without a trailing dot.
    pub domain: String,
}

/// The records a customer creates.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DnsRecordsView {
    /// `_svc.<domain>`.
    pub txt_host: String,
    /// The token; begins with `svc-verify-`.
    pub txt_value: String,
    /// What a subdomain's CNAME points at: the channel's hostname.
    pub cname_target: String,
    /// What an apex domain's A records point at: the edge's addresses.
    pub a_values: Vec<String>,
}

/// A custom domain.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DomainView {
    /// IDNA-encoded, lowercase, without a trailing dot.
    pub domain: String,
    /// `pending` or `verified`.
    pub status: String,
    /// The last failure's reason, or null.
    pub reason: Option<String>,
    /// The records to create.
    pub dns_records: DnsRecordsView,
    /// When it was attached.
    pub created_at: Option<String>,
    /// When it was verified, or null.
    pub verified_at: Option<String>,
}

/// `{domains: [...]}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DomainList {
    /// The channel's domains, oldest first.
    pub domains: Vec<DomainView>,
}

/// `{ok: true}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Detached {
    /// Always true.
    pub ok: bool,
}

impl DomainView {
    /// The view of `domain`, on a channel whose hostname is `hostname`. The records are the operator's once it
    /// wrote them, and the same derivation before.
    fn build(state: &AppState, domain: &Domain, hostname: &str) -> Self {
        let status = domain.status.clone().unwrap_or_default();
        let records = status.dns_records.clone().unwrap_or_else(|| {
            dns_records(
                &domain.spec.domain,
                domain.metadata.uid.as_deref().unwrap_or_default(),
                hostname,
                &state.names().edge_addresses,
            )
        });
        let DnsRecords {
            txt_host,
            txt_value,
            cname_target,
            a_values,
        } = records;
        Self {
            domain: domain.spec.domain.clone(),
            status: match status.phase {
                DomainPhase::Pending => "pending",
                DomainPhase::Verified => "verified",
            }
            .to_owned(),
            reason: status.reason.map(|r| r.as_str().to_owned()),
            dns_records: DnsRecordsView {
                txt_host,
                txt_value,
                cname_target,
                a_values,
            },
            created_at: domain
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            verified_at: status.verified_at.map(|t| t.0.to_string()),
        }
    }
}

/// The channel's resource and its hostname.
fn channel_and_host(
    state: &AppState,
    app: &VisibleApp,
    channel_id: Uuid,
) -> Result<(std::sync::Arc<Channel>, String), ApiError> {
    let channel = access::channel_of(state, app, channel_id)?;
    let name: ChannelName = channel.channel_name().parse()?;
    let hostname = slipway_crds::names::channel_hostname(
        &app.name,
        &name,
        &app.owner,
        &state.names().app_domain,
    )?;
    Ok((channel, hostname))
}

/// The channel's Domain for the `domain` path segment (any form of the name), or 404.
fn attached(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
    domain: &str,
) -> Result<std::sync::Arc<Domain>, ApiError> {
    let missing = || ApiError::NotFound("domain");
    let name: DomainName = domain.parse().map_err(|_| missing())?;
    state
        .cache()
        .domains_of(
            &app.namespace,
            &channel.metadata.name.clone().unwrap_or_default(),
        )
        .into_iter()
        .find(|d| d.spec.domain == name.as_str())
        .ok_or_else(missing)
}

/// List a channel's custom domains.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/domains", tag = "domains", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = DomainList), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_domains(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<DomainList>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let (channel, hostname) = channel_and_host(&state, &app, channel_id)?;
    let domains = state
        .cache()
        .domains_of(
            &app.namespace,
            &channel.metadata.name.clone().unwrap_or_default(),
        )
        .iter()
        .map(|d| DomainView::build(&state, d, &hostname))
        .collect();
    Ok(Json(DomainList { domains }))
}

/// Attach a custom domain to a channel (status pending, with the DNS records to create).
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/domains", tag = "domains", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = AttachDomain,
    responses((status = 201, body = DomainView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope),
              (status = 503, body = ErrorEnvelope)))]
async fn attach_domain(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(req): Json<AttachDomain>,
) -> Result<(StatusCode, Json<DomainView>), ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageDomains).await?;
    let (channel, hostname) = channel_and_host(&state, &app, channel_id)?;
    let domain = DomainName::parse_attachable(&req.domain, &state.names().app_domain)?;
    let channel_name = channel.metadata.name.clone().unwrap_or_default();
    let on_channel = state.cache().domains_of(&app.namespace, &channel_name);
    if let Some(existing) = on_channel.iter().find(|d| d.spec.domain == domain.as_str()) {
        return Ok((
            StatusCode::CREATED,
            Json(DomainView::build(&state, existing, &hostname)),
        ));
    }
    let others: Vec<String> = state
        .cache()
        .domains()
        .iter()
        .map(|d| d.spec.domain.clone())
        .collect();
    rules::domain_free(&domain, others.iter().map(String::as_str))?;
    rules::within_domain_limit(on_channel.len())?;
    claims::claim_domain(&state, &app, &channel_name, &domain).await?;
    let mut resource = Domain::new(
        domain.as_str(),
        DomainSpec {
            channel: channel_name.clone(),
            domain: domain.to_string(),
        },
    );
    resource.metadata.owner_references = Some(vec![owners::owned_by(channel.as_ref())?]);
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), &app.namespace);
    let created = match create(&api, &resource, &domain).await {
        Ok(created) => created,
        Err(e) => {
            claims::release_domain(&state, &app.namespace, domain.as_str()).await?;
            return Err(e);
        }
    };
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let cached = state.cache().domain_where(&uid, |_| true).await?;
    Ok((
        StatusCode::CREATED,
        Json(DomainView::build(&state, &cached, &hostname)),
    ))
}

/// Creates `resource`, or answers the Domain of its name its channel already has (a parallel attachment of the same
/// domain to this channel made it first: the answer of a re-attach, and the claim is that attachment's). A Domain
/// of the name on its way out of this namespace (detached a moment ago; its finalizer removes its certificate) is
/// waited out, since once a detach has answered the name is free; it normally goes within a second, and one that
/// stays past [`TERMINATING_WAIT`] (the operator is down) answers 503.
async fn create(
    api: &Api<Domain>,
    resource: &Domain,
    domain: &DomainName,
) -> Result<Domain, ApiError> {
    let deadline = tokio::time::Instant::now() + TERMINATING_WAIT;
    loop {
        match api.create(&PostParams::default(), resource).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
            // The webhook's refusal: another channel holds the domain.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Err(rules::domain_taken(domain).into());
            }
            Err(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
                return Err(ApiError::bad_request(s.message));
            }
            Err(e) => return Err(e.into()),
        }
        match api.get_opt(domain.as_str()).await? {
            Some(existing) if existing.metadata.deletion_timestamp.is_none() => {
                return if existing.spec.channel == resource.spec.channel {
                    Ok(existing)
                } else {
                    // Another channel of this account holds a Domain of this name (made with kubectl).
                    Err(rules::domain_taken(domain).into())
                };
            }
            // Going, or gone since: create again.
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(TERMINATING_POLL).await;
            }
            _ => {
                return Err(ApiError::Unavailable(format!(
                    "{domain} was detached a moment ago and its removal has not finished; try again shortly"
                )));
            }
        }
    }
}

/// Check the domain's DNS records now (idempotent; retry while DNS propagates).
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/domains/{domain}/verify", tag = "domains", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("domain" = String, Path, description = "The attached domain")),
    responses((status = 200, body = DomainView), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn verify_domain(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id, domain)): Path<(Uuid, Uuid, String)>,
) -> Result<Json<DomainView>, ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageDomains).await?;
    let (channel, hostname) = channel_and_host(&state, &app, channel_id)?;
    let resource = attached(&state, &app, &channel, &domain)?;
    let request = format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"),
        &Uuid::new_v4().simple().to_string()[..8]
    );
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), &app.namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {VERIFY_ANNOTATION: request}}});
    api.patch(
        &resource.metadata.name.clone().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    let uid = resource.metadata.uid.clone().unwrap_or_default();
    let answered = slipway_core::platform::cache::poll_for(VERIFY_WAIT, || {
        state
            .cache()
            .domains()
            .into_iter()
            .find(|d| d.metadata.uid.as_deref() == Some(uid.as_str()))
            .filter(|d| {
                d.status.as_ref().and_then(|s| s.verify_request.as_deref()) == Some(&request)
            })
    })
    .await
    .map_err(|_| {
        ApiError::Unavailable(format!(
            "the check of {} did not finish within {VERIFY_WAIT:?}; try again",
            resource.spec.domain
        ))
    })?;
    Ok(Json(DomainView::build(&state, &answered, &hostname)))
}

/// Detach a domain: its route goes at once and its certificate is no longer renewed.
#[utoipa::path(delete, path = "/apps/{app_id}/channels/{channel_id}/domains/{domain}", tag = "domains", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("domain" = String, Path, description = "The attached domain")),
    responses((status = 200, body = Detached), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn detach_domain(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id, domain)): Path<(Uuid, Uuid, String)>,
) -> Result<Json<Detached>, ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageDomains).await?;
    let (channel, _) = channel_and_host(&state, &app, channel_id)?;
    let resource = attached(&state, &app, &channel, &domain)?;
    domain_release::detach(&state, &app.namespace, &resource).await?;
    Ok(Json(Detached { ok: true }))
}
