//! The plan tiers and their limits. The API serves them at `GET /plans`, the webhook enforces the channel cap from
//! them, and reconcilers size workloads from them. The `starter` row is fixed by the hosting API; the other tiers
//! are slipway's choice (documented in ARCHITECTURE.md): each step up doubles what matters for a growing app, and
//! every paid tier (builder and up) includes port forwarding and keeps seven days of nightly snapshots.

use serde::Serialize;

/// One plan tier, exactly the fields of the hosting API's plan row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plan {
    /// Tier name.
    pub tier: &'static str,
    /// Position in the ladder, ascending.
    pub rank: u32,
    /// Channels per account; each app's prod channel uses one.
    pub max_channels: u32,
    /// Guaranteed CPU, in cores.
    pub cpu_soft_cores: f64,
    /// CPU a container may burst to, in cores.
    pub cpu_burst: f64,
    /// Memory limit per container, in MiB.
    pub mem_limit_mb: u32,
    /// Database storage, in MB (advisory: going over warns, blocks nothing).
    pub storage_mb: u32,
    /// Object-store bytes (enforced); -1 means unlimited.
    pub blob_storage_bytes: i64,
    /// Cap on an image's charged size, in bytes.
    pub image_size_bytes: i64,
    /// Days a nightly snapshot is kept.
    pub snapshot_retention_days: u32,
    /// Pre-deploy snapshots kept per channel.
    pub deploy_snapshot_keep: u32,
    /// Whether Forward endpoints are available.
    pub port_forwarding: bool,
    /// True for the tier only agent registration creates.
    pub agent_registration_only: bool,
}

const MIB: i64 = 1024 * 1024;
const GIB: i64 = 1024 * MIB;

/// Every tier, ascending by rank.
pub const PLANS: [Plan; 6] = [
    Plan {
        tier: "starter",
        rank: 0,
        max_channels: 3,
        cpu_soft_cores: 0.1,
        cpu_burst: 2.0,
        mem_limit_mb: 128,
        storage_mb: 500,
        blob_storage_bytes: 268_435_456,
        image_size_bytes: 536_870_912,
        snapshot_retention_days: 1,
        deploy_snapshot_keep: 1,
        port_forwarding: false,
        agent_registration_only: true,
    },
    Plan {
        tier: "basic",
        rank: 1,
        max_channels: 5,
        cpu_soft_cores: 0.25,
        cpu_burst: 2.0,
        mem_limit_mb: 256,
        storage_mb: 1024,
        blob_storage_bytes: GIB,
        image_size_bytes: 512 * MIB,
        snapshot_retention_days: 1,
        deploy_snapshot_keep: 1,
        port_forwarding: false,
        agent_registration_only: false,
    },
    Plan {
        tier: "builder",
        rank: 2,
        max_channels: 10,
        cpu_soft_cores: 0.5,
        cpu_burst: 2.0,
        mem_limit_mb: 512,
        storage_mb: 5 * 1024,
        blob_storage_bytes: 10 * GIB,
        image_size_bytes: 2 * GIB,
        snapshot_retention_days: 7,
        deploy_snapshot_keep: 3,
        port_forwarding: true,
        agent_registration_only: false,
    },
    Plan {
        tier: "indie",
        rank: 3,
        max_channels: 20,
        cpu_soft_cores: 1.0,
        cpu_burst: 4.0,
        mem_limit_mb: 1024,
        storage_mb: 10 * 1024,
        blob_storage_bytes: 50 * GIB,
        image_size_bytes: 4 * GIB,
        snapshot_retention_days: 7,
        deploy_snapshot_keep: 3,
        port_forwarding: true,
        agent_registration_only: false,
    },
    Plan {
        tier: "studio",
        rank: 4,
        max_channels: 50,
        cpu_soft_cores: 2.0,
        cpu_burst: 4.0,
        mem_limit_mb: 2048,
        storage_mb: 25 * 1024,
        blob_storage_bytes: 200 * GIB,
        image_size_bytes: 8 * GIB,
        snapshot_retention_days: 7,
        deploy_snapshot_keep: 3,
        port_forwarding: true,
        agent_registration_only: false,
    },
    Plan {
        tier: "pro",
        rank: 5,
        max_channels: 100,
        cpu_soft_cores: 4.0,
        cpu_burst: 8.0,
        mem_limit_mb: 4096,
        storage_mb: 50 * 1024,
        blob_storage_bytes: -1,
        image_size_bytes: 12 * GIB,
        snapshot_retention_days: 7,
        deploy_snapshot_keep: 3,
        port_forwarding: true,
        agent_registration_only: false,
    },
];

impl Plan {
    /// The plan named `tier`.
    pub fn by_tier(tier: &str) -> Option<&'static Plan> {
        PLANS.iter().find(|p| p.tier == tier)
    }

    /// Connections each of a channel's database roles may hold at once: 5 on starter, doubling with each rank
    /// up to 100 (the plan row of the hosting API does not carry it, so it is derived here).
    pub fn database_connection_limit(&self) -> u32 {
        5u32.saturating_mul(1 << self.rank.min(5)).min(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_connections_grow_with_the_plan() {
        let limits: Vec<u32> = PLANS.iter().map(Plan::database_connection_limit).collect();
        assert_eq!(limits, [5, 10, 20, 40, 80, 100]);
    }

    #[test]
    fn starter_is_the_row_the_api_fixes() {
        let starter = serde_json::to_value(Plan::by_tier("starter").unwrap()).unwrap();
        assert_eq!(
            starter,
            serde_json::json!({
                "tier": "starter", "rank": 0, "max_channels": 3, "cpu_soft_cores": 0.1, "cpu_burst": 2.0,
                "mem_limit_mb": 128, "storage_mb": 500, "blob_storage_bytes": 268435456,
                "image_size_bytes": 536870912, "snapshot_retention_days": 1, "deploy_snapshot_keep": 1,
                "port_forwarding": false, "agent_registration_only": true
            })
        );
    }

    #[test]
    fn tiers_ascend_and_match_the_image_caps_of_the_limits_table() {
        assert!(PLANS.windows(2).all(|w| w[0].rank < w[1].rank));
        let caps: Vec<(&str, i64)> = PLANS.iter().map(|p| (p.tier, p.image_size_bytes)).collect();
        assert_eq!(
            caps,
            [
                ("starter", 536_870_912),
                ("basic", 512 * MIB),
                ("builder", 2 * GIB),
                ("indie", 4 * GIB),
                ("studio", 8 * GIB),
                ("pro", 12 * GIB)
            ]
        );
        assert!(
            PLANS
                .iter()
                .filter(|p| p.port_forwarding)
                .all(|p| p.rank >= 2),
            "paid tiers only"
        );
    }
}
