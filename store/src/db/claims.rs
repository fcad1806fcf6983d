//! Claims on channel slots and hostnames (table `channel_claims`). The cluster's caches cannot arbitrate parallel
//! requests: each one reads the same cache before any of them has written. The platform database can: a claim is
//! made in one transaction that first locks the owner's row, so one account's creations queue there, and the
//! hostname is the table's primary key.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

/// How long a claim holds without its channel in the cache: enough for the write and for every API replica's cache
/// to see it. A claim whose channel is gone after that has lapsed (the channel was deleted with kubectl, or the
/// request that made it never finished).
pub const GRACE: Duration = Duration::from_secs(300);

/// A channel the API is about to create.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The owner's account.
    pub user_id: Uuid,
    /// The owner's namespace.
    pub namespace: &'a str,
    /// The app's name.
    pub app: &'a str,
    /// The Channel resource's name, `<app>.<channel>`.
    pub channel: &'a str,
    /// The first label of its hostname.
    pub host_label: &'a str,
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The account holds `max_channels` channels already.
    PlanLimit,
    /// Another channel holds the hostname.
    HostTaken,
    /// The same channel is being created by another request.
    SameChannel,
}

/// What the caller knows from the cluster: which channels exist.
pub trait Cluster {
    /// Whether the Channel resource `channel` exists in `namespace`.
    fn has_channel(&self, namespace: &str, channel: &str) -> bool;
    /// The Channel resources of `namespace` that count against its owner's plan.
    fn counted_channels(&self, namespace: &str) -> BTreeSet<String>;
}

#[derive(sqlx::FromRow)]
struct Row {
    host_label: String,
    namespace: String,
    channel: String,
    settled: bool,
}

impl Row {
    fn lapsed(&self, cluster: &dyn Cluster) -> bool {
        self.settled && !cluster.has_channel(&self.namespace, &self.channel)
    }
}

/// Claims a slot of the owner's plan (at most `max_channels`, counting the channels the cluster has and the claims
/// in flight) and the hostname, or says why not. Nothing is claimed when it is refused.
pub async fn claim(
    db: &PgPool,
    new: &Claim<'_>,
    max_channels: u32,
    cluster: &(dyn Cluster + Sync),
) -> sqlx::Result<Result<(), Refused>> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
        .bind(new.user_id)
        .execute(&mut *tx)
        .await?;
    let grace = GRACE.as_secs_f64();
    let mine: Vec<Row> = sqlx::query_as(
        "SELECT host_label, namespace, channel, claimed_at < now() - make_interval(secs => $2) AS settled
         FROM channel_claims WHERE user_id = $1",
    )
        .bind(new.user_id)
        .bind(grace)
        .fetch_all(&mut *tx)
        .await?;
    let (lapsed, held): (Vec<Row>, Vec<Row>) = mine.into_iter().partition(|r| r.lapsed(cluster));
    let lapsed: Vec<String> = lapsed.into_iter().map(|r| r.host_label).collect();
    sqlx::query("DELETE FROM channel_claims WHERE host_label = ANY($1)")
        .bind(&lapsed)
        .execute(&mut *tx)
        .await?;

    let mut in_use = cluster.counted_channels(new.namespace);
    in_use.extend(held.into_iter().map(|r| r.channel));
    if in_use.len() >= max_channels as usize {
        return Ok(Err(Refused::PlanLimit));
    }

    let holder: Option<Row> = sqlx::query_as(
        "SELECT host_label, namespace, channel, claimed_at < now() - make_interval(secs => $2) AS settled
         FROM channel_claims WHERE host_label = $1 FOR UPDATE",
    )
        .bind(new.host_label)
        .bind(grace)
        .fetch_optional(&mut *tx)
        .await?;
    match holder {
        Some(h) if h.namespace == new.namespace && h.channel == new.channel => {
            return Ok(Err(Refused::SameChannel));
        }
        Some(h) if !h.lapsed(cluster) => return Ok(Err(Refused::HostTaken)),
        Some(h) => {
            sqlx::query("DELETE FROM channel_claims WHERE host_label = $1")
                .bind(&h.host_label)
                .execute(&mut *tx)
                .await?;
        }
        None => {}
    }
    sqlx::query(
        "INSERT INTO channel_claims (host_label, user_id, namespace, app, channel) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(new.host_label)
    .bind(new.user_id)
    .bind(new.namespace)
    .bind(new.app)
    .bind(new.channel)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(()))
}

/// Releases the claim of the Channel resource `channel` in `namespace` (its creation failed, or it was deleted).
pub async fn release(db: &PgPool, namespace: &str, channel: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM channel_claims WHERE namespace = $1 AND channel = $2")
        .bind(namespace)
        .bind(channel)
        .execute(db)
        .await?;
    Ok(())
}

/// Releases the claims of every channel of a deleted app.
pub async fn release_app(db: &PgPool, namespace: &str, app: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM channel_claims WHERE namespace = $1 AND app = $2")
        .bind(namespace)
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}
