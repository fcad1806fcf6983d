//! Agents register themselves and sign in with an SSH key (hosting API part 2, "Agent registration and sign-in"):
//! an account is proven by an Ed25519 signature over a short message that names its purpose and the time, never
//! by a password. What is not HTTP lives here: the signed messages and their check ([`proof`]), the budgets that
//! keep registration from being flooded ([`budget`]), the email codes that bind an address ([`codes`]) and the
//! mail that carries them ([`mailer`]).

pub mod budget;
pub mod codes;
pub mod mailer;
pub mod proof;

/// Days a registration or SSH-login token lives.
pub const TOKEN_DAYS: i64 = 30;
/// Live SSH-login tokens an account holds at most; minting one more revokes the oldest.
pub const MAX_LOGIN_TOKENS: i64 = 20;
/// SSH logins one key may make in an hour (each keeps a token row).
pub const LOGINS_PER_KEY_PER_HOUR: u32 = 60;
/// The plan registration creates.
pub const STARTER: &str = "starter";
/// The plan a verified email address moves a `starter` account to.
pub const VERIFIED: &str = "basic";
