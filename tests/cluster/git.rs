//! The git transports with the real git and ssh clients against a served API, a real Postgres and the real
//! apiserver: clone an empty repository, push, clone again and compare, fetch after a changeset, force-push,
//! protocol v2 and gzip request bodies, wrong tokens challenged, other users' repositories missing, and SSH keys
//! reaching the same repository.

use crate::support;

use std::io::Write;

use anyhow::Result;
use axum::body::Body;
use axum::http::Request;
use serde_json::json;
use support::TestApi;
use support::git::{Workspace, http_remote};

/// Basic auth header with any username and `token` as the password.
fn basic(token: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("anyone:{token}"))
    )
}

async fn raw(api: &TestApi, req: Request<Body>) -> (u16, axum::http::HeaderMap, Vec<u8>) {
    use tower::ServiceExt;
    let Ok(res) = api.router.clone().oneshot(req).await;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = axum::body::to_bytes(res.into_body(), 16 * 1024 * 1024)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (status, headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_clone_push_clone_fetch_and_force_push() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let base = api.serve().await?;
    let remote = http_remote(&base, &alice.token, &alice.username, "site");
    let ws = Workspace::new()?;

    // A new repository is empty and clones as such.
    let cloned = ws.try_git(".", &["clone", &remote, "one"]).await?;
    assert!(cloned.ok, "{}", cloned.stderr);
    assert!(
        cloned.stderr.contains("empty repository"),
        "{}",
        cloned.stderr
    );

    ws.write("one/index.html", "<h1>hello</h1>\n")?;
    ws.write("one/assets/app.js", "console.log(1);\n")?;
    let random: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    ws.write("one/assets/blob.bin", &random)?;
    ws.git("one", &["add", "-A"]).await?;
    ws.git("one", &["commit", "-qm", "first"]).await?;
    ws.git("one", &["push", "-q", "origin", "HEAD:master"])
        .await?;
    let pushed = ws.git("one", &["rev-parse", "HEAD"]).await?;
    // The push is kept as the pack it came in (git would explode its few objects into loose ones, which every
    // clone would then deflate again until gc packs them).
    let repo = api.repos_dir.join(&alice.username).join("site.git");
    let counted = ws.object_counts(&repo).await?;
    assert!(
        counted.loose == 0 && counted.packs == 1,
        "the pushed objects, in {}: {counted:?}",
        repo.display()
    );

    // Cloning again gives the same commit and the same bytes.
    ws.git(".", &["clone", "-q", &remote, "two"]).await?;
    assert_eq!(ws.git("two", &["rev-parse", "HEAD"]).await?, pushed);
    assert_eq!(ws.read("two/assets/blob.bin")?, random);
    assert_eq!(
        ws.git("two", &["rev-parse", "--abbrev-ref", "HEAD"])
            .await?
            .trim(),
        "master"
    );

    // The API reads what git pushed.
    let tree = api
        .get(&format!("/apps/{app_id}/tree"), &alice)
        .await
        .expect(200, None);
    assert_eq!(tree["sha"], pushed.trim());
    assert_eq!(tree["files"].as_array().unwrap().len(), 3);

    // A changeset is an ordinary commit that fetch brings down.
    let sha = api
        .post(
            &format!("/apps/{app_id}/changeset"),
            &alice,
            json!({"message": "edit from the API", "edits": {"index.html": [{"old_string": "hello", "new_string": "hi"}]}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    ws.git("one", &["fetch", "-q", "origin"]).await?;
    assert_eq!(
        ws.git("one", &["rev-parse", "origin/master"]).await?.trim(),
        sha
    );
    assert_eq!(
        ws.git("one", &["rev-parse", "origin/master^"]).await?,
        pushed
    );
    ws.git("one", &["merge", "-q", "--ff-only", "origin/master"])
        .await?;
    assert_eq!(ws.read("one/index.html")?, b"<h1>hi</h1>\n");

    // Rewriting history needs --force, and then lands.
    ws.write("two/index.html", "rewritten\n")?;
    ws.git("two", &["commit", "-qam", "diverged"]).await?;
    let refused = ws
        .try_git("two", &["push", "origin", "HEAD:master"])
        .await?;
    assert!(!refused.ok, "a non-fast-forward push is refused");
    ws.git("two", &["push", "-q", "--force", "origin", "HEAD:master"])
        .await?;
    let forced = ws.git("two", &["rev-parse", "HEAD"]).await?;
    let remote_head = ws
        .git("two", &["ls-remote", "origin", "refs/heads/master"])
        .await?;
    assert!(remote_head.starts_with(forced.trim()), "{remote_head}");
    let blob = api
        .get(&format!("/apps/{app_id}/blob?path=index.html"), &alice)
        .await
        .expect(200, None);
    assert_eq!(blob, "rewritten\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_challenged_and_other_users_repositories_are_missing() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    api.create_app(&alice, "site", "static").await;
    let info_refs = format!(
        "/{}/site.git/info/refs?service=git-upload-pack",
        alice.username
    );

    for auth in [
        None,
        Some(basic("svc_wrong")),
        Some(basic(&slipway_auth::token::generate())),
    ] {
        let mut req = Request::get(&info_refs);
        if let Some(auth) = &auth {
            req = req.header("authorization", auth);
        }
        let (status, headers, _) = raw(&api, req.body(Body::empty())?).await;
        assert_eq!(status, 401, "{auth:?}");
        assert_eq!(headers["www-authenticate"], "Basic realm=\"slipway\"");
    }
    let (status, _, _) = raw(
        &api,
        Request::get(&info_refs)
            .header("authorization", basic(&alice.token))
            .body(Body::empty())?,
    )
    .await;
    assert_eq!(status, 200);
    // Another user's repository and a missing one answer alike.
    for path in [
        info_refs.clone(),
        format!(
            "/{}/nothing.git/info/refs?service=git-upload-pack",
            alice.username
        ),
    ] {
        let (status, _, _) = raw(
            &api,
            Request::get(&path)
                .header("authorization", basic(&bob.token))
                .body(Body::empty())?,
        )
        .await;
        assert_eq!(status, 404, "{path}");
    }
    let no_repo_scope = api
        .token(alice.id, &["deploy:*".to_owned()], false, None)
        .await?;
    let (status, _, _) = raw(
        &api,
        Request::get(&info_refs)
            .header("authorization", basic(&no_repo_scope))
            .body(Body::empty())?,
    )
    .await;
    assert_eq!(status, 403);
    // The dumb protocol is not served.
    let (status, _, _) = raw(
        &api,
        Request::get(format!("/{}/site.git/info/refs", alice.username))
            .header("authorization", basic(&alice.token))
            .body(Body::empty())?,
    )
    .await;
    assert_eq!(status, 400);

    // And the git client says so.
    let base = api.serve().await?;
    let ws = Workspace::new()?;
    let wrong = ws
        .try_git(
            ".",
            &[
                "clone",
                &http_remote(&base, "svc_wrong", &alice.username, "site"),
                "x",
            ],
        )
        .await?;
    assert!(!wrong.ok);
    assert!(
        wrong.stderr.contains("Authentication failed"),
        "{}",
        wrong.stderr
    );
    let foreign = ws
        .try_git(
            ".",
            &[
                "clone",
                &http_remote(&base, &bob.token, &alice.username, "site"),
                "y",
            ],
        )
        .await?;
    assert!(!foreign.ok);
    assert!(foreign.stderr.contains("not found"), "{}", foreign.stderr);
    let push = ws.try_git(".", &["init", "-q", "z"]).await?;
    assert!(push.ok);
    ws.write("z/f", "f")?;
    ws.git("z", &["add", "f"]).await?;
    ws.git("z", &["commit", "-qm", "f"]).await?;
    let foreign_push = ws
        .try_git(
            "z",
            &[
                "push",
                &http_remote(&base, &bob.token, &alice.username, "site"),
                "HEAD:master",
            ],
        )
        .await?;
    assert!(!foreign_push.ok);
    assert!(
        foreign_push.stderr.contains("not found"),
        "{}",
        foreign_push.stderr
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_v2_and_gzip_request_bodies_work() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let sha = api
        .post(
            &format!("/apps/{}/changeset", app["id"].as_str().unwrap()),
            &alice,
            json!({"message": "init", "changes": {"a.txt": "a"}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let base_path = format!("/{}/site.git", alice.username);

    let (status, headers, body) = raw(
        &api,
        Request::get(format!("{base_path}/info/refs?service=git-upload-pack"))
            .header("authorization", basic(&alice.token))
            .header("git-protocol", "version=2")
            .body(Body::empty())?,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["content-type"],
        "application/x-git-upload-pack-advertisement"
    );
    assert!(
        body.starts_with(b"000eversion 2\n"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    // A v2 ls-refs command, gzip-compressed as git sends large bodies.
    let request = b"0014command=ls-refs\n00010000";
    let mut gz = flate2_write(request)?;
    gz.flush()?;
    let (status, headers, body) = raw(
        &api,
        Request::post(format!("{base_path}/git-upload-pack"))
            .header("authorization", basic(&alice.token))
            .header("git-protocol", "version=2")
            .header("content-type", "application/x-git-upload-pack-request")
            .header("content-encoding", "gzip")
            .body(Body::from(gz.get_ref().clone()))?,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        headers.get("content-encoding").is_none(),
        "responses are never compressed"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains(&format!("{sha} refs/heads/master")), "{text}");

    // The git client itself over v2.
    let base = api.serve().await?;
    let ws = Workspace::new()?;
    let listed = ws
        .git(
            ".",
            &[
                "-c",
                "protocol.version=2",
                "ls-remote",
                &http_remote(&base, &alice.token, &alice.username, "site"),
            ],
        )
        .await?;
    assert!(listed.contains(&sha), "{listed}");
    Ok(())
}

/// Gzip-compresses `data` with the gzip program, as a stand-in for git's own compression.
fn flate2_write(data: &[u8]) -> Result<std::io::Cursor<Vec<u8>>> {
    let mut child = std::process::Command::new("gzip")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("gzip has no stdin"))?
        .write_all(data)?;
    let out = child.wait_with_output()?;
    Ok(std::io::Cursor::new(out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_keys_reach_the_same_repository_and_nothing_else() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let base = api.serve().await?;
    let port = api.serve_ssh().await?;
    let mut ws = Workspace::new()?;
    let alice_key = ws.ssh_key("alice_key").await?;
    let bob_key = ws.ssh_key("bob_key").await?;
    ws.ssh_key("stranger_key").await?;

    let added = api
        .post(
            "/ssh-keys",
            &alice,
            json!({"public_key": alice_key, "label": "laptop"}),
        )
        .await
        .expect(200, None);
    assert!(
        added["fingerprint_sha256"]
            .as_str()
            .unwrap()
            .starts_with("SHA256:")
    );
    assert_eq!(added["label"], "laptop");
    assert_eq!(added["api_login"], false);
    api.post("/ssh-keys", &bob, json!({"public_key": bob_key}))
        .await
        .expect(200, None);

    let ssh_remote = format!("ssh://git@127.0.0.1:{port}/{}/site.git", alice.username);
    ws.ssh_command = Some(ws.ssh_command_for("alice_key", port));
    let cloned = ws.try_git(".", &["clone", &ssh_remote, "one"]).await?;
    assert!(cloned.ok, "{}", cloned.stderr);
    ws.write("one/README.md", "over ssh\n")?;
    ws.git("one", &["add", "-A"]).await?;
    ws.git("one", &["commit", "-qm", "ssh"]).await?;
    ws.git("one", &["push", "-q", "origin", "HEAD:master"])
        .await?;
    let pushed = ws.git("one", &["rev-parse", "HEAD"]).await?;

    // HTTP sees the SSH push; an HTTP push is fetched over SSH (protocol v2 included).
    let http = http_remote(&base, &alice.token, &alice.username, "site");
    ws.git(".", &["clone", "-q", &http, "two"]).await?;
    assert_eq!(ws.git("two", &["rev-parse", "HEAD"]).await?, pushed);
    ws.write("two/README.md", "over http\n")?;
    ws.git("two", &["commit", "-qam", "http"]).await?;
    ws.git("two", &["push", "-q", "origin", "HEAD:master"])
        .await?;
    ws.git(
        "one",
        &[
            "-c",
            "protocol.version=2",
            "pull",
            "-q",
            "--ff-only",
            "origin",
            "master",
        ],
    )
    .await?;
    assert_eq!(ws.read("one/README.md")?, b"over http\n");
    let tree = api
        .get(&format!("/apps/{app_id}/tree"), &alice)
        .await
        .expect(200, None);
    assert_eq!(
        tree["sha"],
        ws.git("one", &["rev-parse", "HEAD"]).await?.trim()
    );

    // No shell, no other command.
    let shell = ws.ssh("alice_key", port, &["git@127.0.0.1"]).await?;
    assert!(!shell.ok);
    assert!(shell.stderr.contains("no shell"), "{}", shell.stderr);
    let other = ws
        .ssh("alice_key", port, &["git@127.0.0.1", "cat /etc/passwd"])
        .await?;
    assert!(!other.ok);
    assert!(
        other
            .stderr
            .contains("only git-upload-pack and git-receive-pack"),
        "{}",
        other.stderr
    );
    assert!(!other.stdout.contains("root:"));

    // Bob's key finds no repository of Alice's; an unregistered key gets in nowhere.
    ws.ssh_command = Some(ws.ssh_command_for("bob_key", port));
    let foreign = ws.try_git(".", &["clone", &ssh_remote, "three"]).await?;
    assert!(!foreign.ok);
    assert!(foreign.stderr.contains("not found"), "{}", foreign.stderr);
    let foreign_push = ws
        .try_git("one", &["push", &ssh_remote, "HEAD:refs/heads/evil"])
        .await?;
    assert!(!foreign_push.ok);
    ws.ssh_command = Some(ws.ssh_command_for("stranger_key", port));
    let stranger = ws.try_git(".", &["clone", &ssh_remote, "four"]).await?;
    assert!(!stranger.ok);
    assert!(
        stranger.stderr.contains("Permission denied"),
        "{}",
        stranger.stderr
    );

    // A deleted key stops working at once.
    let listed = api.get("/ssh-keys", &alice).await.expect(200, None);
    let keys = listed["ssh_keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    let key_id = keys[0]["id"].as_str().unwrap();
    api.delete(&format!("/ssh-keys/{key_id}"), &alice)
        .await
        .expect(204, None);
    ws.ssh_command = Some(ws.ssh_command_for("alice_key", port));
    let revoked = ws.try_git(".", &["ls-remote", &ssh_remote]).await?;
    assert!(!revoked.ok);
    Ok(())
}

#[tokio::test]
async fn ssh_key_routes_follow_the_rules() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    let ws = Workspace::new()?;
    let key = ws.ssh_key("k").await?;

    api.post("/ssh-keys", &alice, json!({"public_key": "ssh-rsa AAAA"}))
        .await
        .expect(400, Some("bad_request"));
    api.post(
        "/ssh-keys",
        &alice,
        json!({"public_key": key, "label": "x".repeat(65)}),
    )
    .await
    .expect(400, Some("bad_request"));
    let deploy_only = api
        .token(alice.id, &["deploy:*".to_owned()], false, None)
        .await?;
    api.call(
        axum::http::Method::POST,
        "/ssh-keys",
        Some(&deploy_only),
        Some(json!({"public_key": key})),
    )
    .await
    .expect(403, Some("scope_denied"));
    // api_login needs email:bind or a verified address (alice has neither).
    api.post(
        "/ssh-keys",
        &alice,
        json!({"public_key": key, "api_login": true}),
    )
    .await
    .expect(409, Some("conflict"));
    let added = api
        .post("/ssh-keys", &alice, json!({"public_key": key}))
        .await
        .expect(200, None);
    assert_eq!(
        added["label"], "k",
        "the key's comment is the default label"
    );
    assert!(
        added["public_key"]
            .as_str()
            .unwrap()
            .starts_with("ssh-ed25519 ")
    );
    // A key belongs to one account.
    api.post("/ssh-keys", &alice, json!({"public_key": key}))
        .await
        .expect(409, Some("conflict"));
    api.post("/ssh-keys", &bob, json!({"public_key": key}))
        .await
        .expect(409, Some("conflict"));
    // Bob neither sees nor deletes it.
    let bobs = api.get("/ssh-keys", &bob).await.expect(200, None);
    assert_eq!(bobs["ssh_keys"].as_array().unwrap().len(), 0);
    let id = added["id"].as_str().unwrap();
    api.delete(&format!("/ssh-keys/{id}"), &bob)
        .await
        .expect(404, Some("not_found"));
    api.delete(&format!("/ssh-keys/{id}"), &alice)
        .await
        .expect(204, None);
    api.delete(&format!("/ssh-keys/{id}"), &alice)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

/// `len` bytes that do not compress, so a pack carrying them is about as large.
fn incompressible(len: usize) -> Vec<u8> {
    (0..len.div_ceil(16))
        .flat_map(|_| uuid::Uuid::new_v4().into_bytes())
        .take(len)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_over_the_size_limit_are_refused_with_a_message_git_shows() -> Result<()> {
    const LIMIT: u64 = 256 * 1024;
    let limits = slipway_core::state::Limits {
        git_max_push_bytes: LIMIT,
        ..Default::default()
    };
    let api = TestApi::start().await?.with_limits(limits);
    let alice = api.user("alice", "basic").await?;
    api.create_app(&alice, "site", "static").await;
    let base = api.serve().await?;
    let port = api.serve_ssh().await?;
    let mut ws = Workspace::new()?;
    let key = ws.ssh_key("alice_key").await?;
    api.post("/ssh-keys", &alice, json!({"public_key": key}))
        .await
        .expect(200, None);
    ws.ssh_command = Some(ws.ssh_command_for("alice_key", port));
    let http = http_remote(&base, &alice.token, &alice.username, "site");
    let ssh = format!("ssh://git@127.0.0.1:{port}/{}/site.git", alice.username);

    ws.git(".", &["init", "-q", "-b", "master", "w"]).await?;
    ws.write("w/small.txt", "fits\n")?;
    ws.git("w", &["add", "-A"]).await?;
    ws.git("w", &["commit", "-qm", "small"]).await?;
    ws.git("w", &["push", "-q", &http, "HEAD:master"]).await?;
    let head = ws.git("w", &["rev-parse", "HEAD"]).await?;

    // 1 MiB goes in one HTTP request with a Content-Length; 3 MiB is streamed in chunks (git's postBuffer is
    // 1 MiB); SSH streams either way. Each is refused by git on the server, in words the client prints.
    for (remote, size) in [(&http, 1 << 20), (&http, 3 << 20), (&ssh, 1 << 20)] {
        let transport = if remote == &ssh { "ssh" } else { "http" };
        ws.write("w/big.bin", incompressible(size))?;
        ws.git("w", &["add", "-A"]).await?;
        ws.git("w", &["commit", "-qm", &format!("{size} bytes")])
            .await?;
        let push = ws.try_git("w", &["push", remote, "HEAD:master"]).await?;
        assert!(!push.ok, "{transport} push of {size} bytes was accepted");
        assert!(
            push.stderr.contains("pack exceeds maximum allowed size"),
            "{transport} push of {size} bytes: {}",
            push.stderr
        );
        let remote_head = ws
            .git("w", &["ls-remote", &http, "refs/heads/master"])
            .await?;
        assert!(
            remote_head.starts_with(head.trim()),
            "the branch did not move: {remote_head}"
        );
        ws.git("w", &["reset", "-q", "--hard", "HEAD~1"]).await?;
    }

    // Under the limit, pushes go through on both transports.
    for remote in [&http, &ssh] {
        ws.write("w/small.txt", format!("still fits {remote}\n"))?;
        ws.git("w", &["commit", "-qam", "small again"]).await?;
        ws.git("w", &["push", "-q", remote, "HEAD:master"]).await?;
    }
    Ok(())
}
