//! A finished build Job: its output goes to the deploy log, its image is sized against the plan's cap (and deleted
//! when over it, unless a successful deploy of the channel runs it), its outcome is recorded on the Job, and its
//! pods are removed.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, LogParams, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;
use slipway_crds::{Deploy, DeployImage};

use super::registry::Registry;
use super::{
    BuildRequest, BuildState, DeployLog, Recorded, human_duration, image, job, patch_params,
    repository,
};
use crate::context::Context;
use crate::error::Error;
use crate::metrics::BuildEnd;

/// Largest part of the build output copied into the deploy log (its end is kept).
const OUTPUT_LIMIT: i64 = 2 * 1024 * 1024;
/// Lines of build output copied into the deploy log at most.
const OUTPUT_LINES: i64 = 20_000;

/// Collects the output of a finished Job, sizes its image and records the outcome.
pub(super) async fn finish(
    ctx: &Context,
    req: &BuildRequest<'_>,
    log: &DeployLog<'_>,
    job: &Job,
    outcome: Result<(), String>,
) -> Result<BuildState, Error> {
    let (output, reported) = output(ctx, job).await?;
    let mut text = output;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let (recorded, ended) = match outcome {
        Err(reason) if reason == "DeadlineExceeded" => {
            let minutes = job::BUILD_TIMEOUT.as_secs() / 60;
            text.push_str(&format!(
                "[build] failed: the build did not finish within {minutes} minutes\n"
            ));
            (
                Recorded::Failed(format!("the build did not finish within {minutes} minutes")),
                BuildEnd::TimedOut,
            )
        }
        Err(_) => {
            text.push_str("[build] failed: the image build failed (its output is above)\n");
            (
                Recorded::Failed("the image build failed; see the deploy log".into()),
                BuildEnd::Failed,
            )
        }
        Ok(()) => {
            let recorded = sized(ctx, req, job, reported, &mut text).await?;
            let ended = match &recorded {
                Recorded::Built(_) => BuildEnd::Built,
                Recorded::Failed(_) => BuildEnd::ImageRefused,
            };
            (recorded, ended)
        }
    };
    log.append(&text).await?;
    let patch = json!({"metadata": {"annotations": {
        job::RESULT: serde_json::to_string(&recorded).map_err(|e| Error::InvalidSpec(e.to_string()))?
    }}});
    log.jobs
        .patch(&job.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await?;
    ctx.metrics.build_ended(ended, job_duration(job));
    remove_pods(ctx, job).await;
    Ok(recorded.into())
}

/// Deletes a finished Job's pods: their output is in the deploy log, and the Job (the record) stays. A failure
/// only leaves them for the Deploy's garbage collection.
async fn remove_pods(ctx: &Context, job: &Job) {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let selector = ListParams::default().labels(&job_pods(job));
    if let Err(e) = pods
        .delete_collection(&DeleteParams::background(), &selector)
        .await
    {
        tracing::warn!(job = %job.name_any(), error = %e, "could not delete the pods of a finished build");
    }
}

/// Label selector of a Job's pods.
fn job_pods(job: &Job) -> String {
    format!("batch.kubernetes.io/job-name={}", job.name_any())
}

/// Reads the pushed image's sizes, writes the result lines into `text`, and holds the charged size against the
/// cap (an image over it is deleted).
async fn sized(
    ctx: &Context,
    req: &BuildRequest<'_>,
    job: &Job,
    reported: Option<String>,
    text: &mut String,
) -> Result<Recorded, Error> {
    let registry = Registry::of(ctx);
    let repository = repository(req.channel)?;
    let digest = match reported.filter(|d| d.starts_with("sha256:")) {
        Some(digest) => Some(digest),
        None => registry.digest(&repository, req.sha).await?,
    };
    let image = match &digest {
        Some(digest) => registry.image(&repository, digest).await?,
        None => None,
    };
    let (Some(digest), Some(image)) = (digest, image) else {
        text.push_str("[build] failed: the pushed image is not in the registry\n");
        return Ok(Recorded::Failed(
            "the pushed image is not in the registry".into(),
        ));
    };
    if let Some(took) = job_duration(job) {
        text.push_str(&format!("[build] built in {}\n", human_duration(took)));
    }
    let sizes = image::account(&image, &Registry::bases(ctx).warm_bases().await?);
    ctx.metrics
        .image_size_against_cap(sizes.charged, req.image_cap_bytes);
    text.push_str(&image::size_line(&sizes, req.image_cap_bytes));
    text.push('\n');
    if sizes.charged > req.image_cap_bytes {
        let kept = runs_for_a_success(ctx, req, &digest).await?;
        if !kept {
            registry.delete(&repository, &digest).await?;
        }
        let message = format!(
            "the image's charged size {} exceeds the plan's cap of {}",
            image::human_size(sizes.charged),
            image::human_size(req.image_cap_bytes)
        );
        let fate = if kept {
            "the image was kept, as an earlier deploy of this channel runs it"
        } else {
            "the image was deleted"
        };
        text.push_str(&format!(
            "[build] failed: {message}; {fate}. Build on a warm base and keep the added layers small, or move to a plan with a larger cap\n"
        ));
        return Ok(Recorded::Failed(message));
    }
    let created = job
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Ok(Recorded::Built(DeployImage {
        reference: format!("{}/{repository}@{digest}", ctx.config.registry),
        tag: req.sha.to_owned(),
        size_bytes: sizes.total,
        charged_size_bytes: Some(sizes.charged),
        matched_base: sizes.matched_base.map(str::to_owned),
        created,
    }))
}

/// The build pod's output (its end, when long) and its termination message (the pushed digest).
async fn output(ctx: &Context, job: &Job) -> Result<(String, Option<String>), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let listed = pods
        .list(&ListParams::default().labels(&job_pods(job)))
        .await?;
    let Some(pod) = listed
        .items
        .into_iter()
        .max_by_key(|p| p.metadata.creation_timestamp.clone())
    else {
        return Ok((
            "[build] the build pod is gone; its output was not kept\n".into(),
            None,
        ));
    };
    let reported = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == job::CONTAINER))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| m.trim().to_owned());
    let params = LogParams {
        container: Some(job::CONTAINER.into()),
        tail_lines: Some(OUTPUT_LINES),
        limit_bytes: Some(OUTPUT_LIMIT),
        ..Default::default()
    };
    let output = match pods.logs(&pod.name_any(), &params).await {
        Ok(output) => output,
        Err(e) => format!("[build] the build output could not be read: {e}\n"),
    };
    Ok((output, reported))
}

/// From the Job's start to its completion.
fn job_duration(job: &Job) -> Option<Duration> {
    let status = job.status.as_ref()?;
    let took = status
        .completion_time
        .as_ref()?
        .0
        .duration_since(status.start_time.as_ref()?.0);
    Duration::try_from(took).ok()
}

/// Whether `digest` is the image of a successful deploy of the request's channel (a rebuild that came out byte
/// for byte the same, after the plan's cap shrank): such a manifest is live or a rewind's target, so it stays.
async fn runs_for_a_success(
    ctx: &Context,
    req: &BuildRequest<'_>,
    digest: &str,
) -> Result<bool, Error> {
    let namespace = req
        .deploy
        .namespace()
        .ok_or(Error::Incomplete("namespace"))?;
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), &namespace);
    let suffix = format!("@{digest}");
    let of_channel =
        ListParams::default().fields(&format!("spec.channel={}", req.deploy.spec.channel));
    Ok(deploys
        .list(&of_channel)
        .await?
        .items
        .iter()
        .filter(|d| d.spec.channel == req.deploy.spec.channel)
        .filter_map(|d| d.status.as_ref())
        .any(|s| {
            s.phase == slipway_crds::DeployPhase::Success
                && s.image
                    .as_ref()
                    .is_some_and(|i| i.reference.ends_with(&suffix))
        }))
}
