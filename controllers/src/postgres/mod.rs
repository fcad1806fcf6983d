//! The SQL database of a channel, as the Channel reconciler keeps it: for every non-static channel a database on
//! the data server ([`slipway_backends::data_server`]) with a write role that owns it and a read-only role, made with the channel and
//! dropped with it behind the [`FINALIZER`]; its state is the Channel's `DatabaseReady` condition, and a failure
//! moves a channel still provisioning to `failed` until a retry (hourly, or at any change of the channel) works.
//! The record of the database (its names and the roles' passwords, sealed in the platform database) belongs to the
//! API server, which the operator asks through internal routes: the operator never holds the keyring.
//!
//! Deploys of `app` and `docker` channels get the `DATABASE_*` variables from [`container_env`].

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use slipway_crds::conditions::reasons;
use slipway_crds::{App, Channel};
use slipway_internal::protocol::{DatabaseRecord, DatabaseRequest};

use crate::context::Context;
use crate::error::Error;
use slipway_backends::data_server::{DataServer, DatabaseNames, RoleSettings};

/// Held by every non-static channel until its database and roles are dropped and its record forgotten.
pub const FINALIZER: &str = "slipway.dev/postgres";

/// The variables a deploy's containers receive for the channel's database (recorded by name only in the
/// deploy's env snapshot).
pub const ENV_KEYS: [&str; 4] = [
    "DATABASE_URL",
    "DATABASE_URL_READONLY",
    "DATABASE_HOST",
    "DATABASE_PASSWORD",
];

/// How the operator reaches the data server.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// The admin connection.
    pub server: Arc<DataServer>,
    /// The server as pods reach it, `host:port` (`DATABASE_HOST` is its host).
    pub pod_address: String,
}

/// The state of a channel's database, for its condition.
#[derive(Debug, Clone, PartialEq)]
pub struct DatabaseState {
    /// Whether the database and its roles are there as recorded.
    pub ready: bool,
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message (the failure, when not ready).
    pub message: String,
}

/// Whether channels of `app` get a database: every template but `static`.
pub fn wanted(app: &App) -> bool {
    app.spec.template != slipway_crds::Template::Static
}

/// Makes sure the channel's database is recorded and provisioned. Failures are reported in the state, never
/// hidden.
pub async fn ensure(
    ctx: &Context,
    settings: &PostgresSettings,
    channel: &Channel,
    app: &App,
) -> DatabaseState {
    match try_ensure(ctx, settings, channel, app).await {
        Ok(()) => DatabaseState {
            ready: true,
            reason: reasons::RECONCILED,
            message: "the database and its roles are ready".into(),
        },
        Err(e) => DatabaseState {
            ready: false,
            reason: reasons::DATABASE_FAILED,
            message: e.to_string(),
        },
    }
}

fn names_of(record: &DatabaseRecord) -> DatabaseNames {
    DatabaseNames {
        db_name: record.db_name.clone(),
        role_name: record.role_name.clone(),
        readonly_role_name: record.readonly_role_name.clone(),
    }
}

async fn try_ensure(
    ctx: &Context,
    settings: &PostgresSettings,
    channel: &Channel,
    app: &App,
) -> Result<(), Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    let app_uid = app.uid().ok_or(Error::Incomplete("uid"))?;
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    let plan = crate::deploy::dynamic::owner_plan(ctx, &namespace).await?;
    // From reading the record to setting its passwords, so a transfer cannot change them in between.
    let lock = settings
        .server
        .lock_roles(&channel_uid)
        .await
        .map_err(|e| Error::Database(e.0))?;
    let provisioned = async {
        let record = ctx
            .internal
            .ensure_database(&channel_uid, &DatabaseRequest { app_id: app_uid })
            .await?;
        settings
            .server
            .provision(
                &names_of(&record),
                &RoleSettings {
                    password: &record.password,
                    readonly_password: &record.readonly_password,
                    connection_limit: plan.database_connection_limit(),
                },
            )
            .await
            .map_err(|e| Error::Database(e.0))
    }
    .await;
    lock.release().await;
    provisioned
}

/// Drops the channel's database and roles and forgets its record. Safe to repeat; a channel whose database was
/// never recorded has nothing to drop.
pub async fn remove(
    ctx: &Context,
    settings: &PostgresSettings,
    channel: &Channel,
) -> Result<(), Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    let record = match ctx.internal.database(&channel_uid).await {
        Ok(record) => record,
        Err(slipway_internal::CallError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    settings
        .server
        .drop_database(&names_of(&record))
        .await
        .map_err(|e| Error::Database(e.0))?;
    ctx.internal.delete_database(&channel_uid).await?;
    Ok(())
}

/// The `DATABASE_*` variables of the channel's database, for a deploy's containers.
pub async fn container_env(
    ctx: &Context,
    settings: &PostgresSettings,
    channel: &Channel,
) -> Result<BTreeMap<String, String>, Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    let record = ctx.internal.database(&channel_uid).await?;
    Ok(variables(&record, &settings.pod_address))
}

/// The variables for `record` on the server at `address` (`host:port`).
pub fn variables(record: &DatabaseRecord, address: &str) -> BTreeMap<String, String> {
    let url = |role: &str, password: &str| {
        format!("postgres://{role}:{password}@{address}/{}", record.db_name)
    };
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .to_owned();
    BTreeMap::from([
        (
            "DATABASE_URL".to_owned(),
            url(&record.role_name, &record.password),
        ),
        (
            "DATABASE_URL_READONLY".to_owned(),
            url(&record.readonly_role_name, &record.readonly_password),
        ),
        ("DATABASE_HOST".to_owned(), host),
        ("DATABASE_PASSWORD".to_owned(), record.password.clone()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_keys_are_the_reserved_database_keys() {
        for key in ENV_KEYS {
            assert!(
                slipway_crds::names::RESERVED_ENV_KEYS.contains(&key),
                "{key} must be reserved so no user value can shadow it"
            );
        }
    }

    #[test]
    fn variables_name_the_channel_database_with_each_role() {
        let record = DatabaseRecord {
            db_name: "next_blog_alice".into(),
            role_name: "next_blog_alice".into(),
            readonly_role_name: "next_blog_alice_ro".into(),
            password: "pw1".into(),
            readonly_password: "pw2".into(),
        };
        let env = variables(&record, "db.example:5432");
        assert_eq!(
            env["DATABASE_URL"],
            "postgres://next_blog_alice:pw1@db.example:5432/next_blog_alice"
        );
        assert_eq!(
            env["DATABASE_URL_READONLY"],
            "postgres://next_blog_alice_ro:pw2@db.example:5432/next_blog_alice"
        );
        assert_eq!(env["DATABASE_HOST"], "db.example");
        assert_eq!(env["DATABASE_PASSWORD"], "pw1");
        assert_eq!(env.len(), ENV_KEYS.len());
    }
}
