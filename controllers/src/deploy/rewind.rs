//! Rewinds: a Deploy whose spec names `rewindOf` runs an earlier successful deploy's image again instead of
//! building it. The image comes from the rewound Deploy's status, and the spec must name exactly that image and
//! commit, so a Deploy written with kubectl can run only an image its own channel built and brought live. Pure,
//! so it is tested without a cluster.

use kube::ResourceExt;
use slipway_crds::{Deploy, DeployImage, DeployPhase, Template};

/// What a valid rewind runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewound {
    /// The commit the image was built from (the rewind's sha).
    pub sha: String,
    /// The image, as the rewound deploy recorded it.
    pub image: DeployImage,
    /// The rewound deploy's id (its uid).
    pub from_id: String,
}

/// The image `deploy` (a rewind) runs, looked up among `siblings` (the Deploys of its channel); why it cannot run
/// otherwise.
pub fn target(deploy: &Deploy, siblings: &[Deploy], template: Template) -> Result<Rewound, String> {
    let name = deploy
        .spec
        .rewind_of
        .as_deref()
        .ok_or("the deploy is not a rewind")?;
    if template == Template::Static {
        return Err(
            "a static app has no image to rewind to; deploy the earlier commit instead".into(),
        );
    }
    let channel = &deploy.spec.channel;
    let rewound = siblings
        .iter()
        .find(|d| d.name_any() == name && d.uid() != deploy.uid())
        .ok_or_else(|| {
            format!("rewindOf names {name}, which is not a deploy of channel {channel}")
        })?;
    let status = rewound.status.clone().unwrap_or_default();
    if status.phase != DeployPhase::Success {
        return Err(format!(
            "rewindOf names {name}, which did not succeed; only a deploy that went live can be rewound to"
        ));
    }
    let image = status
        .image
        .ok_or_else(|| format!("rewindOf names {name}, which recorded no image"))?;
    if deploy.spec.image.as_deref() != Some(image.reference.as_str()) {
        return Err(format!(
            "image {} is not the image {name} ran ({})",
            deploy.spec.image.as_deref().unwrap_or(""),
            image.reference
        ));
    }
    let sha = status.resolved_sha.unwrap_or_else(|| image.tag.clone());
    if deploy.spec.sha.as_deref() != Some(sha.as_str()) {
        return Err(format!(
            "sha {} is not the commit {name} ran ({sha})",
            deploy.spec.sha.as_deref().unwrap_or("")
        ));
    }
    Ok(Rewound {
        sha,
        image,
        from_id: rewound.uid().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHA: &str = "1111111111111111111111111111111111111111";
    fn image() -> String {
        format!("registry/ns/web-prod@sha256:{}", "ab".repeat(32))
    }

    fn built(name: &str, phase: &str) -> Deploy {
        serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"channel": "web.prod", "sha": SHA},
            "status": {"phase": phase, "resolvedSha": SHA, "image": {
                "reference": image(), "tag": SHA, "sizeBytes": 10, "created": "2026-01-01T00:00:00Z"}}
        }))
        .unwrap()
    }

    fn rewind(of: &str, sha: &str, image: &str) -> Deploy {
        serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": "web.prod.3", "uid": "uid-rewind"},
            "spec": {"channel": "web.prod", "sha": sha, "rewindOf": of, "image": image}
        }))
        .unwrap()
    }

    #[test]
    fn a_rewind_runs_the_image_its_earlier_deploy_recorded() {
        let siblings = vec![
            built("web.prod.1", "success"),
            built("web.prod.2", "success"),
        ];
        let got = target(
            &rewind("web.prod.1", SHA, &image()),
            &siblings,
            Template::App,
        )
        .unwrap();
        assert_eq!(got.sha, SHA);
        assert_eq!(got.image.reference, image());
        assert_eq!(got.from_id, "uid-web.prod.1");
    }

    #[test]
    fn a_rewind_is_refused_unless_everything_matches_a_success_of_the_channel() {
        let siblings = vec![
            built("web.prod.1", "success"),
            built("web.prod.2", "failed"),
        ];
        let other = format!("registry/ns/other@sha256:{}", "cd".repeat(32));
        for (deploy, template, needle) in [
            (
                rewind("web.prod.1", SHA, &image()),
                Template::Static,
                "static",
            ),
            (
                rewind("web.prod.9", SHA, &image()),
                Template::App,
                "not a deploy of channel web.prod",
            ),
            (
                rewind("web.prod.2", SHA, &image()),
                Template::App,
                "did not succeed",
            ),
            (
                rewind("web.prod.1", SHA, &other),
                Template::Docker,
                "is not the image",
            ),
            (
                rewind("web.prod.1", &"2".repeat(40), &image()),
                Template::App,
                "is not the commit",
            ),
        ] {
            let reason = target(&deploy, &siblings, template).unwrap_err();
            assert!(reason.contains(needle), "{reason}");
        }
    }
}
