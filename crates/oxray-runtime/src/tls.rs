//! TLS for every gRPC connection (rustls through tonic), set per process from
//! the environment so that nodes, drivers and the workers they spawn agree:
//!
//! * `OXRAY_TLS_CERT` and `OXRAY_TLS_KEY`: this process's certificate and key
//!   (PEM). A node serves TLS with them; a client presents them when the
//!   cluster asks for client certificates.
//! * `OXRAY_TLS_CA`: the CA (PEM) that signed the cluster's certificates.
//!   Clients verify servers against it, and servers verify clients with it.
//! * `OXRAY_TLS_CLIENT_AUTH=require`: mutual TLS; servers refuse clients
//!   without a certificate the CA signed. `none` (the default) does not ask.
//!
//! With none of them set everything stays plaintext, which is fine on a
//! loopback-only cluster; `oxray start --tls-*` sets them for its node and workers.

use std::path::PathBuf;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

pub const CERT_VAR: &str = "OXRAY_TLS_CERT";
pub const KEY_VAR: &str = "OXRAY_TLS_KEY";
pub const CA_VAR: &str = "OXRAY_TLS_CA";
pub const CLIENT_AUTH_VAR: &str = "OXRAY_TLS_CLIENT_AUTH";

/// Why this process's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {var}={path}: {source}. Point {var} at a PEM file this user can read")]
    Read { var: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{var}={path} holds no PEM block: expected a PEM certificate or key (-----BEGIN ...)")]
    NotPem { var: &'static str, path: PathBuf },
    #[error("{set} is set but {missing} is not: a TLS identity needs both a certificate and its private key")]
    HalfIdentity { set: &'static str, missing: &'static str },
    #[error("{CLIENT_AUTH_VAR}={0:?} is not valid: expected `require` (mutual TLS) or `none`")]
    BadClientAuth(String),
    #[error("{CLIENT_AUTH_VAR}=require needs {CA_VAR}, the CA that signs the clients' certificates")]
    ClientAuthWithoutCa,
    #[error(
        "TLS is configured ({set} is set) but {CA_VAR} is not: clients need the CA that signed the cluster's certificates"
    )]
    NoCa { set: &'static str },
    #[error("serving TLS needs {CERT_VAR} and {KEY_VAR}: only {CA_VAR} is set")]
    NoServerIdentity,
}

/// One process's TLS settings, read from the environment.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    identity: Option<(Vec<u8>, Vec<u8>)>,
    ca: Option<Vec<u8>>,
    require_client_cert: bool,
}

fn read_pem(var: &'static str) -> Result<Option<Vec<u8>>, TlsError> {
    let Some(path) = std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from) else {
        return Ok(None);
    };
    let bytes = std::fs::read(&path).map_err(|source| TlsError::Read { var, path: path.clone(), source })?;
    if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
        return Err(TlsError::NotPem { var, path });
    }
    Ok(Some(bytes))
}

impl TlsSettings {
    /// The settings in this process's environment; `None` when TLS is off.
    pub fn from_env() -> Result<Option<TlsSettings>, TlsError> {
        let cert = read_pem(CERT_VAR)?;
        let key = read_pem(KEY_VAR)?;
        let ca = read_pem(CA_VAR)?;
        let require_client_cert = match std::env::var(CLIENT_AUTH_VAR).unwrap_or_default().as_str() {
            "" | "none" => false,
            "require" => true,
            other => return Err(TlsError::BadClientAuth(other.to_string())),
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err(TlsError::HalfIdentity { set: CERT_VAR, missing: KEY_VAR }),
            (None, Some(_)) => return Err(TlsError::HalfIdentity { set: KEY_VAR, missing: CERT_VAR }),
        };
        if identity.is_none() && ca.is_none() {
            if require_client_cert {
                return Err(TlsError::ClientAuthWithoutCa);
            }
            return Ok(None);
        }
        if ca.is_none() {
            return Err(if require_client_cert {
                TlsError::ClientAuthWithoutCa
            } else {
                TlsError::NoCa { set: CERT_VAR }
            });
        }
        Ok(Some(TlsSettings { identity, ca, require_client_cert }))
    }

    /// This process's certificate and key (PEM), when it has them.
    pub fn identity(&self) -> Option<(&[u8], &[u8])> {
        self.identity.as_ref().map(|(cert, key)| (cert.as_slice(), key.as_slice()))
    }

    /// What a node's server presents, and whether it demands client certificates.
    pub fn server_config(&self) -> Result<ServerTlsConfig, TlsError> {
        let (cert, key) = self.identity.as_ref().ok_or(TlsError::NoServerIdentity)?;
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if self.require_client_cert {
            let ca = self.ca.as_ref().ok_or(TlsError::ClientAuthWithoutCa)?;
            config = config.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(false);
        }
        Ok(config)
    }

    /// How a client verifies the server, and the certificate it presents if it has one.
    pub fn client_config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Env vars are process-wide, so every case runs in this one test, in order.
    #[test]
    fn reads_and_validates_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").unwrap();
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "not a pem").unwrap();
        let set = |vars: &[(&str, &Path)]| {
            for var in [CERT_VAR, KEY_VAR, CA_VAR, CLIENT_AUTH_VAR] {
                // SAFETY: this test is the only code in this binary touching these variables.
                unsafe { std::env::remove_var(var) };
            }
            for (var, value) in vars {
                // SAFETY: as above.
                unsafe { std::env::set_var(var, value) };
            }
            TlsSettings::from_env()
        };
        assert!(set(&[]).unwrap().is_none());
        assert!(matches!(set(&[(CERT_VAR, &pem)]), Err(TlsError::HalfIdentity { missing: KEY_VAR, .. })));
        assert!(matches!(set(&[(CERT_VAR, &pem), (KEY_VAR, &pem)]), Err(TlsError::NoCa { .. })));
        assert!(matches!(set(&[(CA_VAR, &junk)]), Err(TlsError::NotPem { var: CA_VAR, .. })));
        let missing = dir.path().join("missing.pem");
        assert!(matches!(set(&[(CA_VAR, &missing)]), Err(TlsError::Read { var: CA_VAR, .. })));
        let client_only = set(&[(CA_VAR, &pem)]).unwrap().unwrap();
        assert!(matches!(client_only.server_config(), Err(TlsError::NoServerIdentity)));
        let mutual = set(&[(CERT_VAR, &pem), (KEY_VAR, &pem), (CA_VAR, &pem), (CLIENT_AUTH_VAR, Path::new("require"))]);
        assert!(mutual.unwrap().unwrap().require_client_cert);
        let bad = set(&[(CA_VAR, &pem), (CLIENT_AUTH_VAR, Path::new("maybe"))]);
        assert!(matches!(bad, Err(TlsError::BadClientAuth(v)) if v == "maybe"));
        assert!(matches!(set(&[(CLIENT_AUTH_VAR, Path::new("require"))]), Err(TlsError::ClientAuthWithoutCa)));
        set(&[]).unwrap();
    }
}
