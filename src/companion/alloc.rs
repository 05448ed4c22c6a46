//! The allocator the `agentwire` binary runs on: mimalloc (version 3), built not to ask for
//! transparent huge pages (`no_thp`). The library itself sets no global allocator (a
//! program that embeds it keeps its own); the binary declares this one, and so do the
//! benches and the examples that count instructions, so that they measure what it runs:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;
//! ```
//!
//! Against glibc's `malloc` it takes 6–25 % of the CPU off a normalization and 10–17 % off a
//! durable append (BENCHMARKS.md, "Stop 41"). What it costs is memory kept: mimalloc purges the
//! pages it freed a second later, and only when it is called again, so an idle companion holds
//! some. [`release_free_memory`] hands back what can be handed back;
//! the store calls it once it has been idle for a second. Asking for transparent huge pages
//! (mimalloc's default, which matters where the system leaves them to `madvise`, as Debian
//! does) made every page it touched two MiB: the companion with 100 idle sessions went from
//! 41 MiB on glibc to 88; without them, 56–59.

/// The global allocator of the binary.
pub use mimalloc::MiMalloc as Allocator;

/// Gives the memory that the allocators hold free back to the system: mimalloc's (this
/// thread's heap, and the pages any thread gave back to its arenas, waiting to be purged)
/// and glibc's, which SQLite's page caches come from.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` only frees memory mimalloc holds unused; it is safe from any
    // thread, whichever allocator is the global one.
    unsafe { libmimalloc_sys::mi_collect(true) };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) only returns free memory of glibc's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}
