//! The decision core every adapter shares: inspect → count → policy.
//! The reverse proxy (and later ext_authz / ext_proc) only differ in how they
//! receive a body and how they answer the [`Decision`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;

use crate::count::{Clock, ModelCounter, Unit};
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
    /// refused batch this is the first unit that did not fit.
    pub tokens: Option<usize>,
    /// Every unit's count, for an allowed request.
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
        }
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
        d.tokens = counts.iter().copied().max();
        // `count` stops at the first unit that does not fit; report that one.
        if let Some(&last) = counts.last() {
            if let Err(e) = policy::check_unit(last, limit) {
                d.tokens = Some(last);
                return Err(e);
            }
        }
        d.unit_tokens = counts;
        Ok(json::canonical(&value))
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
    ) -> Result<Vec<usize>, Reason> {
        // Token ids and embeddings need no tokenizer: no reason to queue them.
        if units
            .iter()
            .all(|u| matches!(u, Unit::Ids(_) | Unit::Embeds(_)))
        {
            return count_units(&model.counter, &units, limit, self.clock);
        }
        let counter = model.counter.clone();
        let clock = self.clock;
        self.pool
            .run(move || count_units(&counter, &units, limit, clock))
            .await?
    }
}

fn count_units(
    counter: &ModelCounter,
    units: &[Unit],
    limit: usize,
    clock: Clock,
) -> Result<Vec<usize>, Reason> {
    let mut counts = Vec::with_capacity(units.len());
    for unit in units {
        let n = counter.count(unit, clock)?;
        counts.push(n);
        if n >= limit {
            break;
        }
    }
    Ok(counts)
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
struct CountPool {
    running: Arc<Semaphore>,
    admitted: Arc<AtomicUsize>,
    capacity: usize,
}

impl CountPool {
    fn new(workers: usize, queue: usize) -> Self {
        Self {
            running: Arc::new(Semaphore::new(workers.max(1))),
            admitted: Arc::new(AtomicUsize::new(0)),
            capacity: workers.max(1) + queue,
        }
    }

    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Reason> {
        let _slot = Admission::try_new(&self.admitted, self.capacity).ok_or(Reason::Overloaded)?;
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
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
}
