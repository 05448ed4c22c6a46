//! Real store faults in the middle of a turn: the SQLite log on a filesystem that fills and
//! frees, one that stays full, a database made read-only, and PostgreSQL killed and started
//! again. In each, the stored log ends with every event the agent wrote, once, in order, one
//! terminal per turn, and `GET /api/sessions/{id}` showed the store unavailable meanwhile (a
//! WebSocket subscriber was told so live, by `session_status`, and again when it was back);
//! when the store never comes back, the session still ends, and shutdown says how many
//! events could not be stored.
//!
//! The filesystems are mounted by the test (it runs as root): a tmpfs of a few MiB, or an ext4
//! image on a loop device (root ignores file modes; `chattr +i` on ext4 makes even writes
//! through open descriptors fail).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentwire::core::event::{Event, EventType};
use agentwire::core::wire::{
    ClientMsg, ServerMsg, StoreState, StoreStatus, FEATURE_SESSION_STATUS,
};
use common::{assert_contiguous, ended, Collector, Server, DEADLINE};
use serde_json::Value;

/// A filesystem mounted for one test, unmounted when dropped.
struct Mount {
    dir: tempfile::TempDir,
    /// The ext4 image, for a loop mount.
    _image: Option<tempfile::TempDir>,
}

impl Mount {
    /// A tmpfs of `size` (`4m`), or `None` (said on stderr) where mounting is impossible.
    fn tmpfs(size: &str) -> Option<Mount> {
        let dir = tempfile::tempdir().unwrap();
        let opts = format!("size={size}");
        let args = ["-t", "tmpfs", "-o", &opts, "tmpfs"];
        mount(&args, dir.path()).then_some(Mount { dir, _image: None })
    }

    /// An ext4 filesystem of `mib` MiB on a loop device, or `None` where impossible.
    fn ext4(mib: u64) -> Option<Mount> {
        let image_dir = tempfile::tempdir().unwrap();
        let image = image_dir.path().join("fs.img");
        File::create(&image).unwrap().set_len(mib << 20).unwrap();
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("SKIPPED: mkfs.ext4 is not available");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image_arg = image.to_str().unwrap().to_owned();
        mount(&["-o", "loop", &image_arg], dir.path()).then_some(Mount {
            dir,
            _image: Some(image_dir),
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn mount(args: &[&str], at: &Path) -> bool {
    let out = Command::new("mount").args(args).arg(at).output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "SKIPPED: cannot mount ({}): this test needs root",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: no mount command: {e}");
            false
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazy: the server may still hold files open while the test unwinds.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the filesystem of `dir` with one file until no byte more fits; returns the file.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = File::create(&path).unwrap();
    let mut chunk = 1 << 20;
    let zeros = vec![0u8; chunk];
    while chunk > 0 {
        match file.write(&zeros[..chunk]) {
            Ok(0) | Err(_) => chunk /= 2,
            Ok(_) => {}
        }
    }
    let _ = file.sync_all();
    path
}

fn chattr(flag: &str, files: &[PathBuf]) {
    let ok = Command::new("chattr")
        .arg(flag)
        .args(files)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chattr {flag} {files:?}");
}

/// Polls `GET /api/sessions/{id}` until `done` holds for its body; fails after the deadline.
/// The server may fail other requests meanwhile (its store is down): only this one is asked.
fn wait_describe(
    server: &Server,
    session: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
        if status == 200 && done(&body) {
            return body;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}; last answer {status} {body}"
        );
        // A poll interval, not a wait for something: the condition is checked again.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unavailable(body: &Value) -> bool {
    body["store"]["state"] == "unavailable"
}

fn unstored(body: &Value) -> u64 {
    body["store"]["unstored"].as_u64().unwrap_or(0)
}

fn deltas(events: &[Event], turn: &str) -> usize {
    events
        .iter()
        .filter(|e| e.run_id() == Some(turn) && e.kind() == EventType::MessageStreamed)
        .count()
}

/// What the demo agent streams for a `slow` prompt.
fn slow_text() -> String {
    (1..=200)
        .map(|i| format!("Slow chunk {i:>3}/200. "))
        .collect::<String>()
        .trim_end()
        .to_owned()
}

/// The log holds the whole slow turn: every chunk once and in order, one terminal, last.
fn assert_whole_slow_turn(events: &[Event], turn: &str) {
    assert_contiguous(events);
    let of_turn: Vec<&Event> = events.iter().filter(|e| e.run_id() == Some(turn)).collect();
    let count = |kind: EventType| of_turn.iter().filter(|e| e.kind() == kind).count();
    let terminals = of_turn
        .iter()
        .filter(|e| e.kind().is_run_terminal())
        .count();
    assert_eq!(terminals, 1, "one terminal for the turn");
    let last = of_turn.last().unwrap();
    assert_eq!(last.kind(), EventType::RunCompleted, "{last:?}");
    assert_eq!(count(EventType::MessageSent), 1);
    assert_eq!(count(EventType::RunStarted), 1);
    assert_eq!(count(EventType::MessageReceived), 1);
    assert_eq!(count(EventType::MessageStreamed), 200);
    let text: String = (of_turn.iter())
        .filter(|e| e.kind() == EventType::MessageStreamed)
        .map(|e| e.data_str("delta").unwrap())
        .collect();
    assert_eq!(text, slow_text(), "the streamed text, whole and in order");
    assert_eq!(last.data_str("result"), Some(slow_text().as_str()));
}

/// Starts a `slow` turn, waits until part of it is stored, and returns the session and turn.
fn slow_turn_under_way(server: &Server) -> (String, String) {
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "a slow answer please");
    server.wait_events(&session, "the first chunks stored", |e| {
        deltas(e, &turn) >= 20
    });
    (session, turn)
}

/// The store fails for a while, then recovers: waits until the session says so and events
/// pile up (`backlog`), then `recover()`; returns what describe showed while it failed.
fn outage(server: &Server, session: &str, backlog: u64, recover: impl FnOnce()) -> Value {
    let seen = wait_describe(server, session, "the store to be unavailable", unavailable);
    assert!(
        seen["store"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{seen}"
    );
    assert!(seen["store"]["since"].is_string(), "{seen}");
    wait_describe(server, session, "events to wait for the store", |b| {
        unavailable(b) && unstored(b) >= backlog
    });
    recover();
    seen
}

#[test]
fn sqlite_on_a_filesystem_that_fills_mid_turn_and_frees_loses_nothing() {
    let Some(fs) = Mount::tmpfs("16m") else {
        return;
    };
    let db = fs.path().join("log.db");
    // A small queue: the session stops reading the agent while the disk is full.
    let server = Server::start_with_delay(&db, 0, 10, &["--store-queue-events", "40"]);
    let (session, turn) = slow_turn_under_way(&server);
    let watcher = Watcher::start(&server, &session, &turn);
    let filler = fill(fs.path());
    outage(&server, &session, 40, || {
        std::fs::remove_file(&filler).unwrap()
    });
    let events = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    assert_whole_slow_turn(&events, &turn);
    // The subscriber was told, in order: available (on subscribe), unavailable (and again
    // as events piled up), available; and it got the whole log.
    let (told, seen) = watcher.finish();
    let states: Vec<StoreState> = told.iter().map(|s| s.state).collect();
    let mut runs = states.clone();
    runs.dedup();
    assert_eq!(
        runs,
        [
            StoreState::Available,
            StoreState::Unavailable,
            StoreState::Available
        ],
        "{told:?}"
    );
    let down = told.iter().filter(|s| !s.is_available());
    assert!(
        down.clone()
            .all(|s| s.error.as_deref().is_some_and(|e| !e.is_empty()) && s.since.is_some()),
        "{told:?}"
    );
    // Told again after each failed retry: more events wait, none leaves while it fails.
    let waiting: Vec<u64> = down.map(|s| s.unstored).collect();
    assert!(
        waiting.len() > 1 && waiting.windows(2).all(|w| w[0] <= w[1]) && waiting[0] > 0,
        "{told:?}"
    );
    assert_eq!(told.last(), Some(&StoreStatus::available(0)), "{told:?}");
    assert_eq!(seen, events, "the subscriber got the log, whole");
    let body = wait_describe(&server, &session, "the store to be available", |b| {
        b["store"]["state"] == "available" && unstored(b) == 0
    });
    assert_eq!(body["session"]["state"], "running", "{body}");
}

#[test]
fn sqlite_made_read_only_mid_turn_loses_nothing() {
    let Some(fs) = Mount::ext4(64) else { return };
    let db = fs.path().join("log.db");
    let server = Server::start_with_delay(&db, 0, 10, &[]);
    let (session, turn) = slow_turn_under_way(&server);
    // Immutable: every write fails with EPERM, through open descriptors too.
    let files = vec![db.clone(), fs.path().join("log.db-wal")];
    chattr("+i", &files);
    let undo = scopeguard(|| chattr("-i", &files));
    outage(&server, &session, 30, || drop(undo));
    let events = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    assert_whole_slow_turn(&events, &turn);
}

#[test]
fn sqlite_on_a_filesystem_that_stays_full_ends_the_session_and_reports_the_loss() {
    let Some(fs) = Mount::tmpfs("4m") else { return };
    let db = fs.path().join("log.db");
    let logs = tempfile::tempdir().unwrap();
    let stderr_path = logs.path().join("stderr");
    let mut server = start_logging(
        &db,
        &["--store-queue-events", "40", "--store-drain-ms", "1000"],
        &stderr_path,
    );
    let (session, turn) = slow_turn_under_way(&server);
    let filler = fill(fs.path());
    wait_describe(
        &server,
        &session,
        "the store to be unavailable",
        unavailable,
    );

    // Closing is answered although the store cannot take the session's end.
    let start = Instant::now();
    let (status, body) = server.api("DELETE", &format!("/api/sessions/{session}"), None);
    assert_eq!(status, 204, "{body}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "close took {:?}",
        start.elapsed()
    );
    let body = wait_describe(&server, &session, "the agent to be gone", |b| {
        unavailable(b) && unstored(b) > 0
    });
    assert!(
        body["session"]["state"] == "running",
        "not stored yet: {body}"
    );

    // Shutdown waits --store-drain-ms, then says what it could not store, and fails.
    let start = Instant::now();
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("event(s) could not be stored before shutdown"),
        "{stderr}"
    );
    assert!(
        stderr.contains("could not be stored (the store was failing)"),
        "{stderr}"
    );

    // Space back, the next start ends what the last one could not: the turn ends once.
    std::fs::remove_file(&filler).unwrap();
    let server = Server::start(&db, 0, &[]);
    let events = server.events(&session);
    assert_contiguous(&events);
    let terminals: Vec<&Event> = (events.iter())
        .filter(|e| e.run_id() == Some(turn.as_str()) && e.kind().is_run_terminal())
        .collect();
    assert_eq!(terminals.len(), 1, "{terminals:?}");
    assert_eq!(events.last().unwrap().kind(), EventType::SessionFailed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted_mid_turn_loses_nothing() {
    let url = common::postgres::fresh_database().await;
    tokio::task::block_in_place(|| {
        let server = Server::start_on_postgres_paced(&url, 10, &[]);
        let (session, turn) = slow_turn_under_way(&server);
        common::postgres::kill_server();
        let seen = outage(&server, &session, 30, common::postgres::start_server_again);
        assert!(seen.get("latest_sequence").is_none(), "{seen}");
        let events = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
        assert_whole_slow_turn(&events, &turn);
    });
}

/// A WebSocket subscriber that asked for `session_status`, on a thread of its own: it follows
/// the session until its turn `turn` has ended and the store was unavailable and is available
/// again, and returns the statuses it was told, in order, and the events it got.
struct Watcher {
    thread: std::thread::JoinHandle<(Vec<StoreStatus>, Vec<Event>)>,
}

impl Watcher {
    /// Returns once the subscription started (its first `session_status` arrived).
    fn start(server: &Server, session: &str, turn: &str) -> Watcher {
        let (url, session, turn) = (server.ws_url(), session.to_owned(), turn.to_owned());
        let (subscribed_tx, subscribed) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut socket = common::ws_connect(&url, &[]).await.expect("connects");
                let hello = ClientMsg::Hello {
                    protocols: vec![1],
                    max_frame: None,
                    client: None,
                    features: vec![FEATURE_SESSION_STATUS.to_owned()],
                };
                common::send(&mut socket, &hello).await;
                let subscribe = ClientMsg::Subscribe {
                    session: session.clone(),
                    after: 0,
                    epoch: None,
                    snapshot: None,
                };
                common::send(&mut socket, &subscribe).await;
                // A client that did not ask (one older than `session_status`) is never told.
                let (mut plain, _) = common::hello(&url).await;
                common::send(&mut plain, &subscribe).await;
                let start = Instant::now();
                let mut told: Vec<StoreStatus> = Vec::new();
                let mut log = Collector::new();
                loop {
                    let recovered = told.iter().any(|s| !s.is_available())
                        && told.last().is_some_and(StoreStatus::is_available);
                    if recovered && ended(&log.events, &turn) {
                        let mut plain_log = Collector::new();
                        while !ended(&plain_log.events, &turn) {
                            match common::recv(&mut plain).await.expect("open") {
                                ServerMsg::SessionStatus { .. } => {
                                    panic!("session_status sent to a client that did not ask")
                                }
                                msg => plain_log.apply(msg),
                            }
                        }
                        return (told, log.events);
                    }
                    assert!(
                        start.elapsed() < DEADLINE,
                        "the subscriber timed out; told {told:?}"
                    );
                    match common::recv(&mut socket)
                        .await
                        .expect("the socket stays open")
                    {
                        ServerMsg::SessionStatus { session: s, store } => {
                            assert_eq!(s, session);
                            if told.is_empty() {
                                let _ = subscribed_tx.send(());
                            }
                            told.push(store);
                        }
                        msg => log.apply(msg),
                    }
                }
            })
        });
        subscribed
            .recv_timeout(DEADLINE)
            .expect("the subscription starts with the store's status");
        Watcher { thread }
    }

    fn finish(self) -> (Vec<StoreStatus>, Vec<Event>) {
        self.thread.join().expect("the subscriber saw it all")
    }
}

/// Runs `f` when dropped (also when the test fails first).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// Like [`Server::start`], with the server's stderr written to `stderr` (the demo agent
/// pausing 10 ms between chunks).
fn start_logging(db: &Path, extra: &[&str], stderr: &Path) -> Server {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "127.0.0.1:0", "--token", common::TOKEN])
        .arg("--db")
        .arg(db)
        .args(["--demo-delay-ms", "10", "--heartbeat-ms", "500"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(stderr).unwrap())
        .spawn()
        .expect("agentwire serve starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let serving = lines.next().unwrap().unwrap();
    let url = serving
        .strip_prefix("agentwire: serving http://")
        .expect(&serving);
    let addr = url.split('/').next().unwrap().parse().unwrap();
    let store = lines.next().unwrap().unwrap();
    let epoch = (store.rsplit("(epoch ").next())
        .and_then(|rest| rest.split(')').next())
        .expect(&store)
        .to_owned();
    // Whatever else the server prints goes nowhere, but its stdout stays open.
    std::thread::spawn(move || lines.for_each(drop));
    Server {
        child,
        addr,
        db: db.to_owned(),
        epoch,
    }
}
