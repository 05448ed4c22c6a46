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

use crate::core::normalize::{normalize, Config, Format, Normalized};
use crate::core::render::{normalize_output, project_output};
use crate::core::time::Timestamp;

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
    /// Host agent sessions and serve them to browsers (HTTP API, WebSocket, SSE, demo page).
    Serve(Box<ServeArgs>),
    /// Follow a session's events, resuming by itself after disconnects: `agentwire tail [URL]
    /// SESSION`, with the URL `serve` printed (http://127.0.0.1:7777/#token=…).
    Tail {
        /// The session to follow (ses_…) and, optionally, the server's URL: the one `serve`
        /// printed, the page's address (its `#SESSION` names the session), a base
        /// http(s)://HOST:PORT or ws://HOST:PORT/ws. Default: ws://127.0.0.1:7777/ws.
        #[arg(value_name = "URL|SESSION", num_args = 1..=2, required = true)]
        targets: Vec<String>,
        /// Print events after this sequence.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// The server's URL (the same as giving it before the session).
        #[arg(long)]
        url: Option<String>,
        /// The server's token (or AGENTWIRE_TOKEN), when the URL carries none. On a shared
        /// machine prefer --token-file or the variable: every local user can read a command
        /// line.
        #[arg(long, env = "AGENTWIRE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read the token from this file (its first line).
        #[arg(long, value_name = "FILE", conflicts_with = "token")]
        token_file: Option<PathBuf>,
        /// Exit once caught up instead of following.
        #[arg(long)]
        no_follow: bool,
        /// `text`: a line per event for people (streamed text joined); `json`: JSON Lines.
        /// Default: text on a terminal, json otherwise.
        #[arg(long, value_parser = ["text", "json"])]
        format: Option<String>,
        /// The first reconnect delay in ms (doubles up to 5 s, with jitter).
        #[arg(long, default_value_t = 100, hide = true)]
        backoff_ms: u64,
    },
    /// Run the built-in demo agent (Claude Code stream-json on stdin/stdout).
    #[command(hide = true)]
    DemoAgent {
        #[arg(long, default_value_t = 15)]
        delay_ms: u64,
        /// Go on with this session id (as `claude --resume` does).
        #[arg(long)]
        resume: Option<String>,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Where to listen. A non-loopback address needs an explicit --token.
    #[arg(long, default_value = "127.0.0.1:7777")]
    addr: std::net::SocketAddr,
    /// The SQLite event store (the default store; one companion per file).
    #[arg(long, default_value = "agentwire.db")]
    db: PathBuf,
    /// Use a PostgreSQL event store instead of --db, shared by every companion pointed at it:
    /// postgres://USER@127.0.0.1:5432/DB, or a Unix socket directory
    /// (postgres://USER@%2Fvar%2Frun%2Fpostgresql/DB). No TLS: the server must be on this
    /// machine (tunnel to a remote one).
    #[arg(
        long,
        env = "AGENTWIRE_STORE",
        value_name = "URL",
        conflicts_with = "db"
    )]
    store: Option<String>,
    /// The access token, at least 16 characters (or AGENTWIRE_TOKEN); a random one is made
    /// when absent. Every local user can read a command line: prefer --token-file or the
    /// variable.
    #[arg(long, env = "AGENTWIRE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the access token from this file (its first line; the file must not be readable
    /// by group or others).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Serve the page in this directory instead of the demo page built into the binary.
    #[arg(long, value_name = "DIR")]
    www: Option<PathBuf>,
    /// Another origin allowed to use the API (with CORS) and the WebSocket (repeatable), e.g.
    /// a dev server: http://localhost:5173. `null` is refused.
    #[arg(long, value_name = "ORIGIN", value_parser = crate::companion::access::parse_origin)]
    allow_origin: Vec<String>,
    /// Another name the server answers to (repeatable), as the Host header carries it, e.g.
    /// a reverse proxy's `agents.example.com`. By default only 127.0.0.1:PORT,
    /// localhost:PORT, [::1]:PORT and the bound address are.
    #[arg(long, value_name = "HOST", value_parser = crate::companion::access::parse_host)]
    allow_host: Vec<String>,
    /// The most connections open at once (WebSockets included); at the cap, the connection
    /// idle the longest is closed.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Milliseconds a connection may take to send a request head, or stay idle between two.
    #[arg(long, default_value_t = 10_000, hide = true)]
    header_timeout_ms: u64,
    /// Milliseconds a write to a client that does not read may block before the connection
    /// is closed (an HTTP response or a WebSocket).
    #[arg(long, default_value_t = 30_000, hide = true)]
    write_timeout_ms: u64,
    /// Milliseconds one `GET /api/wire` event stream (the WebSocket fallback) lasts before
    /// the client opens the next.
    #[arg(long, default_value_t = 30_000, hide = true)]
    sse_recycle_ms: u64,
    /// Milliseconds between server heartbeats on the WebSocket.
    #[arg(long, default_value_t = 15_000)]
    heartbeat_ms: u64,
    /// Milliseconds between the demo agent's streamed chunks.
    #[arg(long, default_value_t = 15)]
    demo_delay_ms: u64,
    /// Milliseconds an interrupted turn may take to end before it is cancelled anyway.
    #[arg(long, default_value_t = 2_000)]
    cancel_grace_ms: i64,
    /// Milliseconds an autonomous turn may stay silent before the watchdog fails it.
    #[arg(long, default_value_t = 600_000)]
    idle_limit_ms: i64,
    /// Milliseconds a foreground turn may stay silent (a hung agent) before the watchdog fails it.
    #[arg(long, default_value_t = 600_000)]
    turn_idle_limit_ms: i64,
    /// Milliseconds a turn may stay silent before it is shown stalled (a synthetic `run_stalled`).
    #[arg(long, default_value_t = 90_000)]
    stall_ms: i64,
    /// Where to look for agent CLIs before PATH (`scripts/install-clis` installs there).
    #[arg(long, env = "AGENTWIRE_CLI_DIR", default_value = crate::companion::host::DEFAULT_CLI_DIR)]
    cli_dir: PathBuf,
    /// Write each session's agent traffic (stdout lines and the stdin lines sent to it) to
    /// DIR/<session id>.jsonl, e.g. to capture transcripts.
    #[arg(long)]
    record_dir: Option<PathBuf>,
    /// This companion's name on a shared --store (default: the host name). Each companion on
    /// one database needs its own, kept across restarts: a restart marks failed only the
    /// sessions its own node was running.
    #[arg(long, env = "AGENTWIRE_NODE")]
    node: Option<String>,
    /// Milliseconds this node's lease lasts: renewed every third of that; another companion
    /// on the store ends the running sessions of a node silent for longer as failed.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: i64,
    /// Unstored events per session (the store is failing) past which the session stops
    /// reading its agent's output until the store takes them: nothing is dropped.
    #[arg(long, default_value_t = 10_000)]
    store_queue_events: usize,
    /// On shutdown, milliseconds to keep retrying the events the store has not taken yet;
    /// what is left is reported, and the exit status is 1.
    #[arg(long, default_value_t = 10_000)]
    store_drain_ms: u64,
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
            print(&normalize_output(&out))?;
            report(&out);
            let failed = strict && !out.diagnostics.is_empty();
            Ok(if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Serve(args) => serve(*args),
        Command::Tail {
            targets,
            after,
            url,
            token,
            token_file,
            no_follow,
            format,
            backoff_ms,
        } => {
            let follow = Follow {
                targets,
                url,
                token,
                token_file,
                after,
                follow: !no_follow,
                format,
                backoff_ms,
            };
            match tail(follow) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(e) if e.is::<crate::companion::tail::Refused>() => {
                    eprintln!("agentwire tail: {e:#}");
                    Ok(ExitCode::from(3))
                }
                Err(e) => Err(e),
            }
        }
        Command::Project { input } => {
            let out = read_and_normalize(&input)?;
            let now = input.now.unwrap_or_else(wall_clock);
            print(&project_output(&out, &input.session, now.unix_millis()))?;
            report(&out);
            Ok(ExitCode::SUCCESS)
        }
        Command::DemoAgent { delay_ms, resume } => {
            Ok(crate::companion::demo_agent::run(delay_ms, resume))
        }
    }
}

/// `agentwire tail`'s arguments, before they are understood.
struct Follow {
    targets: Vec<String>,
    url: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    after: u64,
    follow: bool,
    format: Option<String>,
    backoff_ms: u64,
}

/// Finds the server, the token and the session in what `tail` was given, then follows.
fn tail(args: Follow) -> Result<()> {
    use crate::companion::tail::{self, OutputFormat};
    use crate::core::wire::is_session_id;
    let (sessions, mut urls): (Vec<String>, Vec<String>) =
        args.targets.into_iter().partition(|t| is_session_id(t));
    urls.extend(args.url);
    let (session, url) = match (sessions.as_slice(), urls.as_slice()) {
        ([_, _, ..], _) => bail!("one session at a time (given: {})", sessions.join(", ")),
        (_, [_, _, ..]) => bail!("one server URL at a time (given: {})", urls.join(", ")),
        (session, url) => (session.first(), url.first()),
    };
    let target = tail::target::parse(url.map_or("ws://127.0.0.1:7777/ws", String::as_str))?;
    let session = match (session, &target.session) {
        (Some(given), Some(named)) if given != named => {
            bail!("two sessions: {given} and the URL's {named}")
        }
        (Some(session), _) | (None, Some(session)) => session.clone(),
        (None, None) => bail!(
            "which session? give its id (ses_…) after the URL (the page's address names it: …/#ses_…)"
        ),
    };
    let token = match (target.token, args.token_file, args.token) {
        (Some(token), _, _) => token,
        (None, Some(file), _) => read_token_file(&file)?,
        (None, None, Some(token)) => token,
        (None, None, None) => bail!(
            "a token is required: the URL serve printed (#token=…), --token-file FILE or AGENTWIRE_TOKEN"
        ),
    };
    let format = match args.format.as_deref() {
        Some("json") => OutputFormat::Json,
        Some(_) => OutputFormat::Text,
        None if io::IsTerminal::is_terminal(&io::stdout()) => OutputFormat::Text,
        None => OutputFormat::Json,
    };
    let options = tail::TailOptions {
        url: target.ws_url,
        token,
        session,
        after: args.after,
        follow: args.follow,
        backoff_min_ms: args.backoff_ms,
        format,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(tail::run(options))
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    use crate::companion::store::{PostgresStore, SqliteStore, Store};
    use crate::companion::{host, server, tail};
    let explicit_token = args.token.is_some() || args.token_file.is_some();
    if !args.addr.ip().is_loopback() && !explicit_token {
        bail!(
            "refusing to listen on {} (not loopback) without an explicit --token or --token-file",
            args.addr
        );
    }
    let on_command_line = std::env::args().any(|a| a == "--token" || a.starts_with("--token="));
    if on_command_line {
        eprintln!(
            "agentwire: warning: a --token on the command line is readable by every local user \
             (ps, /proc/PID/cmdline); prefer --token-file or AGENTWIRE_TOKEN"
        );
    }
    // The URL is printed with the token only when it is new or on the command line anyway.
    let token_shown = on_command_line || (args.token.is_none() && args.token_file.is_none());
    let token = match (&args.token, &args.token_file) {
        (_, Some(file)) => read_token_file(file)?,
        (Some(token), None) => token.clone(),
        (None, None) => tail::new_token(),
    };
    if token.chars().count() < crate::companion::access::MIN_TOKEN_LEN {
        bail!(
            "the token must be at least {} characters",
            crate::companion::access::MIN_TOKEN_LEN
        );
    }
    if token.chars().any(|c| c.is_control() || c == ' ') {
        bail!("the token must not contain spaces or control characters");
    }
    if let Err(e) = crate::companion::host::hide_from_agents() {
        eprintln!("agentwire: could not hide this process from its agents: {e}");
    }
    match crate::companion::listen::raise_file_limit() {
        Ok(limit) if (limit as usize) < args.max_connections + 64 => eprintln!(
            "agentwire: only {limit} open files allowed: fewer connections than --max-connections fit"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("agentwire: could not raise the open-file limit: {e}"),
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        let (store, location): (std::sync::Arc<dyn Store>, String) = match &args.store {
            Some(url) => {
                if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                    bail!("--store takes a postgres:// URL (the SQLite store is --db)");
                }
                let store = PostgresStore::connect(url)
                    .await
                    .context("connecting to the PostgreSQL store")?;
                let location = store.target().to_owned();
                (std::sync::Arc::new(store), location)
            }
            None => {
                let store = SqliteStore::open(&args.db)
                    .with_context(|| format!("opening {}", args.db.display()))?;
                (std::sync::Arc::new(store), args.db.display().to_string())
            }
        };
        let program = std::env::current_exe().context("locating this binary")?;
        let mut hub_config = host::HubConfig::new(program);
        hub_config.demo_delay_ms = args.demo_delay_ms;
        hub_config.cancel_grace_ms = args.cancel_grace_ms;
        hub_config.autonomous_idle_limit_ms = args.idle_limit_ms;
        hub_config.foreground_idle_limit_ms = args.turn_idle_limit_ms;
        hub_config.stall_after_ms = args.stall_ms;
        hub_config.cli_dir = std::path::absolute(&args.cli_dir)
            .with_context(|| format!("resolving {}", args.cli_dir.display()))?;
        if let Some(dir) = &args.record_dir {
            private_dir(dir)?;
        }
        hub_config.record_dir = args.record_dir;
        hub_config.node = match args.node {
            Some(node) if node.trim().is_empty() => bail!("--node must not be empty"),
            Some(node) => node,
            None => host_name(),
        };
        hub_config.lease_ms = args.lease_ms.max(30);
        hub_config.store_queue.max_unstored = args.store_queue_events.max(1);
        hub_config.store_drain_ms = args.store_drain_ms;
        let hub = host::Hub::new(store, hub_config);
        let recovered = hub.recover().await.context("recovering sessions")?;
        if recovered > 0 {
            eprintln!(
                "agentwire: marked {recovered} session(s) left running by the last run as failed"
            );
        }
        // Alive from now on: renew the lease (taking over what dead nodes left running) before
        // serving, then in the background.
        hub.renew_lease()
            .await
            .context("renewing this node's lease")?;
        tokio::spawn(hub.clone().keep_lease());
        // Every session's stored projection within a few thousand events of its log, so a
        // snapshot never replays a long one (companion::snapshot).
        tokio::spawn(hub.projections().keep_checkpoints());
        if args.www.is_none() && !crate::companion::embedded::PACKAGE {
            eprintln!(
                "agentwire: this binary was built without the npm package, so the demo page \
                 cannot run: build it with scripts/build-wasm, then build agentwire again \
                 (or serve a page with --www DIR)"
            );
        }
        let mut config = server::ServerConfig::new(token.clone(), PathBuf::new());
        config.www = args.www;
        config.allowed_origins = args.allow_origin;
        config.allowed_hosts = args.allow_host;
        config.listen.max_connections = args.max_connections.max(1);
        config.listen.header_timeout =
            std::time::Duration::from_millis(args.header_timeout_ms.max(10));
        config.listen.write_timeout =
            std::time::Duration::from_millis(args.write_timeout_ms.max(10));
        config.limits.heartbeat_ms = args.heartbeat_ms.max(100);
        config.sse_recycle = std::time::Duration::from_millis(args.sse_recycle_ms.max(100));
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("listening on {}", args.addr))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        // The token goes in the fragment: browsers send it to no server, keep it out of
        // referrers, and the page takes it out of the address bar.
        // Whoever reads stdout may stop (`| head -1`): the server goes on regardless.
        let mut out = io::stdout().lock();
        if token_shown {
            let _ = writeln!(out, "agentwire: serving http://{addr}/#token={token}");
        } else {
            // A token kept in a file or the environment stays there: not in logs of stdout.
            let _ = writeln!(
                out,
                "agentwire: serving http://{addr}/ (open it with #token=<your token>)"
            );
        }
        let _ = writeln!(
            out,
            "agentwire: store {location} (epoch {}), node {:?}",
            hub.store().epoch(),
            hub.node()
        );
        let _ = out.flush();
        drop(out);
        let state = server::AppState::new(hub.clone(), std::sync::Arc::new(config));
        // Ctrl-C or SIGTERM: stop accepting, close every session (killing its agent), exit.
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        server::serve(listener, state, shutdown)
            .await
            .context("serving")?;
        let lost = hub.lost_events();
        if lost > 0 {
            eprintln!("agentwire: {lost} event(s) could not be stored (the store was failing)");
            return Ok(ExitCode::FAILURE);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A token kept in a file: its first line, trimmed. The file must be private to its owner,
/// as an SSH key must.
fn read_token_file(path: &std::path::Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!(
            "{} is readable by other users: chmod 600 it",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        bail!("{} holds no token", path.display());
    }
    Ok(token)
}

/// Creates `dir` (and its parents) private to this user (0700). An existing directory is
/// left as it is (it may be shared, like /tmp): the files in it are created 0600 anyway.
fn private_dir(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
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

fn print(text: &str) -> Result<()> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("writing stdout")?;
    stdout.flush().context("writing stdout")
}

fn report(out: &Normalized) {
    let _ = io::stderr()
        .lock()
        .write_all(crate::core::render::report(out).as_bytes());
}

fn wall_clock() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp::from_unix_millis(ms)
}

/// The machine's name (Linux: the kernel's; elsewhere `/etc/hostname`), or `local`.
fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}
