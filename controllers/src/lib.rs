//! Reconcilers that turn slipway's custom resources into workloads on the cluster: one module per resource, each
//! a `reconcile` and an `error_policy` built from small steps (read, validate, build children, apply, status).
