//! Mutual TLS to BuildKit: its TCP listener trusts client certificates of one CA, whose key the operator alone
//! holds. Each build Job gets a certificate of its own when it leaves the queue, valid for the build's time limit,
//! in a Secret only its pod mounts; nothing else in a tenant's namespace can open BuildKit, and a certificate that
//! leaks stops working with its build.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The CA BuildKit trusts for clients (and that signed its server certificate, which build pods verify).
#[derive(Clone)]
pub struct BuildkitCa {
    issuer: Arc<Issuer<'static, KeyPair>>,
    ca_pem: String,
}

impl std::fmt::Debug for BuildkitCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BuildkitCa(..)")
    }
}

/// A client certificate for one build: PEMs of the CA, the certificate and its key.
pub struct ClientCertificate {
    /// The CA (to verify BuildKit's server certificate).
    pub ca: String,
    /// The client certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

impl BuildkitCa {
    /// The CA from its certificate and key (PEM).
    pub fn from_pem(cert: &str, key: &str) -> Result<Self, String> {
        let key = KeyPair::from_pem(key).map_err(|e| format!("the BuildKit CA key: {e}"))?;
        let issuer = Issuer::from_ca_cert_pem(cert, key)
            .map_err(|e| format!("the BuildKit CA certificate: {e}"))?;
        Ok(Self {
            issuer: Arc::new(issuer),
            ca_pem: cert.to_owned(),
        })
    }

    /// Reads the CA's certificate and key from files.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("read {}: {e}", p.display()));
        Self::from_pem(&read(cert)?, &read(key)?)
    }

    /// The CA the files `SLIPWAY_BUILDKIT_CA_CERT_FILE` and `SLIPWAY_BUILDKIT_CA_KEY_FILE` hold (the operator's
    /// flags read the same variables); `None` when they are not set.
    pub fn from_env() -> Result<Option<Self>, String> {
        match (
            std::env::var_os("SLIPWAY_BUILDKIT_CA_CERT_FILE"),
            std::env::var_os("SLIPWAY_BUILDKIT_CA_KEY_FILE"),
        ) {
            (Some(cert), Some(key)) => Self::load(Path::new(&cert), Path::new(&key)).map(Some),
            (None, None) => Ok(None),
            _ => Err("set both SLIPWAY_BUILDKIT_CA_CERT_FILE and SLIPWAY_BUILDKIT_CA_KEY_FILE, or neither".into()),
        }
    }

    /// A client certificate named `subject`, valid from a minute ago for `lifetime`.
    pub fn client_certificate(
        &self,
        subject: &str,
        lifetime: Duration,
    ) -> Result<ClientCertificate, String> {
        let key = KeyPair::generate().map_err(|e| format!("a client key: {e}"))?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, subject);
        params.distinguished_name = name;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = std::time::SystemTime::now();
        params.not_before = (now - Duration::from_secs(60)).into();
        params.not_after = (now + lifetime).into();
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("sign a client certificate: {e}"))?;
        Ok(ClientCertificate {
            ca: self.ca_pem.clone(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_chains_to_the_ca_and_is_for_clients_only() {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test BuildKit CA");
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let ca = BuildkitCa::from_pem(&ca_cert.pem(), &ca_key.serialize_pem()).unwrap();
        let client = ca
            .client_certificate("build:ns/build-1", Duration::from_secs(900))
            .unwrap();
        assert_eq!(client.ca, ca_cert.pem());
        let der = pem_der(&client.cert);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            parsed.issuer().to_string(),
            "CN=test BuildKit CA",
            "signed by the CA"
        );
        assert_eq!(parsed.subject().to_string(), "CN=build:ns/build-1");
        let eku = parsed.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let lifetime =
            parsed.validity().not_after.timestamp() - parsed.validity().not_before.timestamp();
        assert_eq!(lifetime, 960, "the build's limit, from a minute back");
        assert!(BuildkitCa::from_pem("no", "no").is_err());
    }

    /// The DER of a one-certificate PEM.
    fn pem_der(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents
    }
}
