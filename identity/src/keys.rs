//! The keys of identity cookies: one RSA key signs (RS256), and it and any other configured keys are published as
//! a JWK set, each named by its RFC 7638 thumbprint (`kid`). Rotation is publishing the next key a day ahead,
//! making it the signing key, and keeping the old one published until the cookies it signed expire (12 hours).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

use super::IdentityClaims;

/// Leeway on `exp` and `iat` for clocks a little apart.
const LEEWAY_SECONDS: u64 = 30;

/// The signing key and every published key. Its `Debug` shows only key ids.
pub struct SigningKeys {
    signing: EncodingKey,
    signing_kid: String,
    published: JwkSet,
    verifying: HashMap<String, DecodingKey>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeys")
            .field("signing_kid", &self.signing_kid)
            .field("published", &self.verifying.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// An RSA private key in PEM (PKCS#1 or PKCS#8), its public JWK and `kid`.
fn rsa_key(pem: &[u8]) -> anyhow::Result<(EncodingKey, Jwk, String)> {
    let key = EncodingKey::from_rsa_pem(pem).context("not an RSA private key in PEM")?;
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256)
        .context("the RSA key's public half cannot be read")?;
    let kid = jwk
        .thumbprint(ThumbprintHash::SHA256)
        .context("the RSA key's thumbprint")?;
    jwk.common.key_id = Some(kid.clone());
    jwk.common.public_key_use = Some(PublicKeyUse::Signature);
    Ok((key, jwk, kid))
}

impl SigningKeys {
    /// Keys from PEM: `signing` signs and is published; `others` are published only.
    pub fn from_pems(signing: &[u8], others: &[Vec<u8>]) -> anyhow::Result<Self> {
        let (key, jwk, kid) = rsa_key(signing).context("the signing key")?;
        let mut published = vec![jwk];
        for (i, pem) in others.iter().enumerate() {
            let (_, jwk, kid) = rsa_key(pem).with_context(|| format!("published key {}", i + 1))?;
            if published
                .iter()
                .all(|k| k.common.key_id.as_deref() != Some(&kid))
            {
                published.push(jwk);
            }
        }
        let verifying = published
            .iter()
            .map(|jwk| {
                let kid = jwk.common.key_id.clone().unwrap_or_default();
                Ok((kid, DecodingKey::from_jwk(jwk)?))
            })
            .collect::<Result<_, jsonwebtoken::errors::Error>>()?;
        Ok(Self {
            signing: key,
            signing_kid: kid,
            published: JwkSet { keys: published },
            verifying,
        })
    }

    /// Keys from PEM files.
    pub fn load(signing: &Path, others: &[PathBuf]) -> anyhow::Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path).with_context(|| format!("read the sign-in key {}", path.display()))
        };
        let others = others
            .iter()
            .map(|p| read(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Self::from_pems(&read(signing)?, &others)
            .with_context(|| format!("load the sign-in keys ({})", signing.display()))
    }

    /// The JWK set served at `{auth_url}/svc-auth/jwks`.
    pub fn jwks(&self) -> &JwkSet {
        &self.published
    }

    /// The `kid` of the signing key.
    pub fn signing_kid(&self) -> &str {
        &self.signing_kid
    }

    /// `claims` signed with the signing key.
    pub fn mint(&self, claims: &IdentityClaims) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.signing_kid.clone());
        jsonwebtoken::encode(&header, claims, &self.signing)
            .unwrap_or_else(|e| unreachable!("an RSA key loaded at start signs any claims: {e}"))
    }

    /// The claims of `token` when it is RS256 by a published key (chosen by `kid`), with `iss` = `issuer`,
    /// `aud` = `audience` and `exp` ahead.
    pub fn verify(&self, token: &str, issuer: &str, audience: &str) -> Option<IdentityClaims> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        if header.alg != Algorithm::RS256 {
            return None;
        }
        let key = self.verifying.get(header.kid.as_deref()?)?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = LEEWAY_SECONDS;
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        jsonwebtoken::decode::<IdentityClaims>(token, key, &validation)
            .ok()
            .map(|data| data.claims)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Person;

    fn rsa_pem() -> Vec<u8> {
        slipway_testkit::tls::rsa_key_pem(false).unwrap()
    }

    fn rsa_pkcs1_pem() -> Vec<u8> {
        slipway_testkit::tls::rsa_key_pem(true).unwrap()
    }

    fn claims(aud: &str, exp: u64) -> IdentityClaims {
        IdentityClaims {
            iss: "https://auth.example".into(),
            aud: aud.into(),
            person: Person {
                sub: "s1".into(),
                email: Some("a@example.test".into()),
                name: None,
                picture: None,
            },
            iat: 1,
            exp,
        }
    }

    #[test]
    fn a_minted_token_verifies_only_for_its_host_issuer_and_time() {
        let keys = SigningKeys::from_pems(&rsa_pem(), &[]).unwrap();
        let later = slipway_internal::source_url::unix_now() + 600;
        let token = keys.mint(&claims("a.example", later));
        let ok = keys.verify(&token, "https://auth.example", "a.example");
        assert_eq!(ok.map(|c| c.person.sub), Some("s1".into()));
        assert!(
            keys.verify(&token, "https://auth.example", "b.example")
                .is_none()
        );
        assert!(
            keys.verify(&token, "https://other.example", "a.example")
                .is_none()
        );
        let expired = keys.mint(&claims("a.example", 1000));
        assert!(
            keys.verify(&expired, "https://auth.example", "a.example")
                .is_none()
        );
        // Another key's token naming the signing key's kid fails on the signature.
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(keys.signing_kid().to_owned());
        let other = EncodingKey::from_rsa_pem(&rsa_pem()).unwrap();
        let forged = jsonwebtoken::encode(&header, &claims("a.example", later), &other).unwrap();
        assert!(
            keys.verify(&forged, "https://auth.example", "a.example")
                .is_none()
        );
    }

    #[test]
    fn published_keys_verify_and_are_listed_by_thumbprint() {
        let (old, new) = (rsa_pkcs1_pem(), rsa_pem());
        assert!(String::from_utf8_lossy(&old).contains("BEGIN RSA PRIVATE KEY"));
        let before = SigningKeys::from_pems(&old, &[]).unwrap();
        let after = SigningKeys::from_pems(&new, &[old.clone(), new.clone()]).unwrap();
        assert_eq!(after.jwks().keys.len(), 2);
        assert_ne!(before.signing_kid(), after.signing_kid());
        let kids: Vec<_> = after
            .jwks()
            .keys
            .iter()
            .map(|k| k.common.key_id.clone().unwrap())
            .collect();
        assert!(kids.contains(&before.signing_kid().to_owned()));
        let later = slipway_internal::source_url::unix_now() + 600;
        let old_token = before.mint(&claims("a.example", later));
        assert!(
            after
                .verify(&old_token, "https://auth.example", "a.example")
                .is_some()
        );
        let json = serde_json::to_value(after.jwks()).unwrap();
        assert_eq!(json["keys"][0]["kty"], "RSA");
        assert_eq!(json["keys"][0]["alg"], "RS256");
        assert_eq!(json["keys"][0]["use"], "sig");
        assert!(json["keys"][0]["d"].is_null(), "no private part: {json}");
    }

    #[test]
    fn a_token_with_another_algorithm_is_refused() {
        let keys = SigningKeys::from_pems(&rsa_pem(), &[]).unwrap();
        let later = slipway_internal::source_url::unix_now() + 600;
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(keys.signing_kid().to_owned());
        let hmac = jsonwebtoken::encode(
            &header,
            &claims("a.example", later),
            &EncodingKey::from_secret(b"public"),
        )
        .unwrap();
        assert!(
            keys.verify(&hmac, "https://auth.example", "a.example")
                .is_none()
        );
    }
}
