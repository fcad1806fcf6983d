//! `POST .../rewind`: back to the channel's previous successful deploy's image without a build. It writes a
//! Deploy with `spec.rewindOf` (the earlier Deploy) and `spec.image` (the image that deploy recorded); the Deploy
//! reconciler skips the build and runs that image with the channel's current environment, through the same
//! pre-deploy snapshot, readiness check and Service switch as any deploy. The checks before the write (scope, role,
//! 404 for an app the caller cannot see, the channel) are the deploy route's own.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use slipway_crds::names::is_image_by_digest;
use slipway_crds::{Deploy, DeployPhase, DeploySpec, Template};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::deploys::deploy_target;
use super::extract::{Json, Path};
use slipway_core::caller::Caller;
use slipway_core::deploys::create as create_deploy;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(rewind))
}

/// Rewind trigger response: the deploy trigger response, plus what the rewind goes back to.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RewindTriggered {
    /// The new deploy's id.
    pub deploy_id: String,
    /// The channel.
    pub channel_id: String,
    /// Always `queued`.
    pub status: String,
    /// The id of the earlier deploy whose image runs again.
    pub rewound_from: String,
    /// The commit that image was built from (the channel's `current_sha` once the rewind is live).
    pub sha: String,
}

/// Why a channel has nothing to rewind to.
#[derive(Debug, PartialEq)]
pub enum NoTarget {
    /// No deploy of the channel has gone live.
    NeverLive,
    /// Every successful deploy ran the image that is live now.
    OneImage,
}

impl NoTarget {
    fn message(&self) -> &'static str {
        match self {
            NoTarget::NeverLive => {
                "nothing to rewind to: no deploy of this channel has gone live yet"
            }
            NoTarget::OneImage => {
                "nothing to rewind to: the channel has one successful deploy (or only ever ran the image that is live); a rewind needs an earlier successful deploy"
            }
        }
    }
}

/// The deploy a rewind goes back to, from the channel's deploys newest first: the newest successful deploy older
/// than the live one (the newest success) whose image differs from the live image. A redeploy of the live image is
/// skipped; a second rewind returns to the image the first one replaced, as that is now the previous success.
pub fn target(history: &[Arc<Deploy>]) -> Result<&Deploy, NoTarget> {
    let image = |d: &Deploy| {
        d.status
            .as_ref()
            .filter(|s| s.phase == DeployPhase::Success)
            .and_then(|s| s.image.as_ref())
            .filter(|i| is_image_by_digest(&i.reference))
            .map(|i| i.reference.clone())
    };
    let mut successes = history
        .iter()
        .map(AsRef::as_ref)
        .filter_map(|d| image(d).map(|i| (d, i)));
    let (_, live) = successes.next().ok_or(NoTarget::NeverLive)?;
    successes
        .find(|(_, i)| *i != live)
        .map(|(d, _)| d)
        .ok_or(NoTarget::OneImage)
}

/// Go back to the channel's previous successful deploy's image, without a build (app and docker apps).
///
/// Writes a new deploy that runs the image of the newest successful deploy before the live one whose image
/// differs, with the channel's current environment; it queues behind deploys in flight, takes the pre-deploy
/// snapshot and goes live after the same readiness check as any deploy. Its log has no `[build]` lines. Data is not
/// restored.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/rewind", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 202, body = RewindTriggered, description = "the rewind deploy is queued"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied, or permission_denied for a role that may not deploy"),
              (status = 404, body = ErrorEnvelope, description = "app or channel not found, or not visible to the caller"),
              (status = 409, body = ErrorEnvelope, description = "conflict: a static app (no images), or a channel without an earlier successful deploy of another image")))]
async fn rewind(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<RewindTriggered>), ApiError> {
    let (app, channel) = deploy_target(&state, &caller, app_id, channel_id).await?;
    if app.app.spec.template == Template::Static {
        return Err(ApiError::Conflict(
            "a static app has no images to rewind to; deploy the earlier commit instead".into(),
        ));
    }
    let history = state
        .cache()
        .deploys_of(&app.namespace, &channel.name_any());
    let rewound = target(&history).map_err(|e| ApiError::Conflict(e.message().into()))?;
    let status = rewound.status.clone().unwrap_or_default();
    let image = status
        .image
        .ok_or_else(|| anyhow::anyhow!("a rewind target without an image"))?;
    let sha = status.resolved_sha.unwrap_or_else(|| image.tag.clone());
    let spec = DeploySpec {
        channel: channel.name_any(),
        sha: Some(sha.clone()),
        git_ref: None,
        rewind_of: Some(rewound.name_any()),
        image: Some(image.reference),
    };
    let deploy_id = create_deploy(&state, &app, &channel, spec).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RewindTriggered {
            deploy_id,
            channel_id: channel_id.to_string(),
            status: "queued".to_owned(),
            rewound_from: rewound.uid().unwrap_or_default(),
            sha,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(name: &str, phase: &str, digest: Option<char>) -> Arc<Deploy> {
        let mut status = json!({"phase": phase});
        if let Some(c) = digest {
            status["image"] = json!({
                "reference": format!("reg/ns/web-prod@sha256:{}", c.to_string().repeat(64)),
                "tag": "1".repeat(40), "sizeBytes": 1, "created": "2026-01-01T00:00:00Z"
            });
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
                "metadata": {"name": name},
                "spec": {"channel": "web.prod", "sha": "master"},
                "status": status
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_target_is_the_newest_earlier_success_of_another_image() {
        // Newest first: a failed deploy, the live one, a redeploy of the same image, then the target.
        let history = vec![
            deploy("d5", "failed", None),
            deploy("d4", "success", Some('b')),
            deploy("d3", "success", Some('b')),
            deploy("d2", "failed", Some('c')),
            deploy("d1", "success", Some('a')),
        ];
        assert_eq!(target(&history).unwrap().name_any(), "d1");
    }

    #[test]
    fn a_channel_needs_two_successes_of_different_images() {
        assert_eq!(target(&[]).unwrap_err(), NoTarget::NeverLive);
        let once = vec![
            deploy("d2", "failed", None),
            deploy("d1", "success", Some('a')),
        ];
        assert_eq!(target(&once).unwrap_err(), NoTarget::OneImage);
        let same = vec![
            deploy("d2", "success", Some('a')),
            deploy("d1", "success", Some('a')),
        ];
        assert_eq!(target(&same).unwrap_err(), NoTarget::OneImage);
    }

    #[test]
    fn a_second_rewind_returns_to_the_image_the_first_replaced() {
        // d3 rewound to d1's image; the previous success is now d2.
        let history = vec![
            deploy("d3", "success", Some('a')),
            deploy("d2", "success", Some('b')),
            deploy("d1", "success", Some('a')),
        ];
        assert_eq!(target(&history).unwrap().name_any(), "d2");
    }
}
