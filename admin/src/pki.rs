//! The TLS side: a CA of this deployment, the server's certificate (for the
//! names clients reach it by) and one client certificate per credential, so
//! the server can require mutual TLS. ECDSA P-256, made with rcgen.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::{Error, Result};

/// A certificate and its private key, in PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

fn failed(what: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |e| Error::Key(format!("{what}: {e}"))
}

fn name(common_name: &str, unit: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Arbiter");
    if let Some(unit) = unit {
        dn.push(DnType::OrganizationalUnitName, unit);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Valid from an hour ago (clock skew between hosts) for `days`.
fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
}

/// A new CA.
pub fn new_ca(days: i64) -> Result<Pem> {
    let key = KeyPair::generate().map_err(failed("making the CA key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name("Arbiter CA", None);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let cert = params
        .self_signed(&key)
        .map_err(failed("signing the CA certificate"))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A certificate signed by the CA: for a server (`names` become its SANs)
/// or for a client (`names` empty; the name goes in the subject).
pub fn issue(
    ca: &Pem,
    common_name: &str,
    unit: &str,
    names: &[String],
    server: bool,
    days: i64,
) -> Result<Pem> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(failed("reading the CA key"))?;
    let issuer =
        Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(failed("reading the CA certificate"))?;
    let key = KeyPair::generate().map_err(failed("making a key"))?;
    let mut params =
        CertificateParams::new(names.to_vec()).map_err(failed("a certificate's names"))?;
    params.distinguished_name = name(common_name, Some(unit));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // A server of a cluster also dials the others' route ports with its
    // certificate, as a client.
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    validity(&mut params, days);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(failed("signing a certificate"))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A certificate that expired yesterday, signed by `ca`: for tests of the
/// refusal a user sees.
pub fn issue_expired(ca: &Pem, common_name: &str) -> Result<Pem> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(failed("reading the CA key"))?;
    let issuer =
        Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(failed("reading the CA certificate"))?;
    let key = KeyPair::generate().map_err(failed("making a key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name, Some("test"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(30);
    params.not_after = now - Duration::days(1);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(failed("signing a certificate"))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}
