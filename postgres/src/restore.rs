//! Restoring a snapshot in place, in one transaction: the archive's file goes through `pg_restore` (which turns
//! the custom-format dump into SQL) into one `psql` session of the admin that empties the database, becomes the
//! channel's write role (so everything restored is the channel's, as if its app had made it), runs the dump,
//! grants the read-only role its rights again and commits. `COMMIT` is sent only after `pg_restore` has read the
//! whole file and `psql` has run every statement without an error; anything short of that (a corrupt file, a
//! failing statement, a process killed, the client gone) closes the session with the transaction open, and the
//! server rolls it back: the data is exactly as before. The database, its roles and their passwords are never
//! touched, so `DATABASE_URL` keeps working.
//!
//! A process that dies between `COMMIT` and recording the job's success leaves a job another process takes over,
//! which must not apply the snapshot again over what the app wrote since. So before `COMMIT` the restore hands its
//! transaction's id on the server to its caller (who records it with the job), and [`committed`] asks the server,
//! on the next attempt, whether that transaction committed.
//!
//! The client tools may be newer than the data server (the image carries Debian's current ones): the dump comes
//! from the server's own catalog, but pg_restore writes the preamble of its own version, so settings the server
//! does not know are left out of that preamble ([`copy_for_server`]).

use bytes::Bytes;
use futures::{Stream, StreamExt};
use slipway_backends::data_server::{DataServer, DatabaseNames, ident};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes of a program's stderr kept for the error message.
const STDERR_LIMIT: u64 = 4096;

/// Settings pg_restore's preamble may set that older servers lack, with the `server_version_num` that brought each.
const NEWER_SETTINGS: &[(&str, i32)] = &[("transaction_timeout", 170000)];

/// Why a restore did not complete, nothing changed. It displays as `summary`, fit for the caller; `detail` is what
/// the programs said, for the platform's log only: it can quote the dump's statements and rows, and the data
/// server's internals.
#[derive(Debug, thiserror::Error)]
#[error("{summary}")]
pub struct RestoreFailed {
    /// What went wrong, in the platform's words.
    pub summary: &'static str,
    /// pg_restore's and psql's own words.
    pub detail: String,
}

fn failed(summary: &'static str, detail: String) -> anyhow::Error {
    RestoreFailed { summary, detail }.into()
}

/// Replaces the contents of `names`' database with the dump `file` streams. Once every statement ran, and before
/// `COMMIT` is sent, `before_commit` gets the transaction's id on the server (`pg_current_xact_id()`, as text): an
/// error from it rolls the restore back.
pub async fn restore<S, F, Fut>(
    server: &DataServer,
    names: &DatabaseNames,
    file: S,
    before_commit: F,
) -> anyhow::Result<()>
where
    S: Stream<Item = std::io::Result<Bytes>> + Send,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let replacement = server.replacement(names).await?;
    let mut pg_restore = server.client_command("pg_restore", &names.db_name);
    pg_restore
        .args(["--no-owner", "--no-privileges", "--file=-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut psql = server.client_command("psql", &names.db_name);
    psql.args([
        "--no-psqlrc",
        "--quiet",
        "--no-password",
        "--tuples-only",
        "--no-align",
        "-v",
        "ON_ERROR_STOP=1",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut pg_restore = pg_restore.spawn()?;
    let mut psql = psql.spawn()?;
    let (Some(mut restore_in), Some(mut restore_out), Some(mut psql_in)) = (
        pg_restore.stdin.take(),
        pg_restore.stdout.take(),
        psql.stdin.take(),
    ) else {
        anyhow::bail!("the restore's programs are not piped");
    };
    let restore_err = drain(pg_restore.stderr.take());
    let psql_err = drain(psql.stderr.take());
    let transaction = first_line(psql.stdout.take());

    // The file into pg_restore, as it arrives.
    let feed = async move {
        let mut file = std::pin::pin!(file);
        while let Some(chunk) = file.next().await {
            restore_in.write_all(&chunk?).await?;
        }
        restore_in.shutdown().await?;
        anyhow::Ok(())
    };
    // The script into psql, between the emptying and the commit.
    let script = async {
        let prelude = format!(
            "BEGIN;\nSELECT pg_current_xact_id();\nSET LOCAL lock_timeout = '30s';\n{}\nSET LOCAL ROLE {};\n",
            replacement.emptying,
            ident(&names.role_name)
        );
        psql_in.write_all(prelude.as_bytes()).await?;
        copy_for_server(&mut restore_out, &mut psql_in, replacement.server_version).await?;
        anyhow::Ok(())
    };
    let (fed, scripted) = tokio::join!(feed, script);
    let restored = pg_restore.wait().await?;
    if let Err(e) = fed.and(scripted) {
        abandon(psql).await;
        return Err(failed(
            "the snapshot did not apply",
            format!(
                "{e}; pg_restore: {}; psql: {}",
                restore_err.await.unwrap_or_default().trim(),
                psql_err.await.unwrap_or_default().trim()
            ),
        ));
    }
    if !restored.success() {
        abandon(psql).await;
        return Err(failed(
            "the snapshot file could not be read",
            format!(
                "pg_restore {restored}: {}",
                restore_err.await.unwrap_or_default().trim()
            ),
        ));
    }
    let transaction = match transaction.await {
        Ok(id) if !id.is_empty() => id,
        _ => {
            abandon(psql).await;
            return Err(failed(
                "the snapshot did not apply",
                format!(
                    "psql named no transaction: {}",
                    psql_err.await.unwrap_or_default().trim()
                ),
            ));
        }
    };
    if let Err(e) = before_commit(transaction).await {
        abandon(psql).await;
        return Err(e);
    }
    let epilogue = format!("RESET ROLE;\n{}\nCOMMIT;\n", replacement.regrant);
    psql_in.write_all(epilogue.as_bytes()).await?;
    psql_in.shutdown().await?;
    drop(psql_in);
    let applied = psql.wait().await?;
    if !applied.success() {
        return Err(failed(
            "the snapshot did not apply",
            format!(
                "psql {applied}: {}",
                psql_err.await.unwrap_or_default().trim()
            ),
        ));
    }
    Ok(())
}

/// Whether the restore whose transaction had id `transaction` (what [`restore`] handed its caller) committed. One
/// still open, its process gone and the server not yet aware of it, is ended first, so the answer is final. An
/// id the server no longer knows counts as not committed (it would have to be billions of transactions old).
pub async fn committed(server: &DataServer, transaction: &str) -> anyhow::Result<bool> {
    for _ in 0..TRANSACTION_END_TRIES {
        let status: Option<String> = sqlx::query_scalar("SELECT pg_xact_status($1::text::xid8)")
            .bind(transaction)
            .fetch_one(server.pool())
            .await?;
        match status.as_deref() {
            Some("committed") => return Ok(true),
            Some("in progress") => {
                // `backend_xid` is the id's low 32 bits (the xid8 without its epoch).
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE backend_xid::text::bigint = ($1::text::bigint & 4294967295)",
                )
                .bind(transaction)
                .execute(server.pool())
                .await?;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            _ => return Ok(false),
        }
    }
    anyhow::bail!("an earlier attempt's transaction {transaction} is still open on the data server")
}

/// How many times [`committed`] ends a transaction still open and looks again, a second apart.
const TRANSACTION_END_TRIES: u32 = 30;

/// Copies pg_restore's script to psql, leaving out of its preamble (the settings, comments and blank lines before
/// the dump's first statement) each setting a server of `server_version` does not know; the rest is copied as is.
/// The platform backup's restore (the admin CLI's) pipes the platform database's dump through it too.
pub async fn copy_for_server<R, W>(
    reader: R,
    writer: &mut W,
    server_version: i32,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        if !in_preamble(&line) {
            writer.write_all(&line).await?;
            break;
        }
        if !unknown_setting(&line, server_version) {
            writer.write_all(&line).await?;
        }
    }
    tokio::io::copy_buf(&mut reader, writer).await?;
    Ok(())
}

/// Whether a line can be part of the script's preamble.
fn in_preamble(line: &[u8]) -> bool {
    line.trim_ascii().is_empty()
        || line.starts_with(b"--")
        || line.starts_with(b"\\")
        || line.starts_with(b"SET ")
        || line.starts_with(b"SELECT pg_catalog.set_config(")
}

/// Whether the line sets a setting a server of `server_version` does not know.
fn unknown_setting(line: &[u8], server_version: i32) -> bool {
    NEWER_SETTINGS.iter().any(|(name, since)| {
        server_version < *since && line.starts_with(format!("SET {name} ").as_bytes())
    })
}

/// Ends the psql session without a commit: the server rolls the transaction back.
pub async fn abandon(mut psql: tokio::process::Child) {
    let _ = psql.start_kill();
    let _ = psql.wait().await;
}

/// The first line psql prints (the transaction's id the prelude selects), as soon as it is printed; the rest of its
/// output (what the dump's own `SELECT`s print) is read and dropped, so psql never blocks on it.
fn first_line(
    stdout: Option<tokio::process::ChildStdout>,
) -> tokio::sync::oneshot::Receiver<String> {
    let (send, line) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Some(stdout) = stdout else { return };
        let mut reader = tokio::io::BufReader::new(stdout);
        let mut first = String::new();
        if reader.read_line(&mut first).await.is_ok() {
            let _ = send.send(first.trim().to_owned());
        }
        let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
    });
    line
}

/// Collects a program's stderr alongside (so a chatty program never blocks), up to [`STDERR_LIMIT`].
fn drain(stderr: Option<tokio::process::ChildStderr>) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        let mut text = String::new();
        if let Some(stderr) = stderr {
            let _ = stderr.take(STDERR_LIMIT).read_to_string(&mut text).await;
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "--\n-- PostgreSQL database dump\n--\n\\restrict abc\n\nSET statement_timeout = 0;\n\
        SET transaction_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\n\n\
        CREATE TABLE public.notes (body text);\nSET transaction_timeout = 0;\nCOPY public.notes (body) FROM stdin;\n";

    async fn copied(server_version: i32) -> String {
        let mut out = Vec::new();
        copy_for_server(SCRIPT.as_bytes(), &mut out, server_version)
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn an_older_server_gets_the_preamble_without_the_settings_it_lacks() {
        assert_eq!(
            copied(150018).await,
            SCRIPT.replacen("SET transaction_timeout = 0;\n", "", 1)
        );
    }

    #[tokio::test]
    async fn a_server_that_knows_every_setting_gets_the_script_unchanged() {
        assert_eq!(copied(170006).await, SCRIPT);
    }
}
