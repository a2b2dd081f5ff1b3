//! Keeps the daemon's resident memory to what it uses.
//!
//! Two habits of glibc's allocator, not the daemon's own data, would
//! otherwise hold much of an idle daemon's resident memory:
//!
//! - **Freed pages are kept.** Parsing `jobs.toml` builds a document tree
//!   several times the size of the jobs made from it, and publishing to
//!   the node registry builds a map of every job's fingerprint; glibc keeps
//!   the freed pages for reuse. [`release_freed`] (`malloc_trim`) after
//!   each of these rare peaks returns what is free.
//! - **One arena per thread.** glibc gives each allocating thread an arena
//!   of its own, each with its own free pages and fragments, and a second
//!   arena does not give back what the parse left in it. [`limit_arenas`]
//!   caps them before any thread starts: [`DAEMON_ARENAS`] for `run`,
//!   [`COMMAND_ARENAS`] for the commands that exit soon (`check` parses on
//!   every core). The daemon's threads allocate little and briefly, and
//!   glibc's per-thread cache serves most small allocations without the
//!   arena's lock. The config loader's parse, which allocates a lot, uses
//!   no more threads than there are arenas ([`parallel_allocators`]).
//!
//! Both are requests to the allocator; neither can fail in a way the
//! daemon must handle (a refused `mallopt` leaves glibc's default).

use std::sync::atomic::{AtomicI32, Ordering};

/// Arenas glibc may create in all (the main one included) in the daemon.
pub const DAEMON_ARENAS: i32 = 1;
/// The same for a command that exits soon (`check`, `status`, ...).
pub const COMMAND_ARENAS: i32 = 2;

/// Caps glibc's malloc arenas at `arenas`, unless `MALLOC_ARENA_MAX` is
/// set in the environment (the operator's choice wins). Call it first
/// thing in `main`: glibc fixes its arena limit when a second thread first
/// allocates, so a later call changes nothing.
#[allow(unsafe_code)]
pub fn limit_arenas(arenas: i32) {
    if let Some(requested) = std::env::var_os("MALLOC_ARENA_MAX") {
        // glibc reads it as a number; anything else leaves its default.
        let parsed = requested
            .to_str()
            .and_then(|value| value.trim().parse().ok());
        ARENAS.store(parsed.unwrap_or(0), Ordering::Relaxed);
        return;
    }
    ARENAS.store(arenas, Ordering::Relaxed);
    // SAFETY: mallopt only sets a parameter of glibc's allocator; it is
    // thread-safe and has no preconditions. Its result (0 = refused)
    // leaves the default in place, which is only a larger footprint.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// The arena limit in force ([`limit_arenas`]); 0: glibc's default.
static ARENAS: AtomicI32 = AtomicI32::new(0);

/// How many threads may allocate at once without waiting for each other
/// on an arena's lock: the arena limit, or `None` if there is none (or
/// glibc's default, one arena per thread up to 8 per core).
pub fn parallel_allocators() -> Option<usize> {
    usize::try_from(ARENAS.load(Ordering::Relaxed))
        .ok()
        .filter(|arenas| *arenas > 0)
}

/// Returns the free pages of every malloc arena to the kernel.
#[allow(unsafe_code)]
pub fn release_freed() {
    // SAFETY: malloc_trim only walks glibc's own allocator state; it is
    // thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
