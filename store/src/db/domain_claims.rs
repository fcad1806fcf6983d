//! Claims on custom domains (table `domain_claims`), for the same reason as [`super::claims`]: the cluster's caches
//! cannot arbitrate parallel attachments, each reading the same cache before any has written. The platform database
//! can: a claim is made in one transaction that first locks the app owner's row, so one account's attachments queue
//! there (the per-channel limit holds), and the domain is the table's primary key (one channel holds it, whoever's).

use std::collections::BTreeSet;

use sqlx::PgPool;
use uuid::Uuid;

use super::claims::GRACE;

/// A domain the API is about to attach.
#[derive(Debug, Clone)]
pub struct DomainClaim<'a> {
    /// The app owner's account (the channel's namespace's).
    pub user_id: Uuid,
    /// The channel's namespace.
    pub namespace: &'a str,
    /// The Channel resource's name, `<app>.<channel>`.
    pub channel: &'a str,
    /// The canonical domain name.
    pub domain: &'a str,
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRefused {
    /// Another channel holds the domain.
    Taken,
    /// The channel holds the most domains it may.
    LimitReached,
}

/// What the caller knows from the cluster: which Domains exist.
pub trait DomainCluster {
    /// The domains of the Channel resource `channel` in `namespace`.
    fn domains_on(&self, namespace: &str, channel: &str) -> BTreeSet<String>;

    /// Whether the Channel resource `channel` in `namespace` has a Domain of `domain`.
    fn has_domain(&self, namespace: &str, channel: &str, domain: &str) -> bool {
        self.domains_on(namespace, channel).contains(domain)
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    domain: String,
    namespace: String,
    channel: String,
    settled: bool,
}

impl Row {
    fn lapsed(&self, cluster: &dyn DomainCluster) -> bool {
        self.settled && !cluster.has_domain(&self.namespace, &self.channel, &self.domain)
    }

    fn holds(&self, new: &DomainClaim<'_>) -> bool {
        self.namespace == new.namespace && self.channel == new.channel
    }
}

/// Claims `new.domain` for its channel, which may hold at most `limit` domains (counting the cluster's and the
/// claims in flight), or says why not. Claiming a domain whose Domain the channel has already succeeds; a claim of
/// the channel's own still in flight is made again (a fresh time, the limit counted). Nothing is claimed when it is
/// refused.
pub async fn claim(
    db: &PgPool,
    new: &DomainClaim<'_>,
    limit: usize,
    cluster: &(dyn DomainCluster + Sync),
) -> sqlx::Result<Result<(), DomainRefused>> {
    let grace = GRACE.as_secs_f64();
    let mut tx = db.begin().await?;
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
        .bind(new.user_id)
        .execute(&mut *tx)
        .await?;
    let holder: Option<Row> = sqlx::query_as(
        "SELECT domain, namespace, channel, claimed_at < now() - make_interval(secs => $2) AS settled
         FROM domain_claims WHERE domain = $1 FOR UPDATE",
    )
        .bind(new.domain)
        .bind(grace)
        .fetch_optional(&mut *tx)
        .await?;
    match holder {
        // The channel has the Domain: nothing to claim.
        Some(h) if h.holds(new) && cluster.has_domain(new.namespace, new.channel, new.domain) => {
            return Ok(Ok(()));
        }
        Some(h) if !h.holds(new) && !h.lapsed(cluster) => return Ok(Err(DomainRefused::Taken)),
        // A lapsed claim, or this channel's own in flight: claimed again below, with a fresh time, within the
        // limit.
        Some(_) => {
            sqlx::query("DELETE FROM domain_claims WHERE domain = $1")
                .bind(new.domain)
                .execute(&mut *tx)
                .await?;
        }
        None => {}
    }
    let on_channel: Vec<Row> =
        sqlx::query_as(
            "SELECT domain, namespace, channel, claimed_at < now() - make_interval(secs => $2) AS settled
             FROM domain_claims WHERE namespace = $1 AND channel = $3",
        )
            .bind(new.namespace)
            .bind(grace)
            .bind(new.channel)
            .fetch_all(&mut *tx)
            .await?;
    let mut held = cluster.domains_on(new.namespace, new.channel);
    held.extend(
        on_channel
            .iter()
            .filter(|r| !r.lapsed(cluster))
            .map(|r| r.domain.clone()),
    );
    // The domain claimed again is not one more: the cluster's view may have come to show this channel's own Domain
    // of it since the check above (its creation raced this claim).
    held.remove(new.domain);
    if held.len() >= limit {
        return Ok(Err(DomainRefused::LimitReached));
    }
    let inserted = sqlx::query(
        "INSERT INTO domain_claims (domain, user_id, namespace, channel) VALUES ($1, $2, $3, $4)",
    )
    .bind(new.domain)
    .bind(new.user_id)
    .bind(new.namespace)
    .bind(new.channel)
    .execute(&mut *tx)
    .await;
    match inserted {
        Ok(_) => {}
        // Another tenant's transaction claimed it since (the primary key waited for it to commit).
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Ok(Err(DomainRefused::Taken));
        }
        Err(e) => return Err(e),
    }
    tx.commit().await?;
    Ok(Ok(()))
}

/// Releases the claim of `domain` in `namespace` (its attachment failed, or it was detached).
pub async fn release(db: &PgPool, namespace: &str, domain: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM domain_claims WHERE namespace = $1 AND domain = $2")
        .bind(namespace)
        .bind(domain)
        .execute(db)
        .await?;
    Ok(())
}

/// Releases every claim of the Channel resource `channel` in `namespace` (the channel is deleted).
pub async fn release_channel(db: &PgPool, namespace: &str, channel: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM domain_claims WHERE namespace = $1 AND channel = $2")
        .bind(namespace)
        .bind(channel)
        .execute(db)
        .await?;
    Ok(())
}

/// Releases every claim of the channels of `app` in `namespace` (Channel resources `<app>.<channel>`; the app is
/// deleted).
pub async fn release_app(db: &PgPool, namespace: &str, app: &str) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM domain_claims WHERE namespace = $1 AND starts_with(channel, $2 || '.')",
    )
    .bind(namespace)
    .bind(app)
    .execute(db)
    .await?;
    Ok(())
}

/// Forgets every claim that has lapsed: settled, and without its Domain (deleted with kubectl, with its channel or
/// its app by an older version that left the claim behind, or never made by a request that died). A lapsed claim
/// already binds nothing; forgetting it keeps the table to the claims that do. A claim made again meanwhile (a
/// fresh time) stays. Answers how many went.
pub async fn forget_lapsed(db: &PgPool, cluster: &(dyn DomainCluster + Sync)) -> sqlx::Result<u64> {
    let grace = GRACE.as_secs_f64();
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT domain, namespace, channel, claimed_at < now() - make_interval(secs => $1) AS settled
         FROM domain_claims",
    )
    .bind(grace)
    .fetch_all(db)
    .await?;
    let mut forgotten = 0;
    for row in rows.iter().filter(|r| r.lapsed(cluster)) {
        forgotten += sqlx::query(
            "DELETE FROM domain_claims WHERE domain = $1 AND namespace = $2 AND channel = $3
             AND claimed_at < now() - make_interval(secs => $4)",
        )
        .bind(&row.domain)
        .bind(&row.namespace)
        .bind(&row.channel)
        .bind(grace)
        .execute(db)
        .await?
        .rows_affected();
    }
    Ok(forgotten)
}
