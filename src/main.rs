//! The `agentwire` binary. On wasm32 it is empty: `wasm-pack test` builds every target.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    agentwire::cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
