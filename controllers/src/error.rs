//! Reconcile errors. Each has a category that becomes a metric label and the reason of a Warning Event.

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiserver refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The object breaks a rule only the reconciler can see; it waits for a change.
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The object is missing data the apiserver always sets (a uid, a namespace).
    #[error("incomplete object: {0}")]
    Incomplete(&'static str),
    /// The API server's internal routes failed (git archive, deploy log).
    #[error(transparent)]
    Internal(#[from] slipway_internal::CallError),
    /// The cluster's image registry refused or failed a request.
    #[error("registry: {0}")]
    Registry(String),
    /// The object-store backend refused or failed a request.
    #[error("object store: {0}")]
    ObjectStore(String),
    /// The data server refused or failed a request.
    #[error("{0}")]
    Database(String),
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    /// The error of a reconcile run under a finalizer: the reconcile's own, or the finalizer patch's.
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        use kube::runtime::finalizer::Error as Finalizer;
        match e {
            Finalizer::ApplyFailed(e) | Finalizer::CleanupFailed(e) => e,
            Finalizer::AddFinalizer(e) | Finalizer::RemoveFinalizer(e) => Error::Kube(e),
            Finalizer::UnnamedObject => Error::Incomplete("name"),
            Finalizer::InvalidFinalizer => Error::InvalidSpec("invalid finalizer name".into()),
        }
    }
}

impl Error {
    /// The metric label and Event reason of this error.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApi",
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::Incomplete(_) => "IncompleteObject",
            Error::Internal(_) => "InternalApi",
            Error::Registry(_) => "Registry",
            Error::ObjectStore(_) => "ObjectStore",
            Error::Database(_) => "Database",
        }
    }
}
