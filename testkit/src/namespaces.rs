//! Test namespaces with labels of the test's choosing: tenancy labels (`slipway.dev/owner`, `slipway.dev/plan`)
//! that the webhook reads, and a selector label that scopes a test's webhook registration to its own namespaces.

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::{TEST_NAMESPACE_LABEL, TestNamespace};

impl TestNamespace {
    /// Creates a fresh namespace `t-<prefix>-<random>` carrying `labels` besides the test label; deleted when
    /// dropped, like [`TestNamespace::create`].
    pub async fn create_with_labels(
        client: &Client,
        prefix: &str,
        labels: &[(&str, &str)],
    ) -> Result<Self> {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let name = format!(
            "t-{}-{}",
            prefix.chars().take(40).collect::<String>(),
            &suffix[..8]
        );
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.insert(TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(all),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(Self { name })
    }
}
