//! The internal protocol between slipway's API server and its own components.
//!
//! The API server owns the git store and the platform database; the operator and the edge reach what they need of
//! them through a few routes under `/internal/v1`, served on a listener of their own that is not exposed outside
//! the cluster. This crate is everything both sides share, so neither depends on the other:
//!
//! - [`protocol`]: the routes' paths and JSON bodies;
//! - [`client`]: [`InternalClient`], the callers' side, presenting a ServiceAccount token ([`token`]);
//! - [`review`]: who a caller is, from its token (a Kubernetes TokenReview, briefly cached);
//! - [`policy`]: which identity plays which role, and which routes each role may call;
//! - [`source_url`]: the signed URLs build pods fetch their sources from without any token;
//! - [`registry_token`]: the tokens of the cluster registry, which slipway issues.
//!
//! The HTTP handlers themselves live with the API server (`slipway::api::internal`).

pub mod client;
pub mod policy;
pub mod protocol;
pub mod registry_token;
pub mod review;
pub mod source_url;
pub mod token;

pub use client::{CallError, InternalClient, InternalEndpoint};
pub use policy::{CallerSpec, Callers, Decision, Identity, Role, RouteGroup};
pub use review::{AuthError, Authenticator, KubeReviewer, Review, TokenReviewer};
pub use source_url::SourceKey;
pub use token::TokenSource;
