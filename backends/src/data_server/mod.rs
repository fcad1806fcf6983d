//! The data server: the Postgres server that holds every channel's database, as the platform administers it
//! through an admin connection (a superuser: it creates roles and databases, and later restores dumps whose
//! extension tables only a superuser may write). The operator provisions and drops channel databases here; the
//! API server measures them. Tenants reach it only with their channel's own roles.
//!
//! Role and database names cannot be bound as parameters, so every identifier is quoted ([`ident`]) and every
//! password literal escaped ([`literal`]); the names themselves are made by the platform ([`names`]).

pub mod names;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;

/// The only extension channel roles may create beyond the trusted ones.
pub const ALLOWED_EXTENSION: &str = "postgis";

/// What the data server refused or failed.
#[derive(Debug, thiserror::Error)]
#[error("data server: {0}")]
pub struct ServerError(pub String);

impl From<sqlx::Error> for ServerError {
    fn from(e: sqlx::Error) -> Self {
        ServerError(e.to_string())
    }
}

/// A channel's database and its two roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseNames {
    /// The database.
    pub db_name: String,
    /// The write role (owner of the database, the one in `DATABASE_URL`).
    pub role_name: String,
    /// The read-only role (`DATABASE_URL_READONLY`).
    pub readonly_role_name: String,
}

/// What provisioning sets on a channel's roles.
#[derive(Debug, Clone)]
pub struct RoleSettings<'a> {
    /// The write role's password.
    pub password: &'a str,
    /// The read-only role's password.
    pub readonly_password: &'a str,
    /// Connections each role may hold at once (from the owner's plan).
    pub connection_limit: u32,
}

/// What the data server says about one channel's database now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// Live connections held by the write role.
    pub connection_count: i64,
    /// The write role's connection limit (`None` when the role does not exist).
    pub connection_limit: Option<i32>,
    /// Bytes the database occupies (`None` when it does not exist).
    pub storage_bytes: Option<i64>,
}

/// The admin connection to the data server.
pub struct DataServer {
    pool: PgPool,
    options: PgConnectOptions,
    /// The admin's password, for the client programs (given in their environment, never in argv).
    password: Option<String>,
    checked: OnceCell<()>,
}

impl std::fmt::Debug for DataServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataServer")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .finish_non_exhaustive()
    }
}

/// The advisory lock class of a channel's roles' passwords on the data server (its second key is a hash of the
/// channel's id).
pub const ROLES_LOCK_CLASS: i32 = 0x5357_5250;
/// Longest wait for the roles' lock: it is held only from reading a record to setting its passwords, so a longer
/// wait means a holder is stuck, and the caller fails (and retries) rather than hanging with it.
const ROLES_LOCK_WAIT: &str = "15s";

/// The lock on one channel's roles, held on a connection of its own (never a pooled one, whose holder would need
/// a second connection to do its work). Closing the connection releases it, so dropping it does too.
#[must_use = "the lock is released when this is dropped"]
pub struct RolesLock {
    conn: PgConnection,
}

impl RolesLock {
    /// Releases the lock.
    pub async fn release(self) {
        // Closing ends the session, and the session's advisory locks with it.
        self.conn.close().await.ok();
    }
}

/// Format of a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpFormat {
    /// Plain SQL, without owners or grants, for people to read or load elsewhere.
    Plain,
    /// `pg_dump`'s custom format (`-Fc`), as `pg_restore` reads it.
    Custom,
}

/// Quotes `name` as an SQL identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes `value` as an SQL string literal (standard_conforming_strings is on since PG 9.1).
pub fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// The read-only role's rights inside the database, as statements: every table and sequence of `public`, present
/// and future. FOR ROLE rw: default privileges follow the creator, and the app creates its tables as rw.
fn readonly_grants(names: &DatabaseNames) -> String {
    let rw = ident(&names.role_name);
    let ro = ident(&names.readonly_role_name);
    format!(
        "GRANT USAGE ON SCHEMA public TO {ro}; \
         GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ro}; \
         GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO {ro}; \
         ALTER DEFAULT PRIVILEGES FOR ROLE {rw} IN SCHEMA public GRANT SELECT ON TABLES TO {ro}; \
         ALTER DEFAULT PRIVILEGES FOR ROLE {rw} IN SCHEMA public GRANT SELECT ON SEQUENCES TO {ro}; "
    )
}

/// The statements around new contents of a channel's database (run by the admin, in one transaction).
#[derive(Debug, Clone)]
pub struct Replacement {
    /// Drops every schema of the database (the app's own and `public`, with all in them) and makes a stock
    /// `public` again.
    pub emptying: String,
    /// The read-only role's rights on what is there now, and on what the write role makes later.
    pub regrant: String,
    /// The server's version (`server_version_num`, e.g. 150018), for a script written by newer client tools.
    pub server_version: i32,
}

impl Replacement {
    async fn of(conn: &mut PgConnection, names: &DatabaseNames) -> Result<Self, ServerError> {
        let schemas: Vec<String> = sqlx::query_scalar(
            "SELECT nspname::text FROM pg_namespace WHERE nspname <> 'information_schema' \
             AND nspname NOT LIKE 'pg\\_%'",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut emptying = String::new();
        for schema in &schemas {
            emptying.push_str(&format!("DROP SCHEMA {} CASCADE; ", ident(schema)));
        }
        emptying.push_str(
            "CREATE SCHEMA public AUTHORIZATION pg_database_owner; GRANT USAGE ON SCHEMA public TO PUBLIC; ",
        );
        let server_version: i32 =
            sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
                .fetch_one(&mut *conn)
                .await?;
        Ok(Self {
            emptying,
            regrant: readonly_grants(names),
            server_version,
        })
    }
}

impl DataServer {
    /// The server at the admin URL `url` (`postgres://admin:password@host:port/postgres`); connects on first use.
    pub fn new(url: &str) -> Result<Self, ServerError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| ServerError(format!("the admin URL is not valid: {e}")))?;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options.clone());
        let password = url::Url::parse(url)
            .ok()
            .and_then(|u| u.password().map(str::to_owned))
            .map(|p| {
                percent_encoding::percent_decode_str(&p)
                    .decode_utf8_lossy()
                    .into_owned()
            });
        Ok(Self {
            pool,
            options,
            password,
            checked: OnceCell::new(),
        })
    }

    /// `program` (`pg_dump`, `psql`, `pg_restore`) set up to reach database `db_name` as the admin: the address,
    /// user and password are in its environment (`PG*`), never in its arguments.
    pub fn client_command(&self, program: &str, db_name: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .env("PGHOST", self.options.get_host())
            .env("PGPORT", self.options.get_port().to_string())
            .env("PGUSER", self.options.get_username())
            .env("PGDATABASE", db_name)
            .env("PGCONNECT_TIMEOUT", "10")
            .env_remove("PGPASSFILE")
            .env_remove("PGSERVICE")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        match &self.password {
            Some(password) => command.env("PGPASSWORD", password),
            None => command.env_remove("PGPASSWORD"),
        };
        command
    }

    /// `pg_dump` of database `db_name` in `format` to its stdout (piped).
    pub fn dump_command(&self, db_name: &str, format: DumpFormat) -> tokio::process::Command {
        let mut command = self.client_command("pg_dump", db_name);
        command.arg("--no-password");
        match format {
            DumpFormat::Plain => command.args(["--format=plain", "--no-owner", "--no-privileges"]),
            DumpFormat::Custom => command.args(["--format=custom", "--compress=1"]),
        };
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    }

    /// Empties the channel's database in one transaction: ends the roles' sessions, drops every schema (and the
    /// extensions and objects in them) and makes a stock `public` again, with the read-only role's rights. The
    /// database, both roles and their passwords stay, so `DATABASE_URL` keeps working.
    pub async fn reset(&self, names: &DatabaseNames) -> Result<(), ServerError> {
        self.end_sessions(names).await?;
        let mut conn = self.connect_to(&names.db_name).await?;
        let replaced = Replacement::of(&mut conn, names).await?;
        let sql = format!(
            "BEGIN; SET LOCAL lock_timeout = '10s'; {}{}COMMIT",
            replaced.emptying, replaced.regrant
        );
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await?;
        conn.close().await.ok();
        Ok(())
    }

    /// What replacing the contents of a channel's database takes, for a restore script run as the admin: the
    /// statements that empty it and the grants that follow the new contents.
    pub async fn replacement(&self, names: &DatabaseNames) -> Result<Replacement, ServerError> {
        let mut conn = self.connect_to(&names.db_name).await?;
        let replaced = Replacement::of(&mut conn, names).await;
        conn.close().await.ok();
        replaced
    }

    /// Ends every session of the channel's two roles (their pools reconnect).
    pub async fn end_sessions(&self, names: &DatabaseNames) -> Result<(), ServerError> {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ($1, $2)",
        )
        .bind(&names.role_name)
        .bind(&names.readonly_role_name)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The admin pool (on the maintenance database).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Host and port of the server as the admin URL names them.
    pub fn admin_options(&self) -> &PgConnectOptions {
        &self.options
    }

    /// An admin connection to database `db_name`.
    pub async fn connect_to(&self, db_name: &str) -> Result<PgConnection, ServerError> {
        Ok(PgConnection::connect_with(&self.options.clone().database(db_name)).await?)
    }

    /// Waits for, then holds, the lock on the passwords of channel `channel_id`'s roles. Whoever gives the roles
    /// the passwords a record holds takes it from reading the record to setting them (the operator's reconcile, a
    /// transfer from its re-keying to its commit), so a reconcile that read a record before a transfer changed it
    /// cannot set the old passwords after the transfer set the new ones.
    pub async fn lock_roles(&self, channel_id: &str) -> Result<RolesLock, ServerError> {
        // The wait's bound travels with the connection's start-up, not as a statement of its own.
        let options = self
            .options
            .clone()
            .options([("lock_timeout", ROLES_LOCK_WAIT)]);
        let mut conn = PgConnection::connect_with(&options).await?;
        sqlx::query("SELECT pg_advisory_lock($1, hashtext($2))")
            .bind(ROLES_LOCK_CLASS)
            .bind(channel_id)
            .execute(&mut conn)
            .await
            .map_err(|e| {
                ServerError(format!(
                    "the roles of channel {channel_id} stayed locked by another holder: {e}"
                ))
            })?;
        Ok(RolesLock { conn })
    }

    /// [`check`](Self::check) at a process's start: a server that does not let channel roles create postgis is
    /// reported now, loudly, rather than at the first channel (whose status says the same).
    pub async fn check_at_start(&self) {
        match self.check().await {
            Ok(()) => tracing::info!("data server ready: channel roles may create postgis"),
            Err(e) => tracing::error!(error = %e, "the data server cannot host channel databases"),
        }
    }

    /// Checks that channel roles can create postgis here: pgextwlist is loaded and lists it. Remembered once it
    /// passed.
    pub async fn check(&self) -> Result<(), ServerError> {
        self.checked
            .get_or_try_init(|| async {
                let listed: Option<String> = sqlx::query_scalar(
                    "SELECT setting FROM pg_settings WHERE name = 'extwlist.extensions'",
                )
                .fetch_optional(&self.pool)
                .await?;
                let listed = listed.unwrap_or_default();
                let scripts: Option<String> = sqlx::query_scalar(
                    "SELECT setting FROM pg_settings WHERE name = 'extwlist.custom_path'",
                )
                .fetch_optional(&self.pool)
                .await?;
                if !listed.split(',').any(|e| e.trim() == ALLOWED_EXTENSION) {
                    Err(ServerError(format!(
                        "the server does not let channel roles create {ALLOWED_EXTENSION}: load pgextwlist \
                         (local_preload_libraries = '$libdir/plugins/pgextwlist') with extwlist.extensions = \
                         '{ALLOWED_EXTENSION}' (extwlist.extensions is {:?})",
                        listed
                    )))
                } else if scripts.unwrap_or_default().is_empty() {
                    Err(ServerError(format!(
                        "pgextwlist has no custom scripts (extwlist.custom_path): give it \
                         {ALLOWED_EXTENSION}/after-create.sql granting the database owner the rows of \
                         spatial_ref_sys, or restores of databases using {ALLOWED_EXTENSION} fail"
                    )))
                } else {
                    Ok(())
                }
            })
            .await
            .copied()
    }

    /// Makes the channel's roles and database, or brings them back in line: the write role owns the database
    /// and holds `settings.password`, the read-only role can connect and read every table of `public` (present
    /// and future) and nothing else, nobody else can connect, and both roles hold the plan's connection limit.
    pub async fn provision(
        &self,
        names: &DatabaseNames,
        settings: &RoleSettings<'_>,
    ) -> Result<(), ServerError> {
        self.check().await?;
        let rw = ident(&names.role_name);
        let ro = ident(&names.readonly_role_name);
        let db = ident(&names.db_name);
        self.set_roles(names, settings).await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(&names.db_name)
                .fetch_one(&self.pool)
                .await?;
        if !exists {
            // CREATE DATABASE cannot run in a transaction block, so it is a statement of its own.
            self.execute(&format!("CREATE DATABASE {db} OWNER {rw}"))
                .await?;
        }
        self.execute(&format!(
            "ALTER DATABASE {db} OWNER TO {rw}; REVOKE ALL ON DATABASE {db} FROM PUBLIC; \
             GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {ro}"
        ))
        .await?;
        let mut conn = self.connect_to(&names.db_name).await?;
        let grants = format!("BEGIN; {}COMMIT", readonly_grants(names));
        sqlx::raw_sql(AssertSqlSafe(grants))
            .execute(&mut conn)
            .await?;
        conn.close().await.ok();
        Ok(())
    }

    /// Makes the channel's two roles, or brings them in line: `LOGIN` and no other attribute, the plan's connection
    /// limit, and the passwords of `settings`. A changed password is refused from the next login on; sessions open
    /// already stay until [`DataServer::end_sessions`]. Provisioning sets them this way, and so does a transfer of
    /// the app to another account, which gives both roles new passwords.
    pub async fn set_roles(
        &self,
        names: &DatabaseNames,
        settings: &RoleSettings<'_>,
    ) -> Result<(), ServerError> {
        let limit = settings.connection_limit;
        // INHERIT: in PG 15 the owner reaches `public` through pg_database_owner, a role it must inherit from.
        for (role, password) in [
            (&names.role_name, settings.password),
            (&names.readonly_role_name, settings.readonly_password),
        ] {
            if !self.role_exists(role).await? {
                self.execute(&format!("CREATE ROLE {} LOGIN", ident(role)))
                    .await?;
            }
            self.execute(&format!(
                "ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS \
                 INHERIT CONNECTION LIMIT {limit} PASSWORD {}",
                ident(role),
                literal(password)
            ))
            .await?;
        }
        Ok(())
    }

    /// Drops the channel's database (ending its sessions) and both roles. Safe to repeat.
    pub async fn drop_database(&self, names: &DatabaseNames) -> Result<(), ServerError> {
        self.execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            ident(&names.db_name)
        ))
        .await?;
        for role in [&names.readonly_role_name, &names.role_name] {
            self.execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = {}",
                literal(role)
            ))
            .await?;
            self.execute(&format!("DROP ROLE IF EXISTS {}", ident(role)))
                .await?;
        }
        Ok(())
    }

    /// Measures the channel's database: its write role's sessions and limit, and its size.
    pub async fn measure(&self, names: &DatabaseNames) -> Result<Measured, ServerError> {
        let (connection_count, connection_limit, storage_bytes): (i64, Option<i32>, Option<i64>) =
            sqlx::query_as(
                "SELECT (SELECT count(*) FROM pg_stat_activity WHERE usename = $1), \
                 (SELECT rolconnlimit FROM pg_roles WHERE rolname = $1), \
                 (SELECT pg_database_size(oid) FROM pg_database WHERE datname = $2)",
            )
            .bind(&names.role_name)
            .bind(&names.db_name)
            .fetch_one(&self.pool)
            .await?;
        Ok(Measured {
            connection_count,
            connection_limit,
            storage_bytes,
        })
    }

    /// Bytes the databases named `db_names` occupy together, and how many of them exist: one query, so the total is
    /// whole or an error.
    pub async fn total_size(&self, db_names: &[String]) -> Result<(i64, i64), ServerError> {
        Ok(sqlx::query_as(
            "SELECT coalesce(sum(pg_database_size(oid)), 0)::bigint, count(*) FROM pg_database \
             WHERE datname = ANY($1)",
        )
        .bind(db_names)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn role_exists(&self, role: &str) -> Result<bool, ServerError> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
                .bind(role)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn execute(&self, sql: &str) -> Result<(), ServerError> {
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(ident("next_blog_alice"), "\"next_blog_alice\"");
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("pa'ss"), "'pa''ss'");
    }

    #[test]
    fn a_bad_admin_url_is_refused() {
        assert!(DataServer::new("not a url").is_err());
    }
}
