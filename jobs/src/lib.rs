//! Jobs: work that can outgrow an HTTP request, recorded in the platform database and run by whichever API replica
//! claims it.
//!
//! A pre-deploy checkpoint of a 5 GB database dumps for minutes. Run inside a request, such work was cut by the
//! request's timeout (and started again from zero by a caller that retried), cancelled by a client that went away,
//! and lost without a trace when its process died. As a job it is a row (`jobs`) with a state, bytes done and
//! total, a heartbeat and an error:
//!
//! - **Claim** ([`store::claim`]): a runner takes the oldest runnable job with `FOR UPDATE SKIP LOCKED`, so
//!   replicas never take the same one, and marks it `running` under its own name with a lease. A unique index
//!   admits one running job per *scope* (a channel's jobs), so two of a channel's jobs never overlap, whichever
//!   replicas run them; later jobs of the scope wait `queued`, in order.
//! - **Heartbeat** ([`runner`]): while it works, the runner renews the lease every [`Timing::heartbeat`] (a
//!   fraction of [`Timing::lease`]) and writes its progress. A renewal that finds the job no longer its own (taken
//!   over after a pause longer than the lease, or cancelled) stops the work at once.
//! - **Takeover**: a `running` job whose lease lapsed belongs to a process that died. Any runner's next poll
//!   claims it again (one more attempt), and the kind's work starts over from what is recorded: every kind is
//!   written to be run again (a checkpoint writes its row only once its file is whole). Past its `max_attempts`
//!   such a job is failed instead, with the data as the kind leaves it on an interruption (unchanged).
//! - **Callers wait, jobs do not**: a route that starts a job and answers its outcome ([`runner::wait_at_most`])
//!   only reads the row, so a client that goes away, or a request cut short, leaves the job running; the job's own
//!   task belongs to the runner, not to the request.

pub mod metrics;
pub mod runner;
pub mod store;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub use runner::{JobError, Progress, Runner, Timing, Work};

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A channel's checkpoint before a deploy: its SQL snapshot and bucket marker.
    Checkpoint,
    /// A channel's daily checkpoint.
    NightlyCheckpoint,
    /// An SQL snapshot put back into its channel's database.
    SqlRestore,
    /// A bucket copied forward to a checkpoint.
    BucketRestore,
    /// An app's repository fetched from the external one it mirrors.
    MirrorSync,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [
        Kind::Checkpoint,
        Kind::NightlyCheckpoint,
        Kind::SqlRestore,
        Kind::BucketRestore,
        Kind::MirrorSync,
    ];

    /// The name rows use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Checkpoint => "checkpoint",
            Kind::NightlyCheckpoint => "nightly_checkpoint",
            Kind::SqlRestore => "sql_restore",
            Kind::BucketRestore => "bucket_restore",
            Kind::MirrorSync => "mirror_sync",
        }
    }

    /// The kind a row names.
    pub fn parse(name: &str) -> Option<Kind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether it is background work nobody asked for (the nightly checkpoint): an exclusive ask in its scope
    /// waits behind it rather than being refused.
    pub fn is_background(self) -> bool {
        self == Kind::NightlyCheckpoint
    }

    /// How many times a job of this kind is claimed (a takeover after its process died is one more) before it is
    /// failed as interrupted.
    pub fn max_attempts(self) -> i32 {
        match self {
            Kind::Checkpoint | Kind::NightlyCheckpoint | Kind::SqlRestore | Kind::BucketRestore => {
                3
            }
            // A fetch is safe to run again, but one whose process died twice is more likely the fetch's fault.
            Kind::MirrorSync => 2,
        }
    }
}

/// A job's state.
pub mod state {
    /// Waiting for a runner (or for the job ahead of it in its scope).
    pub const QUEUED: &str = "queued";
    /// Claimed by a runner whose lease holds (or lapsed, until another claims it).
    pub const RUNNING: &str = "running";
    /// Done; `result` says what it made.
    pub const SUCCEEDED: &str = "succeeded";
    /// Failed; `error` says why.
    pub const FAILED: &str = "failed";
}

/// Scopes: the jobs of one scope run one at a time.
pub mod scope {
    use uuid::Uuid;

    /// A channel's checkpoints and restores.
    pub fn channel(channel_id: Uuid) -> String {
        format!("channel:{channel_id}")
    }

    /// An app's mirror syncs.
    pub fn mirror(app_id: Uuid) -> String {
        format!("mirror:{app_id}")
    }
}

/// A row of `jobs`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Job {
    /// Its id.
    pub id: Uuid,
    /// Its kind's name ([`Kind::as_str`]).
    pub kind: String,
    /// What runs one at a time with it.
    pub scope: String,
    /// The app it concerns.
    pub app_id: Option<Uuid>,
    /// The channel it concerns.
    pub channel_id: Option<Uuid>,
    /// What it is for (one job per kind and subject that has not failed).
    pub subject: Option<String>,
    /// What the work needs.
    pub params: sqlx::types::Json<Value>,
    /// [`state`].
    pub state: String,
    /// Bytes done.
    pub bytes_done: i64,
    /// Bytes in all, once known.
    pub bytes_total: Option<i64>,
    /// Claims so far.
    pub attempts: i32,
    /// Claims allowed.
    pub max_attempts: i32,
    /// The runner that holds it.
    pub runner: Option<String>,
    /// Its runner's last heartbeat.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Until when the claim holds without another heartbeat (for a queued job: not before).
    pub lease_until: Option<DateTime<Utc>>,
    /// Why it failed.
    pub error: Option<String>,
    /// What it produced.
    pub result: Option<sqlx::types::Json<Value>>,
    /// What its work recorded mid-way for a runner that takes it over ([`store::hand_over`]).
    pub handover: Option<sqlx::types::Json<Value>>,
    /// When it was asked for.
    pub created_at: DateTime<Utc>,
    /// When it was first claimed.
    pub started_at: Option<DateTime<Utc>>,
    /// When it succeeded or failed.
    pub finished_at: Option<DateTime<Utc>>,
}

impl Job {
    /// Its kind (`None` for a row of a kind this version does not know).
    pub fn kind(&self) -> Option<Kind> {
        Kind::parse(&self.kind)
    }

    /// Whether it has succeeded or failed.
    pub fn is_finished(&self) -> bool {
        self.state == state::SUCCEEDED || self.state == state::FAILED
    }

    /// How long it has been running (since its first claim), or zero while it waits.
    pub fn running_for(&self) -> Duration {
        self.started_at
            .and_then(|at| (Utc::now() - at).to_std().ok())
            .unwrap_or_default()
    }

    /// A field of its result.
    pub fn result_field(&self, name: &str) -> Option<&Value> {
        self.result.as_ref().and_then(|r| r.0.get(name))
    }

    /// A field of what an earlier attempt handed over.
    pub fn handover_field(&self, name: &str) -> Option<&Value> {
        self.handover.as_ref().and_then(|h| h.0.get(name))
    }

    /// Where it is, in words: "1.2 GiB of 2.5 GiB, 38 s", "queued", "640 MiB, 12 s".
    pub fn progress_line(&self) -> String {
        if self.state == state::QUEUED {
            return "queued".to_owned();
        }
        progress_line(
            u64::try_from(self.bytes_done).unwrap_or(0),
            self.bytes_total.and_then(|t| u64::try_from(t).ok()),
            self.running_for(),
        )
    }
}

/// A job to record.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Its kind.
    pub kind: Kind,
    /// What runs one at a time with it.
    pub scope: String,
    /// The app it concerns.
    pub app_id: Option<Uuid>,
    /// The channel it concerns.
    pub channel_id: Option<Uuid>,
    /// What it is for.
    pub subject: Option<String>,
    /// What the work needs.
    pub params: Value,
    /// Claims allowed ([`Kind::max_attempts`] unless said otherwise).
    pub max_attempts: i32,
}

impl NewJob {
    /// A job of `kind` on channel `channel_id` of app `app_id`, in the channel's scope, that needs `params`.
    pub fn for_channel(kind: Kind, app_id: Uuid, channel_id: Uuid, params: Value) -> Self {
        Self {
            app_id: Some(app_id),
            channel_id: Some(channel_id),
            params,
            ..Self::new(kind, scope::channel(channel_id))
        }
    }

    /// A job of `kind` in `scope`, for no subject in particular, that needs nothing.
    pub fn new(kind: Kind, scope: String) -> Self {
        Self {
            kind,
            scope,
            app_id: None,
            channel_id: None,
            subject: None,
            params: Value::Null,
            max_attempts: kind.max_attempts(),
        }
    }
}

/// Runs `work` with `meanwhile` beside it (a loop that reads or tells progress, say) until `work` ends; what
/// `work` returns.
pub async fn alongside<T>(
    work: impl Future<Output = T>,
    meanwhile: impl Future<Output = std::convert::Infallible>,
) -> T {
    tokio::select! {
        done = work => done,
        never = meanwhile => match never {},
    }
}

/// Work `done` bytes in of `total` (when known), `elapsed` since it began, in words: "1.2 GiB of 2.5 GiB, 38 s".
pub fn progress_line(done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    match total {
        Some(total) => format!("{} of {}, {seconds} s", gib(done), gib(total)),
        None => format!("{}, {seconds} s", gib(done)),
    }
}

/// Bytes in the binary units people read: `512 B`, `640 MiB`, `1.2 GiB`.
pub fn gib(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    // Precision is not the point of a progress line.
    #[allow(clippy::cast_precision_loss)]
    let mut value = bytes as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(gib(0), "0 B");
        assert_eq!(gib(1023), "1023 B");
        assert_eq!(gib(1536), "1.5 KiB");
        assert_eq!(gib(640 << 20), "640 MiB");
        assert_eq!(gib((12 << 30) / 10), "1.2 GiB");
        assert_eq!(gib(5 << 40), "5.0 TiB");
    }

    #[test]
    fn progress_reads_as_done_of_total_and_seconds() {
        let total = (25 << 30) / 10;
        let line = progress_line((12 << 30) / 10, Some(total), Duration::from_millis(38_900));
        assert_eq!(line, "1.2 GiB of 2.5 GiB, 38 s");
        assert_eq!(
            progress_line(640 << 20, None, Duration::from_secs(12)),
            "640 MiB, 12 s"
        );
    }

    #[test]
    fn kinds_round_trip_their_names() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("export"), None);
    }
}
