//! Who may see and steer: the access token `arbiter-web` prints once at
//! start, exchanged for a login cookie (HttpOnly, SameSite=Strict), and a
//! CSRF token per login that every request changing something must carry.
//! A script may send the token itself as `Authorization: Bearer <token>`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq as _;

/// The cookie a login is kept in. Under TLS it gets the `__Host-` prefix,
/// which browsers accept only with `Secure`, `Path=/` and no `Domain`.
const COOKIE: &str = "arbiter_web";
const COOKIE_TLS: &str = "__Host-arbiter_web";
/// How long a login lasts.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// Logins kept at once; a new one past this replaces the oldest.
const MAX_LOGINS: usize = 256;
/// Random bytes in a token, a login id and a CSRF token.
const TOKEN_BYTES: usize = 32;

/// A fresh random token: 32 bytes from the OS, base64url.
pub fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(data_encoding::BASE64URL_NOPAD.encode(&bytes))
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// One browser's login.
#[derive(Debug, Clone)]
pub struct Login {
    /// What each form of this login carries back.
    pub csrf: String,
    started: Instant,
}

/// How a request proved who it is.
#[derive(Debug, Clone)]
pub enum Access {
    /// The login cookie: state-changing requests must carry its CSRF token.
    Cookie(Login),
    /// The access token in an `Authorization` header: a script, not a
    /// browser (a browser never sends the header by itself), so no CSRF.
    Bearer,
}

impl Access {
    /// The CSRF token forms of this request's pages carry (none for a script).
    pub fn csrf(&self) -> &str {
        match self {
            Access::Cookie(login) => &login.csrf,
            Access::Bearer => "",
        }
    }

    /// Whether `given` (a form's `csrf` field) is this login's.
    pub fn allows_change(&self, given: &str) -> bool {
        match self {
            Access::Cookie(login) => same(&login.csrf, given),
            Access::Bearer => true,
        }
    }
}

/// The access token and the logins made with it.
pub struct Gate {
    token: String,
    tls: bool,
    logins: Mutex<HashMap<String, Login>>,
}

impl Gate {
    pub fn new(token: String, tls: bool) -> Self {
        Self {
            token,
            tls,
            logins: Mutex::new(HashMap::new()),
        }
    }

    pub fn token_matches(&self, given: &str) -> bool {
        same(&self.token, given)
    }

    /// The name of the login cookie.
    pub fn cookie_name(&self) -> &'static str {
        if self.tls { COOKIE_TLS } else { COOKIE }
    }

    /// A new login: its id (the cookie's value) and the `Set-Cookie` header.
    pub fn login(&self) -> anyhow::Result<HeaderValue> {
        let id = random_token()?;
        let login = Login {
            csrf: random_token()?,
            started: Instant::now(),
        };
        let mut logins = self.logins.lock().unwrap_or_else(|e| e.into_inner());
        logins.retain(|_, l| l.started.elapsed() < LOGIN_LIFETIME);
        if logins.len() >= MAX_LOGINS
            && let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, l)| l.started)
                .map(|(k, _)| k.clone())
        {
            logins.remove(&oldest);
        }
        logins.insert(id.clone(), login);
        let secure = if self.tls { "; Secure" } else { "" };
        let cookie = format!(
            "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            self.cookie_name(),
            LOGIN_LIFETIME.as_secs()
        );
        Ok(HeaderValue::from_str(&cookie)?)
    }

    /// Who the request is, from its headers; `None`: no valid proof.
    pub fn access(&self, headers: &HeaderMap) -> Option<Access> {
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            return self.token_matches(bearer.trim()).then_some(Access::Bearer);
        }
        let id = cookie(headers, self.cookie_name())?;
        let logins = self.logins.lock().unwrap_or_else(|e| e.into_inner());
        // The map is looked up by a secret: a HashMap lookup compares the
        // hash first, which tells an attacker nothing about the id.
        logins
            .get(id)
            .filter(|l| l.started.elapsed() < LOGIN_LIFETIME)
            .cloned()
            .map(Access::Cookie)
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// `query` without its `token` parameter (what a login redirects to).
pub fn without_token(query: &str) -> String {
    query
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some("token"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The `token` parameter of a query, if it has one.
pub fn token_in(query: &str) -> Option<&str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                k.clone(),
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    #[test]
    fn a_login_is_an_http_only_strict_cookie_that_proves_access_with_its_own_csrf() {
        let gate = Gate::new("t0ken".into(), false);
        let set = gate.login().map(|v| v.to_str().unwrap_or("").to_owned());
        let set = set.unwrap_or_default();
        assert!(set.contains("HttpOnly"), "{set}");
        assert!(set.contains("SameSite=Strict"), "{set}");
        assert!(!set.contains("Secure"), "no TLS, no Secure: {set}");
        let value = set
            .split(';')
            .next()
            .and_then(|kv| kv.split_once('='))
            .map(|(_, v)| v.to_owned())
            .unwrap_or_default();
        let access = gate.access(&headers(&[(
            header::COOKIE,
            &format!("x=1; arbiter_web={value}"),
        )]));
        let Some(access @ Access::Cookie(_)) = access else {
            panic!("the cookie is a login: {access:?}");
        };
        assert!(access.allows_change(access.csrf()));
        assert!(!access.allows_change(""));
        assert!(!access.allows_change("forged"));
        assert!(
            gate.access(&headers(&[(header::COOKIE, "arbiter_web=forged")]))
                .is_none()
        );
        assert!(gate.access(&HeaderMap::new()).is_none());
    }

    #[test]
    fn under_tls_the_cookie_is_secure_and_host_only() {
        let gate = Gate::new("t".into(), true);
        let set = gate
            .login()
            .map(|v| v.to_str().unwrap_or("").to_owned())
            .unwrap_or_default();
        assert!(set.starts_with("__Host-arbiter_web="), "{set}");
        assert!(set.contains("; Secure"), "{set}");
        assert!(set.contains("Path=/"), "{set}");
    }

    #[test]
    fn the_token_as_a_bearer_header_is_access_without_csrf_and_a_wrong_one_is_none() {
        let gate = Gate::new("right".into(), false);
        let ok = gate.access(&headers(&[(header::AUTHORIZATION, "Bearer right")]));
        assert!(matches!(ok, Some(Access::Bearer)));
        let wrong = gate.access(&headers(&[(header::AUTHORIZATION, "Bearer wrong")]));
        assert!(wrong.is_none());
        let prefix = gate.access(&headers(&[(header::AUTHORIZATION, "Bearer righ")]));
        assert!(prefix.is_none());
    }

    #[test]
    fn the_token_leaves_the_query_a_login_redirects_to() {
        assert_eq!(token_in("a=1&token=abc&b=2"), Some("abc"));
        assert_eq!(token_in("a=1"), None);
        assert_eq!(without_token("a=1&token=abc&b=2"), "a=1&b=2");
        assert_eq!(without_token("token=abc"), "");
    }

    #[test]
    fn tokens_are_long_random_and_distinct() {
        let (a, b) = (
            random_token().unwrap_or_default(),
            random_token().unwrap_or_default(),
        );
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
    }
}
