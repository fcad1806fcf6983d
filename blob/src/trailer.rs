//! A write's body for the backend in S3's aws-chunked encoding with the client's trailing checksum. The SDKs
//! send uploads over HTTPS so (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`: the body in chunks, then a trailer such as
//! `x-amz-checksum-crc32:<base64>`, which the client computes as it reads its file). s3s decodes the chunks before
//! the gateway sees the body, and the checksum arrives only once the last byte has. Sent to the backend as plain
//! bytes, the checksum would be lost, and a multipart upload created with a checksum algorithm refuses parts
//! without one; so the bytes are chunked again here and the client's trailer is put at their end, and the backend
//! checks the checksum against the bytes it stored, as S3 does.
//!
//! The chunks are of a fixed size, so that the encoded length is known before the first byte is sent (the
//! backend is sent a `Content-Length`, not a chunked transfer coding).

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::HeaderValue;
use http_body_util::BodyExt;
use s3s::{Body, S3Result, StdError, s3_error};

/// Bytes of each chunk but the last.
const CHUNK: u64 = 64 * 1024;

/// The trailing checksums S3 knows, with the length of each one's value (its digest in base64).
const TRAILERS: [(&str, u64); 5] = [
    ("x-amz-checksum-crc32", 8),
    ("x-amz-checksum-crc32c", 8),
    ("x-amz-checksum-crc64nvme", 12),
    ("x-amz-checksum-sha1", 28),
    ("x-amz-checksum-sha256", 44),
];

/// The trailer a request declares (`x-amz-trailer`), if it names one checksum S3 knows; its name and the length
/// of its value.
pub fn declared(value: Option<&HeaderValue>) -> S3Result<Option<(&'static str, u64)>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let name = value
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    TRAILERS
        .iter()
        .find(|(known, _)| *known == name)
        .copied()
        .map(Some)
        .ok_or_else(|| s3_error!(InvalidRequest, "x-amz-trailer names no checksum S3 knows"))
}

/// Bytes of the encoding of `decoded` bytes with the trailer `name`, whose value is `value_len` bytes long.
pub fn encoded_len(decoded: u64, name: &str, value_len: u64) -> u64 {
    let chunk = |n: u64| format!("{n:x}").len() as u64 + 2 + n + 2;
    let rest = decoded % CHUNK;
    (decoded / CHUNK) * chunk(CHUNK)
        + if rest > 0 { chunk(rest) } else { 0 }
        + "0\r\n".len() as u64
        + name.len() as u64
        + 1
        + value_len
        + "\r\n\r\n".len() as u64
}

/// `body` (the decoded bytes) chunked again, ending with the trailer `name` whose value `trailer` gives once the
/// bytes are through (s3s's [`s3s::TrailingHeaders`]); an error ends the body if the client sent no such trailer,
/// or one of another length.
pub fn encode(
    body: Body,
    name: &'static str,
    value_len: u64,
    trailer: impl FnOnce() -> Option<HeaderValue> + Send + 'static,
) -> Body {
    let stream = rechunk(body.into_data_stream()).chain(futures::stream::once(async move {
        let value = trailer()
            .filter(|v| v.len() as u64 == value_len)
            .ok_or_else(|| -> StdError {
                format!("the upload ended without a valid {name} trailer").into()
            })?;
        let mut end = BytesMut::from(&b"0\r\n"[..]);
        end.extend_from_slice(name.as_bytes());
        end.extend_from_slice(b":");
        end.extend_from_slice(value.as_bytes());
        end.extend_from_slice(b"\r\n\r\n");
        Ok(end.freeze())
    }));
    Body::http_body_unsync(http_body_util::StreamBody::new(
        stream.map(|r| r.map(hyper::body::Frame::data)),
    ))
}

/// The bytes of `data` in chunks of [`CHUNK`] (the last one shorter), each as `<hex length>\r\n<bytes>\r\n`.
fn rechunk(
    data: impl Stream<Item = Result<Bytes, StdError>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, StdError>> + Send + 'static {
    let chunk_len = usize::try_from(CHUNK).unwrap_or(usize::MAX);
    futures::stream::unfold(
        (Box::pin(data), BytesMut::new(), false),
        move |(mut data, mut pending, mut ended)| async move {
            loop {
                if pending.len() >= chunk_len || (ended && !pending.is_empty()) {
                    let take = pending.len().min(chunk_len);
                    let piece = pending.split_to(take);
                    return Some((Ok(frame(&piece)), (data, pending, ended)));
                }
                if ended {
                    return None;
                }
                match data.next().await {
                    Some(Ok(bytes)) => pending.extend_from_slice(&bytes),
                    Some(Err(e)) => return Some((Err(e), (data, pending, true))),
                    None => ended = true,
                }
            }
        },
    )
}

fn frame(piece: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(piece.len() + 12);
    out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
    out.extend_from_slice(piece);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn encoded(data: Vec<u8>, sent: Option<&'static str>) -> Result<Vec<u8>, String> {
        let body = Body::from(Bytes::from(data));
        let out = encode(body, "x-amz-checksum-crc32", 8, move || {
            sent.map(HeaderValue::from_static)
        });
        BodyExt::collect(out)
            .await
            .map(|c| c.to_bytes().to_vec())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn bytes_come_out_in_chunks_then_the_trailer_as_long_as_counted() {
        let data: Vec<u8> = (0..CHUNK + 5).map(|n| (n % 251) as u8).collect();
        let out = encoded(data.clone(), Some("AAAAAA==")).await.unwrap();
        assert_eq!(
            out.len() as u64,
            encoded_len(data.len() as u64, "x-amz-checksum-crc32", 8)
        );
        let mut expected = b"10000\r\n".to_vec();
        expected.extend_from_slice(&data[..65536]);
        expected.extend_from_slice(b"\r\n5\r\n");
        expected.extend_from_slice(&data[65536..]);
        expected.extend_from_slice(b"\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
        assert_eq!(out, expected);
    }

    #[test]
    fn the_encoded_length_counts_every_chunk_and_the_trailer() {
        let name = "x-amz-checksum-crc32";
        // No data: the last chunk and the trailer.
        assert_eq!(encoded_len(0, name, 8), 3 + 20 + 1 + 8 + 4);
        // 11 bytes: "b\r\n" + 11 + "\r\n".
        assert_eq!(encoded_len(11, name, 8), 3 + 11 + 2 + 36);
        // Two full chunks and a byte.
        assert_eq!(
            encoded_len(2 * CHUNK + 1, name, 8),
            2 * (5 + 2 + CHUNK + 2) + (3 + 1 + 2) + 36
        );
    }

    #[test]
    fn only_checksums_s3_knows_are_trailers() {
        let value = HeaderValue::from_static("X-Amz-Checksum-CRC64NVME");
        assert_eq!(
            declared(Some(&value)).unwrap(),
            Some(("x-amz-checksum-crc64nvme", 12))
        );
        assert_eq!(declared(None).unwrap(), None);
        assert!(declared(Some(&HeaderValue::from_static("x-amz-meta-a"))).is_err());
    }

    #[tokio::test]
    async fn a_body_without_its_trailer_ends_in_an_error() {
        for sent in [None, Some("AAAA")] {
            let err = encoded(b"hello".to_vec(), sent).await.unwrap_err();
            assert!(err.contains("without a valid"), "{err}");
        }
    }
}
