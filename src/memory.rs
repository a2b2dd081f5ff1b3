//! Keeps the daemon's resident memory to what it uses after a config load.
//!
//! Parsing `jobs.toml` builds a full document tree (every key with its
//! position, for error messages) several times the size of the jobs made
//! from it, and publishing to the node registry builds a map of every job's
//! fingerprint. Both are dropped at once, but glibc keeps freed pages for
//! reuse: a daemon that loaded 10,000 jobs kept the parse's peak (~33 MB) as
//! resident memory for its whole life. `malloc_trim` after each of these
//! rare peaks returns what is free (measured in docs/PERFORMANCE.md).

/// Returns the free pages of every malloc arena to the kernel.
#[allow(unsafe_code)]
pub fn release_freed() {
    // SAFETY: malloc_trim only walks glibc's own allocator state; it is
    // thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
