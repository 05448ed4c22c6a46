//! `--record-dir` transcripts.

/// `--record-dir`: the agent's stdout lines and the lines the companion wrote to its stdin,
/// in the order the companion saw them, as one JSON Lines file per session. A debugging and
/// transcript-capture aid: it writes synchronously, and a write error stops the recording.
pub(super) struct Recorder {
    file: std::fs::File,
    /// Stdout bytes after the last newline, held so that a stdin line never splits one.
    partial: Vec<u8>,
}

impl Recorder {
    pub(super) fn open(path: &std::path::Path) -> Option<Recorder> {
        // Appending: a resumed session goes on in the same file.
        // Private: it holds every prompt and every output.
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path);
        match file {
            Ok(file) => Some(Recorder {
                file,
                partial: Vec::new(),
            }),
            Err(e) => {
                eprintln!("agentwire: not recording to {}: {e}", path.display());
                None
            }
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        if let Err(e) = self.file.write_all(bytes) {
            eprintln!("agentwire: recording failed: {e}");
        }
    }

    pub(super) fn stdout(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        if let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') {
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            self.write(&lines);
        }
    }

    pub(super) fn stdout_eof(&mut self) {
        if !self.partial.is_empty() {
            let mut rest = std::mem::take(&mut self.partial);
            rest.push(b'\n');
            self.write(&rest);
        }
    }
}
