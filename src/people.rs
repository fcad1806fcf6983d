//! Which platform account a person is, once the upstream OpenID Connect provider has signed them in.
//!
//! The spec ties a person to an account by email address: verifying an address on an account (the email code of
//! `POST /me/email-verifications`) "opens console sign-in for that address". So a person signed in upstream is the
//! account whose **verified** address is the address the provider vouches for, and nobody else:
//!
//! - the provider must state the address **and** `email_verified: true` in its ID token; an address it does not
//!   say it verified opens nothing (a provider that lets anyone type any address would otherwise open any
//!   account);
//! - addresses compare case-insensitively (accounts store theirs lowercase, and one address belongs to at most
//!   one account);
//! - a deactivated account is never signed in to;
//! - no account is ever made here: a person without one is refused (an account comes from the admin command or
//!   from agent registration, and gets its address by the email code).
//!
//! The provider's subject is not stored and plays no part: the address is the link, so the same person reaches
//! the same account through any provider the operator configures. The MCP server's OAuth sign-in
//! ([`crate::oauth`]) uses this, and so does any other sign-in of people (the console), so that all of them open
//! the same account for the same person.

use sqlx::PgPool;
use uuid::Uuid;

use crate::sign_in::upstream::Upstreamed;

/// The account a person signs in to.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Account {
    /// Its id.
    pub id: Uuid,
    /// Its username.
    pub username: String,
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

/// The address the provider vouches for, lowercase: present and stated as verified.
pub fn vouched_address(person: &Upstreamed) -> Result<String, NoAccount> {
    match (&person.email, person.email_verified) {
        (Some(email), Some(true)) if !email.trim().is_empty() => Ok(email.trim().to_lowercase()),
        _ => Err(NoAccount::UnverifiedAddress),
    }
}

/// The account `person` signs in to, or why there is none.
pub async fn account_of(
    db: &PgPool,
    person: &Upstreamed,
) -> sqlx::Result<Result<Account, NoAccount>> {
    let address = match vouched_address(person) {
        Ok(address) => address,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let account: Option<Account> = sqlx::query_as(
        "SELECT id, username FROM users
         WHERE lower(email) = $1 AND email_verified_at IS NOT NULL AND deactivated_at IS NULL",
    )
    .bind(&address)
    .fetch_optional(db)
    .await?;
    Ok(account.ok_or(NoAccount::Unknown(address)))
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
