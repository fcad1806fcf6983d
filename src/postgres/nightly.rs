//! Nightly checkpoints: every few minutes one API server (whichever holds the advisory lock, so several replicas
//! never dump the same database twice) looks for ready channel databases without a `nightly` snapshot of the
//! current UTC day and takes a checkpoint of each (the SQL snapshot and, when the channel's bucket is ready, its
//! object-store marker), pruning the channel to its owner's plan after each. A database that
//! fails, or whose owner's account cannot be read, is logged and tried again at the next pass; the others go on.

use std::time::Duration;

use slipway_crds::conditions;
use slipway_crds::plans::Plan;

use super::snapshots::{Kind, Occasion, Parts};
use super::store::Record;
use crate::api::state::AppState;
use crate::checkpoints::{self, Legs, SqlLeg};

/// How often the API server looks for databases due a nightly snapshot.
pub const CHECK_EVERY: Duration = Duration::from_secs(600);

/// The advisory lock only one API server holds while taking nightly snapshots.
const LOCK: i64 = 0x0073_6c69_706e_6967;

/// Takes due nightly snapshots every [`CHECK_EVERY`], for the life of the process.
pub async fn run(state: AppState) {
    loop {
        match pass(&state).await {
            Ok(0) => {}
            Ok(taken) => tracing::info!(taken, "nightly snapshots taken"),
            Err(e) => tracing::warn!(error = %e, "the nightly snapshot pass failed"),
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// One pass: takes every due nightly snapshot, unless another API server is at it; how many it took.
pub async fn pass(state: &AppState) -> anyhow::Result<usize> {
    let (Some(server), Some(archive)) = (state.data_server(), state.snapshot_archive()) else {
        return Ok(0);
    };
    // Held for the whole pass: on a connection of its own, not one of the requests'.
    let mut lock = crate::db::lock_connection(state.db()).await?;
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK)
        .fetch_one(&mut lock)
        .await?;
    if !held {
        return Ok(0);
    }
    let parts = Parts {
        db: state.db(),
        server,
        archive,
    };
    let taken = take_due(state, parts).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK)
        .execute(&mut lock)
        .await?;
    sqlx::Connection::close(lock).await?;
    taken
}

async fn take_due(state: &AppState, parts: Parts<'_>) -> anyhow::Result<usize> {
    let due: Vec<Record> = sqlx::query_as(
        "SELECT d.* FROM channel_databases d WHERE NOT EXISTS (SELECT 1 FROM postgres_snapshots s \
         WHERE s.channel_id = d.channel_id AND s.kind = 'nightly' \
         AND s.taken_on = (now() AT TIME ZONE 'UTC')::date) ORDER BY d.created_at",
    )
    .fetch_all(parts.db)
    .await?;
    let channels = state.cache().channels();
    let mut taken = 0;
    for record in due {
        let uid = record.channel_id.to_string();
        let Some(channel) = channels
            .iter()
            .find(|c| c.metadata.uid.as_deref() == Some(uid.as_str()))
        else {
            continue;
        };
        if !channel.condition_is_true(conditions::DATABASE_READY) {
            continue;
        }
        let occasion = Occasion {
            kind: Kind::Nightly,
            deploy_id: None,
            git_sha: channel.status.as_ref().and_then(|s| s.current_sha.clone()),
        };
        // One account that cannot be read (no row, an unknown plan) holds back its own channels only.
        let plan = match owner_plan(parts.db, &record.owner).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(db_name = %record.db_name, error = %e, "nightly snapshot skipped; retried next pass");
                continue;
            }
        };
        let legs = Legs {
            sql: Some(SqlLeg {
                parts,
                record: &record,
            }),
            blob: checkpoints::blob_leg(state, channel, record.channel_id).await,
        };
        let progress = crate::jobs::Progress::default();
        match checkpoints::take(
            parts.db,
            record.channel_id,
            legs,
            &occasion,
            plan,
            &progress,
        )
        .await
        {
            Ok(_) => taken += 1,
            Err(e) => {
                tracing::warn!(db_name = %record.db_name, error = %e, "nightly snapshot failed; retried next pass");
            }
        }
    }
    Ok(taken)
}

/// The plan of the account `owner`.
pub async fn owner_plan(db: &sqlx::PgPool, owner: &str) -> anyhow::Result<&'static Plan> {
    let user = crate::db::users::by_username(db, owner)
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner {owner} has no account"))?;
    Plan::by_tier(&user.plan).ok_or_else(|| anyhow::anyhow!("unknown plan {}", user.plan))
}
