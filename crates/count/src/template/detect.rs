//! SGLang's `detect_jinja_template_content_format`
//! (`sglang/srt/parser/jinja_template_utils.py`), as each release has it
//! ([`ContentDetection`]); 0.5.23's:
//!
//! * "openai" if the source contains `image`, `audio`, `video` or `vision`;
//! * otherwise "openai" iff some `{% for %}` iterates `message['content']`,
//!   `message.content`, `msg…` or `m…`, possibly sliced, filtered or tested
//!   (`_is_var_or_elems_access` on the loop's `iter` node);
//! * otherwise "string".
//!
//! SGLang walks Jinja2's AST; this scans the block tags with a small lexer
//! and parses only the loop's iterable expression, to the same node shapes.

use super::ContentFormat;
use crate::release::ContentDetection;

pub fn detect_content_format(source: &str) -> ContentFormat {
    detect_content_format_as(source, ContentDetection::KeywordsThenLoops)
}

/// The content format `detection` gives `source`.
pub fn detect_content_format_as(source: &str, detection: ContentDetection) -> ContentFormat {
    let loop_vars: &[&str] = match detection {
        ContentDetection::MessageLoops => &["message"],
        ContentDetection::MessageMsgMLoops | ContentDetection::KeywordsThenLoops => {
            &["message", "msg", "m"]
        }
    };
    if detection == ContentDetection::KeywordsThenLoops
        && ["image", "audio", "video", "vision"]
            .iter()
            .any(|w| source.contains(w))
    {
        return ContentFormat::OpenAi;
    }
    for tag in block_tags(source) {
        let toks = tokenize(tag);
        if let Some(iter) = for_iter(&toks) {
            let node = parse_iter(iter);
            if loop_vars
                .iter()
                .any(|var| is_var_or_elems_access(&node, var, "content"))
            {
                return ContentFormat::OpenAi;
            }
        }
    }
    ContentFormat::String
}

/// The inside of every `{% … %}` tag, skipping comments, `{{ }}` and raw blocks.
fn block_tags(src: &str) -> Vec<&str> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_raw = false;
    while i + 1 < b.len() {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        match b[i + 1] {
            b'#' if !in_raw => {
                i = src
                    .get(i + 2..)
                    .and_then(|rest| rest.find("#}"))
                    .map_or(b.len(), |j| i + 2 + j + 2);
            }
            b'{' if !in_raw => {
                i = skip_expr(src, i + 2, "}}");
            }
            b'%' => {
                let start = i + 2;
                let end = skip_expr(src, start, "%}");
                let inner_end = if src.as_bytes()[..end].ends_with(b"%}") {
                    end - 2
                } else {
                    end
                };
                let inner = src
                    .get(start..inner_end.max(start))
                    .unwrap_or("")
                    .trim_matches(['-', '+']);
                let word = inner
                    .trim_start()
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next();
                if in_raw {
                    if word == Some("endraw") {
                        in_raw = false;
                    }
                } else if word == Some("raw") {
                    in_raw = true;
                } else {
                    out.push(inner);
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// The index just past `end`, skipping string literals on the way.
fn skip_expr(src: &str, mut i: usize, end: &str) -> usize {
    let b = src.as_bytes();
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            _ if b[i..].starts_with(end.as_bytes()) => return i + end.len(),
            _ => i += 1,
        }
    }
    b.len()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    Num,
    Op(String),
}

fn tokenize(s: &str) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let st = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Name(chars[st..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                i += 1;
            }
            out.push(Tok::Num);
        } else if c == '\'' || c == '"' {
            let mut val = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                    val.push(match chars[i] {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        x => x,
                    });
                } else {
                    val.push(chars[i]);
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(val));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["//", "**", "==", "!=", "<=", ">="].contains(&two.as_str()) {
                out.push(Tok::Op(two));
                i += 2;
            } else {
                out.push(Tok::Op(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

fn is_name(t: Option<&Tok>, n: &str) -> bool {
    matches!(t, Some(Tok::Name(x)) if x == n)
}

fn is_op(t: Option<&Tok>, o: &str) -> bool {
    matches!(t, Some(Tok::Op(x)) if x == o)
}

/// The tokens of a for loop's iterable: after the first top-level `in`, up
/// to a top-level `if`/`recursive` or the end.
fn for_iter(toks: &[Tok]) -> Option<&[Tok]> {
    if !is_name(toks.first(), "for") {
        return None;
    }
    let mut depth = 0i32;
    let mut start = None;
    for (i, t) in toks.iter().enumerate().skip(1) {
        match t {
            Tok::Op(o) if matches!(o.as_str(), "(" | "[" | "{") => depth += 1,
            Tok::Op(o) if matches!(o.as_str(), ")" | "]" | "}") => depth -= 1,
            Tok::Name(n) if depth == 0 && n == "in" => {
                start = Some(i + 1);
                break;
            }
            _ => {}
        }
    }
    Some(&toks[start?..])
}

#[derive(Debug, PartialEq)]
enum Node {
    Name(String),
    Attr(Box<Node>, String),
    ItemConst(Box<Node>, String),
    Slice(Box<Node>),
    Filter(Box<Node>),
    Test(Box<Node>),
    Other,
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.pos)
    }

    /// Skips a bracketed group starting at the current opening token and
    /// returns its inner tokens.
    fn group(&mut self) -> &'a [Tok] {
        let open = self.pos;
        let mut depth = 0i32;
        while let Some(t) = self.peek() {
            self.pos += 1;
            if let Tok::Op(o) = t {
                match o.as_str() {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" => {
                        depth -= 1;
                        if depth == 0 {
                            return &self.toks[open + 1..self.pos - 1];
                        }
                    }
                    _ => {}
                }
            }
        }
        &self.toks[(open + 1).min(self.toks.len())..]
    }

    fn unary(&mut self) -> Node {
        if is_name(self.peek(), "not") || is_op(self.peek(), "-") || is_op(self.peek(), "+") {
            self.pos += 1;
            let _ = self.unary();
            return Node::Other;
        }
        let node = self.primary();
        let node = self.postfix(node);
        self.filter_expr(node)
    }

    fn primary(&mut self) -> Node {
        match self.peek() {
            Some(Tok::Name(n)) => {
                self.pos += 1;
                match n.as_str() {
                    "true" | "false" | "none" | "True" | "False" | "None" => Node::Other,
                    _ => Node::Name(n.clone()),
                }
            }
            Some(Tok::Str(_)) => {
                while matches!(self.peek(), Some(Tok::Str(_))) {
                    self.pos += 1;
                }
                Node::Other
            }
            Some(Tok::Num) => {
                self.pos += 1;
                Node::Other
            }
            Some(Tok::Op(o)) if o == "(" => {
                let inner = self.group();
                let mut p = Parser {
                    toks: inner,
                    pos: 0,
                };
                let node = p.unary();
                if p.pos == inner.len() {
                    node
                } else {
                    Node::Other
                }
            }
            Some(Tok::Op(o)) if o == "[" || o == "{" => {
                self.group();
                Node::Other
            }
            _ => Node::Other,
        }
    }

    fn postfix(&mut self, mut node: Node) -> Node {
        loop {
            if is_op(self.peek(), ".") {
                self.pos += 1;
                node = match self.peek() {
                    Some(Tok::Name(n)) => {
                        self.pos += 1;
                        Node::Attr(Box::new(node), n.clone())
                    }
                    _ => {
                        self.pos += 1;
                        Node::Other
                    }
                };
            } else if is_op(self.peek(), "[") {
                let inner = self.group();
                let mut depth = 0i32;
                let has_colon = inner.iter().any(|t| match t {
                    Tok::Op(o) if matches!(o.as_str(), "(" | "[" | "{") => {
                        depth += 1;
                        false
                    }
                    Tok::Op(o) if matches!(o.as_str(), ")" | "]" | "}") => {
                        depth -= 1;
                        false
                    }
                    Tok::Op(o) => depth == 0 && o == ":",
                    _ => false,
                });
                node = if has_colon {
                    Node::Slice(Box::new(node))
                } else if !inner.is_empty() && inner.iter().all(|t| matches!(t, Tok::Str(_))) {
                    let key: String = inner
                        .iter()
                        .map(|t| match t {
                            Tok::Str(s) => s.as_str(),
                            _ => "",
                        })
                        .collect();
                    Node::ItemConst(Box::new(node), key)
                } else {
                    Node::Other
                };
            } else if is_op(self.peek(), "(") {
                self.group();
                node = Node::Other;
            } else {
                return node;
            }
        }
    }

    fn filter_expr(&mut self, mut node: Node) -> Node {
        loop {
            if is_op(self.peek(), "|") {
                self.pos += 1;
                if matches!(self.peek(), Some(Tok::Name(_))) {
                    self.pos += 1;
                }
                while is_op(self.peek(), ".") {
                    self.pos += 2;
                }
                if is_op(self.peek(), "(") {
                    self.group();
                }
                node = Node::Filter(Box::new(node));
            } else if is_name(self.peek(), "is") {
                self.pos += 1;
                let negated = is_name(self.peek(), "not");
                if negated {
                    self.pos += 1;
                }
                if matches!(self.peek(), Some(Tok::Name(_))) {
                    self.pos += 1;
                }
                while is_op(self.peek(), ".") {
                    self.pos += 2;
                }
                if is_op(self.peek(), "(") {
                    self.group();
                } else if matches!(self.peek(), Some(Tok::Str(_) | Tok::Num))
                    || is_op(self.peek(), "[")
                    || is_op(self.peek(), "{")
                    || matches!(self.peek(), Some(Tok::Name(n)) if !matches!(n.as_str(), "else" | "or" | "and" | "if" | "recursive"))
                {
                    let arg = self.primary();
                    let _ = self.postfix(arg);
                }
                node = if negated {
                    Node::Other
                } else {
                    Node::Test(Box::new(node))
                };
            } else if is_op(self.peek(), "(") {
                self.group();
                node = Node::Other;
            } else {
                return node;
            }
        }
    }
}

fn parse_iter(toks: &[Tok]) -> Node {
    let mut p = Parser { toks, pos: 0 };
    let node = p.unary();
    match p.peek() {
        None => node,
        Some(t) if is_name(Some(t), "if") || is_name(Some(t), "recursive") => node,
        _ => Node::Other,
    }
}

fn is_var_or_elems_access(node: &Node, var: &str, key: &str) -> bool {
    match node {
        Node::Filter(inner) | Node::Test(inner) | Node::Slice(inner) => {
            is_var_or_elems_access(inner, var, key)
        }
        Node::Attr(inner, k) | Node::ItemConst(inner, k) => {
            k == key && matches!(&**inner, Node::Name(n) if n == var)
        }
        _ => false,
    }
}
