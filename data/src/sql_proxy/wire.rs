//! The few frontend messages the proxy reads and the backend messages it writes before it starts relaying bytes:
//! startup packets (SSL and GSSAPI encryption requests, cancel requests, the StartupMessage), the PasswordMessage,
//! and the ErrorResponse, authentication request and protocol negotiation it answers with. Message framing on the
//! data server's side is `postgres-protocol`'s.
//!
//! Every length a client sends is bounded before anything is allocated, so an unauthenticated peer cannot make the
//! proxy hold more than a few kilobytes.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Request code of an SSLRequest.
const SSL_REQUEST: i32 = 80_877_103;
/// Request code of a GSSENCRequest.
const GSSENC_REQUEST: i32 = 80_877_104;
/// Request code of a CancelRequest.
const CANCEL_REQUEST: i32 = 80_877_102;
/// Major protocol version 3, as it sits in the upper half of a StartupMessage's version.
const PROTOCOL_3: i32 = 3 << 16;
/// The largest startup packet accepted (Postgres itself allows 10000 bytes).
const MAX_STARTUP_LEN: usize = 10_000;
/// The largest PasswordMessage accepted: a token is 68 characters, so this is generous.
const MAX_PASSWORD_LEN: usize = 1_024;

/// The first byte of a TLS ClientHello: a client using `sslnegotiation=direct` starts with it.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// What a client sent as its first packet (or after the answer to an encryption request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    /// `SSLRequest`: answer `S` and start TLS.
    Ssl,
    /// `GSSENCRequest`: answer `N`; the client then goes on with another request.
    GssEnc,
    /// `CancelRequest` for the session with this process id and secret key.
    Cancel {
        /// The backend's process id.
        pid: i32,
        /// Its secret key (4 bytes before protocol 3.2, up to 256 since).
        key: Vec<u8>,
    },
    /// `StartupMessage` of protocol 3.`minor`, with its parameters in the order sent.
    Message {
        /// The minor protocol version asked for.
        minor: u16,
        /// `user`, `database`, `application_name`, ...
        params: Vec<(String, String)>,
    },
}

impl Startup {
    /// The value of parameter `name` of a StartupMessage.
    pub fn param(&self, name: &str) -> Option<&str> {
        match self {
            Startup::Message { params, .. } => params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

/// Why a client's packet was not understood.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection failed or closed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A length or a field is not what the protocol allows.
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

/// Reads one startup packet: a length (counting itself) and a body with no type byte.
pub async fn read_startup<R: AsyncRead + Unpin>(io: &mut R) -> Result<Startup, WireError> {
    let len = io.read_i32().await?;
    let len = usize::try_from(len).map_err(|_| WireError::Invalid("negative length"))?;
    if !(8..=MAX_STARTUP_LEN).contains(&len) {
        return Err(WireError::Invalid("startup packet length out of bounds"));
    }
    let mut body = vec![0; len - 4];
    io.read_exact(&mut body).await?;
    parse_startup(&body)
}

/// Parses a startup packet's body (after the length).
pub fn parse_startup(body: &[u8]) -> Result<Startup, WireError> {
    let (code, rest) = body
        .split_first_chunk::<4>()
        .ok_or(WireError::Invalid("short startup packet"))?;
    match i32::from_be_bytes(*code) {
        SSL_REQUEST if rest.is_empty() => Ok(Startup::Ssl),
        GSSENC_REQUEST if rest.is_empty() => Ok(Startup::GssEnc),
        CANCEL_REQUEST => {
            let (pid, key) = rest
                .split_first_chunk::<4>()
                .ok_or(WireError::Invalid("short cancel request"))?;
            if key.len() < 4 || key.len() > 256 {
                return Err(WireError::Invalid("cancel key length"));
            }
            Ok(Startup::Cancel {
                pid: i32::from_be_bytes(*pid),
                key: key.to_vec(),
            })
        }
        version if version >> 16 == PROTOCOL_3 >> 16 => Ok(Startup::Message {
            minor: (version & 0xffff) as u16,
            params: parse_params(rest)?,
        }),
        _ => Err(WireError::Invalid("unsupported protocol version")),
    }
}

/// The `name\0value\0...\0` list of a StartupMessage.
fn parse_params(mut rest: &[u8]) -> Result<Vec<(String, String)>, WireError> {
    let mut params = Vec::new();
    loop {
        let name = cstr(&mut rest)?;
        if name.is_empty() {
            break;
        }
        let value = cstr(&mut rest)?;
        params.push((name, value));
    }
    if rest.is_empty() {
        Ok(params)
    } else {
        Err(WireError::Invalid("bytes after the parameter list"))
    }
}

/// Takes one NUL-terminated UTF-8 string off the front of `rest`.
fn cstr(rest: &mut &[u8]) -> Result<String, WireError> {
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(WireError::Invalid("unterminated string"))?;
    let s = std::str::from_utf8(&rest[..end])
        .map_err(|_| WireError::Invalid("a string is not UTF-8"))?
        .to_owned();
    *rest = &rest[end + 1..];
    Ok(s)
}

/// Reads a PasswordMessage (`p`) and answers the password it carries.
pub async fn read_password<R: AsyncRead + Unpin>(io: &mut R) -> Result<String, WireError> {
    let tag = io.read_u8().await?;
    if tag != b'p' {
        return Err(WireError::Invalid("expected a password message"));
    }
    let len = io.read_i32().await?;
    let len = usize::try_from(len).map_err(|_| WireError::Invalid("negative length"))?;
    if !(5..=MAX_PASSWORD_LEN).contains(&len) {
        return Err(WireError::Invalid("password message length out of bounds"));
    }
    let mut body = vec![0; len - 4];
    io.read_exact(&mut body).await?;
    let mut rest = body.as_slice();
    let password = cstr(&mut rest)?;
    if rest.is_empty() {
        Ok(password)
    } else {
        Err(WireError::Invalid("bytes after the password"))
    }
}

/// A backend message: type byte, length, body.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(tag);
    out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// `AuthenticationCleartextPassword`: the client sends its password as is (inside TLS).
pub fn cleartext_password_request() -> Vec<u8> {
    message(b'R', &3i32.to_be_bytes())
}

/// `NegotiateProtocolVersion`: the proxy speaks 3.0, and none of the `_pq_.` options the client asked for.
pub fn negotiate_protocol(unrecognized: &[&str]) -> Vec<u8> {
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    body.extend_from_slice(&(unrecognized.len() as i32).to_be_bytes());
    for option in unrecognized {
        body.extend_from_slice(option.as_bytes());
        body.push(0);
    }
    message(b'v', &body)
}

/// A FATAL `ErrorResponse` with `code` (SQLSTATE) and `text`.
pub fn fatal(code: &str, text: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', code), (b'M', text)] {
        body.push(field);
        body.extend_from_slice(value.replace('\0', "").as_bytes());
        body.push(0);
    }
    body.push(0);
    message(b'E', &body)
}

/// The one answer to every refused login, whatever the reason, so a refusal tells nothing about which accounts,
/// apps or channels exist.
pub fn login_refused(user: &str) -> Vec<u8> {
    fatal(
        "28P01",
        &format!("password authentication failed for user \"{user}\""),
    )
}

/// Writes `bytes` and flushes (TLS buffers otherwise).
pub async fn send<W: AsyncWrite + Unpin>(io: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    io.write_all(bytes).await?;
    io.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    async fn read(bytes: Vec<u8>) -> Result<Startup, WireError> {
        read_startup(&mut bytes.as_slice()).await
    }

    #[tokio::test]
    async fn encryption_requests_and_startup_messages_are_told_apart() {
        assert_eq!(read(packet(SSL_REQUEST, &[])).await.unwrap(), Startup::Ssl);
        assert_eq!(
            read(packet(GSSENC_REQUEST, &[])).await.unwrap(),
            Startup::GssEnc
        );
        let startup = read(packet(
            PROTOCOL_3,
            b"user\0alice\0database\0shop\0application_name\0psql\0\0",
        ))
        .await
        .unwrap();
        assert_eq!(startup.param("user"), Some("alice"));
        assert_eq!(startup.param("database"), Some("shop"));
        assert_eq!(startup.param("options"), None);
        assert!(matches!(startup, Startup::Message { minor: 0, .. }));
        let v32 = read(packet(PROTOCOL_3 | 2, b"user\0a\0\0")).await.unwrap();
        assert!(matches!(v32, Startup::Message { minor: 2, .. }));
    }

    #[tokio::test]
    async fn cancel_requests_carry_the_pid_and_key() {
        let mut rest = 42i32.to_be_bytes().to_vec();
        rest.extend_from_slice(&7u32.to_be_bytes());
        assert_eq!(
            read(packet(CANCEL_REQUEST, &rest)).await.unwrap(),
            Startup::Cancel {
                pid: 42,
                key: 7u32.to_be_bytes().to_vec()
            }
        );
    }

    #[tokio::test]
    async fn malformed_packets_are_refused() {
        // Protocol 2, lengths out of bounds, an unterminated list, trailing bytes.
        assert!(read(packet(2 << 16, b"user\0a\0\0")).await.is_err());
        assert!(read(4i32.to_be_bytes().to_vec()).await.is_err());
        assert!(read(1_000_000i32.to_be_bytes().to_vec()).await.is_err());
        assert!(read(packet(PROTOCOL_3, b"user\0a")).await.is_err());
        assert!(read(packet(PROTOCOL_3, b"user\0a\0\0x")).await.is_err());
        assert!(read(packet(PROTOCOL_3, b"user\0\xff\0\0")).await.is_err());
        assert!(read(packet(CANCEL_REQUEST, &[0, 0, 0, 1])).await.is_err());
    }

    #[tokio::test]
    async fn a_password_message_yields_its_password() {
        let bytes = message(b'p', b"svc_abc\0");
        assert_eq!(
            read_password(&mut bytes.as_slice()).await.unwrap(),
            "svc_abc"
        );
        let wrong_type = message(b'Q', b"select 1\0");
        assert!(read_password(&mut wrong_type.as_slice()).await.is_err());
        let huge = [vec![b'p'], 100_000i32.to_be_bytes().to_vec()].concat();
        assert!(read_password(&mut huge.as_slice()).await.is_err());
    }

    #[test]
    fn the_refusal_is_a_fatal_28p01_naming_the_user() {
        let bytes = login_refused("alice");
        assert_eq!(bytes[0], b'E');
        assert_eq!(
            i32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize,
            bytes.len() - 1
        );
        let text = String::from_utf8_lossy(&bytes[5..]);
        assert!(text.contains("C28P01\0"), "{text}");
        assert!(
            text.contains("Mpassword authentication failed for user \"alice\"\0"),
            "{text}"
        );
        assert!(bytes.ends_with(&[0, 0]));
    }

    #[test]
    fn the_password_request_and_negotiation_are_framed() {
        assert_eq!(cleartext_password_request(), [b'R', 0, 0, 0, 8, 0, 0, 0, 3]);
        let v = negotiate_protocol(&["_pq_.x"]);
        assert_eq!(v[0], b'v');
        assert_eq!(&v[5..9], &PROTOCOL_3.to_be_bytes());
        assert_eq!(&v[9..13], &1i32.to_be_bytes());
        assert_eq!(&v[13..], b"_pq_.x\0");
    }
}
