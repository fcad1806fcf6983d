//! Custom domains against real parts: the REST API and the operator in this process on the test control plane,
//! pebble-challtestsrv as the DNS server the verification resolver asks (records set over its HTTP API), Pebble as
//! the ACME CA, and `slipway edge` serving a static channel over HTTPS on loopback. A client that trusts only
//! Pebble's root fetches the custom domain with it as SNI and `Host`.
//!
//! Needs `hack/pebble.sh start` (hack/test.sh starts it for this tier) and its `env`.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use slipway_crds::Domain;
use support::https::{self, TestDns};
use support::{APP_DOMAIN, EDGE_ADDRESS, TestApi, User};

const WAIT: Duration = Duration::from_secs(90);
/// The wildcard certificate's Secret the edge is told about.
const WILDCARD: &str = "platform-wildcard";

fn random() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// A user with a static app; returns (app id, prod channel id, the prod channel's hostname).
async fn static_app(api: &TestApi, user: &User, name: &str) -> (String, String, String) {
    let app = api.create_app(user, name, "static").await;
    let channel = &app["channels"][0];
    (
        app["id"].as_str().unwrap().to_owned(),
        channel["id"].as_str().unwrap().to_owned(),
        channel["hostname"].as_str().unwrap().to_owned(),
    )
}

fn domains_path(app: &str, channel: &str) -> String {
    format!("/apps/{app}/channels/{channel}/domains")
}

#[tokio::test]
async fn attach_list_and_detach_follow_the_routes_rules() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("doma", "builder").await?;
    let bob = api.user("domb", "builder").await?;
    let (app, channel, hostname) = static_app(&api, &alice, "site").await;
    let path = domains_path(&app, &channel);
    let r = random();

    for (given, reason) in [
        ("192.0.2.1", "is_ip_address"),
        ("[2001:db8::1]", "is_ip_address"),
        ("xn--a.example", "invalid_idna"),
        (&*format!("{}.example", "a".repeat(64)), "too_long"),
        ("bad_label.example", "invalid_label"),
        ("-x.example", "invalid_label"),
        (&*format!("shop.{APP_DOMAIN}"), "platform_domain_forbidden"),
        (APP_DOMAIN, "platform_domain_forbidden"),
        ("localhost", "needs_dot"),
    ] {
        let reply = api.post(&path, &alice, json!({"domain": given})).await;
        let code = format!("invalid domain: {reason}");
        reply.expect(400, Some(code.as_str()));
    }
    api.post(&path, &alice, json!({}))
        .await
        .expect(400, Some("bad_request"));

    // Unicode, any case and a trailing dot: stored IDNA-encoded, lowercase, without the dot.
    let given = format!("WWW-{r}.Bücher.Example.");
    let stored = format!("www-{r}.xn--bcher-kva.example");
    let first = api
        .post(&path, &alice, json!({"domain": given}))
        .await
        .expect(201, None);
    assert_eq!(first["domain"], stored.as_str());
    assert_eq!(first["status"], "pending");
    assert_eq!(first["reason"], Value::Null);
    assert_eq!(first["verified_at"], Value::Null);
    let records = &first["dns_records"];
    assert_eq!(records["txt_host"], format!("_svc.{stored}").as_str());
    assert!(
        records["txt_value"]
            .as_str()
            .unwrap()
            .starts_with("svc-verify-")
    );
    assert_eq!(records["cname_target"], hostname.as_str());
    assert_eq!(records["a_values"], json!([EDGE_ADDRESS]));
    // Re-attach on the same channel: the same row, the same token.
    let again = api
        .post(&path, &alice, json!({"domain": stored}))
        .await
        .expect(201, None);
    assert_eq!(again["dns_records"]["txt_value"], records["txt_value"]);

    // Taken: by another channel of the same account, and by another account.
    let other = api
        .post(
            &format!("/apps/{app}/channels"),
            &alice,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let other_path = domains_path(&app, other["id"].as_str().unwrap());
    api.post(&other_path, &alice, json!({"domain": stored}))
        .await
        .expect(409, Some("domain_taken"));
    let (bob_app, bob_channel, _) = static_app(&api, &bob, "shop").await;
    api.post(
        &domains_path(&bob_app, &bob_channel),
        &bob,
        json!({"domain": given}),
    )
    .await
    .expect(409, Some("domain_taken"));

    // Five per channel.
    for i in 1..5 {
        api.post(
            &path,
            &alice,
            json!({"domain": format!("d{i}-{r}.example")}),
        )
        .await
        .expect(201, None);
    }
    api.post(&path, &alice, json!({"domain": format!("d5-{r}.example")}))
        .await
        .expect(400, Some("domain_limit_reached"));
    let list = api.get(&path, &alice).await.expect(200, None);
    let names: Vec<&str> = list["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 5);
    assert!(names.contains(&stored.as_str()), "{names:?}");

    // Someone else's channel, an unattached domain: 404.
    api.get(&path, &bob).await.expect(404, Some("not_found"));
    api.post(
        &format!("{path}/nope-{r}.example/verify"),
        &alice,
        json!({}),
    )
    .await
    .expect(404, Some("not_found"));
    api.delete(&format!("{path}/nope-{r}.example"), &alice)
        .await
        .expect(404, Some("not_found"));
    api.delete(&format!("{other_path}/{stored}"), &alice)
        .await
        .expect(404, Some("not_found"));

    // Detach (by any form of the name): gone, and free for another account.
    let detached = api
        .delete(&format!("{path}/{}.", stored.to_uppercase()), &alice)
        .await
        .expect(200, None);
    assert_eq!(detached, json!({"ok": true}));
    let list = api.get(&path, &alice).await.expect(200, None);
    assert_eq!(list["domains"].as_array().unwrap().len(), 4);
    let taken_by_bob = api
        .post(
            &domains_path(&bob_app, &bob_channel),
            &bob,
            json!({"domain": stored}),
        )
        .await
        .expect(201, None);
    assert_ne!(
        taken_by_bob["dns_records"]["txt_value"], records["txt_value"],
        "a new token"
    );
    Ok(())
}

/// The cluster's view of Domains as the API's cache gives it, changing between two looks: the first look shows
/// `before`, every later one `after` (the Domain an attachment created came into the cache meanwhile).
struct ChangingView {
    before: std::collections::BTreeSet<String>,
    after: std::collections::BTreeSet<String>,
    looks: std::sync::atomic::AtomicUsize,
}

impl slipway_store::db::domain_claims::DomainCluster for ChangingView {
    fn domains_on(&self, _: &str, _: &str) -> std::collections::BTreeSet<String> {
        let look = self.looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if look == 0 { &self.before } else { &self.after }.clone()
    }
}

/// The interleaving behind attaching one domain twice at once on a channel one short of its limit: the second
/// attachment finds the first's claim in flight and checks the cache (no Domain yet); by the time it counts the
/// channel's domains the first's Domain is in the cache. The domain claimed again is still one domain: the claim
/// succeeds instead of answering `domain_limit_reached`.
#[tokio::test]
async fn a_domain_claimed_again_while_its_domain_appears_does_not_count_twice() -> Result<()> {
    use slipway_store::db::domain_claims::{DomainClaim, claim};
    let api = TestApi::start().await?;
    let erin = api.user("dome", "builder").await?;
    let domain = format!("again-{}.example", random());
    let limit = slipway_crds::rules::MAX_DOMAINS_PER_CHANNEL;
    let others: std::collections::BTreeSet<String> = (0..limit - 1)
        .map(|i| format!("other-{i}-{}.example", random()))
        .collect();
    let new = DomainClaim {
        user_id: erin.id,
        namespace: &erin.namespace,
        channel: "site.prod",
        domain: &domain,
    };
    let steady = ChangingView {
        before: others.clone(),
        after: others.clone(),
        looks: Default::default(),
    };
    // The first attachment's claim, in flight.
    assert_eq!(claim(api.state.db(), &new, limit, &steady).await?, Ok(()));
    let mut with_it = others.clone();
    with_it.insert(domain.clone());
    let changing = ChangingView {
        before: others,
        after: with_it,
        looks: Default::default(),
    };
    assert_eq!(claim(api.state.db(), &new, limit, &changing).await?, Ok(()));
    Ok(())
}

#[tokio::test]
async fn parallel_attachments_never_share_a_domain_nor_pass_the_channel_s_limit() -> Result<()> {
    let api = std::sync::Arc::new(TestApi::start().await?);
    let carol = api.user("domc", "builder").await?;
    let dave = api.user("domd", "builder").await?;
    let (carol_app, carol_channel, _) = static_app(&api, &carol, "site").await;
    let (dave_app, dave_channel, _) = static_app(&api, &dave, "site").await;
    let attach = |user: &User, path: String, domain: String| {
        let (api, user) = (api.clone(), user.clone());
        tokio::spawn(async move { api.post(&path, &user, json!({"domain": domain})).await })
    };
    // Two tenants want one domain at once: one gets it.
    let mut dave_holds = 0;
    for round in 0..4 {
        let domain = format!("both-{round}-{}.example", random());
        let replies = [
            attach(
                &carol,
                domains_path(&carol_app, &carol_channel),
                domain.clone(),
            ),
            attach(
                &dave,
                domains_path(&dave_app, &dave_channel),
                domain.clone(),
            ),
        ];
        let mut statuses = Vec::new();
        for reply in replies {
            let reply = reply.await?;
            statuses.push(reply.status);
            if reply.status != 201 {
                reply.expect(409, Some("domain_taken"));
            }
        }
        if statuses[1] == 201 {
            dave_holds += 1;
        }
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "round {round}");
    }
    // One tenant attaching one domain twice at once: both answers are the one attachment.
    let domain = format!("twice-{}.example", random());
    let path = domains_path(&carol_app, &carol_channel);
    let twice = [
        attach(&carol, path.clone(), domain.clone()),
        attach(&carol, path.clone(), domain.clone()),
    ];
    let mut tokens = Vec::new();
    for reply in twice {
        let reply = reply.await?.expect(201, None);
        tokens.push(reply["dns_records"]["txt_value"].clone());
    }
    assert_eq!(tokens[0], tokens[1]);
    let listed = api.get(&path, &carol).await.expect(200, None)["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["domain"] == domain.as_str())
        .count();
    assert_eq!(listed, 1);
    // The claim outlived the race: another tenant still cannot take it.
    attach(&dave, domains_path(&dave_app, &dave_channel), domain)
        .await?
        .expect(409, Some("domain_taken"));

    // Eight at once on one channel: five fit.
    let path = domains_path(&dave_app, &dave_channel);
    let r = random();
    let replies: Vec<_> = (0..8)
        .map(|i| attach(&dave, path.clone(), format!("many-{i}-{r}.example")))
        .collect();
    let mut attached = 0;
    for reply in replies {
        let reply = reply.await?;
        if reply.status == 201 {
            attached += 1;
        } else {
            reply.expect(400, Some("domain_limit_reached"));
        }
    }
    let listed = api.get(&path, &dave).await.expect(200, None)["domains"]
        .as_array()
        .unwrap()
        .len();
    // Dave's channel already held the domains he won above.
    assert_eq!((attached, listed), (5 - dave_holds, 5));
    Ok(())
}

/// Verifies `domain` and returns the row.
async fn verify(api: &TestApi, user: &User, path: &str, domain: &str) -> Value {
    api.post(&format!("{path}/{domain}/verify"), user, json!({}))
        .await
        .expect(200, None)
}

#[tokio::test]
async fn verification_moves_domains_as_the_state_table_says() -> Result<()> {
    let dns = TestDns::from_env()?;
    let api = TestApi::start().await?;
    let user = api.user("domv", "builder").await?;
    api.start_operator_with_domains(
        &user.namespace,
        https::domains_config(&user.namespace, false)?,
    )
    .await?;
    let (app, channel, hostname) = static_app(&api, &user, "site").await;
    let path = domains_path(&app, &channel);
    let r = random();
    let apex = format!("v{r}.example");
    let row = api
        .post(&path, &user, json!({"domain": apex}))
        .await
        .expect(201, None);
    let token = row["dns_records"]["txt_value"].as_str().unwrap().to_owned();
    let txt_host = format!("_svc.{apex}");

    let expect = |row: &Value, status: &str, reason: Option<&str>| {
        assert_eq!(row["status"], status, "{row}");
        assert_eq!(
            row["reason"],
            reason.map_or(Value::Null, Value::from),
            "{row}"
        );
    };
    expect(
        &verify(&api, &user, &path, &apex).await,
        "pending",
        Some("txt_nxdomain"),
    );
    dns.txt(&txt_host, "svc-verify-someone-else").await?;
    expect(
        &verify(&api, &user, &path, &apex).await,
        "pending",
        Some("txt_token_mismatch"),
    );
    dns.call("clear-txt", json!({"host": format!("{txt_host}.")}))
        .await?;
    dns.txt(&txt_host, &token).await?;
    expect(
        &verify(&api, &user, &path, &apex).await,
        "pending",
        Some("domain_nxdomain"),
    );
    dns.a(&apex, &["192.0.2.99"]).await?;
    expect(
        &verify(&api, &user, &path, &apex).await,
        "pending",
        Some("dns_not_pointing"),
    );
    dns.servfail(&apex, true).await?;
    expect(
        &verify(&api, &user, &path, &apex).await,
        "pending",
        Some("dns_lookup_failed"),
    );
    dns.servfail(&apex, false).await?;
    dns.a(&apex, &[EDGE_ADDRESS]).await?;
    let verified = verify(&api, &user, &path, &apex).await;
    expect(&verified, "verified", None);
    assert!(verified["verified_at"].is_string());
    // Idempotent.
    expect(&verify(&api, &user, &path, &apex).await, "verified", None);

    // Transient failures keep it verified, with the reason recorded.
    dns.servfail(&txt_host, true).await?;
    let row = verify(&api, &user, &path, &apex).await;
    expect(&row, "verified", Some("txt_lookup_failed"));
    assert_eq!(row["verified_at"], verified["verified_at"]);
    dns.servfail(&txt_host, false).await?;
    dns.servfail(&apex, true).await?;
    expect(
        &verify(&api, &user, &path, &apex).await,
        "verified",
        Some("dns_lookup_failed"),
    );
    dns.servfail(&apex, false).await?;

    // A subdomain by CNAME to the channel's hostname.
    let sub = format!("www.v{r}.example");
    let row = api
        .post(&path, &user, json!({"domain": sub}))
        .await
        .expect(201, None);
    dns.txt(
        &format!("_svc.{sub}"),
        row["dns_records"]["txt_value"].as_str().unwrap(),
    )
    .await?;
    dns.call(
        "set-cname",
        json!({"host": format!("{sub}."), "target": format!("{hostname}.")}),
    )
    .await?;
    expect(&verify(&api, &user, &path, &sub).await, "verified", None);

    // A definitive failure moves it back to pending; kubectl tells the same story.
    dns.call("clear-a", json!({"host": format!("{apex}.")}))
        .await?;
    dns.a(&apex, &["192.0.2.99"]).await?;
    let row = verify(&api, &user, &path, &apex).await;
    expect(&row, "pending", Some("dns_not_pointing"));
    assert_eq!(row["verified_at"], Value::Null);
    let resource = Api::<Domain>::namespaced(api.kube.clone(), &user.namespace)
        .get(&apex)
        .await?;
    let status = resource.status.unwrap();
    let verified_condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .unwrap();
    assert_eq!(
        (
            verified_condition.status.as_str(),
            verified_condition.reason.as_str()
        ),
        ("False", "DnsNotPointing")
    );
    Ok(())
}

/// A plain HTTP GET of `/` on `addr` for `host`: (status, Location).
async fn plain_get(addr: SocketAddr, host: &str) -> Result<(u16, String)> {
    let res = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(format!("http://{addr}/"))
        .header("host", host)
        .send()
        .await?;
    let location = res
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    Ok((res.status().as_u16(), location))
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> Result<T> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(found) = probe().await {
            return Ok(found);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_verified_domain_is_served_over_https_with_its_acme_certificate() -> Result<()> {
    // RUST_LOG shows the operator's and the edge's logs when this needs looking into.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dns = TestDns::from_env()?;
    let pebble_root = https::acme_root().await?;
    let api = TestApi::start().await?;
    let user = api.user("domt", "builder").await?;
    let ns = user.namespace.clone();
    // The platform's wildcard certificate, from a CA of the platform operator's.
    let pki = slipway_testkit::tls::TestPki::new()?;
    let wildcard = pki.serving_cert(&[&format!("*.{APP_DOMAIN}")])?;
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": WILDCARD}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": wildcard.cert_pem(), "tls.key": wildcard.key_pem()}}),
    )?;
    let secrets: Api<Secret> = Api::namespaced(api.kube.clone(), &ns);
    secrets.create(&Default::default(), &secret).await?;

    api.start_operator_with_domains(&ns, https::domains_config(&ns, true)?)
        .await?;
    let https::StartedEdge {
        http,
        https: https_addr,
        ..
    } = https::start_edge(
        &api,
        &ns,
        https::EdgeOptions {
            wildcard_secret: WILDCARD,
            access_log: true,
            redirect_https: true,
            acme_http: true,
            sign_in: None,
        },
    )
    .await?;
    let (app, channel, hostname) = static_app(&api, &user, "site").await;
    let sha = api
        .commit(
            &user,
            &app,
            json!({"index.html": "<h1>served over TLS</h1>\n"}),
        )
        .await;
    let deploy = api.deploy(&user, &app, &channel, json!({"sha": sha})).await;
    let log = api
        .finished_deploy(&user, &app, &channel, &deploy, WAIT)
        .await?;
    assert_eq!(log["status"], "success", "{log}");

    // The channel's hostname with the wildcard, over HTTP/2 and HTTP/1.1.
    let platform_ca = https::client_config(pki.ca_pem(), &[b"h2", b"http/1.1"])?;
    let res = eventually("the channel over HTTPS", async || {
        https::get(https_addr, &hostname, platform_ca.clone(), "/")
            .await
            .ok()
            .filter(|r| r.status == 200)
    })
    .await?;
    assert_eq!(res.version, http::Version::HTTP_2);
    assert_eq!(&res.body[..], b"<h1>served over TLS</h1>\n");
    let h1 = https::get(
        https_addr,
        &hostname,
        https::client_config(pki.ca_pem(), &[b"http/1.1"])?,
        "/",
    )
    .await?;
    assert_eq!((h1.status, h1.version), (200, http::Version::HTTP_11));
    // Plain HTTP redirects there.
    let (status, location) = plain_get(http, &hostname).await?;
    assert_eq!(
        (status, location.as_str()),
        (308, format!("https://{hostname}/").as_str())
    );

    // An attached but unverified name: no certificate, no route, nothing asked of the CA.
    let path = domains_path(&app, &channel);
    let r = random();
    let domain = format!("shop-{r}.example");
    let row = api
        .post(&path, &user, json!({"domain": domain}))
        .await
        .expect(201, None);
    let acme_ca = https::client_config(&pebble_root, &[b"h2", b"http/1.1"])?;
    assert!(
        https::get(https_addr, &domain, acme_ca.clone(), "/")
            .await
            .is_err()
    );
    assert_eq!(plain_get(http, &domain).await?.0, 404);
    assert!(
        https::get(https_addr, "www.google.com", acme_ca.clone(), "/")
            .await
            .is_err()
    );

    // Records in the test DNS, verify, and the first HTTPS answer.
    dns.txt(
        &format!("_svc.{domain}"),
        row["dns_records"]["txt_value"].as_str().unwrap(),
    )
    .await?;
    dns.a(&domain, &[EDGE_ADDRESS]).await?;
    let verified_at = Instant::now();
    assert_eq!(
        verify(&api, &user, &path, &domain).await["status"],
        "verified"
    );
    let first = eventually("the custom domain over HTTPS", async || {
        https::get(https_addr, &domain, acme_ca.clone(), "/")
            .await
            .ok()
            .filter(|r| r.status == 200)
    })
    .await?;
    println!("verify to first HTTPS answer: {:?}", verified_at.elapsed());
    assert_eq!(&first.body[..], b"<h1>served over TLS</h1>\n");
    let (status, location) = plain_get(http, &domain).await?;
    assert_eq!(
        (status, location.as_str()),
        (308, format!("https://{domain}/").as_str())
    );

    // Stored the way cert-manager stores certificates, in the platform's namespace.
    let stored = secrets.get(&format!("tls-{domain}")).await?;
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = stored.data.clone().unwrap();
    assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));
    let annotations = stored.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["cert-manager.io/alt-names"], domain);
    assert_eq!(annotations["cert-manager.io/common-name"], domain);
    let domains: Api<Domain> = Api::namespaced(api.kube.clone(), &ns);
    let cert = domains
        .get(&domain)
        .await?
        .status
        .unwrap()
        .certificate
        .unwrap();
    let (not_before, not_after, renew_at) = (
        cert.not_before.unwrap().0,
        cert.not_after.unwrap().0,
        cert.renew_at.unwrap().0,
    );
    // Two thirds into the validity (status times have whole seconds).
    let life = not_after.duration_since(not_before);
    let due = not_before.checked_add(life * 2 / 3)?;
    assert!(renew_at.duration_since(due).abs() < k8s_openapi::jiff::SignedDuration::from_secs(1));

    // A forced renewal: a new certificate, served without a restart.
    domains
        .patch(
            &domain,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"slipway.dev/renew-requested": "now"}}}),
            ),
        )
        .await?;
    eventually("the renewed certificate", async || {
        let res = https::get(https_addr, &domain, acme_ca.clone(), "/")
            .await
            .ok()?;
        (res.status == 200 && res.leaf != first.leaf).then_some(())
    })
    .await?;

    // A definitive DNS failure: pending with the reason, and neither certificate nor route any more.
    dns.call("clear-txt", json!({"host": format!("_svc.{domain}.")}))
        .await?;
    dns.txt(&format!("_svc.{domain}"), "svc-verify-not-it")
        .await?;
    let row = verify(&api, &user, &path, &domain).await;
    assert_eq!(
        (row["status"].as_str(), row["reason"].as_str()),
        (Some("pending"), Some("txt_token_mismatch"))
    );
    eventually("the route and certificate to go", async || {
        let tls_refused = https::get(https_addr, &domain, acme_ca.clone(), "/")
            .await
            .is_err();
        let unrouted = plain_get(http, &domain).await.ok()?.0 == 404;
        (tls_refused && unrouted).then_some(())
    })
    .await?;

    // Detach: the Secret goes, and the name stays unserved.
    api.delete(&format!("{path}/{domain}"), &user)
        .await
        .expect(200, None);
    eventually("the certificate Secret to go", async || {
        secrets
            .get_opt(&format!("tls-{domain}"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    assert!(
        https::get(https_addr, &domain, acme_ca.clone(), "/")
            .await
            .is_err()
    );
    assert_eq!(plain_get(http, &domain).await?.0, 404);
    Ok(())
}

/// Runs the operator for `namespace`, verifying against the test DNS, so each Domain holds its certificate
/// finalizer until the operator has cleaned up after it, as on a platform.
async fn finalizing_operator(api: &TestApi, namespace: &str) -> Result<()> {
    api.start_operator_with_domains(namespace, https::domains_config(namespace, false)?)
        .await?;
    Ok(())
}

/// Creates the channel `name` (following branch `name`) of `app`; returns its id.
async fn channel(api: &TestApi, user: &User, app: &str, name: &str) -> String {
    let created = api
        .post(
            &format!("/apps/{app}/channels"),
            user,
            json!({"name": name, "git_ref_binding": format!("branch:{name}")}),
        )
        .await
        .expect(200, None);
    created["id"].as_str().unwrap().to_owned()
}

/// Attaches `domain` to the channel; returns the reply.
async fn attach(
    api: &TestApi,
    user: &User,
    app: &str,
    channel: &str,
    domain: &str,
) -> support::Reply {
    api.post(&domains_path(app, channel), user, json!({"domain": domain}))
        .await
}

/// The Domain of `domain` in `namespace` once the operator has put its finalizer on.
async fn finalized(api: &TestApi, namespace: &str, domain: &str) -> Result<Domain> {
    let domains: Api<Domain> = Api::namespaced(api.kube.clone(), namespace);
    eventually("the Domain's finalizer", async || {
        domains
            .get_opt(domain)
            .await
            .ok()
            .flatten()
            .filter(|d| !d.metadata.finalizers.clone().unwrap_or_default().is_empty())
    })
    .await
}

/// Checks that the Domain of `domain` in `namespace` names its Channel `channel`, and nothing else, as its owner.
async fn assert_owned_by_its_channel(
    api: &TestApi,
    namespace: &str,
    domain: &str,
    channel: &str,
) -> Result<()> {
    let written = Api::<Domain>::namespaced(api.kube.clone(), namespace)
        .get(domain)
        .await?;
    let channel = Api::<slipway_crds::Channel>::namespaced(api.kube.clone(), namespace)
        .get(channel)
        .await?;
    let owners: Vec<_> = written
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|o| (o.kind, o.name, Some(o.uid)))
        .collect();
    assert_eq!(
        owners,
        [(
            "Channel".to_owned(),
            channel.metadata.name.unwrap(),
            channel.metadata.uid
        )]
    );
    Ok(())
}

/// How many domain claims the platform database holds in `namespace`.
async fn claims_in(api: &TestApi, namespace: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM domain_claims WHERE namespace = $1")
            .bind(namespace)
            .fetch_one(api.state.db())
            .await?,
    )
}

#[tokio::test]
async fn deleting_an_app_frees_its_domains_at_once() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("domf", "builder").await?;
    let bob = api.user("domg", "builder").await?;
    finalizing_operator(&api, &alice.namespace).await?;
    let (app, prod, _) = static_app(&api, &alice, "site").await;
    let next = channel(&api, &alice, &app, "next").await;
    let r = random();
    let (on_prod, on_next) = (format!("p-{r}.example"), format!("n-{r}.example"));
    attach(&api, &alice, &app, &prod, &on_prod)
        .await
        .expect(201, None);
    attach(&api, &alice, &app, &next, &on_next)
        .await
        .expect(201, None);
    finalized(&api, &alice.namespace, &on_prod).await?;
    finalized(&api, &alice.namespace, &on_next).await?;

    api.delete(&format!("/apps/{app}"), &alice)
        .await
        .expect(204, None);
    assert_eq!(claims_in(&api, &alice.namespace).await?, 0);
    // Free at once: for another account, and for a new app of the same account (whose namespace the old Domain of
    // the name may not have left yet).
    let (shop, shop_prod, _) = static_app(&api, &bob, "shop").await;
    attach(&api, &bob, &shop, &shop_prod, &on_prod)
        .await
        .expect(201, None);
    let (again, again_prod, _) = static_app(&api, &alice, "again").await;
    attach(&api, &alice, &again, &again_prod, &on_next)
        .await
        .expect(201, None);
    // A Domain names its Channel as owner from its creation (no operator runs in bob's namespace to add it later),
    // so it goes with the channel however that goes.
    assert_owned_by_its_channel(&api, &bob.namespace, &on_prod, "shop.prod").await?;
    Ok(())
}

#[tokio::test]
async fn deleting_a_channel_frees_its_domains_at_once() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("domh", "builder").await?;
    let bob = api.user("domi", "builder").await?;
    finalizing_operator(&api, &alice.namespace).await?;
    let (app, prod, _) = static_app(&api, &alice, "site").await;
    let next = channel(&api, &alice, &app, "next").await;
    let r = random();
    let (mine, theirs) = (format!("m-{r}.example"), format!("t-{r}.example"));
    for domain in [&mine, &theirs] {
        attach(&api, &alice, &app, &next, domain)
            .await
            .expect(201, None);
        finalized(&api, &alice.namespace, domain).await?;
    }
    attach(&api, &alice, &app, &prod, &format!("stays-{r}.example"))
        .await
        .expect(201, None);

    api.delete(&format!("/apps/{app}/channels/{next}"), &alice)
        .await
        .expect(204, None);
    assert_eq!(claims_in(&api, &alice.namespace).await?, 1, "prod's stays");
    attach(&api, &alice, &app, &prod, &mine)
        .await
        .expect(201, None);
    let (shop, shop_prod, _) = static_app(&api, &bob, "shop").await;
    attach(&api, &bob, &shop, &shop_prod, &theirs)
        .await
        .expect(201, None);
    assert_owned_by_its_channel(&api, &bob.namespace, &theirs, "shop.prod").await?;
    Ok(())
}

#[tokio::test]
async fn a_name_is_free_the_moment_its_detach_answered() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("domj", "builder").await?;
    let bob = api.user("domk", "builder").await?;
    finalizing_operator(&api, &alice.namespace).await?;
    finalizing_operator(&api, &bob.namespace).await?;
    let (site, site_prod, _) = static_app(&api, &alice, "site").await;
    let site_next = channel(&api, &alice, &site, "next").await;
    let (shop, shop_prod, _) = static_app(&api, &bob, "shop").await;
    // From channel to channel of one app (one namespace, where the detached Domain of the name is still finishing
    // when the next attach comes), and from account to account.
    let spots = [
        (&alice, &site, &site_prod),
        (&alice, &site, &site_next),
        (&bob, &shop, &shop_prod),
    ];
    let domain = format!("race-{}.example", random());
    for round in 0..8 {
        for (user, app, channel) in spots {
            let reply = attach(&api, user, app, channel, &domain).await;
            assert_eq!(
                reply.status, 201,
                "round {round}, to channel {channel} of {}: {}",
                user.username, reply.body
            );
            finalized(&api, &user.namespace, &domain).await?;
            api.delete(&format!("{}/{domain}", domains_path(app, channel)), user)
                .await
                .expect(200, None);
        }
    }
    Ok(())
}

#[tokio::test]
async fn leftovers_of_older_versions_are_swept() -> Result<()> {
    use slipway_store::db::domain_claims::{DomainClaim, claim};
    let api = TestApi::start().await?;
    let alice = api.user("doml", "builder").await?;
    let bob = api.user("domm", "builder").await?;
    let ns = alice.namespace.clone();
    static_app(&api, &alice, "old").await;
    static_app(&api, &alice, "site").await;
    let r = random();
    let (left, adopted, stale) = (
        format!("left-{r}.example"),
        format!("adopted-{r}.example"),
        format!("stale-{r}.example"),
    );
    // What an older version left behind: Domains naming no owner, with their claims (made long ago), one of them on a
    // channel since deleted with its app, and a claim whose Domain is gone too.
    let domains: Api<Domain> = Api::namespaced(api.kube.clone(), &ns);
    for (domain, channel) in [(&left, "old.prod"), (&adopted, "site.prod")] {
        let written: Domain = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "metadata": {"name": domain},
            "spec": {"channel": channel, "domain": domain}}))?;
        domains.create(&Default::default(), &written).await?;
    }
    for (domain, channel) in [
        (&left, "old.prod"),
        (&adopted, "site.prod"),
        (&stale, "old.prod"),
    ] {
        let new = DomainClaim {
            user_id: alice.id,
            namespace: &ns,
            channel,
            domain,
        };
        assert_eq!(
            claim(api.state.db(), &new, 5, api.state.cache()).await?,
            Ok(())
        );
    }
    sqlx::query(
        "UPDATE domain_claims SET claimed_at = now() - interval '1 hour' WHERE namespace = $1",
    )
    .bind(&ns)
    .execute(api.state.db())
    .await?;
    Api::<slipway_crds::App>::namespaced(api.kube.clone(), &ns)
        .delete("old", &kube::api::DeleteParams::background())
        .await?;
    eventually("the old app's channel to go", async || {
        Api::<slipway_crds::Channel>::namespaced(api.kube.clone(), &ns)
            .get_opt("old.prod")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    let (shop, shop_prod, _) = static_app(&api, &bob, "shop").await;
    attach(&api, &bob, &shop, &shop_prod, &left)
        .await
        .expect(409, Some("domain_taken"));

    // The operator sweeps when it starts.
    api.start_operator_with_domains_extended(&ns, https::domains_config(&ns, false)?, |ctx| {
        ctx.with_orphan_domain_grace(Duration::ZERO)
    })
    .await?;
    eventually("the orphan to go", async || {
        domains.get_opt(&left).await.ok()?.is_none().then_some(())
    })
    .await?;
    eventually("the Domain to be adopted", async || {
        let owned = domains
            .get(&adopted)
            .await
            .ok()?
            .metadata
            .owner_references?;
        (!owned.is_empty()).then_some(())
    })
    .await?;
    assert_owned_by_its_channel(&api, &ns, &adopted, "site.prod").await?;
    attach(&api, &bob, &shop, &shop_prod, &left)
        .await
        .expect(201, None);

    // The claims whose Domain is gone go with the API's sweep; the adopted Domain's stays.
    let mut sweeper = slipway_core::platform::sweep::Sweeper::new(
        api.state.db().clone(),
        api.state.cache().clone(),
    );
    assert_eq!(
        sweeper
            .sweep(Duration::from_secs(3600))
            .await?
            .domain_claims,
        1
    );
    let held: Vec<String> =
        sqlx::query_scalar("SELECT domain FROM domain_claims WHERE namespace = $1")
            .bind(&ns)
            .fetch_all(api.state.db())
            .await?;
    assert_eq!(held, [adopted]);
    Ok(())
}
