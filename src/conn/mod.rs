//! What one client connection may take of the guard besides its requests'
//! bodies (`budget.rs`; the HTTP framing it reads in `framing.rs`): a slot
//! among the listener's connections (`admission.rs`), time to send a request
//! head, and time spent idle between requests.
//!
//! hyper's own `header_read_timeout` starts whenever it waits for a head,
//! idle keep-alive included, so it cannot give an idle connection longer
//! than a slow head. The guard keeps both apart instead, as nginx does
//! (`client_header_timeout`, `keepalive_timeout`): a watchdog per
//! connection reads the sniffer (is a head partly received, and since
//! when?) and the connection's requests in flight (is a response still
//! being sent?) and closes the connection when the phase it is in has
//! lasted too long. A connection with a request in flight is never closed
//! here: its body has its own timeouts, and a long SSE answer is not idle.
//!
//! Every time here is read from tokio's clock (`tokio::time::Instant`, the
//! sniffer's `head_started` too), the clock the watchdog sleeps on. Outside
//! a test that is the monotonic clock `std::time::Instant` reads. On a
//! test's paused clock (`tokio::time::pause`) it is virtual, and so is
//! every phase here: a deadline read from `std::time::Instant` would pass
//! only in real time, which a paused runtime's sleeps do not wait for, and
//! the watchdog would spin until it did.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

pub mod admission;
pub mod budget;
pub mod framing;

use crate::config::ClientLimits;

/// Why the watchdog closed a connection (the `phase` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A request head took longer than `header_read_timeout_ms` (or a new
    /// connection sent none in that time).
    Head,
    /// No request for `keepalive_idle_timeout_ms` after the last one.
    Idle,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Head => "head",
            Phase::Idle => "idle",
        }
    }
}

/// Requests in flight on one connection, and since when it has had none.
#[derive(Clone)]
pub struct Activity(Arc<Mutex<State>>);

struct State {
    in_flight: usize,
    /// When the connection last became quiet (accept, or the end of its
    /// last response).
    quiet_since: Instant,
    /// Requests the connection has carried.
    served: u64,
}

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(State {
            in_flight: 0,
            quiet_since: Instant::now(),
            served: 0,
        })))
    }
}

impl Activity {
    /// Marks a request in flight until the token is dropped (with its
    /// response body, for a streamed answer).
    pub fn busy(&self) -> Busy {
        let mut s = self.lock();
        s.in_flight += 1;
        s.served += 1;
        Busy(self.0.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the connection's current phase runs out, and which phase it is;
    /// `None` while a request is in flight.
    fn deadline(
        &self,
        framing: &framing::Connection,
        limits: &ClientLimits,
    ) -> Option<(Instant, Phase)> {
        if let Some(started) = framing.head_started() {
            return Some((started + limits.header_read_timeout, Phase::Head));
        }
        let s = self.lock();
        match (s.in_flight, s.served) {
            (0, 0) => Some((s.quiet_since + limits.header_read_timeout, Phase::Head)),
            (0, _) => Some((s.quiet_since + limits.keepalive_idle_timeout, Phase::Idle)),
            _ => None,
        }
    }
}

/// See [`Activity::busy`].
pub struct Busy(Arc<Mutex<State>>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.in_flight -= 1;
        if s.in_flight == 0 {
            s.quiet_since = Instant::now();
        }
    }
}

/// Resolves when the connection has spent too long in its current phase.
/// It looks again at least every quarter of the shorter timeout, so a phase
/// that begins while it sleeps is caught within 1.25 × its timeout.
pub async fn watchdog(
    activity: Activity,
    framing: framing::Connection,
    limits: ClientLimits,
) -> Phase {
    let tick = (limits
        .header_read_timeout
        .min(limits.keepalive_idle_timeout)
        / 4)
    .max(Duration::from_millis(10));
    loop {
        let now = Instant::now();
        let wake = match activity.deadline(&framing, &limits) {
            Some((at, phase)) if at <= now => return phase,
            Some((at, _)) => at.min(now + tick),
            None => now + tick,
        };
        tokio::time::sleep_until(wake).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(head_ms: u64, idle_ms: u64) -> ClientLimits {
        ClientLimits {
            header_read_timeout: Duration::from_millis(head_ms),
            keepalive_idle_timeout: Duration::from_millis(idle_ms),
            ..ClientLimits::default()
        }
    }

    /// On tokio's paused clock, as the other timer tests here: the watchdog
    /// reads and sleeps on tokio's clock, so the timeouts are virtual and
    /// no slow machine can stretch them.
    #[tokio::test(start_paused = true)]
    async fn a_silent_new_connection_gets_the_head_timeout() {
        let started = Instant::now();
        let phase = watchdog(
            Activity::default(),
            framing::Connection::default(),
            limits(40, 5_000),
        )
        .await;
        assert_eq!(phase, Phase::Head);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_is_never_timed_out_and_idle_follows_it() {
        let activity = Activity::default();
        let busy = activity.busy();
        let dog = tokio::spawn(watchdog(
            activity.clone(),
            framing::Connection::default(),
            limits(20, 60),
        ));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !dog.is_finished(),
            "a response in flight keeps the connection"
        );
        drop(busy);
        assert_eq!(dog.await.unwrap(), Phase::Idle);
    }
}
