//! Where the data server is: the admin connection (a superuser's URL, from a Secret; only the operator and the API
//! server get it) and, for the operator, the address pods reach the server at. Without an admin URL channels get
//! no database and the database routes answer 503 postgres_unavailable, which suits clusters that run slipway
//! without SQL databases.

use std::sync::Arc;

use slipway_backends::data_server::DataServer;
use slipway_controllers::postgres::PostgresSettings;

/// The admin connection, as both the operator and the API server take it.
#[derive(Debug, Clone, clap::Args)]
pub struct DataServerArgs {
    /// Admin URL of the data server that holds the channels' databases
    /// (`postgres://USER:PASSWORD@HOST:PORT/postgres`, a superuser; from the environment, since a flag would show
    /// in the process list). Unset: channels get no database.
    #[arg(long, env = "SLIPWAY_DATA_SERVER_URL", hide_env_values = true)]
    pub data_server_url: Option<String>,
}

impl DataServerArgs {
    /// The data server these options name; `None` without a URL.
    pub fn server(&self) -> anyhow::Result<Option<Arc<DataServer>>> {
        let Some(url) = &self.data_server_url else {
            return Ok(None);
        };
        Ok(Some(Arc::new(DataServer::new(url)?)))
    }
}

/// The operator's data-server options.
#[derive(Debug, Clone, clap::Args)]
pub struct PostgresOperatorArgs {
    /// The admin connection.
    #[command(flatten)]
    pub admin: DataServerArgs,
    /// The data server as pods reach it, HOST:PORT (`DATABASE_HOST` and the host of `DATABASE_URL`). Default: the
    /// host and port of the admin URL.
    #[arg(long, env = "SLIPWAY_DATA_SERVER_POD_ADDRESS")]
    pub data_server_pod_address: Option<String>,
}

impl PostgresOperatorArgs {
    /// The settings these options name; `None` without an admin URL.
    pub fn settings(&self) -> anyhow::Result<Option<PostgresSettings>> {
        let Some(server) = self.admin.server()? else {
            return Ok(None);
        };
        let pod_address = match &self.data_server_pod_address {
            Some(address) => address.clone(),
            None => {
                let options = server.admin_options();
                format!("{}:{}", options.get_host(), options.get_port())
            }
        };
        Ok(Some(PostgresSettings {
            server,
            pod_address,
        }))
    }
}

/// Checks the data server at start: a server that does not let channel roles create postgis is reported now,
/// loudly, rather than at the first channel (whose status says the same).
pub async fn check_at_start(server: &DataServer) {
    match server.check().await {
        Ok(()) => tracing::info!("data server ready: channel roles may create postgis"),
        Err(e) => tracing::error!(error = %e, "the data server cannot host channel databases"),
    }
}
