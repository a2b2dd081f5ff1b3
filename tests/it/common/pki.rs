//! A private CA for the TLS tests, made with `openssl` in a temp dir:
//! [`Pki::ca`] a self-signed CA, [`Pki::leaf`] a certificate it signed for
//! 127.0.0.1, and [`Pki::server_files`] the usual pair (CA `ca`, server
//! certificate `server`) as [`TlsFiles`] for `redis-server`'s `tls-*`
//! settings. The files live as long as the [`Pki`]; keep it until the
//! servers using them are stopped. An `openssl` failure panics with its
//! output (a test setup error, not something the product handles).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// Files of a private CA and certificates it signed, made with `openssl`.
pub struct Pki {
    dir: tempfile::TempDir,
}

/// What a TLS-only `redis-server` (data node or sentinel) is started with:
/// its certificate and key, and the CA clients must trust (and that it
/// trusts for client certificates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// `redis-server` arguments: TLS only on `port` (`--port 0`), client
    /// certificates not asked, replication (and, for a sentinel, its links
    /// to servers and other sentinels) over TLS. With `cluster`, the
    /// cluster bus too (`tls-cluster yes`).
    pub fn server_args(&self, port: u16, cluster: bool) -> Vec<String> {
        let mut args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &self.cert.display().to_string(),
            "--tls-key-file",
            &self.key.display().to_string(),
            "--tls-ca-cert-file",
            &self.ca.display().to_string(),
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
        if cluster {
            args.extend(["--tls-cluster".to_string(), "yes".to_string()]);
        }
        args
    }

    /// The same as [`TlsFiles::server_args`] (without the cluster bus) as
    /// lines of a config file, e.g. `sentinel.conf`.
    pub fn config_lines(&self, port: u16) -> String {
        self.server_args(port, false)
            .chunks(2)
            .map(|pair| format!("{} {}\n", pair[0].trim_start_matches("--"), pair[1]))
            .collect()
    }
}

impl Pki {
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A CA `ca` and a server certificate `server` it signed, as
    /// [`TlsFiles`].
    pub fn server_files() -> (Pki, TlsFiles) {
        let pki = Pki::new();
        pki.ca("ca");
        pki.leaf("ca", "server");
        let files = TlsFiles {
            ca: pki.path("ca.pem"),
            cert: pki.path("server.pem"),
            key: pki.path("server.key"),
        };
        (pki, files)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("`openssl` must be on PATH (apt-get install openssl)");
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    }

    /// `NAME.pem` / `NAME.key`: a self-signed CA.
    pub fn ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    /// `NAME.pem` / `NAME.key` signed by `ca`, valid for 127.0.0.1.
    pub fn leaf(&self, ca: &str, name: &str) {
        self.leaf_for(ca, name, "IP:127.0.0.1,DNS:localhost");
    }

    /// `NAME.pem` / `NAME.key` signed by `ca`, valid for the names of
    /// `san` (a `subjectAltName` value such as `DNS:elsewhere.invalid`).
    pub fn leaf_for(&self, ca: &str, name: &str, san: &str) {
        fs::write(self.path("san.ext"), format!("subjectAltName={san}\n")).expect("write san");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            &format!("{name}.pem"),
        ]);
    }
}
