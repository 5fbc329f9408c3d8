//! The memory budget for request bodies in flight: every body the guard
//! buffers holds a reservation of its bytes until the request is done, and a
//! body whose reservation would exceed `max_inflight_body_bytes` is shed with
//! 503 and `Retry-After` (`Reason::Overloaded`) instead of being buffered.
//! With `max_body_bytes` per body this bounds the buffered bodies whatever
//! the number of connections; parsing and counting a body costs a multiple of
//! its size on top, bounded separately by the counting pool's size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

use crate::errors::Reason;

/// Bytes of request bodies the guard may hold at once.
#[derive(Debug)]
pub struct BodyBudget {
    used: AtomicUsize,
    capacity: usize,
}

impl BodyBudget {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            capacity,
        })
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// An empty reservation, grown as bytes arrive.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

/// Bytes held against the budget, given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Reservation {
    /// Reserves `more` bytes; `Overloaded` (nothing reserved) when the
    /// budget cannot hold them.
    pub fn grow(&mut self, more: usize) -> Result<(), Reason> {
        let cap = self.budget.capacity;
        self.budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|n| *n <= cap)
            })
            .map_err(|_| Reason::Overloaded)?;
        self.bytes += more;
        Ok(())
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reads a whole body under the per-body cap `max` (413 beyond it) and the
/// shared budget (503 when it is spent). The declared length is reserved
/// up front, so a body that cannot fit is refused before it is read; bytes
/// beyond the declaration (chunked bodies) are reserved as they arrive.
pub async fn read_within<B>(
    mut body: B,
    max: usize,
    budget: &Arc<BodyBudget>,
) -> Result<(Bytes, Reservation), Reason>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let declared = body.size_hint().lower();
    if declared > max as u64 {
        return Err(Reason::BodyTooLarge { limit: max });
    }
    let declared = declared as usize;
    let mut reservation = budget.reservation();
    reservation.grow(declared)?;
    let mut buf = BytesMut::with_capacity(declared);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Reason::InvalidRequest {
            message: format!("the request body could not be read: {e}"),
            param: None,
        })?;
        if let Ok(data) = frame.into_data() {
            let len = buf.len() + data.len();
            if len > max {
                return Err(Reason::BodyTooLarge { limit: max });
            }
            if len > reservation.bytes() {
                reservation.grow(len - reservation.bytes())?;
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok((buf.freeze(), reservation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn bodies_hold_their_bytes_until_dropped() {
        let budget = BodyBudget::new(10);
        let (a, ra) = read_within(Full::new(Bytes::from_static(b"123456")), 100, &budget)
            .await
            .unwrap();
        assert_eq!(a, "123456");
        assert_eq!(budget.used(), 6);
        // A declared body that does not fit is refused before reading.
        let err = read_within(Full::new(Bytes::from_static(b"12345")), 100, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "overloaded");
        assert_eq!(err.retry_after(), Some(1));
        // A chunked one is refused once its bytes pass the budget.
        let err = read_within(chunks(&[b"12", b"345"]), 100, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "overloaded");
        assert_eq!(budget.used(), 6, "a refused body gives its bytes back");
        drop(ra);
        assert_eq!(budget.used(), 0);
        let (b, _rb) = read_within(chunks(&[b"12", b"345"]), 100, &budget)
            .await
            .unwrap();
        assert_eq!(b, "12345");
        assert_eq!(budget.used(), 5);
        // The per-body cap still answers 413, a declared length before reading.
        let err = read_within(Full::new(Bytes::from_static(b"12345")), 4, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "body_too_large");
        let err = read_within(chunks(&[b"12", b"345"]), 4, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "body_too_large");
    }
}
