//! The proxy's own login to the data server, as the channel's write role with its password: SCRAM-SHA-256 (what
//! the data server's `pg_hba.conf` asks for), MD5 or a cleartext password, whichever the server requests; the
//! SCRAM exchange and the frontend messages are `postgres-protocol`'s. The connection is plain TCP, like the
//! `DATABASE_URL` deploys get: the data server is reached on the cluster's network only.
//!
//! Once the server says AuthenticationOk, its messages up to the first ReadyForQuery (parameters, the backend key
//! a cancel request names) are kept to be sent on to the client as they are; from there on the proxy only relays
//! bytes.

use bytes::{Buf, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest server message taken during the login (the server's are small; this is only a bound).
const MAX_FRAME: usize = 1 << 20;

/// Why the login to the data server failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The connection failed or closed.
    #[error("data server connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server answered with an ErrorResponse (too many connections, the database is being dropped, ...); its
    /// bytes, to be sent on to the client as they are.
    #[error("the data server refused the session")]
    Refused(Bytes),
    /// The server asked for something the proxy does not do, or broke the protocol.
    #[error("data server protocol: {0}")]
    Protocol(String),
}

/// A session on the data server, logged in and ready for queries.
#[derive(Debug)]
pub struct Upstream {
    /// The connection.
    pub stream: TcpStream,
    /// What the client is sent before the relay starts: AuthenticationOk, then the server's messages up to and
    /// including ReadyForQuery.
    pub greeting: Vec<u8>,
    /// The backend's process id and secret key (BackendKeyData), which a CancelRequest names.
    pub cancel_key: Option<(i32, Vec<u8>)>,
}

/// Reads one whole message: (type byte, the whole frame).
async fn frame(stream: &mut TcpStream, buf: &mut BytesMut) -> Result<(u8, Bytes), UpstreamError> {
    loop {
        if buf.len() >= 5 {
            let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
            let len = usize::try_from(len)
                .ok()
                .filter(|len| (4..=MAX_FRAME).contains(len))
                .ok_or_else(|| UpstreamError::Protocol("message length out of bounds".into()))?;
            if buf.len() > len {
                let whole = buf.split_to(len + 1).freeze();
                return Ok((whole[0], whole));
            }
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(UpstreamError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// The SASL mechanisms of an AuthenticationSASL body (after its subtype).
fn mechanisms(mut body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(end) = body.iter().position(|&b| b == 0) {
        if end == 0 {
            break;
        }
        out.push(String::from_utf8_lossy(&body[..end]).into_owned());
        body = &body[end + 1..];
    }
    out
}

async fn write(stream: &mut TcpStream, buf: &mut BytesMut) -> Result<(), UpstreamError> {
    stream.write_all(buf).await?;
    buf.clear();
    Ok(())
}

fn protocol(e: std::io::Error) -> UpstreamError {
    UpstreamError::Protocol(e.to_string())
}

/// Connects to `address` and logs in to `database` as `role` with `password`, passing on the client's other
/// startup parameters (`application_name`, `client_encoding`, `options`, ...).
pub async fn connect(
    address: &(String, u16),
    database: &str,
    role: &str,
    password: &str,
    params: &[(String, String)],
) -> Result<Upstream, UpstreamError> {
    let mut stream = TcpStream::connect((address.0.as_str(), address.1)).await?;
    let _ = stream.set_nodelay(true);
    let mut out = BytesMut::new();
    let startup = [("user", role), ("database", database)]
        .into_iter()
        .chain(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    frontend::startup_message(startup, &mut out).map_err(protocol)?;
    write(&mut stream, &mut out).await?;

    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut scram: Option<ScramSha256> = None;
    loop {
        let (tag, whole) = frame(&mut stream, &mut buf).await?;
        match tag {
            b'E' => return Err(UpstreamError::Refused(whole)),
            b'R' => {}
            // A notice, or a protocol negotiation the proxy's 3.0 startup never causes: nothing to answer.
            _ => continue,
        }
        let mut body = &whole[5..];
        if body.len() < 4 {
            return Err(UpstreamError::Protocol(
                "short authentication request".into(),
            ));
        }
        let kind = body.get_i32();
        match kind {
            0 => break,
            3 => frontend::password_message(password.as_bytes(), &mut out).map_err(protocol)?,
            5 => {
                let salt: [u8; 4] = body
                    .try_into()
                    .map_err(|_| UpstreamError::Protocol("MD5 salt".into()))?;
                let hashed = postgres_protocol::authentication::md5_hash(
                    role.as_bytes(),
                    password.as_bytes(),
                    salt,
                );
                frontend::password_message(hashed.as_bytes(), &mut out).map_err(protocol)?;
            }
            10 => {
                if !mechanisms(body).iter().any(|m| m == sasl::SCRAM_SHA_256) {
                    return Err(UpstreamError::Protocol(
                        "the server offers no SCRAM-SHA-256".into(),
                    ));
                }
                let started = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, started.message(), &mut out)
                    .map_err(protocol)?;
                scram = Some(started);
            }
            11 => {
                let state = scram
                    .as_mut()
                    .ok_or_else(|| UpstreamError::Protocol("SASL continue before start".into()))?;
                state.update(body).map_err(protocol)?;
                frontend::sasl_response(state.message(), &mut out).map_err(protocol)?;
            }
            12 => {
                scram
                    .as_mut()
                    .ok_or_else(|| UpstreamError::Protocol("SASL final before start".into()))?
                    .finish(body)
                    .map_err(protocol)?;
                continue;
            }
            other => {
                return Err(UpstreamError::Protocol(format!(
                    "unsupported authentication request {other}"
                )));
            }
        }
        write(&mut stream, &mut out).await?;
    }

    let mut greeting = vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0];
    let mut cancel_key = None;
    loop {
        let (tag, whole) = frame(&mut stream, &mut buf).await?;
        match tag {
            b'E' => return Err(UpstreamError::Refused(whole)),
            b'K' if whole.len() >= 13 => {
                let pid = i32::from_be_bytes([whole[5], whole[6], whole[7], whole[8]]);
                cancel_key = Some((pid, whole[9..].to_vec()));
            }
            _ => {}
        }
        greeting.extend_from_slice(&whole);
        if tag == b'Z' {
            break;
        }
    }
    // The server waits for a query after ReadyForQuery, so nothing should be buffered; whatever is goes on too.
    greeting.extend_from_slice(&buf);
    Ok(Upstream {
        stream,
        greeting,
        cancel_key,
    })
}

/// Sends a CancelRequest for the backend `pid` with `key` to the data server at `address`; the server answers
/// nothing and closes.
pub async fn cancel(address: &(String, u16), pid: i32, key: &[u8]) -> std::io::Result<()> {
    let mut stream = TcpStream::connect((address.0.as_str(), address.1)).await?;
    let mut packet = Vec::with_capacity(12 + key.len());
    packet.extend_from_slice(&((12 + key.len()) as i32).to_be_bytes());
    packet.extend_from_slice(&80_877_102i32.to_be_bytes());
    packet.extend_from_slice(&pid.to_be_bytes());
    packet.extend_from_slice(key);
    stream.write_all(&packet).await?;
    let mut end = [0u8; 1];
    let _ = stream.read(&mut end).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_mechanisms_are_listed() {
        assert_eq!(
            mechanisms(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"),
            ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]
        );
        assert!(mechanisms(b"\0").is_empty());
    }
}
