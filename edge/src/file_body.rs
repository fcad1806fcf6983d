//! A response body streamed from a file of the disk tier: a byte range of an open file, read in 64 KiB chunks as
//! the connection takes them, with its exact length known up front (so the response has a `Content-Length`, and
//! the host's byte metrics count it like any other).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncReadExt, AsyncSeekExt, Take};
use tokio_util::io::ReaderStream;

/// Size of the reads from the file.
const CHUNK: usize = 64 * 1024;

/// `len` bytes of a file from an offset.
pub struct FileBody {
    chunks: ReaderStream<Take<tokio::fs::File>>,
    remaining: u64,
}

impl FileBody {
    /// The `len` bytes of `file` from `start`.
    pub async fn open(mut file: tokio::fs::File, start: u64, len: u64) -> std::io::Result<Self> {
        if start > 0 {
            file.seek(std::io::SeekFrom::Start(start)).await?;
        }
        Ok(Self {
            chunks: ReaderStream::with_capacity(file.take(len), CHUNK),
            remaining: len,
        })
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.chunks).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            // The file is shorter than it was when written: never send fewer bytes than announced silently.
            Poll::Ready(None) => Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended before its length",
            )))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_range_of_the_file_streams_with_its_exact_length() {
        let path =
            std::env::temp_dir().join(format!("slipway-body-{}", uuid::Uuid::new_v4().simple()));
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let open = || async { tokio::fs::File::open(&path).await.unwrap() };

        let body = FileBody::open(open().await, 0, content.len() as u64)
            .await
            .unwrap();
        assert_eq!(body.size_hint().exact(), Some(content.len() as u64));
        assert_eq!(body.collect().await.unwrap().to_bytes(), content);

        let body = FileBody::open(open().await, 70_000, 100_000).await.unwrap();
        assert_eq!(body.size_hint().exact(), Some(100_000));
        assert_eq!(
            body.collect().await.unwrap().to_bytes(),
            &content[70_000..170_000]
        );

        let short = FileBody::open(open().await, 150_000, 100_000)
            .await
            .unwrap();
        assert!(
            short.collect().await.is_err(),
            "a file shorter than announced fails the body"
        );
        std::fs::remove_file(path).unwrap();
    }
}
