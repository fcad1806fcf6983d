//! A channel's public S3 endpoint as its users reach it: over HTTPS through the edge, with the platform's wildcard
//! certificate for `*.s3.<app domain>`, and the channel's key pair. Ceph's S3 conformance suite (s3-tests' default
//! subset in single-bucket mode, `hack/s3-tests.sh`) must lose no test there that versitygw, the bundled backend,
//! passes alone; and what users type, the aws CLI (`s3 cp`, `sync`, `ls`) and rclone, moves a file large enough to
//! go in parts and a prefix of 1,000 objects, and brings them back the same.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use anyhow::Result;

use crate::support;
use support::platform::{Installed, PublicBucket, output, root};

/// Objects under the prefix the clients sync: more than a listing page of some clients, a full one of S3's.
const MANY: usize = 1000;
/// Bytes of the large file: past the aws CLI's multipart threshold (8 MiB parts: three of them) and rclone's as
/// set below (5 MiB).
const LARGE: usize = 20 * 1024 * 1024;

/// The virtualenv with s3-tests' modules and the aws CLI (hack/install-deps.sh makes it).
fn s3_clients_venv() -> Result<std::path::PathBuf> {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("source hack/versions.sh && printf %s \"$S3_CLIENTS_VENV\"")
        .current_dir(root())
        .output()?;
    anyhow::ensure!(out.status.success(), "hack/versions.sh failed");
    Ok(String::from_utf8(out.stdout)?.into())
}

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

/// A folder with the large file (`large.bin`) and `MANY` small ones (`many/<n>.txt`).
fn write_files(dir: &Path) -> Result<()> {
    let large: Vec<u8> = (0..LARGE).map(|n| (n * 7 % 251) as u8).collect();
    std::fs::write(dir.join("large.bin"), large)?;
    std::fs::create_dir(dir.join("many"))?;
    for n in 0..MANY {
        std::fs::write(
            dir.join(format!("many/{n:04}.txt")),
            format!("object {n}\n"),
        )?;
    }
    Ok(())
}

/// Whether `a` and `b` hold the same large file and the same small ones.
fn same_files(a: &Path, b: &Path) -> Result<()> {
    assert!(
        std::fs::read(a.join("large.bin"))? == std::fs::read(b.join("large.bin"))?,
        "the large file came back changed"
    );
    let mut names: Vec<_> = std::fs::read_dir(b.join("many"))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    assert_eq!(names.len(), MANY);
    for name in names {
        assert_eq!(
            std::fs::read(a.join("many").join(&name))?,
            std::fs::read(b.join("many").join(&name))?,
            "{name:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_aws_cli_and_rclone_copy_sync_and_list_over_https() -> Result<()> {
    let platform = Installed::from_env()?;
    let account = platform.account("clients").await?;
    let (app, channel) = platform.create_app(&account, "clients", "static").await?;
    let bucket = PublicBucket::open(&platform, &account, &app, &channel).await?;
    let work = slipway_testkit::tls::TempDir::new("s3-clients")?;
    let (local, back) = (work.path().join("local"), work.path().join("back"));
    std::fs::create_dir_all(&local)?;
    write_files(&local)?;
    let ca = platform.edge_ca.to_str().unwrap().to_owned();

    // The aws CLI, trusting only the platform's CA: a multipart upload, a sync of the prefix, a paged listing.
    let venv = s3_clients_venv()?;
    let aws = |args: &[&str]| {
        let mut command = python_command(venv.join("bin/aws"), &bucket);
        command
            .args(["--endpoint-url", &bucket.https_endpoint, "--ca-bundle", &ca])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &bucket.keys.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &bucket.keys.secret_access_key)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
        command
    };
    let s3 = format!("s3://{}", bucket.keys.bucket);
    let large = local.join("large.bin");
    output(
        aws(&[
            "s3",
            "cp",
            large.to_str().unwrap(),
            &format!("{s3}/aws/large.bin"),
        ]),
        "aws s3 cp",
    )
    .await?;
    output(
        aws(&[
            "s3",
            "sync",
            local.join("many").to_str().unwrap(),
            &format!("{s3}/aws/many/"),
        ]),
        "aws s3 sync",
    )
    .await?;
    let listed = output(
        aws(&["s3", "ls", &format!("{s3}/aws/many/"), "--page-size", "300"]),
        "aws s3 ls",
    )
    .await?;
    assert_eq!(listed.lines().count(), MANY, "{listed}");
    let head = output(
        aws(&[
            "s3api",
            "head-object",
            "--bucket",
            &bucket.keys.bucket,
            "--key",
            "aws/large.bin",
        ]),
        "aws s3api head-object",
    )
    .await?;
    assert!(
        head.contains(&format!("\"ContentLength\": {LARGE}")),
        "{head}"
    );
    assert!(head.contains("-3\\\""), "uploaded in 3 parts: {head}");
    output(
        aws(&["s3", "sync", &format!("{s3}/aws/"), back.to_str().unwrap()]),
        "aws s3 sync back",
    )
    .await?;
    same_files(&local, &back)?;

    // rclone, the same way.
    std::fs::remove_dir_all(&back)?;
    let hosts = work.path().join("hosts");
    let rclone = |args: &[&str]| bucket.rclone(&ca, &hosts, args);
    let remote = format!("channel:{}/rclone", bucket.keys.bucket);
    output(
        rclone(&[
            "copyto",
            large.to_str().unwrap(),
            &format!("{remote}/large.bin"),
        ]),
        "rclone copyto",
    )
    .await?;
    output(
        rclone(&[
            "sync",
            local.join("many").to_str().unwrap(),
            &format!("{remote}/many"),
        ]),
        "rclone sync",
    )
    .await?;
    let listed = output(rclone(&["lsf", &format!("{remote}/many")]), "rclone lsf").await?;
    assert_eq!(listed.lines().count(), MANY, "{listed}");
    output(
        rclone(&["sync", &remote, back.to_str().unwrap()]),
        "rclone sync back",
    )
    .await?;
    same_files(&local, &back)?;
    platform.delete_app(&account, &app).await
}
