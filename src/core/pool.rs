//! The counting pool: tokenization is CPU work, kept off the event loops
//! and bounded, so a flood of huge prompts sheds load instead of queueing it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::errors::Reason;

/// Tokenization is CPU work: it runs on blocking threads, at most `workers`
/// at once, and at most `queue` more may wait. Beyond that the guard sheds
/// load with 503 instead of queueing without bound.
///
/// A place in the queue is not a promise either: a request that waited
/// `max_wait` for a thread is shed too. Under a flood of huge prompts a full
/// queue otherwise means minutes of latency for everyone admitted.
pub(super) struct CountPool {
    running: Arc<Semaphore>,
    admitted: Arc<AtomicUsize>,
    capacity: usize,
    pub(super) max_wait: Duration,
}

impl CountPool {
    pub(super) fn new(workers: usize, queue: usize) -> Self {
        Self {
            running: Arc::new(Semaphore::new(workers.max(1))),
            admitted: Arc::new(AtomicUsize::new(0)),
            capacity: workers.max(1) + queue,
            max_wait: Duration::from_secs(10),
        }
    }

    pub(super) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Reason> {
        let _slot = Admission::try_new(&self.admitted, self.capacity).ok_or(Reason::Overloaded)?;
        let permit = tokio::time::timeout(self.max_wait, self.running.clone().acquire_owned())
            .await
            .map_err(|_| Reason::Overloaded)?
            .map_err(|_| Reason::Overloaded)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            lowered_priority();
            work()
        })
        .await
        .map_err(|e| Reason::Internal(format!("counting thread failed: {e}")))
    }
}

/// Lowers the priority of the blocking thread running a count, once per
/// thread (`count::fast::yield_to_io`).
fn lowered_priority() {
    thread_local!(static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    LOWERED.with(|lowered| {
        if !lowered.replace(true) {
            crate::count::fast::yield_to_io();
        }
    });
}

/// A place in the pool's admission count, given back on drop (also when the
/// client goes away while waiting).
struct Admission(Arc<AtomicUsize>);

impl Admission {
    fn try_new(admitted: &Arc<AtomicUsize>, capacity: usize) -> Option<Self> {
        admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < capacity).then_some(n + 1)
            })
            .ok()
            .map(|_| Admission(admitted.clone()))
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until `n` requests are admitted; a pool that never admits them
    /// fails the test instead of hanging it.
    async fn admitted(pool: &CountPool, n: usize) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while pool.admitted.load(Ordering::Acquire) < n {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{n} requests never admitted");
    }

    #[tokio::test]
    async fn pool_sheds_beyond_its_capacity() {
        let pool = Arc::new(CountPool::new(1, 1));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let mut held = Vec::new();
        for _ in 0..2 {
            let (pool, rx) = (pool.clone(), rx.clone());
            held.push(tokio::spawn(async move {
                pool.run(move || rx.lock().unwrap().recv().ok()).await
            }));
        }
        // Wait until both are admitted (one running, one queued).
        admitted(&pool, 2).await;
        assert!(matches!(pool.run(|| ()).await, Err(Reason::Overloaded)));
        tx.send(()).unwrap();
        tx.send(()).unwrap();
        for h in held {
            assert!(h.await.unwrap().is_ok());
        }
        assert!(pool.run(|| ()).await.is_ok());
    }

    /// On tokio's paused clock, moved by hand: the busy count is blocking
    /// work, and a paused runtime does not move its clock on its own while
    /// blocking work runs (it could finish at any real moment). `advance`
    /// passes exactly the wait, however slow the machine.
    #[tokio::test(start_paused = true)]
    async fn a_request_waiting_too_long_for_a_thread_is_shed() {
        let mut pool = CountPool::new(1, 8);
        pool.max_wait = Duration::from_millis(50);
        let pool = Arc::new(pool);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let busy = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(move || rx.recv().ok()).await })
        };
        admitted(&pool, 1).await;
        // Room in the queue, but the only thread stays busy past the wait.
        let waiting = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(|| ()).await })
        };
        // Once admitted it waits for the thread: its `max_wait` started in
        // the poll that admitted it, so `advance` cannot come before it.
        admitted(&pool, 2).await;
        tokio::time::advance(pool.max_wait).await;
        assert!(matches!(waiting.await.unwrap(), Err(Reason::Overloaded)));
        tx.send(()).unwrap();
        assert!(busy.await.unwrap().is_ok());
        assert!(
            pool.run(|| ()).await.is_ok(),
            "served once a thread is free"
        );
    }
}
