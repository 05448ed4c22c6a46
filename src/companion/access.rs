//! Who may use the server: the rules every request passes before any route sees it.
//!
//! `agentwire serve` starts agents that run commands on this machine, so the token is the
//! only thing between a caller and remote code execution. The rules, in the order they
//! apply:
//!
//! 1. **Host.** The `Host` header must name this server: `127.0.0.1:P`, `localhost:P`,
//!    `[::1]:P` (P the bound port), the bound address itself, or a name given with
//!    `--allow-host` (a reverse proxy's). This holds for every route, static files included,
//!    and defeats DNS rebinding: a page on `evil.example` that resolves to 127.0.0.1 sends
//!    `Host: evil.example:P`.
//! 2. **Origin.** A request that carries an `Origin` must come from one of those hosts
//!    (`http://` or `https://`) or from an origin given with `--allow-origin`. `null` is never
//!    allowed. The origin is checked against the list, never against the request's own
//!    `Host`.
//! 3. **Token** (all but static files and CORS preflights): `Authorization: Bearer T` or
//!    `?token=T` (percent-decoded), compared in constant time. Failed attempts draw from one
//!    bucket shared by all callers; while it is empty no token is checked at
//!    all, so guessing runs at the refill rate however many connections an attacker opens
//!    (the price: while someone keeps guessing, new requests with the right token wait too;
//!    open WebSockets are unaffected).
//!
//! Allowed origins other than the server's own get CORS headers on the API (and preflights
//! answered without a token); no other origin ever gets a CORS header.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, Method, Uri};

/// The shortest token the server accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// Failed token attempts that may come at once, and how many more each second.
const ATTEMPT_BURST: f64 = 20.0;
const ATTEMPTS_PER_SECOND: f64 = 4.0;

/// What a request was refused for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is missing or names another server (403 `forbidden_host`).
    Host(String),
    /// `Origin` is not allowed (403 `forbidden_origin`).
    Origin(String),
    /// No token was presented (401 `token_required`).
    TokenRequired,
    /// A wrong token (401 `bad_token`).
    BadToken,
    /// Too many wrong tokens lately: nothing is checked for a while (429 `too_many_attempts`).
    TooManyAttempts { retry_after: Duration },
}

/// The access rules of one server.
#[derive(Debug)]
pub struct Access {
    token: String,
    /// `host[:port]`, lowercase, as a `Host` header spells it.
    hosts: Vec<String>,
    /// Exact origins allowed besides the hosts' own (`--allow-origin`).
    origins: Vec<String>,
    attempts: Attempts,
}

impl Access {
    /// `hosts` are the names a `Host` header may carry (see [`loopback_hosts`]); `origins`
    /// are extra allowed origins, already checked by [`parse_origin`].
    pub fn new(token: String, hosts: Vec<String>, origins: Vec<String>) -> Access {
        Access {
            token,
            hosts: hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            origins,
            attempts: Attempts::new(ATTEMPT_BURST, ATTEMPTS_PER_SECOND),
        }
    }

    /// The `Host` and `Origin` rules: every request, static files included. There must be
    /// exactly one `Host`, and an absolute-form request target (`GET http://x/ HTTP/1.1`)
    /// must name an allowed host too.
    pub fn check_host_and_origin(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next().and_then(|h| h.to_str().ok());
        if hosts.next().is_some() {
            return Err(Refusal::Host("(several Host headers)".into()));
        }
        match host {
            Some(h) if self.host_allowed(h) => {}
            other => return Err(Refusal::Host(shorten(other.unwrap_or("(none)")))),
        }
        if let Some(authority) = uri.authority() {
            if !self.host_allowed(authority.as_str()) {
                return Err(Refusal::Host(shorten(authority.as_str())));
            }
        }
        match headers.get(header::ORIGIN) {
            None => Ok(()),
            Some(origin) if self.origin_allowed(origin) => Ok(()),
            Some(origin) => Err(Refusal::Origin(shorten(&String::from_utf8_lossy(
                origin.as_bytes(),
            )))),
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|a| a.eq_ignore_ascii_case(host))
    }

    /// Fetch metadata: a browser marks each request with `Sec-Fetch-Site`. A request another
    /// site's page made (`cross-site`, or `same-site`: a page on another port of this
    /// machine) reaches the API only from an origin given with `--allow-origin`, and is
    /// refused before its token is looked at, so such a page can neither guess tokens nor
    /// use up the attempts of the real user (an `<img src="…?token=guess">` sends no
    /// `Origin`). Requests without the header (other programs), `same-origin` and `none`
    /// (the user's own navigation) pass.
    pub fn check_fetch_site(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        match site {
            "same-origin" | "none" => Ok(()),
            _ if self.cors_origin(headers).is_some() => Ok(()),
            other => Err(Refusal::Origin(format!("(a {other} request)"))),
        }
    }

    fn origin_allowed(&self, origin: &HeaderValue) -> bool {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        if self.origins.iter().any(|o| o == origin) {
            return true;
        }
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        host.is_some_and(|h| self.host_allowed(h))
    }

    /// The origin that gets CORS headers: one given with `--allow-origin`.
    pub fn cors_origin<'a>(&self, headers: &'a HeaderMap) -> Option<&'a HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.origins.iter().any(|o| o == text).then_some(origin)
    }

    /// The token rule (after [`Access::check_host_and_origin`]).
    pub fn check_token(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        let Some(presented) = bearer(headers).or_else(|| query_token(uri)) else {
            return Err(Refusal::TokenRequired);
        };
        self.check_token_at(&presented, Instant::now())
    }

    fn check_token_at(&self, presented: &str, now: Instant) -> Result<(), Refusal> {
        self.attempts.check(now)?;
        if constant_time_eq(presented.as_bytes(), self.token.as_bytes()) {
            Ok(())
        } else {
            self.attempts.fail(now);
            Err(Refusal::BadToken)
        }
    }
}

/// A token bucket of failed attempts, shared by every caller.
#[derive(Debug)]
struct Attempts {
    state: Mutex<(f64, Instant)>,
    burst: f64,
    per_second: f64,
}

impl Attempts {
    fn new(burst: f64, per_second: f64) -> Attempts {
        Attempts {
            state: Mutex::new((burst, Instant::now())),
            burst,
            per_second,
        }
    }

    /// Refills, then refuses when the bucket holds less than one attempt.
    fn check(&self, now: Instant) -> Result<(), Refusal> {
        let mut state = self.state.lock().expect("attempts lock");
        let (left, at) = *state;
        let elapsed = now.saturating_duration_since(at).as_secs_f64();
        let left = (left + elapsed * self.per_second).min(self.burst);
        *state = (left, now.max(at));
        if left >= 1.0 {
            Ok(())
        } else {
            let wait = (1.0 - left) / self.per_second;
            Err(Refusal::TooManyAttempts {
                retry_after: Duration::from_secs_f64(wait),
            })
        }
    }

    fn fail(&self, now: Instant) {
        let mut state = self.state.lock().expect("attempts lock");
        state.0 = (state.0 - 1.0).max(0.0);
        state.1 = state.1.max(now);
    }
}

/// The `Host` values a server bound to `addr` answers to by default: the loopback names with
/// its port, and the bound address itself when it is a specific one.
pub fn loopback_hosts(addr: std::net::SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    if !addr.ip().is_unspecified() {
        let own = addr.to_string();
        if !hosts.contains(&own) {
            hosts.push(own);
        }
    }
    hosts
}

/// A value of `--allow-origin` or `--allow-host` that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("{0:?} is not an origin: http://HOST[:PORT] or https://HOST[:PORT], with no path")]
    NotAnOrigin(String),
    #[error("{0:?} is not a host: a name or address with an optional :port, as in a Host header")]
    NotAHost(String),
}

/// Checks an `--allow-origin` value: `scheme://host[:port]` exactly as a browser sends it
/// (no path, no trailing slash); `null` and `*` are refused.
pub fn parse_origin(s: &str) -> Result<String, FlagError> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .unwrap_or("");
    let valid = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    if !valid {
        return Err(FlagError::NotAnOrigin(s.to_owned()));
    }
    Ok(s.to_ascii_lowercase())
}

/// Checks an `--allow-host` value: a host name or address, with or without a port, as a
/// `Host` header carries it.
pub fn parse_host(s: &str) -> Result<String, FlagError> {
    let valid = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
    if valid {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(FlagError::NotAHost(s.to_owned()))
    }
}

/// CORS preflight requests carry no token: they are answered (for allowed origins only)
/// before the token check.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

/// `?token=`, percent-decoded as a browser's `encodeURIComponent` or `URLSearchParams` wrote it.
fn query_token(uri: &Uri) -> Option<String> {
    let query = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    query
        .0
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An echo of a caller's value in an error message, bounded.
fn shorten(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return format!("{s:?}");
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &s[..end], s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        let mut hosts = loopback_hosts("127.0.0.1:7777".parse().unwrap());
        hosts.push("agent.example.com".into());
        Access::new(
            "0123456789abcdef".into(),
            hosts,
            vec!["http://localhost:5173".into()],
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// Each case: Host, Origin (empty: none) → allowed, or the refusal's kind.
    #[test]
    fn hosts_and_origins() {
        let access = access();
        let cases: &[(&str, &str, &str)] = &[
            ("127.0.0.1:7777", "", "ok"),
            ("localhost:7777", "", "ok"),
            ("LOCALHOST:7777", "", "ok"),
            ("[::1]:7777", "", "ok"),
            ("agent.example.com", "https://agent.example.com", "ok"),
            ("127.0.0.1:7777", "http://127.0.0.1:7777", "ok"),
            ("127.0.0.1:7777", "http://localhost:7777", "ok"),
            ("127.0.0.1:7777", "http://localhost:5173", "ok"),
            // DNS rebinding: a foreign name, even when Origin matches it.
            ("evil.example:7777", "http://evil.example:7777", "host"),
            ("evil.example:7777", "", "host"),
            ("127.0.0.1:7778", "", "host"),
            ("localhost", "", "host"),
            ("", "", "host"),
            ("127.0.0.1:7777", "http://evil.example:7777", "origin"),
            ("127.0.0.1:7777", "null", "origin"),
            ("127.0.0.1:7777", "http://localhost:5173/", "origin"),
            ("127.0.0.1:7777", "ws://127.0.0.1:7777", "origin"),
        ];
        for (host, origin, want) in cases {
            let mut pairs = Vec::new();
            if !host.is_empty() {
                pairs.push(("host", *host));
            }
            if !origin.is_empty() {
                pairs.push(("origin", *origin));
            }
            let got = match access.check_host_and_origin(&headers(&pairs), &"/".parse().unwrap()) {
                Ok(()) => "ok",
                Err(Refusal::Host(_)) => "host",
                Err(Refusal::Origin(_)) => "origin",
                Err(other) => panic!("{other:?}"),
            };
            assert_eq!(got, *want, "Host {host:?}, Origin {origin:?}");
        }
    }

    #[test]
    fn one_host_and_the_request_target_too() {
        let access = access();
        let mut two = headers(&[("host", "127.0.0.1:7777")]);
        two.append("host", HeaderValue::from_static("evil.example:7777"));
        let root: Uri = "/".parse().unwrap();
        assert!(matches!(
            access.check_host_and_origin(&two, &root),
            Err(Refusal::Host(_))
        ));
        let one = headers(&[("host", "127.0.0.1:7777")]);
        let absolute: Uri = "http://evil.example:7777/api/info".parse().unwrap();
        assert!(matches!(
            access.check_host_and_origin(&one, &absolute),
            Err(Refusal::Host(_))
        ));
        let own: Uri = "http://localhost:7777/api/info".parse().unwrap();
        assert_eq!(access.check_host_and_origin(&one, &own), Ok(()));
    }

    /// Each case: `Sec-Fetch-Site`, `Origin` → passes or not.
    #[test]
    fn requests_other_sites_make_are_refused_before_the_token() {
        let access = access();
        for (site, origin, pass) in [
            ("", "", true),
            ("same-origin", "", true),
            ("none", "", true),
            ("same-site", "", false),
            ("cross-site", "", false),
            ("cross-site", "http://evil.example", false),
            ("cross-site", "http://localhost:5173", true),
            ("same-site", "http://localhost:5173", true),
        ] {
            let mut pairs = Vec::new();
            if !site.is_empty() {
                pairs.push(("sec-fetch-site", site));
            }
            if !origin.is_empty() {
                pairs.push(("origin", origin));
            }
            assert_eq!(
                access.check_fetch_site(&headers(&pairs)).is_ok(),
                pass,
                "{site} {origin}"
            );
        }
    }

    #[test]
    fn cors_is_only_for_listed_origins() {
        let access = access();
        let listed = headers(&[("origin", "http://localhost:5173")]);
        assert!(access.cors_origin(&listed).is_some());
        let own = headers(&[("origin", "http://127.0.0.1:7777")]);
        assert!(access.cors_origin(&own).is_none());
        assert!(access.cors_origin(&HeaderMap::new()).is_none());
    }

    #[test]
    fn tokens_from_the_header_or_the_decoded_query() {
        let access = Access::new("a+b/c=d%e&f0123456".into(), vec![], vec![]);
        let check = |h: &[(&'static str, &str)], uri: &str| {
            access.check_token(&headers(h), &uri.parse().unwrap())
        };
        assert_eq!(
            check(&[("authorization", "Bearer a+b/c=d%e&f0123456")], "/x"),
            Ok(())
        );
        assert_eq!(check(&[], "/x?token=a%2Bb%2Fc%3Dd%25e%26f0123456"), Ok(()));
        assert_eq!(
            check(&[], "/x?after=1&token=a%2Bb%2Fc%3Dd%25e%26f0123456"),
            Ok(())
        );
        assert_eq!(check(&[], "/x"), Err(Refusal::TokenRequired));
        assert_eq!(check(&[], "/x?token=nope"), Err(Refusal::BadToken));
        assert_eq!(
            check(&[("authorization", "Basic abc")], "/x"),
            Err(Refusal::TokenRequired)
        );
    }

    #[test]
    fn wrong_tokens_are_limited_for_every_caller() {
        let access = Access::new("0123456789abcdef".into(), vec![], vec![]);
        let t0 = Instant::now();
        for _ in 0..ATTEMPT_BURST as usize {
            assert_eq!(access.check_token_at("wrong", t0), Err(Refusal::BadToken));
        }
        // The bucket is empty: nothing is checked, not even the right token.
        for presented in ["wrong", "0123456789abcdef"] {
            assert!(matches!(
                access.check_token_at(presented, t0),
                Err(Refusal::TooManyAttempts { .. })
            ));
        }
        // A quarter of a second later one attempt is back.
        let later = t0 + Duration::from_millis(260);
        assert_eq!(access.check_token_at("0123456789abcdef", later), Ok(()));
        assert_eq!(
            access.check_token_at("wrong", later),
            Err(Refusal::BadToken)
        );
        assert!(matches!(
            access.check_token_at("0123456789abcdef", later),
            Err(Refusal::TooManyAttempts { .. })
        ));
        // In ten quiet seconds the whole burst is back.
        let quiet = later + Duration::from_secs(10);
        for _ in 0..ATTEMPT_BURST as usize {
            assert_eq!(
                access.check_token_at("wrong", quiet),
                Err(Refusal::BadToken)
            );
        }
    }

    #[test]
    fn tokens_compare_in_constant_time_and_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn origin_and_host_flags_are_checked() {
        assert_eq!(
            parse_origin("http://localhost:5173"),
            Ok("http://localhost:5173".into())
        );
        assert_eq!(
            parse_origin("https://App.Example.com"),
            Ok("https://app.example.com".into())
        );
        for bad in [
            "null",
            "*",
            "localhost:5173",
            "http://x/",
            "http://",
            "file://x",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_host("Agent.example.com"),
            Ok("agent.example.com".into())
        );
        assert_eq!(parse_host("10.0.0.5:7777"), Ok("10.0.0.5:7777".into()));
        for bad in ["", "a b", "x/y", "http://x"] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn echoed_values_are_bounded() {
        let long = "x".repeat(1 << 20);
        assert!(shorten(&long).len() < 300);
        assert_eq!(shorten("a"), "\"a\"");
    }
}
