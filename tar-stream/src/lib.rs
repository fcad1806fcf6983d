//! A `tar.gz` written as a stream: entries are appended one at a time by a writer task (a header, then the body
//! streamed through, then padding), gzipped on the fly ([`gzip`]: what shrinks is deflated, what does not is
//! stored), and read by whoever consumes the stream (a response body, an upload to the object store). Nothing is
//! staged and only one body is in flight, so memory stays flat whatever the size. A writer that fails ends the
//! stream with an error, so a broken archive never looks like a short complete one; a consumer that goes away
//! stops the writer.
//!
//! Bucket checkpoint downloads and app exports are written with it.

use std::future::Future;
use std::io;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

mod gzip;

/// Chunks in flight between the writer and the gzip encoder.
const IN_FLIGHT: usize = 16;

/// The consumer of the stream went away: the writer stops.
#[derive(Debug, thiserror::Error)]
#[error("the reader of the archive went away")]
pub struct Gone;

/// Appends entries to the archive.
pub struct TarWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
}

impl TarWriter {
    async fn send(&self, bytes: Bytes) -> anyhow::Result<()> {
        self.tx.send(Ok(bytes)).await.map_err(|_| Gone.into())
    }

    /// A regular file `name` of exactly `size` bytes read from `body`; a body longer or shorter than `size` fails.
    pub async fn file<S>(
        &self,
        name: &str,
        size: u64,
        mtime: DateTime<Utc>,
        body: S,
    ) -> anyhow::Result<()>
    where
        S: Stream<Item = io::Result<Bytes>>,
    {
        self.send(header(name, size, mtime, false)?).await?;
        let mut body = std::pin::pin!(body);
        let mut written = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| anyhow::anyhow!("read {name}: {e}"))?;
            written += chunk.len() as u64;
            anyhow::ensure!(
                written <= size,
                "{name} is longer than the {size} bytes it was said to have"
            );
            self.send(chunk).await?;
        }
        anyhow::ensure!(
            written == size,
            "{name} ended after {written} of {size} bytes"
        );
        let padding = padding(size);
        if padding > 0 {
            self.send(Bytes::from(vec![0; padding])).await?;
        }
        Ok(())
    }

    /// A regular file `name` holding `bytes`.
    pub async fn bytes(
        &self,
        name: &str,
        bytes: Bytes,
        mtime: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let size = bytes.len() as u64;
        self.file(name, size, mtime, futures::stream::iter([Ok(bytes)]))
            .await
    }

    /// A directory entry `name`.
    pub async fn directory(&self, name: &str, mtime: DateTime<Utc>) -> anyhow::Result<()> {
        self.send(header(name, 0, mtime, true)?).await
    }
}

/// The `tar.gz` that `write` appends to, as a stream of chunks. `what` names the archive in the log when the writer
/// fails (the stream then ends with that error).
pub fn tar_gz<F, Fut>(
    what: String,
    write: F,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    F: FnOnce(TarWriter) -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    tokio::spawn(async move {
        let writer = TarWriter { tx: tx.clone() };
        let written = async {
            write(TarWriter { tx: tx.clone() }).await?;
            // Two empty blocks end a tar archive.
            writer.send(Bytes::from(vec![0; 1024])).await
        }
        .await;
        if let Err(e) = written
            && !e.is::<Gone>()
        {
            tracing::warn!(archive = %what, error = %e, "the archive stopped mid-stream");
            let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
        }
    });
    gzipped(rx)
}

/// The tar chunks `rx` yields, gzipped ([`gzip::AdaptiveGzip`]) into chunks of about [`OUT_CHUNK`] bytes; an error
/// from the writer ends the stream with that error.
fn gzipped(
    rx: mpsc::Receiver<io::Result<Bytes>>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let state = Some((rx, gzip::AdaptiveGzip::default()));
    futures::stream::unfold(state, |state| async move {
        let (mut rx, mut gz) = state?;
        let mut out = Vec::with_capacity(OUT_CHUNK);
        while out.len() < OUT_CHUNK {
            let written = match rx.recv().await {
                Some(Ok(chunk)) => gz.write(&chunk, &mut out),
                Some(Err(e)) => Err(e),
                None => {
                    let ended = gz.finish(&mut out).map(|()| Bytes::from(out));
                    return Some((ended, None));
                }
            };
            if let Err(e) = written {
                return Some((Err(e), None));
            }
        }
        Some((Ok(Bytes::from(out)), Some((rx, gz))))
    })
}

/// About how many bytes of the archive each chunk of the stream carries.
const OUT_CHUNK: usize = 64 * 1024;

/// Zero bytes that round an entry of `size` bytes up to the 512-byte block.
fn padding(size: u64) -> usize {
    let rest = (size % 512) as usize;
    if rest == 0 { 0 } else { 512 - rest }
}

/// The header block(s) of one entry: GNU long-name blocks when the name needs them, then the entry's header.
fn header(name: &str, size: u64, mtime: DateTime<Utc>, is_dir: bool) -> anyhow::Result<Bytes> {
    let mut header = tar::Header::new_gnu();
    header.set_mtime(u64::try_from(mtime.timestamp()).unwrap_or(0));
    if is_dir {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
    } else {
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(size);
    }
    // The builder writes the long-name blocks and the checksum; with no data after the header, what it wrote up to
    // its end-of-archive blocks is exactly the header.
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, name, io::empty())?;
    let mut bytes = builder.into_inner()?;
    bytes.truncate(bytes.len().saturating_sub(1024));
    Ok(Bytes::from(bytes))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    async fn collect(stream: impl Stream<Item = io::Result<Bytes>>) -> io::Result<Vec<u8>> {
        let mut stream = std::pin::pin!(stream);
        let mut all = Vec::new();
        while let Some(chunk) = stream.next().await {
            all.extend_from_slice(&chunk?);
        }
        Ok(all)
    }

    #[tokio::test]
    async fn entries_make_an_archive_tar_reads() {
        let long = format!("{}/file.bin", "d".repeat(150));
        let name = long.clone();
        let gz = collect(tar_gz("test".into(), move |tar| async move {
            tar.bytes("short.txt", Bytes::from_static(b"hello"), Utc::now())
                .await?;
            tar.directory("empty/", Utc::now()).await?;
            let chunk = || Ok(Bytes::from(vec![7u8; 300]));
            let body = futures::stream::iter([chunk(), chunk()]);
            tar.file(&name, 600, Utc::now(), body).await
        }))
        .await
        .unwrap();
        let mut read = tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()));
        let mut seen = Vec::new();
        for entry in read.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            seen.push((entry.path().unwrap().display().to_string(), body.len()));
        }
        assert_eq!(
            seen,
            [("short.txt".into(), 5), ("empty/".into(), 0), (long, 600)]
        );
    }

    #[tokio::test]
    async fn a_body_of_the_wrong_size_breaks_the_stream() {
        for (said, body) in [(10, &b"short"[..]), (2, &b"too long"[..])] {
            let gz = collect(tar_gz("test".into(), move |tar| async move {
                let body = futures::stream::iter([Ok(Bytes::from_static(body))]);
                tar.file("f", said, Utc::now(), body).await
            }))
            .await;
            assert!(gz.is_err(), "a file said to have {said} bytes");
        }
    }
}
