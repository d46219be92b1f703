//! Who may use the HTTP transport: the holder of the bearer token given at
//! start (`--token-file` or `ARBITER_MCP_TOKEN`). The token is kept only as
//! its SHA-256 digest and compared in constant time; it is never printed,
//! logged or shown by `Debug`.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

/// A token shorter than this is refused at start.
pub const MIN_TOKEN_LEN: usize = 16;

/// The access token, as given. `Debug` never shows it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// The token read from a file or the environment: surrounding
    /// whitespace dropped, at least [`MIN_TOKEN_LEN`] characters.
    pub fn new(raw: &str) -> Result<Self, String> {
        let token = raw.trim();
        if token.chars().count() < MIN_TOKEN_LEN {
            return Err(format!(
                "the access token must be at least {MIN_TOKEN_LEN} characters \
                 (e.g. `openssl rand -base64 32`)"
            ));
        }
        if token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(
                "the access token must be one word of printable characters (it travels in an \
                 HTTP header)"
                    .to_owned(),
            );
        }
        Ok(Self(token.to_owned()))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

/// Checks requests against the token's digest.
pub struct Gate {
    digest: [u8; 32],
}

impl Gate {
    pub fn new(token: &Token) -> Self {
        Self {
            digest: digest(&token.0),
        }
    }

    /// Whether an `Authorization` header's value carries the token
    /// (`Bearer <token>`; the scheme's case does not matter). Both sides
    /// are hashed first, so the comparison takes the same time whatever the
    /// length or the content of what was sent.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some((scheme, given)) = value.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return false;
        }
        bool::from(digest(given.trim()).ct_eq(&self.digest))
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-token";

    #[test]
    fn only_the_bearer_token_itself_passes() {
        let gate = Gate::new(&Token::new(TOKEN).unwrap());
        let cases = [
            (Some(format!("Bearer {TOKEN}")), true),
            (Some(format!("bearer {TOKEN}")), true),
            (Some(format!("  Bearer   {TOKEN}  ")), true),
            (None, false),
            (Some(String::new()), false),
            (Some("Bearer".to_owned()), false),
            (Some(format!("Basic {TOKEN}")), false),
            (Some(format!("Bearer {TOKEN}x")), false),
            (Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])), false),
            (Some(TOKEN.to_owned()), false),
        ];
        for (header, want) in cases {
            assert_eq!(gate.allows(header.as_deref()), want, "{header:?}");
        }
    }

    #[test]
    fn a_short_or_spaced_token_is_refused_and_none_is_ever_shown() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("0123456789 abcdefgh").is_err());
        let token = Token::new(&format!("  {TOKEN}\n")).unwrap();
        assert_eq!(format!("{token:?}"), "Token(<hidden>)");
        assert!(Gate::new(&token).allows(Some(&format!("Bearer {TOKEN}"))));
    }
}
