//! The memory budget for request bodies in flight: every body the guard
//! buffers holds a reservation of the bytes it has received until the
//! request is done, and a body whose reservation would exceed
//! `max_inflight_body_bytes` is shed with 503 and `Retry-After`
//! (`Reason::Overloaded`) instead of being buffered. Reserving what arrived,
//! not what was declared, and timing out stalled uploads (408) is what keeps
//! a few slow clients that declare huge bodies from spending the budget.
//! With `max_body_bytes` per body this bounds the buffered bodies whatever
//! the number of connections; parsing and counting a body costs a multiple of
//! its size on top, bounded separately by the counting pool's size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// How long a body may take to arrive.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeouts {
    /// The longest gap between two reads.
    pub idle: Duration,
    /// The whole body.
    pub total: Duration,
}

impl BodyTimeouts {
    pub fn of(limits: &crate::config::ClientLimits) -> Self {
        Self {
            idle: limits.body_idle_timeout,
            total: limits.body_read_timeout,
        }
    }
}

/// Reads a whole body under the per-body cap `max` (413 beyond it), the
/// shared budget (503 when it is spent) and `timeouts` (408). A declared
/// length over `max` is refused before a byte is read; otherwise the budget
/// holds what has arrived, not what was declared, so a client that
/// declares 32 MiB and sends a trickle holds a trickle.
pub async fn read_within<B>(
    mut body: B,
    max: usize,
    budget: &Arc<BodyBudget>,
    timeouts: BodyTimeouts,
) -> Result<(Bytes, Reservation), Reason>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let declared = body.size_hint().lower();
    if declared > max as u64 {
        return Err(Reason::BodyTooLarge { limit: max });
    }
    let deadline = tokio::time::Instant::now() + timeouts.total;
    let mut reservation = budget.reservation();
    let mut arrived = Arrived::Nothing;
    loop {
        let next = tokio::time::timeout_at(
            deadline.min(tokio::time::Instant::now() + timeouts.idle),
            body.frame(),
        );
        let frame = match next.await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) if tokio::time::Instant::now() >= deadline => {
                return Err(Reason::ClientTimeout("body_read_timeout_ms"))
            }
            Err(_) => return Err(Reason::ClientTimeout("body_idle_timeout_ms")),
        };
        let frame = frame.map_err(|e| Reason::InvalidRequest {
            message: format!("the request body could not be read: {e}"),
            param: None,
        })?;
        if let Ok(data) = frame.into_data() {
            let len = arrived.len() + data.len();
            if len > max {
                return Err(Reason::BodyTooLarge { limit: max });
            }
            if len > reservation.bytes() {
                reservation.grow(len - reservation.bytes())?;
            }
            arrived.push(data, declared);
        }
    }
    Ok((arrived.into_bytes(), reservation))
}

/// A body as it arrives. Most bodies come as one frame: hyper reads them
/// with their head and hands the body over as a slice of its read buffer,
/// which is kept as it is (a 139 kB chat was copied once more here, 1.7% of
/// the guard's CPU). A second frame starts a buffer of the body's own.
enum Arrived {
    Nothing,
    One(Bytes),
    Many(BytesMut),
}

impl Arrived {
    fn len(&self) -> usize {
        match self {
            Arrived::Nothing => 0,
            Arrived::One(b) => b.len(),
            Arrived::Many(b) => b.len(),
        }
    }

    fn push(&mut self, data: Bytes, declared: u64) {
        if data.is_empty() {
            return;
        }
        match self {
            Arrived::Nothing => *self = Arrived::One(data),
            Arrived::One(first) => {
                // Grown as bytes arrive: a declared length is only a promise.
                // Sized for both frames at once, so that a large first frame
                // is copied once (hyper hands over up to its read buffer).
                let start = (declared as usize).min(INITIAL_CAPACITY);
                let needed = first.len() + data.len();
                let capacity = if needed <= start {
                    start
                } else {
                    grown_capacity(start, needed, declared)
                };
                let mut buf = BytesMut::with_capacity(capacity);
                buf.extend_from_slice(first);
                append(&mut buf, &data, declared);
                *self = Arrived::Many(buf);
            }
            Arrived::Many(buf) => append(buf, &data, declared),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Arrived::Nothing => Bytes::new(),
            Arrived::One(b) => b,
            Arrived::Many(b) => b.freeze(),
        }
    }
}

/// `data` added to `buf`, which grows into a buffer of the size asked for
/// (`reserve` would double).
fn append(buf: &mut BytesMut, data: &[u8], declared: u64) {
    let needed = buf.len() + data.len();
    if needed > buf.capacity() {
        let mut grown = BytesMut::with_capacity(grown_capacity(buf.capacity(), needed, declared));
        grown.extend_from_slice(buf);
        *buf = grown;
    }
    buf.extend_from_slice(data);
}

/// The buffer a body starts with; it grows from there as bytes arrive.
const INITIAL_CAPACITY: usize = 64 * 1024;

/// The capacity a body's buffer grows to when `needed` bytes no longer fit
/// in `capacity`: double, or straight to the `declared` length once half of
/// it has arrived. Either way the buffer holds at most about twice what has
/// arrived, so a client that declares much and sends little still holds
/// little; but a body that arrives as declared is copied into a buffer of
/// its own size once, not again at each doubling (a 139 kB body was copied
/// at 64 and at 128 KiB, into 256 KiB).
fn grown_capacity(capacity: usize, needed: usize, declared: u64) -> usize {
    match usize::try_from(declared) {
        Ok(declared) if declared >= needed && needed.saturating_mul(2) >= declared => declared,
        _ => needed.max(capacity.saturating_mul(2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use http_body::Frame;
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;

    #[test]
    fn a_buffer_grows_to_the_declared_length_once_half_has_arrived() {
        let k = 1024;
        // Under half of the declared length: doubling, as with no length.
        assert_eq!(grown_capacity(64 * k, 65 * k, 139 * k as u64), 128 * k);
        assert_eq!(grown_capacity(64 * k, 65 * k, 0), 128 * k);
        // Half or more: the declared length, with no doubling past it.
        assert_eq!(grown_capacity(64 * k, 70 * k, 139 * k as u64), 139 * k);
        assert_eq!(grown_capacity(128 * k, 129 * k, 139 * k as u64), 139 * k);
        // More than declared (a chunked body says nothing; hyper refuses a
        // longer one): doubling, never short of what is needed.
        assert_eq!(grown_capacity(64 * k, 300 * k, 139 * k as u64), 300 * k);
        for (capacity, needed, declared) in [(1, 2, 3), (64 * k, 65 * k, 1 << 40), (10, 11, 21)] {
            let grown = grown_capacity(capacity, needed, declared);
            assert!(grown >= needed);
            assert!(
                grown <= 2 * needed.max(capacity),
                "{capacity} {needed} {declared}"
            );
        }
    }

    /// A body with a declared length, arriving in these frames.
    fn declared(frames: Vec<Bytes>) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        Declared {
            length: frames.iter().map(|f| f.len() as u64).sum(),
            frames: frames.into(),
            then_stall: false,
        }
    }

    /// A body read through every way its buffer grows (doubling, then
    /// straight to its declared length) comes out as it was sent.
    #[tokio::test]
    async fn a_declared_body_arrives_whole_through_its_buffers_growth() {
        let body: Vec<u8> = (0..139_000u32).map(|i| (i % 251) as u8).collect();
        let body = Bytes::from(body);
        let k = 1024;
        let frames = [16 * k, 16 * k, 40 * k, 10 * k, 30 * k]
            .iter()
            .scan(0, |at, &len| {
                let frame = body.slice(*at..*at + len);
                *at += len;
                Some(frame)
            })
            .chain([body.slice(112 * k..)])
            .collect();
        let budget = BodyBudget::new(1 << 20);
        let (read, _held) = read_within(declared(frames), 1 << 20, &budget, T)
            .await
            .unwrap();
        assert_eq!(read, body);
        assert_eq!(budget.used(), body.len());
    }

    /// A body that arrives as one frame (most do: hyper reads it with its
    /// head) is the frame itself, not a copy; empty frames change nothing.
    #[tokio::test]
    async fn a_body_in_one_frame_is_kept_without_a_copy() {
        let body = Bytes::from(vec![b'x'; 139_000]);
        let budget = BodyBudget::new(1 << 20);
        let frames = vec![Bytes::new(), body.clone(), Bytes::new()];
        let (read, _held) = read_within(declared(frames), 1 << 20, &budget, T)
            .await
            .unwrap();
        assert_eq!(read, body);
        assert_eq!(read.as_ptr(), body.as_ptr(), "the frame's own bytes");
        assert_eq!(budget.used(), body.len());
        // Two frames are joined into a buffer of their own.
        let (read, _held) = read_within(
            declared(vec![body.slice(..1000), body.slice(1000..)]),
            1 << 20,
            &budget,
            T,
        )
        .await
        .unwrap();
        assert_eq!(read, body);
        assert_ne!(read.as_ptr(), body.as_ptr());
    }

    /// A large first frame and a second one: one buffer of the size the two
    /// ask for, not a start-sized one grown for the first and again for the
    /// second (which copied the first frame twice).
    #[test]
    fn a_second_frame_joins_the_first_in_one_buffer() {
        let k = 1024;
        let first = Bytes::from(vec![b'a'; 300 * k]);
        let second = Bytes::from(vec![b'b'; 10 * k]);
        let mut arrived = Arrived::Nothing;
        arrived.push(first.clone(), 1 << 20);
        arrived.push(second.clone(), 1 << 20);
        let Arrived::Many(buf) = &arrived else {
            panic!("two frames are joined");
        };
        assert_eq!(buf.capacity(), 310 * k);
        assert_eq!(arrived.into_bytes(), [first, second].concat());
        // Small frames start at the initial capacity, as before.
        let mut arrived = Arrived::Nothing;
        arrived.push(Bytes::from_static(b"{\"a\""), 1 << 20);
        arrived.push(Bytes::from_static(b":1}"), 1 << 20);
        let Arrived::Many(buf) = &arrived else {
            panic!("two frames are joined");
        };
        assert_eq!(buf.capacity(), INITIAL_CAPACITY);
        assert_eq!(&arrived.into_bytes()[..], b"{\"a\":1}");
    }

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    const T: BodyTimeouts = BodyTimeouts {
        idle: Duration::from_secs(10),
        total: Duration::from_secs(60),
    };

    /// A body that declares `declared` bytes, sends `sent`, then stalls.
    fn stalled(
        declared: u64,
        sent: &'static [u8],
    ) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        Declared {
            length: declared,
            frames: [Bytes::from_static(sent)].into(),
            then_stall: true,
        }
    }

    /// A body with a declared length and the frames it sends; when they
    /// run out it ends, or stalls.
    struct Declared {
        length: u64,
        frames: std::collections::VecDeque<Bytes>,
        then_stall: bool,
    }

    impl Body for Declared {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.frames.pop_front() {
                Some(b) => std::task::Poll::Ready(Some(Ok(Frame::data(b)))),
                None if self.then_stall => std::task::Poll::Pending,
                None => std::task::Poll::Ready(None),
            }
        }
        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.length)
        }
    }

    /// On tokio's paused clock: the body timeouts are tokio timers, so the
    /// 20 ms look and the 50 ms timeouts are virtual and keep their order
    /// however loaded the machine.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_upload_holds_what_it_sent_and_times_out() {
        let budget = BodyBudget::new(1 << 20);
        let short = BodyTimeouts {
            idle: Duration::from_millis(50),
            total: Duration::from_secs(60),
        };
        let reading = tokio::spawn({
            let budget = budget.clone();
            async move { read_within(stalled(1 << 20, b"abc"), 1 << 20, &budget, short).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(budget.used(), 3, "the declared length is not reserved");
        let err = reading.await.unwrap().unwrap_err();
        assert_eq!(err.label(), "client_timeout");
        assert_eq!(err.status(), 408);
        assert!(err.closes_connection());
        assert_eq!(budget.used(), 0, "a timed-out body gives its bytes back");
        // The whole-body deadline holds even when bytes keep trickling.
        let whole = BodyTimeouts {
            idle: Duration::from_secs(10),
            total: Duration::from_millis(50),
        };
        let err = read_within(stalled(10, b"a"), 100, &budget, whole)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the request body did not arrive in time (body_read_timeout_ms)"
        );
    }

    #[tokio::test]
    async fn bodies_hold_their_bytes_until_dropped() {
        let budget = BodyBudget::new(10);
        let (a, ra) = read_within(Full::new(Bytes::from_static(b"123456")), 100, &budget, T)
            .await
            .unwrap();
        assert_eq!(a, "123456");
        assert_eq!(budget.used(), 6);
        // A body that does not fit is refused once its bytes arrive.
        let err = read_within(Full::new(Bytes::from_static(b"12345")), 100, &budget, T)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "overloaded");
        assert_eq!(err.retry_after(), Some(1));
        // A chunked one is refused once its bytes pass the budget.
        let err = read_within(chunks(&[b"12", b"345"]), 100, &budget, T)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "overloaded");
        assert_eq!(budget.used(), 6, "a refused body gives its bytes back");
        drop(ra);
        assert_eq!(budget.used(), 0);
        let (b, _rb) = read_within(chunks(&[b"12", b"345"]), 100, &budget, T)
            .await
            .unwrap();
        assert_eq!(b, "12345");
        assert_eq!(budget.used(), 5);
        // The per-body cap still answers 413, a declared length before reading.
        let err = read_within(Full::new(Bytes::from_static(b"12345")), 4, &budget, T)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "body_too_large");
        let err = read_within(chunks(&[b"12", b"345"]), 4, &budget, T)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "body_too_large");
    }
}
