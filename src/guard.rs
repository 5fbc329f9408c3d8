//! The decision core every adapter shares: inspect → count → policy.
//! The reverse proxy (and later ext_authz / ext_proc) only differ in how they
//! receive a body and how they answer the [`Decision`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;

use crate::count::{Clock, CountMethod, CountPolicy, Counted, ModelCounter, Unit};
use crate::errors::Reason;
use crate::inspect::{self, json, Route};
use crate::policy::{self, Limits};

/// One served model.
pub struct Model {
    pub name: String,
    pub counter: Arc<ModelCounter>,
}

/// The verdict on one request, with what the metrics and the decision log need.
#[derive(Debug)]
pub struct Decision {
    pub route: Route,
    /// The served model the request was counted with, once known.
    pub model: Option<String>,
    /// The largest unit's token count, when counting got that far. For a
    /// refused batch this is the first unit that did not fit. Exact, or with
    /// `method == EarlyExit` a lower bound at or above the limit; `None` when
    /// the request was accepted by its upper bound (see `upper_bound`).
    pub tokens: Option<usize>,
    /// With `method == Bound`: the largest unit's upper bound (below the
    /// limit); the prompt was not tokenized, so there is no count.
    pub upper_bound: Option<usize>,
    /// How the request was decided: `EarlyExit` if the refusing unit stopped
    /// early, else `Bound` if any unit was decided by its bound, else `Exact`.
    /// `None` when counting did not run to a verdict.
    pub method: Option<CountMethod>,
    /// Every unit's count, for an allowed request (bounds for `Bound` units).
    pub unit_tokens: Vec<usize>,
    pub limit: Option<usize>,
    /// Time spent counting (queueing for a counting thread included).
    pub count_time: Duration,
    /// The canonical body to forward, or why not.
    pub verdict: Result<Bytes, Reason>,
}

pub struct Guard {
    models: Vec<Model>,
    limits: Arc<Limits>,
    pool: CountPool,
    clock: Clock,
    /// Never accept by the upper bound (`exact_counting`).
    exact_counting: bool,
}

impl Guard {
    pub fn new(
        models: Vec<Model>,
        limits: Arc<Limits>,
        workers: usize,
        queue: usize,
        clock: Clock,
    ) -> Self {
        assert!(!models.is_empty(), "the guard needs at least one model");
        Self {
            models,
            limits,
            pool: CountPool::new(workers, queue),
            clock,
            exact_counting: false,
        }
    }

    /// `exact_counting = true`: every prompt is tokenized (up to the limit),
    /// none accepted by its upper bound.
    pub fn with_exact_counting(mut self, exact: bool) -> Self {
        self.exact_counting = exact;
        self
    }

    /// Longest wait for a counting thread before the request is shed.
    pub fn with_queue_timeout(mut self, wait: Duration) -> Self {
        self.pool.max_wait = wait;
        self
    }

    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.models.iter().map(|m| m.name.as_str())
    }

    /// Decides on a request body for an inspected route. `content_type` is the
    /// request's `Content-Type` header, if any.
    pub async fn check(&self, route: Route, content_type: Option<&[u8]>, body: Bytes) -> Decision {
        let mut d = Decision {
            route,
            model: None,
            tokens: None,
            upper_bound: None,
            method: None,
            unit_tokens: Vec::new(),
            limit: None,
            count_time: Duration::ZERO,
            verdict: Err(Reason::Internal("undecided".into())),
        };
        d.verdict = self.decide(&mut d, content_type, body).await;
        d
    }

    async fn decide(
        &self,
        d: &mut Decision,
        content_type: Option<&[u8]>,
        body: Bytes,
    ) -> Result<Bytes, Reason> {
        require_json(content_type)?;
        let value = Arc::new(json::parse_strict(&body)?);
        let request = inspect::extract(d.route, value.clone())?;
        let model = self.select(request.model.as_deref())?;
        d.model = Some(model.name.clone());
        let limit = self
            .limits
            .get(&model.name)
            .ok_or_else(|| Reason::LimitUnknown(model.name.clone()))?;
        d.limit = Some(limit);

        let started = Instant::now();
        let counted = self.count(model, request.units, limit).await;
        d.count_time = started.elapsed();
        let counts = counted?;
        let method = overall_method(&counts);
        d.method = Some(method);
        let largest = counts.iter().map(|c| c.tokens).max();
        // A bound is not a count: metrics and logs get no token number then.
        if method == CountMethod::Bound {
            d.upper_bound = largest;
        } else {
            d.tokens = largest;
        }
        // `count` stops at the first unit that does not fit; report that one.
        if let Some(last) = counts.last() {
            if let Err(e) = policy::check_unit(last.tokens, limit) {
                d.tokens = Some(last.tokens);
                d.upper_bound = None;
                d.method = Some(last.method);
                return Err(match last.method {
                    CountMethod::EarlyExit => Reason::TooLongAtLeast {
                        tokens: last.tokens,
                        limit,
                    },
                    _ => e,
                });
            }
        }
        d.unit_tokens = counts.iter().map(|c| c.tokens).collect();
        Ok(json::canonical(&value, body.len()))
    }

    /// With one model, every request is counted with it whatever `model` says,
    /// as a single-model SGLang does; with several, `model` selects by served name.
    fn select(&self, requested: Option<&str>) -> Result<&Model, Reason> {
        if let [only] = self.models.as_slice() {
            return Ok(only);
        }
        let name = requested.ok_or_else(|| Reason::InvalidRequest {
            message: "`model` is required: this endpoint serves several models".into(),
            param: Some("model"),
        })?;
        self.models
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| Reason::UnknownModel(name.to_string()))
    }

    /// Counts units on the bounded pool, stopping at the first unit that does not fit.
    async fn count(
        &self,
        model: &Model,
        units: Vec<Unit>,
        limit: usize,
    ) -> Result<Vec<Counted>, Reason> {
        let policy = CountPolicy {
            limit: Some(limit),
            exact_only: self.exact_counting,
            parallel: true,
        };
        // Token ids and embeddings need no tokenizer: no reason to queue them.
        if units
            .iter()
            .all(|u| matches!(u, Unit::Ids(_) | Unit::Embeds(_)))
        {
            return count_units(&model.counter, &units, policy, self.clock);
        }
        let counter = model.counter.clone();
        let clock = self.clock;
        self.pool
            .run(move || count_units(&counter, &units, policy, clock))
            .await?
    }
}

/// Counts each unit against the limit, stopping after the first that does
/// not fit (each unit of a batch is its own sequence with its own limit).
pub fn count_units(
    counter: &ModelCounter,
    units: &[Unit],
    policy: CountPolicy,
    clock: Clock,
) -> Result<Vec<Counted>, Reason> {
    let mut counts = Vec::with_capacity(units.len());
    for unit in units {
        let c = counter.count_with(unit, clock, policy)?;
        counts.push(c);
        if policy.limit.is_some_and(|l| c.tokens >= l) {
            break;
        }
    }
    Ok(counts)
}

/// The request's method: the weakest claim any unit's number makes.
fn overall_method(counts: &[Counted]) -> CountMethod {
    let has = |m| counts.iter().any(|c| c.method == m);
    if has(CountMethod::EarlyExit) {
        CountMethod::EarlyExit
    } else if has(CountMethod::Bound) {
        CountMethod::Bound
    } else {
        CountMethod::Exact
    }
}

/// Only a body the guard parsed as JSON may be forwarded: SGLang's JSON routes
/// require `application/json` (parameters such as `charset` allowed).
fn require_json(content_type: Option<&[u8]>) -> Result<(), Reason> {
    let ok = content_type
        .and_then(|ct| std::str::from_utf8(ct).ok())
        .map(|ct| ct.split(';').next().unwrap_or("").trim())
        .is_some_and(|media| media.eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(Reason::UnsupportedMediaType(
            "requests to this route must be `Content-Type: application/json`".into(),
        ))
    }
}

/// Tokenization is CPU work: it runs on blocking threads, at most `workers`
/// at once, and at most `queue` more may wait. Beyond that the guard sheds
/// load with 503 instead of queueing without bound.
///
/// A place in the queue is not a promise either: a request that waited
/// `max_wait` for a thread is shed too. Under a flood of huge prompts a full
/// queue otherwise means minutes of latency for everyone admitted.
struct CountPool {
    running: Arc<Semaphore>,
    admitted: Arc<AtomicUsize>,
    capacity: usize,
    max_wait: Duration,
}

impl CountPool {
    fn new(workers: usize, queue: usize) -> Self {
        Self {
            running: Arc::new(Semaphore::new(workers.max(1))),
            admitted: Arc::new(AtomicUsize::new(0)),
            capacity: workers.max(1) + queue,
            max_wait: Duration::from_secs(10),
        }
    }

    async fn run<T: Send + 'static>(
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
            work()
        })
        .await
        .map_err(|e| Reason::Internal(format!("counting thread failed: {e}")))
    }
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

    #[test]
    fn content_type_must_be_json() {
        assert!(require_json(Some(b"application/json")).is_ok());
        assert!(require_json(Some(b"Application/JSON; charset=utf-8")).is_ok());
        for bad in [
            &b"text/plain"[..],
            b"application/x-json",
            b"application/jsonx",
            b"",
        ] {
            assert_eq!(
                require_json(Some(bad)).unwrap_err().label(),
                "unsupported_media_type"
            );
        }
        assert!(require_json(None).is_err());
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
        while pool.admitted.load(Ordering::Acquire) < 2 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(pool.run(|| ()).await, Err(Reason::Overloaded)));
        tx.send(()).unwrap();
        tx.send(()).unwrap();
        for h in held {
            assert!(h.await.unwrap().is_ok());
        }
        assert!(pool.run(|| ()).await.is_ok());
    }

    #[tokio::test]
    async fn a_request_waiting_too_long_for_a_thread_is_shed() {
        let mut pool = CountPool::new(1, 8);
        pool.max_wait = Duration::from_millis(50);
        let pool = Arc::new(pool);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let busy = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(move || rx.recv().ok()).await })
        };
        while pool.admitted.load(Ordering::Acquire) < 1 {
            tokio::task::yield_now().await;
        }
        // Room in the queue, but the only thread stays busy past the wait.
        assert!(matches!(pool.run(|| ()).await, Err(Reason::Overloaded)));
        tx.send(()).unwrap();
        assert!(busy.await.unwrap().is_ok());
        assert!(
            pool.run(|| ()).await.is_ok(),
            "served once a thread is free"
        );
    }
}
