//! `tls_ca_file`, `tls_cert_file` and `tls_key_file` of `[redis]`.
//!
//! The files are read and parsed when `jobs.toml` loads, so a missing or
//! garbled certificate is a file:line:col error at start (exit 78), not a
//! connection that fails at 2 a.m. Messages name the file, never its
//! content: a private key must not end up in the journal. There is no way
//! to turn certificate checks off (the redis crate's `#insecure` URL
//! fragment is refused); a self-signed server is trusted through its CA.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::error::ConfigError;
use super::model::{ClientIdentity, RedisTls};
use super::table::Table;

/// The `[redis]` keys this module reads.
pub(super) const KEYS: [&str; 3] = ["tls_ca_file", "tls_cert_file", "tls_key_file"];

/// `written`, relative to the directory of `config_path` unless absolute.
pub(super) fn beside(config_path: &Path, written: &str) -> PathBuf {
    let written = Path::new(written);
    match config_path.parent() {
        Some(dir) if written.is_relative() => dir.join(written),
        _ => written.to_path_buf(),
    }
}

/// Reads the TLS keys of `table`. `plain`: the server key (`url`,
/// `cluster`, `redlock`, `sentinel.urls`) whose URLs are not all
/// `rediss://`, if any; then any TLS key is an error, because the
/// certificates apply to every server of the mode.
pub(super) fn read(
    table: &Table<'_, '_>,
    config_path: &Path,
    plain: Option<&str>,
) -> Result<RedisTls, ConfigError> {
    let mut files = Vec::new();
    for key in KEYS {
        if let Some(value) = table.string(key)? {
            if let Some(server) = plain {
                let message = match server {
                    "url" => "needs a `rediss://` url; TLS settings on a plain connection would \
                              be ignored"
                        .to_string(),
                    list => format!(
                        "needs `rediss://` for every URL of `{list}`; TLS settings on plain \
                         connections would be ignored"
                    ),
                };
                return Err(table.error(value.span(), key, message));
            }
            let path = beside(config_path, value.get_ref());
            let bytes = std::fs::read(&path).map_err(|err| {
                let message = format!("cannot read `{}`: {err}", path.display());
                table.error(value.span(), key, message)
            })?;
            let fail = |what: &str| {
                let message = format!("`{}` holds no {what}", path.display());
                table.error(value.span(), key, message)
            };
            let valid = match key {
                "tls_key_file" => PrivateKeyDer::from_pem_slice(&bytes).is_ok(),
                _ => has_certificate(&bytes),
            };
            if !valid {
                return Err(fail(match key {
                    "tls_key_file" => "PEM private key",
                    _ => "PEM certificate",
                }));
            }
            files.push((key, value.span(), bytes));
        }
    }
    let mut tls = RedisTls::default();
    let (mut cert, mut key) = (None, None);
    for (name, span, bytes) in files {
        match name {
            "tls_ca_file" => tls.ca = Some(bytes),
            "tls_cert_file" => cert = Some((span, bytes)),
            _ => key = Some((span, bytes)),
        }
    }
    tls.client = match (cert, key) {
        (Some((_, cert)), Some((_, key))) => Some(ClientIdentity { cert, key }),
        (Some((span, _)), None) => {
            return Err(table.error(span, "tls_cert_file", "needs `tls_key_file` too"));
        }
        (None, Some((span, _))) => {
            return Err(table.error(span, "tls_key_file", "needs `tls_cert_file` too"));
        }
        (None, None) => None,
    };
    Ok(tls)
}

/// Whether `pem` holds at least one certificate and nothing unparsable.
fn has_certificate(pem: &[u8]) -> bool {
    let mut found = false;
    for cert in CertificateDer::pem_slice_iter(pem) {
        if cert.is_err() {
            return false;
        }
        found = true;
    }
    found
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use crate::config::tests::{complete, env};

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";

    fn load(dir: &std::path::Path, redis: &str) -> Result<crate::config::Config, String> {
        let text = complete(&format!("[redis]\n{redis}"));
        parse(&text, &dir.join("jobs.toml"), &env).map_err(|e| e.to_string())
    }

    #[test]
    fn tls_files_are_read_at_load_relative_to_the_config() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ca.pem"), CERT).expect("write");
        std::fs::write(dir.path().join("client.pem"), CERT).expect("write");
        std::fs::write(dir.path().join("client.key"), KEY).expect("write");
        std::fs::write(dir.path().join("junk.pem"), "not pem").expect("write");
        let url = "url = \"rediss://db:6380\"\n";
        let all = format!(
            "{url}tls_ca_file = \"ca.pem\"\ntls_cert_file = \"client.pem\"\ntls_key_file = \"client.key\"\n"
        );
        let tls = load(dir.path(), &all).expect("valid").redis.tls;
        assert!(tls.ca.is_some() && tls.client.is_some());
        let err = load(dir.path(), &format!("{url}tls_ca_file = \"missing.pem\"\n")).unwrap_err();
        assert!(
            err.contains(":3:15: [redis] `tls_ca_file`: cannot read `"),
            "{err}"
        );
        let err = load(dir.path(), &format!("{url}tls_ca_file = \"junk.pem\"\n")).unwrap_err();
        assert!(err.contains("holds no PEM certificate"), "{err}");
        let err = load(dir.path(), &format!("{url}tls_key_file = \"ca.pem\"\n")).unwrap_err();
        assert!(err.contains("holds no PEM private key"), "{err}");
        let err = load(
            dir.path(),
            &format!("{url}tls_cert_file = \"client.pem\"\n"),
        )
        .unwrap_err();
        assert!(
            err.contains("`tls_cert_file`: needs `tls_key_file` too"),
            "{err}"
        );
        let plain = "url = \"redis://db\"\ntls_ca_file = \"ca.pem\"\n";
        assert!(
            load(dir.path(), plain)
                .unwrap_err()
                .contains("needs a `rediss://` url")
        );
        let insecure = "url = \"rediss://u:hunter2@db/#insecure\"\n";
        let err = load(dir.path(), insecure).unwrap_err();
        assert!(
            err.contains("`#insecure`") && !err.contains("hunter2"),
            "{err}"
        );
    }
}
