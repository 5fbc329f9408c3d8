//! Where counter and histogram families keep their series.
//!
//! Every answered request updates four or more families and the in-flight
//! gauge, from every event loop at once. So an update finds its series
//! without allocating (the label values are looked up as borrowed `&str`s)
//! and touches only its own thread's shard: no metric's lock or cache line
//! is shared between event loops on the request path. A scrape adds the
//! shards up, which is the rare side.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{header, labels};

/// Shards per family. Threads take them round robin, so up to this many
/// event loops never share one; past it, two loops share a lock that each
/// holds for a lookup and an add.
const SHARDS: usize = 16;

/// One series' label values, owned: made once, when the series first
/// appears.
#[derive(Clone)]
struct LabelSet(Box<[Box<str>]>);

/// Label values as a map key, owned ([`LabelSet`]) or borrowed (`&[&str]`),
/// ordered alike so that a borrowed lookup finds the owned key.
trait Key {
    fn len(&self) -> usize;
    fn at(&self, i: usize) -> &str;
}

impl Key for LabelSet {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn at(&self, i: usize) -> &str {
        &self.0[i]
    }
}

impl Key for &[&str] {
    fn len(&self) -> usize {
        <[&str]>::len(self)
    }
    fn at(&self, i: usize) -> &str {
        self[i]
    }
}

/// Lexicographic over the values, as `Vec<String>`'s order: shorter first
/// when one is a prefix of the other.
impl Ord for dyn Key + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        (0..self.len().min(other.len()))
            .map(|i| self.at(i).cmp(other.at(i)))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| self.len().cmp(&other.len()))
    }
}
impl PartialOrd for dyn Key + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for dyn Key + '_ {}

impl<'a> Borrow<dyn Key + 'a> for LabelSet {
    fn borrow(&self) -> &(dyn Key + 'a) {
        self
    }
}

// The owned key's order is the borrowed one's, by construction.
impl Ord for LabelSet {
    fn cmp(&self, other: &Self) -> Ordering {
        (self as &dyn Key).cmp(other as &dyn Key)
    }
}
impl PartialOrd for LabelSet {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for LabelSet {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for LabelSet {}

/// A value a series holds, and how two shards' values add up.
trait Value: Clone {
    fn merge(&mut self, other: &Self);
}

impl Value for u64 {
    fn merge(&mut self, other: &Self) {
        *self += other;
    }
}

/// Per-bucket counts, not cumulative; the last slot is `+Inf`.
#[derive(Clone)]
struct Histogram {
    buckets: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl Value for Histogram {
    fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine += theirs;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// Keeps a shard on its own cache lines: a neighbour's lock word written by
/// another event loop would otherwise bounce the line between cores.
#[repr(align(128))]
struct Padded<T>(T);

/// One shard's series.
type Shard<V> = Mutex<BTreeMap<LabelSet, V>>;

/// A family's series, split in [`SHARDS`] maps.
struct Shards<V> {
    shards: Box<[Padded<Shard<V>>]>,
}

/// This thread's shard, the same for its whole life.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, AtomicOrdering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// An update holds the lock for a map lookup and an add; a panic while
/// holding it cannot leave a value half-written, so a poisoned lock is used
/// as is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<V: Value> Shards<V> {
    fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(BTreeMap::new())))
                .collect(),
        }
    }

    /// Applies `update` to the series `label_values` in this thread's shard,
    /// made with `new` if the shard has not seen it yet.
    fn update(&self, label_values: &[&str], new: impl FnOnce() -> V, update: impl FnOnce(&mut V)) {
        let mut map = lock(&self.shards[shard_index()].0);
        let key: &dyn Key = &label_values;
        match map.get_mut(key) {
            Some(v) => update(v),
            None => {
                let mut v = new();
                update(&mut v);
                let owned = LabelSet(label_values.iter().map(|&s| s.into()).collect());
                map.insert(owned, v);
            }
        }
    }

    /// Every series, the shards added up, in label order.
    fn merged(&self) -> BTreeMap<LabelSet, V> {
        let mut all: BTreeMap<LabelSet, V> = BTreeMap::new();
        for shard in self.shards.iter() {
            for (key, v) in lock(&shard.0).iter() {
                match all.get_mut(key as &dyn Key) {
                    Some(total) => total.merge(v),
                    None => {
                        all.insert(key.clone(), v.clone());
                    }
                }
            }
        }
        all
    }
}

/// A gauge of things alive now (requests in flight), one counter per shard:
/// a request raises its thread's counter and, when done, lowers the same
/// one, whichever thread drops it; the sum is the gauge (read counter by
/// counter, so a scrape may count a request that ended while it read).
pub(super) struct Level {
    shards: Box<[Arc<Padded<AtomicI64>>]>,
}

impl Level {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Arc::new(Padded(AtomicI64::new(0))))
                .collect(),
        }
    }

    /// Raised until the returned token is dropped.
    pub(super) fn raise(&self) -> Raised {
        let shard = &self.shards[shard_index()];
        shard.0.fetch_add(1, AtomicOrdering::Relaxed);
        Raised(shard.clone())
    }

    pub(super) fn get(&self) -> i64 {
        self.shards
            .iter()
            .map(|s| s.0.load(AtomicOrdering::Relaxed))
            .sum()
    }
}

/// Holds a [`Level`] raised by one.
pub struct Raised(Arc<Padded<AtomicI64>>);

impl Drop for Raised {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, AtomicOrdering::Relaxed);
    }
}

fn values(key: &LabelSet) -> Vec<&str> {
    key.0.iter().map(|s| &**s).collect()
}

pub(super) struct CounterVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    series: Shards<u64>,
}

impl CounterVec {
    pub(super) fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            label_names,
            series: Shards::new(),
        }
    }

    pub(super) fn inc(&self, label_values: &[&str]) {
        debug_assert_eq!(label_values.len(), self.label_names.len());
        self.series.update(label_values, || 0, |n| *n += 1);
    }

    pub(super) fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "counter");
        for (key, value) in self.series.merged() {
            let _ = writeln!(
                out,
                "{}{} {value}",
                self.name,
                labels(self.label_names, &values(&key), None)
            );
        }
    }
}

pub(super) struct HistogramVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    bounds: Vec<f64>,
    series: Shards<Histogram>,
}

impl HistogramVec {
    pub(super) fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
        bounds: Vec<f64>,
    ) -> Self {
        Self {
            name,
            help,
            label_names,
            bounds,
            series: Shards::new(),
        }
    }

    pub(super) fn observe(&self, label_values: &[&str], v: f64) {
        debug_assert_eq!(label_values.len(), self.label_names.len());
        let slot = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        let new = || Histogram {
            buckets: vec![0; self.bounds.len() + 1].into(),
            sum: 0.0,
            count: 0,
        };
        self.series.update(label_values, new, |h| {
            h.buckets[slot] += 1;
            h.sum += v;
            h.count += 1;
        });
    }

    pub(super) fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "histogram");
        for (key, h) in self.series.merged() {
            let values = values(&key);
            let mut cumulative = 0;
            for (i, n) in h.buckets.iter().enumerate() {
                cumulative += n;
                let le = self
                    .bounds
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "{}_bucket{} {cumulative}",
                    self.name,
                    labels(self.label_names, &values, Some(&le))
                );
            }
            let set = labels(self.label_names, &values, None);
            let _ = writeln!(
                out,
                "{}_sum{set} {}\n{}_count{set} {}",
                self.name, h.sum, self.name, h.count
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed and the owned key order alike, as `Vec<String>` orders,
    /// so a lookup finds exactly the series an update made.
    #[test]
    fn borrowed_and_owned_keys_order_as_vectors_of_strings() {
        let sets: &[&[&str]] = &[
            &[],
            &[""],
            &["a"],
            &["a", ""],
            &["a", "b"],
            &["ab"],
            &["a", "b", "c"],
            &["b"],
            &["é"],
            &["z", "a"],
        ];
        for &x in sets {
            for &y in sets {
                let as_vec = |s: &[&str]| s.iter().map(|v| v.to_string()).collect::<Vec<_>>();
                let owned = |s: &[&str]| LabelSet(s.iter().map(|&v| v.into()).collect());
                let (bx, by): (&dyn Key, &dyn Key) = (&x, &y);
                assert_eq!(bx.cmp(by), as_vec(x).cmp(&as_vec(y)), "{x:?} {y:?}");
                assert_eq!(owned(x).cmp(&owned(y)), as_vec(x).cmp(&as_vec(y)));
            }
        }
    }

    /// A token dropped on another thread lowers the shard it raised: the
    /// sum stays the number of tokens alive.
    #[test]
    fn a_level_counts_tokens_alive_wherever_they_are_dropped() {
        let level = Level::new();
        let threads = SHARDS as i64 + 5;
        let mut held: Vec<Raised> = std::thread::scope(|s| {
            let made: Vec<_> = (0..threads)
                .map(|_| s.spawn(|| (0..3).map(|_| level.raise()).collect::<Vec<_>>()))
                .collect();
            made.into_iter()
                .flat_map(|t| t.join().expect("a raising thread panicked"))
                .collect()
        });
        assert_eq!(level.get(), 3 * threads);
        // Half of them dropped by one other thread, as a streamed body may be.
        let half = held.split_off(held.len() / 2);
        let dropped = half.len() as i64;
        std::thread::spawn(move || drop(half))
            .join()
            .expect("the dropping thread panicked");
        assert_eq!(level.get(), 3 * threads - dropped);
        drop(held);
        assert_eq!(level.get(), 0);
    }

    /// Updates from many threads land in different shards; the scrape adds
    /// them up, series by series.
    #[test]
    fn a_scrape_adds_up_every_threads_updates() {
        let requests = CounterVec::new("t_total", "h", &["route", "decision"]);
        let seconds = HistogramVec::new("t_seconds", "h", &["route"], vec![0.5, 1.0]);
        std::thread::scope(|s| {
            for t in 0..(2 * SHARDS + 3) {
                let (requests, seconds) = (&requests, &seconds);
                s.spawn(move || {
                    for i in 0..100 {
                        let decision = if i % 4 == 0 { "refused" } else { "allowed" };
                        requests.inc(&["/generate", decision]);
                        requests.inc(&[if t % 2 == 0 { "/a" } else { "/b" }, "allowed"]);
                        seconds.observe(&["/generate"], if i % 2 == 0 { 0.25 } else { 2.0 });
                    }
                });
            }
        });
        let threads = 2 * SHARDS as u64 + 3;
        let mut out = String::new();
        requests.render(&mut out);
        seconds.render(&mut out);
        for line in [
            format!(
                "t_total{{route=\"/a\",decision=\"allowed\"}} {}\n",
                threads.div_ceil(2) * 100
            ),
            format!(
                "t_total{{route=\"/b\",decision=\"allowed\"}} {}\n",
                threads / 2 * 100
            ),
            format!(
                "t_total{{route=\"/generate\",decision=\"allowed\"}} {}\n",
                threads * 75
            ),
            format!(
                "t_total{{route=\"/generate\",decision=\"refused\"}} {}\n",
                threads * 25
            ),
            format!(
                "t_seconds_bucket{{route=\"/generate\",le=\"0.5\"}} {}\n",
                threads * 50
            ),
            format!(
                "t_seconds_bucket{{route=\"/generate\",le=\"1\"}} {}\n",
                threads * 50
            ),
            format!(
                "t_seconds_bucket{{route=\"/generate\",le=\"+Inf\"}} {}\n",
                threads * 100
            ),
            format!("t_seconds_count{{route=\"/generate\"}} {}\n", threads * 100),
            format!(
                "t_seconds_sum{{route=\"/generate\"}} {}\n",
                threads as f64 * 112.5
            ),
        ] {
            assert!(out.contains(&line), "{line} not in\n{out}");
        }
        // One line per series, in label order, whatever the shards held.
        let series: Vec<&str> = out.lines().filter(|l| l.starts_with("t_total{")).collect();
        assert_eq!(series.len(), 4, "{out}");
        assert!(series.windows(2).all(|w| w[0] < w[1]), "{out}");
    }
}
