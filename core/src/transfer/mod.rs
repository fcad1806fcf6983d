//! Moving an app to another account: the console's ownership transfer (hosting API part 1, authentication rule 6:
//! console only, and no setting opens it; there is no route). Only the owner may, a person signed in to the console
//! (never an agent credential), confirming by typing the app's name.
//!
//! What an app is made of decides how it moves. Its resources live in the owner's namespace and the owner is part
//! of every hostname (`<app>-<owner>`), so the App and its Channels are written anew in the new owner's namespace
//! and get new ids; everything the platform database keeps under the old ids is re-keyed to the new ones in one
//! transaction: variables and secrets, the activity journal, notes and feedback, the mirror's settings, deploy env snapshots, the runtime-log
//! archive, SQL and bucket snapshots, and the records of each channel's database and bucket, so the operator
//! adopts the same database and bucket for the new channel instead of making new ones. The bare repository is
//! renamed into the new owner's directory. Then the old App is deleted: its channels' finalizers look their
//! database and bucket up by the old ids and find none of the moved ones to drop. Last, every channel that served
//! a commit is deployed again at that commit under its new hostname.
//!
//! A channel the operator has already given a fresh database or bucket under its new id (it reconciles the new
//! channel at once) has that record swapped with the moved one, so the old channel's finalizer removes the fresh,
//! empty one: nothing is orphaned and nothing moved is dropped.
//!
//! Memberships do not move: the new owner starts alone, and adds whom they choose. Carried over, the old owner's
//! members (any account the old owner added before the move) would keep roles on an app the new owner now answers
//! and pays for.
//!
//! Credentials do not move: the old owner and anyone who ran the app's code or read its variables has seen them.
//! The moved databases' roles get new passwords and the moved buckets new key pairs in the same transaction
//! ([`rekey`]); the data server takes the passwords and ends the roles' open sessions before it commits
//! ([`credentials`]), so the redeploy injects only secrets nobody had before.
//!
//! Refused before anything is written: a deploy in flight (409 `channel_busy`), custom domains or raw TCP forwards
//! (409: they are tied to hostnames and addresses that change; detach and unexpose first), an App or Channel
//! naming a GitOps `envSecret` (409: the Secret lives in the old namespace), an account that does not exist or is
//! the owner (404 / 400), a wrong confirmation (400 `invalid_confirmation`), a name the new owner already uses and
//! the new owner's channel cap (the same claims as creating channels: 400 / 403 `plan_limit_exceeded`), a database
//! without a data server to give its roles new passwords (503 `postgres_unavailable`). A failure
//! while writing undoes what was written (the new resources, the claims, the repository's move). Deploys (the
//! history and the images they built) do not move: they go with the old resources, and the new channels' history
//! starts with their redeploy.

mod credentials;
mod rekey;

use std::sync::Arc;

use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use slipway_crds::names::{self, AppName, ChannelName, GitRefBinding, Username};
use slipway_crds::plans::Plan;
use slipway_crds::{App, AppSpec, Channel, DeploySpec, labels};
use uuid::Uuid;

use crate::access::{self, Action, VisibleApp};
use crate::caller::Caller;
use crate::claims;
use crate::error::ApiError;
use crate::platform::tenancy::{self, FIELD_MANAGER};
use crate::state::AppState;

/// What the person asked for.
#[derive(Debug, Clone)]
pub struct Request {
    /// The app.
    pub app_id: Uuid,
    /// The new owner's username.
    pub to: String,
    /// The app's name, typed to confirm.
    pub confirm_name: String,
}

/// A moved app.
#[derive(Debug, Clone)]
pub struct Moved {
    /// Its new id.
    pub app_id: Uuid,
    /// Its new owner.
    pub to: String,
    /// The deploys queued under the new owner, one per channel that served a commit.
    pub deploys: Vec<String>,
}

/// The new owner, as the database knows them.
struct Target {
    id: Uuid,
    username: Username,
    plan: &'static Plan,
    namespace: String,
}

/// Moves the app `request.app_id` from `caller` (its owner) to the account `request.to`. See the module docs.
pub async fn transfer(
    state: &AppState,
    caller: &Caller,
    request: Request,
) -> Result<Moved, ApiError> {
    if caller.is_agent {
        return Err(ApiError::PermissionDenied(
            "ownership transfer is for people in the console, never for an agent credential".into(),
        ));
    }
    let app = access::authorize(state, caller, request.app_id, Action::TransferApp).await?;
    if request.confirm_name != app.name.as_str() {
        return Err(ApiError::InvalidConfirmation(format!(
            "type the app's name, {}, to confirm the transfer",
            app.name
        )));
    }
    let target = target(state, &request.to, &app).await?;
    let channels = app.channels(state);
    refuse_what_cannot_move(state, &app, &channels)?;
    let existing: Vec<String> = state
        .cache()
        .apps_in(&target.namespace)
        .iter()
        .map(|a| a.name_any())
        .collect();
    slipway_crds::rules::app_name_free(&app.name, existing.iter().map(String::as_str))?;

    let channel_ids: Vec<Uuid> = channels
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref()?.parse().ok())
        .collect();
    credentials::check_server(state, &channel_ids).await?;
    let names: Vec<ChannelName> = channels
        .iter()
        .map(|c| c.channel_name().parse())
        .collect::<Result<_, _>>()?;
    claim_all(state, &target, &app.name, &names).await?;
    let written = write_new(state, &app, &target, &channels).await;
    let (new_app, pairs) = match written {
        Ok(done) => done,
        Err(e) => {
            release_all(state, &target.namespace, &app.name, &names).await;
            return Err(e);
        }
    };
    let undo = |e: ApiError| async {
        undo_new(state, &target, &app.name, &names, &new_app).await;
        e
    };
    let old_repo = app.repo();
    let new_repo = slipway_git_store::RepoOf {
        id: new_app.id,
        owner: &target.username,
        name: &app.name,
    };
    if let Err(e) = state.repos().hand_over(old_repo, new_repo).await {
        return Err(undo(e.into()).await);
    }
    let rekeyed = match rekey::rekey(state, &app, &target, new_app.id, &pairs).await {
        Ok(rekeyed) => rekeyed,
        Err(e) => {
            let _ = state.repos().hand_over(new_repo, old_repo).await;
            return Err(undo(e.into()).await);
        }
    };
    // The data server takes the new passwords before the re-keying commits: a refusal there leaves everything
    // as it was, and no deploy is ever given a password the server does not know.
    let rekey::Rekeyed { tx, databases } = rekeyed;
    let old_plan = Plan::by_tier(&caller.plan).unwrap_or(target.plan);
    let locked = match credentials::give_to_server(state, &databases, target.plan, app.id).await {
        Ok(locked) => locked,
        Err(e) => {
            drop(tx);
            credentials::put_back(state, &databases, old_plan).await;
            let _ = state.repos().hand_over(new_repo, old_repo).await;
            return Err(undo(e).await);
        }
    };
    if let Err(e) = tx.commit().await {
        credentials::put_back(state, &databases, old_plan).await;
        locked.release().await;
        let _ = state.repos().hand_over(new_repo, old_repo).await;
        return Err(undo(e.into()).await);
    }
    locked.release().await;

    // The move is done; what follows tidies up after the old app, and only logs a failure.
    let apps: Api<App> = Api::namespaced(state.kube().clone(), &app.namespace);
    match apps
        .delete(app.name.as_str(), &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::error!(error = %e, app = %app.name, "the transferred app's old App could not be deleted")
        }
    }
    // The old owner's next request must not find it in this process's cache any more.
    if let Err(e) = state.cache().app_gone(&app.id.to_string()).await {
        tracing::error!(error = %e, "the transferred app's old App stayed in the cache");
    }
    if let Err(e) = claims::release_app(state, &app.namespace, &app.name).await {
        tracing::error!(error = %e, "the transferred app's old claims could not be released");
    }
    if let Err(e) = slipway_store::db::audit::record(
        state.db(),
        caller,
        Some(new_app.id),
        "app.transferred",
        serde_json::json!({"from": app.owner.as_str(), "to": target.username.as_str(), "previous_app_id": app.id}),
    )
    .await
    {
        tracing::error!(error = %e, "the transfer's audit event could not be recorded");
    }
    let mut deploys = Vec::new();
    for (old, new) in &pairs {
        let Some(sha) = old.status.as_ref().and_then(|s| s.current_sha.clone()) else {
            continue;
        };
        match redeploy(state, &new_app, new, sha).await {
            Ok(id) => deploys.push(id),
            Err(e) => {
                tracing::error!(error = %e, channel = %new.name_any(), "a transferred channel could not be deployed again")
            }
        }
    }
    Ok(Moved {
        app_id: new_app.id,
        to: target.username.to_string(),
        deploys,
    })
}

/// The account `to`: it must exist, be active and not be the owner.
async fn target(state: &AppState, to: &str, app: &VisibleApp) -> Result<Target, ApiError> {
    let username: Username = to
        .trim()
        .parse()
        .map_err(|_| ApiError::NotFound("account"))?;
    if username == app.owner {
        return Err(ApiError::bad_request(
            "the app already belongs to that account",
        ));
    }
    let user = slipway_store::db::users::by_username(state.db(), username.as_str())
        .await?
        .ok_or(ApiError::NotFound("account"))?;
    let active: bool = sqlx::query_scalar("SELECT deactivated_at IS NULL FROM users WHERE id = $1")
        .bind(user.id)
        .fetch_one(state.db())
        .await?;
    if !active {
        return Err(ApiError::NotFound("account"));
    }
    let plan =
        Plan::by_tier(&user.plan).ok_or_else(|| anyhow::anyhow!("unknown plan {}", user.plan))?;
    Ok(Target {
        id: user.id,
        namespace: labels::user_namespace(&username),
        username,
        plan,
    })
}

/// 409 for what a transfer cannot carry: a deploy in flight, custom domains, forwards, GitOps env Secrets.
fn refuse_what_cannot_move(
    state: &AppState,
    app: &VisibleApp,
    channels: &[Arc<Channel>],
) -> Result<(), ApiError> {
    if app.app.spec.env_secret.is_some() || channels.iter().any(|c| c.spec.env_secret.is_some()) {
        return Err(ApiError::Conflict(
            "the app or a channel names an envSecret, a Secret in the owner's namespace that cannot move; remove \
             the reference first"
                .into(),
        ));
    }
    for channel in channels {
        let resource = channel.name_any();
        if state
            .cache()
            .deploys_of(&app.namespace, &resource)
            .iter()
            .any(|d| {
                !matches!(
                    d.status.as_ref().map(|s| s.phase),
                    Some(slipway_crds::DeployPhase::Success | slipway_crds::DeployPhase::Failed)
                )
            })
        {
            return Err(ApiError::ChannelBusy(format!(
                "channel {} has a deploy queued or running; transfer once it finished",
                channel.channel_name()
            )));
        }
        if !state
            .cache()
            .domains_of(&app.namespace, &resource)
            .is_empty()
        {
            return Err(ApiError::Conflict(format!(
                "channel {} has custom domains, which point at hostnames that change; detach them first",
                channel.channel_name()
            )));
        }
        if state
            .cache()
            .forward_of(&app.namespace, &resource)
            .is_some()
        {
            return Err(ApiError::Conflict(format!(
                "channel {} is exposed as a raw TCP forward; unexpose it first",
                channel.channel_name()
            )));
        }
    }
    Ok(())
}

/// Claims every channel's slot and hostname for the new owner, or none.
async fn claim_all(
    state: &AppState,
    target: &Target,
    app: &AppName,
    channels: &[ChannelName],
) -> Result<(), ApiError> {
    for (i, channel) in channels.iter().enumerate() {
        let new = claims::NewChannel {
            owner_id: target.id,
            owner: &target.username,
            namespace: &target.namespace,
            app,
            channel,
            plan: target.plan,
        };
        if let Err(e) = claims::claim(state, &new).await {
            release_all(state, &target.namespace, app, &channels[..i]).await;
            return Err(e);
        }
    }
    Ok(())
}

async fn release_all(state: &AppState, namespace: &str, app: &AppName, channels: &[ChannelName]) {
    for channel in channels {
        if let Err(e) = claims::release(state, namespace, app, channel).await {
            tracing::error!(error = %e, "a claim of a failed transfer could not be released");
        }
    }
}

/// The new app: its resource and id.
struct NewApp {
    id: Uuid,
    resource: Arc<App>,
}

/// Writes the App and its Channels in the new owner's namespace; returns the new app and each old channel with
/// its new one.
async fn write_new(
    state: &AppState,
    app: &VisibleApp,
    target: &Target,
    channels: &[Arc<Channel>],
) -> Result<(NewApp, Vec<(Arc<Channel>, Arc<Channel>)>), ApiError> {
    tenancy::ensure_user_namespace(state.kube(), &target.username, target.plan.tier).await?;
    let spec = AppSpec {
        owner: target.username.to_string(),
        // Port forwarding needs the new owner's plan to include it; the rest carries over.
        port_forwarding_enabled: app.app.spec.port_forwarding_enabled
            && target.plan.port_forwarding,
        ..app.app.spec.clone()
    };
    let resource = App::new(app.name.as_str(), spec);
    let apps: Api<App> = Api::namespaced(state.kube().clone(), &target.namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let created = match apps.create(&params, &resource).await {
        Ok(app) => app,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(ApiError::Conflict(format!(
                "{} already has an app named {}",
                target.username, app.name
            )));
        }
        Err(e) => return Err(crate::channels::admission_or(e)),
    };
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let written = async {
        let new_app = state.cache().app_appeared(&uid).await?;
        let mut pairs = Vec::new();
        for old in channels {
            let name: ChannelName = old.channel_name().parse()?;
            let binding: GitRefBinding = old.spec.git_ref_binding.parse()?;
            let new = match crate::channels::create(state, &created, &name, &binding).await {
                Ok(channel) => channel,
                // The operator makes a missing prod channel of a new App too; whichever write lands first is it.
                Err(ApiError::BadRequest(_)) => {
                    Api::<Channel>::namespaced(state.kube().clone(), &target.namespace)
                        .get(&names::channel_resource_name(&app.name, &name))
                        .await?
                }
                Err(e) => return Err(e),
            };
            let new = state
                .cache()
                .channel_appeared(new.metadata.uid.as_deref().unwrap_or_default())
                .await?;
            pairs.push((old.clone(), new));
        }
        Ok::<_, ApiError>((new_app, pairs))
    };
    match written.await {
        Ok((resource, pairs)) => Ok((
            NewApp {
                id: uid
                    .parse()
                    .map_err(|_| anyhow::anyhow!("App uid {uid} is not a uuid"))?,
                resource,
            },
            pairs,
        )),
        Err(e) => {
            let _ = apps
                .delete(app.name.as_str(), &DeleteParams::background())
                .await;
            Err(e)
        }
    }
}

/// Takes back the new App and the new owner's claims after a failed move.
async fn undo_new(
    state: &AppState,
    target: &Target,
    app: &AppName,
    channels: &[ChannelName],
    new_app: &NewApp,
) {
    let apps: Api<App> = Api::namespaced(state.kube().clone(), &target.namespace);
    if let Err(e) = apps.delete(app.as_str(), &DeleteParams::background()).await {
        tracing::error!(error = %e, "the new App of a failed transfer could not be deleted");
    }
    let _ = state.cache().app_gone(&new_app.id.to_string()).await;
    release_all(state, &target.namespace, app, channels).await;
}

/// Deploys `sha` again on the moved channel `channel`.
async fn redeploy(
    state: &AppState,
    app: &NewApp,
    channel: &Channel,
    sha: String,
) -> Result<String, ApiError> {
    let visible = VisibleApp::from_resource(app.resource.clone(), access::Role::Owner)
        .ok_or_else(|| anyhow::anyhow!("the new App is incomplete"))?;
    let spec = DeploySpec {
        channel: channel.name_any(),
        sha: Some(sha),
        git_ref: None,
        rewind_of: None,
        image: None,
    };
    crate::deploys::create(state, &visible, channel, spec).await
}
