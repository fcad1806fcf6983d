//! The edge's report of what it sent: bytes per account since its last report, added up by the API server into
//! each account's monthly bandwidth (`GET /me/usage`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{PlatformApi, PlatformError};

/// Body of `POST /internal/v1/usage/bandwidth`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BandwidthReport {
    /// Bytes sent per username since the last report.
    pub bytes: BTreeMap<String, u64>,
}

impl PlatformApi {
    /// Adds the report to the accounts' monthly bandwidth.
    pub async fn report_bandwidth(&self, report: &BandwidthReport) -> Result<(), PlatformError> {
        self.send(self.http.post(self.url("/usage/bandwidth")).json(report))
            .await?;
        Ok(())
    }
}
