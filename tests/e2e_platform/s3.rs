//! A channel's public S3 endpoint as its users reach it: over HTTPS through the edge, with the platform's wildcard
//! certificate for `*.s3.<app domain>`, and the channel's key pair. Ceph's S3 conformance suite (s3-tests' default
//! subset in single-bucket mode, `hack/s3-tests.sh`) must lose no test there that versitygw, the bundled backend,
//! passes alone.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use anyhow::Result;

use crate::support;
use support::platform::{Installed, PublicBucket, root};

/// A command with the endpoint's name resolved to the edge for Python programs (tests/s3/resolve).
fn python_command(
    program: impl AsRef<std::ffi::OsStr>,
    bucket: &PublicBucket,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .env(
            "SLIPWAY_RESOLVE",
            format!("{}={}", bucket.host, bucket.edge_ip),
        )
        .env("PYTHONPATH", root().join("tests/s3/resolve"))
        .kill_on_drop(true);
    command
}

#[tokio::test]
async fn s3_tests_lose_nothing_through_the_edge_that_the_backend_passes_alone() -> Result<()> {
    let platform = Installed::from_env()?;
    let account = platform.account("conform").await?;
    let (app, channel) = platform.create_app(&account, "conform", "static").await?;
    let bucket = PublicBucket::open(&platform, &account, &app, &channel).await?;
    let mut run = python_command(root().join("hack/s3-tests.sh"), &bucket);
    run.args(["gateway", &bucket.https_endpoint, &bucket.keys.bucket])
        .env("ACCESS_KEY", &bucket.keys.access_key_id)
        .env("SECRET_KEY", &bucket.keys.secret_access_key);
    let out = run.output().await?;
    // Both counts and every test lost or excused, whatever the outcome.
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "s3-tests through the gateway lost tests versitygw alone passes:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    platform.delete_app(&account, &app).await
}
