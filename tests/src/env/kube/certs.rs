//! The control plane's PKI, generated per fixture with rcgen: one CA that signs the API
//! server's serving certificate and every client certificate (users are the certificate's CN,
//! groups its O, as kube-apiserver's `--client-ca-file` authenticator reads them), and the
//! ServiceAccount token signing key.
//!
//! Why one CA for both: nothing here tests CA separation, and a single `ca.crt` is what every
//! kubeconfig and `--root-ca-file` then needs. Keys are ECDSA P-256 (kube-apiserver signs
//! ServiceAccount tokens with ES256 from it).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

/// The files of one control plane's PKI.
pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    /// The CA certificate every client trusts (`ca.crt`).
    pub ca_cert: PathBuf,
    /// The API server's serving certificate.
    pub serving: CertFiles,
    /// The ServiceAccount token signing key (private, PKCS#8).
    pub sa_key: PathBuf,
    /// Its public half (`--service-account-key-file`).
    pub sa_pub: PathBuf,
}

/// Why the PKI could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Generating or signing failed.
    #[error("generating a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What happened.
        source: std::io::Error,
    },
}

fn write(path: PathBuf, pem: &str) -> Result<PathBuf, PkiError> {
    std::fs::write(&path, pem).map_err(|source| PkiError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn dn(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    dn
}

impl Pki {
    /// Writes a new CA, a serving certificate for `localhost` and `server_ips`, and the
    /// ServiceAccount key pair into `dir`.
    pub fn create(dir: &Path, server_ips: &[IpAddr]) -> Result<Pki, PkiError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = dn("announcer-test-ca", &[]);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_cert = write(dir.join("ca.crt"), &ca_cert.pem())?;
        let ca = Issuer::new(ca_params, ca_key);

        let mut sans = vec!["localhost".to_string(), "kubernetes.default.svc".into()];
        sans.extend(server_ips.iter().map(IpAddr::to_string));
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name = dn("kube-apiserver", &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = Self::sign(dir, "apiserver", params, &ca)?;

        let sa = KeyPair::generate()?;
        let sa_key = write(dir.join("sa.key"), &sa.serialize_pem())?;
        let sa_pub = write(dir.join("sa.pub"), &sa.public_key_pem())?;
        Ok(Pki {
            dir: dir.to_owned(),
            ca,
            ca_cert,
            serving,
            sa_key,
            sa_pub,
        })
    }

    fn sign(
        dir: &Path,
        name: &str,
        params: CertificateParams,
        ca: &Issuer<'static, KeyPair>,
    ) -> Result<CertFiles, PkiError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, ca)?;
        Ok(CertFiles {
            cert: write(dir.join(format!("{name}.crt")), &cert.pem())?,
            key: write(dir.join(format!("{name}.key")), &key.serialize_pem())?,
        })
    }

    /// A client certificate for `user` in `groups`, as `<file>.crt` / `<file>.key`.
    pub fn client(&self, file: &str, user: &str, groups: &[&str]) -> Result<CertFiles, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        Self::sign(&self.dir, file, params, &self.ca)
    }
}
