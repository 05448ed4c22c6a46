//! `agentwire tail` for people, against a real `agentwire serve` with the demo agent: the URL
//! the server prints is enough (token and all), the text format joins streamed text into one
//! line per message, and what cannot heal (a malformed URL, a wrong token) ends it at once
//! with a clear message and its exit status instead of retrying forever.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;

use agentwire::core::event::{Event, EventType};
use common::{ended, Server, DEADLINE, TOKEN};

/// A server on port 0 and the URL it printed.
fn serve(dir: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "127.0.0.1:0", "--token", TOKEN])
        .args(["--demo-delay-ms", "2", "--db"])
        .arg(dir.join("a.db"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let serving = lines.next().unwrap().unwrap();
    let url = serving
        .strip_prefix("agentwire: serving ")
        .expect(&serving)
        .to_owned();
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let store = lines.next().unwrap().unwrap();
    let epoch = store.rsplit("(epoch ").next().unwrap();
    let epoch = epoch.split(')').next().unwrap().to_owned();
    std::thread::spawn(move || lines.for_each(drop));
    let server = Server {
        child,
        addr,
        db: dir.join("a.db"),
        epoch,
    };
    (server, url)
}

/// `agentwire tail ARGS` with nothing of this process's environment but `env`; fails the test
/// if it has not exited by the deadline (a tail that retries forever).
fn tail(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("tail")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    rx.recv_timeout(DEADLINE).unwrap_or_else(|_| {
        let _ = Command::new("kill").arg(pid.to_string()).status();
        panic!("agentwire tail {args:?} did not exit")
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_printed_url_is_enough_and_text_joins_what_was_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let (server, url) = serve(dir.path());
    assert_eq!(url, format!("http://{}/#token={TOKEN}", server.addr));
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "please use a tool");
    let log = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    // What the demo agent streamed, joined: the message the text format prints whole.
    let streamed: String = log
        .iter()
        .filter(|e| e.kind() == EventType::MessageStreamed)
        .filter_map(|e| e.data_str("delta"))
        .collect();
    assert!(
        log.iter()
            .filter(|e| e.kind() == EventType::MessageStreamed)
            .count()
            > 1
    );

    let out = tail(&[&url, &session, "--no-follow", "--format", "text"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().map(|l| &l[9..]).collect();
    let message = format!("assistant: {streamed}");
    for want in [
        "you: please use a tool",
        "turn started",
        "tool Bash: ls",
        "tool Bash done: Cargo.toml ⏎ README.md ⏎ src ⏎ tests",
        message.as_str(),
    ] {
        assert_eq!(
            lines.iter().filter(|l| **l == want).count(),
            1,
            "{want:?} once in\n{stdout}"
        );
    }
    assert!(
        lines.last().unwrap().starts_with("turn completed"),
        "{stdout}"
    );
    assert!(!stdout.contains("message_streamed"), "{stdout}");

    // The page's address names the session, AGENTWIRE_TOKEN gives the token; JSON Lines when
    // stdout is not a terminal.
    let page = format!("http://{}/#{session}", server.addr);
    let out = tail(&[&page, "--no-follow"], &[("AGENTWIRE_TOKEN", TOKEN)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: Vec<Event> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, server.events(&session));
}

#[test]
fn a_malformed_url_or_a_wrong_token_ends_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = serve(dir.path());
    let session = server.create_demo_session();
    let addr = server.addr;
    for (url, status, message) in [
        (
            format!("{addr}/#token={TOKEN}"),
            2,
            "is not a URL: give the one `agentwire serve` printed",
        ),
        (
            format!("http://{}:99999/#token={TOKEN}", addr.ip()),
            2,
            "\"99999\" is not a port",
        ),
        (
            format!("ftp://{addr}/#token={TOKEN}"),
            2,
            "is not one of http, https, ws, wss",
        ),
        (
            format!("http://{addr}/#token=wrong-token-0123456789"),
            3,
            "the server refused the connection (401): bad_token: wrong token; check the token",
        ),
        (
            format!("http://{addr}/"),
            2,
            "a token is required: the URL serve printed (#token=…), --token-file FILE or AGENTWIRE_TOKEN",
        ),
        (
            format!("ws://{addr}/nowhere?token={TOKEN}"),
            2,
            "no agentwire WebSocket there (404)",
        ),
    ] {
        let out = tail(&[&url, &session], &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{url}: {stderr}");
        assert!(stderr.contains(message), "{url}: {stderr}");
        assert!(out.stdout.is_empty(), "{url}");
    }
    // A session id that is none, and two sessions.
    let out = tail(&["ses_1", "ses_2"], &[("AGENTWIRE_TOKEN", TOKEN)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("one session at a time"));
}
