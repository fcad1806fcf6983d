//! Git mirroring against a real SSH git server (Debian's sshd with git-shell on loopback, `hack/git-peer.sh`), a
//! real kube-apiserver and Postgres: connect, install the deploy key upstream, push there, sync, deploy the mirrored
//! commit; a force-push upstream after the next sync; pushes and changesets refused while connected; disconnect and
//! commit again; a deploy whose fetch fails; a changed host key; every address class a sync must not reach,
//! through a DNS server of the test's own; and a repository of 200 MB mirrored and cloned back whole.

// A test fails loudly on a reply of the wrong shape.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};
use support::dns::TestDns;
use support::git::http_remote;
use support::git_peer::GitPeer;
use support::{TestApi, User};

const WITHIN: Duration = Duration::from_secs(60);

/// An app of alice's and the routes of its mirror.
struct Mirrored {
    api: TestApi,
    alice: User,
    app_id: String,
    prod_id: String,
}

impl Mirrored {
    async fn new(api: TestApi, template: &str) -> Result<Self> {
        let alice = api.user("alice", "basic").await?;
        let app = api.create_app(&alice, "site", template).await;
        Ok(Self {
            app_id: app["id"].as_str().unwrap().to_owned(),
            prod_id: app["channels"][0]["id"].as_str().unwrap().to_owned(),
            api,
            alice,
        })
    }

    fn route(&self, rest: &str) -> String {
        format!("/apps/{}/github{rest}", self.app_id)
    }

    async fn connect(&self, url: &str) -> support::Reply {
        self.api
            .post(
                &self.route("/connect"),
                &self.alice,
                json!({"remote_url": url}),
            )
            .await
    }

    async fn sync(&self) -> Value {
        self.api
            .post(&self.route("/sync"), &self.alice, json!({}))
            .await
            .expect(200, None)
    }

    /// A sync that fails, with an error naming each of `words`; answers the status.
    async fn failed_sync(&self, words: &[&str]) -> Value {
        let status = self.sync().await;
        assert_eq!(status["last_sync_status"], "failed", "{status}");
        let error = status["last_sync_error"].as_str().unwrap();
        for word in words {
            assert!(error.contains(word), "{word:?} in {error}");
        }
        status
    }

    async fn status(&self) -> Value {
        self.api
            .get(&self.route(""), &self.alice)
            .await
            .expect(200, None)
    }

    async fn disconnect(&self) {
        self.api
            .delete(&self.route(""), &self.alice)
            .await
            .expect(204, None);
    }

    async fn file(&self, path: &str) -> String {
        let reply = self
            .api
            .get(
                &format!("/apps/{}/blob?ref=master&path={path}", self.app_id),
                &self.alice,
            )
            .await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        reply.body.as_str().unwrap_or_default().to_owned()
    }

    async fn channel(&self) -> Value {
        self.api
            .get(
                &format!("/apps/{}/channels/{}", self.app_id, self.prod_id),
                &self.alice,
            )
            .await
            .expect(200, None)
    }

    async fn deploy(&self, body: Value) -> support::Reply {
        self.api
            .post(
                &format!("/apps/{}/channels/{}/deploy", self.app_id, self.prod_id),
                &self.alice,
                body,
            )
            .await
    }
}

/// An SSH git server with an empty repository `site`, and alice's static app `site` on a fresh API.
async fn peer_and_site() -> Result<(GitPeer, Mirrored)> {
    let peer = GitPeer::start().await?;
    peer.create_repo("site").await?;
    let m = Mirrored::new(TestApi::start().await?, "static").await?;
    Ok((peer, m))
}

#[tokio::test]
async fn a_mirrored_app_syncs_deploys_and_refuses_other_commits_until_disconnected() -> Result<()> {
    let (peer, m) = peer_and_site().await?;
    // The app had history of its own before it was connected.
    m.api
        .commit(&m.alice, &m.app_id, json!({"old.txt": "mine"}))
        .await;

    // Connect: a fresh deploy key, nothing fetched.
    let connected = m.connect(&peer.url("site")).await.expect(200, None);
    let public_key = connected["public_key"].as_str().unwrap().to_owned();
    assert!(public_key.starts_with("ssh-ed25519 AAAA"), "{connected}");
    assert_eq!(connected["remote_url"], peer.url("site"));
    let status = m.status().await;
    assert_eq!(status["connected"], true);
    assert_eq!(status["public_key"], public_key.as_str());
    assert_eq!(status["remote_url"], peer.url("site"));
    assert!(status["connected_at"].is_string());
    for never in [
        "last_synced_at",
        "last_sync_status",
        "last_sync_error",
        "last_sync_refs",
    ] {
        assert_eq!(
            status[never],
            Value::Null,
            "{never} before any sync: {status}"
        );
    }
    assert!(
        !status.to_string().contains("PRIVATE"),
        "the private key is never returned"
    );
    assert_eq!(m.file("old.txt").await, "mine", "connect fetches nothing");
    m.connect(&peer.url("site"))
        .await
        .expect(409, Some("conflict"));

    // While connected: the changeset route answers 409 and git push 403.
    m.api
        .post(
            &format!("/apps/{}/changeset", m.app_id),
            &m.alice,
            json!({"message": "x", "changes": {"x.txt": "x"}}),
        )
        .await
        .expect(409, Some("conflict"));
    let base = m.api.serve().await?;
    let remote = http_remote(&base, &m.alice.token, &m.alice.username, "site");
    let mut ws = support::git::Workspace::new()?;
    ws.git(".", &["clone", "-q", &remote, "local"]).await?;
    ws.write("local/y.txt", "y")?;
    ws.git("local", &["add", "-A"]).await?;
    ws.git("local", &["commit", "-q", "-m", "y"]).await?;
    let push = ws
        .try_git("local", &["push", "origin", "HEAD:master"])
        .await?;
    assert!(!push.ok, "a push to a mirrored app is refused");
    assert!(
        push.stderr.contains("403") || push.stderr.contains("mirrors an external"),
        "{}",
        push.stderr
    );
    // Over SSH the push is refused too, with the reason.
    let port = m.api.serve_ssh().await?;
    let key = ws.ssh_key("alice_key").await?;
    m.api
        .post("/ssh-keys", &m.alice, json!({"public_key": key}))
        .await
        .expect(200, None);
    ws.ssh_command = Some(ws.ssh_command_for("alice_key", port));
    let ssh_remote = format!("ssh://git@127.0.0.1:{port}/{}/site.git", m.alice.username);
    let push = ws
        .try_git("local", &["push", &ssh_remote, "HEAD:master"])
        .await?;
    assert!(
        !push.ok && push.stderr.contains("mirrors an external"),
        "{}",
        push.stderr
    );

    // A sync before the key is installed upstream fails and says why.
    let a0 = peer
        .commit("site", "master", &[("index.html", "v1")], false)
        .await?;
    let failed = m.failed_sync(&["refused the deploy key"]).await;
    assert_eq!(failed["last_sync_refs"], Value::Null);
    assert!(failed["last_synced_at"].is_string());

    // Install the key upstream: the sync mirrors every branch, and the external repository is authoritative.
    peer.authorize(&public_key)?;
    peer.commit("site", "feature", &[("feature.txt", "f")], false)
        .await?;
    let synced = m.sync().await;
    assert_eq!(synced["last_sync_status"], "success", "{synced}");
    assert_eq!(synced["last_sync_error"], Value::Null);
    let refs = synced["last_sync_refs"].as_object().unwrap();
    assert_eq!(refs["refs/heads/master"], a0.as_str(), "{synced}");
    assert!(refs.contains_key("refs/heads/feature"), "{synced}");
    assert_eq!(m.file("index.html").await, "v1");
    let tree = m
        .api
        .get(&format!("/apps/{}/tree?ref=master", m.app_id), &m.alice)
        .await
        .expect(200, None);
    assert!(
        !tree.to_string().contains("old.txt"),
        "the branch is upstream's now: {tree}"
    );

    // Deploy the mirrored commit (each deploy fetches first).
    m.api
        .start_operator_without_node(&m.alice.namespace)
        .await?;
    let deploy = m.deploy(json!({"ref": "master"})).await.expect(200, None);
    let deploy_id = deploy["deploy_id"].as_str().unwrap();
    let log = m
        .api
        .finished_deploy(&m.alice, &m.app_id, &m.prod_id, deploy_id, WITHIN)
        .await?;
    assert_eq!(log["status"], "success", "{log}");
    assert_eq!(log["git_sha"], a0.as_str());

    // A force-push upstream shows after the next sync; a deploy picks up a commit made upstream since.
    let a1 = peer
        .commit("site", "master", &[("index.html", "v2")], true)
        .await?;
    let resynced = m.sync().await;
    assert_eq!(
        resynced["last_sync_refs"]["refs/heads/master"],
        a1.as_str(),
        "{resynced}"
    );
    assert_eq!(m.file("index.html").await, "v2");
    let a2 = peer
        .commit("site", "master", &[("index.html", "v3")], false)
        .await?;
    let deploy = m.deploy(json!({"ref": "master"})).await.expect(200, None);
    let log = m
        .api
        .finished_deploy(
            &m.alice,
            &m.app_id,
            &m.prod_id,
            deploy["deploy_id"].as_str().unwrap(),
            WITHIN,
        )
        .await?;
    assert_eq!(
        log["git_sha"],
        a2.as_str(),
        "the deploy fetched first: {log}"
    );

    // Disconnect: the key is gone, the repository and the deploys stay, commits are taken again.
    m.disconnect().await;
    m.api
        .delete(&m.route(""), &m.alice)
        .await
        .expect(404, Some("not_found"));
    let status = m.status().await;
    assert_eq!(
        status,
        json!({
            "connected": false, "remote_url": null, "public_key": null, "connected_at": null, "last_synced_at": null,
            "last_sync_status": null, "last_sync_error": null, "last_sync_refs": null,
        })
    );
    assert_eq!(m.file("index.html").await, "v3");
    let channel = m.channel().await;
    assert_eq!(channel["current_sha"], a2.as_str());
    m.api
        .commit(&m.alice, &m.app_id, json!({"after.txt": "mine again"}))
        .await;
    ws.git("local", &["pull", "-q", "--rebase", "origin", "master"])
        .await?;
    ws.git("local", &["push", "-q", "origin", "HEAD:master"])
        .await?;
    assert_eq!(m.file("y.txt").await, "y");
    Ok(())
}

#[tokio::test]
async fn a_deploy_whose_fetch_fails_answers_409_with_the_sync_error() -> Result<()> {
    let (peer, m) = peer_and_site().await?;
    m.api
        .commit(&m.alice, &m.app_id, json!({"index.html": "before"}))
        .await;
    // Connected, but the deploy key was never installed upstream.
    m.connect(&peer.url("site")).await.expect(200, None);
    let refused = m.deploy(json!({"ref": "master"})).await;
    let body = refused.expect(409, Some("conflict"));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("refused the deploy key"), "{message}");
    // Nothing was queued, and the failure is the mirror's status too.
    let channel = m.channel().await;
    assert_eq!(channel["pending_deploy"], Value::Null);
    assert_eq!(m.status().await["last_sync_status"], "failed");
    // A server that is down fails the same way, naming the connection.
    peer.stop();
    let refused = m.deploy(json!({"sha": "master"})).await;
    let body = refused.expect(409, Some("conflict"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not connect"),
        "{body}"
    );
    Ok(())
}

#[tokio::test]
async fn the_host_key_is_pinned_on_the_first_sync_and_a_changed_one_is_refused() -> Result<()> {
    let (peer, m) = peer_and_site().await?;
    let key = m.connect(&peer.url("site")).await.expect(200, None)["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    peer.authorize(&key)?;
    let first = peer
        .commit("site", "master", &[("a.txt", "one")], false)
        .await?;
    assert_eq!(m.sync().await["last_sync_status"], "success");

    peer.restart_with_new_host_key().await?;
    peer.commit("site", "master", &[("a.txt", "two")], false)
        .await?;
    // The fingerprints are named.
    let refused = m.failed_sync(&["host key", "changed", "SHA256:"]).await;
    assert_eq!(
        refused["last_sync_refs"]["refs/heads/master"],
        first.as_str(),
        "nothing was fetched"
    );
    assert_eq!(m.file("a.txt").await, "one");

    // Connecting again (a new key) accepts the server as it is now.
    m.disconnect().await;
    let key = m.connect(&peer.url("site")).await.expect(200, None)["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    peer.authorize(&key)?;
    assert_eq!(m.sync().await["last_sync_status"], "success");
    assert_eq!(m.file("a.txt").await, "two");
    Ok(())
}

#[tokio::test]
async fn each_sync_resolves_the_name_once_and_fetches_from_the_address_it_vetted() -> Result<()> {
    let peer = GitPeer::start().await?;
    peer.create_repo("site").await?;
    let dns = TestDns::serve(&[("forge.test", &["127.0.0.1"][..])]).await?;
    let api = TestApi::start()
        .await?
        .with_mirrors(support::mirror_config(Some(dns.addr)));
    let m = Mirrored::new(api, "static").await?;
    let url = peer.url_via("forge.test", "site");
    let key = m.connect(&url).await.expect(200, None)["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        dns.queries("forge.test"),
        (0, 0),
        "connect resolves nothing"
    );
    peer.authorize(&key)?;
    let first = peer
        .commit("site", "master", &[("a.txt", "one")], false)
        .await?;
    let synced = m.sync().await;
    assert_eq!(synced["last_sync_status"], "success", "{synced}");
    assert_eq!(
        synced["last_sync_refs"]["refs/heads/master"],
        first.as_str()
    );
    // One A and one AAAA query: the connection went to the address that was vetted, with no lookup of its own
    // that a rebinding answer could turn elsewhere.
    assert_eq!(dns.queries("forge.test"), (1, 1));

    // The name now points at a private address: the next sync and a deploy's fetch each resolve it afresh and
    // refuse before connecting; nothing is fetched.
    dns.set("forge.test", &["10.0.0.1"])?;
    peer.commit("site", "master", &[("a.txt", "two")], false)
        .await?;
    let refused = m.failed_sync(&["private", "refused to connect"]).await;
    assert_eq!(
        refused["last_sync_refs"]["refs/heads/master"],
        first.as_str()
    );
    assert_eq!(dns.queries("forge.test"), (2, 2));
    let body = m
        .deploy(json!({"ref": "master"}))
        .await
        .expect(409, Some("conflict"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("private"),
        "{body}"
    );
    assert_eq!(dns.queries("forge.test"), (3, 3));
    assert_eq!(m.file("a.txt").await, "one");
    Ok(())
}

#[tokio::test]
async fn the_deploy_key_is_stored_sealed_resealed_on_rotation_and_discarded_on_disconnect()
-> Result<()> {
    use slipway_store::env::crypto::{Keyring, Sealed};
    let m = Mirrored::new(TestApi::start().await?, "static").await?;
    let app: uuid::Uuid = m.app_id.parse()?;
    let url = "ssh://git@127.0.0.1:9/x.git";
    let public = m.connect(url).await.expect(200, None)["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = m.api.state.db().clone();
    let (key_id, bytes) = stored_key(&db, app).await?.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains("openssh-key-v1"),
        "sealed, not plain: {text}"
    );

    // Key rotation re-seals it with the new keyring entry, which alone opens it afterwards.
    let new_line = Keyring::generate_line("next");
    let during = Keyring::parse(&format!("{new_line}\n{}", m.api.keyring_line))?;
    assert_eq!(
        slipway_mirror_fetch::keys::reseal_all(&db, &during).await?,
        1
    );
    assert_eq!(
        slipway_mirror_fetch::keys::reseal_all(&db, &during).await?,
        0
    );
    let (new_id, new_bytes) = stored_key(&db, app).await?.unwrap();
    assert_ne!(new_id, key_id);
    assert_eq!(new_id, "next");
    let opened = slipway_mirror_fetch::keys::open(
        &Keyring::parse(&new_line)?,
        app,
        &Sealed {
            key_id: new_id,
            bytes: new_bytes,
        },
    )?;
    assert_eq!(opened.public_key().to_openssh()?, public);

    // Disconnecting discards the key; connecting again makes a new one.
    m.disconnect().await;
    assert!(stored_key(&db, app).await?.is_none(), "the key is gone");
    let again = m.connect(url).await.expect(200, None);
    assert_ne!(again["public_key"], public.as_str());
    Ok(())
}

#[tokio::test]
async fn connect_takes_ssh_urls_only_and_checks_the_state() -> Result<()> {
    let m = Mirrored::new(TestApi::start().await?, "static").await?;
    for bad in [
        "https://github.com/acme/site.git",
        "file:///etc",
        "ext::sh -c id",
        "ssh://-oProxyCommand=id/x",
        "/srv/git/site.git",
        "",
    ] {
        let reply = m.connect(bad).await;
        assert_eq!(reply.status, 400, "{bad:?}: {}", reply.body);
        assert_eq!(reply.body["error"]["code"], "bad_request");
    }
    // An address literal no sync could reach is refused at once.
    for literal in [
        "ssh://git@169.254.169.254/x",
        "git@[fd00::1]:x",
        "ssh://git@10.0.0.1/x",
    ] {
        let reply = m.connect(literal).await;
        assert_eq!(reply.status, 400, "{literal}: {}", reply.body);
    }
    assert_eq!(
        m.status().await["connected"],
        false,
        "nothing was connected"
    );
    m.api
        .post(&m.route("/sync"), &m.alice, json!({}))
        .await
        .expect(404, Some("not_found"));
    m.api
        .delete(&m.route(""), &m.alice)
        .await
        .expect(404, Some("not_found"));

    // An agent credential is refused the protected actions until agent access is on.
    let agent = m
        .api
        .token(
            m.alice.id,
            &slipway_auth::scopes::default_scopes(),
            true,
            None,
        )
        .await?;
    let url = "ssh://git@127.0.0.1:9/x.git";
    m.api
        .call(
            axum::http::Method::POST,
            &m.route("/connect"),
            Some(&agent),
            Some(json!({"remote_url": url})),
        )
        .await
        .expect(403, Some("protected_action"));
    m.connect(url).await.expect(200, None);
    m.api
        .call(axum::http::Method::DELETE, &m.route(""), Some(&agent), None)
        .await
        .expect(403, Some("protected_action"));
    // A sync is not protected: the agent may run it (and here it finds nothing listening).
    let synced = m
        .api
        .call(
            axum::http::Method::POST,
            &m.route("/sync"),
            Some(&agent),
            None,
        )
        .await
        .expect(200, None);
    assert!(
        synced["last_sync_error"]
            .as_str()
            .unwrap()
            .contains("could not connect"),
        "{synced}"
    );
    Ok(())
}

/// The addresses a sync must not reach, each behind a name of the test zone, with the words its refusal uses.
const REFUSED: &[(&str, &[&str], &str)] = &[
    ("loopback.test", &["127.0.0.2"], "loopback"),
    ("private10.test", &["10.1.2.3"], "private"),
    ("private172.test", &["172.20.0.5"], "private"),
    ("private192.test", &["192.168.1.10"], "private"),
    ("metadata.test", &["169.254.169.254"], "link-local"),
    ("cgnat.test", &["100.64.12.1"], "CGNAT"),
    ("multicast.test", &["224.0.0.251"], "multicast"),
    ("broadcast.test", &["255.255.255.255"], "broadcast"),
    ("unspecified.test", &["0.0.0.0"], "unspecified"),
    ("loopback6.test", &["::1"], "loopback"),
    ("ula.test", &["fd12:3456:789a::1"], "unique-local"),
    ("linklocal6.test", &["fe80::1"], "link-local"),
    ("multicast6.test", &["ff02::1"], "multicast"),
    ("mapped.test", &["::ffff:169.254.169.254"], "link-local"),
    ("mapped-private.test", &["::ffff:10.0.0.1"], "private"),
    ("nat64.test", &["64:ff9b::a00:1"], "NAT64"),
    ("sixtofour.test", &["2002:a00:1::1"], "6to4"),
    (
        "teredo.test",
        &["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
        "Teredo",
    ),
    // One public and one private address: refused as a whole, before any connection.
    ("mixed.test", &["140.82.112.3", "10.0.0.7"], "private"),
    (
        "mixed6.test",
        &["2606:4700::1111", "fd00::7"],
        "unique-local",
    ),
];

#[tokio::test]
async fn every_address_class_a_mirror_must_not_reach_is_refused_before_connecting() -> Result<()> {
    // The cluster's own networks: the test control plane's Service range, and a node (made for this test) whose
    // address and pod range look public.
    let kube = slipway_testkit::client().await?;
    let node = FakeNode::create(&kube, "93.184.216.99", "93.185.7.0/24").await?;
    let mut zone: Vec<(&str, &[&str])> = REFUSED.iter().map(|(n, a, _)| (*n, *a)).collect();
    zone.extend([
        ("service.test", &["10.96.0.1"][..]),
        ("node.test", &["93.184.216.99"][..]),
        ("pod.test", &["93.185.7.20"][..]),
        ("forge.test", &["127.0.0.1"][..]),
    ]);
    let dns = TestDns::serve(&zone).await?;
    let api = TestApi::start()
        .await?
        .with_mirrors(support::mirror_config(Some(dns.addr)));
    let m = Mirrored::new(api, "static").await?;
    let cases = REFUSED.iter().map(|(name, _, why)| (*name, *why)).chain([
        ("service.test", "Service range"),
        ("node.test", "node addresses"),
        ("pod.test", "pod range"),
        ("nowhere.test", "cannot resolve"),
    ]);
    for (name, why) in cases {
        m.connect(&format!("ssh://git@{name}:22/repo.git"))
            .await
            .expect(200, None);
        let status = m.sync().await;
        assert_eq!(status["last_sync_status"], "failed", "{name}: {status}");
        let error = status["last_sync_error"].as_str().unwrap();
        assert!(error.contains(why), "{name}: {error}");
        if why != "cannot resolve" {
            assert!(error.contains("refused to connect"), "{name}: {error}");
        }
        m.disconnect().await;
    }
    // The allowlist opens loopback for the tests' own server: a name that resolves there is tried (and finds
    // nothing listening on port 9).
    m.connect("ssh://git@forge.test:9/repo.git")
        .await
        .expect(200, None);
    let status = m.sync().await;
    assert!(
        status["last_sync_error"]
            .as_str()
            .unwrap()
            .contains("could not connect"),
        "{status}"
    );
    node.delete(&kube).await?;
    Ok(())
}

/// The sealed deploy key of `app` as the database holds it (keyring entry, bytes), if one is connected.
async fn stored_key(db: &sqlx::PgPool, app: uuid::Uuid) -> Result<Option<(String, Vec<u8>)>> {
    Ok(
        sqlx::query_as("SELECT private_key_id, private_key FROM git_mirrors WHERE app_id = $1")
            .bind(app)
            .fetch_optional(db)
            .await?,
    )
}

/// A Node object with one address and one pod range (unschedulable: nothing runs there).
struct FakeNode(String);

impl FakeNode {
    async fn create(kube: &kube::Client, address: &str, pod_cidr: &str) -> Result<Self> {
        use k8s_openapi::api::core::v1::Node;
        use kube::api::{Patch, PatchParams, PostParams};
        let name = format!(
            "mirror-test-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let nodes: kube::Api<Node> = kube::Api::all(kube.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr], "unschedulable": true,
                     "taints": [{"key": "slipway.dev/test", "effect": "NoSchedule"}]},
        }))?;
        nodes.create(&PostParams::default(), &node).await?;
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"addresses": [{"type": "InternalIP", "address": address}]}}),
                ),
            )
            .await?;
        Ok(Self(name))
    }

    async fn delete(self, kube: &kube::Client) -> Result<()> {
        use k8s_openapi::api::core::v1::Node;
        kube::Api::<Node>::all(kube.clone())
            .delete(&self.0, &Default::default())
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_sync_waits_behind_the_apps_running_one_and_finishes_without_its_caller() -> Result<()> {
    use tower::ServiceExt;
    let (peer, m) = peer_and_site().await?;
    // Connected, the deploy key not installed upstream: a sync fails quickly, and says so on the mirror's row.
    m.connect(&peer.url("site")).await.expect(200, None);
    let db = m.api.state.db().clone();
    let app: uuid::Uuid = m.app_id.parse()?;
    // A sync of the app that another replica runs: its lease holds for an hour, so no runner here takes it.
    let elsewhere: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO jobs (id, kind, scope, app_id, params, state, runner, attempts, max_attempts, lease_until, \
         started_at) VALUES (gen_random_uuid(), 'mirror_sync', $1, $2, 'null', 'running', 'elsewhere', 1, 2, \
         now() + interval '1 hour', now()) RETURNING id",
    )
    .bind(format!("mirror:{app}"))
    .bind(app)
    .fetch_one(&db)
    .await?;
    let caller = {
        let (router, token) = (m.api.router.clone(), m.alice.token.clone());
        let path = m.route("/sync");
        tokio::spawn(async move {
            let req = axum::http::Request::post(path)
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{}"))
                .unwrap();
            router.oneshot(req).await
        })
    };
    let queued = async {
        loop {
            let id: Option<uuid::Uuid> = sqlx::query_scalar(
                "SELECT id FROM jobs WHERE kind = 'mirror_sync' AND app_id = $1 AND state = 'queued'",
            )
            .bind(app)
            .fetch_optional(&db)
            .await
            .unwrap();
            if let Some(id) = id {
                return id;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let queued = tokio::time::timeout(WITHIN, queued).await?;
    // Behind the running sync it waits; its caller goes away meanwhile.
    assert_eq!(m.status().await["last_sync_status"], Value::Null);
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    sqlx::query(
        "UPDATE jobs SET state = 'succeeded', finished_at = now(), runner = NULL WHERE id = $1",
    )
    .bind(elsewhere)
    .execute(&db)
    .await?;
    // The queued sync runs once the other has ended, and records its outcome though nobody waits for it.
    let recorded = async {
        loop {
            let status = m.status().await;
            if status["last_sync_status"] != Value::Null {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let status = tokio::time::timeout(WITHIN, recorded).await?;
    assert_eq!(status["last_sync_status"], "failed", "{status}");
    // The outcome is on the mirror's row a moment before the runner closes the job: wait for the job to end.
    let ended = async {
        loop {
            let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                .bind(queued)
                .fetch_one(&db)
                .await
                .unwrap();
            if state != "queued" && state != "running" {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let state = tokio::time::timeout(WITHIN, ended).await?;
    assert_eq!(
        state, "succeeded",
        "a failed fetch is the sync's outcome, not a failed job"
    );
    Ok(())
}

/// Bytes of the large repository's content: incompressible, in files of 10 MiB over four commits.
const LARGE_REPOSITORY: usize = 200 << 20;

#[tokio::test]
async fn a_repository_of_two_hundred_megabytes_mirrors_and_clones_back_whole() -> Result<()> {
    let peer = GitPeer::start().await?;
    peer.create_repo("site").await?;
    // The platform's own limit on a sync (10 minutes), not the tests' minute: 200 MiB over SSH beside the rest of
    // the tier took 61 s.
    let api = TestApi::start()
        .await?
        .with_mirrors(slipway_mirror_fetch::MirrorConfig {
            timeout: slipway_mirror_fetch::MirrorConfig::DEFAULT_TIMEOUT,
            ..support::mirror_config(None)
        });
    let m = Mirrored::new(api, "static").await?;
    let connected = m.connect(&peer.url("site")).await.expect(200, None);
    peer.authorize(connected["public_key"].as_str().unwrap())?;
    // The content is pushed to the peer's repository by path: random bytes, which no delta or zlib shrinks.
    // Random blobs gain nothing from delta search, which costs minutes on 10 MiB blobs: above
    // core.bigFileThreshold git stores and sends them whole, here and in the peer's upload-pack.
    let upstream = support::git::Workspace::new()?;
    upstream
        .git(".", &["init", "-q", "--initial-branch=master", "big"])
        .await?;
    upstream
        .git("big", &["config", "core.bigFileThreshold", "1m"])
        .await?;
    upstream
        .git(
            ".",
            &[
                "--git-dir",
                peer.repo_path("site").to_str().unwrap(),
                "config",
                "core.bigFileThreshold",
                "1m",
            ],
        )
        .await?;
    let file = 10 << 20;
    let per_commit = LARGE_REPOSITORY / file / 4;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for commit in 0..4 {
        for n in 0..per_commit {
            let mut bytes = vec![0u8; file];
            for chunk in bytes.chunks_mut(8) {
                // xorshift64: fast, and nothing compresses it.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
            }
            upstream.write(&format!("big/data/{commit}-{n}.bin"), bytes)?;
        }
        upstream.git("big", &["add", "-A"]).await?;
        upstream
            .git("big", &["commit", "-q", "-m", &format!("part {commit}")])
            .await?;
    }
    let head = upstream.git("big", &["rev-parse", "HEAD"]).await?;
    let head = head.trim();
    upstream
        .git(
            "big",
            &[
                "push",
                "-q",
                peer.repo_path("site").to_str().unwrap(),
                "HEAD:master",
            ],
        )
        .await?;

    // The sync fetches all of it as a job; the route waits for it, however long it takes.
    let started = std::time::Instant::now();
    let synced = m.sync().await;
    println!(
        "synced {} MiB in {:.1} s",
        LARGE_REPOSITORY >> 20,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(synced["last_sync_status"], "success", "{synced}");
    assert_eq!(
        synced["last_sync_refs"]["refs/heads/master"], head,
        "{synced}"
    );

    // A clone over HTTP brings back the same commit and the same bytes.
    let base = m.api.serve().await?;
    let remote = http_remote(&base, &m.alice.token, &m.alice.username, "site");
    let ws = support::git::Workspace::new()?;
    // 200 MiB served while the tier's other tests run: allowed as long as the sync (its limit is the platform's).
    ws.git_within(
        ".",
        &["clone", "-q", &remote, "back"],
        slipway_mirror_fetch::MirrorConfig::DEFAULT_TIMEOUT.max(support::git::GIT_LIMIT),
    )
    .await?;
    assert_eq!(ws.git("back", &["rev-parse", "HEAD"]).await?.trim(), head);
    let packed_kib = ws.object_counts(&ws.path("back/.git")).await?.pack_kib;
    assert!(
        packed_kib << 10 >= LARGE_REPOSITORY,
        "the clone's pack holds {packed_kib} KiB"
    );
    for commit in 0..4 {
        for n in 0..per_commit {
            let path = format!("data/{commit}-{n}.bin");
            assert!(
                ws.read(&format!("back/{path}"))? == upstream.read(&format!("big/{path}"))?,
                "{path} came back changed"
            );
        }
    }
    Ok(())
}
