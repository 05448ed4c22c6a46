//! The `agentwire` command line (native only): a thin shell over the core.
//!
//! `normalize` prints one canonical event per line as JSON on stdout and its diagnostics plus
//! a one-line summary on stderr; exit 0 when it read the input, 2 on unreadable input or bad
//! arguments, 1 with `--strict` when there were diagnostics. `project` prints the lifecycle
//! and the timeline that a transcript projects to.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use crate::core::event::Provider;
use crate::core::lifecycle::{LifecycleConfig, TurnProjector};
use crate::core::normalize::{normalize, Config, Format, Normalized};
use crate::core::render::render_diagnostics;
use crate::core::time::Timestamp;
use crate::core::timeline::Timeline;

#[derive(Parser)]
#[command(
    name = "agentwire",
    version,
    about = "Observe and drive coding-agent sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Normalize a provider transcript into canonical events (JSON Lines on stdout).
    Normalize {
        #[command(flatten)]
        input: InputArgs,
        /// Exit 1 when any line produced a diagnostic.
        #[arg(long)]
        strict: bool,
    },
    /// Print the lifecycle and timeline a transcript projects to.
    Project {
        #[command(flatten)]
        input: InputArgs,
    },
    /// Run the built-in demo agent (Claude Code stream-json on stdin/stdout).
    #[command(hide = true)]
    DemoAgent {
        #[arg(long, default_value_t = 15)]
        delay_ms: u64,
    },
}

#[derive(clap::Args)]
struct InputArgs {
    /// The transcript's format; detected from the first record when absent.
    #[arg(long, value_parser = parse_format)]
    provider: Option<Format>,
    /// The session id stamped on every event.
    #[arg(long, default_value = "local")]
    session: String,
    /// The time (RFC 3339) given to lines that carry none; default: now.
    #[arg(long, value_parser = parse_time)]
    now: Option<Timestamp>,
    /// The transcript file, or `-` for stdin.
    #[arg(default_value = "-")]
    file: PathBuf,
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        let names: Vec<_> = Format::ALL.iter().map(|f| f.as_str()).collect();
        format!(
            "unknown provider {s:?}; expected one of {}",
            names.join(", ")
        )
    })
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(s).ok_or_else(|| format!("{s:?} is not an RFC 3339 time"))
}

/// Runs the CLI and maps the outcome to the documented exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentwire: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Normalize { input, strict } => {
            let out = read_and_normalize(&input)?;
            let mut stdout = io::BufWriter::new(io::stdout().lock());
            for event in &out.events {
                writeln!(stdout, "{}", event.to_json()).context("writing stdout")?;
            }
            stdout.flush().context("writing stdout")?;
            report(&out);
            let failed = strict && !out.diagnostics.is_empty();
            Ok(if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Project { input } => {
            let out = read_and_normalize(&input)?;
            let now = input.now.unwrap_or_else(wall_clock);
            let mut lifecycle = TurnProjector::new(LifecycleConfig::new(
                &input.session,
                out.format.map_or(Provider::Generic, Format::provider),
            ));
            let mut timeline = Timeline::new();
            for event in &out.events {
                lifecycle.handle_event(event, now.unix_millis());
                timeline.handle_event(event);
            }
            let mut stdout = io::stdout().lock();
            write!(stdout, "{}", lifecycle.render()).context("writing stdout")?;
            write!(stdout, "{}", timeline.render()).context("writing stdout")?;
            report(&out);
            Ok(ExitCode::SUCCESS)
        }
        Command::DemoAgent { delay_ms } => Ok(crate::companion::demo_agent::run(delay_ms)),
    }
}

fn read_and_normalize(input: &InputArgs) -> Result<Normalized> {
    let bytes = if input.file.as_os_str() == "-" {
        let mut buf = Vec::new();
        io::stdin().read_to_end(&mut buf).context("reading stdin")?;
        buf
    } else {
        std::fs::read(&input.file).with_context(|| format!("reading {}", input.file.display()))?
    };
    if input.session.is_empty() {
        bail!("--session must not be empty");
    }
    let now = input.now.unwrap_or_else(wall_clock);
    Ok(normalize(
        input.provider,
        Config::new(&input.session),
        &bytes,
        now,
    ))
}

fn report(out: &Normalized) {
    let mut stderr = io::stderr().lock();
    let _ = write!(stderr, "{}", render_diagnostics(&out.diagnostics));
    let format = out.format.map_or("nothing (empty input)", Format::as_str);
    let s = out.stats;
    let _ = writeln!(
        stderr,
        "agentwire: read {} records as {format}: {} events, {} ignored, {} diagnostics",
        s.records, s.events, s.ignored, s.diagnostics
    );
}

fn wall_clock() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp::from_unix_millis(ms)
}
