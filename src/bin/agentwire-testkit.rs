//! `agentwire-testkit`: the test tools, out of the product binary. `cargo test` builds it
//! (the `testkit` feature); `cargo install --path .` does not install it.
//!
//! * `fake-model --addr 127.0.0.1:0`: the scripted model server the real-CLI tests use
//!   (loopback only; `agentwire::companion::fake_model`).
//! * `chaos-proxy --upstream ADDR …`: a TCP proxy on loopback that cuts, stalls and delays
//!   connections (`agentwire::companion::chaos`).
//! * `seed --db FILE --session ID --events N`: a long session written straight into a SQLite
//!   log, for benchmarks and tests of long replays (`agentwire::companion::seed`), with its
//!   projection stored as a companion would have (`--no-projection`: without).
//! * `frames --events N --per-frame K`: the same session as server `events` frames of K events
//!   each, one per line on stdout (the projector benchmark's input).

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::process::ExitCode;
    use std::sync::Arc;

    use agentwire::companion::snapshot::Projections;
    use agentwire::companion::store::{SqliteStore, Store};
    use agentwire::companion::{chaos, fake_model, seed};
    use agentwire::core::event_ref::packed;
    use agentwire::core::wire;
    use anyhow::{Context, Result};
    use clap::Parser;

    #[derive(Parser)]
    #[command(name = "agentwire-testkit", version, about = "agentwire's test tools")]
    enum Command {
        /// Run a TCP proxy on loopback that cuts, stalls and delays connections.
        ChaosProxy {
            #[arg(long, default_value = "127.0.0.1:0")]
            listen: std::net::SocketAddr,
            #[arg(long)]
            upstream: std::net::SocketAddr,
            #[arg(long, default_value_t = 1)]
            seed: u64,
            /// Each connection is cut after a random time in [cut_min_ms, cut_max_ms].
            #[arg(long, default_value_t = 50)]
            cut_min_ms: u64,
            #[arg(long, default_value_t = 400)]
            cut_max_ms: u64,
            /// Chance per forwarded chunk, in 1/1000, of a stall of 50..300 ms.
            #[arg(long, default_value_t = 20)]
            stall_per_mille: u64,
            /// Each forwarded chunk is delayed by up to this many ms.
            #[arg(long, default_value_t = 5)]
            max_delay_ms: u64,
            /// Answer WebSocket upgrades 403 (a proxy that does not speak WebSocket).
            #[arg(long)]
            refuse_upgrades: bool,
        },
        /// Run the scripted fake model server (loopback only) that the real-CLI tests use.
        FakeModel {
            #[arg(long, default_value = "127.0.0.1:0")]
            addr: std::net::SocketAddr,
        },
        /// Write a long session straight into a SQLite log (prints its number of events).
        Seed {
            #[arg(long)]
            db: std::path::PathBuf,
            #[arg(long)]
            session: String,
            /// At least this many events (whole turns).
            #[arg(long)]
            events: u64,
            /// `TURN:N`: the first tool call of turn TURN gets N output updates.
            #[arg(long, value_parser = parse_updates)]
            tool_updates: Option<(u64, u64)>,
            /// Store no projection of it (by default it is checkpointed as a companion that
            /// had written it would have: a log from before projections were stored).
            #[arg(long)]
            no_projection: bool,
        },
        /// Print the seeded session (no tool updates) as `events` frames, one per line.
        Frames {
            #[arg(long, default_value = "ses_bench")]
            session: String,
            /// At least this many events (whole turns).
            #[arg(long)]
            events: u64,
            /// Events per frame.
            #[arg(long, default_value_t = 1)]
            per_frame: usize,
            /// Packed frames (`packed_events`), each after its length as 4 bytes little-endian,
            /// instead of JSON lines.
            #[arg(long)]
            packed: bool,
        },
    }

    /// The seeded session's events (numbered from 1) as `events` frames, one per line (or
    /// packed, each after its length).
    fn print_frames(session: String, events: u64, per_frame: usize, packed: bool) -> Result<()> {
        use std::io::Write;
        let options = seed::SeedOptions {
            session,
            events,
            tool_updates: None,
        };
        let events: Vec<_> = seed::events(&options)
            .zip(1..)
            .map(|(e, seq)| e.into_sequenced(seq))
            .collect();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for chunk in events.chunks(per_frame.max(1)) {
            let encoded = chunk
                .iter()
                .map(|e| (e.sequence(), e.to_json()))
                .collect::<Vec<_>>();
            let frames = wire::frame_encoded(
                &options.session,
                "bench",
                encoded.iter().map(|(seq, json)| (*seq, json.as_str())),
                usize::MAX,
            );
            for frame in frames {
                match packed {
                    true => {
                        let bytes = packed::pack(&frame.text).context("an events frame")?;
                        out.write_all(&(bytes.len() as u32).to_le_bytes())?;
                        out.write_all(&bytes)?;
                    }
                    false => writeln!(out, "{}", frame.text)?,
                }
            }
        }
        out.flush()?;
        Ok(())
    }

    fn parse_updates(s: &str) -> Result<(u64, u64), String> {
        let (turn, n) = s.split_once(':').ok_or("TURN:N")?;
        Ok((
            turn.parse().map_err(|_| "TURN is a number")?,
            n.parse().map_err(|_| "N is a number")?,
        ))
    }

    pub fn main() -> ExitCode {
        match run(Command::parse()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agentwire-testkit: {e:#}");
                ExitCode::from(2)
            }
        }
    }

    fn run(command: Command) -> Result<()> {
        let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
        match command {
            Command::ChaosProxy {
                listen,
                upstream,
                seed,
                cut_min_ms,
                cut_max_ms,
                stall_per_mille,
                max_delay_ms,
                refuse_upgrades,
            } => {
                let options = chaos::ChaosOptions {
                    listen,
                    upstream,
                    seed,
                    cut_after_ms: (cut_min_ms, cut_max_ms),
                    stall_per_mille,
                    stall_ms: (50, 300),
                    delay_ms: (0, max_delay_ms),
                    refuse_upgrades,
                };
                runtime.block_on(chaos::run(options))?;
            }
            Command::FakeModel { addr } => runtime.block_on(fake_model::run(addr))?,
            Command::Seed {
                db,
                session,
                events,
                tool_updates,
                no_projection,
            } => {
                let store = Arc::new(SqliteStore::open(&db).context("opening the log")?);
                let options = seed::SeedOptions {
                    session,
                    events,
                    tool_updates,
                };
                let n = runtime.block_on(async {
                    let n = seed::seed(store.as_ref(), &options).await?;
                    if !no_projection {
                        let store: Arc<dyn Store> = store.clone();
                        Projections::new(store).refresh(&options.session).await?;
                    }
                    anyhow::Ok(n)
                })?;
                println!("{n}");
            }
            Command::Frames {
                session,
                events,
                per_frame,
                packed,
            } => print_frames(session, events, per_frame, packed)?,
        }
        Ok(())
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    native::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
