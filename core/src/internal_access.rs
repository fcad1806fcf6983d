//! What the internal listener checks its callers against; the guard that does the checking is the internal routes'
//! (`api::internal::guard`).

use std::time::Duration;

use slipway_internal::{Authenticator, Callers, KubeReviewer, SourceKey};

/// What the internal listener checks callers against: the token reviewer, the roles, and the key of signed
/// source URLs.
pub struct InternalAccess {
    authenticator: Authenticator<KubeReviewer>,
    callers: Callers,
    source_key: SourceKey,
}

impl InternalAccess {
    /// Checks tokens for `audience` with the apiserver `kube` talks to, trusting an accepted one for `ttl`.
    pub fn new(
        kube: kube::Client,
        audience: &str,
        ttl: Duration,
        callers: Callers,
        source_key: SourceKey,
    ) -> Self {
        Self {
            authenticator: Authenticator::new(KubeReviewer::new(kube, audience), ttl),
            callers,
            source_key,
        }
    }

    /// The token checker.
    pub fn authenticator(&self) -> &Authenticator<KubeReviewer> {
        &self.authenticator
    }

    /// Which role each caller plays, and what each role may call.
    pub fn callers(&self) -> &Callers {
        &self.callers
    }

    /// The key build source URLs are signed with.
    pub fn source_key(&self) -> &SourceKey {
        &self.source_key
    }
}
