//! The binary serves the demo page built into it wherever it is copied: a copy in an empty
//! directory, started from another empty directory with no `--www`, serves the page, every
//! script it loads (the npm package's through the import map) and the wasm, byte for byte the
//! source tree's www/ and pkg-web/, with the right headers; `--www DIR` serves DIR instead.
#![cfg(not(target_arch = "wasm32"))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "test-token-0123456789";
const DEADLINE: Duration = Duration::from_secs(90);

struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bin serve` on port 0, run from `cwd`, with nothing of this process's environment.
fn serve(bin: &Path, cwd: &Path, extra: &[&str]) -> Serve {
    let mut child = Command::new(bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--token", TOKEN])
        .args(extra)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("agentwire serve starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let rest = line
        .strip_prefix("agentwire: serving http://")
        .unwrap_or_else(|| panic!("the server prints its URL, not {line:?}"));
    let addr = rest.split('/').next().unwrap().parse().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    Serve { child, addr }
}

struct Response {
    status: u16,
    /// Lowercase names and values.
    head: String,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            (n == name).then(|| v.trim())
        })
    }
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&bytes[..split]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Response {
        status,
        head,
        body: bytes[split + 4..].to_vec(),
    }
}

/// The local files a page or a module names: in a page, `src=`/`href=` attributes and the
/// import map's targets; in a module, its relative imports (`from "./x.js"`, `import("./x.js")`)
/// and the wasm a package glue loads (`agentwire_bg.wasm`, beside it).
fn references(path: &str, text: &str) -> Vec<String> {
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let mut names: Vec<&str> = Vec::new();
    let quoted_after = |marker: &str| -> Vec<&str> {
        text.match_indices(marker)
            .filter_map(|(at, _)| text[at + marker.len()..].split('"').next())
            .collect()
    };
    if path.ends_with(".html") {
        names.extend(quoted_after("src=\""));
        names.extend(quoted_after("href=\""));
        names.extend(quoted_after(": \"./"));
    } else {
        names.extend(quoted_after("from \""));
        names.extend(quoted_after("import(\""));
        // wasm-bindgen's `new URL('agentwire_bg.wasm', import.meta.url)`, as written or
        // minified (double quotes, no blanks).
        let compact: String = text
            .chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| if c == '\'' { '"' } else { c })
            .collect();
        if compact.contains(r#"newURL("agentwire_bg.wasm",import.meta.url)"#) {
            names.push("./agentwire_bg.wasm");
        }
    }
    names
        .into_iter()
        .filter(|n| !n.contains(':') && !n.is_empty())
        .filter(|n| path.ends_with(".html") || n.starts_with("./"))
        .map(|n| n.trim_start_matches("./"))
        .map(|n| {
            if dir.is_empty() {
                n.to_owned()
            } else {
                format!("{dir}/{n}")
            }
        })
        .collect()
}

#[test]
fn a_copied_binary_serves_the_embedded_page_from_an_empty_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin/agentwire");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_agentwire"), &bin).unwrap();
    let cwd = tmp.path().join("run");
    std::fs::create_dir(&cwd).unwrap();
    let server = serve(&bin, &cwd, &[]);

    let page = get(server.addr, "/", "");
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body.clone()).unwrap();
    assert!(
        !html.contains("scripts/build-wasm"),
        "this binary was built without the npm package: run scripts/build-wasm, then cargo test"
    );
    assert_eq!(
        html.as_bytes(),
        std::fs::read(root.join("www/index.html")).unwrap()
    );
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = agentwire::companion::server::page_policy(&html).to_ascii_lowercase();
    assert!(
        policy.contains("'sha256-"),
        "the import map is allowed by hash: {policy}"
    );
    assert_eq!(
        page.header("content-security-policy"),
        Some(policy.as_str())
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));

    // Every file the page loads, transitively, from the binary alone.
    let mut todo = references("index.html", &html);
    let mut seen = Vec::new();
    while let Some(path) = todo.pop() {
        if seen.contains(&path) {
            continue;
        }
        let response = get(server.addr, &format!("/{path}"), "");
        assert_eq!(response.status, 200, "/{path}");
        let want_type = match path.rsplit('.').next().unwrap() {
            "js" => "text/javascript; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            "wasm" => "application/wasm",
            other => panic!("an unexpected file /{path} ({other})"),
        };
        assert_eq!(response.header("content-type"), Some(want_type), "/{path}");
        assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
        let source = match path.strip_prefix("node_modules/agentwire/") {
            Some(package) => root.join("pkg-web").join(package),
            None => root.join("www").join(&path),
        };
        assert!(
            response.body == std::fs::read(&source).unwrap(),
            "/{path} is {} as built",
            source.display()
        );
        if path.ends_with(".js") {
            todo.extend(references(
                &path,
                &String::from_utf8(response.body).unwrap(),
            ));
        }
        seen.push(path);
    }
    seen.sort();
    for want in [
        "app.js",
        "style.css",
        "timeline.js",
        "virtual-list.js",
        "node_modules/agentwire/agentwire.js",
        "node_modules/agentwire/agentwire_bg.wasm",
        "node_modules/agentwire/transcripts/agentwire.js",
        "node_modules/agentwire/transcripts/agentwire_bg.wasm",
    ] {
        assert!(seen.iter().any(|s| s == want), "{want} not among {seen:?}");
    }

    // Revalidation: 304, with the page's own policy (the browser keeps these headers).
    let etag = page.header("etag").expect("an etag").to_owned();
    let again = get(server.addr, "/", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(
        again.header("content-security-policy"),
        Some(policy.as_str())
    );
    let wasm = "/node_modules/agentwire/agentwire_bg.wasm";
    let wasm_etag = get(server.addr, wasm, "")
        .header("etag")
        .unwrap()
        .to_owned();
    assert_ne!(wasm_etag, etag);
    let stale = get(server.addr, wasm, &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(stale.status, 200);

    // The same path rules as on disk: nothing else of the source tree.
    for bad in [
        "/package.json",
        "/../Cargo.toml",
        "/node_modules/agentwire/package.json",
        "/.env",
        "/app.js/",
        "/missing.js",
    ] {
        assert_eq!(get(server.addr, bad, "").status, 404, "{bad}");
    }
    assert!(std::fs::read_dir(&cwd).unwrap().all(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("agentwire.db")));
}

#[test]
fn www_serves_a_custom_page_from_disk_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.html"), "<p>custom</p>").unwrap();
    std::fs::write(www.join("extra.js"), "export {};").unwrap();
    let server = serve(
        Path::new(env!("CARGO_BIN_EXE_agentwire")),
        tmp.path(),
        &["--www", www.to_str().unwrap()],
    );
    let page = get(server.addr, "/", "");
    assert_eq!(
        (page.status, page.body.as_slice()),
        (200, &b"<p>custom</p>"[..])
    );
    let script = get(server.addr, "/extra.js", "");
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    // Nothing of the embedded page.
    assert_eq!(get(server.addr, "/app.js", "").status, 404);
    let etag = page.header("etag").expect("an etag").to_owned();
    let again = get(server.addr, "/", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(again.status, 304);
    // A changed file is a new tag.
    std::fs::write(www.join("index.html"), "<p>changed, and longer</p>").unwrap();
    let changed = get(server.addr, "/", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(
        (changed.status, changed.body.as_slice()),
        (200, &b"<p>changed, and longer</p>"[..])
    );
}
