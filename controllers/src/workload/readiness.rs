//! Judging a deploy's pods against the readiness window, as a pure function of what the cluster reports and the
//! time, so the rules are tested without waiting: the pod passed in time, the process keeps crashing (fail early,
//! with its last output), or nothing yet (fail when the window is over, saying which checks timed out).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::objects::{APP_CONTAINER, HTTP_PORT};

/// The hosting API's readiness window, measured from the Deployment's creation.
pub const WINDOW: Duration = Duration::from_secs(120);
/// Exits of the app container after which a deploy fails before the window is over.
pub const CRASH_LIMIT: i32 = 3;
/// Lines of a crashed process's output quoted in the failure message.
pub const QUOTED_LINES: i64 = 5;
/// Longest quoted output, in characters, so the message stays a line.
const QUOTED_MAX_CHARS: usize = 600;

/// What the pods of a deploy say about its readiness.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A pod passed within the window; its sidecar's log says which check.
    Passed {
        /// The pod that passed.
        pod: String,
    },
    /// The app container exited [`CRASH_LIMIT`] times before passing.
    Crashing {
        /// The pod whose container crashes.
        pod: String,
        /// How often it exited.
        restarts: i32,
        /// How it last ended (exit code or reason).
        last_exit: String,
    },
    /// Not passed yet; `detail` says why the pod is held up when it is (a pull failing, no node).
    Waiting {
        /// What holds the pod up, if anything.
        detail: Option<String>,
    },
}

/// When the `window` of a Deployment created at `created` closes.
pub fn deadline(created: Timestamp, window: Duration) -> Timestamp {
    let window = SignedDuration::from_secs(window.as_secs().try_into().unwrap_or(i64::MAX));
    created.checked_add(window).unwrap_or(Timestamp::MAX)
}

/// Judges the deploy's `pods` (those not being deleted) against the window that closes at `deadline`.
pub fn observe(pods: &[Pod], deadline: Timestamp) -> Observation {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if let Some(pod) = live
        .iter()
        .find(|p| ready_since(p).is_some_and(|t| t <= deadline))
    {
        return Observation::Passed {
            pod: pod.metadata.name.clone().unwrap_or_default(),
        };
    }
    for pod in &live {
        if let Some(app) = container_status(pod, APP_CONTAINER)
            && app.restart_count >= CRASH_LIMIT
            && !is_running(app.state.as_ref())
        {
            return Observation::Crashing {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                restarts: app.restart_count,
                last_exit: last_exit(app),
            };
        }
    }
    Observation::Waiting {
        detail: live.iter().find_map(|p| held_up(p)),
    }
}

/// When the pod's Ready condition last became true, if it is true.
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    // A Ready condition always carries its transition time; without one, count it as just now.
    Some(
        condition
            .last_transition_time
            .as_ref()
            .map_or_else(Timestamp::now, |t| t.0),
    )
}

fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

fn is_running(state: Option<&ContainerState>) -> bool {
    state.is_some_and(|s| s.running.is_some())
}

/// How the container's last run ended: `exit code 1`, or `OOMKilled (exit code 137)`.
fn last_exit(status: &ContainerStatus) -> String {
    let terminated = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| status.state.as_ref().and_then(|s| s.terminated.as_ref()));
    match terminated {
        Some(t) => match t.reason.as_deref() {
            Some(reason) if reason != "Error" && reason != "Completed" => {
                format!("{reason} (exit code {})", t.exit_code)
            }
            _ => format!("exit code {}", t.exit_code),
        },
        None => "unknown".to_owned(),
    }
}

/// Why a pod is held up, when a container waits for something other than its normal start, or the pod has no
/// node.
fn held_up(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let waiting = status.container_statuses.iter().flatten().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        (reason != "ContainerCreating" && reason != "PodInitializing").then(|| {
            let message = waiting.message.as_deref().unwrap_or("");
            format!("container {} is waiting: {reason} {message}", c.name)
                .trim_end()
                .to_owned()
        })
    });
    waiting.or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .map(|c| {
                format!(
                    "the pod is not scheduled: {}",
                    c.message.as_deref().unwrap_or("no reason given")
                )
            })
    })
}

/// Why a deploy failed when its `window` closed without a check passing.
pub fn timed_out_message(ready_file: &str, detail: Option<&str>, window: Duration) -> String {
    let mut message = format!(
        "readiness: GET / on port {HTTP_PORT} never answered 2xx and {ready_file} was not created within {}s",
        window.as_secs()
    );
    if let Some(detail) = detail {
        message.push_str("; ");
        message.push_str(detail);
    }
    message
}

/// Why a deploy failed when its process kept exiting, quoting the end of its last run's output.
pub fn crashed_message(restarts: i32, last_exit: &str, output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines
        .len()
        .saturating_sub(QUOTED_LINES.try_into().unwrap_or(5))..]
        .join(" | ");
    let mut quoted: String = tail.chars().take(QUOTED_MAX_CHARS).collect();
    if quoted.len() < tail.len() {
        quoted.push('…');
    }
    let mut message = format!(
        "readiness: the process exited {restarts} times before passing (last: {last_exit})"
    );
    if quoted.is_empty() {
        message.push_str("; it printed nothing");
    } else {
        message.push_str("; last output: ");
        message.push_str(&quoted);
    }
    message
}

#[cfg(test)]
mod tests;
