//! The Standard Webhooks signature (standardwebhooks.com): HMAC-SHA256 of
//! `<id>.<timestamp>.<body>` under the hook's secret, base64, sent as
//! `webhook-signature: v1,<signature>` beside `webhook-id` and
//! `webhook-timestamp` (unix seconds). Pure: the delivery adds the headers.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::config::Secret;

pub(crate) const ID_HEADER: &str = "webhook-id";
pub(crate) const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub(crate) const SIGNATURE_HEADER: &str = "webhook-signature";

/// `v1,<base64 HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`.
pub(crate) fn signature(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length: this cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.bytes()) else {
        unreachable!("HMAC accepts any key length")
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        data_encoding::BASE64.encode(&mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            signature(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // A secret without the prefix is its own bytes.
        let plain = Secret::parse("hunter2").unwrap();
        assert_ne!(
            signature(&plain, "a", 1, b"{}"),
            signature(&secret, "a", 1, b"{}")
        );
    }
}
