//! The accept loop: HTTP/1.1 connections with a header-read timeout, an idle timeout, a cap
//! on how many are open, and graceful shutdown.
//!
//! Idle and slow sockets cost a file descriptor each and nothing else may be starved by
//! them: a connection that has not sent a whole request head within `header_timeout` is
//! closed (hyper's header-read timer, which also runs while a kept-alive connection waits
//! for its next request, so it is the idle timeout as well); at most `max_connections` are
//! open at once, WebSockets included (the permit lives as long as the socket), and when the
//! cap is reached the connection idle the longest is closed to make room; a connection whose
//! client stopped reading (a write blocked for a second) is as good as idle, and a write
//! that the client takes nothing of for `write_timeout` fails (`Permitted`), which closes
//! the connection in any case: hyper's, and a WebSocket's, which outlives hyper's connection
//! and whose writers end it when a write fails. The soft limit on open files is raised to
//! the hard one at start-up ([`raise_file_limit`]).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

/// Limits of the accept loop.
#[derive(Clone, Copy, Debug)]
pub struct ListenLimits {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request head, and stay idle between requests.
    pub header_timeout: Duration,
    /// How long a write to a client may stay blocked (the client reads nothing) before the
    /// connection is closed.
    pub write_timeout: Duration,
}

impl Default for ListenLimits {
    fn default() -> ListenLimits {
        ListenLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Raises the soft limit on open files to the hard limit (macOS defaults to 256), so the
/// connection cap, not the file table, decides when connections wait. Returns the new limit.
pub fn raise_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

/// One open connection, as the cap sees it.
struct Conn {
    activity: Arc<Activity>,
    close: Arc<Notify>,
    /// Already asked to close: not picked again.
    closing: AtomicBool,
}

/// Whether a connection is serving a request, and since when it is not.
#[derive(Debug)]
struct Activity {
    /// No request is being served (its response body is done too): the connection may be
    /// closed to make room.
    idle: AtomicBool,
    /// When it last became idle (ms since the loop started).
    idle_since: AtomicU64,
    /// Since when a write to the client has been blocked (ms since the loop started, plus
    /// one); 0 while writes go through.
    blocked_since: AtomicU64,
    started: Instant,
}

/// How long a write must be blocked before the connection may be closed to make room.
const BLOCKED_EVICTABLE_MS: u64 = 1_000;

impl Activity {
    /// A connection's, idle from now on: `started` is when the accept loop started.
    fn new(started: Instant) -> Activity {
        Activity {
            idle: AtomicBool::new(true),
            idle_since: AtomicU64::new(started.elapsed().as_millis() as u64),
            blocked_since: AtomicU64::new(0),
            started,
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Records whether a write went through (`ready`); true when it is the first to find the
    /// socket full since one last went through (a stall begins).
    fn wrote(&self, ready: bool) -> bool {
        if ready {
            self.blocked_since.store(0, Ordering::Relaxed);
            return false;
        }
        self.blocked_since
            .compare_exchange(0, self.now_ms() + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// How long writes have been blocked, in ms (0 if they are not).
    fn blocked_ms(&self) -> u64 {
        match self.blocked_since.load(Ordering::Relaxed) {
            0 => 0,
            since => self.now_ms().saturating_sub(since - 1),
        }
    }

    /// Since when the connection has served nobody: idle, or its client stopped reading.
    fn stuck_since(&self) -> Option<u64> {
        if self.idle.load(Ordering::Relaxed) {
            Some(self.idle_since.load(Ordering::Relaxed))
        } else if self.blocked_ms() >= BLOCKED_EVICTABLE_MS {
            Some(self.blocked_since.load(Ordering::Relaxed) - 1)
        } else {
            None
        }
    }

    fn busy(&self) {
        self.idle.store(false, Ordering::Relaxed);
    }

    fn done(&self) {
        self.idle_since.store(self.now_ms(), Ordering::Relaxed);
        self.idle.store(true, Ordering::Relaxed);
    }
}

/// Open connections by number, so the cap can close the one idle the longest.
#[derive(Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Conn>>,
}

impl Registry {
    /// Asks the connection that has served nobody the longest (idle, or its client not
    /// reading) to close; false when there is none.
    fn evict_one(&self) -> bool {
        let conns = self.conns.lock().expect("registry lock");
        let oldest = conns
            .values()
            .filter(|c| !c.closing.load(Ordering::Relaxed))
            .filter_map(|c| c.activity.stuck_since().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, c)| c);
        match oldest {
            Some(c) => {
                c.closing.store(true, Ordering::Relaxed);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then stops accepting, lets the
/// requests in flight finish (at most `drain` long) and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ListenLimits,
    shutdown: impl std::future::Future<Output = ()> + Send,
    drain: Duration,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = Instant::now();
    let mut next_id = 0u64;
    tokio::pin!(shutdown);
    'accept: loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before accept: wait a
                    // moment (closing an idle connection if that is what is short) and go on.
                    if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) {
                        registry.evict_one();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // At the cap, someone is waiting: make room, and look again shortly (a connection
        // may become evictable meanwhile).
        let permit = loop {
            if let Ok(permit) = slots.clone().try_acquire_owned() {
                break permit;
            }
            registry.evict_one();
            tokio::select! {
                permit = slots.clone().acquire_owned() => break permit.expect("never closed"),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = &mut shutdown => break 'accept,
            }
        };
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let conn = Conn {
            activity: Arc::new(Activity::new(started)),
            close: Arc::new(Notify::new()),
            closing: AtomicBool::new(false),
        };
        let handle = ConnHandle {
            id: next_id,
            activity: conn.activity.clone(),
            close: conn.close.clone(),
        };
        registry
            .conns
            .lock()
            .expect("registry lock")
            .insert(next_id, conn);
        tokio::spawn(serve_connection(
            stream,
            peer,
            permit,
            app.clone(),
            limits,
            handle,
            registry.clone(),
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Requests in flight finish (bounded); upgraded WebSockets are closed by the hub's
    // shutdown, which follows.
    let _ = tokio::time::timeout(drain, async {
        while !registry.conns.lock().expect("registry lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

struct ConnHandle {
    id: u64,
    activity: Arc<Activity>,
    close: Arc<Notify>,
}

#[allow(clippy::too_many_arguments)]
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
    app: Router,
    limits: ListenLimits,
    handle: ConnHandle,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Permitted::new(
        stream,
        permit,
        handle.activity.clone(),
        limits.write_timeout,
    ));
    let activity = handle.activity.clone();
    let app = app.layer(axum::Extension(axum::extract::ConnectInfo(peer)));
    let service = tower::ServiceExt::map_request(app, move |req| {
        activity.busy();
        req
    });
    // Busy until the response's body is done (an SSE stream is not idle), not just its head.
    let activity = handle.activity.clone();
    let service = tower::ServiceExt::map_response(service, move |res: axum::response::Response| {
        let activity = activity.clone();
        res.map(|body| {
            axum::body::Body::new(Tracked {
                body,
                activity: Some(activity),
            })
        })
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(io, TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            // Also when a write gave up on a client that read nothing (`Permitted`).
            _ = conn.as_mut() => break,
            // Made room for another: it served nobody (idle, or its client is not reading),
            // so it is dropped at once.
            _ = handle.close.notified() => break,
            changed = stop.changed(), if !closing => {
                if changed.is_err() || *stop.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
    registry
        .conns
        .lock()
        .expect("registry lock")
        .remove(&handle.id);
}

/// A response body that marks its connection idle when it is done or dropped.
struct Tracked {
    body: axum::body::Body,
    activity: Option<Arc<Activity>>,
}

impl Tracked {
    fn finish(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.done();
        }
    }
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A TCP stream that holds its connection slot for as long as it lives, also after a
/// WebSocket upgrade has taken it from hyper. A write that the client takes nothing of for
/// `write_timeout` fails (`TimedOut`): whoever writes (hyper, or a WebSocket's writers, which
/// then end their connection) learns that the client stopped reading, and nothing waits on it
/// for ever. A write that goes through, even slowly, restarts the wait.
struct Permitted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Told whether writes go through.
    activity: Arc<Activity>,
    write_timeout: Duration,
    /// When the writes blocked now give up: set by the first write that found the socket full
    /// since one went through (`Activity::wrote`), polled by the blocked ones.
    stall: Pin<Box<tokio::time::Sleep>>,
}

impl Permitted {
    fn new(
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        activity: Arc<Activity>,
        write_timeout: Duration,
    ) -> Permitted {
        Permitted {
            stream,
            _permit: permit,
            activity,
            write_timeout,
            // Reset before it is first polled (by the first write that blocks).
            stall: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// A write's answer, with the deadline applied: `Pending` that has lasted `write_timeout`
    /// becomes `TimedOut`.
    fn deadline<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if self.activity.wrote(poll.is_ready()) {
            let at = tokio::time::Instant::now() + self.write_timeout;
            self.stall.as_mut().reset(at);
        }
        if poll.is_ready() {
            return poll;
        }
        match std::future::Future::poll(self.stall.as_mut(), cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Permitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Permitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.deadline(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.deadline(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// One end of a real loopback connection whose send buffer is small, wrapped as the
    /// accept loop wraps a client's socket, and the other end (the client).
    async fn pair(write_timeout: Duration) -> (Permitted, TcpStream) {
        // The client's receive buffer is small too (an accepted socket inherits it).
        let listening = tokio::net::TcpSocket::new_v4().unwrap();
        listening.set_recv_buffer_size(4096).unwrap();
        listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = listening.listen(1).unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(4096).unwrap();
        let (ours, theirs) = tokio::join!(socket.connect(listener.local_addr().unwrap()), async {
            listener.accept().await.unwrap().0
        });
        let permit = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
        let activity = Arc::new(Activity::new(Instant::now()));
        let ours = Permitted::new(ours.unwrap(), permit, activity, write_timeout);
        (ours, theirs)
    }

    /// The write timeout is about progress: a client that reads slowly but steadily takes a
    /// write that lasts several timeouts, and one that stops reading makes the next write
    /// fail once the timeout has passed with nothing taken.
    #[tokio::test]
    async fn a_write_fails_once_the_client_took_nothing_for_the_timeout() {
        let timeout = Duration::from_millis(400);
        let (mut ours, mut theirs) = pair(timeout).await;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        // 1 KiB every 10 ms (≈ 100 KB/s) until told to stop, then nothing.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let mut read = 0;
            while !stopped.load(Ordering::Relaxed) {
                read += theirs.read(&mut buf).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (theirs, read)
        });
        // 200 KB: two seconds of reading, five timeouts, with the writes waiting all along.
        let started = Instant::now();
        let slow = vec![b's'; 200 << 10];
        ours.write_all(&slow)
            .await
            .expect("a slow reader's write goes through");
        assert!(
            started.elapsed() > timeout * 2,
            "the write waited for the reader"
        );
        stop.store(true, Ordering::Relaxed);
        let (theirs, _) = reader.await.unwrap();

        let started = Instant::now();
        let lots = vec![b'x'; 8 << 20];
        let stuck = ours.write_all(&lots);
        let stuck = tokio::time::timeout(Duration::from_secs(10), stuck).await;
        let waited = started.elapsed();
        let err = (stuck.expect("the write gave up")).expect_err("nothing is read any more");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(waited >= timeout, "failed after {waited:?}");
        drop(theirs);
    }
}
