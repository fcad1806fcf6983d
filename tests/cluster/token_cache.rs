//! The API reads tokens from memory, and a change made anywhere else (another API process, the admin CLI, a
//! person at psql) still takes effect at once: the platform database announces every change to tokens and
//! accounts, and the cache forgets what it read. Against the real Postgres and the real API router.

use crate::support;

use std::time::Duration;

use anyhow::Result;
use slipway_core::platform::cache::poll_for;
use support::TestApi;

/// How long a change may take to reach the cache: a notification's trip, not a timer.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(5);

/// The API of a test with its token cache listening.
async fn listening_api() -> Result<TestApi> {
    let mut api = TestApi::start().await?;
    // The tests read GET /me/usage, which measures the account's databases on the data server.
    crate::support::postgres::attach(&mut api)?;
    poll_for(Duration::from_secs(10), || {
        api.state.tokens().is_listening().then_some(())
    })
    .await?;
    Ok(api)
}

#[tokio::test]
async fn tokens_are_served_from_memory_until_the_database_announces_a_change() -> Result<()> {
    let api = listening_api().await?;
    let alice = api.user("alice", "basic").await?;
    let elsewhere = slipway_store::db::connect(api.db_url()).await?;
    api.get("/me/usage", &alice).await.expect(200, None);

    // Silenced, a revocation goes unseen: the token is answered from memory.
    sqlx::query("ALTER TABLE tokens DISABLE TRIGGER tokens_updated")
        .execute(&elsewhere)
        .await?;
    sqlx::query("UPDATE tokens SET revoked_at = now() WHERE user_id = $1")
        .bind(alice.id)
        .execute(&elsewhere)
        .await?;
    api.get("/me/usage", &alice).await.expect(200, None);
    sqlx::query("UPDATE tokens SET revoked_at = NULL WHERE user_id = $1")
        .bind(alice.id)
        .execute(&elsewhere)
        .await?;
    sqlx::query("ALTER TABLE tokens ENABLE TRIGGER tokens_updated")
        .execute(&elsewhere)
        .await?;

    // Announced, a plan changed by another process shows on the next requests...
    slipway_store::db::users::set_plan(&elsewhere, &alice.username.parse()?, "pro").await?;
    let deadline = tokio::time::Instant::now() + ANNOUNCED_WITHIN;
    while api.get("/me/usage", &alice).await.expect(200, None)["plan"] != "pro" {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the plan change was not seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and an account deactivated by the admin CLI stops its tokens.
    assert!(slipway_store::db::registrations::deactivate(&elsewhere, &alice.username).await?);
    api.get_until("/me/usage", &alice.token, 401, ANNOUNCED_WITHIN)
        .await?
        .expect(401, Some("token_revoked"));
    Ok(())
}

#[tokio::test]
async fn a_cache_whose_connection_is_cut_listens_again_and_still_hears_revocations() -> Result<()> {
    let api = listening_api().await?;
    let bob = api.user("bob", "basic").await?;
    let elsewhere = slipway_store::db::connect(api.db_url()).await?;
    api.get("/apps", &bob).await.expect(200, None);

    // The database drops the cache's connection (a restart, a failover).
    let listeners = "SELECT pid FROM pg_stat_activity WHERE query ILIKE 'LISTEN %slipway_auth_changed%' \
                     AND datname = current_database()";
    let before: Vec<i32> = sqlx::query_scalar(listeners).fetch_all(&elsewhere).await?;
    assert!(!before.is_empty(), "the cache has a listening connection");
    for pid in &before {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&elsewhere)
            .await?;
    }
    poll_for(Duration::from_secs(10), || {
        api.state.tokens().is_listening().then_some(())
    })
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now: Vec<i32> = sqlx::query_scalar(listeners).fetch_all(&elsewhere).await?;
        if now.iter().any(|pid| !before.contains(pid)) && api.state.tokens().is_listening() {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the cache did not listen again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    api.get("/apps", &bob).await.expect(200, None);
    assert!(slipway_store::db::registrations::deactivate(&elsewhere, &bob.username).await?);
    api.get_until("/apps", &bob.token, 401, ANNOUNCED_WITHIN)
        .await?
        .expect(401, Some("token_revoked"));
    Ok(())
}

#[tokio::test]
async fn a_listening_cache_leaves_the_pool_s_connections_to_requests() -> Result<()> {
    let api = TestApi::start().await?;
    // A pool of one connection, as small as a pool gets: a listener holding it would leave requests nothing.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(2))
        .connect(api.db_url())
        .await?;
    let cache = slipway_auth::token_cache::TokenCache::listening_to(pool.clone());
    poll_for(Duration::from_secs(10), || {
        cache.is_listening().then_some(())
    })
    .await?;
    let answered: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
    assert_eq!(answered, 1);
    Ok(())
}
