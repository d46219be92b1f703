//! NATS JWTs (operator, account, user) signed with nkeys, and `.creds`
//! files. The claims are the v2 ones nats-server reads in operator mode; the
//! encoding is the JWT one with the `ed25519-nkey` algorithm.
//!
//! Written here rather than taken from a crate: the one Rust crate that does
//! this (`nats-io-jwt` 0.1) calls itself a work in progress, panics on
//! signing errors and pulls a code generator into the build. The format is
//! small and stable, and `tests/` checks every token against a real server.

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde::Serialize;
use serde_json::{Value, json};

use arbiter_protocol::roles::Permissions;

use crate::{Error, Result};

const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

/// Signs `claims` (the `nats` part) about `subject` with `issuer`.
pub fn sign(
    issuer: &KeyPair,
    subject: &str,
    name: &str,
    issued_at: i64,
    nats: Value,
) -> Result<String> {
    #[derive(Serialize)]
    struct Claims<'a> {
        jti: String,
        iat: i64,
        iss: String,
        name: &'a str,
        sub: &'a str,
        nats: Value,
    }
    let mut claims = Claims {
        jti: String::new(),
        iat: issued_at,
        iss: issuer.public_key(),
        name,
        sub: subject,
        nats,
    };
    let unsigned = serde_json::to_vec(&claims).map_err(|e| Error::Key(e.to_string()))?;
    claims.jti = BASE32_NOPAD.encode(&sha256(&unsigned));
    let body = serde_json::to_vec(&claims).map_err(|e| Error::Key(e.to_string()))?;
    let half = format!(
        "{}.{}",
        BASE64URL_NOPAD.encode(HEADER.as_bytes()),
        BASE64URL_NOPAD.encode(&body)
    );
    let signature = issuer
        .sign(half.as_bytes())
        .map_err(|e| Error::Key(format!("signing a JWT: {e}")))?;
    Ok(format!("{half}.{}", BASE64URL_NOPAD.encode(&signature)))
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

/// The operator: it signs the accounts; the system account is its.
pub fn operator(operator: &KeyPair, system_account: &str, iat: i64) -> Result<String> {
    sign(
        operator,
        &operator.public_key(),
        "arbiter",
        iat,
        json!({"type": "operator", "version": 2, "system_account": system_account}),
    )
}

/// No limit (NATS writes -1 for unlimited).
const UNLIMITED: i64 = -1;

/// An account with JetStream enabled and no limits; `revocations` maps user
/// public keys to the time before which their JWTs are refused.
pub fn account(
    operator: &KeyPair,
    account: &str,
    name: &str,
    signing_key: Option<&str>,
    jetstream: bool,
    revocations: &std::collections::BTreeMap<String, i64>,
    iat: i64,
) -> Result<String> {
    let mut limits = json!({
        "subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED,
        "imports": UNLIMITED, "exports": UNLIMITED, "wildcards": true,
        "conn": UNLIMITED, "leaf": UNLIMITED,
    });
    if jetstream {
        limits["mem_storage"] = json!(UNLIMITED);
        limits["disk_storage"] = json!(UNLIMITED);
        limits["streams"] = json!(UNLIMITED);
        limits["consumer"] = json!(UNLIMITED);
    }
    let mut nats = json!({"type": "account", "version": 2, "limits": limits});
    if let Some(key) = signing_key {
        nats["signing_keys"] = json!([key]);
    }
    if !revocations.is_empty() {
        nats["revocations"] = json!(revocations);
    }
    sign(operator, account, name, iat, nats)
}

/// A user of `account`, signed by the account's signing key, with the
/// permissions of its role. `tags` are shown by monitoring (`role:worker`).
pub fn user(
    signing_key: &KeyPair,
    account: &str,
    user: &str,
    name: &str,
    permissions: Option<&Permissions>,
    tags: &[String],
    iat: i64,
) -> Result<String> {
    let mut nats = json!({
        "type": "user", "version": 2, "issuer_account": account,
        "subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED,
    });
    if let Some(p) = permissions {
        let list = |allow: &[String], deny: &[String]| {
            let mut out = json!({"allow": allow});
            if !deny.is_empty() {
                out["deny"] = json!(deny);
            }
            out
        };
        nats["pub"] = list(&p.publish_allow, &p.publish_deny);
        nats["sub"] = list(&p.subscribe_allow, &p.subscribe_deny);
        if p.allow_responses {
            nats["resp"] = json!({"max": 1, "ttl": 0});
        }
    }
    if !tags.is_empty() {
        nats["tags"] = json!(tags);
    }
    sign(signing_key, user, name, iat, nats)
}

/// A `.creds` file: the user's JWT and its seed, in the format every NATS
/// client reads.
pub fn creds_file(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_with_its_issuer_and_carries_the_claims() {
        let issuer = KeyPair::new_account();
        let subject = KeyPair::new_user();
        let token = user(
            &issuer,
            "ACCOUNT",
            &subject.public_key(),
            "w1",
            None,
            &[],
            1_700_000_000,
        )
        .unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let signature = BASE64URL_NOPAD.decode(parts[2].as_bytes()).unwrap();
        issuer
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .unwrap();
        let claims: Value =
            serde_json::from_slice(&BASE64URL_NOPAD.decode(parts[1].as_bytes()).unwrap()).unwrap();
        assert_eq!(claims["name"], "w1");
        assert_eq!(claims["iss"], issuer.public_key());
        assert_eq!(claims["nats"]["issuer_account"], "ACCOUNT");
        assert_eq!(claims["iat"], 1_700_000_000);
        let creds = creds_file(&token, "SUXXX");
        let info = arbiter_bus::connect::read_creds_info(&creds).unwrap();
        assert_eq!(info.name.as_deref(), Some("w1"));
    }
}
