//! Follows one container instance's output through the pod log API (with the kubelet's RFC 3339 timestamps) and
//! appends it, in batches of whole lines, to the instance's generation through the API's internal route. Lines up
//! to the generation's last recorded timestamp are skipped, so a follower that starts again after an operator
//! restart or a broken stream adds only what is missing.

use std::time::Duration;

use futures::{AsyncBufReadExt, AsyncReadExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::LogParams;
use slipway_internal::{CallError, InternalClient};

use crate::workload::APP_CONTAINER;

/// A batch is sent once it holds this much, or [`FLUSH_EVERY`] after its first line.
const BATCH_BYTES: usize = 64 * 1024;
/// How long a line waits before it is sent.
const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// A line longer than this is cut (the rest of it starts a line of its own with the same timestamp).
const LINE_LIMIT: usize = 256 * 1024;
/// What a follower holds while the API cannot take it; older lines are dropped beyond it.
const BACKLOG_LIMIT: usize = 4 * 1024 * 1024;

/// One instance to follow.
pub struct Target {
    /// Its pod's Api (namespaced).
    pub pods: Api<Pod>,
    /// Its pod.
    pub pod: String,
    /// The runtime's id of the instance (the generation's key).
    pub container_id: String,
    /// Whether it is the pod's previous instance (read with `previous`, never followed).
    pub previous: bool,
    /// The last timestamp already recorded.
    pub recorded_until: Option<String>,
}

/// How following ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The stream ended: the instance stopped (or its pod went) and everything it wrote is recorded.
    Drained,
    /// The stream broke while the instance may still run: follow again.
    Interrupted,
    /// The API no longer records this generation (its app or channel is gone).
    Forgotten,
}

/// Follows `target` until its output ends; batches reach `internal`. Answers how it ended and the timestamp of the
/// last line recorded.
pub async fn follow(target: &Target, internal: &InternalClient) -> (Outcome, Option<String>) {
    let mut batch = Batch::new(target.recorded_until.clone());
    let outcome = follow_into(target, internal, &mut batch).await;
    let recorded = batch
        .recorded_until
        .map(|t| t.to_string())
        .or_else(|| target.recorded_until.clone());
    (outcome, recorded)
}

async fn follow_into(target: &Target, internal: &InternalClient, batch: &mut Batch) -> Outcome {
    let params = LogParams {
        container: Some(APP_CONTAINER.to_owned()),
        follow: !target.previous,
        previous: target.previous,
        timestamps: true,
        since_time: target
            .recorded_until
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok()),
        ..LogParams::default()
    };
    let stream = match target.pods.log_stream(&target.pod, &params).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(pod = %target.pod, error = %e, "no log stream (yet)");
            return Outcome::Interrupted;
        }
    };
    if !target.previous && !still_current(target).await {
        // The instance ended and the pod started another before the stream opened: that stream is the new one's.
        return Outcome::Interrupted;
    }
    let mut lines = Box::pin(stream);
    // A read cut short by the flush timer leaves its part of a line here; the next read completes it.
    let mut line = Vec::new();
    // Whether the last line pushed was cut at LINE_LIMIT: the next one is its rest, whatever it starts with.
    let mut continues = false;
    loop {
        let read = if batch.is_empty() {
            Ok(read_line(&mut lines, &mut line).await)
        } else {
            tokio::time::timeout(FLUSH_EVERY, read_line(&mut lines, &mut line)).await
        };
        match read {
            Err(_elapsed) => {
                if let Some(outcome) = batch.send(target, internal).await {
                    return outcome;
                }
            }
            Ok(Ok(0)) => {
                if !line.is_empty() {
                    batch.push(&line, continues);
                }
                // End of the stream: whatever is left goes now, retried while the API is briefly away.
                for _ in 0..20 {
                    match batch.send(target, internal).await {
                        None if batch.is_empty() => return Outcome::Drained,
                        Some(Outcome::Forgotten) => return Outcome::Forgotten,
                        _ => tokio::time::sleep(Duration::from_millis(500)).await,
                    }
                }
                return Outcome::Interrupted;
            }
            Ok(Ok(_)) => {
                if line.ends_with(b"\n") || line.len() >= LINE_LIMIT {
                    batch.push(&line, continues);
                    continues = !line.ends_with(b"\n");
                    line.clear();
                }
                if batch.bytes.len() >= BATCH_BYTES
                    && let Some(outcome) = batch.send(target, internal).await
                {
                    return outcome;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(pod = %target.pod, error = %e, "log stream broke");
                let _ = batch.send(target, internal).await;
                return Outcome::Interrupted;
            }
        }
    }
}

/// Whether the pod's current instance is still the one followed (the log API names no instance, only the pod's
/// current or previous one).
async fn still_current(target: &Target) -> bool {
    match target.pods.get_opt(&target.pod).await {
        Ok(Some(pod)) => super::instances::of_pod(&pod)
            .iter()
            .any(|i| i.current && i.container_id == target.container_id),
        _ => false,
    }
}

/// Reads on into `line` up to its newline or until it holds [`LINE_LIMIT`] bytes; 0 at the end of the stream.
async fn read_line<R: futures::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let room = LINE_LIMIT.saturating_sub(line.len()).max(1);
    let mut limited = reader.take(room as u64);
    limited.read_until(b'\n', line).await
}

/// Lines waiting to be sent, and where the recorded output ends.
struct Batch {
    bytes: Vec<u8>,
    /// The last timestamp recorded (skipped lines are at or before it).
    recorded_until: Option<Timestamp>,
    /// The timestamp of the last line in `bytes`.
    last: Option<String>,
}

impl Batch {
    fn new(recorded_until: Option<String>) -> Self {
        Self {
            bytes: Vec::new(),
            recorded_until: recorded_until.and_then(|t| t.parse().ok()),
            last: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Adds a line unless it was recorded before. The rest of a line cut at [`LINE_LIMIT`] (`continues`) gets the
    /// previous line's timestamp: what it starts with is the app's own output, never a timestamp to trust.
    fn push(&mut self, line: &[u8], continues: bool) {
        if continues {
            if let Some(last) = self.last.clone() {
                let mut continued = format!("{last} ").into_bytes();
                continued.extend_from_slice(line);
                self.append(&continued, last);
            }
            return;
        }
        let stamped = split_stamp(line)
            .and_then(|(stamp, _)| Some((stamp.parse::<Timestamp>().ok()?, stamp)));
        let Some((at, stamp)) = stamped else {
            return;
        };
        if self.recorded_until.is_some_and(|until| at <= until) {
            return;
        }
        self.append(line, stamp.to_owned());
    }

    fn append(&mut self, line: &[u8], stamp: String) {
        self.bytes.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            self.bytes.push(b'\n');
        }
        self.last = Some(stamp);
        if self.bytes.len() > BACKLOG_LIMIT {
            let cut = self.bytes.len() - BACKLOG_LIMIT;
            let start = self.bytes[cut..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(self.bytes.len(), |p| cut + p + 1);
            self.bytes.drain(..start);
        }
    }

    /// Sends the batch; `Some` when following must stop.
    async fn send(&mut self, target: &Target, internal: &InternalClient) -> Option<Outcome> {
        if self.bytes.is_empty() {
            return None;
        }
        match internal
            .append_runtime_log(&target.container_id, self.bytes.clone())
            .await
        {
            Ok(()) => {
                self.bytes.clear();
                self.recorded_until = self.last.as_deref().and_then(|t| t.parse().ok());
                None
            }
            Err(CallError::NotFound(_)) => Some(Outcome::Forgotten),
            Err(e) => {
                tracing::debug!(pod = %target.pod, error = %e, "runtime log not recorded yet; kept for the next try");
                None
            }
        }
    }
}

/// A kubelet log line's timestamp and the rest.
fn split_stamp(line: &[u8]) -> Option<(&str, &[u8])> {
    let space = line.iter().position(|b| *b == b' ')?;
    let stamp = std::str::from_utf8(&line[..space]).ok()?;
    Some((stamp, &line[space + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_recorded_before_are_skipped_and_a_line_without_newline_gets_one() {
        let mut batch = Batch::new(Some("2026-11-24T10:00:01.5Z".into()));
        batch.push(b"2026-11-24T10:00:01.000000000Z old\n", false);
        batch.push(b"2026-11-24T10:00:01.500000000Z same instant\n", false);
        batch.push(b"2026-11-24T10:00:02.000000000Z new\n", false);
        batch.push(b"2026-11-24T10:00:03.000000000Z no newline", false);
        // The rest of a cut line keeps the line's timestamp, even when the app printed one that looks newer.
        batch.push(b"2099-01-01T00:00:00Z rest of a long line\n", true);
        // A line of no timestamp is no kubelet line.
        batch.push(b"garbage\n", false);
        assert_eq!(
            String::from_utf8(batch.bytes.clone()).unwrap(),
            "2026-11-24T10:00:02.000000000Z new\n2026-11-24T10:00:03.000000000Z no newline\n\
             2026-11-24T10:00:03.000000000Z 2099-01-01T00:00:00Z rest of a long line\n"
        );
        assert_eq!(
            batch.last.as_deref(),
            Some("2026-11-24T10:00:03.000000000Z")
        );
    }

    #[test]
    fn a_backlog_past_its_limit_drops_its_oldest_whole_lines() {
        let mut batch = Batch::new(None);
        let filler = "x".repeat(1024 * 1024);
        for second in 0..6 {
            batch.push(
                format!("2026-11-24T10:00:0{second}Z {filler}\n").as_bytes(),
                false,
            );
        }
        assert!(batch.bytes.len() <= BACKLOG_LIMIT);
        assert!(batch.bytes.starts_with(b"2026-11-24T10:00:0"));
        assert!(batch.bytes.ends_with(b"x\n"));
    }
}
