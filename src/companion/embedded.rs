//! The demo page built into the binary (by `build.rs`): www/'s page files and the npm
//! package's web build, which `agentwire serve` serves when it is given no `--www`.

/// One embedded file.
#[derive(Debug)]
pub struct EmbeddedFile {
    /// Its URL path under `/`, e.g. `node_modules/agentwire/agentwire.js`.
    pub path: &'static str,
    pub bytes: &'static [u8],
    /// A strong ETag (quoted) of its content.
    pub etag: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/embedded_www.rs"));

/// What `/` is when the binary was built without the npm package: how to build it.
pub static NOT_BUILT: EmbeddedFile = EmbeddedFile {
    path: "index.html",
    bytes: b"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentwire</title></head>\n\
<body><h1>agentwire</h1>\n<p>This binary was built without the <code>agentwire</code> npm package, so its demo page \
cannot run. In the source tree, build the package with <code>scripts/build-wasm</code>, then build agentwire again \
(<code>cargo build</code>, or <code>cargo install --path .</code>); or serve a page from disk with \
<code>agentwire serve --www DIR</code>. The HTTP API and the WebSocket work regardless.</p>\n</body></html>\n",
    etag: "\"not-built\"",
};

/// The embedded file at `path` (relative to `/`, `index.html` for the page) among `files`;
/// `index.html` is [`NOT_BUILT`] when the package is not among them.
pub fn find<'a>(files: &'a [EmbeddedFile], package: bool, path: &str) -> Option<&'a EmbeddedFile> {
    if path == "index.html" && !package {
        return Some(&NOT_BUILT);
    }
    files.iter().find(|f| f.path == path)
}

/// The file this binary serves at `path` ([`find`] over what `build.rs` embedded).
pub fn file(path: &str) -> Option<&'static EmbeddedFile> {
    find(FILES, PACKAGE, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(package: bool, path: &str, want: Option<&str>) {
        let files = [
            EmbeddedFile {
                path: "index.html",
                bytes: b"page",
                etag: "\"1\"",
            },
            EmbeddedFile {
                path: "node_modules/agentwire/agentwire.js",
                bytes: b"js",
                etag: "\"2\"",
            },
        ];
        let got = find(&files, package, path).map(|f| std::str::from_utf8(f.bytes).unwrap());
        let got = got.map(|g| {
            if g.contains("scripts/build-wasm") {
                "not built"
            } else {
                g
            }
        });
        assert_eq!(got, want, "{path} (package: {package})");
    }

    #[test]
    fn the_page_says_how_to_build_the_package_when_it_is_missing() {
        for (package, path, want) in [
            (true, "index.html", Some("page")),
            (true, "node_modules/agentwire/agentwire.js", Some("js")),
            (true, "missing.js", None),
            (false, "index.html", Some("not built")),
            (false, "node_modules/agentwire/agentwire.js", Some("js")),
        ] {
            check(package, path, want);
        }
    }

    #[test]
    fn this_binary_embeds_the_page() {
        assert!(FILES
            .iter()
            .any(|f| f.path == "index.html" && !f.bytes.is_empty()));
        assert!(FILES.iter().any(|f| f.path == "app.js"));
    }
}
