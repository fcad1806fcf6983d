//! Label keys slipway puts on the objects it creates, so children can be found (and cleaned up) by label.

/// The app an object belongs to.
pub const APP: &str = "slipway.dev/app";
/// The channel an object belongs to (the channel name, not the resource name).
pub const CHANNEL: &str = "slipway.dev/channel";
/// Standard label naming the manager of an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`] on everything slipway creates.
pub const MANAGER: &str = "slipway";
