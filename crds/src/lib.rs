//! slipway's custom resources and the validated names every other crate shares.
//!
//! The Rust types here are the source of truth for the CRDs: `slipway crds` renders them, the rendered YAML is
//! committed under `crds/yaml/` and `charts/slipway/crds/`, and a test fails when the two drift apart. Rules
//! about one object are CEL validations generated from [`names`] by [`cel`]; rules that need other objects are pure
//! functions in [`rules`], which the admission webhook and the REST API both call.

// `printcolumn(type_ = "string", ...)` repeats by design; clippy reads the repeats as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod app;
pub mod cel;
pub mod channel;
pub mod conditions;
pub mod deploy;
pub mod domain;
pub mod forward;
pub mod labels;
pub mod names;
pub mod patterns;
pub mod plans;
pub mod rules;

pub use app::{App, AppSpec, AppStatus, Template};
pub use channel::{Channel, ChannelPhase, ChannelSpec, ChannelStatus, PendingDeploy, ReadyBy};
pub use deploy::{Deploy, DeployImage, DeployPhase, DeploySpec, DeployStatus};
pub use domain::{
    CertificateStatus, DnsRecords, Domain, DomainPhase, DomainReason, DomainSpec, DomainStatus,
    Http01Challenge,
};
pub use forward::{Forward, ForwardSpec, ForwardStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every slipway resource.
pub const GROUP: &str = "slipway.dev";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";

/// The CRDs of the five kinds, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        App::crd(),
        Channel::crd(),
        Deploy::crd(),
        Domain::crd(),
        Forward::crd(),
    ]
}

/// One CRD as the YAML document committed under `crds/yaml/<name>.yaml`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(crd)
}

/// Every CRD as one multi-document YAML stream (what `slipway crds` prints).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let docs: Result<Vec<String>, _> = crds().iter().map(crd_yaml).collect();
    Ok(docs?.iter().map(|d| format!("---\n{d}")).collect())
}

/// The file name a CRD is committed under: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}
