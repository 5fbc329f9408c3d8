//! Virtual time for the tests that wait on the guard's timers.
//!
//! A test marked `#[tokio::test(start_paused = true)]` runs on a clock that
//! moves only when its runtime finds nothing to do: it then jumps to the
//! next timer, so a 60 s interval or a 2 s backoff passes in no real time
//! and cannot be stretched by a slow machine. Measure such a test with
//! `tokio::time::Instant`, never `std::time::Instant`.
//!
//! Only the timers of the test's own runtime are virtual. The harness runs
//! discovery, reloads, the admin port, the gRPC listener and the mocks
//! there, and the proxy port too when the test asks
//! (`Options::on_test_runtime`: `server::EventLoops::Caller`, one event
//! loop as a task of the test). Every timer of the proxy port is tokio's
//! (the response and upstream idle timeouts, the body, head and keep-alive
//! timeouts of `conn`, the shutdown grace), so there they are virtual too.
//! Without that option `server::ProxyLoops` serves the port on event loops
//! of their own, as in production (threads with their own runtimes, on the
//! real clock), and all of a spawned binary is on the real clock. A paused
//! test must not wait on those: while it waits, its runtime finds nothing
//! to do and its clock runs ahead of the real one, firing its own timeouts
//! (`PATIENCE`, a mock's delay) before the real ones.
//!
//! Blocking work started on the test's runtime (`spawn_blocking`, so the
//! counting pool, which waits for its rayon threads inside it) stops the
//! clock while it runs (tokio inhibits auto-advance until it is done): a
//! paused runtime never jumps past a count in progress. That holds the other way too: a timeout meant to end a wait
//! *on* blocking work never fires by itself, and such a test moves the
//! clock by hand (`tokio::time::advance`; `core::pool`'s own test). On the
//! test's runtime a small prompt is counted in place, by its bound, when
//! that decides it, and anything else (over `core::INLINE_MAX_BYTES`, or
//! needing an exact count) goes to the pool. Work on any other thread or
//! process stops the clock only by blocking the runtime's own thread: a
//! child process run synchronously (`promtool`) does, one awaited does not.
//!
//! With the proxy on the test's runtime, both ends of every socket of an
//! in-process test are on that one thread; [`ticking`] still covers bytes
//! a loaded kernel is slow to deliver.

use std::time::Duration;

use tokio::task::JoinHandle;

/// How far a paused clock may jump at once while [`Ticking`] is held.
pub const TICK: Duration = Duration::from_millis(1);

/// A timer kept [`TICK`] ahead for as long as this is held, so a paused
/// clock moves at most `TICK` each time its runtime finds nothing to do.
///
/// Without it the clock jumps straight to the next timer whenever a look
/// at the sockets wakes no task. Bytes sent between two tasks of the runtime
/// are normally in the peer's socket by then, but bytes still on their way
/// (from another thread or process, or not yet delivered by a loaded
/// kernel) are not: a request in flight whose own timeout is the next timer
/// then times out at once (discovery's 5 s `/server_info` timeout, say),
/// and a test's `sleep(1 s)` ends before the poll it overlaps has had its
/// answer. With a tick pending the clock creeps instead, a millisecond per
/// look (a look takes a microsecond or two): a gap of microseconds costs a
/// few virtual milliseconds, not the whole timeout, and a wait on timers
/// alone still passes in a blink, a millisecond or two of real time per
/// virtual second. A wait of real milliseconds on another thread still
/// costs virtual seconds: that is the rule above.
pub struct Ticking(JoinHandle<()>);

/// See [`Ticking`]; call it at the start of a paused test.
pub fn ticking() -> Ticking {
    Ticking(tokio::spawn(async {
        loop {
            tokio::time::sleep(TICK).await;
        }
    }))
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.abort();
    }
}
