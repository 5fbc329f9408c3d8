//! Counting tokens without building an `Encoding`, optionally across cores and
//! stopping early once the count reaches a limit.
//!
//! `TokenizerImpl::encode_fast` in tokenizers 0.23.2 is, for one sequence:
//! `added_vocabulary.extract_and_normalize(normalizer, text)` → the
//! pre-tokenizer on the resulting `PreTokenizedString` → `Model::tokenize` on
//! every split that is not already an added token → `post_process`. Only the
//! number of ids matters here, so this module runs the same public calls in
//! the same order and adds up split lengths instead of assembling ids, offsets
//! and words. With truncation and padding disabled (`TextTokenizer` loads them
//! as `null`) the post-processor's contribution does not depend on the text:
//! it is measured once at load time by post-processing an empty encoding.
//!
//! Parallel counting splits only the list of pre-token splits, which is exactly
//! where the tokenizer's own pre-tokenization split: the model sees each split
//! on its own in `encode` too (`PreTokenizedString::tokenize` calls
//! `Model::tokenize` per split), so the sum over contiguous chunks of splits is
//! the sequential sum. `BPE::tokenize` keeps its merge cache per thread and a
//! cache hit returns the merges the miss computed, so which thread counts a
//! split changes nothing; a BPE with dropout is non-deterministic in
//! tokenizers itself and is refused parallel counting (see
//! [`Pipeline::parallel_safe`]).
//!
//! Early exit: every split's count is exact and non-negative, so a running sum
//! of any subset of splits is a lower bound on the total. Counting stops once
//! that sum plus the post-processor's tokens reaches the limit; the result then
//! says "at least this many".

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use tokenizers::{
    Encoding, Model, NormalizerWrapper, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, Token, Tokenizer,
};

use super::cache::{CountCache, Partition};
use super::CountError;

/// What a cached count is keyed by besides the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKey {
    /// The tokenizer instance (`TextTokenizer::id`).
    pub tokenizer: u64,
    pub partition: Partition,
}

/// When and how a text is spread over the counting pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunking {
    /// Below this many splits a text is counted on the calling thread:
    /// handing work to the pool costs more than it saves.
    pub min_splits: usize,
    /// Splits per parallel task; small enough for early exit to react quickly
    /// and for the cores to finish together.
    pub chunk_splits: usize,
    /// From this many bytes, for tokenizers that admit it (`cuts.rs`), the
    /// text itself is cut and normalized, pre-tokenized and counted in parts.
    pub min_text_bytes: usize,
    /// About this many bytes per part.
    pub part_bytes: usize,
}

impl Chunking {
    pub const DEFAULT: Chunking = Chunking {
        min_splits: 4096,
        chunk_splits: 2048,
        min_text_bytes: 128 * 1024,
        part_bytes: 64 * 1024,
    };
}

/// How far past its target a cut is looked for.
const CUT_WINDOW: usize = 16 * 1024;

/// The outcome of counting one text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The exact count when `complete`, else a lower bound that reached the limit.
    pub tokens: usize,
    /// Every split was counted.
    pub complete: bool,
}

/// What the post-processor adds to a single sequence, per `add_special_tokens`.
#[derive(Debug, Clone, Copy)]
pub struct Pipeline {
    /// `[add_special_tokens = false, add_special_tokens = true]`.
    additions: [usize; 2],
    /// Splits may be counted on several threads (the model is deterministic).
    parallel_safe: bool,
    /// The text may be cut between words (`cuts.rs`).
    text_cuts: bool,
}

impl Pipeline {
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, String> {
        let mut additions = [0usize; 2];
        for (slot, add) in additions.iter_mut().zip([false, true]) {
            *slot = tokenizer
                .post_process(Encoding::default(), None, add)
                .map_err(|e| format!("post-processor: {e}"))?
                .len();
        }
        let parallel_safe = match tokenizer.get_model() {
            tokenizers::ModelWrapper::BPE(bpe) => bpe.dropout.is_none_or(|p| p == 0.0),
            _ => true,
        };
        let text_cuts = parallel_safe && super::cuts::cut_safe(tokenizer).is_ok();
        Ok(Self {
            additions,
            parallel_safe,
            text_cuts,
        })
    }

    /// Tokens the post-processor adds to one sequence.
    pub fn additions(&self, add_special_tokens: bool) -> usize {
        self.additions[usize::from(add_special_tokens)]
    }

    pub fn parallel_safe(&self) -> bool {
        self.parallel_safe
    }

    /// Long texts are cut between words and each part run through the
    /// whole pipeline in parallel.
    pub fn text_cuts(&self) -> bool {
        self.text_cuts
    }

    /// Counts `text`, stopping once the count reaches `limit` (if any).
    /// `parallel`: long texts are spread over the counting pool as it says.
    pub fn count(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
        parallel: Option<Chunking>,
    ) -> Result<Tally, CountError> {
        let extra = self.additions(add_special_tokens);
        if limit.is_some_and(|l| extra >= l) && !text.is_empty() {
            // The post-processor alone reaches the limit.
            return Ok(Tally {
                tokens: extra,
                complete: false,
            });
        }
        let model_limit = limit.map(|l| l - extra.min(l));
        if let Some(c) = parallel.filter(|c| self.text_cuts && text.len() >= c.min_text_bytes) {
            let parts = (text.len() / c.part_bytes.max(1)).max(2);
            let cuts = super::cuts::find_cuts(text, parts, CUT_WINDOW);
            if !cuts.is_empty() {
                let tally = count_parts(tokenizer, text, &cuts, model_limit)?;
                return Ok(Tally {
                    tokens: tally.tokens.saturating_add(extra),
                    complete: tally.complete,
                });
            }
        }
        let pre = pre_tokenize(tokenizer, text)?;
        let splits = pre.get_splits(OffsetReferential::Normalized, OffsetType::None);
        let model = tokenizer.get_model();
        let tally = match parallel {
            Some(c) if self.parallel_safe && splits.len() >= c.min_splits.max(2) => {
                count_parallel(model, &splits, model_limit, c.chunk_splits.max(1))?
            }
            _ => count_sequential(model, &splits, model_limit, &AtomicBool::new(false), None)?,
        };
        Ok(Tally {
            tokens: tally.tokens.saturating_add(extra),
            complete: tally.complete,
        })
    }

    /// [`Self::count`] through the count cache (`cache.rs`): the text is cut
    /// at content-chosen safe points, remembered pieces are summed, and only
    /// the others are tokenized (on the pool when `parallel`), stopping once
    /// the running total reaches `limit`. Falls back to [`Self::count`] for
    /// short texts and tokenizers the cut is not argued for.
    #[allow(clippy::too_many_arguments)]
    pub fn count_cached(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
        parallel: Option<Chunking>,
        cache: &CountCache,
        key: CacheKey,
    ) -> Result<Tally, CountError> {
        if !self.text_cuts || text.len() < cache.min_text_bytes() {
            return self.count(tokenizer, text, add_special_tokens, limit, parallel);
        }
        let extra = self.additions(add_special_tokens);
        if limit.is_some_and(|l| extra >= l) {
            return Ok(Tally {
                tokens: extra,
                complete: false,
            });
        }
        let model_limit = limit.map(|l| l - extra);
        let mut pieces = Vec::new();
        let mut start = 0;
        for c in super::cache::content_cuts(text) {
            pieces.push(&text[start..c]);
            start = c;
        }
        pieces.push(&text[start..]);
        let keys: Vec<u128> = pieces
            .iter()
            .map(|p| cache.key_of(key.tokenizer, key.partition, p))
            .collect();
        let known = cache.lookup(key.partition, &keys);
        let remembered: usize = known.iter().flatten().map(|&n| n as usize).sum();
        let missing: Vec<usize> = (0..pieces.len()).filter(|&i| known[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(Tally {
                tokens: remembered + extra,
                complete: true,
            });
        }
        if model_limit.is_some_and(|l| remembered >= l) {
            return Ok(Tally {
                tokens: remembered + extra,
                complete: false,
            });
        }
        let stop = AtomicBool::new(false);
        let total = AtomicUsize::new(remembered);
        let model = tokenizer.get_model();
        let one = |i: &usize| -> Result<Option<(usize, Tally)>, CountError> {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let pre = pre_tokenize(tokenizer, pieces[*i])?;
            let splits = pre.get_splits(OffsetReferential::Normalized, OffsetType::None);
            let t = match parallel {
                // A long stretch without a safe cut (CJK text, say) is
                // still spread over the pool, split by split.
                Some(c) if self.parallel_safe && splits.len() >= c.min_splits.max(2) => {
                    let left = model_limit.map(|l| l.saturating_sub(total.load(Ordering::Relaxed)));
                    let t = count_parallel(model, &splits, left, c.chunk_splits.max(1))?;
                    total.fetch_add(t.tokens, Ordering::Relaxed);
                    t
                }
                _ => count_sequential(model, &splits, model_limit, &stop, Some(&total))?,
            };
            if model_limit.is_some_and(|l| total.load(Ordering::Relaxed) >= l) {
                stop.store(true, Ordering::Relaxed);
            }
            Ok(Some((*i, t)))
        };
        let counted: Vec<Result<Option<(usize, Tally)>, CountError>> = match parallel {
            Some(_) if self.parallel_safe && missing.len() > 1 => {
                use rayon::prelude::*;
                pool().install(|| missing.par_iter().map(one).collect())
            }
            _ => missing.iter().map(one).collect(),
        };
        let mut sum = Tally {
            tokens: remembered,
            complete: true,
        };
        let mut learned = Vec::with_capacity(counted.len());
        for c in counted {
            match c? {
                Some((i, t)) => {
                    sum.tokens += t.tokens;
                    sum.complete &= t.complete;
                    if t.complete {
                        // Counts of a piece fit: a piece is at most the text.
                        learned.push((keys[i], u32::try_from(t.tokens).unwrap_or(u32::MAX)));
                    }
                }
                None => sum.complete = false,
            }
        }
        if learned.iter().all(|&(_, n)| n < u32::MAX) {
            cache.insert(key.partition, &learned);
        }
        Ok(Tally {
            tokens: sum.tokens.saturating_add(extra),
            complete: sum.complete,
        })
    }

    /// The first id `encode(text, add_special_tokens)` produces, if any.
    pub fn first_id(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Option<u32>, CountError> {
        let pre = pre_tokenize(tokenizer, text)?;
        let mut first: Vec<Token> = Vec::new();
        for (piece, _, tokens) in pre.get_splits(OffsetReferential::Normalized, OffsetType::None) {
            first = match tokens {
                Some(t) => t.clone(),
                None => tokenizer.get_model().tokenize(piece).map_err(tok_err)?,
            };
            if !first.is_empty() {
                break;
            }
        }
        // Post-process what starts the sequence: a processor that prepends
        // tokens puts them first whatever follows.
        let enc = tokenizer
            .post_process(Encoding::from_tokens(first, 0), None, add_special_tokens)
            .map_err(tok_err)?;
        Ok(enc.get_ids().first().copied())
    }
}

fn tok_err(e: impl std::fmt::Display) -> CountError {
    CountError::Tokenizer(e.to_string())
}

/// `extract_and_normalize` then the pre-tokenizer, as `encode_single_sequence` does.
/// An NFC normalizer is skipped on ASCII text, which NFC leaves unchanged
/// (ASCII characters neither decompose nor compose with each other).
fn pre_tokenize(tokenizer: &Tokenizer, text: &str) -> Result<PreTokenizedString, CountError> {
    let normalizer = tokenizer
        .get_normalizer()
        .filter(|n| !(matches!(n, NormalizerWrapper::NFC(_)) && text.is_ascii()));
    let mut pre = tokenizer
        .get_added_vocabulary()
        .extract_and_normalize(normalizer, text);
    if let Some(p) = tokenizer.get_pre_tokenizer() {
        p.pre_tokenize(&mut pre).map_err(tok_err)?;
    }
    Ok(pre)
}

type Split<'a> = (&'a str, (usize, usize), &'a Option<Vec<Token>>);

fn split_len<M: Model>(
    model: &M,
    piece: &str,
    tokens: &Option<Vec<Token>>,
) -> Result<usize, CountError> {
    match tokens {
        // An added token extracted before the model runs.
        Some(t) => Ok(t.len()),
        None => model.tokenize(piece).map(|t| t.len()).map_err(tok_err),
    }
}

/// Counts `splits` in order. `stop` is raised by whichever task reaches the
/// limit first; `shared` is the running total across tasks.
fn count_sequential<M: Model>(
    model: &M,
    splits: &[Split<'_>],
    limit: Option<usize>,
    stop: &AtomicBool,
    shared: Option<&AtomicUsize>,
) -> Result<Tally, CountError> {
    let mut sum = 0usize;
    for (i, (piece, _, tokens)) in splits.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Ok(Tally {
                tokens: sum,
                complete: false,
            });
        }
        let n = split_len(model, piece, tokens)?;
        sum += n;
        let Some(limit) = limit else { continue };
        let reached = match shared {
            Some(total) => total.fetch_add(n, Ordering::Relaxed) + n >= limit,
            None => sum >= limit,
        };
        if reached && i + 1 < splits.len() {
            stop.store(true, Ordering::Relaxed);
            return Ok(Tally {
                tokens: sum,
                complete: false,
            });
        }
    }
    Ok(Tally {
        tokens: sum,
        complete: true,
    })
}

/// Contiguous chunks of splits on the counting pool, summed. When one task
/// sees the shared total reach the limit, the others stop at their next split;
/// what was counted is still an exact count of those splits, so the sum stays
/// a lower bound.
fn count_parallel<M: Model + Sync>(
    model: &M,
    splits: &[Split<'_>],
    limit: Option<usize>,
    chunk_splits: usize,
) -> Result<Tally, CountError> {
    use rayon::prelude::*;
    let stop = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let parts: Vec<Result<Tally, CountError>> = pool().install(|| {
        splits
            .par_chunks(chunk_splits)
            .map(|chunk| count_sequential(model, chunk, limit, &stop, Some(&total)))
            .collect()
    });
    let mut sum = Tally {
        tokens: 0,
        complete: true,
    };
    for part in parts {
        let part = part?;
        sum.tokens += part.tokens;
        sum.complete &= part.complete;
    }
    // A task stopped by another one may have been its last chunk: the sum is
    // complete exactly when no split was skipped.
    Ok(sum)
}

/// The text cut at `cuts`, each part through the whole pipeline on the
/// counting pool. A part not yet started when the limit is reached is skipped.
fn count_parts(
    tokenizer: &Tokenizer,
    text: &str,
    cuts: &[usize],
    limit: Option<usize>,
) -> Result<Tally, CountError> {
    use rayon::prelude::*;
    let mut parts = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &c in cuts {
        parts.push(&text[start..c]);
        start = c;
    }
    parts.push(&text[start..]);
    let stop = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let model = tokenizer.get_model();
    let tallies: Vec<Result<Tally, CountError>> = pool().install(|| {
        parts
            .par_iter()
            .map(|part| {
                if stop.load(Ordering::Relaxed) {
                    return Ok(Tally {
                        tokens: 0,
                        complete: false,
                    });
                }
                let pre = pre_tokenize(tokenizer, part)?;
                let splits = pre.get_splits(OffsetReferential::Normalized, OffsetType::None);
                let t = count_sequential(model, &splits, limit, &stop, Some(&total))?;
                if limit.is_some_and(|l| total.load(Ordering::Relaxed) >= l) {
                    stop.store(true, Ordering::Relaxed);
                }
                Ok(t)
            })
            .collect()
    });
    let mut sum = Tally {
        tokens: 0,
        complete: true,
    };
    for t in tallies {
        let t = t?;
        sum.tokens += t.tokens;
        sum.complete &= t.complete;
    }
    Ok(sum)
}

/// Threads for intra-request parallelism, one per core.
fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("pg-count-{i}"))
            .start_handler(|_| yield_to_io())
            .build()
            .expect("the counting pool starts")
    })
}

/// Makes the calling thread, which counts, yield the CPU to the event loops
/// when both want it: nice +10 gives it about a tenth of the share of a
/// thread at nice 0 when they compete, and all of it otherwise. Counting is
/// bulk work; the loops answer everyday requests, sheds and `/healthz`,
/// which otherwise wait behind prompts being counted on every core.
/// Linux applies `setpriority` to one thread (its thread id); lowering a
/// priority needs no privilege. Best effort: a refusal changes nothing.
pub fn yield_to_io() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), COUNTING_NICE);
}

#[cfg(target_os = "linux")]
const COUNTING_NICE: i32 = 10;

/// Threads in the intra-request counting pool.
pub fn pool_threads() -> usize {
    pool().current_num_threads()
}
