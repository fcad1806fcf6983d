//! Which account a person is: the one mapping from a person, as a sign-in proves them, to a slipway account. The
//! console's sign-in and the MCP server's OAuth sign-in both end here, so that they agree on who is who.
//!
//! The spec ties a person to an account by email address: verifying an address on an account (the email code of
//! `POST /me/email-verifications`, or `slipway admin create-user --email` by the platform's operator) "opens console
//! sign-in for that address". So a person is the account whose **verified** address is an address they have shown
//! they control, and nobody else. Two proofs reach this module, and both end in [`account_for_address`]:
//!
//! - a sign-in at the upstream OpenID Connect provider whose ID token states the address **and**
//!   `email_verified: true` ([`account_of`]); an address the provider does not say it verified opens nothing, since a
//!   provider that lets anyone type any address would otherwise open any account;
//! - a code mailed to the address and typed back (the console's sign-in by mail).
//!
//! Addresses compare case-insensitively (accounts store theirs lowercase; one address belongs to at most one
//! account); a deactivated account is nobody's; no account is ever made here (an account comes from the admin
//! command or from agent registration). The provider's subject is not recorded: the address is the link, so the same
//! person reaches the same account through any provider the operator configures.

use sqlx::PgPool;
use uuid::Uuid;

use slipway_identity::upstream::Upstreamed;

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

/// Why a person signed in upstream opens no account, in words for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAccount {
    /// The provider gave no address, or did not say it verified it.
    #[error(
        "your identity provider did not vouch for a verified email address, which is how this platform knows your \
         account"
    )]
    UnverifiedAddress,
    /// No account has verified this address.
    #[error(
        "no account has verified the address {0}; verify it on your account first (POST /me/email-verifications)"
    )]
    Unknown(String),
}

/// The active account whose verified address is `address` (compared case-insensitively, as addresses are stored
/// lowercase); `None` when no account has it.
pub async fn account_for_address(db: &PgPool, address: &str) -> sqlx::Result<Option<Account>> {
    let address = address.trim().to_lowercase();
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

/// The address the provider vouches for, lowercase: present and stated as verified.
pub fn vouched_address(person: &Upstreamed) -> Result<String, NoAccount> {
    match (&person.email, person.email_verified) {
        (Some(email), Some(true)) if !email.trim().is_empty() => Ok(email.trim().to_lowercase()),
        _ => Err(NoAccount::UnverifiedAddress),
    }
}

/// The account `person` (signed in at the upstream provider) signs in to, or why there is none.
pub async fn account_of(
    db: &PgPool,
    person: &Upstreamed,
) -> sqlx::Result<Result<Account, NoAccount>> {
    let address = match vouched_address(person) {
        Ok(address) => address,
        Err(refusal) => return Ok(Err(refusal)),
    };
    Ok(account_for_address(db, &address)
        .await?
        .ok_or(NoAccount::Unknown(address)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(email: Option<&str>, verified: Option<bool>) -> Upstreamed {
        Upstreamed {
            issuer: "https://idp.example".into(),
            subject: "s".into(),
            email: email.map(str::to_owned),
            email_verified: verified,
            name: None,
            picture: None,
        }
    }

    #[test]
    fn only_an_address_the_provider_says_it_verified_counts() {
        assert_eq!(
            vouched_address(&person(Some(" Ada@Example.COM "), Some(true))),
            Ok("ada@example.com".into())
        );
        for (email, verified) in [
            (Some("ada@example.com"), None),
            (Some("ada@example.com"), Some(false)),
            (None, Some(true)),
            (Some("  "), Some(true)),
        ] {
            assert_eq!(
                vouched_address(&person(email, verified)),
                Err(NoAccount::UnverifiedAddress),
                "{email:?} {verified:?}"
            );
        }
    }
}
