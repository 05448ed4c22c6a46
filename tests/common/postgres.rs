//! A throwaway PostgreSQL server for the tests, and a fresh database on it per test.
//!
//! One server per test process, started on first use by `scripts/throwaway-postgres` (Debian's
//! server binaries, a temp directory, a loopback port, an unprivileged user when run as root),
//! which stops it and deletes its files when this process exits, however it exits: its stdin
//! is a pipe from this process. To use a running server instead, set `AGENTWIRE_TEST_POSTGRES`
//! to a URL without a database, for a role that may create databases
//! (`postgres://postgres@127.0.0.1:5432`); the tests' databases are then left behind.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use tokio_postgres::NoTls;

struct Server {
    /// `postgres://user@host:port`, to which a database name is appended.
    base: String,
    /// Holds the pipe to the script's stdin open until this process exits.
    _child: Option<Child>,
    /// The script's stdin and stdout, for [`kill_server`] and [`start_server_again`].
    control: Mutex<Option<(ChildStdin, BufReader<ChildStdout>)>>,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        if let Ok(base) = std::env::var("AGENTWIRE_TEST_POSTGRES") {
            return Server {
                base: base.trim_end_matches('/').to_owned(),
                _child: None,
                control: Mutex::new(None),
            };
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/throwaway-postgres");
        let mut child = Command::new(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        stdout
            .read_line(&mut line)
            .expect("reading the script's output");
        let stdin = child.stdin.take().expect("piped");
        let port = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["ready", port, _dir] => port.to_owned(),
            _ => panic!(
                "no PostgreSQL server for the tests (its error is above): install Debian's \
                 postgresql package (scripts/test does), or set AGENTWIRE_TEST_POSTGRES"
            ),
        };
        Server {
            base: format!("postgres://postgres@127.0.0.1:{port}"),
            _child: Some(child),
            control: Mutex::new(Some((stdin, stdout))),
        }
    })
}

/// The URL of a new, empty database on the tests' server.
pub async fn fresh_database() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Starting the server blocks: let the runtime know where it can.
    let base = match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => &server().base,
        _ => &tokio::task::block_in_place(server).base,
    };
    let name = format!(
        "agentwire_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let (client, connection) = tokio_postgres::connect(&format!("{base}/postgres"), NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {base}: {e}"));
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("creating database {name}: {e:?}"));
    drop(client);
    let _ = driver.await;
    format!("{base}/{name}")
}

/// A plain connection to `url`, for a test to look at or tamper with the tables.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// Stops the tests' server at once, as a crash would (an immediate shutdown: no checkpoint,
/// crash recovery on the next start); returns once it is down. Every database of this test
/// process is unreachable until [`start_server_again`]. Not with `AGENTWIRE_TEST_POSTGRES`.
pub fn kill_server() {
    control("kill", "stopped");
}

/// Starts the tests' server again after [`kill_server`], on the same port and data; returns
/// once it accepts connections.
pub fn start_server_again() {
    control("start", "ready ");
}

fn control(command: &str, answer: &str) {
    let mut control = server().control.lock().unwrap();
    let Some((stdin, stdout)) = control.as_mut() else {
        panic!("the tests' PostgreSQL server is not ours to stop (AGENTWIRE_TEST_POSTGRES)");
    };
    writeln!(stdin, "{command}").expect("writing to throwaway-postgres");
    stdin.flush().unwrap();
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("reading throwaway-postgres");
    assert!(
        line.starts_with(answer),
        "throwaway-postgres answered {line:?} to {command}"
    );
}
