//! `slipway admin create-user` bootstraps a fresh install: it prints a working token with the nine default scopes.

use crate::support;

use anyhow::{Result, ensure};
use axum::http::Method;
use slipway_crds::names::messages;
use slipway_testkit::postgres::TestDatabase;
use support::TestApi;

#[tokio::test]
async fn create_user_prints_a_token_with_the_nine_default_scopes() -> Result<()> {
    let db = TestDatabase::create().await?;
    let username = format!("root{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let url = db.url().to_owned();
    let run = |name: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_slipway"))
            .args([
                "admin",
                "create-user",
                "--username",
                name,
                "--plan",
                "builder",
                "--database-url",
                &url,
            ])
            .env("KUBECONFIG", slipway_testkit::kubeconfig_path())
            .output()
    };
    let out = run(&username)?;
    ensure!(
        out.status.success(),
        "create-user failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    assert!(
        slipway_auth::token::looks_like_token(&token),
        "stdout is the token alone: {token:?}"
    );

    let mut api = TestApi::on(db).await?;
    crate::support::postgres::attach(&mut api)?;
    api.forget_namespace_later(&format!("slipway-user-{username}"));
    let apps = api
        .call(Method::GET, "/apps", Some(&token), None)
        .await
        .expect(200, None);
    assert_eq!(apps, serde_json::json!({"apps": []}));
    // The token carries all nine default scopes: it may mint a token, which needs them all.
    let minted = api
        .call(Method::POST, "/tokens", Some(&token), None)
        .await
        .expect(200, None);
    assert_eq!(minted["scopes"].as_array().map(Vec::len), Some(9));
    let usage = api
        .call(Method::GET, "/me/usage", Some(&token), None)
        .await
        .expect(200, None);
    assert_eq!(usage["plan"], "builder");

    // A second user of the same name is refused, and so is a bad name.
    let again = run(&username)?;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    // A hyphen would let this account form hostnames of another's apps (user b-c, app a = app a-b of user c).
    for bad in ["Not_A_Label", "b-c"] {
        let out = run(bad)?;
        assert!(!out.status.success(), "{bad} was accepted");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(messages::USERNAME),
            "{bad}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
