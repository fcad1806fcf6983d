//! `/account`: who the person is signed in as, their plan and its limits, their usage (with the warning the spec
//! asks for when the databases are over the plan's soft cap), and their SSH keys ([`super::ssh_keys`]).

use axum::extract::Query;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::Value;

use super::apps::soft_cap_warning;
use super::{list, notice, person_page_as, ssh_keys, text};
use crate::ConsoleRouter;
use crate::graphs;
use crate::html::{self, esc};
use crate::retry::{Form, Retry, status};
use crate::session::Person;

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
    let usage = person.api.get("/me/usage").await;
    let blob = person
        .api
        .get("/me/blob/storage")
        .await
        .unwrap_or(Value::Null);
    let plans = person.api.get("/plans").await.unwrap_or(Value::Null);
    let mut body = notice(
        done,
        &[
            ("key-added", "The key is added: git over SSH takes it now."),
            (
                "key-removed",
                "The key is removed; it is refused from now on.",
            ),
        ],
    );
    body.push_str(&soft_cap_warning(person).await);
    body.push_str(&format!(
        "<p>Signed in as <b>{}</b>.</p>",
        esc(&person.session.username)
    ));
    match &usage {
        Ok(usage) => {
            let plan_name = text(usage, "plan");
            body.push_str(&format!(
                "<h2>Plan <span id=\"plan\">{}</span></h2>",
                esc(plan_name)
            ));
            let plan = list(&plans, "plans")
                .iter()
                .find(|p| text(p, "tier") == plan_name);
            // A negative object storage limit is none.
            let plan_blob_limit = plan.and_then(|p| p["blob_storage_bytes"].as_i64());
            if let Some(plan) = plan {
                let blob_limit = plan_blob_limit.unwrap_or(0);
                body.push_str(&html::table(
                    &["limit", "value"],
                    &[
                        vec!["Channels".into(), plan["max_channels"].to_string()],
                        vec![
                            "Memory per container".into(),
                            format!("{} MiB", plan["mem_limit_mb"]),
                        ],
                        vec![
                            "CPU".into(),
                            format!(
                                "{} cores, bursting to {}",
                                plan["cpu_soft_cores"], plan["cpu_burst"]
                            ),
                        ],
                        vec![
                            "Database storage (soft cap)".into(),
                            format!("{} MB", plan["storage_mb"]),
                        ],
                        vec![
                            "Object storage".into(),
                            if blob_limit < 0 {
                                "unlimited".into()
                            } else {
                                html::bytes(blob_limit as u64)
                            },
                        ],
                        vec![
                            "Image size".into(),
                            html::bytes(plan["image_size_bytes"].as_u64().unwrap_or(0)),
                        ],
                        vec![
                            "Port forwarding".into(),
                            if plan["port_forwarding"].as_bool() == Some(true) {
                                "yes".into()
                            } else {
                                "no".into()
                            },
                        ],
                    ],
                    "",
                ));
            }
            body.push_str("<h2>Usage</h2>");
            // The soft cap counts a MB as 1 MiB (apps::soft_cap_warning), and so do both figures here.
            let db_used = usage["storage_bytes"].as_u64().unwrap_or(0);
            let db_limit = usage["storage_limit_mb"]
                .as_u64()
                .map(|mb| mb * 1024 * 1024);
            let blob_used = blob["blob_usage_bytes"].as_u64().unwrap_or(0);
            let blob_limit = plan_blob_limit.and_then(|l| u64::try_from(l).ok());
            let of = |limit: Option<u64>| {
                limit.map_or(String::new(), |l| format!(" of {}", html::bytes(l)))
            };
            body.push_str(&html::table(
                &["what", "used"],
                &[
                    vec![
                        "Databases".into(),
                        format!(
                            "<span id=\"storage\">{}</span>{}{}",
                            html::bytes(db_used),
                            of(db_limit),
                            graphs::meter("storage-meter", db_used, db_limit),
                        ),
                    ],
                    vec![
                        "Object storage".into(),
                        format!(
                            "{}{} in {} buckets{}",
                            html::bytes(blob_used),
                            of(blob_limit),
                            blob["store_count"].as_u64().unwrap_or(0),
                            graphs::meter("blob-meter", blob_used, blob_limit),
                        ),
                    ],
                    vec![
                        "Bandwidth this month".into(),
                        format!(
                            "{} (measured, not limited)",
                            html::bytes(usage["bandwidth_month_bytes"].as_u64().unwrap_or(0))
                        ),
                    ],
                ],
                "",
            ));
            body.push_str(&graphs::bandwidth_days(
                usage["bandwidth_days"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            ));
        }
        Err(f) => body.push_str(&html::banner(
            "warning",
            &format!("Usage cannot be read now: {}", f.message),
        )),
    }
    body.push_str(
        &ssh_keys::section(
            person,
            &person.git_host,
            Form::of(retry, ssh_keys::ADD_FORM),
        )
        .await,
    );
    person_page_as(person, status(retry), "Account", &body)
}
