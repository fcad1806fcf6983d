//! Repositories kept in object storage (`--git-storage object-store`) served by two API replicas on one platform
//! database and one real versitygw, each with a cache of its own: what one replica writes (push, force-push, ref
//! deletion, changeset) the other serves at once, a cache deleted under a replica comes back from the bucket, of
//! two pushes racing through the two replicas exactly one wins every round, and a deleted app leaves no pack behind.
//! A mirror's sync publishes the external repository as it is (rewrites and deletions included). A repository a
//! volume kept is imported whole, and importing it again changes nothing. A push git would refuse publishes
//! nothing, a sync on the pushing replica never trips a push, and maintenance folds the packs once cluster-wide
//! and removes every copy no row names, and the objects of repositories that are gone. A push's received packs are
//! published as they are, and each stands alone; a large one goes up in chunks while git receives it, stored as git
//! finished it. With object storage down, what needs it answers 503 and moves no ref.

use crate::support;

use anyhow::{Context as _, Result};
use axum::http::Method;
use serde_json::json;
use slipway_git_store::Repos;
use slipway_git_store::bucket::PackBucket;
use slipway_store::db::git_refs;
use slipway_testkit::s3::TestS3;
use support::TestApi;
use support::git::{Workspace, http_remote};

/// The bucket the tests keep packs in.
const BUCKET: &str = "slipway-git";

/// Repositories in the bucket of `s3`, with this replica's cache at `cache`.
async fn in_objects(
    state: &slipway_core::state::AppState,
    s3: &TestS3,
    cache: &std::path::Path,
) -> Result<Repos> {
    Repos::in_object_store(
        cache,
        state.db().clone(),
        &support::s3_calls::root(s3),
        BUCKET,
        std::path::Path::new(env!("CARGO_BIN_EXE_slipway")),
    )
    .await
}

/// The test's API as replica A and another process on its database as replica B, both keeping repositories in
/// the bucket; B's router and cache directory.
struct Replicas {
    a: TestApi,
    a_cache: std::path::PathBuf,
    b: axum::Router,
    b_cache: std::path::PathBuf,
    a_url: String,
    b_url: String,
    s3: TestS3,
}

impl Replicas {
    async fn start() -> Result<Self> {
        let s3 = TestS3::start().await?;
        let api = TestApi::start().await?;
        let a_cache = api.repos_dir.join("cache-a");
        let b_cache = api.repos_dir.join("cache-b");
        let repos = in_objects(&api.state, &s3, &a_cache).await?;
        let a = api.with_repos(repos);
        let b_state = a.replica_state().await?;
        let b_repos = in_objects(&b_state, &s3, &b_cache).await?;
        let b = slipway_api::routes::public(b_state.with_repos(b_repos));
        let a_url = a.serve().await?;
        let b_url = support::serve_router(b.clone()).await?;
        Ok(Self {
            a,
            a_cache,
            b,
            b_cache,
            a_url,
            b_url,
            s3,
        })
    }

    /// Alice, her new static app `name` with its uid, and its remote through A and through B.
    async fn app(&self, name: &str) -> Result<(support::User, uuid::Uuid, [String; 2])> {
        let alice = self.a.user("alice", "basic").await?;
        let app = self.a.create_app(&alice, name, "static").await;
        let id = app["id"].as_str().unwrap_or_default().parse()?;
        let via = [&self.a_url, &self.b_url]
            .map(|url| http_remote(url, &alice.token, &alice.username, name));
        Ok((alice, id, via))
    }

    /// Deletes B's cache and clones `via_b` into `cold`, which must hold the head of `w`, whole.
    async fn clone_cold(&self, ws: &Workspace, via_b: &str) -> Result<()> {
        std::fs::remove_dir_all(&self.b_cache)?;
        ws.git(".", &["clone", "-q", via_b, "cold"]).await?;
        assert_eq!(
            ws.git("cold", &["rev-parse", "HEAD"]).await?,
            ws.git("w", &["rev-parse", "HEAD"]).await?
        );
        ws.git("cold", &["fsck", "--strict", "--no-dangling"])
            .await?;
        Ok(())
    }

    fn bucket_files(&self) -> Result<usize> {
        let dir = self.s3.bucket_dir(BUCKET).join("repos");
        if !dir.exists() {
            return Ok(0);
        }
        let mut count = 0;
        for repo in std::fs::read_dir(dir)? {
            count += std::fs::read_dir(repo?.path())?.count();
        }
        Ok(count)
    }
}

/// A workspace with an empty work tree `w` on `master`, where the tests commit what they push.
async fn work_tree() -> Result<Workspace> {
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "w"]).await?;
    Ok(ws)
}

async fn tree_sha(router: &axum::Router, app: &str, token: &str, reference: &str) -> String {
    let reply = support::call_on(
        router,
        Method::GET,
        &format!("/apps/{app}/tree?ref={reference}"),
        Some(token),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["sha"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_serves_what_another_wrote() -> Result<()> {
    let r = Replicas::start().await?;
    let alice = r.a.user("alice", "basic").await?;
    let app = r.a.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap().to_owned();
    let via_a = http_remote(&r.a_url, &alice.token, &alice.username, "site");
    let via_b = http_remote(&r.b_url, &alice.token, &alice.username, "site");
    let ws = Workspace::new()?;

    // An empty repository clones through B; a push through A is what B clones and reads next.
    ws.git(".", &["clone", "-q", &via_b, "one"]).await?;
    ws.write("one/index.html", "<h1>one</h1>\n")?;
    ws.git("one", &["add", "."]).await?;
    ws.git("one", &["commit", "-qm", "one"]).await?;
    ws.git("one", &["push", "-q", &via_a, "HEAD:master"])
        .await?;
    let pushed = ws.git("one", &["rev-parse", "HEAD"]).await?;
    ws.git(".", &["clone", "-q", &via_b, "two"]).await?;
    assert_eq!(ws.git("two", &["rev-parse", "HEAD"]).await?, pushed);
    assert_eq!(
        tree_sha(&r.b, &id, &alice.token, "master").await,
        pushed.trim()
    );

    // A changeset through B lands on the pushed commit, and a fetch through A brings it.
    let reply = support::call_on(
        &r.b,
        Method::POST,
        &format!("/apps/{id}/changeset"),
        Some(&alice.token),
        Some(json!({"message": "from b", "changes": {"b.txt": "b\n"}})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let changeset = reply.body["sha"].as_str().unwrap().to_owned();
    ws.git("one", &["pull", "-q", &via_a, "master"]).await?;
    assert_eq!(
        ws.git("one", &["rev-parse", "HEAD"]).await?.trim(),
        changeset
    );
    assert_eq!(ws.git("one", &["rev-parse", "HEAD^"]).await?, pushed);

    // A stale push through A is refused as git refuses one; a force-push through B replaces the branch, and A
    // serves the replacement.
    ws.write("two/index.html", "<h1>two</h1>\n")?;
    ws.git("two", &["commit", "-qam", "two"]).await?;
    let stale = ws.try_git("two", &["push", &via_a, "HEAD:master"]).await?;
    assert!(!stale.ok, "a push behind the branch was accepted");
    assert!(stale.stderr.contains("[rejected]"), "{}", stale.stderr);
    ws.git("two", &["push", "-q", "--force", &via_b, "HEAD:master"])
        .await?;
    let forced = ws.git("two", &["rev-parse", "HEAD"]).await?;
    assert_eq!(
        tree_sha(&r.a.router, &id, &alice.token, "master").await,
        forced.trim()
    );

    // A branch made through B and deleted through A is gone from both.
    ws.git("two", &["push", "-q", &via_b, "HEAD:refs/heads/feature"])
        .await?;
    let listed = ws.git("two", &["ls-remote", &via_a]).await?;
    assert!(listed.contains("refs/heads/feature"), "{listed}");
    ws.git("two", &["push", "-q", &via_a, ":refs/heads/feature"])
        .await?;
    let listed = ws.git("two", &["ls-remote", &via_b]).await?;
    assert!(!listed.contains("refs/heads/feature"), "{listed}");

    // B's cache deleted whole: the next clone through B comes from the bucket, complete.
    std::fs::remove_dir_all(&r.b_cache)?;
    ws.git(".", &["clone", "-q", &via_b, "cold"]).await?;
    assert_eq!(ws.git("cold", &["rev-parse", "HEAD"]).await?, forced);
    ws.git("cold", &["fsck", "--strict", "--no-dangling"])
        .await?;

    // The database logged every ref update with who made it.
    let app_id: uuid::Uuid = id.parse()?;
    let log = git_refs::log(r.a.state.db(), app_id).await?;
    let moves: Vec<(&str, Option<&str>, &str)> = log
        .iter()
        .map(|l| (l.name.as_str(), l.new.as_deref(), l.actor.as_str()))
        .collect();
    assert_eq!(
        moves,
        vec![
            (
                "refs/heads/master",
                Some(pushed.trim()),
                alice.username.as_str()
            ),
            (
                "refs/heads/master",
                Some(changeset.as_str()),
                alice.username.as_str()
            ),
            (
                "refs/heads/master",
                Some(forced.trim()),
                alice.username.as_str()
            ),
            (
                "refs/heads/feature",
                Some(forced.trim()),
                alice.username.as_str()
            ),
            ("refs/heads/feature", None, alice.username.as_str()),
        ]
    );

    // Deleting the app forgets the repository and its packs.
    assert!(r.bucket_files()? > 0);
    r.a.delete(&format!("/apps/{id}"), &alice)
        .await
        .expect(204, None);
    assert_eq!(git_refs::version(r.a.state.db(), app_id).await?, None);
    assert_eq!(r.bucket_files()?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_racing_through_two_replicas_have_one_winner_every_round() -> Result<()> {
    const ROUNDS: usize = 50;
    let r = Replicas::start().await?;
    let (_, app_id, via) = r.app("race").await?;
    let ws = std::sync::Arc::new(Workspace::new()?);
    ws.git(".", &["init", "-q", "-b", "master", "w0"]).await?;
    ws.write("w0/base.txt", "base\n")?;
    ws.git("w0", &["add", "."]).await?;
    ws.git("w0", &["commit", "-qm", "base"]).await?;
    ws.git("w0", &["push", "-q", &via[0], "HEAD:master"])
        .await?;
    ws.git(".", &["clone", "-q", &via[1], "w1"]).await?;

    let (winners, at_server) =
        support::git::race_rounds(&ws, ["w0", "w1"], &via, &via, ROUNDS).await?;

    // The log holds the base and then exactly the winners, each moving the branch from the one before: no update
    // was lost or made twice.
    let log = git_refs::log(r.a.state.db(), app_id).await?;
    let news: Vec<String> = log.iter().filter_map(|l| l.new.clone()).collect();
    assert_eq!(news[1..], winners[..]);
    for pair in log.windows(2) {
        assert_eq!(pair[1].old, pair[0].new, "{pair:?}");
    }
    ws.git(".", &["clone", "-q", &via[1], "last"]).await?;
    assert_eq!(
        ws.git("last", &["rev-parse", "HEAD"]).await?.trim(),
        winners.last().unwrap()
    );
    ws.git("last", &["fsck", "--strict", "--no-dangling"])
        .await?;
    println!(
        "pushes raced through two replicas: {ROUNDS} rounds ({at_server} declined by the server), one winner each"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_s_repository_imports_whole_and_importing_again_changes_nothing() -> Result<()> {
    // A repository made the volume way: branches, a tag, HEAD on another branch than master.
    let s3 = TestS3::start().await?;
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "blog", "static").await;
    let app_id: uuid::Uuid = app["id"].as_str().unwrap().parse()?;
    let url = api.serve().await?;
    let remote = http_remote(&url, &alice.token, &alice.username, "blog");
    let ws = Workspace::new()?;
    support::git::push_refs_of_three_kinds(&ws, "w", &remote).await?;
    let volume = api.repos_dir.join(&alice.username).join("blog.git");
    let git_volume = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&volume)
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    git_volume(&["symbolic-ref", "HEAD", "refs/heads/old"]);
    let refs_before = git_volume(&["for-each-ref", "--format=%(objectname) %(refname)"]);

    let repos = in_objects(&api.state, &s3, &api.repos_dir.join("cache")).await?;
    let api = api.with_repos(repos);
    let (owner, name) = (alice.username.parse()?, "blog".parse()?);
    let repo = slipway_git_store::RepoOf {
        id: app_id,
        owner: &owner,
        name: &name,
    };
    let first = slipway_git_store::import::import(api.state.repos(), repo, &volume).await?;
    assert_eq!(first.refs, 3);
    let again = slipway_git_store::import::import(api.state.repos(), repo, &volume).await?;
    assert_eq!(again, first, "a second import moved the repository");

    // Served from object storage, cold: the same refs, HEAD on `old`, and a whole history.
    api.state.repos().forget_cache(app_id).await?;
    let listed = ws.git(".", &["ls-remote", &remote]).await?;
    for line in refs_before.lines() {
        let (oid, name) = line.split_once(' ').unwrap();
        assert!(
            listed.contains(&format!("{oid}\t{name}")),
            "{name} missing: {listed}"
        );
    }
    ws.git(".", &["clone", "-q", &remote, "copy"]).await?;
    assert_eq!(
        ws.git("copy", &["rev-parse", "--abbrev-ref", "HEAD"])
            .await?
            .trim(),
        "old"
    );
    ws.git("copy", &["fsck", "--strict", "--no-dangling"])
        .await?;

    // An existing clone fetches and pushes on without cloning again.
    ws.write("w/after.txt", "after\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "after the import"]).await?;
    ws.git("w", &["push", "-q", &remote, "HEAD:master"]).await?;
    assert_eq!(
        tree_sha(&api.router, &app_id.to_string(), &alice.token, "master").await,
        ws.git("w", &["rev-parse", "HEAD"]).await?.trim()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_sync_publishes_the_external_repository_as_it_is() -> Result<()> {
    let s3 = TestS3::start().await?;
    let api = TestApi::start().await?;
    let repos = in_objects(&api.state, &s3, &api.repos_dir.join("cache")).await?;
    let api = api.with_repos(repos);
    let peer = support::git_peer::GitPeer::start().await?;
    peer.create_repo("site").await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap().to_owned();
    let app_id: uuid::Uuid = id.parse()?;
    // History of the app's own, which the mirror replaces.
    api.commit(&alice, &id, json!({"old.txt": "mine"})).await;
    let connected = api
        .post(
            &format!("/apps/{id}/github/connect"),
            &alice,
            json!({"remote_url": peer.url("site")}),
        )
        .await
        .expect(200, None);
    peer.authorize(connected["public_key"].as_str().unwrap())?;
    let sync = || async {
        let status = api
            .post(&format!("/apps/{id}/github/sync"), &alice, json!({}))
            .await
            .expect(200, None);
        assert_eq!(status["last_sync_status"], "success", "{status}");
        status
    };

    // Every branch of the peer, its master over the app's own, whatever the app's master was.
    let a0 = peer
        .commit("site", "master", &[("index.html", "v1")], false)
        .await?;
    peer.commit("site", "feature", &[("f.txt", "f")], false)
        .await?;
    sync().await;
    assert_eq!(tree_sha(&api.router, &id, &alice.token, "master").await, a0);
    tree_sha(&api.router, &id, &alice.token, "feature").await;

    // A rewrite upstream and a branch deleted there: the next sync follows both.
    let a1 = peer
        .commit("site", "master", &[("index.html", "v2")], true)
        .await?;
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(peer.repo_path("site"))
        .args(["branch", "-D", "feature"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sync().await;
    assert_eq!(tree_sha(&api.router, &id, &alice.token, "master").await, a1);
    let gone = api
        .get(&format!("/apps/{id}/tree?ref=feature"), &alice)
        .await;
    assert_eq!(gone.status, 404, "{}", gone.body);

    // Published as the mirror's: the log names it for every move after the app's own commit.
    let log = git_refs::log(api.state.db(), app_id).await?;
    assert_eq!(log[0].actor, alice.username);
    assert!(log[1..].iter().all(|l| l.actor == "mirror"), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.name == "refs/heads/feature" && l.new.is_none()),
        "{log:?}"
    );
    Ok(())
}

/// The names of the refs `remote` lists.
async fn listed_refs(ws: &Workspace, remote: &str) -> Result<Vec<String>> {
    Ok(ws
        .git(".", &["ls-remote", "--refs", remote])
        .await?
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(_, name)| name.to_owned()))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_git_would_refuse_publishes_nothing() -> Result<()> {
    let r = Replicas::start().await?;
    let (_, app_id, [via_a, via_b]) = r.app("rules").await?;
    let ws = work_tree().await?;
    ws.write("w/a.txt", "a\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "a"]).await?;
    ws.git(
        "w",
        &["push", "-q", &via_a, "HEAD:master", "HEAD:refs/heads/x"],
    )
    .await?;
    let logged = git_refs::log(r.a.state.db(), app_id).await?.len();
    let files = r.bucket_files()?;

    // The branch HEAD names cannot be deleted, as git refuses it.
    let refused = ws
        .try_git("w", &["push", &via_b, "--delete", "master"])
        .await?;
    assert!(!refused.ok, "the current branch was deleted");
    assert!(
        refused
            .stderr
            .contains("refusing to delete the current branch"),
        "{}",
        refused.stderr
    );

    // A ref that would be a directory of another, or have one as its directory: git could write neither, so
    // neither is published, and nothing else of the same push is.
    ws.write("w/b.txt", "b\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "b"]).await?;
    for clash in [
        vec!["HEAD:refs/heads/x/y"],
        vec!["HEAD:refs/heads/fine", "HEAD:refs/heads/master/z"],
    ] {
        let mut args = vec!["push", via_a.as_str()];
        args.extend(clash.iter().copied());
        let refused = ws.try_git("w", &args).await?;
        assert!(!refused.ok, "{clash:?} was accepted");
        assert!(
            refused
                .stderr
                .contains("cannot be both a file and a directory"),
            "{}",
            refused.stderr
        );
    }
    assert_eq!(
        listed_refs(&ws, &via_b).await?,
        ["refs/heads/master", "refs/heads/x"]
    );
    assert_eq!(git_refs::log(r.a.state.db(), app_id).await?.len(), logged);
    // Refused before anything was packed: the new commit left no copy in the bucket.
    assert_eq!(r.bucket_files()?, files);

    // Deleting `x` and creating `x/y` in one transaction git cannot do either; in two pushes through A it is fine,
    // and B, whose cache has `x`, serves `x/y` after it.
    let refused = ws
        .try_git(
            "w",
            &[
                "push",
                "--atomic",
                &via_a,
                ":refs/heads/x",
                "HEAD:refs/heads/x/y",
            ],
        )
        .await?;
    assert!(!refused.ok, "x was replaced by x/y in one transaction");
    assert!(
        refused
            .stderr
            .contains("cannot be both a file and a directory"),
        "{}",
        refused.stderr
    );
    ws.git("w", &["push", "-q", &via_a, ":refs/heads/x"])
        .await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:refs/heads/x/y"])
        .await?;
    assert_eq!(
        listed_refs(&ws, &via_b).await?,
        ["refs/heads/master", "refs/heads/x/y"]
    );

    // Both replicas go on serving and taking pushes.
    ws.git("w", &["push", "-q", &via_b, "HEAD:master"]).await?;
    ws.git(".", &["clone", "-q", &via_a, "copy"]).await?;
    assert_eq!(
        ws.git("copy", &["rev-parse", "HEAD"]).await?,
        ws.git("w", &["rev-parse", "HEAD"]).await?
    );
    ws.git("copy", &["fsck", "--strict", "--no-dangling"])
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_are_never_refused_by_a_sync_on_their_own_replica() -> Result<()> {
    const ROUNDS: usize = 5;
    const BRANCHES: usize = 300;
    let r = Replicas::start().await?;
    let (alice, app_id, [via_a, _]) = r.app("busy").await?;
    let ws = work_tree().await?;

    // While every push goes through A, a reader on A syncs its cache as fast as it can: each push's own publish
    // moves the version, so a sync runs beside every push. Without the cache's lock the sync reaches refs
    // receive-pack has yet to write, and one of the two fails (`cannot lock ref ...: reference already exists`).
    let (owner, name): (slipway_crds::names::Username, slipway_crds::names::AppName) =
        (alice.username.parse()?, "busy".parse()?);
    let state = r.a.state.clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut syncs = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let repo = slipway_git_store::RepoOf {
                    id: app_id,
                    owner: &owner,
                    name: &name,
                };
                state.repos().ready(repo).await?;
                syncs += 1;
            }
            anyhow::Ok(syncs)
        })
    };
    // A push of new objects, and one of many branches at a commit the repository has: that one uploads nothing,
    // so a sync after its publish has nothing to download, while receive-pack still writes one ref after another.
    for round in 0..ROUNDS {
        ws.write("w/n.txt", format!("{round}\n"))?;
        ws.git("w", &["add", "."]).await?;
        ws.git("w", &["commit", "-qm", &format!("round {round}")])
            .await?;
        let pushed = ws.try_git("w", &["push", &via_a, "HEAD:master"]).await?;
        assert!(pushed.ok, "round {round}: {}", pushed.stderr);
        let branches: Vec<String> = (0..BRANCHES)
            .map(|b| format!("HEAD:refs/heads/r{round}/b{b}"))
            .collect();
        let mut args = vec!["push", via_a.as_str()];
        args.extend(branches.iter().map(String::as_str));
        let pushed = ws.try_git("w", &args).await?;
        assert!(
            pushed.ok,
            "round {round}, {BRANCHES} branches: {}",
            pushed.stderr
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let syncs = reader.await??;
    assert_eq!(
        git_refs::log(r.a.state.db(), app_id).await?.len(),
        ROUNDS * (1 + BRANCHES)
    );
    println!(
        "{} pushes beside {syncs} reads of the same replica's cache, none refused",
        2 * ROUNDS
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_folds_the_packs_once_and_removes_what_no_row_names() -> Result<()> {
    use slipway_git_store::maintain::{Maintained, Policy};
    const PUSHES: usize = 10;
    let r = Replicas::start().await?;
    let (alice, app_id, [via_a, via_b]) = r.app("packs").await?;
    let ws = work_tree().await?;
    for push in 0..PUSHES {
        ws.write(&format!("w/{push}.txt"), format!("{push}\n"))?;
        ws.git("w", &["add", "."]).await?;
        ws.git("w", &["commit", "-qm", &format!("push {push}")])
            .await?;
        ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    }
    // B's cache holds the ten packs.
    ws.git(".", &["clone", "-q", &via_b, "warm"]).await?;
    let db = r.a.state.db();
    let repo_id = git_refs::id(db, app_id).await?.expect("a repository");
    let live = |db| async move {
        anyhow::Ok(
            git_refs::snapshot(db, app_id)
                .await?
                .expect("a repository")
                .packs,
        )
    };
    assert_eq!(live(db).await?.len(), PUSHES);

    // A copy no row names, as an update refused after its upload leaves.
    for extension in ["pack", "idx"] {
        ws.write(&format!("junk/pack-junk.{extension}"), "junk")?;
    }
    let bucket = PackBucket::open(&support::s3_calls::root(&r.s3), BUCKET).await?;
    bucket
        .upload(repo_id, &ws.path("junk"), "pack-junk")
        .await?;
    // And the chunks a replica killed while git received a push had sent ahead: a stream no row names.
    let stream = uuid::Uuid::new_v4();
    ws.write("junk/chunk", "chunk")?;
    for n in [1, 2] {
        bucket
            .put_file(
                &PackBucket::chunk_key(repo_id, stream, n),
                &ws.path("junk/chunk"),
            )
            .await?;
    }
    assert_eq!(r.bucket_files()?, 2 * PUSHES + 4);

    let now = Policy {
        every: std::time::Duration::ZERO,
        compact_at: 2,
        grace: std::time::Duration::ZERO,
        upload_grace: std::time::Duration::ZERO,
    };
    let done = r.a.state.repos().maintain(app_id, &now).await?;
    assert_eq!(
        done,
        Some(Maintained {
            packs_folded: PUSHES,
            retired_removed: PUSHES,
            orphans_removed: 4,
        })
    );
    assert_eq!(live(db).await?.len(), 1);
    assert_eq!(r.bucket_files()?, 2);
    // Once cluster-wide: maintained a moment ago, it is not due again.
    let daily = Policy {
        every: std::time::Duration::from_secs(3600),
        ..now.clone()
    };
    assert_eq!(r.a.state.repos().maintain(app_id, &daily).await?, None);

    // B still serves from the packs it holds; after the next push it syncs to the folded pack and the new one.
    ws.git(".", &["clone", "-q", &via_b, "stale"]).await?;
    ws.git("stale", &["fsck", "--strict", "--no-dangling"])
        .await?;
    ws.write("w/after.txt", "after\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "after"]).await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    ws.git(".", &["clone", "-q", &via_b, "synced"]).await?;
    ws.git("synced", &["fsck", "--strict", "--no-dangling"])
        .await?;
    let packs_in = |cache: &std::path::Path| -> Result<usize> {
        let dir = cache.join(format!("{app_id}.git/objects/pack"));
        Ok(std::fs::read_dir(dir)?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "pack"))
            })
            .count())
    };
    assert_eq!(packs_in(&r.b_cache)?, 2);

    // A cold cache takes the two live packs and nothing else.
    r.clone_cold(&ws, &via_b).await?;
    assert_eq!(packs_in(&r.b_cache)?, 2);

    // A deleted app leaves nothing in the bucket, and its cache goes at the next sweep.
    r.a.delete(&format!("/apps/{app_id}"), &alice)
        .await
        .expect(204, None);
    assert_eq!(r.bucket_files()?, 0);
    assert!(r.b_cache.join(format!("{app_id}.git")).exists());
    let b_repos = in_objects(&r.a.replica_state().await?, &r.s3, &r.b_cache).await?;
    assert_eq!(b_repos.sweep_caches().await?, 1);
    assert!(!r.b_cache.join(format!("{app_id}.git")).exists());

    // Objects of a repository the database does not know (a deleted app's whose removal failed) go at a pass
    // once they are older than the grace; a known repository's stay.
    let (_, kept_id, [kept_via, _]) = r.app("kept").await?;
    ws.git("w", &["push", "-q", &kept_via, "HEAD:master"])
        .await?;
    let gone = uuid::Uuid::new_v4();
    slipway_git_store::bucket::PackBucket::open(&support::s3_calls::root(&r.s3), BUCKET)
        .await?
        .upload(gone, &ws.path("junk"), "pack-junk")
        .await?;
    assert_eq!(r.bucket_files()?, 4);
    let a_repos = r.a.state.repos();
    assert_eq!(
        a_repos
            .remove_gone_repositories(std::time::Duration::from_secs(3600))
            .await?,
        0
    );
    assert_eq!(
        a_repos
            .remove_gone_repositories(std::time::Duration::ZERO)
            .await?,
        2
    );
    assert_eq!(r.bucket_files()?, 2);
    ws.git(".", &["clone", "-q", &kept_via, "kept"]).await?;
    assert!(git_refs::version(db, kept_id).await?.is_some());
    Ok(())
}

/// The objects in the packs of the cache at `<cache>/<app>.git`: how many the packs hold, and how many distinct.
async fn packed_objects(ws: &Workspace, repo: &std::path::Path) -> Result<(usize, usize)> {
    let git_dir = repo.to_string_lossy().into_owned();
    let in_packs = ws.object_counts(repo).await?.in_pack;
    let distinct = ws
        .git(
            ".",
            &[
                "--git-dir",
                &git_dir,
                "cat-file",
                "--batch-all-objects",
                "--batch-check",
            ],
        )
        .await?
        .lines()
        .count();
    Ok((in_packs, distinct))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_publishes_the_packs_it_received_and_each_stands_alone() -> Result<()> {
    // Enough objects that a pack of them would be kept even under git's default unpack limit (100 objects).
    const FILES: usize = 150;
    let r = Replicas::start().await?;
    let (_alice, app_id, [via_a, via_b]) = r.app("whole").await?;
    let ws = work_tree().await?;
    let text = |file: usize| {
        (0..200)
            .map(|line| format!("{file} line {line}\n"))
            .collect::<String>()
    };
    for file in 0..FILES {
        ws.write(&format!("w/{file}.txt"), text(file))?;
    }
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "first"]).await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    // A published the push as the one pack it received: one copy of every object in its cache and the bucket.
    let a_repo = r.a_cache.join(format!("{app_id}.git"));
    assert_eq!(
        packed_objects(&ws, &a_repo).await?,
        (FILES + 2, FILES + 2),
        "objects in the packs of the pushing replica's cache, and distinct ones"
    );
    assert_eq!(r.bucket_files()?, 2);

    // The second push changes every file a little: a thin pack, its blobs deltas against the first push's, which
    // receive-pack completes with their bases.
    for file in 0..FILES {
        ws.write(&format!("w/{file}.txt"), format!("{}changed\n", text(file)))?;
    }
    ws.git("w", &["commit", "-qam", "second"]).await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    let live = git_refs::snapshot(r.a.state.db(), app_id)
        .await?
        .expect("a repository")
        .packs;
    assert_eq!(live.len(), 2, "{live:?}");
    assert_eq!(r.bucket_files()?, 4);

    // A push of a few objects is kept as the pack it came in too (git would explode it into loose objects, which
    // publishing would then deflate into a new pack): the cache holds no loose object afterwards.
    ws.write("w/0.txt", "a small change\n")?;
    ws.git("w", &["commit", "-qam", "third"]).await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    assert_eq!(r.bucket_files()?, 6);
    let counted = ws.object_counts(&a_repo).await?;
    assert!(
        counted.loose == 0,
        "loose objects in the pushing replica's cache: {counted:?}"
    );

    // Each pack stands on its own: a cache made from the bucket alone serves the whole history.
    r.clone_cold(&ws, &via_b).await?;
    let b_repo = r.b_cache.join(format!("{app_id}.git"));
    ws.git(
        ".",
        &["--git-dir", &b_repo.to_string_lossy(), "fsck", "--strict"],
    )
    .await?;
    Ok(())
}

/// `slipway admin <backup-part|restore-part> data` as the api pod runs it, for the api `api` keeping repositories in
/// `s3`'s bucket with its cache under `cache`; `input` is the part a restore reads. Returns its success, stdout and
/// stderr.
async fn data_part(
    api: &TestApi,
    s3: &TestS3,
    cache: &std::path::Path,
    command: &str,
    input: &[u8],
) -> Result<(bool, Vec<u8>, String)> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["admin", command, "data"])
        .env("SLIPWAY_DATABASE_URL", api.db_url())
        .env("SLIPWAY_GIT_STORAGE", "object-store")
        .env("SLIPWAY_REPOS_DIR", cache)
        .env("SLIPWAY_SSH_HOST_KEY", cache.join("no-host-key"))
        .env("SLIPWAY_S3_BACKEND_URL", &s3.url)
        .env("SLIPWAY_S3_BACKEND_ACCESS_KEY_ID", &s3.access_key_id)
        .env(
            "SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY",
            &s3.secret_access_key,
        )
        .env("SLIPWAY_S3_BUCKET_PREFIX", BUCKET.trim_end_matches("git"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // A backup part runs for as long as its stdin is open; a restore part reads it to the end.
    let mut stdin = child.stdin.take();
    if command == "restore-part"
        && let Some(mut feed) = stdin.take()
    {
        feed.write_all(input).await?;
    }
    let out = child.wait_with_output().await?;
    drop(stdin);
    Ok((
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_takes_every_pack_and_a_restore_puts_them_into_an_empty_bucket() -> Result<()> {
    let s3 = TestS3::start().await?;
    let api = TestApi::start().await?;
    let repos = in_objects(&api.state, &s3, &api.repos_dir.join("cache")).await?;
    let api = api.with_repos(repos);
    let alice = api.user("alice", "basic").await?;
    api.create_app(&alice, "kept", "static").await;
    let url = api.serve().await?;
    let remote = http_remote(&url, &alice.token, &alice.username, "kept");
    let ws = Workspace::new()?;
    support::git::push_refs_of_three_kinds(&ws, "w", &remote).await?;
    let refs_before = ws.git(".", &["ls-remote", &remote]).await?;

    let cache = api.repos_dir.join("pod");
    std::fs::create_dir_all(&cache)?;
    let (ok, part, stderr) = data_part(&api, &s3, &cache, "backup-part", b"").await?;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("1 repositories in object storage"),
        "{stderr}"
    );

    // The bucket emptied, as a fresh install's is: a part cut short puts nothing back and leaves nothing behind.
    let emptied = TestS3::start().await?;
    let (ok, _, stderr) = data_part(
        &api,
        &emptied,
        &cache,
        "restore-part",
        // Every pack's file, but not the closing counts (the last 2 KiB: their entry and the tar's end).
        &part[..part.len() - 2048],
    )
    .await?;
    assert!(!ok, "a part cut short was restored: {stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    let dir = emptied.bucket_dir(BUCKET).join("repos");
    let left = walk_files(&dir);
    assert_eq!(left, 0, "a refused restore left {left} files in the bucket");

    // The whole part: every pack back under its key, and the refs the database holds are served whole from it.
    let (ok, _, stderr) = data_part(&api, &emptied, &cache, "restore-part", &part).await?;
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = data_part(&api, &emptied, &cache, "restore-part", &part).await?;
    assert!(!ok, "a restore went into a bucket that holds repositories");
    assert!(stderr.contains("fresh install"), "{stderr}");
    let restored = in_objects(&api.state, &emptied, &api.repos_dir.join("restored")).await?;
    // The same API, its repositories now in the restored bucket (it goes on serving `remote`).
    let _api = api.with_repos(restored);
    assert_eq!(ws.git(".", &["ls-remote", &remote]).await?, refs_before);
    ws.git(".", &["clone", "-q", "--mirror", &remote, "copy.git"])
        .await?;
    ws.git("copy.git", &["fsck", "--strict", "--no-dangling"])
        .await?;
    Ok(())
}

/// How many files are under `dir`, at any depth.
fn walk_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| {
            if e.path().is_dir() {
                walk_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// Object storage down: what needs it answers 503 `service_unavailable` with a `Retry-After`, not a refusal or a
/// 500, and moves no ref: a changeset (its pack cannot be uploaded), a clone through a replica whose cache must
/// come from the bucket, and a push (declined, saying why). Once storage is back, each succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_object_storage_down_what_needs_it_answers_503_and_moves_nothing() -> Result<()> {
    let mut r = Replicas::start().await?;
    let (alice, app_id, via) = r.app("outage").await?;
    let ws = work_tree().await?;
    ws.write("w/index.html", "<h1>up</h1>\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "up"]).await?;
    ws.git("w", &["push", "-q", &via[0], "HEAD:master"]).await?;
    let version = git_refs::version(r.a.state.db(), app_id).await?;
    let changeset = async |router: &axum::Router| {
        support::call_on(
            router,
            Method::POST,
            &format!("/apps/{app_id}/changeset"),
            Some(&alice.token),
            Some(json!({"message": "while down", "changes": {"down.txt": "down\n"}})),
        )
        .await
    };

    r.s3.pause();
    let refused = changeset(&r.a.router).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "service_unavailable");
    assert_eq!(
        refused.headers.get(axum::http::header::RETRY_AFTER),
        Some(&axum::http::HeaderValue::from(5)),
        "the client is told when to try again"
    );
    if r.b_cache.exists() {
        std::fs::remove_dir_all(&r.b_cache)?;
    }
    let cold = ws.try_git(".", &["clone", "-q", &via[1], "cold"]).await?;
    assert!(!cold.ok, "a clone that needed the bucket succeeded");
    assert!(
        cold.stderr.contains("503"),
        "the clone failed otherwise: {}",
        cold.stderr
    );
    ws.write("w/index.html", "<h1>down</h1>\n")?;
    ws.git("w", &["commit", "-qam", "down"]).await?;
    let push = ws.try_git("w", &["push", &via[0], "HEAD:master"]).await?;
    assert!(!push.ok, "a push was acknowledged while storage was down");
    assert!(
        push.stderr.contains("storage is unavailable"),
        "the push was declined otherwise: {}",
        push.stderr
    );
    assert_eq!(
        git_refs::version(r.a.state.db(), app_id).await?,
        version,
        "a ref moved while storage was down"
    );

    r.s3.resume().await?;
    ws.git("w", &["push", "-q", &via[0], "HEAD:master"]).await?;
    let written = changeset(&r.a.router).await;
    assert_eq!(written.status, 200, "{}", written.body);
    ws.git(".", &["clone", "-q", &via[1], "cold"]).await?;
    assert_eq!(
        ws.git("cold", &["rev-parse", "HEAD"]).await?.trim(),
        written.body["sha"].as_str().unwrap_or_default()
    );
    ws.git("cold", &["fsck", "--strict", "--no-dangling"])
        .await?;
    Ok(())
}

/// A file past the multipart threshold goes up in parts, four at a time, and comes back whole; an upload a replica
/// stopped before finishing is aborted once it is older than the grace, so the store keeps none of its parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_pack_goes_up_in_parts_and_an_unfinished_upload_is_aborted() -> Result<()> {
    let r = Replicas::start().await?;
    let (_, app_id, _) = r.app("large").await?;
    let repo = git_refs::id(r.a.state.db(), app_id)
        .await?
        .expect("the app's repository");
    let endpoint = support::s3_calls::root(&r.s3);
    // The smallest threshold a bucket takes (two parts of 64 MiB), so that 160 MiB go up as three parts.
    let bucket = PackBucket::open(&endpoint, BUCKET)
        .await?
        .in_parts_from(128 << 20);
    let ws = Workspace::new()?;
    let file = ws.path("pack-large.pack");
    {
        let mut random = std::fs::File::open("/dev/urandom")?;
        let mut out = std::fs::File::create(&file)?;
        std::io::copy(&mut std::io::Read::take(&mut random, 160 << 20), &mut out)?;
    }
    let name = format!("pack-{}", "1".repeat(40));
    let key = PackBucket::key(repo, &name, Some(uuid::Uuid::new_v4()), "pack");
    bucket.put_file(&key, &file).await?;
    let client = slipway_backends::object_store::client(&endpoint, None);
    let head = client.head_object().bucket(BUCKET).key(&key).send().await?;
    assert_eq!(head.content_length(), Some(160 << 20));
    assert!(
        head.e_tag().is_some_and(|t| t.ends_with("-3\"")),
        "not a multipart upload of three parts: {:?}",
        head.e_tag()
    );
    let back = ws.path("back.pack");
    assert!(bucket.fetch(&key, &back).await?);
    assert!(
        std::fs::read(&back)? == std::fs::read(&file)?,
        "the object is not the file"
    );
    bucket.remove_keys(std::slice::from_ref(&key)).await?;

    // An upload a stopped replica left: started, one part sent, never completed.
    let left = format!("repos/{repo}/pack-{}.pack", "0".repeat(40));
    let started = client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key(&left)
        .send()
        .await?;
    client
        .upload_part()
        .bucket(BUCKET)
        .key(&left)
        .upload_id(started.upload_id().expect("an upload id"))
        .part_number(1)
        .body(vec![7u8; 5 << 20].into())
        .send()
        .await?;
    let unfinished = async || {
        let listed = client
            .list_multipart_uploads()
            .bucket(BUCKET)
            .send()
            .await?;
        anyhow::Ok(listed.uploads().len())
    };
    assert_eq!(unfinished().await?, 1);
    let repos = r.a.state.repos();
    let day = std::time::Duration::from_secs(24 * 3600);
    assert_eq!(
        repos.abort_unfinished_uploads(day).await?,
        0,
        "an upload younger than the grace was aborted"
    );
    assert_eq!(unfinished().await?, 1);
    assert_eq!(
        repos
            .abort_unfinished_uploads(std::time::Duration::ZERO)
            .await?,
        1
    );
    assert_eq!(unfinished().await?, 0, "the unfinished upload stays");
    Ok(())
}

/// Random bytes as the file `path` of `ws`: content git cannot compress or delta.
fn random_file(ws: &Workspace, path: &str, bytes: u64) -> Result<()> {
    let mut random = std::fs::File::open("/dev/urandom")?;
    let mut out = std::fs::File::create(ws.path(path))?;
    std::io::copy(&mut std::io::Read::take(&mut random, bytes), &mut out)?;
    Ok(())
}

/// The chunks of streamed packs in repository `repo`'s folder of the bucket, by key.
fn chunks_in(r: &Replicas, repo: uuid::Uuid) -> Result<Vec<String>> {
    let dir = r.s3.bucket_dir(BUCKET).join("repos").join(repo.to_string());
    let mut chunks: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    chunks.retain(|name| name.starts_with("upload-"));
    chunks.sort();
    Ok(chunks)
}

/// Waits until `done` holds, for at most a minute; false if it never did.
async fn within_a_minute(mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if done()? {
            return Ok(true);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    done()
}

/// `git receive-pack` on replica A's cache of `app`, started as A starts it for a push over HTTP, with the writer
/// to keep until it has ended.
async fn receive_pack(
    r: &Replicas,
    app: slipway_git_store::RepoOf<'_>,
) -> Result<(tokio::process::Child, slipway_git_store::Writer)> {
    let repos = r.a.state.repos();
    let path = repos.ready(app).await?.context("a repository")?;
    let writer = repos
        .writer(app.id, "alice", slipway_git_store::Writing::Push)
        .await;
    let child = tokio::process::Command::new("git")
        .args(&writer.config)
        .arg("receive-pack")
        .arg(&path)
        .envs(writer.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    Ok((child, writer))
}

/// A pkt-line of git's protocol.
fn pkt_line(payload: &str) -> Vec<u8> {
    format!("{:04x}{payload}", payload.len() + 4).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_s_pack_goes_up_while_it_is_received_and_is_stored_as_git_finished_it() -> Result<()>
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A chunk is 64 MiB and the first is sent only at the end: 150 MiB reach past the second.
    const BIG: u64 = 150 << 20;
    const CHUNK: u64 = 64 << 20;
    let r = Replicas::start().await?;
    let (alice, app_id, [via_a, via_b]) = r.app("streamed").await?;
    let (owner, name) = (alice.username.parse()?, "streamed".parse()?);
    let app = slipway_git_store::RepoOf {
        id: app_id,
        owner: &owner,
        name: &name,
    };
    let repo = git_refs::id(r.a.state.db(), app_id)
        .await?
        .expect("the app's repository");
    let ws = work_tree().await?;
    let text: String = (0..400).map(|line| format!("line {line}\n")).collect();
    ws.write("w/notes.txt", &text)?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "first"]).await?;
    ws.git("w", &["push", "-q", &via_a, "HEAD:master"]).await?;
    let old = ws.git("w", &["rev-parse", "HEAD"]).await?.trim().to_owned();

    // The second commit changes the notes a little and adds a large file: a thin pack (the notes a delta against
    // the first push's), which receive-pack completes with the base, rewriting its header and its end.
    ws.write("w/notes.txt", format!("{text}one more line\n"))?;
    random_file(&ws, "w/big.bin", BIG)?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "second"]).await?;
    let new = ws.git("w", &["rev-parse", "HEAD"]).await?.trim().to_owned();
    let thin = ws.path("thin.pack");
    let packed = std::process::Command::new("git")
        .current_dir(ws.path("w"))
        .args(["pack-objects", "--thin", "--stdout", "--revs", "--quiet"])
        .stdin(std::fs::File::open({
            ws.write("revs", format!("{new}\n--not\n{old}\n"))?;
            ws.path("revs")
        })?)
        .stdout(std::fs::File::create(&thin)?)
        .status()?;
    assert!(packed.success());
    let sent = std::fs::read(&thin)?;
    let sent_objects = u32::from_be_bytes(sent[8..12].try_into()?);

    // Half the pack and more than two chunks, then a stop until the second chunk is in the bucket.
    let (mut git, writer) = receive_pack(&r, app).await?;
    let mut stdin = git.stdin.take().expect("stdin");
    let mut stdout = git.stdout.take().expect("stdout");
    let answer = tokio::spawn(async move {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).await.map(|_| out)
    });
    stdin
        .write_all(&pkt_line(&format!(
            "{old} {new} refs/heads/master\0report-status\n"
        )))
        .await?;
    stdin.write_all(b"0000").await?;
    let half = (2 * CHUNK + (1 << 20)) as usize;
    stdin.write_all(&sent[..half]).await?;
    stdin.flush().await?;
    let second = |chunks: &[String]| chunks.iter().any(|c| c.ends_with(".pack.1"));
    assert!(
        within_a_minute(|| Ok(second(&chunks_in(&r, repo)?))).await?,
        "the second chunk did not go up while the push was received: {:?}",
        chunks_in(&r, repo)?
    );
    let early = chunks_in(&r, repo)?;
    assert!(
        !early.iter().any(|c| c.ends_with(".pack.0")),
        "the first chunk, which git rewrites at the end, went up early: {early:?}"
    );
    stdin.write_all(&sent[half..]).await?;
    stdin.shutdown().await?;
    drop(stdin);
    assert!(git.wait().await?.success());
    drop(writer);
    let answer = String::from_utf8_lossy(&answer.await??).into_owned();
    assert!(answer.contains("ok refs/heads/master"), "{answer}");

    // The stored chunks, one after the other, are the file git finished, which holds the base it added.
    let snapshot = git_refs::snapshot(r.a.state.db(), app_id)
        .await?
        .expect("a repository");
    let pack = snapshot
        .packs
        .iter()
        .find(|p| p.chunk_bytes.is_some())
        .expect("a streamed pack");
    assert_eq!(pack.chunk_bytes, Some(CHUNK as i64));
    let finished = std::fs::read(
        r.a_cache
            .join(format!("{app_id}.git/objects/pack/{}.pack", pack.name)),
    )?;
    assert!(
        u32::from_be_bytes(finished[8..12].try_into()?) > sent_objects,
        "receive-pack did not complete the thin pack"
    );
    let mut stored = Vec::new();
    let dir = r.s3.bucket_dir(BUCKET).join("repos").join(repo.to_string());
    for key in PackBucket::pack_keys(repo, pack) {
        let file = key.rsplit('/').next().unwrap_or_default().to_owned();
        if !file.ends_with(".idx") {
            stored.extend(std::fs::read(dir.join(file))?);
        }
    }
    assert!(stored == finished, "the chunks are not the finished pack");
    assert_eq!(chunks_in(&r, repo)?.len(), 3, "{:?}", chunks_in(&r, repo)?);
    r.clone_cold(&ws, &via_b).await?;

    // A push cut off after two chunks leaves none behind once git has removed what it received.
    random_file(&ws, "w/other.bin", BIG)?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "third"]).await?;
    let third = ws.git("w", &["rev-parse", "HEAD"]).await?.trim().to_owned();
    ws.write("revs", format!("{third}\n--not\n{new}\n"))?;
    let cut = std::process::Command::new("git")
        .current_dir(ws.path("w"))
        .args(["pack-objects", "--thin", "--stdout", "--revs", "--quiet"])
        .stdin(std::fs::File::open(ws.path("revs"))?)
        .output()?
        .stdout;
    let (mut git, _cut_writer) = receive_pack(&r, app).await?;
    let mut stdin = git.stdin.take().expect("stdin");
    stdin
        .write_all(&pkt_line(&format!(
            "{new} {third} refs/heads/master\0report-status\n"
        )))
        .await?;
    stdin.write_all(b"0000").await?;
    stdin.write_all(&cut[..half]).await?;
    stdin.flush().await?;
    assert!(
        within_a_minute(|| Ok(chunks_in(&r, repo)?.len() > 3)).await?,
        "the cut-off push sent no chunk"
    );
    drop(stdin);
    let _ = git.wait().await?;
    assert!(
        within_a_minute(|| Ok(chunks_in(&r, repo)?.len() == 3)).await?,
        "a cut-off push left chunks: {:?}",
        chunks_in(&r, repo)?
    );
    assert_eq!(
        git_refs::snapshot(r.a.state.db(), app_id)
            .await?
            .expect("a repository")
            .refs
            .iter()
            .find(|(name, _)| name == "refs/heads/master")
            .map(|(_, oid)| oid.as_str()),
        Some(new.as_str())
    );
    Ok(())
}
