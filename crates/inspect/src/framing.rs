//! The HTTP/1 framing sniffer: follows the request heads and body framing
//! of one connection's bytes with the same parser hyper uses (`httparse`)
//! and hyper's chunked-decoder transitions, and remembers from which request
//! on the framing is ambiguous or could not be followed. Pure bytes in,
//! verdicts out: the guard's `conn::framing` feeds it from the socket and
//! explains why it exists (request smuggling, what hyper hides).

/// The HTTP/2 connection preface (prior knowledge, as hyper-util's auto server detects it).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// More header lines than hyper accepts by default (100): the sniffer must
/// not give up on a head hyper would serve.
const MAX_HEADERS: usize = 128;
/// hyper's default read buffer limit is about 400 KiB; a head longer than
/// this is refused by hyper too.
const MAX_HEAD_BYTES: usize = 1024 * 1024;

/// Follows the request heads and body framing of one connection's bytes.
#[derive(Debug, Default)]
pub struct Sniffer {
    state: State,
    /// Request heads parsed so far.
    heads: u64,
    /// The first request (by index) that is refused, and why; every later one is too.
    first_bad: Option<(u64, String)>,
}

#[derive(Debug)]
enum State {
    /// Deciding between HTTP/2 prior knowledge and HTTP/1 (bytes so far).
    Detect(Vec<u8>),
    /// HTTP/2: nothing to follow.
    Http2,
    /// Collecting an HTTP/1 request head.
    Head(Vec<u8>),
    /// Skipping a body of known length.
    Length(u64),
    /// Following a chunked body.
    Chunked(Chunk),
    /// Lost track or saw a bad head: nothing more to learn.
    Done,
}

impl Default for State {
    fn default() -> Self {
        State::Detect(Vec::new())
    }
}

/// hyper's chunked decoder states (`proto/h1/decode.rs`), same transitions.
#[derive(Debug, Clone, Copy)]
enum Chunk {
    Start,
    Size(u64),
    SizeLws(u64),
    Extension(u64),
    SizeLf(u64),
    Body(u64),
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
}

impl Sniffer {
    /// The verdict on request `index` (0-based) of this connection.
    pub fn verdict(&self, index: u64) -> Result<(), String> {
        if matches!(self.state, State::Http2) {
            return Ok(());
        }
        if let Some((first, why)) = &self.first_bad {
            if *first <= index {
                return Err(why.clone());
            }
        }
        if self.heads <= index {
            // hyper parsed a head the sniffer did not: they disagree on where
            // messages end, so nothing on this connection can be trusted.
            return Err("the request's framing could not be followed".into());
        }
        Ok(())
    }

    /// Whether a request head has begun to arrive and is not complete yet
    /// (the guard times how long one takes: `header_read_timeout_ms`).
    pub fn head_partial(&self) -> bool {
        match &self.state {
            State::Detect(seen) => !seen.is_empty(),
            State::Head(head) => !head.is_empty(),
            _ => false,
        }
    }

    /// Takes the next bytes read from the connection.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            bytes = match std::mem::replace(&mut self.state, State::Done) {
                State::Done => return,
                State::Http2 => {
                    self.state = State::Http2;
                    return;
                }
                State::Detect(mut seen) => {
                    let take = bytes.len().min(H2_PREFACE.len() - seen.len());
                    seen.extend_from_slice(&bytes[..take]);
                    if !H2_PREFACE.starts_with(&seen) {
                        // HTTP/1: everything seen so far starts the first head.
                        self.state = State::Head(Vec::new());
                        self.feed(&seen);
                    } else if seen.len() == H2_PREFACE.len() {
                        self.state = State::Http2;
                        return;
                    } else {
                        self.state = State::Detect(seen);
                    }
                    &bytes[take..]
                }
                State::Head(mut head) => {
                    // Only the head is kept: the body after it in the same
                    // read (all of it, for most requests) is not copied.
                    let Some(end) = blank_line_end(&head, bytes) else {
                        head.extend_from_slice(bytes);
                        if head.len() > MAX_HEAD_BYTES {
                            self.lose("the request head is too long");
                        } else {
                            self.state = State::Head(head);
                        }
                        return;
                    };
                    head.extend_from_slice(&bytes[..end]);
                    // Not complete (a blank line before the request line):
                    // the rest is read on, as if it came in the next read.
                    self.parse_head(head)
                        .map_or(&bytes[end..], |after| &bytes[end - after..])
                }
                State::Length(left) => {
                    let take = u64::try_from(bytes.len()).unwrap_or(u64::MAX).min(left);
                    let rest = &bytes[usize::try_from(take).unwrap_or(bytes.len())..];
                    self.state = if take == left {
                        State::Head(Vec::new())
                    } else {
                        State::Length(left - take)
                    };
                    rest
                }
                State::Chunked(chunk) => self.chunked(chunk, bytes),
            };
        }
    }

    /// Parses a head collected so far. Returns how many of the bytes fed last
    /// belong after it (`None`: the head is not complete, or the sniffer stopped).
    fn parse_head(&mut self, head: Vec<u8>) -> Option<usize> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(&head) {
            Ok(httparse::Status::Partial) if head.len() <= MAX_HEAD_BYTES => {
                self.state = State::Head(head);
                None
            }
            Ok(httparse::Status::Partial) | Err(_) => {
                self.lose("the request head could not be parsed");
                None
            }
            Ok(httparse::Status::Complete(len)) => {
                let index = self.heads;
                self.heads += 1;
                match framing(req.headers) {
                    Ok(Framing::Length(0)) => self.state = State::Head(Vec::new()),
                    Ok(Framing::Length(n)) => self.state = State::Length(n),
                    Ok(Framing::Chunked) => self.state = State::Chunked(Chunk::Start),
                    Err(why) => {
                        self.refuse_from(index, why);
                        return None;
                    }
                }
                Some(head.len() - len)
            }
        }
    }

    /// Follows chunked framing over `bytes`; returns what is left after the body.
    fn chunked<'b>(&mut self, mut chunk: Chunk, mut bytes: &'b [u8]) -> &'b [u8] {
        while let Some((&b, rest)) = bytes.split_first() {
            if let Chunk::Body(left) = chunk {
                let take = u64::try_from(bytes.len()).unwrap_or(u64::MAX).min(left);
                bytes = &bytes[usize::try_from(take).unwrap_or(bytes.len())..];
                chunk = if take == left {
                    Chunk::BodyCr
                } else {
                    Chunk::Body(left - take)
                };
                continue;
            }
            bytes = rest;
            let next = match (chunk, b) {
                (Chunk::Start, _) => hex(b).map(|d| Chunk::Size(u64::from(d))),
                (Chunk::Size(n), _) if hex(b).is_some() => n
                    .checked_mul(16)
                    .and_then(|n| n.checked_add(u64::from(hex(b).unwrap_or(0))))
                    .map(Chunk::Size),
                (Chunk::Size(n) | Chunk::SizeLws(n), b'\t' | b' ') => Some(Chunk::SizeLws(n)),
                (Chunk::Size(n) | Chunk::SizeLws(n), b';') => Some(Chunk::Extension(n)),
                (Chunk::Size(n) | Chunk::SizeLws(n) | Chunk::Extension(n), b'\r') => {
                    Some(Chunk::SizeLf(n))
                }
                (Chunk::Extension(_), b'\n') => None,
                (Chunk::Extension(n), _) => Some(Chunk::Extension(n)),
                (Chunk::SizeLf(0), b'\n') => Some(Chunk::EndCr),
                (Chunk::SizeLf(n), b'\n') => Some(Chunk::Body(n)),
                (Chunk::BodyCr, b'\r') => Some(Chunk::BodyLf),
                (Chunk::BodyLf, b'\n') => Some(Chunk::Start),
                (Chunk::EndCr, b'\r') => Some(Chunk::EndLf),
                (Chunk::Trailer, b'\r') => Some(Chunk::TrailerLf),
                (Chunk::EndCr | Chunk::Trailer, _) => Some(Chunk::Trailer),
                (Chunk::TrailerLf, b'\n') => Some(Chunk::EndCr),
                (Chunk::EndLf, b'\n') => {
                    self.state = State::Head(Vec::new());
                    return bytes;
                }
                _ => None,
            };
            match next {
                Some(c) => chunk = c,
                None => {
                    self.lose("the chunked body could not be followed");
                    return &[];
                }
            }
        }
        self.state = State::Chunked(chunk);
        bytes
    }

    /// The sniffer no longer knows where messages start: every request from
    /// the next head on is refused.
    fn lose(&mut self, why: &str) {
        let index = self.heads;
        self.refuse_from(index, why.to_string());
    }

    fn refuse_from(&mut self, index: u64, why: String) {
        if self.first_bad.is_none() {
            self.first_bad = Some((index, why));
        }
        self.state = State::Done;
    }
}

enum Framing {
    Length(u64),
    Chunked,
}

/// How a request head frames its body, or why the guard refuses it.
fn framing(headers: &[httparse::Header<'_>]) -> Result<Framing, String> {
    let named = |name: &str| -> Vec<&[u8]> {
        headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect()
    };
    let te = named("transfer-encoding");
    let cl = named("content-length");
    match (te.as_slice(), cl.as_slice()) {
        ([], []) => Ok(Framing::Length(0)),
        ([], lengths) => {
            let parsed: Option<Vec<u64>> = lengths.iter().map(|v| digits(v)).collect();
            match parsed.as_deref() {
                Some([first, rest @ ..]) if rest.iter().all(|n| n == first) => {
                    Ok(Framing::Length(*first))
                }
                _ => Err("a `Content-Length` that is not one decimal number".into()),
            }
        }
        (_, [_, ..]) => Err("`Content-Length` together with `Transfer-Encoding`".into()),
        ([one], []) if one.trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
        _ => Err("a transfer coding other than a single `chunked`".into()),
    }
}

/// Where in `bytes`, read after `head`, the first blank line (`\n\n` or
/// `\n\r\n`) that ends in `bytes` ends: only there can a head be complete,
/// so only then is it parsed (as hyper does), which keeps a head sent a byte
/// at a time linear.
fn blank_line_end(head: &[u8], bytes: &[u8]) -> Option<usize> {
    // The byte `back` places before `bytes[i]`, reaching into `head`.
    let before = |i: usize, back: usize| match i.checked_sub(back) {
        Some(j) => bytes.get(j).copied(),
        None => head.len().checked_sub(back - i).map(|j| head[j]),
    };
    memchr::memchr_iter(b'\n', bytes)
        .find(|&i| {
            before(i, 1) == Some(b'\n')
                || (before(i, 1) == Some(b'\r') && before(i, 2) == Some(b'\n'))
        })
        .map(|i| i + 1)
}

fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniff(parts: &[&[u8]]) -> Sniffer {
        let mut s = Sniffer::default();
        for p in parts {
            s.feed(p);
        }
        s
    }

    fn verdicts(s: &Sniffer, n: u64) -> Vec<bool> {
        (0..n).map(|i| s.verdict(i).is_ok()).collect()
    }

    const GET: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n";

    #[test]
    fn follows_pipelined_requests_byte_by_byte() {
        let wire: Vec<u8> = [
            GET,
            b"POST /generate HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"\r\nPOST /generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-trailer: 1\r\n\r\n",
            GET,
        ]
        .concat();
        let whole = sniff(&[&wire]);
        assert_eq!(whole.heads, 4);
        assert_eq!(verdicts(&whole, 5), [true, true, true, true, false]);
        let mut one = Sniffer::default();
        for b in &wire {
            one.feed(std::slice::from_ref(b));
        }
        assert_eq!(one.heads, 4);
        assert_eq!(verdicts(&one, 4), [true; 4]);
    }

    /// A blank line before a request line is one a head can end at; the
    /// sniffer parses there, finds the head incomplete and reads on through
    /// the rest of the same read, as it does when it comes a byte at a time.
    #[test]
    fn blank_lines_before_a_head_in_one_read_with_its_body() {
        let wire: Vec<u8> = [
            &b"\r\n\r\n\n"[..],
            b"POST /generate HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"\r\n\r\nPOST /generate HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        ]
        .concat();
        let whole = sniff(&[&wire]);
        let mut one = Sniffer::default();
        for b in &wire {
            one.feed(std::slice::from_ref(b));
        }
        for s in [&whole, &one] {
            assert_eq!(s.heads, 2);
            assert_eq!(verdicts(s, 2), [true, false]);
        }
    }

    #[test]
    fn content_length_with_transfer_encoding_is_refused_in_either_order() {
        for head in [
            &b"POST /generate HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                [..],
            b"POST /generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\ncontent-length: 3\r\n\r\n",
        ] {
            let s = sniff(&[GET, head, b"0\r\n\r\n", GET]);
            assert_eq!(verdicts(&s, 3), [true, false, false]);
            assert!(s.verdict(1).unwrap_err().contains("Content-Length"));
        }
    }

    #[test]
    fn only_a_single_chunked_coding_is_accepted() {
        for te in [
            &b"gzip, chunked"[..],
            b"chunked, chunked",
            b"identity",
            b"gzip",
        ] {
            let head = [
                &b"POST /generate HTTP/1.1\r\nTransfer-Encoding: "[..],
                te,
                b"\r\n\r\n",
            ]
            .concat();
            let s = sniff(&[&head]);
            assert!(s.verdict(0).is_err(), "{}", String::from_utf8_lossy(te));
        }
        let two_lines = sniff(&[
            b"POST /g HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        ]);
        assert!(two_lines.verdict(0).is_err());
        let fine = sniff(&[b"POST /g HTTP/1.1\r\nTransfer-Encoding: Chunked \r\n\r\n0\r\n\r\n"]);
        assert!(fine.verdict(0).is_ok());
    }

    #[test]
    fn http2_prior_knowledge_is_not_followed() {
        let s = sniff(&[&H2_PREFACE[..10], &H2_PREFACE[10..], b"\x00\x00\x00garbage"]);
        assert!(matches!(s.state, State::Http2));
        assert!(s.verdict(7).is_ok());
        // A prefix of the preface that then differs is HTTP/1 (and here garbage).
        let h1 = sniff(&[b"PRI * HTTP/1.1\r\n\r\n"]);
        assert!(h1.verdict(0).is_ok());
        assert!(sniff(&[b"PRX"]).verdict(0).is_err());
    }

    #[test]
    fn losing_track_refuses_from_the_next_request_on() {
        let s = sniff(&[
            b"POST /g HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcX",
            GET,
        ]);
        assert_eq!(verdicts(&s, 2), [true, false]);
        let garbage = sniff(&[b"\x16\x03\x01 not http\r\n\r\n"]);
        assert!(garbage.verdict(0).is_err());
        let huge = sniff(&[b"9999999999999999999999\r\n"]);
        assert!(huge.verdict(0).is_err());
    }
}
