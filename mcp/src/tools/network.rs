//! Custom domains and raw TCP forwards of a channel.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ADDS, Ctx, DESTROYS, OfApp, OfChannel, READS, SETS, ToolDef, json, tool};
use crate::address::{self, AppAddress, ChannelAddress};
use slipway_rest::in_process::segment;

/// Arguments naming a custom domain of a channel.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfDomain {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The domain, e.g. `www.example.com`.
    domain: String,
}

/// `expose_port` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Expose {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// Source addresses allowed to connect: IPv4 or IPv6 addresses and CIDR ranges, at most 16; empty or
    /// omitted lets anyone connect. Exposing again replaces the list and keeps the port.
    #[serde(default)]
    allow_cidrs: Vec<String>,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "add_custom_domain",
            "Attach a custom domain to a channel. Answers the DNS records to create (a TXT record proving \
             ownership, and a CNAME, or A records for an apex); then call `verify_custom_domain`.",
            ADDS,
            |ctx: Ctx, a: OfDomain| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/domains", app.channel_path(&a.channel)?);
                json(
                    ctx.rest
                        .write(Method::POST, &path, &json!({"domain": a.domain}))
                        .await?,
                )
            },
        ),
        tool(
            "verify_custom_domain",
            "Check a custom domain's DNS records now; once verified the channel answers on it (with a certificate \
             where ACME is configured).",
            SETS,
            |ctx: Ctx, a: OfDomain| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!(
                    "{}/domains/{}/verify",
                    app.channel_path(&a.channel)?,
                    segment(&a.domain)
                );
                json(ctx.rest.write(Method::POST, &path, &json!({})).await?)
            },
        ),
        tool(
            "list_custom_domains",
            "List a channel's custom domains with their status and the DNS records each needs.",
            READS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                json(
                    ctx.rest
                        .get(&format!("{}/domains", app.channel_path(&a.channel)?))
                        .await?,
                )
            },
        ),
        tool(
            "remove_custom_domain",
            "Detach a custom domain from a channel; the channel stops answering on it.",
            DESTROYS,
            |ctx: Ctx, a: OfDomain| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!(
                    "{}/domains/{}",
                    app.channel_path(&a.channel)?,
                    segment(&a.domain)
                );
                json(ctx.rest.delete(&path).await?)
            },
        ),
        tool(
            "expose_port",
            "Expose a channel's TCP port 7000 ($SVC_FORWARD_PORT) on a public host and port, bytes forwarded \
             unmodified (no TLS), to the allowed source addresses. Needs the app's port forwarding on and a plan \
             that includes it.",
            SETS,
            |ctx: Ctx, a: Expose| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/forward", app.channel_path(&a.channel)?);
                json(
                    ctx.rest
                        .write(Method::POST, &path, &json!({"allow_cidrs": a.allow_cidrs}))
                        .await?,
                )
            },
        ),
        tool(
            "list_exposed_ports",
            "List an app's exposed channels with their public host, port, allowlist and whether they are active.",
            READS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                json(ctx.rest.get(&format!("{}/forwards", app.path())).await?)
            },
        ),
        tool(
            "unexpose_port",
            "Stop accepting new connections to a channel's exposed port (open sessions last until the next \
             deploy); exposing again later gets a new address.",
            DESTROYS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                ctx.rest
                    .delete(&format!("{}/forward", app.channel_path(&a.channel)?))
                    .await?;
                json(json!({"unexposed": app.channel_id(&a.channel)?}))
            },
        ),
    ]
}
