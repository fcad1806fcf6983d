//! Raw TCP forwarding: `POST`/`DELETE /apps/{app_id}/channels/{cid}/forward` and `GET /apps/{app_id}/forwards`.
//! Each exposed channel is a `Forward` resource in the app's namespace, named after its Channel (so a channel has
//! at most one, and two racing exposes meet at the apiserver); the operator allocates its public address and the
//! edge listens there. These routes write the resource and read it back from the cache, so `kubectl get forwards`
//! shows the same endpoints.
//!
//! Refusals, in this order after the caller's role: a static channel (400: it runs no process), an owner's plan
//! without port forwarding (403 `plan_limit_exceeded`), the app's toggle off (409 `conflict`: turning it on is a
//! protected action of `PATCH /apps/{app_id}`), then the allowlist (400: at most 16 IPv4 or IPv6 addresses or
//! ranges; the parser the webhook uses).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use slipway_crds::forward::Cidr;
use slipway_crds::names;
use slipway_crds::{Channel, Forward, ForwardSpec, Template};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, OptionalJson, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The longest an expose waits for the operator to allocate the endpoint's address.
const ALLOCATION_WAIT: Duration = Duration::from_secs(15);

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(expose, unexpose))
        .routes(routes!(list_forwards))
}

/// `POST .../forward` request.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Expose {
    /// IPv4 or IPv6 addresses or ranges (`203.0.113.7`, `198.51.100.0/24`, `2001:db8::/32`) allowed to connect;
    /// at most 16. Empty or omitted: anyone.
    #[serde(default)]
    pub allow_cidrs: Vec<String>,
}

/// A public raw-TCP endpoint of a channel.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForwardView {
    /// The exposed channel's id.
    pub channel_id: Uuid,
    /// The exposed channel's name.
    pub channel: String,
    /// Where clients connect.
    pub host: String,
    /// The public port (bytes reach the channel's `SVC_FORWARD_PORT`, 7000).
    pub port: u16,
    /// Who may connect, in CIDR notation; empty: anyone.
    pub allow_cidrs: Vec<String>,
    /// False while the allocation exists but does not serve (the app's toggle or the owner's plan is off).
    pub active: bool,
    /// When the channel was exposed.
    pub created_at: Option<String>,
}

/// `{forwards: [...]}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForwardList {
    /// One per exposed channel, in channel-name order.
    pub forwards: Vec<ForwardView>,
}

impl ForwardView {
    /// The view of an allocated `forward` of `channel`; `None` while it has no address.
    fn build(forward: &Forward, channel: &Channel) -> Option<Self> {
        let status = forward.status.as_ref()?;
        let (host, port) = (status.host.clone()?, status.port?);
        Some(Self {
            channel_id: channel.metadata.uid.as_deref()?.parse().ok()?,
            channel: channel.channel_name().to_owned(),
            host,
            port: u16::try_from(port).ok()?,
            allow_cidrs: allowlist_as_written(&forward.spec.allow_cidrs),
            active: status.active,
            created_at: forward
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
        })
    }
}

fn allowlist_as_written(cidrs: &[Cidr]) -> Vec<String> {
    cidrs.iter().map(|c| c.0.clone()).collect()
}

/// The allowlist of a request in its stored form: each entry parsed (a bare address is its own /32 or /128).
fn parse_allowlist(written: &[String]) -> Result<Vec<Cidr>, ApiError> {
    let normalized: Vec<String> = written
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            match entry.parse::<std::net::IpAddr>() {
                Ok(ip) => format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }),
                Err(_) => entry.to_owned(),
            }
        })
        .collect();
    names::parse_allow_cidrs(&normalized)?;
    Ok(normalized.into_iter().map(Cidr).collect())
}

/// The channel's Forward, if it is exposed.
fn forward_of(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
) -> Option<std::sync::Arc<Forward>> {
    state.cache().forward_of(
        &app.namespace,
        &channel.metadata.name.clone().unwrap_or_default(),
    )
}

/// What refuses exposing `channel` of `app` now, if anything.
async fn refusal(
    state: &AppState,
    caller: &Caller,
    app: &VisibleApp,
    channel: &Channel,
) -> Result<(), ApiError> {
    if app.app.spec.template == Template::Static {
        return Err(ApiError::bad_request(
            "a static channel runs no process to forward to; raw TCP forwarding needs an app or docker channel",
        ));
    }
    let (plan, _) = super::apps::owner_facts(state, caller, app).await?;
    if !plan.port_forwarding {
        return Err(ApiError::PlanLimit(format!(
            "the {} plan does not include port forwarding",
            plan.tier
        )));
    }
    if !app.app.spec.port_forwarding_enabled {
        return Err(ApiError::Conflict(format!(
            "port forwarding is off for app {}; turn it on with PATCH /apps/{{app_id}} {{\"port_forwarding_enabled\": true}} (channel {})",
            app.name,
            channel.channel_name()
        )));
    }
    Ok(())
}

/// Waits until the cached Forward `name` has an address and shows `wanted` as its allowlist.
async fn allocated(
    state: &AppState,
    app: &VisibleApp,
    name: &str,
    wanted: &[Cidr],
) -> Result<std::sync::Arc<Forward>, ApiError> {
    slipway_core::platform::cache::poll_for(ALLOCATION_WAIT, || {
        state
            .cache()
            .forward_of(&app.namespace, name)
            .filter(|f| f.spec.allow_cidrs == wanted)
            .filter(|f| f.status.as_ref().is_some_and(|s| s.port.is_some()))
    })
    .await
    .map_err(|_| {
        let why = state
            .cache()
            .forward_of(&app.namespace, name)
            .and_then(|f| f.status.clone())
            .and_then(|s| s.conditions.into_iter().find(|c| c.status == "False"))
            .map(|c| format!(": {}", c.message))
            .unwrap_or_default();
        ApiError::Unavailable(format!(
            "the forward was recorded but has no address yet{why}; GET /apps/{{app_id}}/forwards shows it once it has"
        ))
    })
}

/// Expose a channel's `SVC_FORWARD_PORT` (7000) as a public raw-TCP endpoint; re-posting keeps the address and
/// replaces the allowlist.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/forward", tag = "forwarding", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = Expose,
    responses((status = 201, body = ForwardView, description = "Exposed"),
              (status = 200, body = ForwardView, description = "Already exposed: same address, allowlist replaced"),
              (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn expose(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    OptionalJson(body): OptionalJson<Expose>,
) -> Result<(StatusCode, Json<ForwardView>), ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageForwards).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    refusal(&state, &caller, &app, &channel).await?;
    let allow = parse_allowlist(&body.unwrap_or_default().allow_cidrs)?;
    let name = channel.metadata.name.clone().unwrap_or_default();
    let api: Api<Forward> = Api::namespaced(state.kube().clone(), &app.namespace);
    let status = match forward_of(&state, &app, &channel) {
        Some(existing) => {
            let existing = existing.metadata.name.clone().unwrap_or_default();
            replace_allowlist(&api, &existing, &allow).await?;
            StatusCode::OK
        }
        None => {
            let mut resource = Forward::new(
                &name,
                ForwardSpec {
                    channel: name.clone(),
                    allow_cidrs: allow.clone(),
                },
            );
            resource.metadata.owner_references =
                Some(vec![slipway_core::owners::owned_by(channel.as_ref())?]);
            match api.create(&PostParams::default(), &resource).await {
                Ok(_) => StatusCode::CREATED,
                // A racing expose of the same channel made it first: this one replaces the allowlist.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    replace_allowlist(&api, &name, &allow).await?;
                    StatusCode::OK
                }
                Err(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
                    return Err(ApiError::bad_request(s.message));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let forward = allocated(&state, &app, &name, &allow).await?;
    let view = ForwardView::build(&forward, &channel)
        .ok_or_else(|| anyhow::anyhow!("forward {name} has no address after allocation"))?;
    Ok((status, Json(view)))
}

/// Replaces the allowlist of the Forward `name` (its address stays).
async fn replace_allowlist(api: &Api<Forward>, name: &str, allow: &[Cidr]) -> Result<(), ApiError> {
    let patch = serde_json::json!({"spec": {"allowCidrs": allow}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// List the app's exposed channels.
#[utoipa::path(get, path = "/apps/{app_id}/forwards", tag = "forwarding", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = ForwardList), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_forwards(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<ForwardList>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let mut channels = app.channels(&state);
    channels.sort_by(|a, b| a.channel_name().cmp(b.channel_name()));
    let forwards = channels
        .iter()
        .filter_map(|channel| {
            forward_of(&state, &app, channel).and_then(|f| ForwardView::build(&f, channel))
        })
        .collect();
    Ok(Json(ForwardList { forwards }))
}

/// Stop exposing a channel: no new connections; open sessions last until a redeploy replaces the container. A
/// later expose gets a new address.
#[utoipa::path(delete, path = "/apps/{app_id}/channels/{channel_id}/forward", tag = "forwarding", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 204, description = "Unexposed"), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn unexpose(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageForwards).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let forward = forward_of(&state, &app, &channel).ok_or(ApiError::NotFound("forward"))?;
    let name = forward.metadata.name.clone().unwrap_or_default();
    let api: Api<Forward> = Api::namespaced(state.kube().clone(), &app.namespace);
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    state.cache().forward_gone(&app.namespace, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_become_single_host_ranges_and_bad_entries_are_refused() {
        let parsed = parse_allowlist(&[
            "203.0.113.7".into(),
            " 198.51.100.0/24".into(),
            "2001:db8::1".into(),
        ])
        .unwrap();
        assert_eq!(
            allowlist_as_written(&parsed),
            ["203.0.113.7/32", "198.51.100.0/24", "2001:db8::1/128"]
        );
        for bad in ["10.0.0.0/33", "example.com", "", "2001:db8::/129"] {
            assert!(parse_allowlist(&[bad.into()]).is_err(), "{bad}");
        }
        let seventeen: Vec<String> = (0..17).map(|i| format!("10.0.{i}.0/24")).collect();
        assert!(parse_allowlist(&seventeen).is_err());
        assert!(parse_allowlist(&seventeen[..16]).is_ok());
    }
}
