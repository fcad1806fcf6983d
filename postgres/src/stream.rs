//! A client program's stdout as a response body (a dump, streamed as it is written, never held whole). The body
//! ends cleanly only when the program exits 0; otherwise its last item is an error, so the server aborts the
//! transfer and the client sees a broken download rather than a short file that looks complete. The program is
//! killed when the body is dropped (the client went away).

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::io::ReaderStream;

/// Bytes of the program's stderr kept for the error message.
const STDERR_LIMIT: u64 = 4096;

/// The pipe's size, and the most one read takes from it: Linux's ceiling for an unprivileged pipe
/// (`/proc/sys/fs/pipe-max-size`). With the default 64 KiB pipe read 4 KiB at a time, a dump of a gigabyte took a
/// quarter of a million reads, and the dump waited on each of them.
const PIPE_BYTES: usize = 1 << 20;

/// Spawns `command` (stdout and stderr piped, killed on drop) and streams its stdout; `what` names it in errors.
pub fn stdout_of(
    mut command: Command,
    what: &'static str,
) -> std::io::Result<impl Stream<Item = std::io::Result<Bytes>> + Send + 'static> {
    let mut child = command.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other(format!("{what}: stdout is not piped")))?;
    // Best effort: a smaller pipe only costs more reads.
    if let Err(e) = nix::fcntl::fcntl(
        &stdout,
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32),
    ) {
        tracing::debug!(what, error = %e, "could not grow the pipe");
    }
    // Drained alongside, so a chatty program never blocks on a full pipe.
    let stderr = child.stderr.take().map(|stderr| {
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.take(STDERR_LIMIT).read_to_string(&mut text).await;
            text
        })
    });
    let end = futures::stream::once(async move {
        let status = child.wait().await?;
        if status.success() {
            return Ok(None);
        }
        let message = match stderr {
            Some(task) => task.await.unwrap_or_default(),
            None => String::new(),
        };
        Err(std::io::Error::other(format!(
            "{what} failed ({status}): {}",
            message.trim()
        )))
    })
    .filter_map(|end: std::io::Result<Option<Bytes>>| async move { end.transpose() });
    Ok(ReaderStream::with_capacity(stdout, PIPE_BYTES).chain(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    }

    async fn collect(script: &str) -> (Vec<u8>, Option<String>) {
        let mut stream = Box::pin(stdout_of(sh(script), "test").unwrap());
        let mut bytes = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(e) => return (bytes, Some(e.to_string())),
            }
        }
        (bytes, None)
    }

    #[tokio::test]
    async fn a_program_that_succeeds_ends_the_stream_cleanly() {
        let (bytes, error) = collect("printf 'all of it'").await;
        assert_eq!(bytes, b"all of it");
        assert_eq!(error, None);
    }

    #[tokio::test]
    async fn a_program_that_fails_half_way_ends_the_stream_with_an_error() {
        let (bytes, error) = collect("printf 'half'; echo 'disk gone' >&2; exit 3").await;
        assert_eq!(bytes, b"half", "what was written is sent");
        let error = error.expect("the stream must not end cleanly");
        assert!(error.contains("disk gone"), "{error}");
    }
}
