//! Security, black-box, as an attacker on the same machine would try it: a real `agentwire
//! serve` on 127.0.0.1, raw sockets and a real WebSocket client. DNS rebinding (a foreign
//! `Host`), tokens reaching the hosted agents, idle and slow sockets, memory held by bogus
//! subscriptions, SSE streams outliving their clients, file modes, response headers, and the
//! rough edges (CORS for allowed origins, percent-encoded tokens, JSON rejections, 1009).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentwire::core::wire::{ClientMsg, ServerMsg};
use common::{http, recv, send, ws_connect, Server, DEADLINE, TOKEN};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// A raw HTTP/1.1 exchange: the status, the head (lowercase), the body.
fn raw(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, host: &str, extra: &str) -> (u16, String, String) {
    raw(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"),
    )
}

fn error_code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    value["error"]["code"].as_str().unwrap_or("").to_owned()
}

fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("log.db"), 0, extra);
    (dir, server)
}

/// DNS rebinding: a page on `evil.example` (resolving to 127.0.0.1) is not this server, on
/// the API, the WebSocket and the static files alike; its Origin matching its Host changes
/// nothing. Names given with --allow-host are served.
#[tokio::test]
async fn a_foreign_host_is_refused_on_every_route() {
    let (_dir, server) = start(&["--allow-host", "agents.example.com"]);
    let addr = server.addr;
    let port = addr.port();
    let evil = format!("evil.example:{port}");
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let origin = format!("{bearer}Origin: http://{evil}\r\n");
    let post = format!(
        "POST /api/sessions HTTP/1.1\r\nHost: {evil}\r\n{origin}Content-Type: application/json\r\nContent-Length: 19\r\nConnection: close\r\n\r\n{{\"provider\":\"demo\"}}"
    );
    let (status, _, body) = raw(addr, &post);
    assert_eq!(
        (status, error_code(&body).as_str()),
        (403, "forbidden_host")
    );
    for path in ["/", "/app.js", "/api/sessions", "/api/info"] {
        let (status, _, body) = get(addr, path, &evil, &origin);
        assert_eq!(
            (status, error_code(&body).as_str()),
            (403, "forbidden_host"),
            "{path}"
        );
    }
    // A foreign Host on the WebSocket handshake, with the token.
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        socket,
        "GET /ws?token={TOKEN} HTTP/1.1\r\nHost: {evil}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 64];
    let n = socket.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 403"));
    // The right host with a foreign origin: refused too (origins are checked against the
    // allowed hosts, not against the request's own Host).
    let (status, _, body) = get(
        addr,
        "/api/sessions",
        &addr.to_string(),
        &format!("{bearer}Origin: http://{evil}\r\n"),
    );
    assert_eq!(
        (status, error_code(&body).as_str()),
        (403, "forbidden_origin")
    );
    // What is allowed.
    for host in [
        addr.to_string(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "agents.example.com".to_owned(),
    ] {
        let (status, _, _) = get(addr, "/api/sessions", &host, &bearer);
        assert_eq!(status, 200, "{host}");
    }
    let (status, _, _) = get(
        addr,
        "/api/sessions",
        "agents.example.com",
        &format!("{bearer}Origin: https://agents.example.com\r\n"),
    );
    assert_eq!(status, 200);
    assert!(ws_connect(&server.ws_url(), &[]).await.is_ok());
}

/// Guessing the token runs at a few attempts a second whatever the caller does; tokens
/// shorter than 16 characters are refused at start-up.
#[test]
fn wrong_tokens_are_limited_and_short_tokens_refused() {
    let (_dir, server) = start(&[]);
    let mut codes = Vec::new();
    for i in 0..60 {
        let (_, body) = http(
            server.addr,
            "GET",
            "/api/sessions",
            None,
            &[("Authorization", &format!("Bearer guess-{i:016}"))],
        );
        codes.push(body["error"]["code"].as_str().unwrap_or("").to_owned());
    }
    let limited = codes.iter().filter(|c| *c == "too_many_attempts").count();
    assert!(
        codes[0] == "bad_token" && limited >= 30,
        "60 quick guesses: {codes:?}"
    );
    // While the limit holds, even the right token is not checked; it is again a moment later.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, _) = server.api("GET", "/api/sessions", None);
        if status == 200 {
            break;
        }
        assert_eq!(status, 429);
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--token",
            "short-token-15c",
        ])
        .env_remove("AGENTWIRE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 characters"));
}

/// The processes `pid` started.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces, so split after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// A hosted agent (or whatever a prompt injection makes it run) finds no token and no store
/// password in its environment or its command line; `--token-file` works and must be
/// private.
#[test]
fn the_token_never_reaches_a_hosted_agent() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = token_file.to_str().unwrap().to_owned();
    // agentwire's variables in the server's environment (and the token on its command line).
    let mut server = Server::start_prepared(&dir.path().join("log.db"), &[], &mut |cmd| {
        // (AGENTWIRE_STORE itself would conflict with --db: every AGENTWIRE_ variable goes.)
        cmd.env("AGENTWIRE_TOKEN", TOKEN)
            .env("AGENTWIRE_NODE", "node-1")
            .env(
                "AGENTWIRE_PG_URL",
                "postgres://agentwire:hunter2-password@127.0.0.1/x",
            );
    });
    let session = server.create_demo_session();
    let deadline = Instant::now() + DEADLINE;
    let agents = loop {
        let agents = children(server.child.id());
        if !agents.is_empty() {
            break agents;
        }
        assert!(Instant::now() < deadline, "the demo agent never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    for pid in agents {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        for (what, bytes) in [("environ", &environ), ("cmdline", &cmdline)] {
            let text = String::from_utf8_lossy(bytes);
            assert!(!text.contains(TOKEN), "the token is in the agent's {what}");
            assert!(
                !text.contains("hunter2"),
                "the store password is in the agent's {what}"
            );
            assert!(
                !text.contains("AGENTWIRE_"),
                "an agentwire variable in the agent's {what}: {text}"
            );
        }
    }
    server.start_turn(&session, "hello");
    server.kill();

    // --token-file: the server takes its first line.
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--token-file",
            &file,
            "--db",
        ])
        .arg(dir.path().join("log3.db"))
        .env_remove("AGENTWIRE_TOKEN")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = out;
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("agentwire: serving http://127.0.0.1:"),
        "{line}"
    );
    assert!(
        !line.contains(TOKEN),
        "a token from a file is not printed: {line}"
    );
    // A token file others can read is refused.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "127.0.0.1:0", "--token-file", &file])
        .env_remove("AGENTWIRE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
}

/// Whether the server has closed this socket (it reads end of file or a reset) rather than
/// holding it open with nothing to say.
fn closed_by_server(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1];
    let closed = match stream.peek(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).unwrap();
    closed
}

/// With a soft limit of 256 open files (macOS' default), 300 idle sockets and 50 that send
/// half a request head do not keep out a request with the token: the header timeout is ten
/// minutes, so nothing but a raised file limit lets it in while all 350 are still held
/// open. Slow heads are cut once a short header timeout passes; at the connection cap, the
/// connection idle the longest makes room (again with a timeout that never fires in time).
#[test]
fn idle_and_slow_sockets_starve_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_prepared(
        &dir.path().join("log.db"),
        &["--header-timeout-ms", "600000"],
        &mut |cmd| {
            // SAFETY: only setrlimit(2) between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    let mut limit = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
                    limit.rlim_cur = 256;
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    );
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(TcpStream::connect(server.addr).unwrap());
    }
    for _ in 0..50 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.write_all(b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .unwrap();
        held.push(s);
    }
    let started = Instant::now();
    let (status, _) = server.api("GET", "/api/sessions", None);
    eprintln!(
        "a request behind 300 idle sockets and 50 slow heads: {:?}",
        started.elapsed()
    );
    assert_eq!(status, 200);
    let closed = held.iter().filter(|s| closed_by_server(s)).count();
    assert_eq!(
        closed, 0,
        "the server closed {closed} of 350 sockets under its cap"
    );
    drop(held);

    // A short header timeout cuts slow heads, and not before it passes.
    let quick = Server::start(
        &dir.path().join("quick.db"),
        0,
        &["--header-timeout-ms", "1500"],
    );
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(quick.addr).unwrap();
        s.write_all(b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .unwrap();
        slow.push(s);
    }
    for mut s in slow {
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap_or(0);
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert!(started.elapsed() >= Duration::from_millis(1500));

    // A cap of 20: an SSE stream open, then 40 idle sockets; a real request still gets
    // through (idle sockets make room), and the stream, which is not idle, is not cut.
    let capped = Server::start(
        &dir.path().join("capped.db"),
        0,
        &["--max-connections", "20", "--header-timeout-ms", "600000"],
    );
    let session = capped.create_demo_session();
    let mut stream = TcpStream::connect(capped.addr).unwrap();
    write!(
        stream,
        "GET /api/sessions/{session}/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        capped.addr
    )
    .unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, &["caught_up"]);
    let held: Vec<_> = (0..40)
        .map(|_| TcpStream::connect(capped.addr).unwrap())
        .collect();
    let (status, _) = capped.api("GET", "/api/sessions", None);
    assert_eq!(status, 200);
    let closed = held.iter().filter(|s| closed_by_server(s)).count();
    assert!(closed >= 1, "no idle socket made room at the cap");
    capped.start_turn(&session, "hello");
    read_until(&mut stream, &mut seen, &["run_completed"]);
    drop(held);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 1,000 subscribes to bogus ~100 KB session names and 300 to unknown ones on one
/// connection hold no memory and no subscription slot; no frame the server sends exceeds the
/// negotiated 4 KiB; a frame over four times the client limit closes the socket with 1009.
#[tokio::test]
async fn bogus_subscriptions_hold_no_memory_and_frames_stay_bounded() {
    let (_dir, server) = start(&[]);
    let session = server.create_demo_session();
    let pid = server.child.id();
    let mut socket = ws_connect(&server.ws_url(), &[]).await.unwrap();
    send(
        &mut socket,
        &ClientMsg::Hello {
            protocols: vec![1],
            max_frame: Some(4096),
            client: None,
            features: Vec::new(),
        },
    )
    .await;
    assert!(matches!(
        recv(&mut socket).await,
        Some(ServerMsg::Welcome {
            max_frame: 4096,
            ..
        })
    ));
    let before = rss_kib(pid);
    let name = format!("ses_{}", "0".repeat(100_000));
    let bogus = ClientMsg::Subscribe {
        session: name,
        after: 0,
        epoch: None,
        snapshot: None,
    }
    .encode();
    let mut largest = 0;
    for i in 0..1_300 {
        let frame = if i < 1_000 {
            bogus.clone()
        } else {
            // Well formed, unknown: each follow ends at once and must free its slot.
            ClientMsg::Subscribe {
                session: format!("ses_{i:x}"),
                after: 0,
                epoch: None,
                snapshot: None,
            }
            .encode()
        };
        socket.send(Message::Text(frame.into())).await.unwrap();
        let code = loop {
            let Some(Ok(Message::Text(text))) = socket.next().await else {
                panic!("the socket closed");
            };
            largest = largest.max(text.len());
            match ServerMsg::decode(&text, usize::MAX).unwrap() {
                ServerMsg::Error { error, .. } => break error.code,
                ServerMsg::Heartbeat { .. } => continue,
                other => panic!("{other:?}"),
            }
        };
        let want = if i < 1_000 {
            "bad_session_id"
        } else {
            "unknown_session"
        };
        assert_eq!(code, want);
    }
    // The real session still subscribes: 300 ended follows left no slot taken.
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: 0,
            epoch: None,
            snapshot: None,
        },
    )
    .await;
    loop {
        match recv(&mut socket).await.expect("open") {
            ServerMsg::CaughtUp { .. } => break,
            ServerMsg::Events { .. } | ServerMsg::Heartbeat { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    let grown = rss_kib(pid).saturating_sub(before);
    eprintln!("1,300 bogus subscribes: RSS grew by {grown} KiB, largest frame {largest} bytes");
    assert!(grown < 20 * 1024, "RSS grew by {grown} KiB");
    assert!(largest <= 4096, "a {largest}-byte frame");
    // Over four times the client frame limit (1 MiB): closed with 1009.
    let huge = format!(r#"{{"t":"ping","id":"{}"}}"#, "x".repeat(5 << 20));
    let _ = socket.send(Message::Text(huge.into())).await;
    let code = loop {
        match tokio::time::timeout(DEADLINE, socket.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => break frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(code, Some(CloseCode::Size));
}

fn info(server: &Server) -> Value {
    let (status, body) = server.api("GET", "/api/info", None);
    assert_eq!(status, 200);
    body
}

/// SSE streams of an idle session end when their clients go (not at the next event), and a
/// stream says `caught_up` once, not after every live event.
#[test]
fn sse_streams_end_with_their_clients() {
    let (_dir, server) = start(&[]);
    let session = server.create_demo_session();
    let baseline = info(&server)["streams"]["sse"].as_u64().unwrap();
    let request = format!(
        "GET /api/sessions/{session}/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        server.addr
    );
    let mut clients = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        clients.push(s);
    }
    let wait_for = |want: u64| {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let open = info(&server)["streams"]["sse"].as_u64().unwrap();
            if open == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{open} SSE streams open, want {want}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(baseline + 200);
    drop(clients);
    wait_for(baseline);

    // One stream across a live turn: caught_up once.
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    server.start_turn(&session, "hello there");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, &["run_completed"]);
    assert_eq!(seen.matches("event: caught_up").count(), 1, "{seen}");
    assert!(seen.matches("event: event").count() > 3);
}

/// The log and the recordings are private; response headers protect the page; dotfiles are
/// not served; the printed URL carries the token in its fragment.
#[test]
fn files_are_private_and_pages_are_protected() {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(
        www.join("index.html"),
        r#"<script type="importmap">{"imports":{}}</script><p>hi</p>"#,
    )
    .unwrap();
    std::fs::write(www.join(".env"), "SECRET=1").unwrap();
    let records = dir.path().join("records/nested");
    let server = Server::start(
        &dir.path().join("log.db"),
        0,
        &[
            "--www",
            www.to_str().unwrap(),
            "--record-dir",
            records.to_str().unwrap(),
        ],
    );
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "hello again");
    server.wait_events(&session, "the turn ends", |events| {
        common::ended(events, &turn)
    });
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.path().join(format!("log.db{suffix}"));
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
    assert_eq!(mode(&records), 0o700);
    assert_eq!(mode(&records.join(format!("{session}.jsonl"))), 0o600);

    let host = server.addr.to_string();
    let (status, head, _) = get(server.addr, "/", &host, "");
    assert_eq!(status, 200);
    for want in [
        "content-security-policy: default-src 'none'; script-src 'self' 'wasm-unsafe-eval' 'sha256-",
        "frame-ancestors 'none'",
        "x-content-type-options: nosniff",
        "referrer-policy: no-referrer",
    ] {
        assert!(head.contains(want), "{want:?} missing from\n{head}");
    }
    let (status, _, _) = get(server.addr, "/.env", &host, "");
    assert_eq!(status, 404);
    // A log planted by another user (a shared directory) is refused, not adopted.
    let planted = dir.path().join("planted.db");
    std::fs::write(&planted, b"").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(&planted)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to another user"));
    let (status, head, _) = get(
        server.addr,
        "/api/sessions",
        &host,
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    assert_eq!(status, 200);
    assert!(head.contains("cache-control: no-store"), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}

/// `--allow-origin` makes the API usable from that origin (CORS, preflight without a token)
/// and no other; `null` is refused; a `?token=` is percent-decoded; axum's own rejections
/// are the documented JSON errors.
#[test]
fn allowed_origins_tokens_in_queries_and_json_rejections() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "127.0.0.1:0", "--allow-origin", "null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    let token = "a+b/c=d%e&f-0123456789";
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--token",
            token,
            "--allow-origin",
            "http://localhost:5173",
            "--db",
        ])
        .arg(dir.path().join("log2.db"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("agentwire: serving http://")
        .and_then(|r| r.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let host = addr.to_string();
    let preflight = |origin: &str| {
        raw(
            addr,
            &format!(
                "OPTIONS /api/sessions HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\
                 Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    let (status, head, _) = preflight("http://localhost:5173");
    assert_eq!(status, 204, "{head}");
    assert!(
        head.contains("access-control-allow-origin: http://localhost:5173"),
        "{head}"
    );
    assert!(
        head.contains("access-control-allow-headers: authorization, content-type"),
        "{head}"
    );
    let (status, head, _) = preflight("http://elsewhere.example");
    assert_eq!(status, 403);
    assert!(!head.contains("access-control-allow-origin"));
    let encoded = "a%2Bb%2Fc%3Dd%25e%26f-0123456789";
    let (status, head, _) = get(
        addr,
        &format!("/api/sessions?token={encoded}"),
        &host,
        "Origin: http://localhost:5173\r\n",
    );
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("access-control-allow-origin: http://localhost:5173"));
    // Rejections: 413, 415, 422, each as {"error": {"code", "message"}}.
    let bearer = format!("Authorization: Bearer {token}\r\n");
    let post = |content_type: &str, body: &str| {
        raw(
            addr,
            &format!(
                "POST /api/sessions HTTP/1.1\r\nHost: {host}\r\n{bearer}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let big = format!("{{\"provider\":\"{}\"}}", "x".repeat(2 << 20));
    for (content_type, body, status, code) in [
        ("application/json", big.as_str(), 413, "body_too_large"),
        ("text/plain", "{}", 415, "unsupported_media_type"),
        ("application/json", r#"{"provider": 7}"#, 422, "bad_body"),
        ("application/json", "{oops", 400, "bad_request"),
    ] {
        let (got, head, body) = post(content_type, body);
        assert_eq!(
            (got, error_code(&body).as_str()),
            (status, code),
            "{head}\n{body}"
        );
        assert!(head.contains("content-type: application/json"), "{head}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A cursor of u64::MAX (events, SSE `Last-Event-ID`) on a session with recent events gets an
/// empty answer, and the store keeps working for everyone.
#[test]
fn huge_cursors_break_nothing() {
    let (_dir, server) = start(&[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "hello");
    server.wait_events(&session, "the turn ends", |events| {
        common::ended(events, &turn)
    });
    let max = u64::MAX;
    let (status, body) = server.api(
        "GET",
        &format!("/api/sessions/{session}/events?after={max}"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"], serde_json::json!([]));
    let mut sse = TcpStream::connect(server.addr).unwrap();
    write!(
        sse,
        "GET /api/sessions/{session}/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nLast-Event-ID: {max}\r\n\r\n",
        server.addr
    )
    .unwrap();
    sse.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut seen = String::new();
    read_until(&mut sse, &mut seen, &["caught_up", "error"]);
    // Everything still works: a new session, a new turn, stored and read back.
    let other = server.create_demo_session();
    let turn = server.start_turn(&other, "hello again");
    server.wait_events(&other, "the turn ends", |events| {
        common::ended(events, &turn)
    });
    assert!(!server.events(&session).is_empty());
}

/// The agents run as the companion's user, so the companion makes itself undumpable: an
/// agent (here a process of the same non-root user) cannot read the token from the
/// companion's environment or memory.
#[test]
fn an_agent_of_the_same_user_cannot_read_the_companion() {
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let as_nobody = |cmd: &mut Command| {
        // SAFETY: only setgid(2)/setuid(2) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let server = Server::start_prepared(&dir.path().join("log.db"), &[], &mut |cmd| {
        cmd.env("AGENTWIRE_TOKEN", TOKEN).current_dir(dir.path());
        as_nobody(cmd);
    });
    let pid = server.child.id();
    for file in ["environ", "mem", "cmdline"] {
        let mut cat = Command::new("cat");
        cat.arg(format!("/proc/{pid}/{file}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        as_nobody(&mut cat);
        let out = cat.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if file == "cmdline" {
            // World-readable by design: which is why the token never goes there from a file.
            assert!(out.status.success());
        } else {
            assert!(!out.status.success(), "an agent read /proc/{pid}/{file}");
            assert!(!text.contains(TOKEN));
        }
    }
    let (status, _) = server.api("GET", "/api/sessions", None);
    assert_eq!(status, 200);
}

/// Clients that ask for a large file again and again and never read the answers hold their
/// connections in a blocked write: at the cap they make room as idle ones do, so a request
/// with the token still gets through.
#[test]
fn clients_that_stop_reading_do_not_hold_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let www = www_with_big_file(dir.path(), 4 << 20);
    let server = Server::start(
        &dir.path().join("log.db"),
        0,
        &[
            "--www",
            www.to_str().unwrap(),
            "--max-connections",
            "20",
            "--write-timeout-ms",
            "600000",
        ],
    );
    let request = format!("GET /big.bin HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr).repeat(8);
    let stuck: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = tiny_window_connect(server.addr);
            s.write_all(request.as_bytes()).unwrap();
            s
        })
        .collect();
    // Long enough for every one of them to fill its socket buffers and block.
    std::thread::sleep(Duration::from_millis(2_500));
    // The write timeout is ten minutes: only making room lets this request in.
    let (status, _) = server.api("GET", "/api/sessions", None);
    assert_eq!(status, 200);
    drop(stuck);
}

/// A client that stops reading an HTTP response for good (its connection left open) is cut once
/// a write has taken nothing for `--write-timeout-ms`: it then reads what was on its way, and
/// the end, far short of what it asked for.
#[test]
fn an_http_client_that_stops_reading_is_cut_after_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let file = 4 << 20;
    let www = www_with_big_file(dir.path(), file);
    let server = Server::start(
        &dir.path().join("log.db"),
        0,
        &["--www", www.to_str().unwrap(), "--write-timeout-ms", "300"],
    );
    // 32 MiB asked for: far more than the socket buffers on both sides hold.
    let requests = 8;
    let request = format!("GET /big.bin HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    let mut stuck = tiny_window_connect(server.addr);
    stuck
        .write_all(request.repeat(requests).as_bytes())
        .unwrap();
    // Several timeouts with nothing read.
    std::thread::sleep(Duration::from_millis(2_000));
    stuck.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut read = 0;
    let mut buf = vec![0; 64 << 10];
    loop {
        match stuck.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => read += n,
            // The server dropped the socket with data unsent: a reset ends it too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no end after {read} bytes: {e}"),
        }
    }
    assert!(
        read < requests * file / 2,
        "{read} bytes read: the server kept writing"
    );
}

/// A `--www` directory in `dir` that holds `big.bin`, `size` bytes.
fn www_with_big_file(dir: &std::path::Path, size: usize) -> std::path::PathBuf {
    let www = dir.join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("big.bin"), vec![b'x'; size]).unwrap();
    www
}

/// A TCP connection whose receive buffer is 1 KiB (set before connecting, so the window the
/// server sees is tiny): the server's writes to it block almost at once.
fn tiny_window_connect(addr: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(v4) = addr else {
        panic!("a loopback IPv4 address")
    };
    // SAFETY: plain socket(2)/setsockopt(2)/connect(2) on a descriptor this function owns
    // until it hands it to TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 1024;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// The default `--cli-dir` is relative to where the companion starts: a CLI another user put
/// there (a shared directory, someone else's checkout) is not run; the same file of our own
/// is.
#[test]
fn a_cli_planted_by_another_user_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join(".agentwire/clis/node_modules/.bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = dir.path().join("planted-cli-ran");
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        format!("#!/bin/sh\ntouch {}\nsleep 5\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    let providers = |server: &Server| -> Vec<String> {
        serde_json::from_value(info(server)["providers"].clone()).unwrap()
    };
    // Ours (root's, like the test's): offered.
    let server = Server::start_prepared(&dir.path().join("a.db"), &[], &mut |cmd| {
        cmd.current_dir(dir.path()).env_remove("AGENTWIRE_CLI_DIR");
    });
    assert!(providers(&server).contains(&"claude".to_owned()));
    drop(server);
    // Another user's directory: not offered, and not run when asked for.
    for path in [dir.path().join(".agentwire"), claude.clone()] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    let server = Server::start_prepared(&dir.path().join("b.db"), &[], &mut |cmd| {
        cmd.current_dir(dir.path()).env_remove("AGENTWIRE_CLI_DIR");
    });
    if std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("claude").exists())
    {
        return; // a claude on PATH would be found instead: nothing more to check here
    }
    assert!(!providers(&server).contains(&"claude".to_owned()));
    let (status, body) = server.api(
        "POST",
        "/api/sessions",
        Some(serde_json::json!({"provider": "claude"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (424, Some("cli_not_found")),
        "{body}"
    );
    assert!(!marker.exists(), "the planted CLI ran");
}

/// Reads `stream` into `seen` until it holds one of `needles`; fails if the stream ends first.
fn read_until(stream: &mut TcpStream, seen: &mut String, needles: &[&str]) {
    let mut buf = [0u8; 8192];
    while !needles.iter().any(|n| seen.contains(n)) {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before {needles:?}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}
