//! Who a caller is: its bearer token checked by the Kubernetes API server with a TokenReview.
//!
//! The platform's components present projected ServiceAccount tokens whose audience is the internal listener's
//! (`slipway-internal` unless configured otherwise), so a token minted for the Kubernetes API or for anything
//! else does not open the internal routes, and a token stolen from one place cannot be replayed at another.
//!
//! A deploy makes a burst of internal calls with one token; [`Authenticator`] keeps each accepted token's identity
//! for a short while (keyed by a SHA-256 of the token, never past the token's own expiry), and concurrent first
//! calls with one token share one review. Rejections are not kept, so a token that was not yet valid gets a new
//! review on its next call.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use crate::policy::Identity;
use crate::source_url::unix_now;

/// The audience internal callers' tokens are minted for unless configured otherwise.
pub const DEFAULT_AUDIENCE: &str = "slipway-internal";

/// How long an accepted token is trusted without a new review.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Tokens kept at most; past this, expired entries are dropped (and all of them if none has expired).
const MAX_ENTRIES: usize = 4096;

/// What the reviewer said about a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// The token is valid for the audience and belongs to this identity.
    Authenticated(Identity),
    /// The token is not valid (malformed, expired, revoked, for another audience); the reviewer's reason.
    Rejected(String),
}

/// Checks tokens: the Kubernetes API server in production ([`KubeReviewer`]).
pub trait TokenReviewer: Send + Sync {
    /// Reviews `token`; `Err` when no answer could be had (worth a retry, not a verdict).
    fn review(&self, token: &str) -> impl Future<Output = Result<Review, String>> + Send;
}

/// Reviews tokens with the Kubernetes TokenReview API for one audience (needs `create` on
/// `tokenreviews.authentication.k8s.io`).
#[derive(Clone)]
pub struct KubeReviewer {
    api: Api<TokenReview>,
    audience: String,
}

impl KubeReviewer {
    /// A reviewer that accepts tokens for `audience` only.
    pub fn new(client: kube::Client, audience: impl Into<String>) -> Self {
        Self {
            api: Api::all(client),
            audience: audience.into(),
        }
    }
}

impl TokenReviewer for KubeReviewer {
    async fn review(&self, token: &str) -> Result<Review, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                audiences: Some(vec![self.audience.clone()]),
                token: Some(token.to_owned()),
            },
            ..TokenReview::default()
        };
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(Review::Rejected(
                status.error.unwrap_or_else(|| "not authenticated".into()),
            ));
        }
        // An authenticator that ignores audiences answers none; such a token was not minted for this listener.
        if !status
            .audiences
            .unwrap_or_default()
            .iter()
            .any(|a| a == &self.audience)
        {
            return Ok(Review::Rejected(format!(
                "the token is not for audience {}",
                self.audience
            )));
        }
        match status.user.and_then(|u| u.username) {
            Some(username) if !username.is_empty() => {
                Ok(Review::Authenticated(Identity::from_username(username)))
            }
            _ => Ok(Review::Rejected("the review named no user".into())),
        }
    }
}

/// Why a token opened nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// The reviewer rejected the token.
    #[error("token rejected: {reason}")]
    Rejected {
        /// The reviewer's reason.
        reason: String,
        /// The subject the token claims (unverified; for logs only).
        claimed: Option<String>,
    },
    /// The reviewer could not be asked.
    #[error("{0}")]
    Unavailable(String),
}

#[derive(Debug, Clone)]
enum Outcome {
    Valid { identity: Identity, until: Instant },
    Rejected(String),
}

type Slot = Arc<OnceCell<Outcome>>;

/// Authenticates bearer tokens through a [`TokenReviewer`], keeping accepted ones for a short while.
pub struct Authenticator<R> {
    reviewer: R,
    ttl: Duration,
    slots: Mutex<HashMap<[u8; 32], Slot>>,
}

impl<R: TokenReviewer> Authenticator<R> {
    /// An authenticator that trusts an accepted token for `ttl` at most.
    pub fn new(reviewer: R, ttl: Duration) -> Self {
        Self {
            reviewer,
            ttl,
            slots: Mutex::default(),
        }
    }

    /// The identity `token` belongs to.
    pub async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        let slot = self.slot(Sha256::digest(token.as_bytes()).into());
        let outcome = slot
            .get_or_try_init(|| async {
                let review = self
                    .reviewer
                    .review(token)
                    .await
                    .map_err(AuthError::Unavailable)?;
                Ok(match review {
                    Review::Authenticated(identity) => Outcome::Valid {
                        identity,
                        until: self.trusted_until(token),
                    },
                    Review::Rejected(reason) => Outcome::Rejected(reason),
                })
            })
            .await?;
        match outcome {
            Outcome::Valid { identity, .. } => Ok(identity.clone()),
            Outcome::Rejected(reason) => Err(AuthError::Rejected {
                reason: reason.clone(),
                claimed: claims(token).and_then(|c| c.sub),
            }),
        }
    }

    /// The slot of a token: the live one, or a new one in place of a stale one.
    fn slot(&self, key: [u8; 32]) -> Slot {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(&key)
            && !stale(slot, now)
        {
            return slot.clone();
        }
        if slots.len() >= MAX_ENTRIES {
            slots.retain(|_, slot| !stale(slot, now));
            if slots.len() >= MAX_ENTRIES {
                slots.clear();
            }
        }
        let slot = Slot::default();
        slots.insert(key, slot.clone());
        slot
    }

    /// Until when an accepted token is trusted: the TTL, cut short by the token's own expiry.
    fn trusted_until(&self, token: &str) -> Instant {
        let now = Instant::now();
        let ttl = match claims(token).and_then(|c| c.exp) {
            Some(exp) => self
                .ttl
                .min(Duration::from_secs(exp.saturating_sub(unix_now()))),
            None => self.ttl,
        };
        now + ttl
    }
}

/// Whether a slot must be replaced: its token was rejected or its trust ran out (a slot still under review is
/// shared).
fn stale(slot: &Slot, now: Instant) -> bool {
    match slot.get() {
        None => false,
        Some(Outcome::Valid { until, .. }) => *until <= now,
        Some(Outcome::Rejected(_)) => true,
    }
}

/// The claims of a JWT that matter here, read without checking the signature: only ever used for a token the
/// reviewer accepted (its expiry), or in a log line (its claimed subject).
#[derive(Debug, Default, serde::Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: Option<u64>,
}

fn claims(token: &str) -> Option<Claims> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Accepts tokens starting with `good`, fails those starting with `down`, rejects the rest; counts calls.
    #[derive(Default)]
    struct Fake {
        calls: AtomicUsize,
    }

    impl TokenReviewer for &Fake {
        async fn review(&self, token: &str) -> Result<Review, String> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            if token.starts_with("good") {
                Ok(Review::Authenticated(Identity::service_account("ns", "sa")))
            } else if token.starts_with("down") {
                Err("unreachable".into())
            } else {
                Ok(Review::Rejected("invalid bearer token".into()))
            }
        }
    }

    fn jwt(claims: serde_json::Value) -> String {
        let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "good.{}.{}",
            b64(claims.to_string().as_bytes()),
            b64(b"signature")
        )
    }

    #[tokio::test]
    async fn a_burst_with_one_token_costs_one_review() {
        let fake = Fake::default();
        let auth = Authenticator::new(&fake, DEFAULT_TTL);
        let token = jwt(
            serde_json::json!({"sub": "system:serviceaccount:ns:sa", "exp": unix_now() + 3600}),
        );
        let calls = (0..20).map(|_| auth.authenticate(&token));
        for identity in futures::future::join_all(calls).await {
            assert_eq!(identity.unwrap().to_string(), "ns/sa");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        auth.authenticate("good-other").await.unwrap();
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            2,
            "another token, another review"
        );
    }

    #[tokio::test]
    async fn trust_ends_with_the_ttl_or_the_token() {
        let fake = Fake::default();
        let auth = Authenticator::new(&fake, Duration::ZERO);
        auth.authenticate("good").await.unwrap();
        auth.authenticate("good").await.unwrap();
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            2,
            "a zero TTL keeps nothing"
        );

        let fake = Fake::default();
        let auth = Authenticator::new(&fake, DEFAULT_TTL);
        // Expiring now: accepted by the reviewer, but not trusted past its expiry.
        let expiring = jwt(serde_json::json!({"exp": unix_now()}));
        auth.authenticate(&expiring).await.unwrap();
        auth.authenticate(&expiring).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn rejections_and_failures_are_not_kept() {
        let fake = Fake::default();
        let auth = Authenticator::new(&fake, DEFAULT_TTL);
        let bad = "bad.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6eDp5In0.sig";
        for _ in 0..2 {
            match auth.authenticate(bad).await {
                Err(AuthError::Rejected { reason, claimed }) => {
                    assert_eq!(reason, "invalid bearer token");
                    assert_eq!(claimed.as_deref(), Some("system:serviceaccount:x:y"));
                }
                other => panic!("{other:?}"),
            }
        }
        for _ in 0..2 {
            assert!(matches!(
                auth.authenticate("down").await,
                Err(AuthError::Unavailable(_))
            ));
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn claims_of_garbage_are_none() {
        assert!(claims("garbage").is_none());
        assert!(claims("a.!!!.c").is_none());
        assert!(claims("a.bm90IGpzb24.c").is_none());
    }
}
