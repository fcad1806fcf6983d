//! Label keys slipway puts on the objects it creates, so children can be found (and cleaned up) by label.

/// The app an object belongs to.
pub const APP: &str = "slipway.dev/app";
/// The channel an object belongs to (the channel name, not the resource name).
pub const CHANNEL: &str = "slipway.dev/channel";
/// Standard label naming the manager of an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`] on everything slipway creates.
pub const MANAGER: &str = "slipway";
/// On a user's namespace: the username that owns it (and every App in it).
pub const OWNER: &str = "slipway.dev/owner";
/// On a user's namespace: the user's plan tier, read by the webhook for plan caps.
pub const PLAN: &str = "slipway.dev/plan";

/// Prefix of the namespace each user's apps live in.
pub const USER_NAMESPACE_PREFIX: &str = "slipway-user-";

/// The namespace of a user's apps.
pub fn user_namespace(username: &crate::names::Username) -> String {
    format!("{USER_NAMESPACE_PREFIX}{username}")
}

/// The deploy (its uid) a workload object belongs to: a deploy's Deployment, pods and env Secret.
pub const DEPLOY: &str = "slipway.dev/deploy";
/// On a deploy's pods: the app owner's username (`SVC_USER`).
pub const USER: &str = "slipway.dev/user";
/// On a deploy's pods: the deployed commit (`SVC_SHA`).
pub const SHA: &str = "slipway.dev/sha";
/// Standard label naming the part an object plays; see the `COMPONENT_*` values.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// [`COMPONENT`] of a deploy's Deployment and pods.
pub const COMPONENT_RUN: &str = "run";
/// [`COMPONENT`] of a deploy's immutable env Secret.
pub const COMPONENT_ENV: &str = "deploy-env";
/// [`COMPONENT`] of a channel's registry pull credential.
pub const COMPONENT_PULL: &str = "registry-pull";

/// Label on every certificate Secret the operator writes; the edge watches Secrets with it.
pub const CERTIFICATE: &str = "slipway.dev/certificate";
/// [`CERTIFICATE`]'s value on a custom domain's certificate.
pub const CERTIFICATE_DOMAIN: &str = "domain";
/// Name of the Secret, beside the certificates, that holds the operator's ACME account credentials (the platform
/// backup keeps it with them).
pub const ACME_ACCOUNT_SECRET: &str = "slipway-acme-account";
/// cert-manager's annotation listing a certificate's DNS names (comma-separated); the edge serves a certificate for
/// the names it lists.
pub const ALT_NAMES: &str = "cert-manager.io/alt-names";

/// The IngressClass slipway's edge serves, and the operator writes on every channel's Ingress.
pub const INGRESS_CLASS: &str = "slipway";
