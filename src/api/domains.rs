//! `/apps/{app_id}/channels/{cid}/domains`: attach, list, verify and detach custom domains. Each attached domain
//! is a `Domain` resource in the app's namespace, named after the domain, which the operator verifies and
//! certifies; these routes write it and read it back from the cache, and `kubectl get domains` shows the same.
//!
//! - Attach checks the name (the shared IDNA rules and the platform's own domain), then re-attach on the same
//!   channel (the existing row, same token), then `domain_taken` across every account, then the 5-domain limit —
//!   the rules the webhook applies to Domains written with kubectl.
//! - The verification token is derived from the new resource's uid ([`slipway_crds::domain::verification_token`]),
//!   so the records are answered at once, before the operator has written them.
//! - Verify asks the operator for a check (an annotation) and answers once the check is recorded.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use slipway_crds::domain::{VERIFY_ANNOTATION, dns_records};
use slipway_crds::names::{ChannelName, DomainName};
use slipway_crds::{Channel, DnsRecords, Domain, DomainPhase, DomainSpec};
use slipway_webhooks::rules;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{self, Action, VisibleApp};
use super::claims;
use super::error::{ApiError, ErrorEnvelope};
use super::extract::{Json, Path};
use super::state::AppState;
use crate::auth::{Caller, scopes};

/// The longest a verify waits for the operator's check (two lookups, each retried once on a 3 s timeout, fit).
const VERIFY_WAIT: Duration = Duration::from_secs(30);

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
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope)))]
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
    let resource = Domain::new(
        domain.as_str(),
        DomainSpec {
            channel: channel_name.clone(),
            domain: domain.to_string(),
        },
    );
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), &app.namespace);
    let created = match api.create(&PostParams::default(), &resource).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(domain.as_str()).await? {
            // A parallel attachment of the same domain to this channel made it first: the answer of a re-attach,
            // and the claim is that attachment's.
            Some(existing) if existing.spec.channel == channel_name => existing,
            // Another channel of this account holds a Domain of this name (made with kubectl): taken.
            _ => {
                claims::release_domain(&state, &app.namespace, domain.as_str()).await?;
                return Err(rules::domain_taken(&domain).into());
            }
        },
        Err(e) => {
            claims::release_domain(&state, &app.namespace, domain.as_str()).await?;
            return Err(match e {
                kube::Error::Api(s) if s.code == 400 || s.code == 422 => {
                    ApiError::bad_request(s.message)
                }
                e => e.into(),
            });
        }
    };
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let cached = state.cache().domain_where(&uid, |_| true).await?;
    Ok((
        StatusCode::CREATED,
        Json(DomainView::build(&state, &cached, &hostname)),
    ))
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
    let answered = crate::platform::cache::poll_for(VERIFY_WAIT, || {
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
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), &app.namespace);
    match api
        .delete(
            &resource.metadata.name.clone().unwrap_or_default(),
            &DeleteParams::background(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    state
        .cache()
        .domain_gone(resource.metadata.uid.as_deref().unwrap_or_default())
        .await?;
    claims::release_domain(&state, &app.namespace, &resource.spec.domain).await?;
    Ok(Json(Detached { ok: true }))
}
