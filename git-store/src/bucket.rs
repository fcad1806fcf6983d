//! The git bucket: every published pack as `repos/<app uid>/pack-<sha>.pack` and its `.idx`, written once (a pack
//! is named by its content) and read by every replica that syncs its cache. A pack is uploaded before the ref
//! update that needs it is published, so no ref ever names an object the bucket does not hold.

use std::path::Path;

use anyhow::Context;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use slipway_backends::object_store::{self, S3Endpoint};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// The two files of a pack, `.pack` first: a reader finds a pack by its `.idx`, so that one is written last.
pub const EXTENSIONS: [&str; 2] = ["pack", "idx"];

/// The bucket the packs are kept in.
#[derive(Clone, Debug)]
pub struct PackBucket {
    client: Client,
    bucket: String,
}

impl PackBucket {
    /// The bucket `bucket` on `endpoint`, made when it does not exist yet.
    pub async fn open(endpoint: &S3Endpoint, bucket: &str) -> anyhow::Result<Self> {
        let client = object_store::client(endpoint, None);
        object_store::create_bucket(&client, bucket)
            .await
            .with_context(|| format!("create the git bucket {bucket}"))?;
        Ok(Self {
            client,
            bucket: bucket.to_owned(),
        })
    }

    fn key(app: Uuid, pack: &str, extension: &str) -> String {
        format!("repos/{app}/{pack}.{extension}")
    }

    /// Uploads `<dir>/<pack>.pack` and `.idx`.
    pub async fn upload(&self, app: Uuid, dir: &Path, pack: &str) -> anyhow::Result<()> {
        for extension in EXTENSIONS {
            let file = dir.join(format!("{pack}.{extension}"));
            let body = ByteStream::from_path(&file)
                .await
                .with_context(|| format!("read {}", file.display()))?;
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(Self::key(app, pack, extension))
                .body(body)
                .send()
                .await
                .map_err(|e| {
                    anyhow::anyhow!("upload {pack}.{extension}: {}", object_store::describe(&e))
                })?;
        }
        Ok(())
    }

    /// Downloads `pack` into `dir`, each file written beside its final name and renamed into place, the `.idx`
    /// last.
    pub async fn download(&self, app: Uuid, dir: &Path, pack: &str) -> anyhow::Result<()> {
        for extension in EXTENSIONS {
            let target = dir.join(format!("{pack}.{extension}"));
            let partial = dir.join(format!("tmp_{pack}.{extension}.{}", Uuid::new_v4()));
            let result = async {
                let object = self
                    .client
                    .get_object()
                    .bucket(&self.bucket)
                    .key(Self::key(app, pack, extension))
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "download {pack}.{extension}: {}",
                            object_store::describe(&e)
                        )
                    })?;
                let mut file = tokio::fs::File::create(&partial).await?;
                let mut body = object.body;
                while let Some(chunk) = body.try_next().await? {
                    file.write_all(&chunk).await?;
                }
                file.sync_all().await?;
                tokio::fs::rename(&partial, &target).await?;
                anyhow::Ok(())
            }
            .await;
            if result.is_err() {
                let _ = tokio::fs::remove_file(&partial).await;
            }
            result?;
        }
        Ok(())
    }

    /// Removes every file of `packs`; missing ones are fine.
    pub async fn remove(&self, app: Uuid, packs: &[String]) -> anyhow::Result<()> {
        for pack in packs {
            for extension in EXTENSIONS {
                self.client
                    .delete_object()
                    .bucket(&self.bucket)
                    .key(Self::key(app, pack, extension))
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!("remove {pack}.{extension}: {}", object_store::describe(&e))
                    })?;
            }
        }
        Ok(())
    }
}
