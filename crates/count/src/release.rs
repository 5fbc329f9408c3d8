//! The SGLang releases the guard counts for, grouped into families that build
//! the same prompt ids from the same request and server settings.
//!
//! Every family is one [`Release`], named after its first release. What the
//! families do differently is written once per difference, each a method
//! below named after what SGLang does, answered by where the release falls
//! (families are ordered, and each difference holds over consecutive
//! releases). The boundaries come from reading every release's code
//! (0.4.5 to 0.5.23, `pip download --no-deps sglang==V`) and were checked by
//! running each release's own request handling on the shared cases
//! (`crates/count/src/testdata/gen_releases.py`, `crates/inspect/tests/inspect/releases.rs`).
//!
//! A server whose release is not known (a static configuration that states
//! none, a worker that does not say, workers on different releases) may be
//! any of several families: [`Releases`] holds them, and a prompt is counted
//! as each of them builds it, the largest count winning.

use serde_json::Value;

use super::tokenizer::Transformers;

/// The SGLang release the guard's counts are checked against (the goldens').
pub const REFERENCE_VERSION: &str = "0.5.23";

/// A family of SGLang releases that build the same prompt ids, named after
/// its first release (`V0409post3` is 0.4.9.post3). Ordered oldest first;
/// each family runs to the release before the next one starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Release {
    V0405,
    V0405post1,
    V0405post3,
    V0406post1,
    V0406post2,
    V0406post3,
    V0406post4,
    V0407,
    V0407post1,
    V0408,
    V0409,
    V0409post1,
    V0409post3,
    V0409post4,
    V0409post5,
    V0410,
    V0410post2,
    V0501,
    V0501post3,
    V0502,
    V0503,
    V0504,
    V0506,
    V0506post1,
    V0506post2,
    V0507,
    V0508,
    V0509,
    V0510,
    V0511,
    V0512,
    V0513,
    V0514,
    V0515,
    V0516,
    V0517,
    V0518,
    V0520,
    V0521,
    V0522,
    V0523,
}

use Release::*;

/// `major.minor.patch.post` of an SGLang release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Version(a, b, c, post) = *self;
        write!(f, "{a}.{b}.{c}")?;
        if post > 0 {
            write!(f, ".post{post}")?;
        }
        Ok(())
    }
}

/// The first release of each family, in order.
const STARTS: [(Version, Release); 41] = [
    (Version(0, 4, 5, 0), V0405),
    (Version(0, 4, 5, 1), V0405post1),
    (Version(0, 4, 5, 3), V0405post3),
    (Version(0, 4, 6, 1), V0406post1),
    (Version(0, 4, 6, 2), V0406post2),
    (Version(0, 4, 6, 3), V0406post3),
    (Version(0, 4, 6, 4), V0406post4),
    (Version(0, 4, 7, 0), V0407),
    (Version(0, 4, 7, 1), V0407post1),
    (Version(0, 4, 8, 0), V0408),
    (Version(0, 4, 9, 0), V0409),
    (Version(0, 4, 9, 1), V0409post1),
    (Version(0, 4, 9, 3), V0409post3),
    (Version(0, 4, 9, 4), V0409post4),
    (Version(0, 4, 9, 5), V0409post5),
    (Version(0, 4, 10, 0), V0410),
    (Version(0, 4, 10, 2), V0410post2),
    (Version(0, 5, 1, 0), V0501),
    (Version(0, 5, 1, 3), V0501post3),
    (Version(0, 5, 2, 0), V0502),
    (Version(0, 5, 3, 0), V0503),
    (Version(0, 5, 4, 0), V0504),
    (Version(0, 5, 6, 0), V0506),
    (Version(0, 5, 6, 1), V0506post1),
    (Version(0, 5, 6, 2), V0506post2),
    (Version(0, 5, 7, 0), V0507),
    (Version(0, 5, 8, 0), V0508),
    (Version(0, 5, 9, 0), V0509),
    (Version(0, 5, 10, 0), V0510),
    (Version(0, 5, 11, 0), V0511),
    (Version(0, 5, 12, 0), V0512),
    (Version(0, 5, 13, 0), V0513),
    (Version(0, 5, 14, 0), V0514),
    (Version(0, 5, 15, 0), V0515),
    (Version(0, 5, 16, 0), V0516),
    (Version(0, 5, 17, 0), V0517),
    (Version(0, 5, 18, 0), V0518),
    (Version(0, 5, 20, 0), V0520),
    (Version(0, 5, 21, 0), V0521),
    (Version(0, 5, 22, 0), V0522),
    (Version(0, 5, 23, 0), V0523),
];

impl Release {
    /// Every family, oldest first.
    pub const ALL: [Release; 41] = {
        let mut all = [V0405; 41];
        let mut i = 0;
        while i < STARTS.len() {
            all[i] = STARTS[i].1;
            i += 1;
        }
        all
    };

    /// The family of `version`, or `None` for a release older than 0.4.5
    /// (SGLang had no PD disaggregation before it).
    pub fn of(version: Version) -> Option<Release> {
        STARTS
            .iter()
            .rev()
            .find(|(start, _)| *start <= version)
            .map(|(_, r)| *r)
    }

    /// The family's first release.
    pub fn first(self) -> Version {
        STARTS[self as usize].0
    }

    /// The releases of the family, for messages, `audit` and the README.
    pub fn range(self) -> String {
        match STARTS.get(self as usize + 1) {
            None => format!("{} and later", self.first()),
            Some((next, _)) => {
                let last = PUBLISHED
                    .iter()
                    .rev()
                    .find(|v| *v < next)
                    .expect("every family has a published release");
                if *last == self.first() {
                    last.to_string()
                } else {
                    format!("{}-{last}", self.first())
                }
            }
        }
    }

    /// The `transformers` the family's releases pin, as far as it loads
    /// tokenizers differently.
    pub fn transformers(self) -> Transformers {
        let Version(a, b, c, post) = self.first();
        Transformers::of_sglang((a, b, c), post).expect("every family is 0.4.5 or later")
    }

    /// The chat rules of the family (see [`ChatRules`]).
    pub fn chat_rules(self) -> ChatRules {
        ChatRules {
            list_content: self.list_content(),
            message_fields: self.message_fields(),
            trailing_assistant: self.trailing_assistant(),
            template_kwargs: self.template_kwargs(),
            tool_dump: self.tool_dump(),
            tool_retry: self.tool_retry(),
            tool_call_arguments: self.tool_call_arguments(),
            effort_variable: self.effort_variable(),
            reasoning_inputs: self.reasoning_inputs(),
            deepseek_v3_tool_prompt: self.deepseek_v3_tool_prompt(),
            tool_content_joined: self >= V0511,
            chat_input_ids: self >= V0513,
            schema_types_rewritten: self >= V0513,
            low_effort: self >= V0516,
            encoder_tools: self.encoder_tools(),
        }
    }

    /// How the release detects a Jinja template's content format, or `None`
    /// where it does not and the format is "string": before 0.4.7 (list
    /// content is split per part instead), and for the checkpoint's own
    /// template in 0.4.8-0.4.9.post6 (`_jinja_template_content_format`
    /// stays unset unless `--chat-template` names a file).
    pub fn content_detection(self, template_from_file: bool) -> Option<ContentDetection> {
        match self {
            r if r < V0407 => None,
            r if (V0408..V0410).contains(&r) && !template_from_file => None,
            r if r < V0501 => Some(ContentDetection::MessageLoops),
            r if r < V0503 => Some(ContentDetection::MessageMsgMLoops),
            _ => Some(ContentDetection::KeywordsThenLoops),
        }
    }

    /// How list content reaches the template.
    fn list_content(self) -> ListContent {
        if self < V0407 {
            ListContent::OneMessagePerTextPart
        } else {
            ListContent::ByContentFormat
        }
    }

    /// Which fields of a non-user message reach the template.
    fn message_fields(self) -> MessageFields {
        match self {
            r if r < V0406post3 => MessageFields::RoleAndContent,
            r if r < V0506post2 => MessageFields::ToolCalls,
            r if r < V0520 => MessageFields::Tools,
            r if r < V0523 => MessageFields::Phase,
            _ => MessageFields::Prefix,
        }
    }

    fn trailing_assistant(self) -> TrailingAssistant {
        match self {
            r if r < V0405post3 => TrailingAssistant::AlwaysContinued,
            r if r < V0508 => TrailingAssistant::KeptAsAssistantTurn,
            _ => TrailingAssistant::BecomesUserTurn,
        }
    }

    fn template_kwargs(self) -> TemplateKwargs {
        match self {
            r if r < V0406post1 => TemplateKwargs::NotAField,
            r if r < V0513 => TemplateKwargs::PassedToTokenizingCall,
            _ => TemplateKwargs::Passed,
        }
    }

    fn tool_dump(self) -> ToolDump {
        match self {
            r if r < V0409post3 => ToolDump::Function,
            r if r < V0410 => ToolDump::Wrapped,
            r if r < V0509 => ToolDump::Function,
            r if r < V0511 => ToolDump::Wrapped,
            r if r < V0523 => ToolDump::WrappedDeferLoading,
            _ => ToolDump::ClientKeys,
        }
    }

    fn tool_retry(self) -> ToolRetry {
        if self < V0509 {
            ToolRetry::WrapInFunction
        } else {
            ToolRetry::FunctionOnly
        }
    }

    fn tool_call_arguments(self) -> ToolCallArguments {
        match self {
            r if r < V0409post3 => ToolCallArguments::KeptAsText,
            r if r < V0410 => ToolCallArguments::DecodedIfJson,
            r if r < V0501post3 => ToolCallArguments::KeptAsText,
            r if r < V0514 => ToolCallArguments::AssistantDecoded,
            _ => ToolCallArguments::AssistantObject,
        }
    }

    fn effort_variable(self) -> EffortVariable {
        match self {
            r if r < V0501 => EffortVariable::NotAField,
            r if r < V0510 => EffortVariable::AlwaysMediumByDefault,
            _ => EffortVariable::WhenSet,
        }
    }

    fn reasoning_inputs(self) -> ReasoningInputs {
        match self {
            r if r < V0502 => ReasoningInputs::Ignored,
            r if r < V0510 => ReasoningInputs::EnabledSetsThinking,
            r if r < V0512 => ReasoningInputs::NoneTurnsThinkingOff,
            r if r < V0516 => ReasoningInputs::EnabledSetsBoth,
            _ => ReasoningInputs::EffortSetsBoth,
        }
    }

    fn deepseek_v3_tool_prompt(self) -> bool {
        (V0405post3..V0406post3).contains(&self)
    }

    fn encoder_tools(self) -> EncoderTools {
        if self < V0522 {
            EncoderTools::EveryRequestTool
        } else {
            EncoderTools::AsTheTemplate
        }
    }
}

/// Every SGLang release on PyPI from the first with PD disaggregation, for
/// [`Release::range`].
const PUBLISHED: [Version; 66] = [
    Version(0, 4, 5, 0),
    Version(0, 4, 5, 1),
    Version(0, 4, 5, 2),
    Version(0, 4, 5, 3),
    Version(0, 4, 6, 0),
    Version(0, 4, 6, 1),
    Version(0, 4, 6, 2),
    Version(0, 4, 6, 3),
    Version(0, 4, 6, 4),
    Version(0, 4, 6, 5),
    Version(0, 4, 7, 0),
    Version(0, 4, 7, 1),
    Version(0, 4, 8, 0),
    Version(0, 4, 8, 1),
    Version(0, 4, 9, 0),
    Version(0, 4, 9, 1),
    Version(0, 4, 9, 2),
    Version(0, 4, 9, 3),
    Version(0, 4, 9, 4),
    Version(0, 4, 9, 5),
    Version(0, 4, 9, 6),
    Version(0, 4, 10, 0),
    Version(0, 4, 10, 1),
    Version(0, 4, 10, 2),
    Version(0, 5, 1, 0),
    Version(0, 5, 1, 1),
    Version(0, 5, 1, 2),
    Version(0, 5, 1, 3),
    Version(0, 5, 2, 0),
    Version(0, 5, 3, 0),
    Version(0, 5, 3, 1),
    Version(0, 5, 3, 2),
    Version(0, 5, 3, 3),
    Version(0, 5, 4, 0),
    Version(0, 5, 4, 1),
    Version(0, 5, 4, 2),
    Version(0, 5, 4, 3),
    Version(0, 5, 5, 0),
    Version(0, 5, 5, 1),
    Version(0, 5, 5, 2),
    Version(0, 5, 5, 3),
    Version(0, 5, 6, 0),
    Version(0, 5, 6, 1),
    Version(0, 5, 6, 2),
    Version(0, 5, 7, 0),
    Version(0, 5, 8, 0),
    Version(0, 5, 8, 1),
    Version(0, 5, 9, 0),
    Version(0, 5, 10, 0),
    Version(0, 5, 10, 1),
    Version(0, 5, 11, 0),
    Version(0, 5, 12, 0),
    Version(0, 5, 12, 1),
    Version(0, 5, 13, 0),
    Version(0, 5, 13, 1),
    Version(0, 5, 14, 0),
    Version(0, 5, 15, 0),
    Version(0, 5, 15, 1),
    Version(0, 5, 16, 0),
    Version(0, 5, 17, 0),
    Version(0, 5, 18, 0),
    Version(0, 5, 19, 0),
    Version(0, 5, 20, 0),
    Version(0, 5, 21, 0),
    Version(0, 5, 22, 0),
    Version(0, 5, 23, 0),
];

/// What a family's chat path does differently, one field per difference,
/// each named after what SGLang does ([`Release::chat_rules`]). The chat
/// preprocessing reads them through [`Consulted`], so that a request which
/// never meets a difference is prepared once for every family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChatRules {
    pub list_content: ListContent,
    pub message_fields: MessageFields,
    pub trailing_assistant: TrailingAssistant,
    pub template_kwargs: TemplateKwargs,
    pub tool_dump: ToolDump,
    pub tool_retry: ToolRetry,
    pub tool_call_arguments: ToolCallArguments,
    pub effort_variable: EffortVariable,
    pub reasoning_inputs: ReasoningInputs,
    /// `--tool-call-parser deepseekv3` prepends a system message describing
    /// the request tools (`adapter.py`, 0.4.5.post3-0.4.6.post2).
    pub deepseek_v3_tool_prompt: bool,
    /// `normalize_tool_content`: a tool message's list of text parts is
    /// joined with `" "` after the content format (0.5.11).
    pub tool_content_joined: bool,
    /// `ChatCompletionRequest.input_ids` exists (0.5.13): given ids are the
    /// prompt and no template is rendered. Before, pydantic drops the field
    /// and the messages are rendered, whatever the ids say.
    pub chat_input_ids: bool,
    /// `normalize_json_schema_types` rewrites request tool schemas (0.5.13).
    pub schema_types_rewritten: bool,
    /// `reasoning_effort: "low"` on a template that reads `low_effort` and
    /// `truncate_history_thinking` sets `low_effort` (0.5.16).
    pub low_effort: bool,
    pub encoder_tools: EncoderTools,
}

/// What `detect_jinja_template_content_format` looks for ("openai" when
/// found, else "string"). Each adds to the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentDetection {
    /// A `{% for %}` over `message['content']` / `message.content`.
    MessageLoops,
    /// + the same over `msg` and `m` (0.5.1).
    MessageMsgMLoops,
    /// + first, `image`, `audio`, `video` or `vision` anywhere in the source (0.5.3).
    KeywordsThenLoops,
}

/// How a message's list content reaches the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListContent {
    /// `adapter.py`: each text part becomes a message of its own (with the
    /// message's other keys), other parts are dropped.
    OneMessagePerTextPart,
    /// `process_content_for_template_format` in the template's content format.
    ByContentFormat,
}

/// Which keys of a non-user message its dump carries (user messages carry
/// `role` and `content` in every release). Each adds to the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MessageFields {
    /// `{"role", "content"}` built by hand (`adapter.py`).
    RoleAndContent,
    /// `model_dump()`: `tool_call_id, name, reasoning_content, tool_calls`.
    ToolCalls,
    /// + `tools` (0.5.6.post2).
    Tools,
    /// + `phase`, before `reasoning_content` (0.5.20).
    Phase,
    /// + `prefix` (0.5.23).
    Prefix,
}

/// What happens to a final assistant message with text content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrailingAssistant {
    /// Removed, and its text encoded after the generation prompt, whatever
    /// the request says (`adapter.py` before `continue_final_message`).
    AlwaysContinued,
    /// Rendered as an assistant turn, plus the generation prompt, unless
    /// `continue_final_message` (then removed and continued).
    KeptAsAssistantTurn,
    /// `_handle_last_assistant_message`: re-sent as a user turn, unless
    /// `continue_final_message`.
    BecomesUserTurn,
}

/// How `chat_template_kwargs` reach the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TemplateKwargs {
    /// No such request field: ignored.
    NotAField,
    /// Passed to `apply_chat_template(tokenize=True, ...)`, where the
    /// tokenizer's own arguments among them (`padding`, `max_length`,
    /// `truncation`, ...) act on the ids.
    PassedToTokenizingCall,
    /// Passed to `apply_chat_template(tokenize=False, ...)`: template
    /// variables only.
    Passed,
}

/// How a request tool reaches the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolDump {
    /// `item.function.model_dump()`: `{description, name, parameters,
    /// strict}`, `"strict": false` where the client set none.
    Function,
    /// `item.model_dump()`: `{type, function: {...}}`, the function as above.
    Wrapped,
    /// As [`ToolDump::Wrapped`], plus `Tool.defer_loading` (`"defer_loading":
    /// null` on every tool) and the function's own `defer_loading` when set.
    WrappedDeferLoading,
    /// `Function._serialize`: the client's keys in the client's order.
    ClientKeys,
}

/// The tools of SGLang's second render attempt, after the first raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolRetry {
    /// `t if "function" in t else {"function": t}`.
    WrapInFunction,
    /// `t["function"] if "function" in t else t`.
    FunctionOnly,
}

/// What becomes of a tool call's `function.arguments` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolCallArguments {
    /// Rendered as the text the client sent.
    KeptAsText,
    /// `json.loads` on every message with tool calls; text that is not JSON
    /// stays text.
    DecodedIfJson,
    /// On assistant messages, decoded as JSON (any value); text that is not
    /// JSON is a 500.
    AssistantDecoded,
    /// `parse_tool_call_arguments`: assistant arguments must be a JSON object.
    AssistantObject,
}

/// How `reasoning_effort` reaches the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffortVariable {
    /// No such request field (a `chat_template_kwargs.reasoning_effort` is an
    /// ordinary kwarg).
    NotAField,
    /// `apply_chat_template(..., reasoning_effort=request.reasoning_effort)`
    /// always, the field defaulting to `"medium"`.
    AlwaysMediumByDefault,
    /// Passed only when set.
    WhenSet,
}

/// What `normalize_reasoning_inputs` (`reasoning: {effort, enabled}`,
/// `reasoning_effort`) sets in `chat_template_kwargs`. Each adds to the one
/// before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReasoningInputs {
    /// No such validator: `reasoning` is dropped.
    Ignored,
    /// `reasoning.effort` fills `reasoning_effort`; a truthy
    /// `reasoning.enabled` sets `thinking`.
    EnabledSetsThinking,
    /// + effort `"none"` sets `thinking` and `enable_thinking` false (0.5.10).
    NoneTurnsThinkingOff,
    /// + `reasoning.enabled` also sets `enable_thinking` (0.5.12).
    EnabledSetsBoth,
    /// Any effort sets both, true unless `"none"` (0.5.16).
    EffortSetsBoth,
}

/// Which request tools the model-specific encoders (DeepSeek) receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncoderTools {
    /// `if request.tools:` every request tool, even under `tool_choice: "none"`.
    EveryRequestTool,
    /// `request.tools if tools else None`: only when the template gets tools.
    AsTheTemplate,
}

/// The questions of [`ChatRules`], as bits of [`Consulted`]'s record.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
enum Rule {
    ListContent = 1,
    MessageFields = 1 << 1,
    TrailingAssistant = 1 << 2,
    TemplateKwargs = 1 << 3,
    ToolDump = 1 << 4,
    ToolRetry = 1 << 5,
    ToolCallArguments = 1 << 6,
    EffortVariable = 1 << 7,
    ReasoningInputs = 1 << 8,
    DeepseekV3ToolPrompt = 1 << 9,
    ToolContentJoined = 1 << 10,
    ChatInputIds = 1 << 11,
    SchemaTypesRewritten = 1 << 12,
    LowEffort = 1 << 13,
    EncoderTools = 1 << 14,
}

/// A family's [`ChatRules`] with a record of the rules a request's
/// preprocessing consulted. Another family whose rules agree on every
/// consulted one prepares the same inputs from that request
/// ([`Consulted::agrees_with`]); the preprocessing reads the rules only
/// through the accessors here, which is what makes the record complete.
#[derive(Debug)]
pub struct Consulted {
    rules: ChatRules,
    asked: std::cell::Cell<u32>,
}

/// One accessor per rule: reading a rule records that it was read.
macro_rules! accessors {
    ($($field:ident: $ty:ty => $rule:ident,)*) => {
        impl Consulted {
            $(
                pub fn $field(&self) -> $ty {
                    self.ask(Rule::$rule);
                    self.rules.$field
                }
            )*

            /// Whether `other` answers every rule consulted so far as these
            /// rules do.
            pub fn agrees_with(&self, other: &ChatRules) -> bool {
                let asked = self.asked.get();
                $(
                    if asked & Rule::$rule as u32 != 0 && other.$field != self.rules.$field {
                        return false;
                    }
                )*
                true
            }
        }
    };
}

accessors! {
    list_content: ListContent => ListContent,
    message_fields: MessageFields => MessageFields,
    trailing_assistant: TrailingAssistant => TrailingAssistant,
    template_kwargs: TemplateKwargs => TemplateKwargs,
    tool_dump: ToolDump => ToolDump,
    tool_retry: ToolRetry => ToolRetry,
    tool_call_arguments: ToolCallArguments => ToolCallArguments,
    effort_variable: EffortVariable => EffortVariable,
    reasoning_inputs: ReasoningInputs => ReasoningInputs,
    deepseek_v3_tool_prompt: bool => DeepseekV3ToolPrompt,
    tool_content_joined: bool => ToolContentJoined,
    chat_input_ids: bool => ChatInputIds,
    schema_types_rewritten: bool => SchemaTypesRewritten,
    low_effort: bool => LowEffort,
    encoder_tools: EncoderTools => EncoderTools,
}

impl Consulted {
    pub fn new(rules: ChatRules) -> Self {
        Self {
            rules,
            asked: std::cell::Cell::new(0),
        }
    }

    fn ask(&self, rule: Rule) {
        self.asked.set(self.asked.get() | rule as u32);
    }
}

/// A non-empty set of [`Release`]s, oldest first; by default the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Releases(Vec<Release>);

impl Default for Releases {
    fn default() -> Self {
        Releases(vec![V0523])
    }
}

/// The spelling of a version nobody stated: every family.
pub const UNKNOWN_VERSION: &str = "unknown";

impl Releases {
    /// Every family: the release is not known.
    pub fn any() -> Self {
        Releases(Release::ALL.to_vec())
    }

    pub fn one(release: Release) -> Self {
        Releases(vec![release])
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Release> + '_ {
        self.0.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any release before `release` may be running.
    pub fn any_before(&self, release: Release) -> bool {
        self.0.first().is_some_and(|r| *r < release)
    }

    /// The families `value` names: one version string, or the list several
    /// workers report. A version that cannot be read, or
    /// [`UNKNOWN_VERSION`], is every family (an unknown release counts as
    /// the largest); a pre-release of a version may be its family or the one
    /// before. A release older than every family is refused with why.
    pub fn of_versions(value: &Value) -> Result<Releases, String> {
        let versions: Vec<&Value> = match value {
            Value::Array(list) => list.iter().collect(),
            v => vec![v],
        };
        let mut releases = Vec::new();
        for v in versions {
            let text = v.as_str().unwrap_or_default();
            let Some((version, pre)) = parse_version(text) else {
                return Ok(Releases::any());
            };
            let family = Release::of(version).ok_or_else(|| {
                format!(
                    "{text} is older than 0.4.5, the first SGLang release with PD disaggregation \
                     (and the oldest the guard models)"
                )
            })?;
            releases.push(family);
            if pre {
                // Built from the tree before `version` was released: it may
                // still behave as the family before.
                if let Some(before) = STARTS
                    .iter()
                    .rev()
                    .find(|(start, _)| *start < version)
                    .map(|(_, r)| *r)
                {
                    releases.push(before);
                }
            }
        }
        releases.sort();
        releases.dedup();
        Ok(Releases(releases))
    }
}

/// An SGLang version string (`0.5.19`, `0.4.10.post2`, `v0.5.20`,
/// `0.5.23rc0`, `0.5.20.dev12+g1234`, `0.6`) as its release and whether it
/// is a pre-release (`rc`, `dev`, `a`, `b`) of it; `None` when unreadable.
pub fn parse_version(v: &str) -> Option<(Version, bool)> {
    let v = v.trim().trim_start_matches('v');
    let (v, _local) = v.split_once('+').unwrap_or((v, ""));
    let mut numbers = Vec::new();
    let mut pre = false;
    let mut post = 0;
    for part in v.split('.') {
        let digits = part
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(part.len());
        let (number, rest) = part.split_at(digits);
        if number.is_empty() {
            // `post2`, `dev12`, `rc1` as parts of their own.
            if let Some(n) = rest.strip_prefix("post") {
                post = n.parse().ok()?;
            } else if ["dev", "rc", "a", "b"].iter().any(|p| rest.starts_with(p)) {
                pre = true;
            } else {
                return None;
            }
            continue;
        }
        if numbers.len() == 3 || post > 0 {
            return None;
        }
        numbers.push(number.parse().ok()?);
        if !rest.is_empty() {
            // `23rc0`, `6rc1`: the pre-release suffix ends the numbers.
            if ["dev", "rc", "a", "b"].iter().any(|p| rest.starts_with(p)) {
                pre = true;
            } else if let Some(n) = rest.strip_prefix("post") {
                post = n.parse().ok()?;
            } else {
                return None;
            }
        }
    }
    if numbers.len() < 2 {
        return None;
    }
    numbers.resize(3, 0);
    Some((Version(numbers[0], numbers[1], numbers[2], post), pre))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_are_read_as_sglang_spells_them() {
        let v = |s| parse_version(s);
        assert_eq!(v("0.5.19"), Some((Version(0, 5, 19, 0), false)));
        assert_eq!(v("0.5.10.post1"), Some((Version(0, 5, 10, 1), false)));
        assert_eq!(v("v0.5.21rc1"), Some((Version(0, 5, 21, 0), true)));
        assert_eq!(v("0.5.20.dev12+g1234"), Some((Version(0, 5, 20, 0), true)));
        assert_eq!(v("0.4.10.post2"), Some((Version(0, 4, 10, 2), false)));
        assert_eq!(v("0.6"), Some((Version(0, 6, 0, 0), false)));
        assert_eq!(v("0.6rc1"), Some((Version(0, 6, 0, 0), true)));
        for bad in ["main", "", "5", "0.5.1.2.3", "0.5.x"] {
            assert_eq!(v(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_published_release_has_a_family_and_the_families_tile_them() {
        assert_eq!(Release::of(Version(0, 4, 4, 0)), None);
        for v in PUBLISHED {
            assert!(Release::of(v).is_some(), "{v}");
        }
        for pair in STARTS.windows(2) {
            assert!(pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1);
        }
        for (i, r) in Release::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(PUBLISHED.contains(&r.first()), "{r:?} starts at a release");
        }
        assert_eq!(Release::of(Version(0, 4, 9, 2)), Some(V0409post1));
        assert_eq!(Release::of(Version(0, 5, 19, 0)), Some(V0518));
        assert_eq!(Release::of(Version(0, 6, 0, 0)), Some(V0523));
        assert_eq!(V0409post1.range(), "0.4.9.post1-0.4.9.post2");
        assert_eq!(V0510.range(), "0.5.10-0.5.10.post1");
        assert_eq!(V0520.range(), "0.5.20");
        assert_eq!(V0523.range(), "0.5.23 and later");
    }

    #[test]
    fn an_unknown_version_is_every_family_and_a_pre_release_two() {
        for v in [json!("unknown"), json!("main"), json!(5), json!(null)] {
            assert_eq!(Releases::of_versions(&v), Ok(Releases::any()), "{v}");
        }
        assert_eq!(
            Releases::of_versions(&json!(["0.5.19", "latest"])),
            Ok(Releases::any())
        );
        let pre = Releases::of_versions(&json!("0.5.13rc0")).unwrap();
        assert_eq!(pre.iter().collect::<Vec<_>>(), [V0512, V0513]);
        assert!(Releases::of_versions(&json!("0.4.4")).is_err());
    }

    #[test]
    fn consulted_rules_decide_who_agrees() {
        let old = V0518.chat_rules();
        let new = V0523.chat_rules();
        let c = Consulted::new(new);
        assert!(c.agrees_with(&old), "nothing consulted yet");
        c.encoder_tools();
        assert!(c.agrees_with(&V0522.chat_rules()));
        assert!(!c.agrees_with(&old));
        let c = Consulted::new(new);
        c.tool_dump();
        assert!(!c.agrees_with(&V0522.chat_rules()));
    }
}
