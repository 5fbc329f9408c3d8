//! The body-level step: `Content-Type` → parse → extract → count → policy,
//! for one inspected route's body. Every adapter reaches it through
//! `Gate::check_body`, which hands it the request's [`Record`] and gets it
//! back filled in, with the verdict ([`Outcome`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt as _;

use crate::config::Readiness;
use crate::count::cache::{CacheScope, CountCache, Partition, Partitioning};
use crate::count::{Clock, CountMethod, CountPolicy, Counted, ModelCounter, Unit};
use crate::errors::Reason;
use crate::inspect::{self, json, Route};
use crate::policy::sample::Sampler;
use crate::policy::{self, Profiles};

use super::pool::CountPool;
use super::{Outcome, Record};

pub struct Guard {
    core: Core,
    pool: CountPool,
}

/// What deciding needs besides the pool; cheap to clone into a counting
/// thread, which decides large bodies whole.
#[derive(Clone)]
struct Core {
    /// The served model names, in configuration order.
    models: Arc<[String]>,
    /// Each model's limit and counter, read once per request.
    profiles: Arc<Profiles>,
    clock: Clock,
    /// Never accept by the upper bound (`exact_counting`).
    exact_counting: bool,
    /// Sampled count checks (`verify_sample_rate`), if on.
    sampler: Option<Arc<Sampler>>,
    /// Remembered piece counts of long prompts (`count_cache_bytes`), if on.
    cache: Option<Arc<CountCache>>,
    /// Which requests may reuse each other's remembered counts.
    partitioning: Partitioning,
    /// Whether one model that cannot be judged holds the pod unready.
    readiness: Readiness,
}

/// A parsed request, with the counter and limit of its model's profile.
struct Inspected {
    /// The canonical body, forwarded if the request is allowed.
    canonical: Bytes,
    units: Vec<Unit>,
    counter: Arc<ModelCounter>,
    limit: usize,
}

/// What the counting step of [`Core::decide`] is handed: the units, their
/// model's counter and limit, and the policy to count them under.
struct Counting {
    counter: Arc<ModelCounter>,
    units: Vec<Unit>,
    policy: CountPolicy,
    limit: usize,
}

impl Guard {
    pub fn new(
        models: Vec<String>,
        profiles: Arc<Profiles>,
        workers: usize,
        queue: usize,
        clock: Clock,
    ) -> Self {
        assert!(!models.is_empty(), "the guard needs at least one model");
        Self {
            core: Core {
                models: models.into(),
                profiles,
                clock,
                exact_counting: false,
                sampler: None,
                cache: None,
                partitioning: Partitioning::default(),
                readiness: Readiness::default(),
            },
            pool: CountPool::new(workers, queue),
        }
    }

    /// `exact_counting = true`: every prompt is tokenized (up to the limit),
    /// none accepted by its upper bound.
    pub fn with_exact_counting(mut self, exact: bool) -> Self {
        self.core.exact_counting = exact;
        self
    }

    /// Checks a sampled share of allowed requests against a prefill worker
    /// (`verify_sample_rate`).
    pub fn with_sampler(mut self, sampler: Option<Arc<Sampler>>) -> Self {
        self.core.sampler = sampler;
        self
    }

    /// Remembers the counts of long prompts' pieces, per tenant
    /// (`count_cache_bytes`, `count_cache_partition`).
    pub fn with_count_cache(
        mut self,
        cache: Option<Arc<CountCache>>,
        partitioning: Partitioning,
    ) -> Self {
        self.core.cache = cache.filter(|c| c.budget() > 0);
        self.core.partitioning = partitioning;
        self
    }

    /// The tenant partition of a request's counts: a keyed hash of its
    /// credential (`Authorization`, else `x-api-key`) or of the configured
    /// header; absent values share one partition, as do all requests with
    /// `count_cache_partition = "none"`.
    pub fn partition(&self, headers: &http::HeaderMap) -> Partition {
        let Some(cache) = &self.core.cache else {
            return Partition::default();
        };
        let value = match &self.core.partitioning {
            Partitioning::None => return Partition::default(),
            Partitioning::Authorization => headers
                .get(http::header::AUTHORIZATION)
                .or_else(|| headers.get("x-api-key")),
            Partitioning::Header(name) => headers.get(name.as_str()),
        };
        cache.partition_of(value.map_or(&b""[..], |v| v.as_bytes()))
    }

    /// Longest wait for a counting thread before the request is shed.
    pub fn with_queue_timeout(mut self, wait: Duration) -> Self {
        self.pool.max_wait = wait;
        self
    }

    pub fn profiles(&self) -> &Arc<Profiles> {
        &self.core.profiles
    }

    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.core.models.iter().map(String::as_str)
    }

    /// The served models with no limit known now (before discovery has
    /// heard from their workers, say): their requests are refused with 503.
    pub fn models_without_limit(&self) -> Vec<&str> {
        self.model_names()
            .filter(|m| self.core.profiles.limit(m).is_none())
            .collect()
    }

    /// Whether one model that cannot be judged holds the pod unready.
    pub fn with_readiness(mut self, readiness: Readiness) -> Self {
        self.core.readiness = readiness;
        self
    }

    /// Whether the pod takes traffic, under the readiness policy, and the
    /// models that cannot serve now (listed either way).
    pub fn readiness(&self) -> (bool, Vec<(String, String)>) {
        let missing = self.not_ready();
        let ready = match self.core.readiness {
            Readiness::AllModels => missing.is_empty(),
            Readiness::AnyModel => missing.len() < self.core.models.len(),
        };
        (ready, missing)
    }

    /// The served models that cannot serve now, with why.
    pub fn not_ready(&self) -> Vec<(String, String)> {
        let ready = self.core.profiles.not_ready();
        self.core
            .models
            .iter()
            .filter_map(|m| match self.core.profiles.get(m) {
                None => Some((m.clone(), "no profile".to_string())),
                Some(_) => ready.iter().find(|(n, _)| n == m).cloned(),
            })
            .collect()
    }

    /// Decides on a request body for an inspected route, filling in the
    /// request's `record` (what counting found) and returning it with the
    /// verdict: the canonical body to forward, or why not. `content_type` is
    /// the request's `Content-Type` header, if any; `partition` is its
    /// [`Self::partition`]; `request_id` its `x-request-id`, for the lines a
    /// sampled check logs.
    ///
    /// A small body is decided here, on the async runtime: parsing it and
    /// bounding its prompt cost about what handing it to a counting thread
    /// would cost in wake-ups. A large one is decided whole on the bounded
    /// pool, parsing included, so that neither parsing nor counting a
    /// multi-megabyte body holds up the connections sharing this thread.
    pub async fn check(
        &self,
        mut record: Record,
        route: Route,
        content_type: Option<&[u8]>,
        partition: Partition,
        request_id: Option<Arc<str>>,
        body: Bytes,
    ) -> Outcome<Bytes> {
        if let Err(reason) = require_json(content_type) {
            return Outcome::refused(record, reason);
        }
        if body.len() > INLINE_MAX_BYTES {
            return self
                .check_on_pool(record, route, partition, request_id, body)
                .await;
        }
        let verdict = self
            .core
            .decide(
                &mut record,
                route,
                partition,
                request_id.as_ref(),
                &body,
                |counting| self.count_small(counting),
            )
            .await;
        Outcome::decided(record, verdict)
    }

    /// Counts a small body's units: by their upper bounds on the spot when
    /// that decides them (everyday traffic), else exactly on the pool.
    async fn count_small(&self, counting: Counting) -> Result<Vec<Counted>, Reason> {
        let Counting {
            counter,
            units,
            mut policy,
            limit,
        } = counting;
        // Token ids and embeddings need no tokenizer: no reason to queue them.
        if units
            .iter()
            .all(|u| matches!(u, Unit::Ids(_) | Unit::Embeds(_)))
        {
            return count_units(&counter, &units, &policy, self.core.clock);
        }
        if !policy.exact_only {
            match decide_units_by_bound(&counter, &units, limit, self.core.clock)? {
                Some(counts) => return Ok(counts),
                // Some unit needs its exact count: the pool counts them all
                // exactly, without rendering a second time for the bound.
                None => policy.exact_only = true,
            }
        }
        let clock = self.core.clock;
        self.pool
            .run(move || count_units(&counter, &units, &policy, clock))
            .await?
    }

    /// The whole decision on a counting thread. `count_time` is then the
    /// time from admission to verdict: queueing and parsing included.
    async fn check_on_pool(
        &self,
        record: Record,
        route: Route,
        partition: Partition,
        request_id: Option<Arc<str>>,
        body: Bytes,
    ) -> Outcome<Bytes> {
        let started = Instant::now();
        let core = self.core.clone();
        let clock = self.core.clock;
        // The thread fills in its own copy: a shed request never reaches it,
        // and is recorded on `record`.
        let mut on_thread = record.clone();
        let decided = self
            .pool
            .run(move || {
                let verdict = core.decide(
                    &mut on_thread,
                    route,
                    partition,
                    request_id.as_ref(),
                    &body,
                    |mut c| {
                        // A body this many times the limit in bytes has a
                        // prompt whose byte bound is over the limit: trying
                        // the bound first would only render its template
                        // twice. Which sound method runs is all this decides.
                        c.policy.exact_only |=
                            body.len() / BOUND_HOPELESS_BYTES_PER_TOKEN >= c.limit;
                        std::future::ready(count_units(&c.counter, &c.units, &c.policy, clock))
                    },
                );
                // Its counting step is synchronous, so the decision is done
                // at the first poll: this thread needs no executor.
                let verdict = verdict
                    .now_or_never()
                    .expect("a decision counted on its own thread never waits");
                (on_thread, verdict)
            })
            .await;
        let (mut record, verdict) = decided.unwrap_or_else(|shed| {
            let mut record = record;
            // Shed before parsing: the model is known only when there
            // is one (`Core::select`), as the metrics' label.
            if let [only] = &*self.core.models {
                record.model = Some(only.clone());
            }
            (record, Err(shed))
        });
        record.count_time = Some(started.elapsed());
        Outcome::decided(record, verdict)
    }
}

impl Core {
    /// The decision on one inspected body, in the one order every body
    /// takes: parse, extract and find the model's profile ([`Self::inspect`]);
    /// pick it for a sampled check or not; count; apply the limit
    /// ([`conclude`]); hand an allowed sample to the checker. Only where the
    /// units are counted differs between a small body and a large one, so
    /// that step is the caller's (`count`): on the event loop by their bound,
    /// else on the pool (`Guard::count_small`), or right on the counting
    /// thread a large body is decided on (`Guard::check_on_pool`).
    async fn decide<F, Fut>(
        &self,
        record: &mut Record,
        route: Route,
        partition: Partition,
        request_id: Option<&Arc<str>>,
        body: &Bytes,
        count: F,
    ) -> Result<Bytes, Reason>
    where
        F: FnOnce(Counting) -> Fut,
        Fut: Future<Output = Result<Vec<Counted>, Reason>>,
    {
        let Inspected {
            canonical,
            units,
            counter,
            limit,
        } = self.inspect(record, route, body)?;
        let sampled = self.sample(&units);
        let policy = self.policy(&counter, limit, partition);
        let started = Instant::now();
        let counted = count(Counting {
            counter: counter.clone(),
            units,
            policy,
            limit,
        })
        .await;
        record.count_time = Some(started.elapsed());
        conclude(record, counted?, limit)?;
        self.check_sample(record, counter, sampled, request_id);
        Ok(canonical)
    }

    /// Parses the body, extracts its prompt units and finds its model and limit.
    fn inspect(
        &self,
        record: &mut Record,
        route: Route,
        body: &Bytes,
    ) -> Result<Inspected, Reason> {
        let json::Strict { value, canonical } = json::read_strict(body)?;
        let value = Arc::new(value);
        let request = inspect::extract(route, value.clone())?;
        let model = self.select(request.model.as_deref())?;
        record.model = Some(model.to_string());
        // One snapshot of the profile decides the whole request.
        let profile = self
            .profiles
            .get(model)
            .ok_or_else(|| Reason::LimitUnknown(model.to_string()))?;
        // Beyond length: what the prefill/decode pair would stub on one side.
        profile.pd.check(&request.features).map_err(Reason::Pd)?;
        let counter = profile.counter.clone().map_err(|why| Reason::NotServed {
            model: model.to_string(),
            why,
        })?;
        let limit = profile
            .limit
            .ok_or_else(|| Reason::LimitUnknown(model.to_string()))?;
        record.limit = Some(limit);
        let units = counter.server_units(route, &value, request.units)?;
        Ok(Inspected {
            canonical,
            units,
            counter,
            limit,
        })
    }

    fn policy(&self, counter: &ModelCounter, limit: usize, partition: Partition) -> CountPolicy {
        CountPolicy {
            cache: self
                .cache
                .clone()
                .map(|cache| CacheScope { cache, partition }),
            limit: Some(limit),
            // Without a bound for this tokenizer, trying one would only
            // render every chat template twice.
            exact_only: self.exact_counting || !counter.has_bound(),
            parallel: true,
        }
    }

    /// The units of a request picked for a sampled count check, if it is one.
    fn sample(&self, units: &[Unit]) -> Option<Vec<Unit>> {
        self.sampler
            .as_ref()
            .filter(|s| s.pick())
            .map(|_| units.to_vec())
    }

    /// Hands an allowed, sampled request to the checker (off the request path).
    fn check_sample(
        &self,
        record: &Record,
        counter: Arc<ModelCounter>,
        sampled: Option<Vec<Unit>>,
        request_id: Option<&Arc<str>>,
    ) {
        if let (Some(sampler), Some(units), Some(model)) = (&self.sampler, sampled, &record.model) {
            sampler.check(model, counter, units, request_id.cloned());
        }
    }

    /// With one model, every request is counted with it whatever `model` says,
    /// as a single-model SGLang does; with several, `model` selects by served name.
    fn select(&self, requested: Option<&str>) -> Result<&str, Reason> {
        if let [only] = &*self.models {
            return Ok(only);
        }
        let name = requested.ok_or_else(|| Reason::InvalidRequest {
            message: "`model` is required: this endpoint serves several models".into(),
            param: Some("model"),
        })?;
        self.models
            .iter()
            .find(|m| *m == name)
            .map(String::as_str)
            .ok_or_else(|| Reason::UnknownModel(name.to_string()))
    }
}

/// Applies the limit to the counts: `Ok` when every unit fits. Fills what
/// the metrics and the log report.
fn conclude(record: &mut Record, counts: Vec<Counted>, limit: usize) -> Result<(), Reason> {
    let method = overall_method(&counts);
    record.count_method = Some(method);
    let largest = counts.iter().map(|c| c.tokens).max();
    // A bound is not a count: metrics and logs get no token number then.
    if method == CountMethod::Bound {
        record.upper_bound = largest;
    } else {
        record.tokens = largest;
    }
    // Counting stops at the first unit that does not fit; report that one.
    if let Some(last) = counts.last() {
        if !policy::fits(last.tokens, limit) {
            record.tokens = Some(last.tokens);
            record.upper_bound = None;
            record.count_method = Some(last.method);
            let tokens = last.tokens;
            return Err(match last.method {
                CountMethod::EarlyExit => Reason::TooLongAtLeast { tokens, limit },
                _ => Reason::TooLong { tokens, limit },
            });
        }
    }
    Ok(())
}

/// From this many body bytes per token of the limit, a large body is
/// counted exactly without trying its upper bound first (`check_on_pool`).
const BOUND_HOPELESS_BYTES_PER_TOKEN: usize = 2;

/// Bodies up to this size are parsed and bounded on the event loop that
/// serves their connection (`Guard::check`), larger ones whole on a counting
/// thread. Handing a body to the pool and back costs more than the work it
/// saves the loop for everyday prompts: on a ~32k-token chat (139 kB) the
/// pool path used 0.77 ms of CPU a request against 0.57–0.61 ms here, and
/// throughput rose by half (BENCHMARKS.md). At 256 KiB (~60k tokens) the
/// inline work stays around a millisecond, and with one loop per core it
/// only delays that loop's own connections; anything needing an exact
/// count still goes to the pool, behind its admission queue.
pub const INLINE_MAX_BYTES: usize = 256 * 1024;

/// Every unit decided by [`ModelCounter::decide_by_bound`], or `None` as soon
/// as one needs an exact count.
fn decide_units_by_bound(
    counter: &ModelCounter,
    units: &[Unit],
    limit: usize,
    clock: Clock,
) -> Result<Option<Vec<Counted>>, Reason> {
    let mut counts = Vec::with_capacity(units.len());
    for unit in units {
        match counter.decide_by_bound(unit, clock, limit)? {
            Some(c) if c.tokens < limit => counts.push(c),
            _ => return Ok(None),
        }
    }
    Ok(Some(counts))
}

/// Counts each unit against the limit, stopping after the first that does
/// not fit (each unit of a batch is its own sequence with its own limit).
pub fn count_units(
    counter: &ModelCounter,
    units: &[Unit],
    policy: &CountPolicy,
    clock: Clock,
) -> Result<Vec<Counted>, Reason> {
    let mut counts = Vec::with_capacity(units.len());
    for unit in units {
        let c = counter.count_with(unit, clock, policy.clone())?;
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
}
