//! The exact count of long prompt text, remembered piece by piece.
//!
//! Agent and coding sessions resend the whole conversation, plus one new
//! turn, every few seconds; the text that needs an exact count (near the
//! limit) is then mostly text counted a moment ago. SGLang 0.5.23 caches the
//! ids of the text between special tokens for the same reason
//! (`encode_prompt_segments`). Here a long text is cut into pieces at points
//! chosen by the content alone, so a resent conversation cuts where it cut
//! before, and each piece's count is remembered.
//!
//! **Exactness.** Pieces are cut only where `cuts.rs` proves that the halves
//! tokenize exactly as the whole (a space between two ASCII letters, for
//! the tokenizers whose pipeline is checked to admit it), so the count of a
//! text is the sum of its pieces' counts plus what the post-processor adds.
//! A piece's count is a pure function of its bytes and the tokenizer, so a
//! remembered count equals a fresh one; only complete counts are stored.
//!
//! **Keys.** A piece is keyed by a keyed BLAKE3 hash (a random key drawn at
//! start-up) of the tokenizer's identity, the tenant partition and the
//! piece's bytes, truncated to 128 bits: nobody without the key can build a
//! colliding text offline, and a chance collision among even 2^32 entries
//! has probability below 2^-64. Values are counts; no text is kept.
//!
//! **Tenants.** A hit is faster than a miss, which would let one tenant
//! learn whether another recently sent a given document (the timing probe
//! published against KV prefix caches). The partition (a hash of the
//! tenant's credential, see `core::guard`) is part of every key, so a tenant
//! only ever hits what it sent itself.
//!
//! **Bounds.** At most `count_cache_bytes`, charged per entry at
//! [`ENTRY_BYTES`]. Each partition is a least-recently-used list; when the
//! budget is full, the partition holding the most bytes gives up its oldest
//! entry, so one busy tenant evicts its own history before anyone else's.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Texts shorter than this are counted directly: hashing and a lock would
/// cost about what they save.
pub const MIN_TEXT_BYTES: usize = 32 * 1024;

/// No cut within this many bytes of the previous one.
const MIN_PIECE_BYTES: usize = 2 * 1024;

/// After [`MIN_PIECE_BYTES`], a cut is armed where the rolling hash's top
/// bits are zero: on average every 4 KiB.
const ARM_MASK: u64 = 0xfff0_0000_0000_0000;

/// What one entry is charged against `count_cache_bytes`: the 16-byte key
/// and 4-byte count twice (list slot and index), the list links, and the
/// hash table's control byte and load factor, rounded up.
pub const ENTRY_BYTES: usize = 64;

/// What a partition costs besides its entries (its list and table headers).
const PARTITION_BYTES: usize = 256;

/// Where the cache's counters go; shared across reloads so the exported
/// totals keep counting up when a new configuration builds a new cache.
#[derive(Debug, Default)]
pub struct CacheCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Bytes held by every live cache.
    pub bytes: AtomicI64,
    /// Partitions held by every live cache.
    pub partitions: AtomicI64,
}

/// Which requests may reuse each other's remembered counts
/// (`count_cache_partition`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Partitioning {
    /// By credential: the `Authorization` header, else `x-api-key`.
    #[default]
    Authorization,
    /// By the value of this header (lower case), for gateways that put the
    /// tenant in a header of their own.
    Header(String),
    /// One partition for everyone: a tenant can tell by timing whether
    /// another recently sent the same long text.
    None,
}

impl std::str::FromStr for Partitioning {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "authorization" => Ok(Self::Authorization),
            "none" => Ok(Self::None),
            other => match other.strip_prefix("header:").map(str::trim) {
                Some(name) if is_header_name(name) => Ok(Self::Header(name.to_ascii_lowercase())),
                _ => Err(format!(
                    "`{other}` is not a partition: use `authorization`, `header:NAME` or `none`"
                )),
            },
        }
    }
}

impl std::fmt::Display for Partitioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Authorization => f.write_str("authorization"),
            Self::Header(name) => write!(f, "header:{name}"),
            Self::None => f.write_str("none"),
        }
    }
}

/// A tenant's share of the cache: a hash of its credential (or 0 for all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Partition(pub u64);

/// The cache and the partition one request counts in.
#[derive(Clone)]
pub struct CacheScope {
    pub cache: Arc<CountCache>,
    pub partition: Partition,
}

impl std::fmt::Debug for CacheScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheScope")
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

pub struct CountCache {
    key: [u8; 32],
    budget: usize,
    min_text_bytes: usize,
    store: Mutex<Store>,
    counters: Arc<CacheCounters>,
}

impl CountCache {
    /// A cache of at most `budget` bytes, with a fresh random key.
    pub fn new(budget: usize, counters: Arc<CacheCounters>) -> Self {
        Self {
            key: random_key(),
            budget,
            min_text_bytes: MIN_TEXT_BYTES,
            store: Mutex::new(Store::default()),
            counters,
        }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Texts from this many bytes go through the cache ([`MIN_TEXT_BYTES`]
    /// by default); the equivalence tests lower it to put every text on
    /// the cached path.
    pub fn with_min_text_bytes(mut self, bytes: usize) -> Self {
        self.min_text_bytes = bytes;
        self
    }

    pub fn min_text_bytes(&self) -> usize {
        self.min_text_bytes
    }

    pub fn counters(&self) -> &Arc<CacheCounters> {
        &self.counters
    }

    /// The partition of a tenant credential: a keyed hash, so the value
    /// itself is never kept and partitions cannot be chosen from outside.
    pub fn partition_of(&self, credential: &[u8]) -> Partition {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(b"partition\0");
        h.update(credential);
        let bytes = h.finalize();
        Partition(u64::from_le_bytes(
            bytes.as_bytes()[..8].try_into().expect("8 bytes"),
        ))
    }

    /// The key of `piece` counted by tokenizer `tokenizer` in `partition`.
    pub fn key_of(&self, tokenizer: u64, partition: Partition, piece: &str) -> u128 {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&tokenizer.to_le_bytes());
        h.update(&partition.0.to_le_bytes());
        h.update(piece.as_bytes());
        let bytes = h.finalize();
        u128::from_le_bytes(bytes.as_bytes()[..16].try_into().expect("16 bytes"))
    }

    /// The remembered count of each key, in order; every hit becomes the
    /// most recently used entry of its partition.
    pub fn lookup(&self, partition: Partition, keys: &[u128]) -> Vec<Option<u32>> {
        let mut store = self.lock();
        let found: Vec<Option<u32>> = match store.parts.get_mut(&partition) {
            Some(lru) => keys.iter().map(|k| lru.get(*k)).collect(),
            None => vec![None; keys.len()],
        };
        drop(store);
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.counters.hits.fetch_add(hits, Ordering::Relaxed);
        self.counters
            .misses
            .fetch_add(keys.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// Remembers complete counts. Over budget, the largest partition gives
    /// up its least recently used entries first.
    pub fn insert(&self, partition: Partition, entries: &[(u128, u32)]) {
        if entries.is_empty() || self.budget < ENTRY_BYTES + PARTITION_BYTES {
            return;
        }
        let mut store = self.lock();
        let before = (store.bytes, store.parts.len());
        let mut evicted = 0u64;
        for &(key, count) in entries {
            if !store.put(partition, key, count) {
                continue;
            }
            while store.bytes > self.budget && store.evict_one() {
                evicted += 1;
            }
        }
        let after = (store.bytes, store.parts.len());
        drop(store);
        self.counters
            .evictions
            .fetch_add(evicted, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(after.0 as i64 - before.0 as i64, Ordering::Relaxed);
        self.counters
            .partitions
            .fetch_add(after.1 as i64 - before.1 as i64, Ordering::Relaxed);
    }

    /// Bytes charged now (entries and partitions).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Bytes charged to one partition's entries.
    pub fn partition_bytes(&self, partition: Partition) -> usize {
        self.lock().parts.get(&partition).map_or(0, Lru::bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        // The store stays consistent between statements that could panic.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CountCache {
    fn drop(&mut self) {
        let store = self.lock();
        let (bytes, parts) = (store.bytes as i64, store.parts.len() as i64);
        drop(store);
        self.counters.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.counters.partitions.fetch_sub(parts, Ordering::Relaxed);
    }
}

/// An HTTP field name (RFC 9110 `token`), checked here so the counting
/// crate needs no HTTP library; the same bytes `http::HeaderName` accepts.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key
}

#[derive(Default)]
struct Store {
    parts: HashMap<Partition, Lru>,
    /// (entry bytes, partition) for every partition: the largest is last.
    sizes: BTreeSet<(usize, Partition)>,
    bytes: usize,
}

impl Store {
    /// `true` when the key is new to the partition.
    fn put(&mut self, partition: Partition, key: u128, count: u32) -> bool {
        let Store {
            parts,
            sizes,
            bytes,
        } = self;
        let lru = parts.entry(partition).or_insert_with(|| {
            *bytes += PARTITION_BYTES;
            Lru::default()
        });
        let old = lru.bytes();
        if !lru.put(key, count) {
            return false;
        }
        *bytes += ENTRY_BYTES;
        sizes.remove(&(old, partition));
        sizes.insert((old + ENTRY_BYTES, partition));
        true
    }

    /// Drops the oldest entry of the partition holding the most bytes;
    /// `false` when there is nothing left to drop.
    fn evict_one(&mut self) -> bool {
        let Some(&(size, partition)) = self.sizes.last() else {
            return false;
        };
        self.sizes.remove(&(size, partition));
        let lru = self.parts.get_mut(&partition).expect("sizes mirror parts");
        if lru.pop_oldest() {
            self.bytes -= ENTRY_BYTES;
        }
        if lru.is_empty() {
            self.parts.remove(&partition);
            self.bytes -= PARTITION_BYTES;
        } else {
            self.sizes.insert((size - ENTRY_BYTES, partition));
        }
        true
    }
}

const NIL: u32 = u32::MAX;

struct Slot {
    key: u128,
    count: u32,
    prev: u32,
    next: u32,
}

/// One partition's entries, most recently used at `head`.
struct Lru {
    index: HashMap<u128, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl Default for Lru {
    fn default() -> Self {
        Self {
            index: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Lru {
    fn bytes(&self) -> usize {
        self.index.len() * ENTRY_BYTES
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn get(&mut self, key: u128) -> Option<u32> {
        let slot = *self.index.get(&key)?;
        self.unlink(slot);
        self.push_front(slot);
        Some(self.slots[slot as usize].count)
    }

    /// `true` when the key is new.
    fn put(&mut self, key: u128, count: u32) -> bool {
        if let Some(&slot) = self.index.get(&key) {
            self.slots[slot as usize].count = count;
            self.unlink(slot);
            self.push_front(slot);
            return false;
        }
        let entry = Slot {
            key,
            count,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = entry;
                s
            }
            None => {
                self.slots.push(entry);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 entries")
            }
        };
        self.index.insert(key, slot);
        self.push_front(slot);
        true
    }

    fn pop_oldest(&mut self) -> bool {
        let slot = self.tail;
        if slot == NIL {
            return false;
        }
        self.unlink(slot);
        self.index.remove(&self.slots[slot as usize].key);
        self.free.push(slot);
        true
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let s = &self.slots[slot as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        let head = self.head;
        {
            let s = &mut self.slots[slot as usize];
            s.prev = NIL;
            s.next = head;
        }
        match head {
            NIL => self.tail = slot,
            h => self.slots[h as usize].prev = slot,
        }
        self.head = slot;
    }
}

/// Where `text` is cut into pieces: byte offsets of spaces with an ASCII
/// letter on both sides (the cut `cuts.rs` argues), chosen by a rolling
/// hash of the 64 bytes before them so that equal text cuts equally
/// wherever it sits. Increasing; empty for short text or text without such
/// spaces.
pub fn content_cuts(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut cuts = Vec::new();
    let mut start = 0usize;
    loop {
        // The hash at `i` depends only on the 64 bytes before it, so
        // hashing starts 64 bytes before the first position that may cut.
        let first = start + MIN_PIECE_BYTES;
        if first >= b.len() {
            return cuts;
        }
        let mut h = 0u64;
        for &byte in &b[first.saturating_sub(64)..first] {
            h = (h << 1).wrapping_add(GEAR[byte as usize]);
        }
        let mut armed = None;
        for (i, &byte) in b.iter().enumerate().skip(first) {
            h = (h << 1).wrapping_add(GEAR[byte as usize]);
            if h & ARM_MASK == 0 {
                armed = Some(i);
                break;
            }
        }
        // Armed: the cut is the first safe space from here on.
        let next = armed.and_then(|from| {
            (from.max(1)..b.len().saturating_sub(1)).find(|&i| {
                b[i] == b' ' && b[i - 1].is_ascii_alphabetic() && b[i + 1].is_ascii_alphabetic()
            })
        });
        match next {
            Some(i) => {
                cuts.push(i);
                start = i;
            }
            None => return cuts,
        }
    }
}

/// The gear table of the rolling hash: fixed pseudo-random words
/// (splitmix64), so the cuts are the same in every process.
static GEAR: [u64; 256] = gear();

const fn gear() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        table[i] = z ^ (z >> 31);
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(budget: usize) -> CountCache {
        CountCache::new(budget, Arc::new(CacheCounters::default()))
    }

    fn prose(words: usize, seed: u64) -> String {
        let vocab = [
            "alpha", "beta", "gamma", "delta", "tokens", "prefill", "guard", "count", "the", "of",
            "and", "session", "agent", "turn",
        ];
        let mut s = String::new();
        let mut x = seed | 1;
        for _ in 0..words {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(vocab[(x % vocab.len() as u64) as usize]);
            s.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
        }
        s
    }

    #[test]
    fn cuts_depend_on_content_not_position() {
        let body = prose(20_000, 7);
        let cuts = content_cuts(&body);
        assert!(
            cuts.len() > 10,
            "{} cuts in {} bytes",
            cuts.len(),
            body.len()
        );
        let b = body.as_bytes();
        for &c in &cuts {
            assert_eq!(b[c], b' ');
            assert!(b[c - 1].is_ascii_alphabetic() && b[c + 1].is_ascii_alphabetic());
        }
        assert!(cuts.windows(2).all(|w| w[1] - w[0] >= MIN_PIECE_BYTES));
        // The same text behind a different prefix cuts at the same places
        // once the cuts have met again.
        let shifted = format!("{}{body}", prose(300, 99));
        let offset = shifted.len() - body.len();
        let moved: BTreeSet<usize> = content_cuts(&shifted)
            .into_iter()
            .filter(|&c| c >= offset)
            .map(|c| c - offset)
            .collect();
        let same = cuts.iter().filter(|c| moved.contains(c)).count();
        assert!(same + 3 >= cuts.len(), "{same} of {} cuts kept", cuts.len());
        // Appending text leaves the earlier cuts as they were.
        let grown = format!("{body}{}", prose(2_000, 5));
        assert!(content_cuts(&grown).starts_with(&cuts));
    }

    #[test]
    fn lookups_hit_only_within_a_partition() {
        let c = cache(1 << 20);
        let (a, b) = (c.partition_of(b"Bearer a"), c.partition_of(b"Bearer b"));
        assert_ne!(a, b);
        let key_a = c.key_of(1, a, "some text");
        let key_b = c.key_of(1, b, "some text");
        assert_ne!(key_a, key_b);
        assert_ne!(key_a, c.key_of(2, a, "some text"));
        c.insert(a, &[(key_a, 42)]);
        assert_eq!(c.lookup(a, &[key_a]), vec![Some(42)]);
        assert_eq!(c.lookup(b, &[key_b]), vec![None]);
        let counters = c.counters().clone();
        assert_eq!(counters.hits.load(Ordering::Relaxed), 1);
        assert_eq!(counters.misses.load(Ordering::Relaxed), 1);
        assert_eq!(
            counters.bytes.load(Ordering::Relaxed) as usize,
            ENTRY_BYTES + PARTITION_BYTES
        );
        drop(c);
        assert_eq!(counters.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn stays_within_budget_and_evicts_the_largest_partition_first() {
        let budget = 100 * ENTRY_BYTES + 2 * PARTITION_BYTES;
        let c = cache(budget);
        let (quiet, busy) = (Partition(1), Partition(2));
        let quiet_keys: Vec<(u128, u32)> = (0..10).map(|k| (k, k as u32)).collect();
        c.insert(quiet, &quiet_keys);
        for k in 1000..5000u128 {
            c.insert(busy, &[(k, 1)]);
            assert!(c.bytes() <= budget);
        }
        // The busy tenant evicted its own history, never the quiet one's.
        let keys: Vec<u128> = quiet_keys.iter().map(|k| k.0).collect();
        assert!(c.lookup(quiet, &keys).iter().all(Option::is_some));
        assert_eq!(c.partition_bytes(quiet), 10 * ENTRY_BYTES);
        // Least recently used goes first: the newest busy keys are kept.
        assert_eq!(c.lookup(busy, &[4999]), vec![Some(1)]);
        assert_eq!(c.lookup(busy, &[1000]), vec![None]);
        assert!(c.counters().evictions.load(Ordering::Relaxed) >= 3900);
    }

    #[test]
    fn a_hit_refreshes_its_entry() {
        let c = cache(3 * ENTRY_BYTES + PARTITION_BYTES);
        let p = Partition(0);
        c.insert(p, &[(1, 1), (2, 2), (3, 3)]);
        assert_eq!(c.lookup(p, &[1]), vec![Some(1)]);
        c.insert(p, &[(4, 4)]);
        assert_eq!(
            c.lookup(p, &[1, 2, 3, 4]),
            vec![Some(1), None, Some(3), Some(4)]
        );
    }

    #[test]
    fn a_zero_budget_keeps_nothing() {
        let c = cache(0);
        c.insert(Partition(0), &[(1, 1)]);
        assert_eq!(c.lookup(Partition(0), &[1]), vec![None]);
        assert_eq!(c.bytes(), 0);
    }
}
