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
