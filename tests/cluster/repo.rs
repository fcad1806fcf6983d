//! The repository read and commit routes and the code download against a real repository, Postgres and
//! apiserver: tree and blob at branches and commits, every changeset rule (changes, edits, patches, the 400s that
//! write nothing, racing changesets that never lose a commit), and the tar download of a channel's commit.

use crate::support;

use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use slipway_crds::Channel;
use support::TestApi;

async fn head_of(
    api: &TestApi,
    app_id: &str,
    user: &support::User,
    reference: &str,
) -> Option<String> {
    let reply = api
        .get(&format!("/apps/{app_id}/tree?ref={reference}"), user)
        .await;
    (reply.status == 200).then(|| reply.body["sha"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn tree_and_blob_read_branches_and_commits() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap();

    // An empty repository has no ref.
    let empty = api.get(&format!("/apps/{id}/tree"), &alice).await;
    assert!(empty.message().contains("master"), "{}", empty.body);
    empty.expect(404, Some("not_found"));
    api.get(&format!("/apps/{id}/blob?path=a"), &alice)
        .await
        .expect(404, Some("not_found"));

    let first = api
        .post(
            &format!("/apps/{id}/changeset"),
            &alice,
            json!({"message": "first", "changes": {"index.html": "<p>hi</p>\n", "css/site.css": "body{}\n", "bin/run": "#!/bin/sh\n"}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.len(), 40);
    let tree = api
        .get(&format!("/apps/{id}/tree"), &alice)
        .await
        .expect(200, None);
    assert_eq!(tree["ref"], "master");
    assert_eq!(tree["sha"], first);
    assert_eq!(
        tree["files"],
        json!([
            {"path": "bin/run", "kind": "file", "size": 10},
            {"path": "css/site.css", "kind": "file", "size": 7},
            {"path": "index.html", "kind": "file", "size": 10},
        ])
    );
    let second = api
        .post(
            &format!("/apps/{id}/changeset"),
            &alice,
            json!({"message": "second", "changes": {"index.html": "<p>bye</p>\n"}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    // By sha, by full ref, by bare branch.
    let old = api
        .get(
            &format!("/apps/{id}/blob?ref={first}&path=index.html"),
            &alice,
        )
        .await
        .expect(200, None);
    assert_eq!(old, "<p>hi</p>\n");
    let new = api
        .get(
            &format!("/apps/{id}/blob?ref=refs/heads/master&path=index.html"),
            &alice,
        )
        .await
        .expect(200, None);
    assert_eq!(new, "<p>bye</p>\n");
    assert_eq!(
        head_of(&api, id, &alice, &second).await.as_deref(),
        Some(second.as_str())
    );
    let raw = api
        .send(
            Request::get(format!("/apps/{id}/blob?path=css/site.css"))
                .header("authorization", format!("Bearer {}", alice.token))
                .body(Body::empty())?,
        )
        .await;
    assert_eq!(raw.status, 200);

    for missing in [
        "?ref=nope",
        "?ref=0123456789012345678901234567890123456789",
        "?ref=..bad",
    ] {
        api.get(&format!("/apps/{id}/tree{missing}"), &alice)
            .await
            .expect(404, Some("not_found"));
    }
    api.get(&format!("/apps/{id}/blob?path=nope.txt"), &alice)
        .await
        .expect(404, Some("not_found"));
    api.get(&format!("/apps/{id}/blob?path=css"), &alice)
        .await
        .expect(404, Some("not_found"));
    api.get(&format!("/apps/{id}/blob?path=../etc/passwd"), &alice)
        .await
        .expect(400, Some("bad_request"));
    api.get(&format!("/apps/{id}/blob"), &alice)
        .await
        .expect(400, Some("bad_request"));
    let no_repo = api
        .token(alice.id, &["deploy:*".to_owned()], false, None)
        .await?;
    api.call(
        Method::GET,
        &format!("/apps/{id}/tree"),
        Some(&no_repo),
        None,
    )
    .await
    .expect(403, Some("scope_denied"));
    Ok(())
}

#[tokio::test]
async fn changesets_apply_changes_edits_and_patches_in_one_commit() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap();
    let url = format!("/apps/{id}/changeset");
    api.post(
        &url,
        &alice,
        json!({"message": "init", "changes": {
            "main.py": "def a():\n    return 1\n\ndef b():\n    return 1\n",
            "config.txt": "debug = false\nlevel = 1\nlevel = 1\n",
            "old.txt": "old\n",
        }}),
    )
    .await
    .expect(200, None);
    let before = head_of(&api, id, &alice, "master").await.unwrap();
    let after = api
        .post(
            &url,
            &alice,
            json!({
                "message": "all three kinds",
                "changes": {"old.txt": null, "new/file.txt": "new\n"},
                "edits": {"config.txt": [
                    {"old_string": "debug = false", "new_string": "debug = true"},
                    {"old_string": "level = 1", "new_string": "level = 2", "replace_all": true}
                ]},
                "patches": {"main.py": "@@ def b():\n-    return 1\n+    return 2\n"}
            }),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let tree = api
        .get(&format!("/apps/{id}/tree"), &alice)
        .await
        .expect(200, None);
    assert_eq!(tree["sha"], after);
    let paths: Vec<&str> = tree["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["config.txt", "main.py", "new/file.txt"]);
    let config = api
        .get(&format!("/apps/{id}/blob?path=config.txt"), &alice)
        .await;
    assert_eq!(config.body, "debug = true\nlevel = 2\nlevel = 2\n");
    let main = api
        .get(&format!("/apps/{id}/blob?path=main.py"), &alice)
        .await;
    assert_eq!(
        main.body,
        "def a():\n    return 1\n\ndef b():\n    return 2\n"
    );
    // Exactly one commit on top of the previous head.
    let repo = api.repos_dir.join(&alice.username).join("site.git");
    let parent = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["rev-parse", "master^"])
        .output()?;
    assert_eq!(String::from_utf8(parent.stdout)?.trim(), before);
    // A new branch starts from nothing.
    let branch = api
        .post(
            &url,
            &alice,
            json!({"ref": "feature/x", "message": "branch", "changes": {"only.txt": "x"}}),
        )
        .await
        .expect(200, None);
    let tree = api
        .get(&format!("/apps/{id}/tree?ref=feature/x"), &alice)
        .await
        .expect(200, None);
    assert_eq!(tree["sha"], branch["sha"]);
    assert_eq!(tree["files"].as_array().unwrap().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_refused_changeset_says_why_and_writes_nothing() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap();
    let url = format!("/apps/{id}/changeset");
    api.post(
        &url,
        &alice,
        json!({"message": "init", "changes": {"a.txt": "alpha\nbeta\n", "dir/b.txt": "b\n"}}),
    )
    .await
    .expect(200, None);
    let head = head_of(&api, id, &alice, "master").await;

    let cases: Vec<(Value, &str)> = vec![
        (json!({"message": "", "changes": {"x": "x"}}), "message"),
        (json!({"message": "   ", "changes": {"x": "x"}}), "message"),
        (json!({"message": "m"}), "at least one"),
        (json!({"message": "m", "changes": {}}), "at least one"),
        (
            json!({"message": "m", "ref": "bad..ref", "changes": {"x": "x"}}),
            "bad..ref",
        ),
        (
            json!({"message": "m", "changes": {"/etc/passwd": "x"}}),
            "/etc/passwd",
        ),
        (json!({"message": "m", "changes": {"../up": "x"}}), "../up"),
        (
            json!({"message": "m", "changes": {".git/config": "x"}}),
            ".git/config",
        ),
        (json!({"message": "m", "changes": {"a/./b": "x"}}), "a/./b"),
        (
            json!({"message": "m", "changes": {"a.txt": "x"}, "edits": {"a.txt": [{"old_string": "alpha", "new_string": "x"}]}}),
            "a.txt",
        ),
        (
            json!({"message": "m", "changes": {"ok.txt": "x"}, "edits": {"a.txt": [{"old_string": "gamma", "new_string": "x"}]}}),
            "gamma",
        ),
        (
            json!({"message": "m", "edits": {"missing.txt": [{"old_string": "a", "new_string": "x"}]}}),
            "missing.txt",
        ),
        (
            json!({"message": "m", "edits": {"a.txt": [{"old_string": "a", "new_string": "x"}]}}),
            "occurs",
        ),
        (
            json!({"message": "m", "patches": {"a.txt": "@@\n-alpha\n-delta\n"}}),
            "delta",
        ),
        (
            json!({"message": "m", "patches": {"a.txt": "@@ nowhere\n-alpha\n"}}),
            "nowhere",
        ),
        (
            json!({"message": "m", "patches": {"a.txt": "@@ -1,2 +1,2 @@\n-alpha\n"}}),
            "line numbers",
        ),
        (
            json!({"message": "m", "changes": {"dir": "x"}}),
            "directory",
        ),
        (
            json!({"message": "m", "changes": {"a.txt/c": "x"}}),
            "a.txt",
        ),
        (json!({"message": "m", "changes": {"x": 1}}), "changes"),
    ];
    for (body, names) in cases {
        let reply = api.post(&url, &alice, body.clone()).await;
        assert!(reply.message().contains(names), "{body}: {}", reply.body);
        reply.expect(400, Some("bad_request"));
        assert_eq!(
            head_of(&api, id, &alice, "master").await,
            head,
            "{body} moved the branch"
        );
    }
    // A patch on a branch that does not exist names the file it needed.
    let reply = api
        .post(
            &url,
            &alice,
            json!({"message": "m", "ref": "other", "patches": {"a.txt": "@@\n-alpha\n"}}),
        )
        .await;
    assert!(reply.message().contains("a.txt"), "{}", reply.body);
    reply.expect(400, Some("bad_request"));
    assert_eq!(head_of(&api, id, &alice, "other").await, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_changesets_and_pushes_never_lose_a_commit() -> Result<()> {
    let api = std::sync::Arc::new(TestApi::start().await?);
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap().to_owned();
    let url = format!("/apps/{id}/changeset");
    api.post(
        &url,
        &alice,
        json!({"message": "init", "changes": {"counter.txt": "0\n"}}),
    )
    .await
    .expect(200, None);

    // Changesets racing on one branch through two API replicas (each with its own in-process queue, the same
    // repositories): they meet at the ref's compare-and-swap, and every one lands on top of another or answers 409
    // having written nothing. None overwrites another.
    let replica = api.replica().await?;
    let mut racers = Vec::new();
    for i in 0..16 {
        let router = if i % 2 == 0 {
            api.router.clone()
        } else {
            replica.clone()
        };
        let (token, url) = (alice.token.clone(), url.clone());
        racers.push(tokio::spawn(async move {
            let body = json!({"message": format!("racer {i}"), "changes": {format!("racer-{i}.txt"): "x"}});
            (i, support::call_on(&router, Method::POST, &url, Some(&token), Some(body)).await)
        }));
    }
    let mut landed = Vec::new();
    let mut refused = Vec::new();
    for racer in racers {
        let (i, reply) = racer.await?;
        match reply.status.as_u16() {
            200 => landed.push((i, reply.body["sha"].as_str().unwrap().to_owned())),
            409 => {
                assert_eq!(reply.body["error"]["code"], "conflict");
                refused.push(i);
            }
            other => panic!("racing changeset answered {other}: {}", reply.body),
        }
    }
    assert!(!landed.is_empty());
    let repo = api.repos_dir.join(&alice.username).join("site.git");
    let git = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(args)
            .output()?;
        anyhow::ensure!(out.status.success(), "git {args:?} failed");
        Ok(String::from_utf8(out.stdout)?)
    };
    // One straight line of init plus every landed changeset, each exactly once; each answered sha is on it.
    let history = git(&["log", "--format=%H %s", "master"])?;
    assert_eq!(history.lines().count(), 1 + landed.len(), "{history}");
    assert_eq!(git(&["rev-list", "--merges", "master"])?, "");
    for (i, sha) in &landed {
        assert_eq!(
            history.matches(&format!(" racer {i}\n")).count(),
            1,
            "racer {i} is not on master exactly once: {history}"
        );
        assert!(
            history.contains(sha.as_str()),
            "racer {i}'s {sha} is not on master"
        );
    }
    let files = git(&["ls-tree", "--name-only", "master"])?;
    for i in 0..16 {
        let present = files.lines().any(|f| f == format!("racer-{i}.txt"));
        assert_eq!(present, !refused.contains(&i), "racer-{i}.txt: {files}");
    }

    // An edit whose text another writer changed first answers a conflict or lands on top: never both edits lost.
    let base = api.serve().await?;
    let ws = support::git::Workspace::new()?;
    let remote = support::git::http_remote(&base, &alice.token, &alice.username, "site");
    ws.git(".", &["clone", "-q", &remote, "w"]).await?;
    let mut pushes = Vec::new();
    for i in 0..3 {
        ws.write("w/pushed.txt", format!("{i}\n"))?;
        ws.git("w", &["add", "-A"]).await?;
        ws.git("w", &["commit", "-qm", &format!("push {i}")])
            .await?;
        let push = ws.try_git("w", &["push", "-q", "origin", "HEAD:master"]);
        let api2 = api.clone();
        let (alice2, url2) = (alice.clone(), url.clone());
        let changeset = tokio::spawn(async move {
            api2.post(
                &url2,
                &alice2,
                json!({"message": format!("cs {i}"), "changes": {format!("cs-{i}.txt"): "y"}}),
            )
            .await
        });
        let push = push.await?;
        let changeset = changeset.await?;
        pushes.push((push.ok, changeset.status.as_u16()));
        if !push.ok {
            // The changeset landed first: a plain pull brings it, and the next push carries on.
            ws.git(
                "w",
                &["pull", "-q", "--no-rebase", "--no-edit", "origin", "master"],
            )
            .await?;
            ws.git("w", &["push", "-q", "origin", "HEAD:master"])
                .await?;
        }
    }
    // Every changeset landed (200) and every push too: both are in the final history.
    let log = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["log", "--format=%s", "master"])
        .output()?;
    let log = String::from_utf8(log.stdout)?;
    for (i, (_, changeset_status)) in pushes.iter().enumerate() {
        assert!(log.contains(&format!("push {i}")), "{log}");
        if *changeset_status == 200 {
            assert!(
                log.contains(&format!("cs {i}")),
                "changeset {i} was lost: {log}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn code_download_streams_the_channels_commit_as_tar() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let id = app["id"].as_str().unwrap();
    let channel_id = app["channels"][0]["id"].as_str().unwrap();
    let url = format!("/apps/{id}/channels/{channel_id}/code/download");

    let undeployed = api.get(&url, &alice).await;
    assert!(
        undeployed.message().contains("not been deployed"),
        "{}",
        undeployed.body
    );
    undeployed.expect(404, Some("not_found"));
    api.get(
        &format!("{url}?snapshot_id={}", uuid::Uuid::new_v4()),
        &alice,
    )
    .await
    .expect(404, Some("snapshot_not_found"));

    let sha = api
        .post(
            &format!("/apps/{id}/changeset"),
            &alice,
            json!({"message": "m", "changes": {"index.html": "hi\n", "a/b.txt": "b\n"}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    // Deploys are not here yet: record the deployed commit the way the deploy reconciler will.
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &alice.namespace);
    channels
        .patch_status(
            "site.prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentSha": sha}})),
        )
        .await?;
    let mut seen = false;
    for _ in 0..100 {
        let channel = api
            .get(&format!("/apps/{id}/channels/{channel_id}"), &alice)
            .await
            .expect(200, None);
        if channel["current_sha"] == sha.as_str() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen, "the cache never saw the deployed sha");

    let no_repo = api
        .token(alice.id, &["deploy:*".to_owned()], false, None)
        .await?;
    api.call(Method::GET, &url, Some(&no_repo), None)
        .await
        .expect(403, Some("scope_denied"));

    use tower::ServiceExt;
    let res = api
        .router
        .clone()
        .oneshot(
            Request::get(&url)
                .header("authorization", format!("Bearer {}", alice.token))
                .body(Body::empty())?,
        )
        .await?;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/x-tar");
    assert_eq!(
        res.headers()["content-disposition"],
        format!("attachment; filename=\"site-prod-{}.tar\"", &sha[..7]).as_str()
    );
    let tar = axum::body::to_bytes(res.into_body(), 1 << 20).await?;
    let dir = std::env::temp_dir().join(format!("slipway-tar-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("code.tar"), &tar)?;
    let listed = std::process::Command::new("tar")
        .arg("-tf")
        .arg(dir.join("code.tar"))
        .output()?;
    let listed = String::from_utf8(listed.stdout)?;
    assert!(
        listed.lines().any(|l| l == "index.html") && listed.lines().any(|l| l == "a/b.txt"),
        "{listed}"
    );
    std::fs::remove_dir_all(dir)?;

    let audited: (i64,) = sqlx::query_as(
        "SELECT count(*) FROM audit_events WHERE action = 'code.download' AND app_id = $1 AND detail->>'sha' = $2",
    )
    .bind(uuid::Uuid::parse_str(id)?)
    .bind(&sha)
    .fetch_one(api.state.db())
    .await?;
    assert_eq!(audited.0, 1);
    Ok(())
}
