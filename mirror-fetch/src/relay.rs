//! `slipway mirror-relay`: the SSH command git runs during a mirror's fetch. It opens no connection of its own: it
//! passes git's `GIT_PROTOCOL` and then git's bytes, both ways, over the Unix socket named by
//! `SLIPWAY_MIRROR_SOCKET` to the API process, which holds the real SSH channel (see [`super::transport`]). The
//! arguments git passes (options, host, command) are ignored: the API already chose all of them.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

/// Relays stdin and stdout to the socket until the API closes it.
pub fn run() -> anyhow::Result<()> {
    relay().map_err(|e| anyhow::anyhow!("mirror-relay: {e}"))
}

fn relay() -> std::io::Result<()> {
    let path = std::env::var_os(super::transport::SOCKET_ENV).ok_or_else(|| {
        std::io::Error::other(
            "SLIPWAY_MIRROR_SOCKET is not set: only a mirror sync runs this command",
        )
    })?;
    let mut socket = UnixStream::connect(path)?;
    let protocol = std::env::var("GIT_PROTOCOL").unwrap_or_default();
    socket.write_all(format!("{}\n", protocol.replace('\n', "")).as_bytes())?;
    let mut to_api = socket.try_clone()?;
    // git's requests go up on a thread of their own; the answer decides when the relay is done.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_api);
        let _ = to_api.shutdown(std::net::Shutdown::Write);
    });
    let mut stdout = std::io::stdout().lock();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = socket.read(&mut buf)?;
        if n == 0 {
            break;
        }
        stdout.write_all(&buf[..n])?;
        stdout.flush()?;
    }
    Ok(())
}
