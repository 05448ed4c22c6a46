//! A minimal HTTP/1.1 client for an agent's loopback server (hyper's connection API, one
//! connection per request): JSON requests and a streamed response body. Only what the
//! OpenCode adapter needs; no TLS, no redirects, no pooling.

use std::net::SocketAddr;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Why a request to the agent's server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP with {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("a bad request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
}

/// Where the agent's server listens, and the `Authorization` header it wants.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub addr: SocketAddr,
    pub authorization: Option<String>,
}

impl Endpoint {
    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, HttpError> {
        let addr = self.addr;
        let http = |source| HttpError::Http { addr, source };
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| HttpError::Connect { addr, source })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        sender.send_request(request).await.map_err(http)
    }

    fn builder(&self, method: &str, path: &str) -> hyper::http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        if let Some(auth) = &self.authorization {
            b = b.header("authorization", auth);
        }
        b
    }

    /// A request with an optional JSON body; the status and the whole response body.
    pub async fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), HttpError> {
        let builder = self.builder(method, path);
        let request = match body {
            Some(v) => builder
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(v.to_string()))),
            None => builder.body(Full::new(Bytes::new())),
        }?;
        let response = self.send(request).await?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|source| HttpError::Http {
                addr: self.addr,
                source,
            })?
            .to_bytes();
        Ok((status, bytes.to_vec()))
    }

    /// `GET path`, expecting 200; the body, to read as it streams.
    pub async fn stream(&self, path: &str) -> Result<Incoming, HttpError> {
        let request = self
            .builder("GET", path)
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))?;
        let response = self.send(request).await?;
        if response.status() != 200 {
            return Err(HttpError::Status {
                what: format!("GET {path}"),
                status: response.status().as_u16(),
                body: String::new(),
            });
        }
        Ok(response.into_body())
    }
}

/// The next chunk of a streamed body; `None` at its end (or on an error).
pub(crate) async fn next_chunk(body: &mut Incoming) -> Option<Bytes> {
    loop {
        match body.frame().await? {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(data);
                }
            }
            Err(_) => return None,
        }
    }
}

/// Standard base64 (for a Basic `Authorization` header).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(super::base64(b"opencode:pw"), "b3BlbmNvZGU6cHc=");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"abc"), "YWJj");
        assert_eq!(super::base64(b""), "");
    }
}
