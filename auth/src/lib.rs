//! Bearer tokens below the routes that check them: [`token`] mints them (`svc_` and 256 random bits) and hashes
//! them (only the SHA-256 is stored), [`scopes`] names what a token may do, [`token_cache`] keeps the tokens read
//! for a while and forgets them when the platform database announces a change, [`rate`] holds each token's request
//! budget and the other per-key limits, and [`uses`] records when a token was last used.
//!
//! The request side (the `Caller` extractor, scope and protected-action checks) is the API's; it stands on this
//! crate, as the SQL proxy, git over SSH and the console do.

pub mod rate;
pub mod scopes;
pub mod token;
pub mod token_cache;
pub mod uses;

/// Path of the MCP endpoint on the API's listener: the one place a token minted by the MCP server's OAuth is good.
pub const MCP_PATH: &str = "/mcp";
