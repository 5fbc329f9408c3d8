//! Counting: prompt units → token counts, exactly as the SGLang release
//! behind the guard computes `len(prompt_ids)`. Nothing in here knows about
//! HTTP: this crate's dependencies have no HTTP, async runtime or RPC library.

mod anthropic;
mod bound;
pub mod cache;
mod chat_api;
mod cuts;
pub mod encoder;
pub mod fast;
pub mod lookup;
pub mod model;
pub mod ollama;
mod preprocess;
pub mod py;
pub mod release;
mod responses;
pub mod route;
pub mod serving;
pub mod template;
pub mod tokenizer;
pub(crate) mod unicode;
#[rustfmt::skip]
mod unicode_tables;
mod wire;

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

pub use bound::BoundRule;
pub use encoder::Encoder;
pub use fast::{Chunking, Tally};
pub use model::ModelFiles;
pub use release::{Release, Releases};
pub use serving::{ServerConfig, Unmodelled};
pub use template::{ChatTemplate, ContentFormat, TemplateError};
pub use tokenizer::{TextTokenizer, TokenizerClass, TokenizerConfig, Transformers};

use encoder::{dsv4, Prompt};
use preprocess::{ChatInputs, Prepared};
use release::{ChatRules, Consulted, EffortVariable};
use template::RenderContext;

/// What SGLang turns into one sequence (one `Req`). A batch is several units.
#[derive(Debug, Clone)]
pub enum Unit {
    /// A whole `/v1/chat/completions` body: SGLang's preprocessing, the chat
    /// template and the encode rule all depend on fields across the body.
    Chat(Arc<Value>),
    /// A text encoded with `tokenizer(text)` (default `add_special_tokens=True`).
    Text(String),
    /// Token ids given by the client: counted as given.
    Ids(usize),
    /// `input_embeds`: one token per vector.
    Embeds(usize),
    /// A cross-encoder pair, `tokenizer([[a, b]])`: both texts plus whatever
    /// the post-processor's pair template adds.
    Pair(String, String),
    /// One sequence assembled from separately encoded pieces (`/v1/score`).
    Joined(Vec<Piece>),
    /// A chat-shaped body of another API, turned into a chat prompt exactly as
    /// SGLang's handler for that API turns it (see [`ChatApi`]).
    ChatApi(ChatApi, Arc<Value>),
    /// A unit of a request that also carries `image_data` / `video_data` /
    /// `audio_data` (`/generate`-style): the inner count plus, per media item,
    /// the model's configured upper bound; refused when a kind has no bound.
    Media(Box<Unit>, MediaItems),
}

/// The per-model opt-in for multimodal input (`multimodal_*_tokens`): a
/// configured conservative UPPER BOUND of tokens per media item, not an exact
/// count. `None` for a kind: its items are refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaBounds {
    pub image: Option<usize>,
    pub video: Option<usize>,
    pub audio: Option<usize>,
}

/// The kinds of media a request can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    Video,
    Audio,
}

impl MediaKind {
    /// How an operator opts in to this kind: the setting that bounds its tokens.
    pub fn opt_in(self) -> &'static str {
        match self {
            MediaKind::Image => "`multimodal_image_tokens` (--multimodal-image-tokens)",
            MediaKind::Video => "`multimodal_video_tokens` (--multimodal-video-tokens)",
            MediaKind::Audio => "`multimodal_audio_tokens` (--multimodal-audio-tokens)",
        }
    }
}

impl MediaBounds {
    pub fn bound(&self, kind: MediaKind) -> Option<usize> {
        match kind {
            MediaKind::Image => self.image,
            MediaKind::Video => self.video,
            MediaKind::Audio => self.audio,
        }
    }

    /// The tokens `items` are charged, or the refusal of the first field
    /// present whose kind has no bound (even an empty one: fail closed).
    pub fn charge(&self, items: &MediaItems) -> Result<usize, CountError> {
        let mut total = 0usize;
        for (kind, field, n) in [
            (MediaKind::Image, "image_data", items.image),
            (MediaKind::Video, "video_data", items.video),
            (MediaKind::Audio, "audio_data", items.audio),
        ] {
            let Some(n) = n else { continue };
            let bound = self.bound(kind).ok_or_else(|| {
                CountError::Unsupported(format!(
                    "`{field}` is refused: its token length is set by the multimodal processor, \
                     not the body; to admit it, set {} to an upper bound of the tokens one item takes",
                    kind.opt_in()
                ))
            })?;
            total = total.saturating_add(n.saturating_mul(bound));
        }
        Ok(total)
    }
}

/// Media items of a `/generate`-style request, per kind: `None` when the
/// field is absent or null, else the number of items it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaItems {
    pub image: Option<usize>,
    pub video: Option<usize>,
    pub audio: Option<usize>,
}

impl MediaItems {
    pub fn is_empty(&self) -> bool {
        self.image.is_none() && self.video.is_none() && self.audio.is_none()
    }
}

/// The chat-shaped APIs besides OpenAI chat, each with its own conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatApi {
    /// `/v1/responses`: `serving_responses.py::_make_request`, then the chat path.
    Responses,
    /// `/v1/messages`: `anthropic/serving.py::_convert_to_chat_completion_request`,
    /// then the chat path.
    Anthropic,
    /// Ollama's `/api/chat`: `apply_chat_template(tokenize=True)` on the bare
    /// messages, no SGLang preprocessing (`ollama/serving.py::handle_chat`).
    Ollama,
}

/// Part of a [`Unit::Joined`] sequence.
#[derive(Debug, Clone)]
pub enum Piece {
    Text {
        text: String,
        add_special_tokens: bool,
    },
    /// Ids given by the client, or tokens SGLang inserts (delimiters).
    Tokens(usize),
}

/// Why a unit could not be counted. Each of these is a refusal: the guard
/// never forwards what it could not count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CountError {
    /// SGLang itself refuses the request (pydantic validation or a request check).
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<&'static str>,
    },
    /// The chat template raised on both of SGLang's attempts.
    #[error("chat template error: {0}")]
    Template(String),
    /// Content whose token length is not visible in the body (images, audio, ...).
    #[error("{0}")]
    Unsupported(String),
    /// The model directory has a template but no `tokenizer.json`.
    #[error("no tokenizer.json for this model: it can render templates but not count")]
    NoTokenizer,
    #[error("tokenizer failed: {0}")]
    Tokenizer(String),
}

impl CountError {
    pub fn invalid(message: impl Into<String>) -> Self {
        CountError::Invalid {
            message: message.into(),
            param: None,
        }
    }
}

/// SGLang refuses the request (pydantic validation or a request check).
pub(crate) fn invalid(message: impl Into<String>) -> CountError {
    CountError::invalid(message)
}

/// As [`invalid`], pointing at the request field at fault.
pub(crate) fn invalid_param(message: impl Into<String>, param: &'static str) -> CountError {
    CountError::Invalid {
        message: message.into(),
        param: Some(param),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Everything needed to count one model's prompts: its files, and the
/// serving profile they are counted under (the server's configuration, and
/// for each family of releases the server may run, how that family builds
/// prompts). A prompt's count is the largest any of those families builds.
pub struct ModelCounter {
    files: Arc<ModelFiles>,
    server: Arc<ServerConfig>,
    /// One per distinct way the server's possible releases build a prompt,
    /// newest first; never empty. One for a server whose release is known.
    builds: Vec<Build>,
}

/// How one family of releases (or several that build prompts alike) turns
/// a model's requests into prompt ids: its chat rules, its encoder and its
/// tokenizer.
#[derive(Clone)]
struct Build {
    files: Arc<ModelFiles>,
    server: Arc<ServerConfig>,
    /// The families counted by this build, newest first.
    releases: Vec<Release>,
    /// Their chat rules (equal for every family here).
    rules: ChatRules,
    /// The `transformers` their releases load the tokenizer with.
    generation: Transformers,
    encoder: Encoder,
    /// Equal for builds whose encoders are the same ([`Encoder::same_as`]).
    encoder_key: u64,
    /// `TemplateManager.jinja_template_content_format`.
    content_format: ContentFormat,
    /// `default_chat_template_kwargs["chat_template"]`, compiled: every
    /// request renders with it (`apply_chat_template(chat_template=...)`).
    kwarg_template: Option<(String, Arc<ChatTemplate>)>,
    /// A Qwen3(-VL) reranker template: SGLang then scores rerank requests through
    /// a prompt it renders itself rather than cross-encoder pairs.
    decoder_reranker: bool,
    /// What the Responses, Anthropic and Ollama conversions need to know about the model.
    api: chat_api::ModelTraits,
    /// The multimodal opt-in: per-item upper bounds (none by default: media refused).
    media: MediaBounds,
    /// The chat preprocessing options of `/v1/chat/completions` for this
    /// model ([`options_for`]), made once.
    options: preprocess::Options,
    /// The template reads `reasoning_effort`, which families pass it
    /// differently ([`ChatInputs::template_kwargs`]): builds that differ in
    /// that rule then count their own prompts.
    reads_effort: bool,
}

/// The chat preprocessing options of a model whose chat goes through
/// `encoder` on `server`.
fn options_for(
    encoder: &Encoder,
    server: &ServerConfig,
    media: MediaBounds,
) -> preprocess::Options {
    preprocess::Options {
        media,
        style: encoder.message_style(),
        wire: encoder.reads_wire(),
        body_encoder: encoder.reads_body(),
        low_effort_template: encoder.jinja().is_some_and(|j| {
            j.template.as_ref().is_ok_and(|(source, _)| {
                source.contains("low_effort") && source.contains("truncate_history_thinking")
            })
        }),
        ..preprocess::Options::for_server(server)
    }
}

// The counter is shared across request handlers.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ModelCounter>();
};

/// How a count was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CountMethod {
    /// Tokenized to the end: the exact count.
    Exact,
    /// Not tokenized: an upper bound below the limit proved the prompt fits
    /// (`bound.rs`); the number is that bound, not a count.
    Bound,
    /// Tokenizing stopped once the count reached the limit: the number is a
    /// lower bound, at least the limit.
    EarlyExit,
}

impl CountMethod {
    /// The `method` label of `prefill_guard_count_method_total`.
    pub fn label(self) -> &'static str {
        match self {
            CountMethod::Exact => "exact",
            CountMethod::Bound => "bound",
            CountMethod::EarlyExit => "early_exit",
        }
    }
}

/// A unit's count and how it was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// Exact for [`CountMethod::Exact`], an upper bound below the limit for
    /// [`CountMethod::Bound`], a lower bound at or above it for
    /// [`CountMethod::EarlyExit`].
    pub tokens: usize,
    pub method: CountMethod,
}

/// How [`ModelCounter::count_with`] may decide.
#[derive(Debug, Clone, Default)]
pub struct CountPolicy {
    /// The unit's limit (`L >= limit` is refused); `None`: count everything exactly.
    pub limit: Option<usize>,
    /// Never decide by the upper bound (`exact_counting`).
    pub exact_only: bool,
    /// Spread long texts over the counting pool.
    pub parallel: bool,
    /// Remember and reuse the counts of long texts' pieces (`cache.rs`).
    pub cache: Option<cache::CacheScope>,
}

/// One counting pass: either upper bounds, or exact counts with an optional
/// early stop. Counts compose by sums, maxima and `n - 1`-style BOS removal,
/// all monotone, so bounds compose into a bound and a stopped count into a
/// lower bound.
struct Ctx {
    bound: bool,
    limit: Option<usize>,
    parallel: bool,
    cache: Option<cache::CacheScope>,
    /// A text was measured by its bound.
    used_bound: std::cell::Cell<bool>,
    /// A text had no bound: the bound pass decides nothing.
    unbounded: std::cell::Cell<bool>,
    /// A text's counting stopped at the limit.
    stopped: std::cell::Cell<bool>,
}

impl Ctx {
    fn bound() -> Self {
        Self {
            bound: true,
            ..Self::exact(None, false, None)
        }
    }

    fn exact(limit: Option<usize>, parallel: bool, cache: Option<cache::CacheScope>) -> Self {
        Self {
            bound: false,
            limit,
            parallel,
            cache,
            used_bound: Default::default(),
            unbounded: Default::default(),
            stopped: Default::default(),
        }
    }
}

/// The wall clock `strftime_now` reads; pinned for reproducible counts.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    #[default]
    Local,
    Fixed(chrono::NaiveDateTime),
}

impl Clock {
    pub fn now(&self) -> chrono::NaiveDateTime {
        match self {
            Clock::Local => chrono::Local::now().naive_local(),
            Clock::Fixed(t) => *t,
        }
    }
}

impl ModelCounter {
    /// Loads a model directory and counts as a server with SGLang's
    /// default flags would (see [`Self::for_server`]).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let files = Arc::new(ModelFiles::load(dir)?);
        Self::for_server(files, Arc::new(ServerConfig::default())).map_err(|problems| {
            LoadError::Invalid {
                path: dir.display().to_string(),
                message: problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        })
    }

    /// Counts `files` as a server configured as `server` does: for each
    /// family of releases it may run, the encoder that family selects, its
    /// template, its chat rules. Fails with the settings the guard does not
    /// model (for any of those families).
    pub fn for_server(
        files: Arc<ModelFiles>,
        server: Arc<ServerConfig>,
    ) -> Result<Self, Vec<Unmodelled>> {
        Self::for_servers(files, vec![server])
    }

    /// Counts `files` as each of `servers` does (workers that run different
    /// flags during a rolling restart), the larger count winning. The first
    /// is the configuration reported; all must wrap completions alike
    /// (`completion_template` applies before any build).
    pub fn for_servers(
        files: Arc<ModelFiles>,
        servers: Vec<Arc<ServerConfig>>,
    ) -> Result<Self, Vec<Unmodelled>> {
        let server = servers[0].clone();
        let mut builds: Vec<Build> = Vec::new();
        for config in &servers {
            if config.completion_template != server.completion_template {
                return Err(vec![Unmodelled {
                    setting: "completion_template",
                    value: "differs between workers".into(),
                    why: "workers that wrap completions differently cannot be counted both ways; \
                          finish the rollout"
                        .into(),
                }]);
            }
            for release in config.releases.iter().rev() {
                let build = Build::new(&files, config, release, &builds)?;
                let same = builds
                    .iter_mut()
                    .find(|b| Arc::ptr_eq(&b.server, config) && b.builds_like(&build));
                match same {
                    Some(same) => same.releases.push(release),
                    None => builds.push(build),
                }
            }
        }
        Ok(Self {
            files,
            server,
            builds,
        })
    }

    /// The units of a request as the server's configuration turns them:
    /// `--completion-template` wraps a `/v1/completions` prompt for
    /// fill-in-the-middle (`generate_completion_prompt_from_request`), a
    /// list prompt included, which then becomes one text: Python's `str()`
    /// of the list.
    pub fn server_units(
        &self,
        route: crate::route::Route,
        body: &Value,
        units: Vec<Unit>,
    ) -> Result<Vec<Unit>, CountError> {
        let Some(fim) = self.server.completion_template else {
            return Ok(units);
        };
        if route != crate::route::Route::Completions {
            return Ok(units);
        }
        let suffix = match body.get("suffix") {
            None | Some(Value::Null) => "None".to_string(),
            Some(Value::String(s)) if s.is_empty() => return Ok(units),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(invalid_param(
                    "suffix: Input should be a valid string",
                    "suffix",
                ))
            }
        };
        let prompt = match &body["prompt"] {
            Value::String(s) => s.clone(),
            Value::Array(items) => python_str_of_prompt_list(items)?,
            _ => {
                return Err(invalid_param(
                    "prompt: Input should be a valid string",
                    "prompt",
                ))
            }
        };
        Ok(vec![Unit::Text(fim.wrap(&prompt, &suffix))])
    }

    /// The files this counter counts with (shared by every profile).
    pub fn files(&self) -> &Arc<ModelFiles> {
        &self.files
    }

    /// The server configuration this counter counts under.
    pub fn server(&self) -> &ServerConfig {
        &self.server
    }

    /// The encoder chat requests go through on the newest release the
    /// server may run.
    pub fn encoder(&self) -> &Encoder {
        &self.builds[0].encoder
    }

    /// Admits media items of the kinds `bounds` sets, each counted as its bound.
    pub fn set_media_bounds(&mut self, bounds: MediaBounds) {
        for build in &mut self.builds {
            build.media = bounds;
            build.options.media = bounds;
        }
    }

    /// SGLang's `supports_inline_system` for this model's template as the guard
    /// reads it (on the newest release the server may run), `None` when it
    /// cannot tell (then both readings are counted).
    pub fn inline_system_support(&self) -> Option<bool> {
        self.builds[0].api.inline_system()
    }

    pub fn can_count(&self) -> bool {
        self.files.tokenizer.is_some()
    }

    /// The token count SGLang computes for one unit, exactly.
    pub fn count(&self, unit: &Unit, clock: Clock) -> Result<usize, CountError> {
        self.count_with(unit, clock, CountPolicy::default())
            .map(|c| c.tokens)
    }

    /// Counts one unit under `policy`: with a limit, an upper bound below it
    /// decides without tokenizing (unless `exact_only`), and exact counting
    /// stops once the count reaches it.
    pub fn count_with(
        &self,
        unit: &Unit,
        clock: Clock,
        policy: CountPolicy,
    ) -> Result<Counted, CountError> {
        if let (Some(limit), false) = (policy.limit, policy.exact_only) {
            if let Some(decided) = self.decide_by_bound(unit, clock, limit)? {
                return Ok(decided);
            }
        }
        self.count_exact(unit, clock, policy)
    }

    /// Whether this model's tokenizer admits an upper bound at all (`bound.rs`):
    /// without one, [`Self::decide_by_bound`] only decides units that need
    /// no tokenizer.
    pub fn has_bound(&self) -> bool {
        self.builds
            .iter()
            .all(|b| b.tokenizer().is_ok_and(|t| t.bound_rule().has_bound()))
    }

    /// The bound step of [`Self::count_with`] alone, without tokenizing:
    /// `Some` when it decides the unit (an upper bound below `limit`, or a
    /// unit that needs no tokenizer, which is then exact), `None` when only
    /// an exact count can. Its cost is the template render and one pass over
    /// the rendered bytes, so it is cheap enough to run anywhere.
    pub fn decide_by_bound(
        &self,
        unit: &Unit,
        clock: Clock,
        limit: usize,
    ) -> Result<Option<Counted>, CountError> {
        let ctx = Ctx::bound();
        let n = self.count_in(unit, clock, &ctx)?;
        if !ctx.used_bound.get() {
            // Nothing was tokenized: `n` is exact (ids, embeddings).
            return Ok(Some(Counted {
                tokens: n,
                method: CountMethod::Exact,
            }));
        }
        Ok((!ctx.unbounded.get() && n < limit).then_some(Counted {
            tokens: n,
            method: CountMethod::Bound,
        }))
    }

    /// The exact step of [`Self::count_with`]: tokenizes, stopping at
    /// `policy.limit` if there is one (the bound is not consulted).
    pub fn count_exact(
        &self,
        unit: &Unit,
        clock: Clock,
        policy: CountPolicy,
    ) -> Result<Counted, CountError> {
        let ctx = Ctx::exact(policy.limit, policy.parallel, policy.cache.clone());
        let n = self.count_in(unit, clock, &ctx)?;
        if !ctx.stopped.get() {
            return Ok(Counted {
                tokens: n,
                method: CountMethod::Exact,
            });
        }
        if policy.limit.is_some_and(|l| n >= l) {
            return Ok(Counted {
                tokens: n,
                method: CountMethod::EarlyExit,
            });
        }
        // Every composition of counts is monotone, so a stopped count is at
        // least the limit; should that ever not hold, count it all (fail closed).
        let ctx = Ctx::exact(None, policy.parallel, policy.cache);
        Ok(Counted {
            tokens: self.count_in(unit, clock, &ctx)?,
            method: CountMethod::Exact,
        })
    }

    /// A unit's count: the largest count of any build. A build that refuses
    /// the unit as SGLang would (its release refuses the request) is passed
    /// over when another counts it; any other failure refuses the unit.
    fn count_in(&self, unit: &Unit, clock: Clock, ctx: &Ctx) -> Result<usize, CountError> {
        if let [only] = &self.builds[..] {
            return only.count_in(unit, clock, ctx);
        }
        if let Unit::Chat(body) = unit {
            return self.count_chat(body, clock, ctx);
        }
        let mut best = Largest::default();
        let mut counted_with: Vec<(u64, usize)> = Vec::new();
        for (i, build) in self.builds.iter().enumerate() {
            // Most units depend on the build through its tokenizer alone.
            let key = (
                build.tokenizer_id(),
                if build.tokenizer_only(unit) { 0 } else { i + 1 },
            );
            if counted_with.contains(&key) {
                continue;
            }
            counted_with.push(key);
            best.add(build.count_in(unit, clock, ctx))?;
            if ctx.stopped.get() {
                break;
            }
        }
        best.into_result()
    }

    /// A chat unit on several builds: the preprocessing runs once for every
    /// build whose chat rules agree on the rules it consulted, and a prompt
    /// is counted once per encoder and tokenizer.
    fn count_chat(&self, body: &Arc<Value>, clock: Clock, ctx: &Ctx) -> Result<usize, CountError> {
        let mut prepared: Vec<(PrepKey, Consulted, Result<Arc<Prepared>, CountError>)> = Vec::new();
        let mut counted_with: Vec<(u64, u64, Option<EffortVariable>, usize)> = Vec::new();
        let mut best = Largest::default();
        for build in &self.builds {
            let key = build.prep_key();
            let index = match prepared
                .iter()
                .position(|(k, c, _)| *k == key && c.agrees_with(&build.rules))
            {
                Some(i) => i,
                None => {
                    let consulted = Consulted::new(build.rules);
                    let result = build.prepare_chat(body, &consulted).map(Arc::new);
                    prepared.push((key, consulted, result));
                    prepared.len() - 1
                }
            };
            // Builds whose template reads `reasoning_effort` and which pass
            // it differently count their own prompts.
            let effort = build.reads_effort.then_some(build.rules.effort_variable);
            let counted = (build.tokenizer_id(), build.encoder_key, effort, index);
            let same_prompt = |&(t, e, f, j): &(u64, u64, Option<EffortVariable>, usize)| {
                (t, e, f) == (counted.0, counted.1, counted.2)
                    && (j == index
                        || match (&prepared[j].2, &prepared[index].2) {
                            (Ok(a), Ok(b)) => build.same_prompt(a, b),
                            _ => false,
                        })
            };
            let seen = counted_with.iter().any(same_prompt);
            // Remembered either way: a later build with this preparation
            // then finds it without comparing whole prompts again.
            counted_with.push(counted);
            if seen {
                continue;
            }
            let result = match &prepared[index].2 {
                Ok(p) => build.count_prepared(p, clock, ctx),
                Err(e) => Err(e.clone()),
            };
            best.add(result)?;
            if ctx.stopped.get() {
                break;
            }
        }
        best.into_result()
    }

    /// The chat prompt text after SGLang's preprocessing and the model's
    /// encoder (without a `continue_final_message` prefix), as the oldest
    /// release the server may run builds it. For operators debugging a
    /// template from the CLI; the server never prints or logs prompts.
    pub fn render_chat(&self, body: &Value, clock: Clock) -> Result<String, CountError> {
        let oldest = self.builds.last().expect("at least one build");
        oldest.render_chat(&Arc::new(body.clone()), clock)
    }

    /// The tokenizer of the newest release the server may run.
    pub fn tokenizer(&self) -> Result<&TextTokenizer, CountError> {
        self.builds[0].tokenizer()
    }
}

/// What a chat body's preprocessing depends on besides the body and the
/// chat rules: builds equal in these (and agreeing on the rules consulted)
/// share one preprocessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PrepKey {
    content_format: ContentFormat,
    style: preprocess::MessageStyle,
    wire: bool,
    low_effort_template: bool,
    /// The encoder reads the body itself ([`ChatInputs::body`]).
    keeps_body: bool,
    /// The server configuration (its default kwargs and parsers shape the
    /// preparation): builds of workers on other flags prepare their own.
    server: usize,
}

/// The largest count among builds, and the first refusal in case none counts.
#[derive(Default)]
struct Largest {
    best: Option<usize>,
    refusal: Option<CountError>,
}

impl Largest {
    /// Takes one build's result. A refusal SGLang itself would give (the
    /// request is invalid, or the template raises) only matters when no
    /// build counts; any other failure means the guard cannot see the
    /// length, and refuses the unit at once.
    fn add(&mut self, result: Result<usize, CountError>) -> Result<(), CountError> {
        match result {
            Ok(n) => self.best = Some(self.best.map_or(n, |b| b.max(n))),
            Err(e @ (CountError::Invalid { .. } | CountError::Template(_))) => {
                self.refusal.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn into_result(self) -> Result<usize, CountError> {
        match (self.best, self.refusal) {
            (Some(n), _) => Ok(n),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(0),
        }
    }
}

impl Build {
    /// How the family `release` builds prompts for `files` on `server`.
    /// What an earlier build with the same encoder derived from it (the
    /// template probes, the harmony vocabulary check) is shared, not redone.
    fn new(
        files: &Arc<ModelFiles>,
        server: &Arc<ServerConfig>,
        release: Release,
        earlier: &[Build],
    ) -> Result<Self, Vec<Unmodelled>> {
        let selected = encoder::select(files, server, release)?;
        if let Err(why) = files.tokenizer_for(release.transformers()) {
            return Err(vec![Unmodelled {
                setting: "version",
                value: release.range(),
                why: format!(
                    "SGLang {} loads this tokenizer with transformers {} in a way the guard does not \
                     reproduce: {why}",
                    release.range(),
                    release.transformers().name()
                ),
            }]);
        }
        if let Some((from, why)) = selected.encoder.modelled_from() {
            if release < from {
                return Err(vec![Unmodelled {
                    setting: "version",
                    value: release.range(),
                    why: format!(
                        "{why}; the guard models this encoder for {} and later (state sglang_version when \
                         discovery is off)",
                        from.first()
                    ),
                }]);
            }
        }
        // Only within one server configuration: another (a worker on other
        // flags) has its own kwargs, options and template.
        if let Some(same) = earlier
            .iter()
            .find(|b| Arc::ptr_eq(&b.server, server) && b.encoder.same_as(&selected.encoder))
        {
            return Ok(Self {
                releases: vec![release],
                rules: release.chat_rules(),
                generation: release.transformers(),
                content_format: selected.content_format,
                ..same.clone()
            });
        }
        let kwarg_template = match server.default_chat_template_kwargs.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(Value::String(source)) => {
                let compiled = ChatTemplate::new(source).map_err(|e| {
                    vec![Unmodelled {
                        setting: "default_chat_template_kwargs",
                        value: serving::show(&Value::String(source.clone())),
                        why: format!("its chat_template does not compile: {e}"),
                    }]
                })?;
                Some((source.clone(), Arc::new(compiled)))
            }
            Some(other) => {
                return Err(vec![Unmodelled {
                    setting: "default_chat_template_kwargs",
                    value: serving::show(other),
                    why: "its chat_template is not a string".into(),
                }])
            }
        };
        let source = selected
            .encoder
            .jinja()
            .and_then(|j| j.template.as_ref().ok())
            .map(|(s, t)| (s.clone(), t.clone()));
        let decoder_reranker = source
            .as_ref()
            .is_some_and(|(s, _)| is_decoder_reranker_template(s));
        let api = chat_api::ModelTraits::new(
            files,
            server.arch.as_ref().or(files.arch()),
            &selected.encoder,
            source.as_ref().map(|(s, t)| (&**s, &**t)),
        );
        let options = options_for(&selected.encoder, server, MediaBounds::default());
        let reads_effort = selected.encoder.jinja().is_some_and(|j| {
            j.template
                .as_ref()
                .is_ok_and(|(source, _)| source.contains("reasoning_effort"))
        });
        Ok(Self {
            files: files.clone(),
            server: server.clone(),
            releases: vec![release],
            rules: release.chat_rules(),
            generation: release.transformers(),
            options,
            reads_effort,
            encoder: selected.encoder,
            encoder_key: earlier.len() as u64,
            content_format: selected.content_format,
            kwarg_template,
            decoder_reranker,
            api,
            media: MediaBounds::default(),
        })
    }

    /// Whether `other` builds every prompt as `self` does (same rules,
    /// encoder and tokenizer): then one build counts for both families.
    fn builds_like(&self, other: &Build) -> bool {
        self.rules == other.rules
            && self.tokenizer_id() == other.tokenizer_id()
            && self.encoder.same_as(&other.encoder)
            && self.content_format == other.content_format
    }

    /// Whether this build's encoder turns `a` and `b` into the same prompt:
    /// equal inputs, template kwargs compared only where the template can
    /// see them (a Jinja template reads a variable only by writing its name;
    /// `apply_chat_template`'s own parameters always count). Families that
    /// differ only in a variable the template never names then render once.
    fn same_prompt(&self, a: &Prepared, b: &Prepared) -> bool {
        let source = self.encoder.kwargs_reader();
        let visible = |k: &str| {
            source.is_none_or(|s| s.contains(k))
                || preprocess::APPLY_CHAT_TEMPLATE_PARAMETERS.contains(&k)
        };
        let extras_agree = a
            .extra
            .iter()
            .chain(b.extra.iter())
            .filter(|(k, _)| visible(k))
            .all(|(k, _)| a.extra.get(k) == b.extra.get(k));
        extras_agree
            && a.messages == b.messages
            && a.tools == b.tools
            && a.retry_tools == b.retry_tools
            && a.all_tools == b.all_tools
            && a.encoders_get_all_tools == b.encoders_get_all_tools
            && a.low_effort_unsure == b.low_effort_unsure
            && a.assistant_prefix == b.assistant_prefix
            && a.given_ids == b.given_ids
            && a.media_tokens == b.media_tokens
            && a.reasoning_effort == b.reasoning_effort
            && a.wire == b.wire
            && a.body.as_ref().map(Arc::as_ptr) == b.body.as_ref().map(Arc::as_ptr)
    }

    /// Whether this build counts `unit` with its tokenizer alone (not its
    /// encoder or chat rules).
    fn tokenizer_only(&self, unit: &Unit) -> bool {
        match unit {
            Unit::Ids(_) | Unit::Embeds(_) | Unit::Text(_) | Unit::Joined(_) => true,
            // The decoder-reranker refusal depends on the template.
            Unit::Pair(_, _) => false,
            Unit::Chat(_) | Unit::ChatApi(_, _) => false,
            Unit::Media(inner, _) => self.tokenizer_only(inner),
        }
    }

    /// The identity of the tokenizer this build counts text with.
    fn tokenizer_id(&self) -> u64 {
        self.files
            .tokenizer_for(self.generation)
            .ok()
            .flatten()
            .map_or(0, TextTokenizer::id)
    }

    /// The chat preprocessing options of `/v1/chat/completions` for this model.
    fn chat_options(&self) -> &preprocess::Options {
        &self.options
    }

    fn count_in(&self, unit: &Unit, clock: Clock, ctx: &Ctx) -> Result<usize, CountError> {
        match unit {
            Unit::Ids(n) | Unit::Embeds(n) => Ok(*n),
            // `tokenizer(text)`: default `add_special_tokens=True`.
            Unit::Text(text) => self.measure(ctx, text, true),
            Unit::Chat(body) => self.count_chat(body, clock, ctx),
            Unit::ChatApi(api, body) => self.count_chat_api(*api, body, clock, ctx),
            Unit::Media(inner, items) => {
                let media = self.media.charge(items)?;
                Ok(self.count_in(inner, clock, ctx)?.saturating_add(media))
            }
            Unit::Pair(_, _) if self.decoder_reranker => Err(CountError::Unsupported(
                "rerank on a decoder reranker (Qwen3 reranker template) is not modelled by the guard"
                    .into(),
            )),
            Unit::Pair(a, b) => {
                if ctx.bound {
                    // No bound is derived for the pair template: count it.
                    ctx.used_bound.set(true);
                    ctx.unbounded.set(true);
                    return Ok(0);
                }
                self.tokenizer()?.encode_pair_len(a, b)
            }
            Unit::Joined(pieces) => pieces.iter().try_fold(0usize, |sum, piece| {
                Ok(sum.saturating_add(match piece {
                    Piece::Tokens(n) => *n,
                    Piece::Text {
                        text,
                        add_special_tokens,
                    } => self.measure(ctx, text, *add_special_tokens)?,
                }))
            }),
        }
    }

    /// One text's count under `ctx`: its upper bound, or its exact count
    /// (stopping at the limit, which marks `ctx` stopped).
    fn measure(
        &self,
        ctx: &Ctx,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<usize, CountError> {
        if self.server.skip_tokenizer_init {
            // `TokenizerManager._tokenize_texts` raises without a tokenizer.
            return Err(CountError::invalid(
                "the server runs with --skip-tokenizer-init: it accepts token ids (input_ids) only",
            ));
        }
        let tokenizer = self.tokenizer()?;
        if ctx.bound {
            ctx.used_bound.set(true);
            return Ok(match tokenizer.upper_bound(text, add_special_tokens) {
                Some(b) => b,
                None => {
                    ctx.unbounded.set(true);
                    0
                }
            });
        }
        let tally = tokenizer.tally(
            text,
            add_special_tokens,
            ctx.limit,
            ctx.parallel,
            ctx.cache.as_ref(),
        )?;
        if !tally.complete {
            ctx.stopped.set(true);
        }
        Ok(tally.tokens)
    }

    /// `tokenizer.encode(prefix)` with default specials, a leading BOS removed.
    fn measure_prefix(&self, ctx: &Ctx, prefix: &str) -> Result<usize, CountError> {
        if ctx.bound {
            // The BOS removal only lowers the count.
            return self.measure(ctx, prefix, true);
        }
        let tokenizer = self.tokenizer()?;
        // One more than the limit: up to one token is removed afterwards.
        let limit = ctx.limit.map(|l| l.saturating_add(1));
        let tally = tokenizer.tally(prefix, true, limit, ctx.parallel, ctx.cache.as_ref())?;
        if !tally.complete {
            ctx.stopped.set(true);
            return Ok(tally.tokens.saturating_sub(1));
        }
        let skip = tally.tokens > 0
            && tokenizer.bos_token_id().is_some()
            && tokenizer.first_id(prefix, true)? == tokenizer.bos_token_id();
        Ok(tally.tokens - usize::from(skip))
    }

    /// The chat prompt text after SGLang's preprocessing and the model's
    /// encoder (without a `continue_final_message` prefix). For operators
    /// debugging a template from the CLI; the server never prints or logs
    /// prompts.
    fn render_chat(&self, body: &Arc<Value>, clock: Clock) -> Result<String, CountError> {
        let inputs = self.prepare_chat(body, &Consulted::new(self.rules))?;
        if inputs.given_ids.is_some() {
            // Which prompt the worker builds depends on what is in between.
            return Err(CountError::invalid(
                "the request carries input_ids: a worker that gets them renders no template (the guard \
                 also counts the messages, which a worker behind sglang-router renders)",
            ));
        }
        Ok(match self.encoder.prompt(self, &inputs, clock)? {
            Prompt::Text { text, .. } => text,
            Prompt::Pieces { prompt, .. } => self.spell_pieces(&prompt),
            // The first configuration's: the one a default server runs.
            Prompt::Alternatives(mut texts) => texts.swap_remove(0).0,
        })
    }

    /// What the release's `apply_chat_template` spreads from the tokenizer.
    fn template_variables(&self) -> Result<&[(String, Value)], CountError> {
        self.files
            .template_variables_for(self.generation)
            .map_err(CountError::Unsupported)
    }

    fn tokenizer(&self) -> Result<&TextTokenizer, CountError> {
        self.files
            .tokenizer_for(self.generation)
            .map_err(CountError::Unsupported)?
            .ok_or(CountError::NoTokenizer)
    }

    fn content_format(&self) -> ContentFormat {
        self.content_format
    }

    /// The template the Jinja path renders with: the `chat_template` kwarg
    /// when it is the server's default one, else `tokenizer.chat_template`.
    fn jinja_template(&self, template_override: Option<&str>) -> Result<&ChatTemplate, CountError> {
        match (template_override, &self.kwarg_template) {
            (None, _) => {}
            (Some(src), Some((kwarg, compiled))) if src == kwarg => return Ok(compiled),
            (Some(_), _) => {
                return Err(CountError::Unsupported(
                    "chat_template_kwargs.chat_template: SGLang would render a template supplied by the \
                     request; the guard does not count prompts with client templates"
                        .into(),
                ))
            }
        }
        let jinja = self.encoder.jinja().ok_or_else(|| {
            CountError::Unsupported(format!(
                "the {} encoder renders no Jinja template",
                self.encoder.name()
            ))
        })?;
        jinja
            .template
            .as_ref()
            .map(|(_, t)| &**t)
            .map_err(|e| CountError::Template(e.clone()))
    }

    /// `_apply_jinja_template` → `_render_and_encode_chat_template` →
    /// `_append_assistant_prefix_to_prompt_ids`.
    fn count_chat(&self, body: &Arc<Value>, clock: Clock, ctx: &Ctx) -> Result<usize, CountError> {
        let prepared = self.prepare_chat(body, &Consulted::new(self.rules))?;
        self.count_prepared(&prepared, clock, ctx)
    }

    /// SGLang's chat preprocessing of `body` under this build's rules
    /// (read through `rules`, which records the ones consulted).
    fn prepare_chat(&self, body: &Arc<Value>, rules: &Consulted) -> Result<Prepared, CountError> {
        let mut inputs =
            preprocess::prepare_with(body, self.content_format(), self.chat_options(), rules)?;
        if self.encoder.reads_body() {
            inputs.body = Some(body.clone());
        }
        Ok(inputs)
    }

    /// What [`Self::prepare_chat`] depends on besides the body and the rules.
    fn prep_key(&self) -> PrepKey {
        PrepKey {
            content_format: self.content_format,
            style: self.options.style,
            wire: self.options.wire,
            low_effort_template: self.options.low_effort_template,
            keeps_body: self.options.body_encoder,
            server: Arc::as_ptr(&self.server) as usize,
        }
    }

    fn count_prepared(
        &self,
        inputs: &ChatInputs,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        let rendered = if inputs.low_effort_unsure {
            let mut without = inputs.clone();
            without.extra.shift_remove("low_effort");
            without.low_effort_unsure = false;
            self.count_inputs(inputs, clock, ctx).and_then(|n| {
                if ctx.stopped.get() {
                    return Ok(n);
                }
                Ok(n.max(self.count_inputs(&without, clock, ctx)?))
            })
        } else {
            self.count_inputs(inputs, clock, ctx)
        };
        let Some(ids) = inputs.given_ids else {
            return rendered;
        };
        // The messages may fail to render where the ids would be taken.
        let mut best = Largest::default();
        best.add(Ok(ids))?;
        best.add(rendered)?;
        best.into_result()
    }

    fn count_inputs(
        &self,
        inputs: &ChatInputs,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        let mut n = match self.jinja_bound(inputs, clock, ctx)? {
            Some(bound) => bound,
            None => match self.encoder.prompt(self, inputs, clock)? {
                Prompt::Text {
                    text,
                    add_special_tokens,
                } => self.measure(ctx, &text, add_special_tokens)?,
                Prompt::Pieces { prompt, plain } => return self.count_pieces(ctx, &prompt, &plain),
                Prompt::Alternatives(prompts) => {
                    // `tokenizer.encode(text)` (its BOS after the encoder's), then
                    // the `continue_final_message` prefix without a leading BOS;
                    // the longest.
                    let mut n = 0;
                    for (text, prefix) in prompts {
                        let mut m = self.measure(ctx, &text, true)?;
                        if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
                            m = m.saturating_add(self.measure_prefix(ctx, &prefix)?);
                        }
                        n = n.max(m);
                        if ctx.stopped.get() {
                            break;
                        }
                    }
                    return Ok(n);
                }
            },
        };
        // The multimodal opt-in: each admitted media part adds its configured bound.
        n = n.saturating_add(inputs.media_tokens);
        if let Some(prefix) = inputs.assistant_prefix.as_deref().filter(|p| !p.is_empty()) {
            // The prefix is tokenized on its own, not in context.
            n = n.saturating_add(self.measure_prefix(ctx, prefix)?);
        }
        Ok(n)
    }

    /// The prompt's length: one per special token, text runs measured (a
    /// run recipe encodes without the added vocabulary by the full
    /// tokenizer where that is the same split, else exactly by the plain one).
    fn count_pieces(
        &self,
        ctx: &Ctx,
        prompt: &dsv4::Prompt,
        plain: &encoder::PlainText,
    ) -> Result<usize, CountError> {
        if self.server.skip_tokenizer_init {
            return self.measure(ctx, "", false);
        }
        let mut n = 0usize;
        for piece in &prompt.pieces {
            n = n.saturating_add(match piece {
                dsv4::Piece::Special(_) => 1,
                dsv4::Piece::Text(text) => self.measure(ctx, text, false)?,
                dsv4::Piece::Plain(text) if plain.same_as_full(text) => {
                    self.measure(ctx, text, false)?
                }
                dsv4::Piece::Plain(text) => {
                    if ctx.bound {
                        // Not measured: the bound pass decides nothing.
                        ctx.used_bound.set(true);
                        ctx.unbounded.set(true);
                        0
                    } else {
                        plain
                            .tokenizer
                            .encode_fast(text.as_str(), false)
                            .map_err(|e| CountError::Tokenizer(e.to_string()))?
                            .len()
                    }
                }
            });
            if !ctx.bound && ctx.limit.is_some_and(|l| n >= l) {
                // Every later piece only adds: the prompt is at least this long.
                ctx.stopped.set(true);
                return Ok(n);
            }
        }
        Ok(n)
    }

    /// The prompt as text, special tokens by their spelling (`count
    /// --print-rendered`).
    fn spell_pieces(&self, prompt: &dsv4::Prompt) -> String {
        let mut out = String::new();
        for piece in &prompt.pieces {
            match piece {
                dsv4::Piece::Special(id) => match self
                    .files
                    .tokenizer
                    .as_ref()
                    .and_then(|t| t.inner.id_to_token(*id))
                {
                    Some(t) => out.push_str(&t),
                    None => out.push_str(&format!("<special {id}>")),
                },
                dsv4::Piece::Plain(t) | dsv4::Piece::Text(t) => out.push_str(t),
            }
        }
        out
    }

    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
    /// tools=tools, return_dict=False, **kwargs)`; on any failure SGLang retries
    /// once with each tool flattened to its `function`, and reports the retry's error.
    fn render(&self, inputs: &ChatInputs, clock: Clock) -> Result<String, CountError> {
        self.render_with(inputs, clock, ChatTemplate::render)
    }

    /// The Jinja prompt's upper bound, counted as the template writes it
    /// (`BoundTally`): the bound pass of a plain Jinja model never builds
    /// the prompt, copies the messages into it or reads it again. `None`
    /// where the prompt goes through the text path: an encoder of another
    /// kind, no tokenizer or no bound (which that path reports).
    fn jinja_bound(
        &self,
        inputs: &ChatInputs,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<Option<usize>, CountError> {
        if !ctx.bound || self.server.skip_tokenizer_init {
            return Ok(None);
        }
        // Exhaustive: an encoder added later decides here whether its
        // prompt is the template's text as written.
        match &self.encoder {
            Encoder::Jinja(_) => {}
            Encoder::Glm53(_)
            | Encoder::Dsv32(_)
            | Encoder::Dsv4(_)
            | Encoder::DeepseekRelease(_) => return Ok(None),
        }
        let Ok(tokenizer) = self.tokenizer() else {
            return Ok(None);
        };
        let Some(empty) = tokenizer.bound_tally() else {
            return Ok(None);
        };
        // A fresh tally per attempt: a render that fails and is retried
        // with flattened tools leaves what it wrote in its own.
        let tally = self.render_with(inputs, clock, |template, context| {
            let mut tally = empty.clone();
            template.render_to(context, &mut tally).map(|()| tally)
        })?;
        ctx.used_bound.set(true);
        Ok(Some(tokenizer.upper_bound_of(
            &tally,
            template_add_special_tokens(Some(tokenizer)),
        )))
    }

    /// `_apply_jinja_template`'s rendering: the template SGLang settled on,
    /// with the request's kwargs, retried once with flattened tools; `render`
    /// is the template's text or its measure.
    fn render_with<T>(
        &self,
        inputs: &ChatInputs,
        clock: Clock,
        render: impl Fn(&ChatTemplate, &RenderContext<'_>) -> Result<T, template::TemplateError>,
    ) -> Result<T, CountError> {
        let args = inputs.jinja_arguments_as(self.rules.effort_variable)?;
        let template = self.jinja_template(args.template_override.as_deref())?;
        let now = clock.now();
        let first = RenderContext {
            messages: &inputs.messages,
            tools: inputs.tools.as_ref(),
            documents: args.documents.as_ref(),
            add_generation_prompt: true,
            special_tokens: self.template_variables()?,
            extra: &args.extra,
            now,
        };
        if let Ok(rendered) = render(template, &first) {
            return Ok(rendered);
        }
        let retry = RenderContext {
            tools: inputs.retry_tools.as_ref(),
            ..first
        };
        render(template, &retry).map_err(|e| CountError::Template(e.to_string()))
    }
}

/// The counter as an encoder sees it while building a prompt.
impl encoder::Host for Build {
    fn jinja_prompt(&self, inputs: &ChatInputs, clock: Clock) -> Result<Prompt, CountError> {
        Ok(self.template_text(self.render(inputs, clock)?))
    }

    fn template_text(&self, text: String) -> Prompt {
        Prompt::Text {
            text,
            add_special_tokens: template_add_special_tokens(self.tokenizer().ok()),
        }
    }

    /// `_thinking_requested`: the `thinking` kwarg (server defaults merged
    /// in), else `SGLANG_DEFAULT_THINKING`.
    fn thinking_requested(&self, inputs: &ChatInputs) -> bool {
        match inputs.extra.get("thinking") {
            Some(v) => py::truthy(v),
            None => self.server.env.default_thinking,
        }
    }

    fn effort_variable(&self) -> EffortVariable {
        self.rules.effort_variable
    }

    fn server(&self) -> &ServerConfig {
        &self.server
    }
}

/// `encode_kwargs` of a template's text: `{"add_special_tokens": False}`
/// when `encode("")` is non-empty, else the default (`True`, which then adds
/// nothing, as it does without a tokenizer).
fn template_add_special_tokens(tokenizer: Option<&TextTokenizer>) -> bool {
    tokenizer.is_none_or(|t| !t.auto_adds_specials())
}

/// `str(prompt)` of a validated list prompt: strings by `repr`, token ids
/// (pydantic's lax ints) as integers, nested lists alike.
fn python_str_of_prompt_list(items: &[Value]) -> Result<String, CountError> {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match item {
            Value::String(s) if items.iter().all(Value::is_string) => {
                py::push_str_repr(&mut out, s, py::Repr::Strict).map_err(|e| {
                    CountError::Unsupported(format!("the completion template would print the {e}"))
                })?
            }
            Value::Array(inner) => out.push_str(&python_str_of_prompt_list(inner)?),
            v => match py::lax_int(v) {
                Some(n) => out.push_str(&n.to_string()),
                None => {
                    return Err(invalid_param(
                        "prompt: Input should be a valid list",
                        "prompt",
                    ))
                }
            },
        }
    }
    out.push(']');
    Ok(out)
}

/// `serving_rerank.py::_is_qwen3_reranker_template` (the VL variant contains it).
fn is_decoder_reranker_template(source: &str) -> bool {
    let t = source.to_lowercase();
    t.contains("answer can only be \"yes\" or \"no\"")
        || (t.contains("answer can only be") && t.contains("\"yes\"") && t.contains("\"no\""))
}

/// The shared reference data (`$PREFILL_GUARD_SHARED`, else `shared/`
/// beside the workspace root, two levels above this crate), or `None` with the reason printed. Under CI (`$CI`
/// set) a missing directory fails, naming the path looked at.
#[cfg(test)]
pub(crate) fn shared_dir() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("PREFILL_GUARD_SHARED") {
        Some(d) => std::path::PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    if dir.join("tokenizers").is_dir() {
        return Some(dir);
    }
    let msg = format!(
        "shared reference data not found at {} (set PREFILL_GUARD_SHARED)",
        dir.join("tokenizers").display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipping: {msg}");
    None
}

#[cfg(test)]
mod prompt_list_tests {
    use super::*;
    use serde_json::json;

    /// `str(CompletionRequest(model="m", prompt=p).prompt)` under SGLang
    /// 0.5.23 (crates/count/src/testdata/sglang_env.py) for each `p` below printed
    /// `["a'b", 'é\xa0', 'x\n\\']`, `[[1, 2], [3]]` and `[1, 2, 1]`.
    #[test]
    fn str_of_a_list_prompt_is_pythons() {
        let str_of = |v: Value| python_str_of_prompt_list(v.as_array().unwrap());
        assert_eq!(
            str_of(json!(["a'b", "é\u{a0}", "x\n\\"])).unwrap(),
            r#"["a'b", 'é\xa0', 'x\n\\']"#
        );
        assert_eq!(str_of(json!([[1, 2], [3]])).unwrap(), "[[1, 2], [3]]");
        assert_eq!(str_of(json!([1, "2", true])).unwrap(), "[1, 2, 1]");
        // Python 3.11 prints '\U0001fae8', 3.12 the character: refused.
        assert!(matches!(
            str_of(json!(["\u{1fae8}"])),
            Err(CountError::Unsupported(_))
        ));
    }
}

#[cfg(test)]
mod media_tests {
    use super::*;

    #[test]
    fn media_items_are_charged_their_bound_or_refused() {
        let bounds = MediaBounds {
            image: Some(3),
            video: Some(100),
            audio: None,
        };
        let items = MediaItems {
            image: Some(2),
            video: Some(1),
            audio: None,
        };
        assert_eq!(bounds.charge(&items).unwrap(), 106);
        assert_eq!(bounds.charge(&MediaItems::default()).unwrap(), 0);
        // A field without a bound is refused, even when it holds no item.
        for audio in [Some(0), Some(1)] {
            let refused = bounds.charge(&MediaItems {
                audio,
                ..MediaItems::default()
            });
            match refused {
                Err(CountError::Unsupported(m)) => {
                    assert!(m.contains("`audio_data` is refused"), "{m}")
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        let none = MediaBounds::default().charge(&MediaItems {
            image: Some(1),
            ..MediaItems::default()
        });
        assert!(matches!(none, Err(CountError::Unsupported(_))));
        // Never wraps around.
        let huge = MediaBounds {
            image: Some(usize::MAX),
            ..MediaBounds::default()
        };
        assert_eq!(
            huge.charge(&MediaItems {
                image: Some(2),
                ..MediaItems::default()
            })
            .unwrap(),
            usize::MAX
        );
    }
}

#[cfg(test)]
mod jinja_bound_tests {
    use super::*;

    /// The bound pass measures a Jinja prompt as the template writes it;
    /// that must be the bound of the prompt the text path renders, on every
    /// fixture, every golden chat request and every release's build of it.
    #[test]
    fn the_written_bound_is_the_rendered_texts() {
        let Some(shared) = shared_dir() else { return };
        let cases: Vec<Arc<Value>> = std::fs::read_dir(shared.join("goldens/cases"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|p| {
                let case: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                (case["endpoint"] == "chat").then(|| Arc::new(case["request"].clone()))
            })
            .collect();
        assert!(cases.len() > 20, "{} chat cases", cases.len());
        let (mut compared, mut bounded) = (0, 0);
        for fixture in std::fs::read_dir(shared.join("tokenizers")).unwrap() {
            let dir = fixture.unwrap().path();
            if !dir.is_dir() {
                continue;
            }
            let counter = ModelCounter::load(&dir).unwrap();
            for build in &counter.builds {
                for body in &cases {
                    let Ok(inputs) = build.prepare_chat(body, &Consulted::new(build.rules)) else {
                        continue;
                    };
                    let ctx = Ctx::bound();
                    let written = build.jinja_bound(&inputs, Clock::default(), &ctx);
                    let Ok(Some(written)) = written else {
                        // Not the Jinja path or no bound: the text path decides.
                        assert!(
                            written.is_ok() || build.render(&inputs, Clock::default()).is_err()
                        );
                        continue;
                    };
                    let text = build.render(&inputs, Clock::default()).unwrap();
                    let rendered = build
                        .tokenizer()
                        .unwrap()
                        .upper_bound(&text, template_add_special_tokens(build.tokenizer().ok()))
                        .unwrap();
                    assert_eq!(written, rendered, "{}: {body}", dir.display());
                    assert!(ctx.used_bound.get());
                    compared += 1;
                }
                bounded += usize::from(build.tokenizer().is_ok_and(|t| t.bound_rule().has_bound()));
            }
        }
        eprintln!("{bounded} builds with a bound, {compared} prompts compared");
        // Most fixtures have a bound (bound.rs); each compared every case.
        assert!(
            bounded >= 5 && compared > 100,
            "{bounded} builds, {compared} prompts"
        );
    }
}
