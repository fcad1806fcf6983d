//! `/account`: who the person is signed in as, their plan and its limits, their usage (with the warning the spec
//! asks for when the databases are over the plan's soft cap), and their SSH keys ([`super::ssh_keys`]).

use axum::extract::Query;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::apps::soft_cap_warning;
use super::{notice, person_page_as, ssh_keys};
use crate::ConsoleRouter;
use crate::graphs;
use crate::html::{self, Markup, html};
use crate::retry::{Form, Retry, status};
use crate::session::Person;
use slipway_crds::plans::Plan;
use slipway_rest::blob::BlobStorage;
use slipway_rest::plans::Usage;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/account", get(account))
        .merge(ssh_keys::routes())
}

#[derive(Debug, Default, Deserialize)]
struct AccountQuery {
    done: Option<String>,
}

async fn account(person: Person, Query(query): Query<AccountQuery>) -> Response {
    page(&person, query.done.as_deref(), None).await
}

/// The page after `done` (what a form of it did), answering `retry` when a form of it was refused.
pub(super) async fn page(
    person: &Person,
    done: Option<&str>,
    retry: Option<&Retry<'_>>,
) -> Response {
    let usage = person.api.read::<Usage>("/me/usage").await;
    let blob = person
        .api
        .read::<BlobStorage>("/me/blob/storage")
        .await
        .ok();
    let body = html! {
        (notice(
            done,
            &[
                ("key-added", "The key is added: git over SSH takes it now."),
                (
                    "key-removed",
                    "The key is removed; it is refused from now on.",
                ),
            ],
        ))
        (soft_cap_warning(person).await)
        p { "Signed in as " b { (person.session.username) } "." }
        @match &usage {
            Ok(usage) => (plan_and_usage(usage, blob.as_ref())),
            Err(f) => (html::banner("warning", &format!("Usage cannot be read now: {}", f.message))),
        }
        (ssh_keys::section(person, &person.git_host, Form::of(retry, ssh_keys::ADD_FORM)).await)
    };
    person_page_as(person, status(retry), "Account", body)
}

/// The plan's limits and the account's usage against them, from `GET /me/usage` and `/me/blob/storage`, and the
/// plan table `GET /plans` serves.
fn plan_and_usage(usage: &Usage, blob: Option<&BlobStorage>) -> Markup {
    let plan_name = &usage.plan;
    let plan = Plan::by_tier(plan_name);
    // A negative object storage limit is none.
    let plan_blob_limit = plan.map(|p| p.blob_storage_bytes);
    let limits = plan.map(|plan| {
        let blob_limit = plan_blob_limit.unwrap_or(0);
        let row = |name: &str, value: Markup| vec![html! { (name) }, value];
        html::table(
            &["limit", "value"],
            &[
                row("Channels", html! { (plan.max_channels) }),
                row("Memory per container", html! { (plan.mem_limit_mb) " MiB" }),
                row(
                    "CPU",
                    html! { (cores(plan.cpu_soft_cores)) " cores, bursting to " (cores(plan.cpu_burst)) },
                ),
                row("Database storage (soft cap)", html! { (plan.storage_mb) " MB" }),
                row(
                    "Object storage",
                    html! {
                        @if blob_limit < 0 { "unlimited" } @else { (html::bytes(blob_limit as u64)) }
                    },
                ),
                row(
                    "Image size",
                    html! { (html::bytes(html::unsigned(plan.image_size_bytes))) },
                ),
                row(
                    "Port forwarding",
                    html! { @if plan.port_forwarding { "yes" } @else { "no" } },
                ),
            ],
            "",
        )
    });
    // The soft cap counts a MB as 1 MiB (apps::soft_cap_warning), and so do both figures here.
    let db_used = html::unsigned(usage.storage_bytes);
    let db_limit = Some(u64::from(usage.storage_limit_mb) * 1024 * 1024);
    let blob_used = blob.map_or(0, |b| html::unsigned(b.blob_usage_bytes));
    let blob_limit = plan_blob_limit.and_then(|l| u64::try_from(l).ok());
    let of = |limit: Option<u64>| html! { @if let Some(l) = limit { " of " (html::bytes(l)) } };
    html! {
        h2 { "Plan " span #plan { (plan_name) } }
        (limits.unwrap_or_default())
        h2 { "Usage" }
        (html::table(
            &["what", "used"],
            &[
                vec![
                    html! { "Databases" },
                    html! {
                        span #storage { (html::bytes(db_used)) }
                        (of(db_limit))
                        (graphs::meter("storage-meter", db_used, db_limit))
                    },
                ],
                vec![
                    html! { "Object storage" },
                    html! {
                        (html::bytes(blob_used)) (of(blob_limit))
                        " in " (blob.map_or(0, |b| b.store_count)) " buckets"
                        (graphs::meter("blob-meter", blob_used, blob_limit))
                    },
                ],
                vec![
                    html! { "Bandwidth this month" },
                    html! {
                        (html::bytes(html::unsigned(usage.bandwidth_month_bytes)))
                        " (measured, not limited)"
                    },
                ],
            ],
            "",
        ))
        (graphs::bandwidth_days(&usage.bandwidth_days))
    }
}

/// A CPU figure as the API writes it: `0.25`, `2.0`.
fn cores(figure: f64) -> String {
    format!("{figure:?}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_figures_read_as_the_plans_route_writes_them() {
        assert_eq!(super::cores(2.0), "2.0");
        assert_eq!(super::cores(0.25), "0.25");
        assert_eq!(super::cores(0.1), "0.1");
    }
}
