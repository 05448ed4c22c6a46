//! What `agentwire tail` is given to connect to: the URL `agentwire serve` prints
//! (`http://127.0.0.1:7777/#token=…`), the page's address (`…/#SESSION`,
//! `…/#token=…&session=…`, the older `?token=…`), an API path (`…/api/sessions/SESSION`), a
//! base `http(s)://HOST:PORT` or a WebSocket URL (`ws(s)://HOST:PORT/ws`). Pure parsing.

/// Where to connect, and what the URL said besides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The WebSocket URL, without the token: `ws://127.0.0.1:7777/ws`.
    pub ws_url: String,
    /// `token=` in the fragment or the query.
    pub token: Option<String>,
    /// The session the URL names, if any.
    pub session: Option<String>,
}

/// Why a URL cannot be a server's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error(
        "{0:?} is not a URL: give the one `agentwire serve` printed (http://127.0.0.1:7777/#token=…) or ws://HOST:PORT/ws"
    )]
    NotAUrl(String),
    #[error("{url:?}: the scheme {scheme:?} is not one of http, https, ws, wss")]
    Scheme { url: String, scheme: String },
    #[error("{0:?} names no host")]
    NoHost(String),
    #[error("{url:?}: {host:?} is not a host name or address")]
    Host { url: String, host: String },
    #[error("{url:?}: {port:?} is not a port")]
    Port { url: String, port: String },
    #[error(
        "{0:?}: a user name or password in the URL is not how a token is given: use #token=, --token-file or AGENTWIRE_TOKEN"
    )]
    UserInfo(String),
    #[error("{0:?}: a bad %-escape")]
    Escape(String),
}

/// Parses what the user gave as the server's address.
pub fn parse(url: &str) -> Result<Target, UrlError> {
    let err_url = || url.to_owned();
    if url.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::NotAUrl(err_url()));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(UrlError::NotAUrl(err_url()));
    };
    let ws_scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        _ => {
            return Err(UrlError::Scheme {
                url: err_url(),
                scheme: scheme.to_owned(),
            })
        }
    };
    let is_ws = scheme.eq_ignore_ascii_case("ws") || scheme.eq_ignore_ascii_case("wss");
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    check_authority(url, authority)?;

    let escape = |_| UrlError::Escape(err_url());
    let pairs = fragment.contains('=');
    let token = (pairs.then(|| param(fragment, "token")).flatten())
        .or_else(|| param(query, "token"))
        .transpose()
        .map_err(escape)?;
    let mut session = if pairs {
        param(fragment, "session").transpose().map_err(escape)?
    } else if !fragment.is_empty() && !is_ws {
        // The page's address once it took the token out: `#SESSION`.
        Some(decode(fragment).ok_or(()).map_err(escape)?)
    } else {
        None
    };
    let ws_path = if is_ws {
        if path.is_empty() {
            "/ws"
        } else {
            path
        }
    } else {
        if let Some(id) = path.strip_prefix("/api/sessions/") {
            let id = id.split('/').next().unwrap_or("");
            if !id.is_empty() {
                session = Some(decode(id).ok_or(()).map_err(escape)?);
            }
        }
        "/ws"
    };
    // A WebSocket URL keeps its other query parameters; the token goes in a header.
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| is_ws && !p.is_empty() && p.split('=').next() != Some("token"))
        .collect();
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    Ok(Target {
        ws_url: format!("{ws_scheme}://{authority}{ws_path}{query}"),
        token,
        session: session.filter(|s| !s.is_empty()),
    })
}

/// `HOST`, `HOST:PORT`, `[IPv6]` or `[IPv6]:PORT`.
fn check_authority(url: &str, authority: &str) -> Result<(), UrlError> {
    if authority.is_empty() {
        return Err(UrlError::NoHost(url.to_owned()));
    }
    if authority.contains('@') {
        return Err(UrlError::UserInfo(url.to_owned()));
    }
    let port = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err(bad_host(url, authority));
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad_host(url, authority));
        }
        match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(bad_host(url, authority)),
            },
        }
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
        if host.is_empty() || !host.chars().all(name) {
            return Err(bad_host(url, host));
        }
        port
    };
    if let Some(port) = port {
        if port.parse::<u16>().is_err() {
            return Err(UrlError::Port {
                url: url.to_owned(),
                port: port.to_owned(),
            });
        }
    }
    Ok(())
}

fn bad_host(url: &str, host: &str) -> UrlError {
    UrlError::Host {
        url: url.to_owned(),
        host: host.to_owned(),
    }
}

/// The first `name=value` of `a=b&c=d`, %-decoded (`+` is kept: it is what `serve` prints).
fn param(pairs: &str, name: &str) -> Option<Result<String, ()>> {
    pairs
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| decode(value).ok_or(()))
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, want: Result<(&str, Option<&str>, Option<&str>), &str>) {
        let got = parse(url).map_err(|e| e.to_string());
        match want {
            Ok((ws_url, token, session)) => assert_eq!(
                got,
                Ok(Target {
                    ws_url: ws_url.into(),
                    token: token.map(Into::into),
                    session: session.map(Into::into),
                }),
                "{url}"
            ),
            Err(message) => {
                let got = got.expect_err(url);
                assert!(got.contains(message), "{url}: {got}");
            }
        }
    }

    #[test]
    fn the_urls_people_have_are_understood() {
        let ws = "ws://127.0.0.1:7777/ws";
        for (url, want) in [
            // What `serve` prints, and the page's addresses.
            (
                "http://127.0.0.1:7777/#token=abc",
                Ok((ws, Some("abc"), None)),
            ),
            (
                "http://127.0.0.1:7777/?token=abc",
                Ok((ws, Some("abc"), None)),
            ),
            (
                "http://127.0.0.1:7777/#token=a%2Bb&session=ses_1",
                Ok((ws, Some("a+b"), Some("ses_1"))),
            ),
            (
                "http://127.0.0.1:7777/#token=a+b/c=",
                Ok((ws, Some("a+b/c="), None)),
            ),
            (
                "http://127.0.0.1:7777/#ses_1",
                Ok((ws, None, Some("ses_1"))),
            ),
            ("http://127.0.0.1:7777/#", Ok((ws, None, None))),
            ("http://127.0.0.1:7777", Ok((ws, None, None))),
            ("HTTP://127.0.0.1:7777/index.html", Ok((ws, None, None))),
            (
                "http://127.0.0.1:7777/api/sessions/ses_2/events?after=3",
                Ok((ws, None, Some("ses_2"))),
            ),
            (
                "https://agents.example.com/",
                Ok(("wss://agents.example.com/ws", None, None)),
            ),
            ("http://[::1]:7777/", Ok(("ws://[::1]:7777/ws", None, None))),
            ("http://localhost/", Ok(("ws://localhost/ws", None, None))),
            // WebSocket URLs keep their path; the token leaves the query.
            ("ws://127.0.0.1:7777/ws", Ok((ws, None, None))),
            ("ws://127.0.0.1:7777", Ok((ws, None, None))),
            ("ws://127.0.0.1:7777/ws?token=t", Ok((ws, Some("t"), None))),
            (
                "wss://h.example/agents/ws?x=1&token=t",
                Ok(("wss://h.example/agents/ws?x=1", Some("t"), None)),
            ),
            // Malformed.
            ("127.0.0.1:7777", Err("is not a URL")),
            ("ses_123", Err("is not a URL")),
            ("", Err("is not a URL")),
            ("http://127.0.0.1:7777/ #token=x", Err("is not a URL")),
            (
                "ftp://127.0.0.1/",
                Err("is not one of http, https, ws, wss"),
            ),
            ("http:///ws", Err("names no host")),
            ("http://127.0.0.1:77777/", Err("\"77777\" is not a port")),
            ("http://127.0.0.1:/", Err("\"\" is not a port")),
            ("http://127.0.0.1:port/", Err("is not a port")),
            ("http://[::1/", Err("is not a host")),
            ("http://bad%host/", Err("is not a host")),
            ("http://user:pw@127.0.0.1/", Err("user name or password")),
            ("http://127.0.0.1/#token=%zz", Err("bad %-escape")),
        ] {
            check(url, want);
        }
    }
}
