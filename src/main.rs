//! The `agentwire` binary. On wasm32 it is empty: `wasm-pack test` builds every target.

/// mimalloc: see `companion::alloc`.
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    agentwire::cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
