//! How far a `pg_dump` has got, in the bytes of the database's tables, read from the data server itself: the dump's
//! `COPY ... TO stdout` of each table reports its bytes in `pg_stat_progress_copy`. The tables' sizes are read once
//! at the start (their total is the work's size); each sample counts the tables the dump has left behind as done
//! and the one it is copying as far as its bytes go. The dump's session is found by its `application_name`, which
//! [`dump_session_name`] makes unique per dump.
//!
//! What a dump writes is compressed and smaller than what it reads, so the bytes of the file say little about how
//! far it is; the tables' bytes do. The figure is an estimate (a table's text form is not its size on disk) held
//! within its bounds: never past a table's size, never past the total.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use slipway_backends::data_server::DataServer;

use slipway_jobs::Progress;

/// How often the server is asked: one catalog query per dump, often enough that a dump of a few seconds shows
/// how far it got before it ends (at 2 s a 2-second dump of a 241 MiB table was never sampled).
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// The `application_name` of the dump with id `id`.
pub fn dump_session_name(id: uuid::Uuid) -> String {
    format!("slipway-dump-{}", id.simple())
}

/// A dump being followed.
pub struct DumpWatch<'a> {
    server: &'a DataServer,
    session: String,
    /// Each table's bytes, by oid.
    sizes: HashMap<i64, u64>,
    total: u64,
    /// Tables the dump has left behind.
    finished: HashSet<i64>,
    /// The table being copied.
    current: Option<i64>,
}

impl<'a> DumpWatch<'a> {
    /// Reads the sizes of `db_name`'s tables, for the dump whose session is named `session`.
    pub async fn start(
        server: &'a DataServer,
        db_name: &str,
        session: String,
    ) -> anyhow::Result<DumpWatch<'a>> {
        let mut conn = server.connect_to(db_name).await?;
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT c.oid::bigint, pg_table_size(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'm') AND n.nspname <> 'information_schema' \
               AND n.nspname NOT LIKE 'pg\\_%'",
        )
        .fetch_all(&mut conn)
        .await?;
        sqlx::Connection::close(conn).await.ok();
        let sizes: HashMap<i64, u64> = rows
            .into_iter()
            .map(|(oid, size)| (oid, u64::try_from(size).unwrap_or(0)))
            .collect();
        let total = sizes.values().sum();
        Ok(Self {
            server,
            session,
            sizes,
            total,
            finished: HashSet::new(),
            current: None,
        })
    }

    /// Runs `dump` (the work that reads the dump's output to its end), sampling the dump's progress into
    /// `progress` twice a second meanwhile; what `dump` returns. A sample that fails is skipped.
    pub async fn during<T>(mut self, progress: &Progress, dump: impl Future<Output = T>) -> T {
        progress.set_total(self.total);
        slipway_jobs::alongside(dump, async {
            loop {
                tokio::time::sleep(SAMPLE_EVERY).await;
                match self.sample().await {
                    Ok(done) => progress.set_done(done),
                    Err(e) => tracing::debug!(error = %e, "could not sample a dump's progress"),
                }
            }
        })
        .await
    }

    async fn sample(&mut self) -> sqlx::Result<u64> {
        let copying: Option<(i64, i64)> = sqlx::query_as(
            "SELECT p.relid::bigint, p.bytes_processed FROM pg_stat_progress_copy p \
             JOIN pg_stat_activity a ON a.pid = p.pid WHERE a.application_name = $1 LIMIT 1",
        )
        .bind(&self.session)
        .fetch_optional(self.server.pool())
        .await?;
        Ok(self.account(copying.map(|(oid, bytes)| (oid, u64::try_from(bytes).unwrap_or(0)))))
    }

    /// Counts a sample: the table copied now (and its bytes so far), if any.
    fn account(&mut self, copying: Option<(i64, u64)>) -> u64 {
        let now = copying.map(|(oid, _)| oid);
        if let Some(previous) = self.current
            && now != Some(previous)
        {
            self.finished.insert(previous);
        }
        self.current = now;
        let finished: u64 = self
            .finished
            .iter()
            .filter_map(|oid| self.sizes.get(oid))
            .sum();
        let partial = copying.map_or(0, |(oid, bytes)| {
            bytes.min(self.sizes.get(&oid).copied().unwrap_or(0))
        });
        (finished + partial).min(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(server: &DataServer) -> DumpWatch<'_> {
        DumpWatch {
            server,
            session: "s".into(),
            sizes: [(1, 100), (2, 1000), (3, 50)].into(),
            total: 1150,
            finished: HashSet::new(),
            current: None,
        }
    }

    #[tokio::test]
    async fn tables_left_behind_count_whole_and_the_current_one_as_far_as_it_got() {
        let server = DataServer::new("postgres://a:b@127.0.0.1:1/postgres").unwrap();
        let mut w = watch(&server);
        assert_eq!(w.account(None), 0, "before the first COPY");
        assert_eq!(w.account(Some((1, 40))), 40);
        assert_eq!(w.account(Some((2, 300))), 100 + 300, "table 1 is done");
        assert_eq!(
            w.account(Some((2, 5000))),
            100 + 1000,
            "a table's text can outgrow its size on disk; it counts no more than its size"
        );
        assert_eq!(
            w.account(None),
            1100,
            "table 2 is done; table 3 was never seen"
        );
    }
}
