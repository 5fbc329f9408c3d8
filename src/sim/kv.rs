//! The paged KV pool the two workers share, keyed by `bootstrap_room`.
//!
//! One process hosts both workers, so "transferring KV" is writing token ids
//! into the slots of pages that decode reserved. What matters for the leak is
//! modelled as real allocators do it, and nothing more:
//!
//! * a page is `page_size` slots; a freed page keeps whatever it last held;
//! * the free list is a stack (LIFO): the pages freed last, another tenant's,
//!   are the first handed out again;
//! * decode reserves pages for the prompt length *it* computed before prefill
//!   sends anything, and later reads every slot of that length as its context.
//!
//! Nothing else (attention, layers, heads) is simulated: a slot holds the token
//! id whose KV it would hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

/// Where a room is in the handoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Prefill arrived first; decode has reserved nothing yet.
    Waiting,
    /// Decode reserved pages and waits for the transfer.
    Allocated,
    /// Prefill wrote its KV and marked the transfer complete.
    Transferred,
    /// Prefill refused the request; decode must not generate.
    Aborted(String),
}

/// Why the pool could not serve a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("{0}")]
    Aborted(String),
    #[error("Request exceeds the maximum number of tokens: {len} > {capacity}")]
    TooLong { len: usize, capacity: usize },
    #[error("no free KV pages within the time limit (KV cache pool is full)")]
    PoolFull,
    #[error("bootstrap room {0} is already in use")]
    RoomInUse(u64),
    #[error("KV transfer for bootstrap room {0} did not complete in time")]
    TransferTimeout(u64),
}

struct Room {
    phase: watch::Sender<Phase>,
    /// Pages decode reserved, in order; empty until decode registers.
    pages: Vec<usize>,
    /// The prompt length decode reserved for.
    len: usize,
    /// For rooms decode never claims (a prefill refusal nobody waits for).
    created: Instant,
}

struct State {
    /// `pages * page_size` slots, one token id each.
    slots: Vec<u32>,
    /// Free page indices; the top of the stack is handed out first.
    free: Vec<usize>,
    rooms: HashMap<u64, Room>,
}

/// The shared pool. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct KvPool {
    inner: Arc<Inner>,
}

struct Inner {
    page_size: usize,
    pages: usize,
    /// Rooms nobody claims are dropped after this long.
    room_ttl: Duration,
    state: Mutex<State>,
    /// Signalled whenever pages return to the free list.
    freed: Notify,
}

impl KvPool {
    /// A pool of `pages` pages of `page_size` slots, every slot holding `blank`.
    pub fn new(pages: usize, page_size: usize, blank: u32, room_ttl: Duration) -> Self {
        assert!(
            pages > 0 && page_size > 0,
            "an empty KV pool serves nothing"
        );
        Self {
            inner: Arc::new(Inner {
                page_size,
                pages,
                room_ttl,
                state: Mutex::new(State {
                    slots: vec![blank; pages * page_size],
                    // Reversed so the first allocation takes page 0, 1, ...
                    free: (0..pages).rev().collect(),
                    rooms: HashMap::new(),
                }),
                freed: Notify::new(),
            }),
        }
    }

    /// Token slots in the pool (SGLang's `max_total_num_tokens`).
    pub fn capacity(&self) -> usize {
        self.inner.pages * self.inner.page_size
    }

    pub fn page_size(&self) -> usize {
        self.inner.page_size
    }

    /// Pages on the free list now.
    pub fn free_pages(&self) -> usize {
        self.inner.lock().free.len()
    }

    /// Handoffs in progress (rooms either side has opened).
    pub fn rooms(&self) -> usize {
        self.inner.lock().rooms.len()
    }

    /// Decode's side: reserve `ceil(len / page_size)` pages for `room`,
    /// waiting up to `timeout` for pages to come free. The reservation lasts
    /// until the returned [`Reservation`] is dropped.
    pub async fn reserve(
        &self,
        room: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<Reservation, KvError> {
        let capacity = self.capacity();
        if len > capacity {
            return Err(KvError::TooLong { len, capacity });
        }
        let need = len.div_ceil(self.inner.page_size).max(1);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a free between the check and
            // the wait is not missed.
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.inner.lock();
                state.sweep(self.inner.room_ttl);
                let phase = state.rooms.get(&room).map(|r| r.phase.borrow().clone());
                match phase {
                    Some(Phase::Aborted(message)) => {
                        state.rooms.remove(&room);
                        return Err(KvError::Aborted(message));
                    }
                    Some(Phase::Allocated | Phase::Transferred) => {
                        return Err(KvError::RoomInUse(room))
                    }
                    Some(Phase::Waiting) | None => {}
                }
                if state.free.len() >= need {
                    let at = state.free.len() - need;
                    let mut pages = state.free.split_off(at);
                    pages.reverse(); // top of the stack first
                    let entry = state.rooms.entry(room).or_insert_with(Room::new);
                    entry.pages = pages;
                    entry.len = len;
                    entry.phase.send_replace(Phase::Allocated);
                    let phase = entry.phase.subscribe();
                    return Ok(Reservation {
                        pool: self.clone(),
                        room,
                        phase,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(KvError::PoolFull);
            }
        }
    }

    /// Prefill's side: wait up to `timeout` for decode to reserve `room`,
    /// then write `tokens` into its slots from slot 0 and mark the transfer
    /// complete. Slots past `tokens.len()` are left as they were.
    pub async fn transfer(
        &self,
        room: u64,
        tokens: &[u32],
        timeout: Duration,
    ) -> Result<(), KvError> {
        let mut phase = {
            let mut state = self.inner.lock();
            state.sweep(self.inner.room_ttl);
            state
                .rooms
                .entry(room)
                .or_insert_with(Room::new)
                .phase
                .subscribe()
        };
        // The watch value is cloned at once: holding its read guard while
        // the pool's lock is taken would deadlock against `send_replace`.
        let ready =
            match tokio::time::timeout(timeout, phase.wait_for(|p| *p != Phase::Waiting)).await {
                Ok(Ok(p)) => Some(p.clone()),
                _ => None,
            };
        let mut state = self.inner.lock();
        let Some(entry) = state.rooms.get(&room) else {
            return Err(KvError::TransferTimeout(room));
        };
        match ready {
            Some(Phase::Allocated) => {}
            Some(Phase::Aborted(message)) => return Err(KvError::Aborted(message)),
            Some(_) => return Err(KvError::RoomInUse(room)),
            None => {
                if entry.pages.is_empty() {
                    state.rooms.remove(&room);
                }
                return Err(KvError::TransferTimeout(room));
            }
        }
        let page_size = self.inner.page_size;
        let (pages, len) = (entry.pages.clone(), entry.len);
        for (i, &token) in tokens.iter().take(len).enumerate() {
            let slot = pages[i / page_size] * page_size + i % page_size;
            state.slots[slot] = token;
        }
        if let Some(entry) = state.rooms.get(&room) {
            entry.phase.send_replace(Phase::Transferred);
        }
        Ok(())
    }

    /// Prefill's side, fixed behaviour: tell decode the request was refused,
    /// whether or not decode has reserved the room yet.
    pub fn abort(&self, room: u64, message: &str) {
        let mut state = self.inner.lock();
        state.sweep(self.inner.room_ttl);
        let entry = state.rooms.entry(room).or_insert_with(Room::new);
        entry.phase.send_replace(Phase::Aborted(message.to_owned()));
    }

    fn release(&self, room: u64) {
        let mut state = self.inner.lock();
        if let Some(entry) = state.rooms.remove(&room) {
            // Pushed in reverse so the next reservation gets them back in the
            // same order: its slot i lands on this request's slot i.
            state.free.extend(entry.pages.into_iter().rev());
        }
        drop(state);
        self.inner.freed.notify_waiters();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Room {
    fn new() -> Self {
        Self {
            phase: watch::channel(Phase::Waiting).0,
            pages: Vec::new(),
            len: 0,
            created: Instant::now(),
        }
    }
}

impl State {
    /// Drops rooms decode never claimed (they hold no pages) once stale.
    fn sweep(&mut self, ttl: Duration) {
        self.rooms
            .retain(|_, r| !r.pages.is_empty() || r.created.elapsed() < ttl);
    }
}

/// Decode's pages for one request; returned to the free list on drop (the
/// response finished, failed, or its client went away).
pub struct Reservation {
    pool: KvPool,
    room: u64,
    phase: watch::Receiver<Phase>,
}

impl Reservation {
    /// Waits up to `timeout` for prefill, then reads the context decode
    /// generates from: every slot of the reserved length, whatever it holds.
    pub async fn context(&mut self, timeout: Duration) -> Result<Vec<u32>, KvError> {
        let phase = match tokio::time::timeout(
            timeout,
            self.phase
                .wait_for(|p| matches!(p, Phase::Transferred | Phase::Aborted(_))),
        )
        .await
        {
            Ok(Ok(p)) => p.clone(),
            _ => return Err(KvError::TransferTimeout(self.room)),
        };
        if let Phase::Aborted(message) = phase {
            return Err(KvError::Aborted(message));
        }
        let state = self.pool.inner.lock();
        let entry = &state.rooms[&self.room];
        let page_size = self.pool.inner.page_size;
        Ok((0..entry.len)
            .map(|i| state.slots[entry.pages[i / page_size] * page_size + i % page_size])
            .collect())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.release(self.room);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_full_transfer_reads_back_the_prompt() {
        let pool = KvPool::new(4, 2, 0, T);
        let mut r = pool.reserve(7, 3, T).await.unwrap();
        pool.transfer(7, &[5, 6, 7], T).await.unwrap();
        assert_eq!(r.context(T).await.unwrap(), [5, 6, 7]);
    }

    #[tokio::test]
    async fn a_one_token_transfer_leaves_the_previous_tenants_tokens() {
        let pool = KvPool::new(4, 2, 0, T);
        let mut a = pool.reserve(1, 4, T).await.unwrap();
        pool.transfer(1, &[11, 12, 13, 14], T).await.unwrap();
        a.context(T).await.unwrap();
        drop(a);
        let mut b = pool.reserve(2, 4, T).await.unwrap();
        pool.transfer(2, &[0], T).await.unwrap();
        assert_eq!(b.context(T).await.unwrap(), [0, 12, 13, 14]);
    }

    #[tokio::test]
    async fn prefill_may_arrive_first_and_an_abort_reaches_decode() {
        let pool = KvPool::new(4, 2, 0, T);
        let p = pool.clone();
        let early = tokio::spawn(async move { p.transfer(3, &[9], T).await });
        tokio::task::yield_now().await;
        let mut r = pool.reserve(3, 1, T).await.unwrap();
        early.await.unwrap().unwrap();
        assert_eq!(r.context(T).await.unwrap(), [9]);
        pool.abort(4, "refused");
        assert_eq!(
            pool.reserve(4, 1, T).await.err(),
            Some(KvError::Aborted("refused".into()))
        );
    }

    /// Full transfers never mix: under any interleaving of many concurrent
    /// handoffs on a pool too small to hold them all at once, every request
    /// reads back exactly its own tokens. Only a short transfer leaks.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_full_transfers_read_only_their_own_tokens() {
        let pool = KvPool::new(64, 4, 0, T);
        let mut tasks = Vec::new();
        for room in 0..400u64 {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                let len = 1 + (room as usize * 7) % 60;
                let tokens: Vec<u32> = (0..len as u32).map(|i| room as u32 * 1000 + i).collect();
                let p = pool.clone();
                let sent = tokens.clone();
                let prefill = tokio::spawn(async move { p.transfer(room, &sent, T).await });
                let mut r = pool.reserve(room, len, T).await.unwrap();
                let context = r.context(T).await.unwrap();
                prefill.await.unwrap().unwrap();
                assert_eq!(context, tokens, "room {room}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(pool.free_pages(), 64);
        assert_eq!(pool.rooms(), 0);
    }

    /// On a paused clock: the 10 ms wait for pages is virtual.
    #[tokio::test(start_paused = true)]
    async fn reservations_wait_for_pages_and_give_up() {
        let pool = KvPool::new(2, 2, 0, T);
        let held = pool.reserve(1, 4, T).await.unwrap();
        assert_eq!(
            pool.reserve(2, 1, Duration::from_millis(10)).await.err(),
            Some(KvError::PoolFull)
        );
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.reserve(2, 1, T).await.map(|_| ()) });
        drop(held);
        waiter.await.unwrap().unwrap();
        assert_eq!(pool.free_pages(), 2);
        assert!(matches!(
            pool.reserve(3, 5, T).await,
            Err(KvError::TooLong { .. })
        ));
    }
}
