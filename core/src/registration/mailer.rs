//! Mail to people: the email verification code, sent over SMTP (`lettre`) to the relay the platform operator
//! names with `--smtp-url` (`smtp://host:port` for a relay that takes plain SMTP, `smtp://host:587?tls=required`
//! for STARTTLS, `smtps://host:465` for TLS from the first byte; a user and password go in the URL's userinfo).

use anyhow::Context as _;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};

/// An SMTP relay and the sender address.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer").field("from", &self.from).finish()
    }
}

impl Mailer {
    /// A mailer for the relay at `url` sending as `from` (`Name <address>` or a bare address).
    pub fn new(url: &str, from: &str) -> anyhow::Result<Self> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .context("--smtp-url is not an smtp:// or smtps:// URL")?
            .timeout(Some(std::time::Duration::from_secs(20)))
            .build();
        let from = from
            .parse()
            .with_context(|| format!("--mail-from {from:?} is not a mail address"))?;
        Ok(Self { transport, from })
    }

    /// Sends the code that signs `to` in to the console as `username`.
    pub async fn send_sign_in_code(
        &self,
        to: &Mailbox,
        username: &str,
        code: &str,
        life_minutes: i64,
    ) -> anyhow::Result<()> {
        let body = format!(
            "Your code to sign in to the slipway console as {username} is:\n\n    {code}\n\n\
             It works for {life_minutes} minutes, in the browser that asked for it.\n\nIf you did not ask for it, \
             ignore this message: nobody signs in without the code.\n"
        );
        self.send(to, format!("Your sign-in code: {code}"), body)
            .await
            .context("send the sign-in mail through the SMTP relay")
    }

    async fn send(&self, to: &Mailbox, subject: String, body: String) -> anyhow::Result<()> {
        let message = Message::builder()
            .from(self.from.clone())
            .to(to.clone())
            .subject(subject)
            .body(body)
            .context("compose the mail")?;
        self.transport.send(message).await?;
        Ok(())
    }

    /// Sends the code that verifies `to` for `username`.
    pub async fn send_code(
        &self,
        to: &Mailbox,
        username: &str,
        code: &str,
        life_minutes: i64,
    ) -> anyhow::Result<()> {
        let body = format!(
            "Your verification code for the account {username} is:\n\n    {code}\n\n\
             It works for {life_minutes} minutes. Send it with POST /me/email-verifications/complete \
             {{\"code\": \"{code}\"}}, or with the MCP tool complete_email_verification.\n\n\
             If you did not ask for it, ignore this message: \
             nothing changes without the code.\n"
        );
        self.send(to, format!("Your verification code: {code}"), body)
            .await
            .context("send the verification mail through the SMTP relay")
    }
}

/// `address` as a mailbox when it is one plain address (no display name, at most 254 characters), lowercased.
pub fn plain_address(address: &str) -> Option<Mailbox> {
    let address = address.trim();
    if address.is_empty() || address.len() > 254 || address.contains(['<', '>', ' ', ',']) {
        return None;
    }
    let address: lettre::Address = address.to_ascii_lowercase().parse().ok()?;
    Some(Mailbox::new(None, address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_address_is_taken() {
        assert_eq!(
            plain_address(" Ada@Example.COM ")
                .unwrap()
                .email
                .to_string(),
            "ada@example.com"
        );
        for bad in [
            "",
            "ada",
            "ada@",
            "Ada <ada@example.com>",
            "a@b.c, d@e.f",
            "a b@c.d",
        ] {
            assert!(plain_address(bad).is_none(), "{bad}");
        }
        assert!(plain_address(&format!("{}@example.com", "a".repeat(250))).is_none());
    }
}
