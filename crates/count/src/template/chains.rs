//! `+` chains in template expressions, concatenated once (issue 31).
//!
//! minijinja evaluates `'<|im_start|>' + role + '\n' + content + '<|im_end|>'`
//! as `(((a + b) + c) + d) + e`: every `+` allocates a new string and copies
//! the whole left side into it, so a long message is copied again for each
//! operand after it (two copies per `+`: the concatenation and minijinja's
//! `Arc<str>`). [`rewrite_tag`] turns such a chain of three or more operands
//! into one call, `__pg_add(a, b, c, d, e)`, and [`add`] concatenates
//! strings once and folds anything else pair by pair with minijinja's own
//! `+`, so what the template computes does not change. A chain that is a
//! whole `{{ … }}` becomes `__pg_emit(…)` ([`emit`]), whose strings go to
//! the output without being concatenated.
//!
//! The rewrite works on the tokens of one tag and only where it can prove
//! the chain is exactly what minijinja's parser would have built: `+` is
//! the loosest arithmetic operator (with `-`, in `parse_math1`), so the
//! chain must be delimited by tokens that only a looser level consumes
//! (`,` `:` `=`, comparisons, `and` `or` `not` `in` `if` `else`, brackets,
//! the tag's ends), and each operand must be a primary with postfixes and
//! filters, optionally joined by the tighter `~ * / // % **`. Anything else
//! (a `-`, an `is` test, a number or name this lexer is unsure of) leaves
//! the tag as written.

use std::sync::{Arc, LazyLock};

use minijinja::value::{Object, ObjectRepr, Rest, ValueKind};
use minijinja::{
    AutoEscape, Environment, Error, ErrorKind, Expression, State, UndefinedBehavior, Value,
};

/// The function a rewritten chain calls. A template that mentions it or
/// [`EMIT`] (or uses `autoescape`, see [`may_rewrite`]) is never rewritten,
/// and the render context never carries a variable of these names, which
/// would shadow the functions.
pub const ADD: &str = "__pg_add";

/// What a chain that is a whole `{{ … }}` calls instead: its value is only
/// ever printed (minijinja's `Emit` hands it to the formatter and to nothing
/// else), so all-string operands are kept as [`Pieces`] and written one by
/// one, without being concatenated at all.
pub const EMIT: &str = "__pg_emit";

/// Whether chains in `source` may be rewritten at all.
///
/// `autoescape` blocks make minijinja's `+` escape one side when exactly one
/// is a safe string; [`add`] and its fold only know the no-escaping case.
pub fn may_rewrite(source: &str) -> bool {
    !source.contains("__pg_") && !source.contains("autoescape")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Str,
    Num,
    Name,
    Op,
    Open,
    Close,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

/// The tokens of a tag's body as minijinja's lexer splits them, or `None`
/// where this lexer cannot be sure it agrees (non-ASCII names, numbers
/// with letters, exponents or a dot after them, characters minijinja does
/// not know).
fn tokenize(body: &str) -> Option<Vec<Tok>> {
    let b = body.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            _ if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'\'' | b'"' => {
                i += 1;
                while i < b.len() && b[i] != c {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= b.len() {
                    return None;
                }
                i += 1;
                Kind::Str
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if b.get(i).is_some_and(|c| !c.is_ascii()) {
                    return None;
                }
                Kind::Name
            }
            b'0'..=b'9' => {
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                // `1e+5`, `0x1f`, `1_000`, `1.e5`, `1.upper`: minijinja's
                // number lexer has states this one does not mirror.
                if b.get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.')
                {
                    return None;
                }
                Kind::Num
            }
            b'(' | b'[' | b'{' => {
                i += 1;
                Kind::Open
            }
            b')' | b']' | b'}' => {
                i += 1;
                Kind::Close
            }
            _ => {
                let two = body.get(i..i + 2);
                if matches!(two, Some("//" | "**" | "==" | "!=" | ">=" | "<=")) {
                    i += 2;
                } else if b"+-*/%.,:~|=<>".contains(&c) {
                    i += 1;
                } else {
                    return None;
                }
                Kind::Op
            }
        };
        toks.push(Tok {
            kind,
            start,
            end: i,
        });
    }
    Some(toks)
}

/// For each opening bracket the index of its closing one; `None` when they
/// do not nest.
fn match_brackets(body: &str, toks: &[Tok]) -> Option<Vec<usize>> {
    let mut close = vec![0; toks.len()];
    let mut stack: Vec<usize> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t.kind {
            Kind::Open => stack.push(i),
            Kind::Close => {
                let open = stack.pop()?;
                let pair = (body.as_bytes()[toks[open].start], body.as_bytes()[t.start]);
                if !matches!(pair, (b'(', b')') | (b'[', b']') | (b'{', b'}')) {
                    return None;
                }
                close[open] = i;
            }
            _ => {}
        }
    }
    stack.is_empty().then_some(close)
}

/// One token, or a bracket group with its contents already rewritten.
struct Item {
    /// Index of the first token (the opening bracket for a group).
    first: usize,
    /// Byte range in the body.
    start: usize,
    end: usize,
    /// The rewritten text of a group.
    group: Option<String>,
}

/// What an item does to the segments of its bracket level.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Cuts: only a parser level looser than `+` consumes it, so a chain
    /// ends before it and may start after it.
    Boundary,
    /// A block's statement name other than `if`/`elif`: what follows it is
    /// not necessarily an expression (`{% filter f(x) + y + z %}` names a
    /// filter), so its segment is left as written.
    Statement,
    Plain,
}

struct Scanner<'a> {
    body: &'a str,
    toks: Vec<Tok>,
    close: Vec<usize>,
    changed: bool,
}

impl Scanner<'_> {
    fn text(&self, t: usize) -> &str {
        &self.body[self.toks[t].start..self.toks[t].end]
    }

    fn item_text<'s>(&'s self, item: &'s Item) -> &'s str {
        item.group
            .as_deref()
            .unwrap_or(&self.body[item.start..item.end])
    }

    fn is_op(&self, item: &Item, op: &str) -> bool {
        item.group.is_none()
            && self.toks[item.first].kind == Kind::Op
            && self.text(item.first) == op
    }

    fn is_name(&self, item: Option<&Item>, name: &str) -> bool {
        item.is_some_and(|it| {
            it.group.is_none()
                && self.toks[it.first].kind == Kind::Name
                && self.text(it.first) == name
        })
    }

    fn open_char(&self, item: &Item) -> Option<u8> {
        item.group
            .as_ref()
            .map(|_| self.body.as_bytes()[self.toks[item.first].start])
    }

    /// Rewrites tokens `lo..hi` (one bracket level) and returns their text
    /// from the first token's start to the last one's end.
    /// `emit_tag`: this is the top level of a `{{ … }}` tag.
    fn level(&mut self, lo: usize, hi: usize, block: bool, emit_tag: bool) -> Option<String> {
        let mut items = Vec::new();
        let mut i = lo;
        while i < hi {
            let t = self.toks[i];
            if t.kind == Kind::Open {
                let c = self.close[i];
                let inner = if c == i + 1 {
                    self.body[t.end..self.toks[c].start].to_owned()
                } else {
                    let text = self.level(i + 1, c, false, false)?;
                    format!(
                        "{}{text}{}",
                        &self.body[t.end..self.toks[i + 1].start],
                        &self.body[self.toks[c - 1].end..self.toks[c].start]
                    )
                };
                let group = format!("{}{inner}{}", self.text(i), self.text(c));
                items.push(Item {
                    first: i,
                    start: t.start,
                    end: self.toks[c].end,
                    group: Some(group),
                });
                i = c + 1;
            } else {
                items.push(Item {
                    first: i,
                    start: t.start,
                    end: t.end,
                    group: None,
                });
                i += 1;
            }
        }
        let roles = self.roles(&items, block);
        if emit_tag && !roles.contains(&Role::Boundary) {
            // one segment, the whole expression: printed and nothing else
            let mut out = String::new();
            self.emit_segment(&items, EMIT, &mut out);
            return Some(out);
        }
        let mut out = String::new();
        let mut seg = 0;
        for k in 0..=items.len() {
            if k < items.len() && roles[k] != Role::Boundary {
                continue;
            }
            let segment = &items[seg..k];
            if roles[seg..k].contains(&Role::Statement) {
                self.emit_verbatim(segment, &mut out);
            } else {
                self.emit_segment(segment, ADD, &mut out);
            }
            if let Some(item) = items.get(k) {
                if seg < k {
                    out.push_str(&self.body[items[k - 1].end..item.start]);
                }
                out.push_str(self.item_text(item));
                if let Some(next) = items.get(k + 1) {
                    out.push_str(&self.body[item.end..next.start]);
                }
            }
            seg = k + 1;
        }
        Some(out)
    }

    fn roles(&self, items: &[Item], block: bool) -> Vec<Role> {
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Test {
            Outside,
            AfterIs,
            AfterNot,
            AfterName,
            InDottedName,
        }
        let mut roles = vec![Role::Plain; items.len()];
        let mut test = Test::Outside;
        for (k, item) in items.iter().enumerate() {
            let prev = k.checked_sub(1).map(|p| &items[p]);
            // `is [not] name[.name]* [arg]`: minijinja reads a name right
            // after the test name, even `in` or `if`, as the test's argument
            // (all but `and`, `or`, `else`, `is`), so none of this cuts.
            match test {
                Test::AfterIs if self.is_name(Some(item), "not") => {
                    test = Test::AfterNot;
                    continue;
                }
                Test::AfterIs | Test::AfterNot | Test::InDottedName => {
                    test = Test::AfterName;
                    continue;
                }
                Test::AfterName if self.is_op(item, ".") => {
                    test = Test::InDottedName;
                    continue;
                }
                Test::AfterName => {
                    test = Test::Outside;
                    let is_name = item.group.is_none() && self.toks[item.first].kind == Kind::Name;
                    let ends_test = ["and", "or", "else", "is"]
                        .iter()
                        .any(|kw| self.is_name(Some(item), kw));
                    if is_name && !ends_test {
                        continue;
                    }
                }
                Test::Outside => {}
            }
            if self.is_name(Some(item), "is") {
                test = Test::AfterIs;
                continue;
            }
            if k == 0 && block {
                roles[0] = if self.is_name(Some(item), "if") || self.is_name(Some(item), "elif") {
                    Role::Boundary
                } else {
                    Role::Statement
                };
                continue;
            }
            // `x.in`, `x|if`: an attribute or filter name, whatever it spells
            if item.group.is_some()
                || prev.is_some_and(|p| self.is_op(p, ".") || self.is_op(p, "|"))
            {
                continue;
            }
            let text = self.text(item.first);
            let cuts = match self.toks[item.first].kind {
                Kind::Op => matches!(
                    text,
                    "," | ":" | "=" | "==" | "!=" | "<" | ">" | "<=" | ">="
                ),
                Kind::Name => matches!(text, "and" | "or" | "not" | "in" | "if" | "else"),
                _ => false,
            };
            if cuts {
                roles[k] = Role::Boundary;
            }
        }
        roles
    }

    /// Writes items with the whitespace between them as written.
    fn emit_verbatim(&self, items: &[Item], out: &mut String) {
        for (k, item) in items.iter().enumerate() {
            if k > 0 {
                out.push_str(&self.body[items[k - 1].end..item.start]);
            }
            out.push_str(self.item_text(item));
        }
    }

    /// Writes a segment, as one call if it is a `+` chain of three or more
    /// operands.
    fn emit_segment(&mut self, items: &[Item], function: &str, out: &mut String) {
        let Some(operands) = self.chain(items) else {
            self.emit_verbatim(items, out);
            return;
        };
        self.changed = true;
        // `{% if(a) + b + c %}` must not become `if__pg_add(...)`.
        if out
            .as_bytes()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            out.push(' ');
        }
        out.push_str(function);
        out.push('(');
        for (n, (a, b)) in operands.into_iter().enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            self.emit_verbatim(&items[a..b], out);
        }
        out.push(')');
    }

    /// The operands (item ranges) of `operand ('+' operand)+` covering the
    /// whole segment, when there are at least three.
    fn chain(&self, items: &[Item]) -> Option<Vec<(usize, usize)>> {
        let mut operands = Vec::new();
        let mut i = 0;
        loop {
            let start = i;
            i = self.operand(items, i)?;
            operands.push((start, i));
            match items.get(i) {
                None => break,
                Some(item) if self.is_op(item, "+") => i += 1,
                Some(_) => return None,
            }
        }
        (operands.len() >= 3).then_some(operands)
    }

    /// `term (('~' | '*' | '/' | '//' | '%' | '**') term)*`: everything
    /// minijinja parses tighter than `+`, minus unary `-`.
    fn operand(&self, items: &[Item], mut i: usize) -> Option<usize> {
        i = self.term(items, i)?;
        while items.get(i).is_some_and(|it| {
            ["~", "*", "/", "//", "%", "**"]
                .iter()
                .any(|op| self.is_op(it, op))
        }) {
            i = self.term(items, i + 1)?;
        }
        Some(i)
    }

    /// `primary postfix* filter*` with `primary` a literal, a name, or a
    /// bracket group; `postfix` `.name`, `.0`, `[...]`, `(...)`; `filter`
    /// `|name(.name)*` with optional `(...)`.
    fn term(&self, items: &[Item], mut i: usize) -> Option<usize> {
        let first = items.get(i)?;
        match (first.group.is_some(), self.toks[first.first].kind) {
            (true, _) => i += 1,
            (false, Kind::Str) => {
                // adjacent literals are one string
                while items
                    .get(i)
                    .is_some_and(|it| it.group.is_none() && self.toks[it.first].kind == Kind::Str)
                {
                    i += 1;
                }
            }
            (false, Kind::Num) => i += 1,
            (false, Kind::Name)
                if !["and", "or", "not", "in", "is", "if", "else"]
                    .contains(&self.text(first.first)) =>
            {
                i += 1
            }
            _ => return None,
        }
        while let Some(item) = items.get(i) {
            if self.is_op(item, ".") {
                let next = items.get(i + 1)?;
                if next.group.is_some()
                    || !matches!(self.toks[next.first].kind, Kind::Name | Kind::Num)
                {
                    return None;
                }
                i += 2;
            } else if matches!(self.open_char(item), Some(b'(' | b'[')) {
                i += 1;
            } else {
                break;
            }
        }
        while items.get(i).is_some_and(|it| self.is_op(it, "|")) {
            let name = items.get(i + 1)?;
            if name.group.is_some() || self.toks[name.first].kind != Kind::Name {
                return None;
            }
            i += 2;
            while items.get(i).is_some_and(|it| self.is_op(it, ".")) {
                let seg = items.get(i + 1)?;
                if seg.group.is_some() || self.toks[seg.first].kind != Kind::Name {
                    return None;
                }
                i += 2;
            }
            if items.get(i).and_then(|it| self.open_char(it)) == Some(b'(') {
                i += 1;
            }
        }
        Some(i)
    }
}

/// The tag with its `+` chains rewritten, or `None` if nothing changed.
/// `tag` is a whole `{{ … }}` (`block == false`) or `{% … %}` tag.
pub fn rewrite_tag(tag: &str, block: bool) -> Option<String> {
    let end = if block { "%}" } else { "}}" };
    if tag.len() < 4 || !tag.ends_with(end) || !tag.contains('+') {
        return None;
    }
    let b = tag.as_bytes();
    // `{{-`, `-}}`, `+%}`...: whitespace markers, which minijinja's lexer
    // takes before any operator.
    let lo = if matches!(b[2], b'-' | b'+') { 3 } else { 2 };
    let mut hi = tag.len() - 2;
    if hi > lo && matches!(b[hi - 1], b'-' | b'+') {
        hi -= 1;
    }
    let body = tag.get(lo..hi)?;
    let toks = tokenize(body)?;
    let close = match_brackets(body, &toks)?;
    let (Some(first), Some(last)) = (toks.first().copied(), toks.last().copied()) else {
        return None;
    };
    let n = toks.len();
    let mut scanner = Scanner {
        body,
        toks,
        close,
        changed: false,
    };
    let text = scanner.level(0, n, block, !block)?;
    if !scanner.changed {
        return None;
    }
    Some(format!(
        "{}{}{text}{}{}",
        &tag[..lo],
        &body[..first.start],
        &body[last.end..],
        &tag[hi..]
    ))
}

/// minijinja's own `+` for what [`add`] does not concatenate itself.
static FOLD_ENV: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    env.set_debug(false);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env
});

static PLUS: LazyLock<Result<Expression<'static, 'static>, Error>> =
    LazyLock::new(|| FOLD_ENV.compile_expression("a + b"));

/// Whether every operand is a string, which `+` then concatenates; an error
/// under auto-escaping, where it would escape one side of a mixed pair.
fn all_strings(state: &State, operands: &[Value]) -> Result<bool, Error> {
    if *state.auto_escape() != AutoEscape::None {
        // `may_rewrite` keeps autoescape blocks out; this is the proof.
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "internal: a rewritten `+` chain under auto-escaping",
        ));
    }
    Ok(operands.iter().all(|v| v.kind() == ValueKind::String))
}

/// The strings of a chain that is a whole `{{ … }}`, printed one after the
/// other by the template's formatter (`format_value`) exactly as their
/// concatenation would be.
#[derive(Debug)]
pub struct Pieces(pub(super) Vec<Value>);

impl Pieces {
    pub fn strs(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|v| v.as_str().unwrap_or_default())
    }
}

impl Object for Pieces {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    // Never reached (only the formatter sees the value), but should anything
    // print it, it prints as the string it stands for.
    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.strs().try_for_each(|s| f.write_str(s))
    }
}

/// `{{ a + b + c }}`: as [`add`], but strings are left unconcatenated.
pub fn emit(state: &State, operands: Rest<Value>) -> Result<Value, Error> {
    if all_strings(state, &operands)? {
        return Ok(Value::from_object(Pieces(operands.0)));
    }
    add(state, operands)
}

/// `a + b + c + …` as minijinja computes it, with one allocation when every
/// operand is a string.
pub fn add(state: &State, operands: Rest<Value>) -> Result<Value, Error> {
    if all_strings(state, &operands)? {
        let len = operands
            .iter()
            .map(|v| v.as_str().map_or(0, str::len))
            .sum();
        let mut s = String::with_capacity(len);
        for v in operands.iter() {
            s.push_str(v.as_str().unwrap_or_default());
        }
        // As minijinja's `+`: safe only if every side was.
        return Ok(if operands.iter().all(Value::is_safe) {
            Value::from_safe_string(s)
        } else {
            Value::from(s)
        });
    }
    let Ok(plus) = PLUS.as_ref() else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "internal: minijinja's `a + b` does not compile",
        ));
    };
    let mut it = operands.0.into_iter();
    let mut acc = it
        .next()
        .ok_or_else(|| Error::new(ErrorKind::MissingArgument, "no operands"))?;
    for v in it {
        acc = plus.eval(minijinja::context! { a => acc, b => v })?;
    }
    Ok(acc)
}
