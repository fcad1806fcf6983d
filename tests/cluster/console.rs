//! The web console against the real API, Postgres, upstream OpenID Connect provider (hack/oidc.sh) and SMTP server
//! (hack/smtp.sh), on the test control plane: a real headless Chromium signs people in, creates an app, follows a
//! deploy's log to `success`, mints a token from `/tokens?label=ci` that curl then uses and that stops working when
//! revoked, shares the app with a member who sees it read-only where the role says so, and moves the app to another
//! account. A client that keeps cookies checks what a browser would not show: the cookies' attributes, the CSRF
//! refusals, the redirect of a signed-out visitor, another person's app answered 404. Screenshots of the main views
//! are written to `target/console-screenshots/`.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use axum::http::Method;
use fantoccini::{Client, Locator};
use serde_json::json;
use support::browser::upstream_user;
use support::console::{TestConsole, next_sign_in_code, screenshot_dir, sign_in_codes_mailed_to};
use support::{TestApi, User};

/// A user with `address` as the verified address of their account.
async fn person(api: &TestApi, prefix: &str) -> Result<(User, String)> {
    let user = api.user(prefix, "basic").await?;
    let address = format!("{}@people.test", user.username);
    slipway_store::db::users::set_verified_email(api.state.db(), &user.username.parse()?, &address)
        .await?;
    Ok((user, address))
}

pub(crate) use support::console::csrf_in;

#[tokio::test]
async fn sessions_are_host_only_cookies_and_every_write_needs_the_sessions_csrf_token() -> Result<()>
{
    let mut api = TestApi::start().await?;
    let console = TestConsole::start(&mut api).await?;
    let (ada, ada_address) = person(&api, "ada").await?;
    let (bo, _) = person(&api, "bo").await?;
    let bos_app = api.create_app(&bo, "secret", "static").await;

    // A signed-out visitor is sent to sign in, and comes back where they were going.
    let client = console.client()?;
    let page = client.get(&console.url("/apps/x?y=1")).await?;
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location.as_deref(),
        Some(
            console
                .url("/sign-in?return_to=%2Fapps%2Fx%3Fy%3D1")
                .as_str()
        )
    );
    let csp = page.headers["content-security-policy"].to_str()?;
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );

    // A sign-in form posted without its cookie's value is refused, before any mail goes out.
    let refused = client
        .post_form(
            &console.url("/sign-in/email"),
            &[("csrf", "x"), ("email", &ada_address)],
        )
        .await?;
    assert_eq!(refused.status, 403);

    let session_cookie = console.sign_in_by_code(&client, &ada_address).await?;
    let csrf = csrf_in(&client.get(&console.url("/apps")).await?.text);
    assert!(
        session_cookie.starts_with("__Host-slipway_session="),
        "{session_cookie}"
    );
    for attribute in ["; Path=/", "; Secure", "; HttpOnly", "; SameSite=Lax"] {
        assert!(
            session_cookie.contains(attribute),
            "{attribute} in {session_cookie}"
        );
    }
    assert!(!session_cookie.contains("Domain="), "{session_cookie}");

    // Writes: without the token, with another, from another site, and not as a form: all 403, nothing made.
    let create = |csrf: String| {
        vec![
            ("csrf".to_owned(), csrf),
            ("name".into(), "made".into()),
            ("template".into(), "static".into()),
        ]
    };
    for (form, headers) in [
        (create(String::new()), vec![]),
        (create("0".repeat(48)), vec![]),
        (create(csrf.clone()), vec![("origin", "https://evil.test")]),
        (create(csrf.clone()), vec![("sec-fetch-site", "cross-site")]),
    ] {
        let url: reqwest::Url = console.url("/apps").parse()?;
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let mut req = client
            .http
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let answer = client.send(req, &url).await?;
        assert_eq!(answer.status, 403, "{form:?}: {}", answer.text);
    }
    let apps = api.get("/apps", &ada).await.expect(200, None);
    assert_eq!(
        apps["apps"].as_array().unwrap().len(),
        0,
        "nothing was made"
    );

    // With it, from the console itself, the app is made.
    let made = client
        .post_form(
            &console.url("/apps"),
            &[("csrf", &csrf), ("name", "made"), ("template", "static")],
        )
        .await?;
    assert_eq!(made.status, 303, "{}", made.text);
    let made = api.get("/apps", &ada).await.expect(200, None)["apps"][0].clone();
    assert_eq!(made["name"], "made");

    // A refused form comes back on its own page: the route's status and words above the form, and the fields as
    // typed, so only the wrong one needs typing again.
    let again = client
        .post_form(
            &console.url("/apps"),
            &[("csrf", &csrf), ("name", "made"), ("template", "docker")],
        )
        .await?;
    assert_refused(
        &again,
        400,
        "create-app",
        &[
            r#"data-refused="create-app">An app named made already exists.</p>"#,
            r#"<input name="name" value="made""#,
            r#"<option value="docker" selected>"#,
        ],
    );
    // A secret's value is the one field not sent back.
    let env_page = format!("/apps/{}/env", made["id"].as_str().unwrap());
    let secret = client
        .post_form(
            &console.url(&env_page),
            &[
                ("csrf", &csrf),
                ("key", "lower_case"),
                ("value", "hunter2-typed"),
                ("kind", "secret"),
                ("channel_id", ""),
            ],
        )
        .await?;
    assert_refused(
        &secret,
        400,
        "set-env",
        &[
            r#"<input name="key" value="lower_case""#,
            r#"<option value="secret" selected>"#,
        ],
    );
    assert!(!secret.text.contains("hunter2-typed"), "{}", secret.text);

    // Another person's app is not found, exactly like one that does not exist.
    let theirs = client
        .get(&console.url(&format!("/apps/{}", bos_app["id"].as_str().unwrap())))
        .await?;
    let missing = client
        .get(&console.url(&format!("/apps/{}", uuid::Uuid::new_v4())))
        .await?;
    assert_eq!(theirs.status, 404);
    assert_eq!(missing.status, 404);
    assert_eq!(theirs.text, missing.text);

    // Signing out revokes the session's token: the cookie copied before signs nobody in.
    let stolen = client
        .cookie(support::console::HOST, "__Host-slipway_session")
        .unwrap();
    let out = client
        .post_form(&console.url("/sign-out"), &[("csrf", &csrf)])
        .await?;
    assert_eq!(out.status, 303);
    client.set(support::console::HOST, "__Host-slipway_session", &stolen);
    let after = client.get(&console.url("/apps")).await?;
    assert_eq!(after.status, 303, "the revoked session is signed out");
    Ok(())
}

#[tokio::test]
async fn an_app_gets_channels_settings_a_journal_and_its_deletion_from_its_page() -> Result<()> {
    let mut api = TestApi::start().await?;
    let console = TestConsole::start(&mut api).await?;
    let (ada, ada_address) = person(&api, "ada").await?;
    let client = console.client()?;
    console.sign_in_by_code(&client, &ada_address).await?;
    let csrf = csrf_in(&client.get(&console.url("/apps")).await?.text);
    let app = api.create_app(&ada, "life", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let page = format!("/apps/{app_id}");
    let post = |path: String, fields: Vec<(&'static str, String)>| {
        let (client, console, csrf) = (&client, &console, csrf.clone());
        async move {
            let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
            form.extend(fields.iter().map(|(k, v)| (*k, v.as_str())));
            client.post_form(&console.url(&path), &form).await
        }
    };
    let app_path = format!("/apps/{app_id}");
    let app_now = || api.get(&app_path, &ada);

    // A channel bound to a branch is added from the app's page, which then lands on the channel's.
    let made = post(
        format!("{page}/channels"),
        vec![("name", "staging".into()), ("branch", "next".into())],
    )
    .await?;
    assert_eq!(made.status, 303, "{}", made.text);
    let staging = app_now().await.expect(200, None)["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "staging")
        .cloned()
        .context("staging was made")?;
    assert_eq!(staging["git_ref_binding"], "branch:next");
    let staging_id = staging["id"].as_str().unwrap();
    assert_eq!(
        made.location.as_deref(),
        Some(
            console
                .url(&format!(
                    "{page}/channels/{staging_id}?done=channel-created"
                ))
                .as_str()
        )
    );
    // A refused one comes back on the app's page with the form as typed.
    let refused = post(
        format!("{page}/channels"),
        vec![("name", "prod".into()), ("branch", "other".into())],
    )
    .await?;
    assert_refused(
        &refused,
        400,
        "create-channel",
        &[r#"<input name="branch" value="other""#],
    );

    // The access toggles: on, then off again, and the agent-access override back to the account's default.
    for (setting, value, field, expected) in [
        (
            "external_blob_access_enabled",
            "on",
            "external_blob_access_enabled",
            json!(true),
        ),
        (
            "external_blob_access_enabled",
            "off",
            "external_blob_access_enabled",
            json!(false),
        ),
        (
            "agent_protected_actions_enabled",
            "on",
            "agent_protected_actions_enabled",
            json!(true),
        ),
        (
            "agent_protected_actions_enabled",
            "default",
            "agent_protected_actions_enabled",
            json!(null),
        ),
    ] {
        let saved = post(
            format!("{page}/settings"),
            vec![("setting", setting.into()), ("value", value.into())],
        )
        .await?;
        assert_eq!(saved.status, 303, "{setting}={value}: {}", saved.text);
        assert_eq!(
            app_now().await.expect(200, None)[field],
            expected,
            "{setting}={value}"
        );
    }
    let unknown = post(
        format!("{page}/settings"),
        vec![("setting", "owner".into()), ("value", "on".into())],
    )
    .await?;
    assert_refused(&unknown, 400, "settings", &[]);

    // How to connect to a channel's database from outside: what stands in the way while the app's external SQL
    // access is off, then the connection string, named as the SQL listener names the channel's database.
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let connect = |channel: String| {
        let (client, console, page) = (&client, &console, page.clone());
        async move {
            let shown = client
                .get(&console.url(&format!("{page}/channels/{channel}")))
                .await?;
            anyhow::ensure!(shown.status == 200, "{}", shown.text);
            let card = shown
                .text
                .split_once(r#"<section class="card" id="connect">"#)
                .and_then(|(_, rest)| rest.split_once("</section>"))
                .map(|(card, _)| card.to_owned())
                .context("no connect card")?;
            anyhow::Ok(card)
        }
    };
    let off = connect(prod_id.clone()).await?;
    assert!(off.contains("External SQL access is off"), "{off}");
    let on = post(
        format!("{page}/settings"),
        vec![
            ("setting", "external_db_access_enabled".into()),
            ("value", "on".into()),
        ],
    )
    .await?;
    assert_eq!(on.status, 303, "{}", on.text);
    let prod = connect(prod_id).await?;
    assert!(
        prod.contains(&format!(
            "postgresql://{}:&lt;token&gt;@{}/life?sslmode=require",
            ada.username,
            support::SQL_ADDRESS
        )),
        "{prod}"
    );
    let staging_card = connect(staging_id.to_owned()).await?;
    assert!(
        staging_card.contains(&format!(
            "@{}/life-staging?sslmode=require",
            support::SQL_ADDRESS
        )),
        "{staging_card}"
    );
    // An app named `life-staging` takes that name first, as the SQL proxy reads it: the card says so instead of
    // giving a string that reaches the other app's database.
    let shadow = api.create_app(&ada, "life-staging", "app").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let shadowed = loop {
        let card = connect(staging_id.to_owned()).await?;
        if !card.contains("postgresql://") || tokio::time::Instant::now() > deadline {
            break card;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        shadowed.contains("reaches channel <b>prod</b> of app <b>life-staging</b> first"),
        "{shadowed}"
    );
    api.delete(&format!("/apps/{}", shadow["id"].as_str().unwrap()), &ada)
        .await
        .expect(204, None);

    // A revealed secret is in the journal, with who revealed it.
    api.post(
        &format!("/apps/{app_id}/env"),
        &ada,
        json!({"key": "API_KEY", "value": "s3cret", "kind": "secret"}),
    )
    .await
    .expect(204, None);
    api.get(&format!("/apps/{app_id}/env/API_KEY/value"), &ada)
        .await
        .expect(200, None);
    let journal = client
        .get(&console.url(&format!("{page}/activity")))
        .await?;
    assert_eq!(journal.status, 200, "{}", journal.text);
    assert!(
        journal.text.contains("<code>env.reveal</code>"),
        "{}",
        journal.text
    );
    assert!(journal.text.contains(&ada.username));
    assert!(!journal.text.contains("s3cret"));

    // The channel goes behind a second click, back to the app's page.
    let gone = post(format!("{page}/channels/{staging_id}/delete"), vec![]).await?;
    assert_eq!(gone.status, 303, "{}", gone.text);
    assert!(
        !app_now().await.expect(200, None)["channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "staging"),
        "staging is deleted"
    );

    // The app goes only when its name is typed exactly.
    let mistyped = post(format!("{page}/delete"), vec![("confirm", "lif".into())]).await?;
    assert_refused(
        &mistyped,
        400,
        "delete-app",
        &[r#"<input name="confirm" value="lif""#],
    );
    app_now().await.expect(200, None);
    let deleted = post(format!("{page}/delete"), vec![("confirm", "life".into())]).await?;
    assert_eq!(deleted.status, 303, "{}", deleted.text);
    assert_eq!(
        deleted.location.as_deref(),
        Some(console.url("/apps?done=deleted").as_str())
    );
    app_now().await.expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn the_account_page_adds_and_removes_ssh_keys_and_a_refused_key_comes_back_as_typed()
-> Result<()> {
    let mut api = TestApi::start().await?;
    let console = TestConsole::start(&mut api).await?;
    let (ivy, ivy_address) = person(&api, "ivy").await?;
    let client = console.client()?;
    console.sign_in_by_code(&client, &ivy_address).await?;
    let account = client.get(&console.url("/account")).await?;
    assert_eq!(account.status, 200);
    let csrf = csrf_in(&account.text);
    assert!(
        account.text.contains(&format!(
            "git@{}:{}/&lt;app&gt;.git",
            api.state.names().git_host,
            ivy.username
        )),
        "the SSH remote: {}",
        account.text
    );
    let ws = support::git::Workspace::new()?;
    let key = ws.ssh_key("laptop").await?;
    let add = |fields: Vec<(&'static str, String)>| {
        let (client, console, csrf) = (&client, &console, csrf.clone());
        async move {
            let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
            form.extend(fields.iter().map(|(k, v)| (*k, v.as_str())));
            client
                .post_form(&console.url("/account/ssh-keys"), &form)
                .await
        }
    };

    // A key that is not ed25519 comes back with the label as typed and the route's words.
    let refused = add(vec![
        ("public_key", "ssh-rsa AAAAB3Nza".into()),
        ("label", "work laptop".into()),
    ])
    .await?;
    assert_refused(
        &refused,
        400,
        "add-ssh-key",
        &["ssh-rsa AAAAB3Nza</textarea>", r#"value="work laptop""#],
    );
    assert!(!refused.text.contains("(bad_request)"), "{}", refused.text);

    // A key is added, with API sign-in (ivy's address is verified), and the page lists it.
    let added = add(vec![
        ("public_key", key.clone()),
        ("label", "work laptop".into()),
        ("api_login", "on".into()),
    ])
    .await?;
    assert_eq!(added.status, 303, "{}", added.text);
    assert_eq!(
        added.location.as_deref(),
        Some(console.url("/account?done=key-added#ssh-keys").as_str())
    );
    let keys = api.get("/ssh-keys", &ivy).await.expect(200, None);
    let listed = keys["ssh_keys"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{keys}");
    assert_eq!(listed[0]["label"], "work laptop");
    assert_eq!(listed[0]["api_login"], true);
    let key_id = listed[0]["id"].as_str().unwrap().to_owned();
    let fingerprint = listed[0]["fingerprint_sha256"].as_str().unwrap();
    let account = client.get(&console.url("/account?done=key-added")).await?;
    assert!(account.text.contains(fingerprint), "{}", account.text);
    assert!(
        account
            .text
            .contains(&format!(r#"action="/account/ssh-keys/{key_id}/remove""#)),
        "{}",
        account.text
    );

    // The same key again: 409 from the route, the key kept in the form.
    let again = add(vec![("public_key", key.clone())]).await?;
    assert_refused(&again, 409, "add-ssh-key", &[&format!("{key}</textarea>")]);

    // Another person's key cannot be removed from ivy's session: the route's 404, the key still there.
    let (joe, _) = person(&api, "joe").await?;
    let joes = api
        .post(
            "/ssh-keys",
            &joe,
            json!({"public_key": ws.ssh_key("joe").await?}),
        )
        .await
        .expect(200, None);
    let theirs = client
        .post_form(
            &console.url(&format!(
                "/account/ssh-keys/{}/remove",
                joes["id"].as_str().unwrap()
            )),
            &[("csrf", &csrf)],
        )
        .await?;
    assert_eq!(theirs.status, 404, "{}", theirs.text);
    let joes_keys = api.get("/ssh-keys", &joe).await.expect(200, None);
    assert_eq!(joes_keys["ssh_keys"].as_array().unwrap().len(), 1);

    // Without the session's CSRF token nothing is removed.
    let forged = client
        .post_form(
            &console.url(&format!("/account/ssh-keys/{key_id}/remove")),
            &[("csrf", "0".repeat(48).as_str())],
        )
        .await?;
    assert_eq!(forged.status, 403);
    // Removed.
    let removed = client
        .post_form(
            &console.url(&format!("/account/ssh-keys/{key_id}/remove")),
            &[("csrf", &csrf)],
        )
        .await?;
    assert_eq!(removed.status, 303, "{}", removed.text);
    let keys = api.get("/ssh-keys", &ivy).await.expect(200, None);
    assert!(keys["ssh_keys"].as_array().unwrap().is_empty(), "{keys}");
    Ok(())
}

#[tokio::test]
async fn a_pasted_env_file_is_checked_whole_then_saved_and_its_channel_deployed_again() -> Result<()>
{
    let mut api = TestApi::start().await?;
    let console = TestConsole::start(&mut api).await?;
    let (kim, kim_address) = person(&api, "kim").await?;
    let _operator = api.start_operator_without_node(&kim.namespace).await?;
    let app = api.create_app(&kim, "pasted", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let channel_id = api
        .get(&format!("/apps/{app_id}"), &kim)
        .await
        .expect(200, None)["channels"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sha = api
        .commit(&kim, &app_id, json!({"index.html": "<h1>env</h1>"}))
        .await;
    let first = api
        .deploy(&kim, &app_id, &channel_id, json!({"sha": sha}))
        .await;
    let first = api
        .finished_deploy(&kim, &app_id, &channel_id, &first, Duration::from_secs(120))
        .await?;
    assert_eq!(first["status"], "success", "{first}");

    let client = console.client()?;
    console.sign_in_by_code(&client, &kim_address).await?;
    let env_page = console.url(&format!("/apps/{app_id}/env"));
    let csrf = csrf_in(&client.get(&env_page).await?.text);
    let paste = |fields: &[(&str, &str)]| {
        let mut form = vec![("csrf".to_owned(), csrf.clone())];
        form.extend(
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let (client, url) = (&client, console.url(&format!("/apps/{app_id}/env/paste")));
        async move {
            let form: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            client.post_form(&url, &form).await
        }
    };
    let listed = || async {
        let env = api
            .get(&format!("/apps/{app_id}/env"), &kim)
            .await
            .expect(200, None);
        env["env"].as_array().unwrap().len()
    };

    // A mistake on line 3 saves nothing, and the file comes back as typed with the line named.
    let typo = "# keys\r\nAPI_HOST=api.internal\r\nlower=1\r\n";
    let refused = paste(&[("dotenv", typo), ("kind", "env"), ("channel_id", "")]).await?;
    assert_refused(
        &refused,
        400,
        "paste-env",
        &[
            "Line 3: lower is not a name a variable may have",
            "API_HOST=api.internal",
        ],
    );
    assert_eq!(listed().await, 0, "nothing of a refused file is saved");
    // Refused secrets are not sent back.
    let secrets = paste(&[
        ("dotenv", "TOKEN=s3cret\nPORT=80\n"),
        ("kind", "secret"),
        ("channel_id", ""),
    ])
    .await?;
    assert_refused(&secrets, 400, "paste-env", &["PORT is reserved"]);
    assert!(
        !secrets.text.contains("s3cret"),
        "a secret is not sent back"
    );
    assert_eq!(listed().await, 0);

    // A good file, saved for the channel and deployed: the deploy's page, a new deploy of the commit the channel
    // serves. (A static site's deploys take no environment, so its snapshot is empty.)
    let file = "export GREETING=\"hello\\nworld\"\nHOME_DIR=$HOME # kept as typed\n";
    let saved = paste(&[
        ("dotenv", file),
        ("kind", "env"),
        ("channel_id", &channel_id),
        ("then", "deploy"),
    ])
    .await?;
    assert_eq!(saved.status, 303, "{}", saved.text);
    let location = saved.location.clone().unwrap_or_default();
    let deploy_id = location
        .rsplit_once("/deploys/")
        .map(|(_, id)| id.to_owned())
        .with_context(|| format!("sent to a deploy's page: {location}"))?;
    let env = api
        .get(&format!("/apps/{app_id}/env?channel_id={channel_id}"), &kim)
        .await
        .expect(200, None);
    let value = |key: &str| {
        env["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == key)
            .map(|e| e["value"].clone())
    };
    assert_eq!(value("GREETING"), Some(json!("hello\nworld")), "{env}");
    assert_eq!(value("HOME_DIR"), Some(json!("$HOME")), "{env}");
    let second = api
        .finished_deploy(
            &kim,
            &app_id,
            &channel_id,
            &deploy_id,
            Duration::from_secs(120),
        )
        .await?;
    assert_eq!(second["status"], "success", "{second}");
    let history = api
        .get(
            &format!("/apps/{app_id}/channels/{channel_id}/deploys"),
            &kim,
        )
        .await
        .expect(200, None);
    let deployed = history["deploys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["deploy_id"] == deploy_id.as_str())
        .with_context(|| format!("deploy {deploy_id} listed: {history}"))?;
    assert_eq!(deployed["git_sha"], json!(sha), "{deployed}");

    // Saved without a deploy: back to the list, which shows the app default.
    let plain = paste(&[
        ("dotenv", "APP_WIDE=1\n"),
        ("kind", "env"),
        ("channel_id", ""),
    ])
    .await?;
    assert_eq!(plain.status, 303, "{}", plain.text);
    assert_eq!(
        plain.location.as_deref(),
        Some(
            console
                .url(&format!("/apps/{app_id}/env?done=pasted"))
                .as_str()
        )
    );
    assert!(client.get(&env_page).await?.text.contains("APP_WIDE"));

    // "Save and deploy" for a channel that serves no commit yet saves and says that nothing was deployed.
    let next = api
        .post(
            &format!("/apps/{app_id}/channels"),
            &kim,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let next_id = next["id"].as_str().unwrap();
    let undeployed = paste(&[
        ("dotenv", "NEXT_ONLY=1\n"),
        ("kind", "env"),
        ("channel_id", next_id),
        ("then", "deploy"),
    ])
    .await?;
    assert_eq!(undeployed.status, 303, "{}", undeployed.text);
    let notice = client
        .get(undeployed.location.as_deref().unwrap_or_default())
        .await?;
    assert!(
        notice.text.contains("so none was deployed"),
        "{}",
        notice.text
    );
    let listed = api
        .get(&format!("/apps/{app_id}/channels/{next_id}/deploys"), &kim)
        .await
        .expect(200, None);
    assert_eq!(listed["deploys"], json!([]), "{listed}");
    Ok(())
}

/// Asserts that `page` is a form's refusal brought back to its page: `status`, the alert of the form `form`, and
/// each of `kept` (what was typed, as the page shows it).
fn assert_refused(page: &support::browser::Page, status: u16, form: &str, kept: &[&str]) {
    assert_eq!(page.status, status, "{}", page.text);
    let alert = format!(r#"role="alert" data-refused="{form}""#);
    assert!(page.text.contains(&alert), "no {alert}: {}", page.text);
    for snippet in kept {
        assert!(page.text.contains(snippet), "no {snippet}: {}", page.text);
    }
}

/// The words of a page's banner.
fn banner_text(page: &str) -> String {
    page.split_once("class=\"banner")
        .and_then(|(_, rest)| rest.split_once('>'))
        .and_then(|(_, rest)| rest.split_once("</p>"))
        .map(|(text, _)| text.to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn codes_go_only_to_verified_addresses_and_five_wrong_ones_lock_the_code() -> Result<()> {
    let mut api = TestApi::start().await?;
    let console = TestConsole::start(&mut api).await?;
    let (_, address) = person(&api, "cy").await?;
    let client = console.client()?;
    let pre = csrf_in(&client.get(&console.url("/sign-in")).await?.text);

    // An address no account has verified gets the same answer, and no mail.
    let nobody = "nobody@people.test";
    let page = client
        .post_form(
            &console.url("/sign-in/email"),
            &[("csrf", &pre), ("email", nobody)],
        )
        .await?;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("If an account has nobody@people.test"),
        "{}",
        page.text
    );
    assert!(sign_in_codes_mailed_to(&console.maildir, nobody)?.is_empty());
    let typed = client
        .post_form(
            &console.url("/sign-in/code"),
            &[("csrf", &pre), ("code", "abcdefgh")],
        )
        .await?;
    assert_eq!(typed.status, 410, "no code is pending for it");

    let sent = client
        .post_form(
            &console.url("/sign-in/email"),
            &[("csrf", &pre), ("email", &address)],
        )
        .await?;
    assert_eq!(sent.status, 200);
    let again = client
        .post_form(
            &console.url("/sign-in/email"),
            &[("csrf", &pre), ("email", &address)],
        )
        .await?;
    assert_eq!(again.status, 429, "one code a minute");
    // The same refusal for an address no account has: the spacing is the address's, not the account's.
    let nobody_again = client
        .post_form(
            &console.url("/sign-in/email"),
            &[("csrf", &pre), ("email", nobody)],
        )
        .await?;
    assert_eq!(
        nobody_again.status, 429,
        "one request a minute for any address"
    );
    assert!(
        banner_text(&again.text).contains("seconds ago"),
        "{}",
        again.text
    );
    assert_eq!(
        banner_text(&nobody_again.text).replace(nobody, "ADDRESS"),
        banner_text(&again.text).replace(address.as_str(), "ADDRESS"),
        "the same words whether or not an account has the address"
    );
    let code = next_sign_in_code(&console.maildir, &address, 0).await?;
    for left in (0..5).rev() {
        let wrong = client
            .post_form(
                &console.url("/sign-in/code"),
                &[("csrf", &pre), ("code", "zzzzzzzz")],
            )
            .await?;
        assert_eq!(wrong.status, 400);
        assert!(
            wrong.text.contains(&format!("{left} tries left")),
            "{}",
            wrong.text
        );
    }
    let locked = client
        .post_form(
            &console.url("/sign-in/code"),
            &[("csrf", &pre), ("code", &code)],
        )
        .await?;
    assert_eq!(locked.status, 429, "the right code no longer works");
    assert!(
        client
            .cookie(support::console::HOST, "__Host-slipway_session")
            .is_none()
    );
    Ok(())
}

/// The first click on a destructive action inside `within`: opens its confirmation, which sends nothing. The form
/// that does the action, and what the confirmation says.
async fn open_confirmation(
    within: &fantoccini::elements::Element,
) -> Result<(fantoccini::elements::Element, String)> {
    within
        .find(Locator::Css("details.confirm summary"))
        .await?
        .click()
        .await?;
    let form = within
        .find(Locator::Css("details.confirm[open] form"))
        .await?;
    let said = form.text().await?;
    Ok((form, said))
}

/// The second click: the button in an opened confirmation's `form`.
async fn confirm_with(form: &fantoccini::elements::Element) -> Result<()> {
    form.find(Locator::Css("button.danger"))
        .await?
        .click()
        .await?;
    Ok(())
}

/// How wide the page in `c` is (its scroll width) and how wide the viewport showing it is, in CSS pixels.
async fn widths(c: &Client) -> Result<(u64, u64)> {
    let seen = c
        .execute(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
            Vec::new(),
        )
        .await?;
    let at = |i: usize| seen[i].as_u64().context("a width");
    Ok((at(0)?, at(1)?))
}

/// Saves a screenshot of what `c` shows as `<name>.png`.
async fn screenshot(c: &Client, name: &str) -> Result<()> {
    let png = c.screenshot().await?;
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png)?;
    Ok(())
}

/// Waits for the element `css`; when it does not appear, the page is kept as `failure.png` and its text is told.
async fn wait_for(c: &Client, css: &str) -> Result<fantoccini::elements::Element> {
    match c
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await
    {
        Ok(element) => Ok(element),
        Err(e) => {
            let _ = screenshot(c, "failure").await;
            let url = c
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            let text = match c.find(Locator::Css("main")).await {
                Ok(main) => main.text().await.unwrap_or_default(),
                Err(_) => c.source().await.unwrap_or_default(),
            };
            anyhow::bail!("{css} did not appear on {url} ({e}); the page says:\n{text}")
        }
    }
}

/// Waits until the element `css` holds `text`.
async fn wait_for_text(c: &Client, css: &str, text: &str, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let now = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if now.contains(text) {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{css} still shows {now:?}, not {text:?}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Fills the form `form` (a CSS selector) with `fields` and submits it.
async fn submit(c: &Client, form: &str, fields: &[(&str, &str)]) -> Result<()> {
    for (name, value) in fields {
        let input = c
            .find(Locator::Css(&format!("{form} [name={name}]")))
            .await?;
        if input.tag_name().await? == "select" {
            input
                .find(Locator::Css(&format!("option[value='{value}']")))
                .await?
                .click()
                .await?;
        } else {
            input.clear().await?;
            input.send_keys(value).await?;
        }
    }
    c.find(Locator::Css(&format!("{form} button[type=submit]")))
        .await?
        .click()
        .await?;
    Ok(())
}

/// Signs in through the upstream provider as the person whose address is `address`.
async fn sign_in_upstream(c: &Client, console: &TestConsole, address: &str) -> Result<()> {
    upstream_user(
        &console.issuer,
        address,
        json!({"email": address, "email_verified": true}),
    )
    .await?;
    c.goto(&console.url("/apps")).await?;
    ensure!(
        c.current_url().await?.path() == "/sign-in",
        "a signed-out visitor is sent to sign in"
    );
    c.find(Locator::Css("#sign-in-upstream"))
        .await?
        .click()
        .await?;
    wait_for(c, "input[name=sub]")
        .await?
        .send_keys(address)
        .await?;
    c.find(Locator::Css("button:not([name=action])"))
        .await?
        .click()
        .await?;
    wait_for(c, "#create-app").await?;
    ensure!(c.current_url().await?.path() == "/apps");
    Ok(())
}

/// Signs out in the browser.
async fn sign_out(c: &Client) -> Result<()> {
    c.find(Locator::Css("form[action='/sign-out'] button"))
        .await?
        .click()
        .await?;
    wait_for(c, "form[action='/sign-in/email']").await?;
    Ok(())
}

#[tokio::test]
async fn a_person_runs_an_app_from_the_console_in_chromium() -> Result<()> {
    let mut api = TestApi::start().await?;
    // The account page shows usage, which needs the data server to measure databases.
    support::postgres::attach(&mut api)?;
    let console = TestConsole::start(&mut api).await?;
    let base = api.serve().await?;
    let (ann, ann_address) = person(&api, "ann").await?;
    let (ben, _) = person(&api, "ben").await?;
    let (cat, cat_address) = person(&api, "cat").await?;
    let bens_app = api.create_app(&ben, "private", "static").await;
    let _ann_operator = api.start_operator_without_node(&ann.namespace).await?;
    let _ben_operator = api.start_operator_without_node(&ben.namespace).await?;
    let chromium = support::chromium::Chromium::start(&console.host_rule()).await?;
    let c = &chromium.client;
    c.set_window_size(1366, 1000).await?;

    // Sign in at the provider; the signed-out visitor was sent to the sign-in page first.
    c.goto(&console.url("/sign-in")).await?;
    screenshot(c, "sign-in").await?;
    sign_in_upstream(c, &console, &ann_address).await?;
    screenshot(c, "apps").await?;

    // Create a static app; the console lands on its page.
    submit(
        c,
        "#create-app",
        &[("name", "site"), ("template", "static")],
    )
    .await?;
    wait_for(c, "#transfer").await?;
    let app_id = c
        .current_url()
        .await?
        .path()
        .strip_prefix("/apps/")
        .context("on the app's page")?
        .to_owned();
    let sha = api
        .commit(
            &ann,
            &app_id,
            json!({"index.html": "<h1>hello from the console</h1>"}),
        )
        .await;
    // A new app says how to store its code, with its own remote.
    let repo = api
        .get(&format!("/apps/{app_id}"), &ann)
        .await
        .expect(200, None)["repo_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let commands = c
        .find(Locator::Css("#first-push #push-commands"))
        .await?
        .text()
        .await?;
    assert_eq!(
        commands,
        format!("git remote add slipway {repo}\ngit push slipway HEAD:master")
    );
    let state = c.find(Locator::Css("table .status")).await?.text().await?;
    assert_eq!(state, "not deployed", "a channel nothing was deployed to");
    screenshot(c, "app").await?;

    // Deploy prod and watch the log reach success. A static site has no earlier image to rewind to, so no rewind
    // is offered.
    c.find(Locator::Css("table a[href*='/channels/']"))
        .await?
        .click()
        .await?;
    wait_for(c, "#deploy").await?;
    assert!(
        !c.source().await?.contains("/rewind"),
        "no rewind on a static app"
    );
    submit(c, "#deploy", &[("ref", "master")]).await?;
    wait_for(c, "#deploy-log").await?;
    wait_for_text(c, "#deploy-status", "live", Duration::from_secs(120)).await?;
    let log = c.find(Locator::Css("#deploy-log")).await?.text().await?;
    assert!(!log.is_empty(), "the log is shown");
    screenshot(c, "deploy").await?;

    // A second commit goes live; then the first comes back from its row in the history, after a confirmation.
    let channel_id = api
        .get(&format!("/apps/{app_id}"), &ann)
        .await
        .expect(200, None)["channels"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let channel_page = console.url(&format!("/apps/{app_id}/channels/{channel_id}"));
    // The hostname links to the app, over HTTPS on the port apps answer at.
    c.goto(&channel_page).await?;
    // Live, and healthy: a static site has no container to fail.
    let state = c
        .find(Locator::Css("#channel-status"))
        .await?
        .text()
        .await?;
    assert_eq!(state, "live healthy", "{state}");
    // The trail leads back to the apps and the app; the channel is the current page.
    let trail = c.find_all(Locator::Css("nav.crumbs li")).await?;
    assert_eq!(trail.len(), 3);
    assert_eq!(
        c.find(Locator::Css("nav.crumbs [aria-current='page']"))
            .await?
            .text()
            .await?,
        "prod"
    );
    let host = c.find(Locator::Css("#hostname a")).await?;
    let hostname = host.text().await?;
    assert!(hostname.ends_with(support::APP_DOMAIN), "{hostname}");
    assert_eq!(
        host.attr("href").await?,
        Some(format!(
            "https://{hostname}:{}/",
            support::console::APPS_PORT
        ))
    );
    let second = api
        .commit(&ann, &app_id, json!({"index.html": "<h1>second</h1>"}))
        .await;
    c.goto(&channel_page).await?;
    submit(c, "#deploy", &[("ref", &second)]).await?;
    wait_for_text(c, "#deploy-status", "live", Duration::from_secs(120)).await?;
    c.goto(&channel_page).await?;
    let first_row = c
        .find(Locator::XPath(&format!("//tr[.//code[@title='{sha}']]")))
        .await?;
    assert_eq!(
        first_row
            .find(Locator::Css(".status"))
            .await?
            .text()
            .await?,
        "superseded",
        "a deploy a later one replaced"
    );
    let (confirm, said) = open_confirmation(&first_row).await?;
    assert!(
        said.contains(&format!("A new deploy of {}", &sha[..12])),
        "{said}"
    );
    let channel_path = format!("/apps/{app_id}/channels/{channel_id}");
    assert_eq!(
        api.get(&channel_path, &ann).await.expect(200, None)["current_sha"],
        json!(second),
        "the first click deployed nothing"
    );
    screenshot(c, "rollback-confirm").await?;
    confirm_with(&confirm).await?;
    wait_for_text(c, "#deploy-status", "live", Duration::from_secs(120)).await?;
    assert_eq!(
        api.get(&channel_path, &ann).await.expect(200, None)["current_sha"],
        json!(sha),
        "rolled back to the first commit"
    );

    let deploy_path = c.current_url().await?.path().to_owned();

    // The channel page keeps itself current: a deploy made elsewhere shows up without a reload.
    c.goto(&channel_page).await?;
    c.execute("document.body.dataset.stayed = 'yes'", vec![])
        .await?;
    api.deploy(&ann, &app_id, &channel_id, json!({"sha": second}))
        .await;
    wait_for_text(c, "#channel-facts", &second[..12], Duration::from_secs(120)).await?;
    assert_eq!(
        c.execute("return document.body.dataset.stayed", vec![])
            .await?,
        json!("yes"),
        "the page was not reloaded"
    );
    // Back to the first commit, which the transfer below expects the channel to serve.
    let back = api
        .deploy(&ann, &app_id, &channel_id, json!({"sha": sha}))
        .await;
    let back = api
        .finished_deploy(&ann, &app_id, &channel_id, &back, Duration::from_secs(120))
        .await?;
    assert_eq!(back["status"], "success", "{back}");

    // The deploy-time graph draws a bar for each finished deploy the API lists (up to twenty), coloured by outcome.
    let history = api
        .get(&format!("{channel_path}/deploys"), &ann)
        .await
        .expect(200, None);
    let finished = |outcome: &str| {
        history["deploys"].as_array().map_or(0, |all| {
            all.iter().filter(|d| d["status"] == outcome).count()
        })
    };
    assert!(finished("success") >= 3, "{history}");
    c.goto(&channel_page).await?;
    wait_for(c, "#deploy-times").await?;
    screenshot(c, "channel").await?;
    let drawn =
        |css: &'static str| async move { anyhow::Ok(c.find_all(Locator::Css(css)).await?.len()) };
    assert_eq!(
        drawn("#deploy-times rect.bar-success").await?,
        finished("success")
    );
    assert_eq!(
        drawn("#deploy-times rect.bar-failed").await?,
        finished("failed")
    );
    let said = c
        .find(Locator::Css("#deploy-times svg"))
        .await?
        .attr("aria-label")
        .await?
        .unwrap_or_default();
    assert!(
        said.starts_with(&format!(
            "The last {} finished deploys took",
            finished("success") + finished("failed")
        )),
        "{said}"
    );
    // The account page shows the databases' share of the plan's soft cap, and the bandwidth of the last 30 days a
    // bar a day: the 3 KiB an edge reports for Ann now is the busiest day.
    slipway_store::db::bandwidth::add(api.state.db(), &[(ann.username.clone(), 3072)]).await?;
    c.goto(&console.url("/account")).await?;
    let meter = wait_for(c, "#storage-meter").await?;
    assert!(
        meter
            .attr("aria-label")
            .await?
            .is_some_and(|l| l.ends_with("% used")),
        "the meter says its share"
    );
    assert_eq!(drawn("#bandwidth-days rect.bar-sent").await?, 30);
    let said = c
        .find(Locator::Css("#bandwidth-days svg"))
        .await?
        .attr("aria-label")
        .await?
        .unwrap_or_default();
    assert!(said.starts_with("3.0 KiB sent from "), "{said}");
    assert!(said.ends_with(", sent 3.0 KiB."), "{said}");

    // At a phone's width no page scrolls sideways.
    c.set_window_size(390, 844).await?;
    for (name, path) in [
        ("apps", "/apps".to_owned()),
        ("app", format!("/apps/{app_id}")),
        ("channel", format!("/apps/{app_id}/channels/{channel_id}")),
        ("deploy", deploy_path),
        ("env", format!("/apps/{app_id}/env")),
        ("tokens", "/tokens".to_owned()),
        ("account", "/account".to_owned()),
    ] {
        c.goto(&console.url(&path)).await?;
        wait_for(c, "h1").await?;
        let (page, viewport) = widths(c).await?;
        assert!(
            viewport <= 400,
            "the window is {viewport} px wide, not a phone's"
        );
        assert!(
            page <= viewport,
            "{path} is {page} px wide in a {viewport} px viewport"
        );
        screenshot(c, &format!("{name}-390")).await?;
    }
    c.set_window_size(1366, 1000).await?;
    // Every page names the console's icon, which is served.
    let icon = c
        .find(Locator::Css("link[rel=icon]"))
        .await?
        .attr("href")
        .await?;
    assert_eq!(icon.as_deref(), Some("/static/favicon.svg"));
    c.goto(&console.url("/static/favicon.svg")).await?;
    assert!(
        c.source().await?.contains("<svg"),
        "the icon is an SVG image"
    );

    // A secret: hidden in the list, shown once through the reveal route, which journals it.
    c.goto(&console.url(&format!("/apps/{app_id}/env"))).await?;
    submit(
        c,
        "#set-env",
        &[("key", "API_KEY"), ("value", "hunter2"), ("kind", "secret")],
    )
    .await?;
    wait_for(c, "button.quiet").await?;
    assert!(
        !c.source().await?.contains("hunter2"),
        "a secret's value is not in the list"
    );
    screenshot(c, "env").await?;
    c.find(Locator::XPath("//button[text()='Reveal']"))
        .await?
        .click()
        .await?;
    wait_for_text(c, "#revealed", "hunter2", Duration::from_secs(10)).await?;
    let journal = api
        .get(&format!("/apps/{app_id}/activity"), &ann)
        .await
        .expect(200, None);
    assert!(journal.to_string().contains("env.reveal"), "{journal}");

    // A token from /tokens?label=ci: shown once, works with curl, stops working when revoked.
    c.goto(&console.url("/tokens?label=ci")).await?;
    let label = c
        .find(Locator::Css("#token-label"))
        .await?
        .prop("value")
        .await?;
    assert_eq!(label.as_deref(), Some("ci"));
    c.find(Locator::Css("#mint-token button[type=submit]"))
        .await?
        .click()
        .await?;
    let token = c
        .wait()
        .for_element(Locator::Css("#new-token"))
        .await?
        .text()
        .await?;
    assert!(token.starts_with("svc_"), "{token}");
    c.find(Locator::Css("#copy-token")).await?;
    let curl = |token: String| {
        let url = format!("{base}/apps");
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {token}"))
                .arg(url)
                .output()
                .await?;
            anyhow::Ok(String::from_utf8(out.stdout)?)
        }
    };
    assert_eq!(curl(token.clone()).await?, "200");
    c.goto(&console.url("/tokens")).await?;
    let row = c
        .find(Locator::XPath(
            "//tr[.//span[@class='token-label' and text()='ci']]",
        ))
        .await?;
    let listed = row.text().await?;
    assert!(listed.contains("console"), "{listed}");
    // Times read relative to now, the exact time kept as their title; the navigation marks the section.
    let minted = row.find(Locator::Css("time")).await?;
    let said = minted.text().await?;
    assert!(said == "just now" || said.ends_with(" ago"), "{said}");
    let exact = minted.attr("title").await?.unwrap_or_default();
    assert!(exact.ends_with(" UTC"), "{exact}");
    let mut marked = Vec::new();
    for link in c.find_all(Locator::Css("nav a[aria-current=page]")).await? {
        marked.push(link.text().await?);
    }
    assert_eq!(marked, ["Tokens"]);
    screenshot(c, "tokens").await?;
    // Revoking takes a second click: the first only says what it will do.
    let (confirm, said) = open_confirmation(&row).await?;
    assert!(said.contains("“ci” is refused from now on"), "{said}");
    assert_eq!(
        curl(token.clone()).await?,
        "200",
        "the first click revoked nothing"
    );
    screenshot(c, "tokens-revoke-confirm").await?;
    confirm_with(&confirm).await?;
    wait_for(c, ".banner.ok").await?;
    assert_eq!(curl(token).await?, "401");

    // Sharing with nobody says so in words; then share the app with cat as a member. Deployed, the app no longer
    // says how to push a first commit.
    c.goto(&console.url(&format!("/apps/{app_id}"))).await?;
    wait_for(c, "#add-member").await?;
    assert!(c.find(Locator::Css("#first-push")).await.is_err());
    let state = c.find(Locator::Css("table .status")).await?.text().await?;
    assert_eq!(state, "live", "the channel serves its deploy");
    submit(
        c,
        "#add-member",
        &[("username", "nobody-here"), ("role", "admin")],
    )
    .await?;
    let refusal = wait_for(c, "[data-refused=add-member]")
        .await?
        .text()
        .await?;
    assert_eq!(refusal, "No account is named \"nobody-here\".");
    // It came back on the app's page with what was typed: the name to correct, the role as picked.
    let kept = |name: &'static str| async move {
        c.find(Locator::Css(&format!("#add-member [name={name}]")))
            .await?
            .prop("value")
            .await
    };
    assert_eq!(kept("username").await?.as_deref(), Some("nobody-here"));
    assert_eq!(kept("role").await?.as_deref(), Some("admin"));
    screenshot(c, "refusal-keeps-fields").await?;
    submit(
        c,
        "#add-member",
        &[("username", &cat.username), ("role", "member")],
    )
    .await?;
    wait_for(c, ".banner.ok").await?;
    sign_out(c).await?;

    // Cat signs in with a mailed code and sees the app read-only where a member may not act.
    let cat_codes_before = sign_in_codes_mailed_to(&console.maildir, &cat_address)?.len();
    c.find(Locator::Css(
        "form[action='/sign-in/email'] input[name=email]",
    ))
    .await?
    .send_keys(&cat_address)
    .await?;
    c.find(Locator::Css("form[action='/sign-in/email'] button"))
        .await?
        .click()
        .await?;
    let code_input = c
        .wait()
        .for_element(Locator::Css("input[name=code]"))
        .await?;
    let code = next_sign_in_code(&console.maildir, &cat_address, cat_codes_before).await?;
    code_input.send_keys(&code).await?;
    c.find(Locator::Css("form[action='/sign-in/code'] button"))
        .await?
        .click()
        .await?;
    wait_for(c, "#create-app").await?;
    let role = c.find(Locator::Css(".app .role")).await?.text().await?;
    assert_eq!(role, "member");
    c.goto(&console.url(&format!("/apps/{app_id}"))).await?;
    wait_for(c, ".role").await?;
    for absent in ["#transfer", "#add-member"] {
        assert!(
            c.find(Locator::Css(absent)).await.is_err(),
            "a member sees no {absent}"
        );
    }
    screenshot(c, "member-view").await?;
    c.goto(&console.url(&format!("/apps/{app_id}/env"))).await?;
    wait_for(c, "#set-env").await?;
    assert!(
        c.find(Locator::XPath("//button[text()='Reveal']"))
            .await
            .is_err(),
        "only the owner is offered a secret's value"
    );
    // Another person's app is 404 in the console, like a missing one.
    c.goto(&console.url(&format!("/apps/{}", bens_app["id"].as_str().unwrap())))
        .await?;
    let heading = c.find(Locator::Css("h1")).await?.text().await?;
    assert_eq!(heading, "Not found");
    c.goto(&console.url("/apps")).await?;
    sign_out(c).await?;

    // Ann moves the app to Ben, confirming with its name.
    sign_in_upstream(c, &console, &ann_address).await?;
    c.goto(&console.url("/account")).await?;
    wait_for(c, "#plan").await?;
    screenshot(c, "account").await?;
    c.goto(&console.url(&format!("/apps/{app_id}"))).await?;
    submit(
        c,
        "#transfer",
        &[("to", &ben.username), ("confirm", "wrong")],
    )
    .await?;
    let refusal = wait_for(c, ".banner.error").await?.text().await?;
    assert_eq!(
        refusal, "Type the app's name, site, to confirm the transfer.",
        "the refusal in words, without the API's code"
    );
    c.goto(&console.url(&format!("/apps/{app_id}"))).await?;
    submit(
        c,
        "#transfer",
        &[("to", &ben.username), ("confirm", "site")],
    )
    .await?;
    wait_for(c, ".banner.ok").await?;
    assert_eq!(c.current_url().await?.path(), "/apps");
    screenshot(c, "apps-after-transfer").await?;

    api.get(&format!("/apps/{app_id}"), &ann)
        .await
        .expect(404, Some("not_found"));
    let bens = api.get("/apps", &ben).await.expect(200, None);
    let moved = bens["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "site")
        .context("the app is Ben's now")?
        .clone();
    assert_eq!(moved["owner_username"], ben.username.as_str());
    assert_eq!(moved["role"], "owner");
    let moved_id = moved["id"].as_str().unwrap();
    let prod = &moved["channels"][0];
    assert_eq!(
        prod["hostname"],
        format!("site-{}.{}", ben.username, support::APP_DOMAIN)
    );
    // Its secret and its repository came along, its member did not; the prod channel is deployed again there.
    let secret = api
        .get(&format!("/apps/{moved_id}/env/API_KEY/value"), &ben)
        .await
        .expect(200, None);
    assert_eq!(secret["value"], "hunter2");
    let tree = api
        .get(&format!("/apps/{moved_id}/tree?ref=master"), &ben)
        .await
        .expect(200, None);
    assert_eq!(tree["files"][0]["path"], "index.html");
    let cats = api.get("/apps", &cat).await.expect(200, None);
    assert_eq!(
        cats["apps"],
        json!([]),
        "the old owner's member has no role on Ben's app"
    );
    let channel_id = prod["id"].as_str().unwrap();
    let history = api
        .get(
            &format!("/apps/{moved_id}/channels/{channel_id}/deploys"),
            &ben,
        )
        .await
        .expect(200, None);
    let deploys = history["deploys"].as_array().unwrap();
    assert_eq!(
        deploys.len(),
        1,
        "the moved channel is deployed again: {history}"
    );
    assert_eq!(deploys[0]["git_sha"], sha, "at the commit it served");
    let finished = api
        .finished_deploy(
            &ben,
            moved_id,
            channel_id,
            deploys[0]["deploy_id"].as_str().unwrap(),
            Duration::from_secs(120),
        )
        .await?;
    assert_eq!(finished["status"], "success", "{finished}");
    chromium.close().await?;
    Ok(())
}

/// The caller a console session of `user` is, as the transfer sees it.
async fn caller_of(api: &TestApi, user: &User) -> slipway_core::caller::Caller {
    slipway_core::caller::authenticate(&api.state, &user.token)
        .await
        .expect("a live token")
}

#[tokio::test]
async fn a_transfer_refuses_what_cannot_move_and_re_keys_everything_else() -> Result<()> {
    use slipway_core::transfer::{Request, transfer};
    let mut api = TestApi::start().await?;
    let (dee, _) = person(&api, "dee").await?;
    let (eve, _) = person(&api, "eve").await?;
    let (fay, _) = person(&api, "fay").await?;
    let app = api.create_app(&dee, "shop", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    api.commit(&dee, &app_id, json!({"index.html": "v1"})).await;
    for (key, value, channel) in [("PLAIN", "p", None), ("TOKEN", "s3cret", Some(&prod_id))] {
        let mut body = json!({"key": key, "value": value, "kind": if channel.is_some() { "secret" } else { "env" }});
        if let Some(c) = channel {
            body["channel_id"] = json!(c);
        }
        api.post(&format!("/apps/{app_id}/env"), &dee, body)
            .await
            .expect(204, None);
    }
    for (who, role) in [(&eve, "admin"), (&fay, "member")] {
        api.call(
            Method::PUT,
            &format!("/apps/{app_id}/members/{}", who.username),
            Some(&dee.token),
            Some(json!({"role": role})),
        )
        .await
        .expect(200, None);
    }
    api.post(
        &format!("/apps/{app_id}/threads"),
        &dee,
        json!({"title": "launch"}),
    )
    .await
    .expect(201, None);
    let request = |to: &str, confirm: &str| Request {
        app_id: app_id.parse().unwrap(),
        to: to.to_owned(),
        confirm_name: confirm.to_owned(),
    };
    let status = |e: slipway_core::error::ApiError| {
        let (status, code) = e.status_and_code();
        (status.as_u16(), code)
    };

    // Only the owner, never an agent, with the name typed, to another account that exists.
    let refused = transfer(
        &api.state,
        &caller_of(&api, &eve).await,
        request(&fay.username, "shop"),
    )
    .await;
    assert_eq!(
        status(refused.unwrap_err()),
        (403, "permission_denied"),
        "an admin may not"
    );
    let stranger = api.user("gus", "basic").await?;
    let refused = transfer(
        &api.state,
        &caller_of(&api, &stranger).await,
        request(&fay.username, "shop"),
    )
    .await;
    assert_eq!(
        status(refused.unwrap_err()),
        (404, "not_found"),
        "a stranger sees no app"
    );
    let agent = User {
        token: api
            .token(dee.id, &slipway_auth::scopes::default_scopes(), true, None)
            .await?,
        ..dee.clone()
    };
    let refused = transfer(
        &api.state,
        &caller_of(&api, &agent).await,
        request(&eve.username, "shop"),
    )
    .await;
    assert_eq!(
        status(refused.unwrap_err()),
        (403, "permission_denied"),
        "never an agent"
    );
    let owner = caller_of(&api, &dee).await;
    let refused = transfer(&api.state, &owner, request(&eve.username, "Shop")).await;
    assert_eq!(status(refused.unwrap_err()), (400, "invalid_confirmation"));
    let refused = transfer(&api.state, &owner, request("nobody", "shop")).await;
    assert_eq!(status(refused.unwrap_err()), (404, "not_found"));
    let refused = transfer(&api.state, &owner, request(&dee.username, "shop")).await;
    assert_eq!(status(refused.unwrap_err()), (400, "bad_request"));
    // A name the new owner uses already.
    api.create_app(&fay, "shop", "static").await;
    let refused = transfer(&api.state, &owner, request(&fay.username, "shop")).await;
    assert_eq!(status(refused.unwrap_err()).0, 400);
    // A custom domain is tied to the hostname that would change.
    api.post(
        &format!("/apps/{app_id}/channels/{prod_id}/domains"),
        &dee,
        json!({"domain": "shop.example.test"}),
    )
    .await
    .expect(201, None);
    let refused = transfer(&api.state, &owner, request(&eve.username, "shop")).await;
    assert_eq!(status(refused.unwrap_err()), (409, "conflict"));
    api.delete(
        &format!("/apps/{app_id}/channels/{prod_id}/domains/shop.example.test"),
        &dee,
    )
    .await
    .expect(200, None);
    // Nothing was written by any refusal.
    assert_eq!(
        api.get("/apps", &eve).await.expect(200, None)["apps"][0]["role"],
        "admin"
    );

    // A bucket's and a database's records as the operator keeps them, for the move to carry.
    let prod: uuid::Uuid = prod_id.parse()?;
    let names = slipway_backends::data_server::names::for_label(&format!("shop-{}", dee.username));
    slipway_postgres::store::ensure(
        api.state.db(),
        api.state.keyring(),
        &slipway_postgres::store::NewRecord {
            channel_id: prod,
            app_id: app_id.parse()?,
            owner: &dee.username,
            names: &names,
        },
    )
    .await?;
    let before = slipway_postgres::store::by_channel(api.state.db(), prod)
        .await?
        .unwrap()
        .passwords(api.state.keyring())?;
    // The database's roles get new passwords on the way: without a data server to give them to, nothing moves.
    let refused = transfer(&api.state, &owner, request(&eve.username, "shop")).await;
    assert_eq!(status(refused.unwrap_err()), (503, "postgres_unavailable"));
    assert_eq!(
        api.get(&format!("/apps/{app_id}"), &dee)
            .await
            .expect(200, None)["owner_username"],
        dee.username.as_str()
    );
    support::postgres::attach(&mut api)?;

    let moved = transfer(&api.state, &owner, request(&eve.username, "shop"))
        .await
        .unwrap();
    let new_id = moved.app_id.to_string();
    api.get(&format!("/apps/{app_id}"), &dee)
        .await
        .expect(404, Some("not_found"));
    let app = api
        .get(&format!("/apps/{new_id}"), &eve)
        .await
        .expect(200, None);
    assert_eq!(app["owner_username"], eve.username.as_str());
    assert_eq!(app["role"], "owner");
    let new_prod = app["channels"][0]["id"].as_str().unwrap().to_owned();
    // Variables and secrets, app level and channel level, still open.
    let plain = api
        .get(&format!("/apps/{new_id}/env/PLAIN/value"), &eve)
        .await
        .expect(200, None);
    assert_eq!(plain["value"], "p");
    let secret = api
        .get(
            &format!("/apps/{new_id}/env/TOKEN/value?channel_id={new_prod}"),
            &eve,
        )
        .await
        .expect(200, None);
    assert_eq!(secret["value"], "s3cret");
    // No membership moves: the new owner is alone on it, and the old owner's member has no role any more.
    let members = api
        .get(&format!("/apps/{new_id}/members"), &eve)
        .await
        .expect(200, None);
    let listed: Vec<(String, String)> = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["username"].as_str().unwrap().to_owned(),
                m["role"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(listed, [(eve.username.clone(), "owner".into())]);
    api.get(&format!("/apps/{new_id}"), &fay)
        .await
        .expect(404, Some("not_found"));
    // The repository, the notes and the journal (with the transfer in it).
    let tree = api
        .get(&format!("/apps/{new_id}/tree?ref=master"), &eve)
        .await
        .expect(200, None);
    assert_eq!(tree["files"][0]["path"], "index.html");
    let threads = api
        .get(&format!("/apps/{new_id}/threads"), &eve)
        .await
        .expect(200, None);
    assert_eq!(threads["threads"][0]["title"], "launch", "{threads}");
    let journal = api
        .get(&format!("/apps/{new_id}/activity"), &eve)
        .await
        .expect(200, None);
    assert!(journal.to_string().contains("app.transferred"), "{journal}");
    // The database record is the new channel's, with the same names and new passwords, now the new owner's.
    let record = slipway_postgres::store::by_channel(api.state.db(), new_prod.parse()?)
        .await?
        .context("the database record moved")?;
    assert_eq!(record.db_name, names.db_name);
    assert_eq!(record.owner, eve.username);
    let after = record.passwords(api.state.keyring())?;
    assert!(
        after.0 != before.0 && after.1 != before.1,
        "the passwords moved with the app"
    );
    assert!(
        slipway_postgres::store::by_channel(api.state.db(), prod)
            .await?
            .is_none()
    );
    // The transfer made the roles (this database was never provisioned); they go with the test.
    support::postgres::server()?.drop_database(&names).await?;
    // The old App is gone from the old namespace.
    let old: kube::Api<slipway_crds::App> = kube::Api::namespaced(api.kube.clone(), &dee.namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while old.get_opt("shop").await?.is_some() {
        ensure!(tokio::time::Instant::now() < deadline, "the old App stayed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Waits until the channel's `leg` (`postgres` or `blob`) reads `ready`.
async fn leg_ready(api: &TestApi, user: &User, channel_path: &str, leg: &str) -> Result<()> {
    let path = format!("{channel_path}/{leg}");
    let deadline = tokio::time::Instant::now() + support::postgres::WITHIN;
    loop {
        let reply = api.get(&path, user).await;
        if reply.status == 200 && reply.body["status"] == "ready" {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{leg} never ready: {} {}",
            reply.status,
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The channel's key pair and bucket name, as the platform database keeps them.
async fn bucket_keys(api: &TestApi, channel_id: &str) -> Result<(String, String, String)> {
    let store = slipway_blob::store::by_channel(api.state.db(), channel_id.parse()?)
        .await?
        .context("the channel has no bucket")?;
    let secret = store.secret(api.state.keyring())?;
    Ok((store.access_key_id, secret, store.virtual_bucket))
}

async fn read_object(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<String> {
    let object = s3.get_object().bucket(bucket).key(key).send().await?;
    Ok(String::from_utf8(object.body.collect().await?.to_vec())?)
}

/// A channel's bucket recorded while a transfer swaps records (the operator recording the new channel's store as
/// the move commits) waits for the swap under the channel's record lock, and then answers the record moved there
/// instead of making a second one: without the lock it met the moved row half-way, and the swap failed with a
/// duplicate key.
#[tokio::test]
async fn a_store_recorded_during_a_swap_waits_for_it_and_answers_the_moved_record() -> Result<()> {
    use slipway_blob::store::{self, NewStore};
    let database = support::migrated_database().await?;
    let db = slipway_store::db::connect(database.url()).await?;
    slipway_store::db::users::create(&db, &"mover".parse()?, "basic").await?;
    let ring = slipway_store::env::crypto::Keyring::parse(
        &slipway_store::env::crypto::Keyring::generate_line("k"),
    )?;
    let (moved, fresh, app) = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    let new = move |channel_id| NewStore {
        channel_id,
        app_id: app,
        owner: "mover",
        virtual_bucket: "files-mover",
        backend_bucket: "slipway-files",
    };
    let before = store::ensure(&db, &ring, &new(moved)).await?;

    // The swap, as a transfer makes it: the records' lock first, then the moved row goes under the new channel.
    let mut swap = db.begin().await?;
    slipway_store::db::lock_channel_records(&mut swap, fresh).await?;
    sqlx::query("UPDATE blob_stores SET channel_id = $2 WHERE channel_id = $1")
        .bind(moved)
        .bind(fresh)
        .execute(&mut *swap)
        .await?;
    let recording = {
        let (db, ring) = (db.clone(), ring.clone());
        tokio::spawn(async move { store::ensure(&db, &ring, &new(fresh)).await })
    };
    database
        .until_waiting_on_advisory_locks(1, Duration::from_secs(30))
        .await?;
    swap.commit().await?;

    let recorded = recording.await??;
    assert_eq!(recorded.channel_id, fresh);
    assert_eq!(
        recorded.access_key_id, before.access_key_id,
        "the moved record, not a new one"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM blob_stores")
        .fetch_one(&db)
        .await?;
    assert_eq!(rows, 1);
    Ok(())
}

#[tokio::test]
async fn a_transfer_gives_the_database_and_the_bucket_new_credentials() -> Result<()> {
    use slipway_core::transfer::{Request, transfer};
    use support::postgres::{self, execute, refusal};
    let mut api = TestApi::start().await?;
    postgres::attach(&mut api)?;
    let store = support::blob::ObjectStore::start(&mut api, "127.0.0.1").await?;
    let (ida, _) = person(&api, "ida").await?;
    let (jon, _) = person(&api, "jon").await?;
    for namespace in [&ida.namespace, &jon.namespace] {
        api.start_nodeless_operator_with_postgres(
            namespace,
            Default::default(),
            Some(store.settings()),
            postgres::settings()?,
        )
        .await?;
    }
    let app = api.create_app(&ida, "vault", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let channel_path = format!("/apps/{app_id}/channels/{prod_id}");
    for leg in ["postgres", "blob"] {
        leg_ready(&api, &ida, &channel_path, leg).await?;
    }

    // What the old owner's code had: the roles' passwords and the bucket's key pair, in use.
    let old_env = postgres::variables(&api, &prod_id).await?;
    let mut held = postgres::connect(&old_env["DATABASE_URL"]).await?;
    execute(
        &mut held,
        "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('mine')",
    )
    .await?;
    let mut held_readonly = postgres::connect(&old_env["DATABASE_URL_READONLY"]).await?;
    let (old_key, old_secret, old_bucket) = bucket_keys(&api, &prod_id).await?;
    let old_s3 = store.client(&old_key, &old_secret);
    old_s3
        .put_object()
        .bucket(&old_bucket)
        .key("kept.txt")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"mine"))
        .send()
        .await?;

    let moved = transfer(
        &api.state,
        &caller_of(&api, &ida).await,
        Request {
            app_id: app_id.parse()?,
            to: jon.username.clone(),
            confirm_name: "vault".into(),
        },
    )
    .await
    .unwrap();
    let app = api
        .get(&format!("/apps/{}", moved.app_id), &jon)
        .await
        .expect(200, None);
    let new_prod = app["channels"][0]["id"].as_str().unwrap().to_owned();

    // The sessions opened with the old passwords were ended, and the old passwords open nothing any more.
    for conn in [&mut held, &mut held_readonly] {
        assert!(
            execute(conn, "SELECT 1").await.is_err(),
            "a session opened with an old password outlived the transfer"
        );
    }
    for url in ["DATABASE_URL", "DATABASE_URL_READONLY"] {
        let refused = refusal(postgres::connect(&old_env[url]).await);
        assert!(
            refused.contains("password authentication failed"),
            "{url}: {refused}"
        );
    }
    // The new channel's passwords are new, and open the same database with its rows.
    let new_env = postgres::variables(&api, &new_prod).await?;
    assert_eq!(
        new_env["DATABASE_URL"].rsplit('/').next(),
        old_env["DATABASE_URL"].rsplit('/').next(),
        "the same database"
    );
    for url in ["DATABASE_URL", "DATABASE_URL_READONLY"] {
        assert_ne!(new_env[url], old_env[url], "{url} kept its password");
        let mut conn = postgres::connect(&new_env[url]).await?;
        let kept: String = sqlx::query_scalar("SELECT v FROM kept")
            .fetch_one(&mut conn)
            .await?;
        assert_eq!(kept, "mine");
    }
    // The bucket has a new key pair, which reads what the old one wrote; the old pair names no bucket any more
    // (the gateway forgets a pair as soon as the platform database announces the change; the wait is for the notice).
    let (new_key, new_secret, new_bucket) = bucket_keys(&api, &new_prod).await?;
    assert_ne!(new_key, old_key);
    assert_ne!(new_secret, old_secret);
    assert_eq!(
        read_object(
            &store.client(&new_key, &new_secret),
            &new_bucket,
            "kept.txt"
        )
        .await?,
        "mine"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for bucket in [&old_bucket, &new_bucket] {
        loop {
            match read_object(&old_s3, bucket, "kept.txt").await {
                Err(e) if format!("{e:?}").contains("InvalidAccessKeyId") => break,
                other => ensure!(
                    tokio::time::Instant::now() < deadline,
                    "the old key pair still reaches {bucket}: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_reconcile_that_read_the_old_passwords_cannot_set_them_after_a_transfer() -> Result<()> {
    use slipway_backends::data_server::RoleSettings;
    use slipway_core::transfer::{Request, transfer};
    use support::postgres::{self, refusal};
    let mut api = TestApi::start().await?;
    postgres::attach(&mut api)?;
    let (kim, _) = person(&api, "kim").await?;
    let (lou, _) = person(&api, "lou").await?;
    for namespace in [&kim.namespace, &lou.namespace] {
        api.start_operator_with_postgres(namespace, postgres::settings()?)
            .await?;
    }
    let app = api.create_app(&kim, "ledger", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    leg_ready(
        &api,
        &kim,
        &format!("/apps/{app_id}/channels/{prod_id}"),
        "postgres",
    )
    .await?;

    // A reconcile of the old channel in flight: it holds the roles' lock and has read the record's passwords.
    let server = postgres::server()?;
    let reconcile = server.lock_roles(&prod_id).await?;
    let old_env = postgres::variables(&api, &prod_id).await?;
    let record = slipway_postgres::store::by_channel(api.state.db(), prod_id.parse()?)
        .await?
        .context("the channel's database is not recorded")?;
    let (password, readonly_password) = record.passwords(api.state.keyring())?;

    let moving = tokio::spawn({
        let state = api.state.clone();
        let caller = caller_of(&api, &kim).await;
        let to = lou.username.clone();
        async move {
            transfer(
                &state,
                &caller,
                Request {
                    app_id: app_id.parse().unwrap(),
                    to,
                    confirm_name: "ledger".into(),
                },
            )
            .await
        }
    });
    // The transfer waits for the reconcile (or, were it not to, finishes first).
    postgres::roles_lock_waited_for(&server, &prod_id, || moving.is_finished()).await?;
    // The reconcile sets the passwords it read, and ends.
    let plan = slipway_crds::plans::Plan::by_tier("basic").context("the basic plan")?;
    server
        .set_roles(
            &record.names(),
            &RoleSettings {
                password: &password,
                readonly_password: &readonly_password,
                connection_limit: plan.database_connection_limit(),
            },
        )
        .await?;
    reconcile.release().await;
    let moved = moving.await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;

    // The transfer's passwords hold: the old ones open nothing, the new ones open the database.
    for url in ["DATABASE_URL", "DATABASE_URL_READONLY"] {
        let refused = refusal(postgres::connect(&old_env[url]).await);
        assert!(
            refused.contains("password authentication failed"),
            "{url}: {refused}"
        );
    }
    let app = api
        .get(&format!("/apps/{}", moved.app_id), &lou)
        .await
        .expect(200, None);
    let new_prod = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let new_env = postgres::variables(&api, &new_prod).await?;
    for url in ["DATABASE_URL", "DATABASE_URL_READONLY"] {
        postgres::connect(&new_env[url]).await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_account_lists_its_live_tokens_with_their_last_use_and_labels_are_bounded() -> Result<()>
{
    let api = TestApi::start().await?;
    let (hal, _) = person(&api, "hal").await?;
    let made = api
        .post("/tokens", &hal, json!({"label": "laptop"}))
        .await
        .expect(200, None);
    let laptop = made["token"].as_str().unwrap().to_owned();
    let gone = api
        .post("/tokens", &hal, json!({"label": "old"}))
        .await
        .expect(200, None);
    api.delete(&format!("/tokens/{}", gone["id"].as_str().unwrap()), &hal)
        .await
        .expect(204, None);
    api.call(Method::GET, "/apps", Some(&laptop), None)
        .await
        .expect(200, None);
    let listed = api
        .get_until("/tokens", &laptop, 200, Duration::from_secs(5))
        .await?
        .body;
    let tokens = listed["tokens"].as_array().unwrap();
    let labels: Vec<&str> = tokens.iter().filter_map(|t| t["label"].as_str()).collect();
    assert_eq!(
        labels,
        ["laptop"],
        "newest first, the revoked one left out: {listed}"
    );
    let entry = &tokens[0];
    assert_eq!(entry["id"], made["id"]);
    assert_eq!(entry["scopes"].as_array().unwrap().len(), 9);
    assert!(entry["origin"].is_null(), "minted with POST /tokens");
    assert!(entry.get("token").is_none(), "never the plaintext");
    // Its use is recorded (at most once a minute, in the background).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listed = api
            .call(Method::GET, "/tokens", Some(&laptop), None)
            .await
            .expect(200, None);
        if listed["tokens"][0]["last_used_at"].is_string() {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no last use recorded: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Labels are bounded, for POST /tokens and the console alike.
    api.post("/tokens", &hal, json!({"label": "x".repeat(101)}))
        .await
        .expect(400, Some("bad_request"));
    api.post("/tokens", &hal, json!({"label": "x".repeat(100)}))
        .await
        .expect(200, None);
    let refused =
        slipway_rest::tokens::mint_for_person(&api.state, hal.id, Some("y".repeat(101)), None)
            .await;
    assert_eq!(refused.unwrap_err().status_and_code().0.as_u16(), 400);
    let minted =
        slipway_rest::tokens::mint_for_person(&api.state, hal.id, Some("ci".into()), Some(86_400))
            .await
            .unwrap();
    assert!(minted.expires_at.is_some());
    // A token minted for a person is the root of its chain: revoking the token hal signed in with leaves it.
    api.delete(&format!("/tokens/{}", made["id"].as_str().unwrap()), &hal)
        .await
        .expect(204, None);
    api.call(Method::GET, "/apps", Some(&minted.token), None)
        .await
        .expect(200, None);
    let listed = api
        .call(Method::GET, "/tokens", Some(&minted.token), None)
        .await
        .expect(200, None);
    assert!(
        listed.to_string().contains("\"origin\":\"console\""),
        "{listed}"
    );
    Ok(())
}
