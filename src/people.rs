//! Which account a person is: the one mapping from a person, as a sign-in proves them, to a slipway account.
//!
//! A person is known by an email address they have shown they control, and an account is theirs when that address
//! is the account's verified address (hosting API part 2: a verified address "opens console sign-in for that
//! address"). Addresses are verified by the email-verification routes, or set by the platform operator with
//! `slipway admin create-user --email`; each is unique platform-wide, so an address names at most one account.
//!
//! Two proofs reach this module, and both end in [`account_for_address`]:
//!
//! - a sign-in at the upstream OpenID Connect provider whose ID token states an `email` the provider does not
//!   call unverified (`email_verified: false` leaves it out, see [`crate::sign_in::upstream`]);
//! - a code mailed to the address and typed back (the console's sign-in by mail).
//!
//! The provider's own subject is not recorded: the address is the link, so a person who signs in at the provider
//! with another address, or whose account's address changes, reaches the account the address names now.
//! Deactivated accounts are nobody's. Any other way in for people (an OAuth sign-in for the MCP server) maps
//! people to accounts here too, so they all agree on who is who.

use sqlx::PgPool;
use uuid::Uuid;

/// The account a person signs in to.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Account {
    /// Account id.
    pub id: Uuid,
    /// Username.
    pub username: String,
    /// The verified address that names it (lowercase).
    pub email: String,
}

/// The active account whose verified address is `address` (compared case-insensitively, as addresses are stored
/// lowercase); `None` when no account has it.
pub async fn account_for_address(db: &PgPool, address: &str) -> sqlx::Result<Option<Account>> {
    let address = address.trim().to_ascii_lowercase();
    if address.is_empty() {
        return Ok(None);
    }
    sqlx::query_as(
        "SELECT id, username, email FROM users
         WHERE email = $1 AND email_verified_at IS NOT NULL AND deactivated_at IS NULL",
    )
    .bind(address)
    .fetch_optional(db)
    .await
}
