//! Sealing a session's step record where others can read it (protocol v3).
//!
//! An input to an Orchestrator is stored once, as the session's log entry
//! that shows it, on a subject its worker reads (`session.<id>.in.<orch>.<n>`).
//! When that entry is the first one a step shows, it also carries the
//! step's record, which holds far more than the input: the Arbiter's
//! transcript, queued human lines, notes. So the record rides on such an
//! entry **sealed**: XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`)
//! under a key only coordinators hold, a random 24-byte nonce per record,
//! and the session id as associated data (a sealed record moved into another
//! session does not open). Workers and consoles see an opaque `sealed` field.
//!
//! The key is 32 random bytes that the first coordinator stores, create-only,
//! under [`KEY_NAME`] in the coordinators' own bucket
//! (`arbiter_coordinator_leases`, which no other role may read); every
//! coordinator reads it at start.

use std::fmt;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use data_encoding::BASE64;

use arbiter_protocol::subjects;

/// The key of the sealing key in the coordinators' bucket.
pub const KEY_NAME: &str = "sealing-key";
const NONCE_LEN: usize = 24;

/// Seals and opens session step records.
#[derive(Clone)]
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.write_str("Sealer")
    }
}

/// Why a sealed record did not open.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("a sealed record is not base64")]
    Encoding,
    #[error("a sealed record is too short")]
    Short,
    #[error(
        "a sealed record did not open: sealed under another key, for another session, or changed"
    )]
    Open,
}

impl Sealer {
    /// A sealer with this 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// A sealer with the key as the bucket stores it (base64); `None` when
    /// it is not 32 bytes of base64.
    pub fn from_stored(value: &[u8]) -> Option<Self> {
        let key: [u8; 32] = BASE64.decode(value).ok()?.try_into().ok()?;
        Some(Self::new(&key))
    }

    /// A sealer with a fresh random key (tests).
    pub fn random() -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(&XChaCha20Poly1305::generate_key(&mut OsRng)),
        }
    }

    /// `plain` sealed for `session_id`: base64 of nonce, then ciphertext and tag.
    pub fn seal(&self, session_id: &str, plain: &[u8]) -> String {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: plain,
            aad: session_id.as_bytes(),
        };
        // Encryption into a Vec fails only past 2^38 bytes, far beyond a message.
        let sealed = self.cipher.encrypt(&nonce, payload).unwrap_or_default();
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        BASE64.encode(&out)
    }

    /// What [`Sealer::seal`] sealed for `session_id`.
    pub fn open(&self, session_id: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        let bytes = BASE64
            .decode(sealed.as_bytes())
            .map_err(|_| SealError::Encoding)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Short);
        }
        let (nonce, body) = bytes.split_at(NONCE_LEN);
        let payload = Payload {
            msg: body,
            aad: session_id.as_bytes(),
        };
        self.cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .map_err(|_| SealError::Open)
    }

    /// The coordinators' sealing key: read from their bucket, or made and
    /// stored there (create-only, fenced on the key having no value) when no
    /// coordinator made one yet. Two coordinators starting at once store
    /// one key: the second's create is refused, and it reads the first's.
    pub async fn load_or_create(js: &jetstream::Context) -> crate::Result<Self> {
        let what = || "reading the sealing key".to_owned();
        let kv = js
            .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
            .await
            .map_err(|e| crate::js_error(what(), e))?;
        for _ in 0..5 {
            if let Some(value) = kv
                .get(KEY_NAME)
                .await
                .map_err(|e| crate::js_error(what(), e))?
            {
                return Self::from_stored(&value).ok_or_else(|| crate::BusError::Config(format!(
                    "the sealing key in {} is not 32 bytes of base64: it was changed by hand; restore it, or the sealed step records cannot be read",
                    subjects::COORDINATOR_LEASES_BUCKET
                )));
            }
            let key = XChaCha20Poly1305::generate_key(&mut OsRng);
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, "0");
            let subject = subjects::kv_subject(subjects::COORDINATOR_LEASES_BUCKET, KEY_NAME);
            let ack = js
                .publish_with_headers(subject, headers, BASE64.encode(&key).into())
                .await
                .map_err(|e| crate::js_error("storing the sealing key", e))?;
            match ack.await {
                Ok(_) => return Ok(Self::new(&key.into())),
                // Another coordinator stored one first: read it.
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => continue,
                Err(e) => return Err(crate::js_error("storing the sealing key", e)),
            }
        }
        Err(crate::BusError::Config(
            "the sealing key could neither be read nor stored".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_opens_only_for_its_session_and_key() {
        let sealer = Sealer::random();
        // Its Debug output never shows the key.
        assert_eq!(format!("{sealer:?}"), "Sealer");
        let sealed = sealer.seal("s1", b"{\"rev\":1}");
        assert!(!sealed.contains("rev"));
        assert_eq!(sealer.open("s1", &sealed).unwrap(), b"{\"rev\":1}");
        // Two seals of one record differ (a nonce each).
        assert_ne!(sealed, sealer.seal("s1", b"{\"rev\":1}"));
        assert!(matches!(sealer.open("s2", &sealed), Err(SealError::Open)));
        assert!(matches!(
            Sealer::random().open("s1", &sealed),
            Err(SealError::Open)
        ));
        let mut changed = BASE64.decode(sealed.as_bytes()).unwrap();
        *changed.last_mut().unwrap() ^= 1;
        assert!(matches!(
            sealer.open("s1", &BASE64.encode(&changed)),
            Err(SealError::Open)
        ));
        assert!(matches!(sealer.open("s1", "!!"), Err(SealError::Encoding)));
        assert!(matches!(sealer.open("s1", "AAAA"), Err(SealError::Short)));
    }

    /// What sealing costs per record, beside encoding it: the figure in
    /// docs/architecture.md (`cargo test --release -p arbiter-bus seal_cost
    /// -- --ignored --nocapture`).
    #[test]
    #[ignore = "a measurement"]
    #[allow(clippy::print_stdout, reason = "a measurement prints its figures")]
    fn seal_cost() {
        let sealer = Sealer::random();
        for size in [1024usize, 8 * 1024, 64 * 1024] {
            let record = serde_json::json!({"rev": 1, "text": "x".repeat(size)});
            let rounds = 2000;
            let started = std::time::Instant::now();
            let mut plain = Vec::new();
            for _ in 0..rounds {
                plain = serde_json::to_vec(&record).unwrap();
            }
            let encode = started.elapsed() / rounds;
            let started = std::time::Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(sealer.seal("s1", &plain));
            }
            let seal = started.elapsed() / rounds;
            println!("{size} B: encode {encode:?}, seal {seal:?}");
        }
    }
}
