//! The Domain reconciler: works out the DNS records a custom domain needs, checks them (on request through the
//! verify annotation, and on its own while the domain is pending, spacing the checks out), moves the domain between
//! `pending` and `verified` exactly as the hosting API's table says, and keeps a verified domain's certificate
//! issued and renewed. The channel reconciler adds verified domains to the channel's Ingress, which is what routes
//! them.
//!
//! Steps: read the channel ([`dns_records`](slipway_crds::domain::dns_records) need its hostname) and make it the
//! Domain's owner if the Domain names none ([`ownership`], which also sweeps Domains whose channel is gone) → check
//! DNS when due ([`dns`], judged by [`checks`]) → issue or renew the certificate when due ([`acme`], stored by
//! [`certificate`]) → write the status with server-side apply (only when it changed) and Events on transitions.
//! The certificate Secret lives in the certificate namespace (one of its own, which the edge may read), where an
//! owner reference cannot reach, so a finalizer removes it when the Domain goes.

pub mod acme;
pub mod certificate;
mod checks;
pub mod dns;
pub mod ownership;

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use serde_json::json;
use slipway_crds::conditions::{self, reasons};
use slipway_crds::domain::{RENEW_ANNOTATION, VERIFY_ANNOTATION, dns_records};
use slipway_crds::names::DomainName;
use slipway_crds::{
    CertificateStatus, Channel, Domain, DomainPhase, DomainReason, DomainStatus, Http01Challenge,
};

use self::checks::{apply_check, check_due, next_wake};
use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;

/// Held by every Domain until its certificate Secret is removed.
pub const CERTIFICATE_FINALIZER: &str = "slipway.dev/certificate";
/// Field manager of the HTTP-01 challenge in a Domain's status (apart from the rest of the status, so writing one
/// never removes the other).
const CHALLENGE_MANAGER: &str = "slipway-operator-acme";
/// Settings of custom domains.
#[derive(Debug, Clone, Default)]
pub struct DomainsConfig {
    /// The DNS server verification asks (`None`: the system's resolvers).
    pub resolver: Option<SocketAddr>,
    /// The addresses the edge answers on, offered as `a_values` for apex domains.
    pub edge_addresses: Vec<String>,
    /// The namespace certificate Secrets (and the ACME account) live in: the platform's.
    pub certificate_namespace: Option<String>,
    /// The ACME CA; without it no certificate is issued.
    pub acme: Option<acme::AcmeConfig>,
}

/// Reconciles one Domain: under the certificate finalizer (kube's `finalizer()`, which adds it before the first
/// apply and removes it once the cleanup has), its apply, or once it is deleted, the removal of its certificate.
pub async fn reconcile(domain: Arc<Domain>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = domain.namespace().ok_or(Error::Incomplete("namespace"))?;
    let domains: Api<Domain> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&domains, CERTIFICATE_FINALIZER, domain, |event| async {
        match event {
            FinalizerEvent::Apply(domain) => apply(domain, &ctx, &domains, &namespace).await,
            FinalizerEvent::Cleanup(domain) => {
                remove_certificate(&ctx, &domain).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(Error::from)
}

/// Verifies a live Domain, issues its certificate and writes its status.
async fn apply(
    domain: Arc<Domain>,
    ctx: &Context,
    domains: &Api<Domain>,
    namespace: &str,
) -> Result<Action, Error> {
    let uid = domain.uid().ok_or(Error::Incomplete("uid"))?;
    let now = Timestamp::now();
    let generation = domain.metadata.generation;
    let mut status = domain.status.clone().unwrap_or_default();
    status.observed_generation = generation;

    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), namespace);
    let channel = channels.get_opt(&domain.spec.channel).await?;
    let domain = match &channel {
        Some(channel) => ownership::adopt(domains, domain, channel).await?,
        None => domain,
    };
    let hostname = channel.and_then(|c| c.status.and_then(|s| s.hostname));
    let parsed: Result<DomainName, _> = domain.spec.domain.parse();
    let (name, hostname) = match (parsed, hostname) {
        (Ok(name), Some(hostname)) => (name, hostname),
        (parsed, _) => {
            let (reason, message) = match parsed {
                Err(e) => (reasons::INVALID_SPEC, e.to_string()),
                Ok(_) => (
                    reasons::REFERENCE_NOT_FOUND,
                    format!(
                        "channel {} does not exist in this namespace (or has no hostname yet)",
                        domain.spec.channel
                    ),
                ),
            };
            set(
                &mut status,
                conditions::ACCEPTED,
                false,
                reason,
                &message,
                generation,
                now,
            );
            set(
                &mut status,
                conditions::READY,
                false,
                reason,
                &message,
                generation,
                now,
            );
            write_status(domains, &domain, &status).await?;
            crate::channel::publish(ctx, domain.as_ref(), EventType::Warning, reason, message)
                .await;
            // The channel is watched: its appearance (or its hostname) brings the Domain back.
            return Ok(Action::await_change());
        }
    };
    status.dns_records = Some(dns_records(
        name.as_str(),
        &uid,
        &hostname,
        &ctx.config.domains.edge_addresses,
    ));
    set(
        &mut status,
        conditions::ACCEPTED,
        true,
        reasons::RECONCILED,
        "",
        generation,
        now,
    );

    let request = domain.annotations().get(VERIFY_ANNOTATION).cloned();
    if check_due(&status, request.as_deref(), now) {
        let records = status.dns_records.clone().unwrap_or_default();
        let outcome = dns::check(&ctx.dns, name.as_str(), &records).await;
        let moved = apply_check(&mut status, outcome, now);
        status.verify_request = request;
        announce_check(ctx, &domain, outcome, moved).await;
    }
    set_verified_condition(&mut status, generation, now);

    if status.phase == DomainPhase::Verified {
        certify(ctx, &domain, name.as_str(), &mut status, now).await?;
    }
    set_certificate_conditions(ctx, &mut status, generation, now);
    write_status(domains, &domain, &status).await?;
    Ok(Action::requeue(next_wake(&status, now)))
}

/// Issues the certificate when it is missing, due for renewal or asked for, unless a failure's backoff runs.
async fn certify(
    ctx: &Context,
    domain: &Domain,
    name: &str,
    status: &mut DomainStatus,
    now: Timestamp,
) -> Result<(), Error> {
    let (Some(issuer), Some(cert_ns)) = (&ctx.issuer, &ctx.config.domains.certificate_namespace)
    else {
        return Ok(());
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), cert_ns);
    let secret_name = certificate::secret_name(name);
    let owner = format!(
        "{}/{}",
        domain.namespace().unwrap_or_default(),
        domain.name_any()
    );
    // The Secret is the truth about the certificate (this Domain object may be a step behind the last write): its
    // validity says when renewal is due, and it records the renewal request it answered.
    let stored = secrets
        .get_opt(&secret_name)
        .await?
        .filter(|s| s.annotations().get(certificate::DOMAIN_ANNOTATION) == Some(&owner));
    let validity = stored
        .as_ref()
        .and_then(certificate::StoredCertificate::validity);
    let answered = stored.as_ref().and_then(|s| {
        s.annotations()
            .get(certificate::RENEW_REQUEST_ANNOTATION)
            .cloned()
    });
    let renew_request = domain.annotations().get(RENEW_ANNOTATION).cloned();
    let cert = status
        .certificate
        .get_or_insert_with(CertificateStatus::default);
    if let Some(v) = validity {
        cert.secret_name = Some(secret_name.clone());
        cert.not_before = Some(Time(v.not_before));
        cert.not_after = Some(Time(v.not_after));
        cert.renew_at = Some(Time(v.renew_at()));
    }
    let asked = renew_request.is_some() && renew_request != answered;
    let renewal_due = validity.is_none_or(|v| now >= v.renew_at());
    let backing_off = cert.next_attempt_at.as_ref().is_some_and(|t| now < t.0);
    if !(asked || (renewal_due && !backing_off)) {
        return Ok(());
    }
    cert.renew_request = renew_request.clone();
    let publish = StatusChallenge {
        domains: Api::namespaced(ctx.client.clone(), &domain.namespace().unwrap_or_default()),
        name: domain.name_any(),
    };
    tracing::info!(domain = name, "issuing a certificate");
    let issued = issuer.issue(name, &publish).await;
    // Whatever goes wrong from here on counts as a failed attempt and backs off: a CA is never asked again at
    // once.
    let stored = match issued {
        Ok(issued) => {
            store(
                &secrets,
                &secret_name,
                certificate::secret(
                    cert_ns,
                    name,
                    &owner,
                    issuer.directory_url(),
                    renew_request.as_deref(),
                    &issued,
                ),
                &issued,
            )
            .await
        }
        Err(e) => Err(e.to_string()),
    };
    ctx.metrics.acme_order(stored.is_ok());
    match stored {
        Ok(validity) => {
            cert.secret_name = Some(secret_name);
            cert.not_before = Some(Time(validity.not_before));
            cert.not_after = Some(Time(validity.not_after));
            cert.renew_at = Some(Time(validity.renew_at()));
            cert.failures = 0;
            cert.last_failure = None;
            cert.next_attempt_at = None;
            let note = format!("certificate issued, valid until {}", validity.not_after);
            tracing::info!(domain = name, "{note}");
            crate::channel::publish(ctx, domain, EventType::Normal, reasons::ISSUED, note).await;
        }
        Err(e) => {
            cert.failures = cert.failures.saturating_add(1);
            cert.next_attempt_at = Some(Time(certificate::after(
                now,
                certificate::backoff(cert.failures),
            )));
            let note = format!(
                "certificate issuance failed (attempt {}): {e}",
                cert.failures
            );
            tracing::warn!(domain = name, "{note}");
            cert.last_failure = Some(e);
            crate::channel::publish(ctx, domain, EventType::Warning, reasons::ISSUE_FAILED, note)
                .await;
        }
    }
    Ok(())
}

/// Writes the certificate Secret; returns the certificate's validity, or why it could not be stored.
async fn store(
    secrets: &Api<Secret>,
    name: &str,
    secret: Result<Secret, serde_json::Error>,
    issued: &certificate::Issued,
) -> Result<certificate::Validity, String> {
    let validity = certificate::Validity::of_chain(&issued.chain_pem)?;
    let secret = secret.map_err(|e| format!("the certificate Secret: {e}"))?;
    secrets
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(|e| format!("store the certificate Secret: {e}"))?;
    Ok(validity)
}

/// Publishes the HTTP-01 challenge in the Domain's status, under a field manager of its own, where every edge
/// replica's watch finds it.
struct StatusChallenge {
    domains: Api<Domain>,
    name: String,
}

impl acme::Publish for StatusChallenge {
    async fn publish(&self, challenge: Option<Http01Challenge>) -> Result<(), kube::Error> {
        let status = match challenge {
            Some(c) => json!({"certificate": {"http01": c}}),
            None => json!({}),
        };
        let patch =
            json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "status": status});
        self.domains
            .patch_status(
                &self.name,
                &PatchParams::apply(CHALLENGE_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        Ok(())
    }
}

/// Deletes the Domain's certificate Secret, if it is this Domain's (a later Domain for the same name may own it).
async fn remove_certificate(ctx: &Context, domain: &Domain) -> Result<(), Error> {
    let Some(cert_ns) = &ctx.config.domains.certificate_namespace else {
        return Ok(());
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), cert_ns);
    let name = certificate::secret_name(&domain.spec.domain);
    let owner = format!(
        "{}/{}",
        domain.namespace().unwrap_or_default(),
        domain.name_any()
    );
    let Some(secret) = secrets.get_opt(&name).await? else {
        return Ok(());
    };
    if secret.annotations().get(certificate::DOMAIN_ANNOTATION) != Some(&owner) {
        return Ok(());
    }
    match secrets.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies `status` (all of the fields this reconciler owns) unless the Domain already has it.
async fn write_status(
    api: &Api<Domain>,
    domain: &Domain,
    status: &DomainStatus,
) -> Result<(), Error> {
    let mut current = domain.status.clone().unwrap_or_default();
    // The challenge has its own manager; it is not this write's to keep or drop.
    if let Some(c) = current.certificate.as_mut() {
        c.http01 = None;
    }
    let mut wanted = status.clone();
    if let Some(c) = wanted.certificate.as_mut() {
        c.http01 = None;
    }
    if current == wanted && domain.status.is_some() {
        return Ok(());
    }
    let patch = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "status": wanted});
    api.patch_status(
        &domain.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

fn set(
    status: &mut DomainStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(type_, ok, reason, message, generation, Time(now)),
    );
}

fn set_verified_condition(status: &mut DomainStatus, generation: Option<i64>, now: Timestamp) {
    let verified = status.phase == DomainPhase::Verified;
    let (reason, message) = match (status.reason, status.checked_at.is_some()) {
        (_, false) => (reasons::NOT_CHECKED, "not checked yet".to_owned()),
        (None, true) => (
            reasons::DNS_VERIFIED,
            "TXT and routing records pass".to_owned(),
        ),
        (Some(r), true) if verified => (
            reasons::DNS_VERIFIED,
            format!(
                "still verified; the last check could not finish: {}",
                r.as_str()
            ),
        ),
        (Some(r), true) => (r.condition_reason(), format!("last check: {}", r.as_str())),
    };
    set(
        status,
        conditions::VERIFIED,
        verified,
        reason,
        &message,
        generation,
        now,
    );
}

fn set_certificate_conditions(
    ctx: &Context,
    status: &mut DomainStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    let verified = status.phase == DomainPhase::Verified;
    let cert = status.certificate.clone().unwrap_or_default();
    let (ready, reason, message) = if ctx.issuer.is_none() {
        (
            false,
            reasons::ACME_NOT_CONFIGURED,
            "no ACME CA is configured".to_owned(),
        )
    } else if !verified {
        (
            false,
            reasons::NOT_VERIFIED,
            "issued once the domain is verified".to_owned(),
        )
    } else if let Some(failure) = &cert.last_failure {
        (
            cert.not_after.as_ref().is_some_and(|t| now < t.0),
            reasons::ISSUE_FAILED,
            failure.clone(),
        )
    } else if let Some(not_after) = &cert.not_after {
        (
            true,
            reasons::ISSUED,
            format!("valid until {}", not_after.0),
        )
    } else {
        (false, reasons::PROVISIONING, "issuing".to_owned())
    };
    set(
        status,
        conditions::CERTIFICATE_READY,
        ready,
        reason,
        &message,
        generation,
        now,
    );
    let (ready_reason, ready_message) = if !verified {
        let reason = status
            .reason
            .map_or(reasons::NOT_CHECKED, DomainReason::condition_reason);
        (reason, "the domain is not verified".to_owned())
    } else {
        (reason, message)
    };
    set(
        status,
        conditions::READY,
        verified && ready,
        ready_reason,
        &ready_message,
        generation,
        now,
    );
}

async fn announce_check(
    ctx: &Context,
    domain: &Domain,
    outcome: Result<(), DomainReason>,
    moved: bool,
) {
    let (kind, reason, note) = match outcome {
        Ok(()) if moved => (
            EventType::Normal,
            reasons::DNS_VERIFIED,
            "domain verified".to_owned(),
        ),
        Ok(()) => return,
        Err(r) if moved => (
            EventType::Warning,
            r.condition_reason(),
            format!(
                "verification lost ({}); the domain is pending again",
                r.as_str()
            ),
        ),
        Err(r) => (
            EventType::Warning,
            r.condition_reason(),
            format!("verification check failed: {}", r.as_str()),
        ),
    };
    crate::channel::publish(ctx, domain, kind, reason, note).await;
}
