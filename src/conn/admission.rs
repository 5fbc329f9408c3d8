//! A slot among a listener's connections, taken at accept: the limits
//! `max_connections` and `max_connections_per_client`. The count lives here
//! and outlives every reload (the server holds it, not the `App`); the
//! metrics only read it at scrape time (`prefill_guard_open_connections`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The connections open on the proxy and authz listeners, in total and per
/// peer address, for their limits (`max_connections`,
/// `max_connections_per_client`). Peer counts are never exported: addresses
/// are unbounded label values.
#[derive(Debug, Default)]
pub struct Connections {
    open: [AtomicI64; 2],
    /// The authz listener is bound (`authz_listen`): only then is its gauge
    /// exported, so a dashboard shows no listener that does not exist.
    authz_bound: AtomicBool,
    per_peer: Mutex<HashMap<(usize, IpAddr), usize>>,
}

/// The listeners whose connections are limited.
pub const LISTENERS: [&str; 2] = ["proxy", "authz"];

impl Connections {
    /// Takes a slot for a connection from `peer` on `listener` (an index
    /// into [`LISTENERS`]), or names the limit it would pass.
    pub fn admit(
        self: &Arc<Self>,
        listener: usize,
        peer: IpAddr,
        max: usize,
        max_per_peer: usize,
    ) -> Result<ConnectionSlot, &'static str> {
        let mut per_peer = lock(&self.per_peer);
        if self.open[listener].load(Ordering::Relaxed) >= max as i64 {
            return Err("max_connections");
        }
        let mine = per_peer.entry((listener, peer)).or_default();
        if max_per_peer > 0 && *mine >= max_per_peer {
            return Err("max_connections_per_client");
        }
        *mine += 1;
        self.open[listener].fetch_add(1, Ordering::Relaxed);
        Ok(ConnectionSlot {
            ledger: self.clone(),
            listener,
            peer,
        })
    }

    /// The connections open on each listener, for the metrics.
    pub fn open(&self) -> Vec<(&'static str, i64)> {
        let authz = self.authz_bound.load(Ordering::Relaxed);
        LISTENERS
            .iter()
            .zip(&self.open)
            .filter(|(l, _)| **l != "authz" || authz)
            .map(|(l, n)| (*l, n.load(Ordering::Relaxed)))
            .collect()
    }

    /// The authorization listener is bound: its connections are exported.
    pub fn authz_bound(&self) {
        self.authz_bound.store(true, Ordering::Relaxed);
    }
}

/// One open connection, given back on drop.
pub struct ConnectionSlot {
    ledger: Arc<Connections>,
    listener: usize,
    peer: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut per_peer = lock(&self.ledger.per_peer);
        let key = (self.listener, self.peer);
        if let Some(n) = per_peer.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                per_peer.remove(&key);
            }
        }
        self.ledger.open[self.listener].fetch_sub(1, Ordering::Relaxed);
    }
}

/// The counts stay consistent under a panic elsewhere: each update is a
/// lookup and an add, never left half-written, so a poisoned lock is used as is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No gauge for a listener that is not bound (`authz_listen` unset).
    #[test]
    fn the_authz_listener_is_listed_once_bound() {
        let c = Connections::default();
        assert_eq!(c.open(), vec![("proxy", 0)]);
        c.authz_bound();
        assert_eq!(c.open(), vec![("proxy", 0), ("authz", 0)]);
    }

    #[test]
    fn slots_are_limited_in_total_and_per_peer_and_given_back() {
        let c = Arc::new(Connections::default());
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let first = c.admit(0, a, 3, 1).unwrap();
        assert_eq!(
            c.admit(0, a, 3, 1).err(),
            Some("max_connections_per_client")
        );
        // Per listener: the same peer may hold a slot on the other one.
        let other = c.admit(1, a, 3, 1).unwrap();
        let second = c.admit(0, b, 2, 0).unwrap();
        assert_eq!(c.admit(0, b, 2, 0).err(), Some("max_connections"));
        assert_eq!(c.open()[0], ("proxy", 2));
        drop((first, second, other));
        assert_eq!(c.open()[0], ("proxy", 0));
        assert!(lock(&c.per_peer).is_empty());
    }
}
