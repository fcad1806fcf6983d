//! `/apps/{id}/channels/{cid}`: one channel: its hostname, status and commit, the deploy form, the deploy history
//! (each deploy's log a click away), custom domains with the DNS records to create, the SQL database and the
//! bucket with their usage and snapshots, and the runtime log's controls (its page is [`super::runtime_log`]).

use axum::extract::{Path, Query};
use axum::http::Method;
use axum::response::Response;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{Done, may, notice, person_page_as, see, warning};
use crate::ConsoleRouter;
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use slipway_core::access::Action;
use slipway_rest::app_health::AppHealth;
use slipway_rest::blob::BlobStatus;
use slipway_rest::blob_snapshots::BlobSnapshotRow;
use slipway_rest::deploys::{DeployHistory, DeployTriggered};
use slipway_rest::domains::{DnsRecordsView, DomainList, DomainView};
use slipway_rest::postgres::DatabaseStatus;
use slipway_rest::rewind::RewindTriggered;
use slipway_rest::snapshots::SnapshotRow;
use slipway_rest::views::{AppView, ChannelView};

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    let base = "/apps/{app_id}/channels/{channel_id}";
    ConsoleRouter::new()
        .route(base, get(channel))
        .route(&format!("{base}/deploy"), post(deploy))
        .route(&format!("{base}/rewind"), post(rewind))
        .route(&format!("{base}/domains"), post(attach_domain))
        .route(
            &format!("{base}/domains/{{domain}}/verify"),
            post(verify_domain),
        )
        .route(
            &format!("{base}/domains/{{domain}}/remove"),
            post(detach_domain),
        )
}

const NOTICES: &[(&str, &str)] = &[
    (
        "domain-attached",
        "The domain is attached. Create the DNS records below, then verify.",
    ),
    (
        "domain-verified",
        "The domain is verified: it reaches this channel, and its certificate follows on its first visit.",
    ),
    ("domain-removed", "The domain is detached."),
    (
        "channel-created",
        "The channel is made. Push to its branch, then deploy it here.",
    ),
];

/// What a write that went through but did not get what it asked for says.
const WARNINGS: &[(&str, &str)] = &[(
    "domain-unverified",
    "The check did not pass: the domain's row below says why. Fix the DNS records, then verify again.",
)];

fn paths(app_id: &str, channel_id: &str) -> (String, String) {
    let app = format!("/apps/{}", seg(app_id));
    let channel = format!("{app}/channels/{}", seg(channel_id));
    (app, channel)
}

async fn channel(
    person: Person,
    Path((app_id, channel_id)): Path<(String, String)>,
    Query(done): Query<Done>,
) -> Response {
    page(&person, &app_id, &channel_id, &done, None).await
}

/// The page, answering `retry` when a write from it was refused.
pub(super) async fn page(
    person: &Person,
    app_id: &str,
    channel_id: &str,
    done: &Done,
    retry: Option<&Retry<'_>>,
) -> Response {
    let (app_path, here) = paths(app_id, channel_id);
    let app: AppView = match person.api.read(&app_path).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let channel: ChannelView = match person.api.read(&here).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let is_static = app.template == "static";
    // A page that cannot read the app's health shows the channel's state alone.
    let health: Option<AppHealth> = person.api.read(&format!("{app_path}/health")).await.ok();
    let health = health
        .as_ref()
        .and_then(|h| super::health_of(h, &channel.id));
    let csrf = html::csrf_field(&person.session.csrf);
    let writes = may(&app, Action::Write);
    let history = person
        .api
        .read::<DeployHistory>(&format!("{here}/deploys"))
        .await
        .unwrap_or(DeployHistory { deploys: vec![] });
    let current = channel.current_sha.as_deref();
    let mut offered = std::collections::HashSet::new();
    let rows: Vec<Vec<Markup>> = history
        .deploys
        .iter()
        .map(|d| {
            let sha = d.git_sha.as_str();
            let serving = !super::succeeded_after(&history, &d.deploy_id);
            // One offer per commit, on its newest successful deploy (the history is newest first).
            let again = if writes && d.status == "success" && offered.insert(sha) {
                deploy_again(&here, &csrf, sha, current == Some(sha))
            } else {
                Markup::default()
            };
            vec![
                html! {
                    a href={ (here) "/deploys/" (seg(&d.deploy_id)) } {
                        (html::time(d.created_at.as_deref().unwrap_or_default()))
                    }
                },
                html::sha(Some(sha)),
                html::status(super::deploy_word(&d.stage, serving)),
                html! { @if d.rewound_from.is_some() { "rewind" } @else { "build" } },
                html::time(d.finished_at.as_deref().unwrap_or_default()),
                again,
            ]
        })
        .collect();
    let facts = html! {
        p {
            a href=(app_path) { (app.name) }
            " · hostname " b #hostname { (html::app_link(&channel.hostname, person.apps_port)) }
            " · branch " code { (channel.git_ref_binding) }
            " · status " span #channel-status { (super::state_and_health(&channel, health)) }
            " · commit " (html::sha(current))
        }
    };
    let body = html! {
        (html::breadcrumbs(&[("Apps", "/apps"), (&app.name, &app_path)], &channel.name))
        (notice(done.done.as_deref(), NOTICES))
        (notice(done.done.as_deref(), super::restores::NOTICES))
        (warning(done.done.as_deref(), WARNINGS))
        (html::live("channel-facts", facts))
        h2 { "Deploys" }
        @if writes {
            form.inline #deploy method="post" action={ (here) "/deploy" } {
                (csrf)
                label { "Branch or commit " input name="ref" value=(super::bound_branch(&channel)) required; }
                " "
                button type="submit" { "Deploy" }
            }
            // A rewind serves an earlier built image again; a static site has none, so it is not offered.
            @if !is_static {
                (html::Destructive {
                    action: &format!("{here}/rewind"),
                    hidden: &csrf,
                    opener: "Rewind",
                    consequence: "The channel goes back to the image it served before this one, without a build.",
                    button: "Rewind to the previous image",
                }
                .html())
            }
        }
        (html::live(
            "deploys",
            html! {
                (crate::graphs::deploy_times(&history.deploys))
                (html::table(
                    &["requested", "commit", "status", "kind", "finished", ""],
                    &rows,
                    "No deploys yet.",
                ))
            },
        ))
        (domains_section(person, &app, &here, &csrf, Form::of(retry, "attach-domain")).await)
        (data_section(person, &app, &channel, &here, &csrf, retry).await)
        (super::lifecycle::delete_channel_button(&app, &channel, &here, &csrf))
        @if !is_static && may(&app, Action::Read) {
            h2 { "Runtime log" }
            (super::runtime_log::form(&here, &Default::default()))
        }
    };
    person_page_as(
        person,
        status(retry),
        &format!("{} · {}", app.name, channel.name),
        body,
    )
}

/// The offer to deploy a commit that went live before once more, after a confirmation: a roll back to it, or a
/// redeploy of the commit that is live (which picks up the environment as it is now). Either is an ordinary new
/// deploy of that commit; what serves keeps serving until it is ready.
fn deploy_again(here: &str, csrf: &Markup, sha: &str, live: bool) -> Markup {
    let short = html::short_sha(sha);
    let hidden = html! {
        (csrf)
        input type="hidden" name="ref" value=(sha);
    };
    let (opener, consequence) = if live {
        (
            "Redeploy",
            format!(
                "A new deploy of {short}, the commit that is live, with the environment as it is now."
            ),
        )
    } else {
        (
            "Roll back to this",
            format!(
                "A new deploy of {short} goes live once it is ready; what serves now keeps serving until then."
            ),
        )
    };
    html::Destructive {
        action: &format!("{here}/deploy"),
        hidden: &hidden,
        opener,
        consequence: &consequence,
        button: &format!("Deploy {short}"),
    }
    .html()
}

/// The DNS records a domain needs, as its row shows them: the TXT record that proves it, then a CNAME for a
/// subdomain or A records for an apex (a name with no CNAME allowed). An installation that publishes no edge
/// address gets no A values, and the row says what an apex can use instead rather than showing an empty record.
fn dns_records(records: &DnsRecordsView) -> Markup {
    let a_values = &records.a_values;
    html! {
        "TXT " code { (records.txt_host) } " = " code { (records.txt_value) }
        br;
        "CNAME to " code { (records.cname_target) } " (a subdomain); "
        @if a_values.is_empty() {
            "this installation publishes no address for A records, so an apex needs an ALIAS (or flattened \
             CNAME) to the same target"
        } @else {
            "or A to " code { (a_values.join(", ")) } " (an apex)"
        }
    }
}

async fn domains_section(
    person: &Person,
    app: &AppView,
    here: &str,
    csrf: &Markup,
    form: Form<'_>,
) -> Markup {
    let domains = person
        .api
        .read::<DomainList>(&format!("{here}/domains"))
        .await
        .map(|l| l.domains)
        .unwrap_or_default();
    let manage = may(app, Action::ManageDomains);
    let rows: Vec<Vec<Markup>> = domains
        .iter()
        .map(|d| {
            let name = &d.domain;
            vec![
                html! { (name) },
                html! { (html::status(&d.status)) @if let Some(r) = &d.reason { " (" (r) ")" } },
                dns_records(&d.dns_records),
                html! {
                    @if manage {
                        form.inline method="post" action={ (here) "/domains/" (seg(name)) "/verify" } {
                            (csrf)
                            button.quiet type="submit" { "Verify" }
                        }
                        " "
                        (html::Destructive {
                            action: &format!("{here}/domains/{}/remove", seg(name)),
                            hidden: csrf,
                            opener: "Detach",
                            consequence: &format!("{name} stops reaching this channel, and its certificate is dropped."),
                            button: "Detach the domain",
                        }
                        .html())
                    }
                },
            ]
        })
        .collect();
    html! {
        h2 { "Custom domains" }
        (html::table(&["domain", "status", "DNS records to create", ""], &rows, "No custom domains."))
        @if manage {
            (form.alert())
            form #attach-domain method="post" action={ (here) "/domains" } {
                (csrf)
                label { "Domain " input name="domain" value=[form.value("domain", "")] required; }
                " "
                button type="submit" { "Attach" }
            }
        }
    }
}

async fn data_section(
    person: &Person,
    app: &AppView,
    channel: &ChannelView,
    here: &str,
    csrf: &Markup,
    retry: Option<&Retry<'_>>,
) -> Markup {
    use super::restores::{self, Leg};
    let is_static = app.template == "static";
    let sql_list = format!("{here}/postgres/snapshots");
    let bucket_list = format!("{here}/blob/snapshots");
    let database = if is_static {
        Markup::default()
    } else {
        let state = match person
            .api
            .read::<DatabaseStatus>(&format!("{here}/postgres"))
            .await
        {
            Ok(db) => {
                let snapshots = listed_table(
                    person,
                    &sql_list,
                    &[
                        "snapshot taken",
                        "kind",
                        "commit",
                        "size",
                        "bucket snapshot too",
                        "",
                    ],
                    "No snapshots yet.",
                    |s: &SnapshotRow| {
                        let id = s.snapshot_id.to_string();
                        vec![
                            html::at(s.created_at),
                            html! { (s.kind) },
                            html::sha(s.git_sha.as_deref()),
                            html! {
                                @match s.size_bytes.and_then(|b| u64::try_from(b).ok()) {
                                    Some(size) => (html::bytes(size)),
                                    None => "—",
                                }
                            },
                            yes_no(s.aligned_blob),
                            html! {
                                (super::downloads::button(app, &sql_list, &id, csrf))
                                (restores::button(
                                    app,
                                    Leg::Sql,
                                    here,
                                    &id,
                                    &db.db_name,
                                    csrf,
                                    Form::of(retry, Leg::Sql.form()),
                                ))
                            },
                        ]
                    },
                )
                .await;
                html! {
                    (html::table(
                        &["database", "status", "size", "connections"],
                        &[vec![
                            html! { code { (db.db_name) } },
                            html::status(&db.status),
                            html! { (html::bytes(html::unsigned(db.storage_bytes))) },
                            html! { (db.connection_count) " of " (db.connection_limit) },
                        ]],
                        "",
                    ))
                    (snapshots)
                }
            }
            Err(f) => html::banner("warning", &f.message),
        };
        html! {
            h2 { "SQL database" }
            (state)
            (connect_card(person, app, channel))
        }
    };
    let bucket = match person.api.read::<BlobStatus>(&format!("{here}/blob")).await {
        Ok(blob) => html::table(
            &["bucket", "status", "usage", "endpoint", "external access"],
            &[vec![
                html! { code { (blob.virtual_bucket) } },
                html::status(&blob.status),
                html! { (html::bytes(html::unsigned(blob.usage_bytes))) },
                html! { code { (blob.virtual_endpoint) } },
                html! { @if blob.external_enabled { "on" } @else { "off" } },
            ]],
            "",
        ),
        Err(f) => html::banner("warning", &f.message),
    };
    let bucket_snapshots = listed_table(
        person,
        &bucket_list,
        &[
            "bucket snapshot as of",
            "kind",
            "objects",
            "database snapshot too",
            "",
        ],
        "No bucket snapshots yet.",
        |s: &BlobSnapshotRow| {
            let id = s
                .pg_snapshot_id
                .map(|id| id.to_string())
                .unwrap_or_default();
            vec![
                html::at(s.snapshot_ts),
                html! { (s.kind) },
                html! { (s.object_count) },
                yes_no(s.pg_snapshot_id.is_some()),
                html! {
                    (super::downloads::button(app, &bucket_list, &id, csrf))
                    (restores::button(
                        app,
                        Leg::Bucket,
                        here,
                        &id,
                        &channel.name,
                        csrf,
                        Form::of(retry, Leg::Bucket.form()),
                    ))
                },
            ]
        },
    )
    .await;
    html! {
        (database)
        h2 { "Object storage" }
        (bucket)
        (bucket_snapshots)
    }
}

/// How to reach the channel's database from outside the platform (psql, a GUI, a migration run from a laptop),
/// when the platform serves external SQL access: the connection string for the app's owner once the app's
/// external SQL access is on, else what stands in the way. The token stays a placeholder: the page never holds one.
fn connect_card(person: &Person, app: &AppView, channel: &ChannelView) -> Markup {
    let Some(address) = person.sql_address.as_deref() else {
        return Markup::default();
    };
    let inner = if super::role_of(app) != Some(slipway_core::access::Role::Owner) {
        html! { p { "Only the app's owner connects to its databases from outside the platform." } }
    } else if !app.external_db_access_enabled {
        html! {
            p {
                "External SQL access is off for this app. Turn it on under "
                a href={ "/apps/" (seg(&app.id)) "#settings" } { "Settings" }
                " to connect with " code { "psql" } " or a database GUI."
            }
        }
    } else {
        // A session's username is always an account's; one that is not names no database.
        let Some((database, shadow)) = database_name(person, app, channel) else {
            return Markup::default();
        };
        match shadow {
            Some((app_name, channel_name)) => html! {
                p {
                    "The database name " code { (database) } " reaches channel " b { (channel_name) }
                    " of app " b { (app_name) } " first, so no connection string reaches this channel's \
                     database. Rename the channel (or that app) to connect to it."
                }
            },
            None => html! {
                pre.commands {
                    code #sql-connect {
                        "psql \"postgresql://" (person.session.username) ":<token>@" (address) "/" (database)
                        "?sslmode=require\""
                    }
                }
                p { button type="button" data-copy="sql-connect" { "Copy" } }
                p.hint {
                    "Put a token with the " code { "db:*" } " scope in place of " code { "<token>" } ": "
                    a href="/tokens?label=psql" { "make one" }
                    ". The session ends when the token is revoked or the access turned off."
                }
            },
        }
    };
    html! {
        section.card #connect {
            h3 { "Connect from your machine" }
            (inner)
        }
    }
}

/// The database name of `channel` in a connection string, and the (app, channel) it reaches instead when another
/// of the person's channels takes that name first (the SQL proxy's own reading of it); `None` for a username that
/// is not an account's.
fn database_name(
    person: &Person,
    app: &AppView,
    channel: &ChannelView,
) -> Option<(String, Option<(String, String)>)> {
    let owner = person.session.username.parse().ok()?;
    Some(slipway_data::sql_proxy::target::name_of(
        &person.cache,
        &owner,
        &app.name,
        &channel.name,
    ))
}

/// The table of the list the API answers at `path`, one row per entry; a list it cannot read shows as empty (the
/// section's own status above says why).
async fn listed_table<Row: DeserializeOwned>(
    person: &Person,
    path: &str,
    headings: &[&str],
    empty: &str,
    row: impl Fn(&Row) -> Vec<Markup>,
) -> Markup {
    let listed: Vec<Row> = person.api.read(path).await.unwrap_or_default();
    let rows: Vec<Vec<Markup>> = listed.iter().map(row).collect();
    html::table(headings, &rows, empty)
}

fn yes_no(yes: bool) -> Markup {
    html! { @if yes { "yes" } @else { "no" } }
}

async fn deploy(Path((app_id, channel_id)): Path<(String, String)>, write: Write) -> Response {
    let (_, here) = paths(&app_id, &channel_id);
    match write
        .person
        .api
        .write_as::<DeployTriggered>(
            Method::POST,
            &format!("{here}/deploy"),
            &json!({"sha": write.fields.get("ref")}),
        )
        .await
    {
        Ok(d) => see(&format!("{here}/deploys/{}", seg(&d.deploy_id))),
        Err(f) => write.person.refused(&f, &here),
    }
}

async fn rewind(Path((app_id, channel_id)): Path<(String, String)>, write: Write) -> Response {
    let (_, here) = paths(&app_id, &channel_id);
    match write
        .person
        .api
        .send(Method::POST, &format!("{here}/rewind"), None)
        .await
    {
        Ok(answer) => match answer.parsed::<RewindTriggered>() {
            Ok(d) => see(&format!("{here}/deploys/{}", seg(&d.deploy_id))),
            Err(f) => write.person.refused(&f, &here),
        },
        Err(f) => write.person.refused(&f, &here),
    }
}

async fn attach_domain(
    Path((app_id, channel_id)): Path<(String, String)>,
    write: Write,
) -> Response {
    let (_, here) = paths(&app_id, &channel_id);
    match write
        .person
        .api
        .write(
            Method::POST,
            &format!("{here}/domains"),
            &json!({"domain": write.fields.get("domain")}),
        )
        .await
    {
        Ok(_) => see(&format!("{here}?done=domain-attached")),
        Err(f) => {
            retry::refused(&write, "attach-domain", &f, &here, async |retry| {
                page(
                    &write.person,
                    &app_id,
                    &channel_id,
                    &Done::default(),
                    Some(retry),
                )
                .await
            })
            .await
        }
    }
}

async fn verify_domain(
    Path((app_id, channel_id, domain)): Path<(String, String, String)>,
    write: Write,
) -> Response {
    let (_, here) = paths(&app_id, &channel_id);
    let path = format!("{here}/domains/{}/verify", seg(&domain));
    let answer = write.person.api.send(Method::POST, &path, None).await;
    match answer.and_then(|a| a.parsed::<DomainView>()) {
        Ok(domain) => see(&format!("{here}?done={}", verify_outcome(&domain))),
        Err(f) => write.person.refused(&f, &here),
    }
}

/// The notice a verify's answer (the domain) earns: verified only when the check passed this time; a domain left
/// pending with a reason, or verified still with a transient failure recorded, gets the warning.
fn verify_outcome(domain: &DomainView) -> &'static str {
    if domain.status == "verified" && domain.reason.is_none() {
        "domain-verified"
    } else {
        "domain-unverified"
    }
}

async fn detach_domain(
    Path((app_id, channel_id, domain)): Path<(String, String, String)>,
    write: Write,
) -> Response {
    let (_, here) = paths(&app_id, &channel_id);
    match write
        .person
        .api
        .delete(&format!("{here}/domains/{}", seg(&domain)))
        .await
    {
        Ok(_) => see(&format!("{here}?done=domain-removed")),
        Err(f) => write.person.refused(&f, &here),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(a_values: &[&str]) -> DnsRecordsView {
        DnsRecordsView {
            txt_host: "_svc.example.com".into(),
            txt_value: "svc-verify-1".into(),
            cname_target: "web.apps.example".into(),
            a_values: a_values.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn an_apex_record_is_named_or_its_absence_said() {
        let shown = dns_records(&records(&["192.0.2.1", "192.0.2.2"])).into_string();
        assert!(
            shown.contains("A to <code>192.0.2.1, 192.0.2.2</code>"),
            "{shown}"
        );
        let none = dns_records(&records(&[])).into_string();
        assert!(!none.contains("A to <code></code>"), "{none}");
        assert!(
            none.contains("publishes no address for A records"),
            "{none}"
        );
    }

    #[test]
    fn only_a_check_that_passed_is_announced_as_verified() {
        let outcome = |status: &str, reason: Option<&str>| {
            verify_outcome(&DomainView {
                domain: "example.com".into(),
                status: status.into(),
                reason: reason.map(str::to_owned),
                dns_records: records(&[]),
                created_at: None,
                verified_at: None,
            })
        };
        assert_eq!(outcome("verified", None), "domain-verified");
        assert_eq!(
            outcome("pending", Some("txt_nxdomain")),
            "domain-unverified"
        );
        assert_eq!(
            outcome("verified", Some("dns_lookup_failed")),
            "domain-unverified"
        );
        for (done, _) in WARNINGS {
            assert!(
                NOTICES.iter().all(|(n, _)| n != done),
                "{done} is a warning only"
            );
        }
        assert!(NOTICES.iter().any(|(n, _)| *n == "domain-verified"));
        assert!(WARNINGS.iter().any(|(n, _)| *n == "domain-unverified"));
    }
}
