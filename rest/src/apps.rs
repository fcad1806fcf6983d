//! `/apps`: list, create, read, change settings of and delete apps. An app is an `App` resource in its owner's
//! namespace plus its `<app>.prod` Channel and its bare git repository; creating one writes all three or nothing.

use axum::extract::State;
use axum::http::StatusCode;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use slipway_crds::names::{self, AppName, ChannelName, GitRefBinding, Username};
use slipway_crds::plans::Plan;
use slipway_crds::rules;
use slipway_crds::{App, AppSpec, Channel, Template};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::domain_release::{self, Holder};
use super::extract::{Json, Path};
use super::views::{AppView, OwnerFacts};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::channels::{admission_or, create as create_channel_resource};
use slipway_core::claims;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::platform::tenancy::{self, FIELD_MANAGER};
use slipway_core::state::AppState;
use slipway_git_store::RepoOf;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_apps, create_app))
        .routes(routes!(get_app, update_app, delete_app))
}

/// `GET /apps` response.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct AppList {
    /// The apps the caller can see.
    pub apps: Vec<AppView>,
}

/// `POST /apps` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateApp {
    /// DNS label, at most 40 characters, without a reserved prefix.
    pub name: String,
    /// `static` (default), `app` or `docker`.
    pub template: Option<String>,
}

/// `PATCH /apps/{app_id}` request: the app's settings. Omitted fields keep their value.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UpdateApp {
    /// External SQL access (a protected action).
    pub external_db_access_enabled: Option<bool>,
    /// External object-store access (a protected action).
    pub external_blob_access_enabled: Option<bool>,
    /// Public raw-TCP endpoints (a protected action; needs a plan with port forwarding).
    pub port_forwarding_enabled: Option<bool>,
    /// Agent access to protected actions on this app; null inherits the account default. Only the owner, and never
    /// with an agent credential, may change it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<bool>)]
    pub agent_protected_actions_enabled: Option<Option<bool>>,
}

/// Tells an absent field (`None`) from an explicit null (`Some(None)`).
fn double_option<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<bool>>, D::Error> {
    Option::<bool>::deserialize(d).map(Some)
}

/// The plan and agent-access default of an app's owner.
pub(crate) async fn owner_facts(
    state: &AppState,
    caller: &Caller,
    app: &VisibleApp,
) -> Result<(&'static Plan, bool), ApiError> {
    let (plan, default) = if app.owner.as_str() == caller.username {
        (caller.plan.clone(), caller.agent_protected_actions_default)
    } else {
        let owner = slipway_store::db::users::by_username(state.db(), app.owner.as_str()).await?;
        let owner = owner.ok_or_else(|| {
            anyhow::anyhow!("owner {} of app {} has no account", app.owner, app.name)
        })?;
        (owner.plan, owner.agent_protected_actions_default)
    };
    let plan = Plan::by_tier(&plan).ok_or_else(|| anyhow::anyhow!("unknown plan {plan}"))?;
    Ok((plan, default))
}

async fn view(state: &AppState, caller: &Caller, app: &VisibleApp) -> Result<AppView, ApiError> {
    let (plan, agent_protected_actions_default) = owner_facts(state, caller, app).await?;
    Ok(AppView::build(
        state,
        app,
        &OwnerFacts {
            plan,
            agent_protected_actions_default,
        },
    ))
}

/// List the apps the caller can see.
#[utoipa::path(get, path = "/apps", tag = "apps", security(("bearer" = [])),
    responses((status = 200, body = AppList), (status = 401, body = ErrorEnvelope)))]
async fn list_apps(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AppList>, ApiError> {
    let mut apps = Vec::new();
    for app in access::visible_apps(&state, &caller).await? {
        apps.push(view(&state, &caller, &app).await?);
    }
    Ok(Json(AppList { apps }))
}

/// Create an app with its prod channel and an empty git repository.
#[utoipa::path(post, path = "/apps", tag = "apps", security(("bearer" = [])), request_body = CreateApp,
    responses((status = 200, body = AppView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope)))]
async fn create_app(
    State(state): State<AppState>,
    caller: Caller,
    Json(req): Json<CreateApp>,
) -> Result<Json<AppView>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let name: AppName = req.name.parse()?;
    let template: Template = req.template.as_deref().unwrap_or("static").parse()?;
    let owner: Username = caller
        .username
        .parse()
        .map_err(|e: names::InvalidName| anyhow::anyhow!(e))?;
    let plan = Plan::by_tier(&caller.plan)
        .ok_or_else(|| anyhow::anyhow!("unknown plan {}", caller.plan))?;

    // The cross-object rules, checked against the cache for a clear answer; the claim in the platform database
    // decides the cap and the hostname (parallel requests read the same cache), and the webhook checks again at write.
    let namespace = access::own_namespace(&caller)?;
    let existing: Vec<String> = state
        .cache()
        .apps_in(&namespace)
        .iter()
        .map(|a| a.name_any())
        .collect();
    rules::app_name_free(&name, existing.iter().map(String::as_str))?;
    let prod = ChannelName::prod();
    let binding = GitRefBinding::prod();
    check_new_channel(&state, &namespace, &name, &prod, &binding, &owner, plan)?;
    let new = claims::NewChannel {
        owner_id: caller.user_id,
        owner: &owner,
        namespace: &namespace,
        app: &name,
        channel: &prod,
        plan,
    };
    claims::claim(&state, &new).await?;
    let created = write_app(&state, &namespace, &name, template, &owner, plan).await;
    if created.is_err() {
        claims::release(&state, &namespace, &name, &prod).await?;
    }
    let uid = created?;
    let visible = access::visible_app(
        &state,
        &caller,
        uid.parse()
            .map_err(|_| anyhow::anyhow!("App uid {uid} is not a uuid"))?,
    )
    .await?;
    Ok(Json(view(&state, &caller, &visible).await?))
}

/// Writes the App, its prod Channel and its repository, or nothing; returns the App's uid.
async fn write_app(
    state: &AppState,
    namespace: &str,
    name: &AppName,
    template: Template,
    owner: &Username,
    plan: &Plan,
) -> Result<String, ApiError> {
    let prod = ChannelName::prod();
    let binding = GitRefBinding::prod();
    tenancy::ensure_user_namespace(state.kube(), owner, plan.tier).await?;
    let app = App::new(
        name.as_str(),
        AppSpec {
            template,
            owner: owner.to_string(),
            external_db_access_enabled: false,
            external_blob_access_enabled: false,
            port_forwarding_enabled: false,
            agent_protected_actions_enabled: None,
            env_secret: None,
        },
    );
    let apps: Api<App> = Api::namespaced(state.kube().clone(), namespace);
    let app = match apps
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &app,
        )
        .await
    {
        Ok(app) => app,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(ApiError::BadRequest(format!(
                "an app named {name} already exists"
            )));
        }
        Err(e) => return Err(admission_or(e)),
    };
    let uid = app.metadata.uid.clone().unwrap_or_default();
    let repo = RepoOf {
        id: uid.parse().unwrap_or_default(),
        owner,
        name,
    };

    // From here on a failure removes the App again, so nothing half-made is left behind.
    let rest = async {
        // The operator creates a missing prod channel too; whichever write lands first is the channel.
        let channel = match create_channel_resource(state, &app, &prod, &binding).await {
            Ok(channel) => channel,
            Err(ApiError::BadRequest(_)) => {
                Api::<Channel>::namespaced(state.kube().clone(), namespace)
                    .get(&names::channel_resource_name(name, &prod))
                    .await?
            }
            Err(e) => return Err(e),
        };
        state.repos().create(repo).await?;
        state.cache().app_appeared(&uid).await?;
        state
            .cache()
            .channel_appeared(channel.metadata.uid.as_deref().unwrap_or_default())
            .await?;
        Ok::<_, ApiError>(())
    };
    if let Err(e) = rest.await {
        let _ = apps
            .delete(name.as_str(), &DeleteParams::background())
            .await;
        let _ = state.repos().delete(repo).await;
        return Err(e);
    }
    Ok(uid)
}

/// Checks a new channel against the cached channels of the account and of the platform.
pub(super) fn check_new_channel(
    state: &AppState,
    namespace: &str,
    app: &AppName,
    channel: &ChannelName,
    binding: &GitRefBinding,
    owner: &Username,
    plan: &Plan,
) -> Result<(), ApiError> {
    let account_channels = state.cache().channels_in(namespace);
    let app_channels: Vec<(String, String)> = account_channels
        .iter()
        .filter(|c| c.spec.app == app.as_str())
        .map(|c| (c.channel_name().to_owned(), c.spec.git_ref_binding.clone()))
        .collect();
    let all_apps = state.cache().apps();
    let counted = rules::counted_channels(
        namespace,
        all_apps.iter().map(|a| &**a),
        account_channels.iter().map(|c| &**c),
    );
    let channels = state.cache().channels();
    let taken =
        rules::existing_host_labels(all_apps.iter().map(|a| &**a), channels.iter().map(|c| &**c));
    let new = rules::NewChannel {
        app,
        name: channel,
        binding,
        owner,
    };
    rules::check_new_channel(
        &new,
        plan,
        app_channels.iter().map(|(n, b)| (n.as_str(), b.as_str())),
        counted,
        taken.iter().map(String::as_str),
    )?;
    Ok(())
}

/// Read one app with all its channels.
#[utoipa::path(get, path = "/apps/{app_id}", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = AppView), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn get_app(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<AppView>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    Ok(Json(view(&state, &caller, &app).await?))
}

/// Change an app's settings: the access toggles and the agent-access override.
#[utoipa::path(patch, path = "/apps/{app_id}", tag = "apps", security(("bearer" = [])), request_body = UpdateApp,
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = AppView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn update_app(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<UpdateApp>,
) -> Result<Json<AppView>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::ChangeSettings).await?;
    let spec = &app.app.spec;
    let override_now = spec.agent_protected_actions_enabled;
    let toggles = [
        (
            "external SQL access",
            req.external_db_access_enabled,
            spec.external_db_access_enabled,
        ),
        (
            "external object-store access",
            req.external_blob_access_enabled,
            spec.external_blob_access_enabled,
        ),
        (
            "the port-forwarding toggle",
            req.port_forwarding_enabled,
            spec.port_forwarding_enabled,
        ),
    ];
    for (action, wanted, now) in toggles {
        if wanted.is_some_and(|w| w != now) {
            access::require_protected(&state, &caller, &app, action).await?;
        }
    }
    if req
        .agent_protected_actions_enabled
        .is_some_and(|wanted| wanted != override_now)
    {
        if caller.is_agent {
            return Err(ApiError::ProtectedAction("changing agent access".into()));
        }
        app.require(Action::ChangeAgentAccess)?;
    }
    let (plan, _) = owner_facts(&state, &caller, &app).await?;
    if req.port_forwarding_enabled == Some(true) && !plan.port_forwarding {
        return Err(ApiError::PlanLimit(format!(
            "the {} plan does not include port forwarding",
            plan.tier
        )));
    }

    let mut patch = serde_json::Map::new();
    let fields = [
        (
            "externalDbAccessEnabled",
            req.external_db_access_enabled.map(serde_json::Value::from),
        ),
        (
            "externalBlobAccessEnabled",
            req.external_blob_access_enabled
                .map(serde_json::Value::from),
        ),
        (
            "portForwardingEnabled",
            req.port_forwarding_enabled.map(serde_json::Value::from),
        ),
        (
            "agentProtectedActionsEnabled",
            req.agent_protected_actions_enabled
                .map(|v| v.map_or(serde_json::Value::Null, serde_json::Value::from)),
        ),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            patch.insert(key.into(), value);
        }
    }
    let apps: Api<App> = Api::namespaced(state.kube().clone(), &app.namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let updated = apps
        .patch(
            app.name.as_str(),
            &params,
            &Patch::Merge(serde_json::json!({ "spec": patch })),
        )
        .await
        .map_err(admission_or)?;
    if req.external_db_access_enabled == Some(false) {
        // Open external SQL sessions end now; other replicas' end at their next check.
        state.sql_sessions().cut_app(app_id);
    }
    state
        .cache()
        .app_at_generation(
            &app_id.to_string(),
            updated.metadata.generation.unwrap_or_default(),
        )
        .await?;
    let app = access::visible_app(&state, &caller, app_id).await?;
    Ok(Json(view(&state, &caller, &app).await?))
}

/// Delete an app: its channels, workloads, routes and repository; its custom domains are free at once.
#[utoipa::path(delete, path = "/apps/{app_id}", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn delete_app(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::DeleteApp).await?;
    let apps: Api<App> = Api::namespaced(state.kube().clone(), &app.namespace);
    // Background propagation: the Channels (owned by the App) and their children go through garbage collection.
    match apps
        .delete(app.name.as_str(), &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    domain_release::detach_all(&state, &app.namespace, Holder::App(&app.name)).await?;
    state.repos().delete(app.repo()).await?;
    claims::release_app(&state, &app.namespace, &app.name).await?;
    slipway_data::exports::forget_app(&state, app_id)
        .await
        .map_err(ApiError::Internal)?;
    state.cache().app_gone(&app_id.to_string()).await?;
    // After the app left the cache, so the log archive can no longer record a generation of it.
    slipway_core::platform::sweep::forget_app(state.db(), app_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
