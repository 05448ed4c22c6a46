//! `agentwire-testkit chaos-proxy`: a TCP proxy on 127.0.0.1 that breaks connections on
//! purpose, for reliability tests (not in the product binary). Each accepted connection is
//! forwarded to the upstream; a seeded generator decides, per connection, when to cut it
//! (both directions dropped at once, as a dead network would) and inserts stalls and delays
//! on the way. The same seed gives the same
//! plan for the same sequence of connections and chunks.
//!
//! Only the connections that carry a session's stream are shaken: WebSockets (an HTTP request
//! with `Upgrade: websocket`) and the fallback's event streams (`GET /api/wire`); other
//! connections pass untouched, so a page can be loaded through the proxy (same origin as its
//! WebSocket) while its socket is cut. With `refuse_upgrades` the proxy answers every
//! WebSocket upgrade `403`, as proxies that do not speak WebSocket do. It prints
//! `chaos-proxy: listening 127.0.0.1:PORT`, then one `cut N` line per connection it cuts (and
//! `refused N` per upgrade it refused), so a test can count them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How hard the proxy shakes connections.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    pub seed: u64,
    /// A connection lives a random time in this range (ms) before it is cut.
    pub cut_after_ms: (u64, u64),
    /// Chance (per chunk, in 1/1000) of a stall, and its length range (ms).
    pub stall_per_mille: u64,
    pub stall_ms: (u64, u64),
    /// A delay added to every chunk, range (ms).
    pub delay_ms: (u64, u64),
    /// Answer WebSocket upgrades `403` instead of forwarding them.
    pub refuse_upgrades: bool,
}

/// xorshift64*: small, fast, seeded, and good enough to place faults.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo + 1)
        }
    }
}

/// Runs the proxy until the process ends.
pub async fn run(options: ChaosOptions) -> std::io::Result<()> {
    if !options.listen.ip().is_loopback() || !options.upstream.ip().is_loopback() {
        return Err(std::io::Error::other(
            "the chaos proxy only runs on loopback addresses",
        ));
    }
    let listener = TcpListener::bind(options.listen).await?;
    println!("chaos-proxy: listening {}", listener.local_addr()?);
    let rng = Arc::new(Mutex::new(Rng(options.seed.max(1))));
    let cuts = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    loop {
        let (client, _) = listener.accept().await?;
        let (options, rng, cuts, refused) =
            (options.clone(), rng.clone(), cuts.clone(), refused.clone());
        tokio::spawn(async move {
            let kind = classify(&client).await;
            if kind == Kind::WebSocket && options.refuse_upgrades {
                let mut client = client;
                let _ = client
                    .write_all(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
                println!("refused {}", refused.fetch_add(1, Ordering::Relaxed) + 1);
                return;
            }
            let Ok(upstream) = TcpStream::connect(options.upstream).await else {
                return;
            };
            if kind == Kind::Other {
                let (mut client, mut upstream) = (client, upstream);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
            let life = rng.lock().expect("rng").range(options.cut_after_ms);
            let pipes = async {
                let (cr, cw) = client.into_split();
                let (ur, uw) = upstream.into_split();
                tokio::join!(pump(cr, uw, &options, &rng), pump(ur, cw, &options, &rng));
            };
            if tokio::time::timeout(Duration::from_millis(life), pipes)
                .await
                .is_err()
            {
                // Dropping both halves of both sockets: the cut.
                let n = cuts.fetch_add(1, Ordering::Relaxed) + 1;
                println!("cut {n}");
            }
        });
    }
}

/// What a connection carries, from its first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    WebSocket,
    /// `GET /api/wire`: the fallback's event stream.
    WireStream,
    Other,
}

/// Reads what the connection's first request asks for (peeked, not read).
async fn classify(client: &TcpStream) -> Kind {
    let mut head = vec![0u8; 4096];
    for _ in 0..50 {
        let Ok(n) = client.peek(&mut head).await else {
            return Kind::Other;
        };
        let text = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
        if text.contains("\r\n\r\n") || n == head.len() {
            return if text.contains("upgrade: websocket") {
                Kind::WebSocket
            } else if text.starts_with("get /api/wire?") {
                Kind::WireStream
            } else {
                Kind::Other
            };
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Kind::Other
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    options: &ChaosOptions,
    rng: &Mutex<Rng>,
) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (delay, stall) = {
            let mut r = rng.lock().expect("rng");
            let delay = r.range(options.delay_ms);
            let stall =
                (r.next() % 1000 < options.stall_per_mille).then(|| r.range(options.stall_ms));
            (delay, stall)
        };
        let pause = delay + stall.unwrap_or(0);
        if pause > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
