//! The ext_proc protocol for one HTTP request, as a pure state machine:
//! `ProcessingRequest`s in, `ProcessingResponse`s out. It decides nothing
//! about prompts: it asks its driver (`ext_proc.rs`) to classify the head and
//! to judge the body through the shared decision core, and turns the answers
//! into what Envoy expects in the body mode the stream announced.
//!
//! Per body mode (`protocol_config.request_body_mode`, first message):
//! - `BUFFERED`: headers → `CONTINUE`; the whole body in one message →
//!   `CONTINUE` or `ImmediateResponse`. Envoy holds the headers until then.
//! - `FULL_DUPLEX_STREAMED`: chunks arrive without waiting; they are kept
//!   (under the body cap) and nothing is answered until the body is complete.
//!   Allowed: the header response, then the body echoed in chunks of at most
//!   [`ECHO_CHUNK`] bytes (Envoy forwards only what is echoed), then the
//!   trailers response if the body ended with trailers.
//! - `NONE`, `BUFFERED_PARTIAL` (a truncated body), `GRPC` or no
//!   `protocol_config`: an inspected route is refused, since its body cannot
//!   be judged whole.
//! - `STREAMED` is refused too. Envoy sends no body chunk before the header
//!   response, and once the headers are answered it opens the upstream request:
//!   SGLang would see the request line and headers of a prompt the guard then
//!   refuses (its body held back by clearing chunks, the stream reset). The
//!   guard's promise is that a refused request sends *nothing* upstream.
//!
//! Fail closed: the stream only ends cleanly after a decision was sent
//! ([`Session::on_end`]); a refusal is an `ImmediateResponse`, never a closed
//! stream, which Envoy would read as "proceed".

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, common_response::ResponseStatus, processing_request::Request,
    processing_response::Response, BodyMutation, BodyResponse, CommonResponse, HeaderMutation,
    HeadersResponse, HttpBody, HttpHeaders, ImmediateResponse, ProcessingRequest,
    ProcessingResponse, StreamedBodyResponse, TrailersResponse,
};

use super::headers;
use crate::core::{Denial, DENIAL_CONTENT_TYPE};
use crate::errors::Reason;

/// Largest body chunk echoed in `FULL_DUPLEX_STREAMED`. Envoy recommends at
/// most 64 KiB per message; llm-d's processor uses 62,000 bytes.
pub const ECHO_CHUNK: usize = 62_000;

/// The request head, for the driver to classify.
#[derive(Debug, Default)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub headers: http::HeaderMap,
}

/// The driver's classification of a head (`Gate::classify`).
#[derive(Debug)]
pub enum Class {
    /// No prompt: let it through without waiting for the body.
    PassThrough,
    /// A prompt route: the body must be judged whole.
    Inspect,
}

/// What the driver does next.
#[derive(Debug)]
pub enum Step {
    /// Send these (possibly none), then read the next message.
    Send(Vec<ProcessingResponse>),
    /// Classify the head, then call [`Session::classified`] (or [`Session::deny`]).
    Classify(Head),
    /// The body is complete: judge it, then call [`Session::allow`] or [`Session::deny`].
    Judge(Bytes),
    /// Refuse: build the denial (its route shape, metrics), then call [`Session::deny`].
    Refuse(Reason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyMode {
    Buffered,
    FullDuplex,
    /// NONE, BUFFERED_PARTIAL, GRPC, anything newer: no whole body to judge;
    /// STREAMED: no body before the headers went upstream (module docs).
    Unusable(&'static str),
}

impl BodyMode {
    fn from_proto(mode: i32) -> Self {
        match BodySendMode::try_from(mode) {
            Ok(BodySendMode::Streamed) => BodyMode::Unusable("STREAMED"),
            Ok(BodySendMode::Buffered) => BodyMode::Buffered,
            Ok(BodySendMode::FullDuplexStreamed) => BodyMode::FullDuplex,
            Ok(BodySendMode::None) => BodyMode::Unusable("NONE"),
            Ok(BodySendMode::BufferedPartial) => BodyMode::Unusable("BUFFERED_PARTIAL"),
            Ok(BodySendMode::Grpc) => BodyMode::Unusable("GRPC"),
            Err(_) => BodyMode::Unusable("an unknown mode"),
        }
    }
}

#[derive(Debug)]
enum State {
    /// Nothing yet: the first message must be the request headers.
    Start,
    /// Headers handed to the driver for classification.
    Classifying { end_of_stream: bool },
    /// A prompt route's body, arriving.
    Collecting {
        body: BytesMut,
        /// The header response went out already (BUFFERED).
        headers_answered: bool,
    },
    /// The body is with the driver to be judged.
    Judging {
        body: Bytes,
        headers_answered: bool,
        /// What ended the body: `None` at the headers, else whether trailers did.
        ended_by: End,
    },
    /// Let through (judged, or a pass-through route): the rest of the
    /// exchange (request body of a pass-through route, response path) is
    /// passed along unchanged.
    Through,
    /// Refused: the `ImmediateResponse` went out; Envoy ignores the rest.
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Headers,
    Body,
    Trailers,
}

/// One ext_proc stream.
#[derive(Debug)]
pub struct Session {
    max_body_bytes: usize,
    request_mode: Option<BodyMode>,
    response_mode: Option<BodyMode>,
    /// `observability_mode`: Envoy ignores answers, so none are sent.
    observing: bool,
    first: bool,
    state: State,
}

impl Session {
    pub fn new(max_body_bytes: usize) -> Self {
        Self {
            max_body_bytes,
            request_mode: None,
            response_mode: None,
            observing: false,
            first: true,
            state: State::Start,
        }
    }

    /// A decision went out (allowed or refused).
    pub fn decided(&self) -> bool {
        matches!(self.state, State::Through | State::Refused)
    }

    /// A prompt route's body is arriving (and held until judged).
    pub fn collecting(&self) -> bool {
        matches!(self.state, State::Collecting { .. })
    }

    /// Refused: nothing more will be answered, the stream may end.
    pub fn finished(&self) -> bool {
        matches!(self.state, State::Refused)
    }

    /// In observability mode Envoy ignores every answer; the driver still
    /// judges (metrics, log) but sends nothing.
    pub fn observing(&self) -> bool {
        self.observing
    }

    pub fn on_message(&mut self, msg: ProcessingRequest) -> Step {
        if std::mem::take(&mut self.first) {
            self.observing = msg.observability_mode;
            if let Some(pc) = msg.protocol_config {
                self.request_mode = Some(BodyMode::from_proto(pc.request_body_mode));
                self.response_mode = Some(BodyMode::from_proto(pc.response_body_mode));
            }
        }
        let Some(request) = msg.request else {
            // A flow-control-only message: nothing to answer.
            return Step::Send(Vec::new());
        };
        match (request, &mut self.state) {
            (_, State::Refused) => Step::Send(Vec::new()),
            (Request::RequestHeaders(h), State::Start) => self.on_headers(h),
            (Request::RequestBody(b), State::Collecting { .. }) => self.on_body(b),
            (Request::RequestTrailers(_), State::Collecting { .. }) => self.on_trailers(),
            (Request::RequestBody(b), State::Through) => {
                Self::pass_body(b, self.request_mode, false)
            }
            (Request::ResponseBody(b), State::Through) => {
                Self::pass_body(b, self.response_mode, true)
            }
            (Request::RequestTrailers(_), State::Through) => {
                one(Response::RequestTrailers(TrailersResponse::default()))
            }
            (Request::ResponseHeaders(_), State::Through) => {
                one(Response::ResponseHeaders(continue_headers()))
            }
            (Request::ResponseTrailers(_), State::Through) => {
                one(Response::ResponseTrailers(TrailersResponse::default()))
            }
            // Anything else is out of order: a body or response before the
            // request headers (request_header_mode SKIP), headers twice.
            // The request cannot be judged, so it is refused.
            (other, _) => Step::Refuse(Reason::Internal(format!(
                "ext_proc sent {} out of order; prefill-guard needs request_header_mode SEND \
                 and a complete request body",
                kind(&other)
            ))),
        }
    }

    fn on_headers(&mut self, h: HttpHeaders) -> Step {
        let parsed = match headers::from_proto(h.headers.as_ref()) {
            Ok(p) => p,
            Err(reason) => return Step::Refuse(reason),
        };
        let (Some(method), Some(path)) = (parsed.method, parsed.path) else {
            return Step::Refuse(Reason::BadPath(
                "the request headers carry no :method or :path".into(),
            ));
        };
        self.state = State::Classifying {
            end_of_stream: h.end_of_stream,
        };
        Step::Classify(Head {
            method,
            path,
            headers: parsed.headers,
        })
    }

    /// The driver's classification of the head.
    pub fn classified(&mut self, class: Class) -> Step {
        let State::Classifying { end_of_stream } = self.state else {
            return Step::Refuse(Reason::Internal("classified out of order".into()));
        };
        match class {
            Class::PassThrough => {
                self.state = State::Through;
                one(Response::RequestHeaders(continue_headers()))
            }
            Class::Inspect if end_of_stream => {
                // No body at all: judge the empty one (refused as invalid JSON).
                self.state = State::Judging {
                    body: Bytes::new(),
                    headers_answered: false,
                    ended_by: End::Headers,
                };
                Step::Judge(Bytes::new())
            }
            Class::Inspect => match self.request_mode {
                None => Step::Refuse(Reason::Internal(
                    "ext_proc sent no protocol_config, so the body mode is unknown; \
                     prefill-guard needs an Envoy that sends it (1.33 or later)"
                        .into(),
                )),
                Some(BodyMode::Unusable(name)) => Step::Refuse(Reason::Internal(format!(
                    "ext_proc request_body_mode {name} does not deliver the whole body; \
                     prefill-guard needs BUFFERED or FULL_DUPLEX_STREAMED"
                ))),
                Some(BodyMode::FullDuplex) => {
                    // The header response waits for the decision: Envoy holds
                    // the headers, and with them the request, until it comes.
                    self.state = State::Collecting {
                        body: BytesMut::new(),
                        headers_answered: false,
                    };
                    Step::Send(Vec::new())
                }
                Some(BodyMode::Buffered) => {
                    // Envoy must answer headers before it sends the body.
                    self.state = State::Collecting {
                        body: BytesMut::new(),
                        headers_answered: true,
                    };
                    one(Response::RequestHeaders(continue_headers()))
                }
            },
        }
    }

    fn on_body(&mut self, chunk: HttpBody) -> Step {
        let mode = self.request_mode;
        let State::Collecting {
            body,
            headers_answered,
        } = &mut self.state
        else {
            unreachable!("on_body is called while collecting");
        };
        if body.len().saturating_add(chunk.body.len()) > self.max_body_bytes {
            return Step::Refuse(Reason::BodyTooLarge {
                limit: self.max_body_bytes,
            });
        }
        body.extend_from_slice(&chunk.body);
        if chunk.end_of_stream {
            let body = std::mem::take(body).freeze();
            self.state = State::Judging {
                body: body.clone(),
                headers_answered: *headers_answered,
                ended_by: End::Body,
            };
            return Step::Judge(body);
        }
        match mode {
            Some(BodyMode::FullDuplex) => Step::Send(Vec::new()),
            // BUFFERED sends the body in one message, ending the stream unless
            // the request has trailers; a body answered before the trailers
            // would be forwarded before it is judged whole.
            _ => Step::Refuse(Reason::Internal(
                "a BUFFERED request body followed by trailers cannot be judged whole; \
                 use FULL_DUPLEX_STREAMED with request_trailer_mode SEND"
                    .into(),
            )),
        }
    }

    fn on_trailers(&mut self) -> Step {
        match self.request_mode {
            Some(BodyMode::FullDuplex) => {
                let State::Collecting {
                    body,
                    headers_answered,
                } = &mut self.state
                else {
                    unreachable!("on_trailers is called while collecting");
                };
                let body = std::mem::take(body).freeze();
                self.state = State::Judging {
                    body: body.clone(),
                    headers_answered: *headers_answered,
                    ended_by: End::Trailers,
                };
                Step::Judge(body)
            }
            // BUFFERED answers the body before trailers could follow.
            _ => Step::Refuse(Reason::Internal(
                "request trailers are supported with FULL_DUPLEX_STREAMED only".into(),
            )),
        }
    }

    /// A chunk of a body that is not judged (a pass-through route's request
    /// body, the response body): answered at once, echoed in full duplex.
    fn pass_body(chunk: HttpBody, mode: Option<BodyMode>, response_path: bool) -> Step {
        let answer = if mode == Some(BodyMode::FullDuplex) {
            streamed_body(chunk.body, chunk.end_of_stream)
        } else {
            BodyResponse {
                response: Some(CommonResponse::default()),
            }
        };
        one(if response_path {
            Response::ResponseBody(answer)
        } else {
            Response::RequestBody(answer)
        })
    }

    /// The body was judged and admitted.
    pub fn allow(&mut self) -> Vec<ProcessingResponse> {
        let State::Judging {
            body,
            headers_answered,
            ended_by,
        } = std::mem::replace(&mut self.state, State::Through)
        else {
            self.state = State::Refused;
            return vec![immediate_internal("allow out of order")];
        };
        let mut out = Vec::new();
        if ended_by == End::Headers {
            out.push(response(Response::RequestHeaders(continue_headers())));
            return out;
        }
        match self.request_mode {
            Some(BodyMode::FullDuplex) => {
                if !headers_answered {
                    out.push(response(Response::RequestHeaders(continue_headers())));
                }
                out.extend(
                    echo(&body, ended_by == End::Body).map(|b| response(Response::RequestBody(b))),
                );
                if ended_by == End::Trailers {
                    out.push(response(Response::RequestTrailers(
                        TrailersResponse::default(),
                    )));
                }
            }
            _ => out.push(response(Response::RequestBody(BodyResponse {
                response: Some(CommonResponse::default()),
            }))),
        }
        out
    }

    /// The request is refused: the one `ImmediateResponse`, after which the
    /// stream may end.
    pub fn deny(&mut self, denial: &Denial) -> Vec<ProcessingResponse> {
        self.state = State::Refused;
        vec![immediate(denial)]
    }

    /// The data plane half-closed the stream. `Ok` (a clean end) only once a
    /// decision went out; before that a clean end would let Envoy proceed
    /// without one, so the stream ends with an error instead.
    pub fn on_end(&self) -> Result<(), tonic::Status> {
        if self.decided() {
            Ok(())
        } else {
            Err(tonic::Status::aborted(
                "the ext_proc stream ended before the request was decided",
            ))
        }
    }
}

/// The body as `StreamedBodyResponse`s of at most [`ECHO_CHUNK`] bytes; the
/// last carries `end_of_stream` unless trailers follow. An empty body that
/// ended the stream is one empty chunk with `end_of_stream`.
fn echo(body: &Bytes, end_of_stream: bool) -> impl Iterator<Item = BodyResponse> + '_ {
    let n = body
        .len()
        .div_ceil(ECHO_CHUNK)
        .max(usize::from(end_of_stream));
    (0..n).map(move |i| {
        let chunk =
            body.slice((i * ECHO_CHUNK).min(body.len())..((i + 1) * ECHO_CHUNK).min(body.len()));
        streamed_body(chunk.to_vec(), end_of_stream && i + 1 == n)
    })
}

fn streamed_body(body: Vec<u8>, end_of_stream: bool) -> BodyResponse {
    BodyResponse {
        response: Some(CommonResponse {
            body_mutation: Some(BodyMutation {
                mutation: Some(Mutation::StreamedResponse(StreamedBodyResponse {
                    body,
                    end_of_stream,
                    ..Default::default()
                })),
            }),
            ..Default::default()
        }),
    }
}

fn continue_headers() -> HeadersResponse {
    HeadersResponse {
        response: Some(CommonResponse {
            status: ResponseStatus::Continue as i32,
            ..Default::default()
        }),
    }
}

fn response(r: Response) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(r),
        ..Default::default()
    }
}

fn one(r: Response) -> Step {
    Step::Send(vec![response(r)])
}

fn immediate(denial: &Denial) -> ProcessingResponse {
    let mut set_headers = vec![headers::set_raw("content-type", DENIAL_CONTENT_TYPE)];
    if let Some(secs) = denial.retry_after {
        set_headers.push(headers::set_raw("retry-after", &secs.to_string()));
    }
    response(Response::ImmediateResponse(ImmediateResponse {
        status: Some(HttpStatus {
            code: i32::from(denial.status.as_u16()),
        }),
        headers: Some(HeaderMutation {
            set_headers,
            remove_headers: Vec::new(),
        }),
        body: denial.body.to_vec(),
        grpc_status: None,
        details: "prefill_guard_refused".into(),
    }))
}

fn immediate_internal(what: &str) -> ProcessingResponse {
    let reason = Reason::Internal(what.into());
    immediate(&Denial::new(&reason, None, crate::core::Mode::ExtProc))
}

fn kind(r: &Request) -> &'static str {
    match r {
        Request::RequestHeaders(_) => "request_headers",
        Request::ResponseHeaders(_) => "response_headers",
        Request::RequestBody(_) => "request_body",
        Request::ResponseBody(_) => "response_body",
        Request::RequestTrailers(_) => "request_trailers",
        Request::ResponseTrailers(_) => "response_trailers",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap as ProtoHeaderMap, HeaderValue};
    use envoy_types::pb::envoy::service::ext_proc::v3::{HttpTrailers, ProtocolConfiguration};

    const LIMIT: usize = 1000;

    fn first(mode: BodySendMode, path: &str, end_of_stream: bool) -> ProcessingRequest {
        ProcessingRequest {
            protocol_config: Some(ProtocolConfiguration {
                request_body_mode: mode as i32,
                ..Default::default()
            }),
            request: Some(Request::RequestHeaders(HttpHeaders {
                headers: Some(ProtoHeaderMap {
                    headers: [
                        (":method", "POST"),
                        (":path", path),
                        ("content-type", "application/json"),
                    ]
                    .iter()
                    .map(|(k, v)| HeaderValue {
                        key: (*k).into(),
                        value: String::new(),
                        raw_value: v.as_bytes().to_vec(),
                    })
                    .collect(),
                }),
                end_of_stream,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn body(bytes: &[u8], end_of_stream: bool) -> ProcessingRequest {
        ProcessingRequest {
            request: Some(Request::RequestBody(HttpBody {
                body: bytes.to_vec(),
                end_of_stream,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn trailers() -> ProcessingRequest {
        ProcessingRequest {
            request: Some(Request::RequestTrailers(HttpTrailers::default())),
            ..Default::default()
        }
    }

    /// A session past its headers, on an inspected route.
    fn inspecting(mode: BodySendMode) -> (Session, Vec<ProcessingResponse>) {
        let mut s = Session::new(LIMIT);
        let Step::Classify(head) = s.on_message(first(mode, "/v1/chat/completions", false)) else {
            panic!("headers are classified");
        };
        assert_eq!(
            (head.method.as_str(), head.path.as_str()),
            ("POST", "/v1/chat/completions")
        );
        assert_eq!(head.headers["content-type"], "application/json");
        let out = sent(s.classified(Class::Inspect));
        (s, out)
    }

    fn sent(step: Step) -> Vec<ProcessingResponse> {
        match step {
            Step::Send(out) => out,
            other => panic!("expected answers, got {other:?}"),
        }
    }

    fn judged(step: Step) -> Bytes {
        match step {
            Step::Judge(b) => b,
            other => panic!("expected a body to judge, got {other:?}"),
        }
    }

    fn refused(step: Step) -> Reason {
        match step {
            Step::Refuse(r) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn is_headers_continue(r: &ProcessingResponse) -> bool {
        matches!(&r.response, Some(Response::RequestHeaders(h))
            if h.response.as_ref().is_some_and(|c| c.status == 0 && c.body_mutation.is_none()))
    }

    fn streamed(r: &ProcessingResponse) -> (&[u8], bool) {
        match &r.response {
            Some(Response::RequestBody(BodyResponse {
                response:
                    Some(CommonResponse {
                        body_mutation:
                            Some(BodyMutation {
                                mutation: Some(Mutation::StreamedResponse(s)),
                            }),
                        ..
                    }),
            })) => (&s.body, s.end_of_stream),
            other => panic!("expected a streamed body, got {other:?}"),
        }
    }

    fn denial() -> Denial {
        Denial::new(
            &Reason::TooLong {
                tokens: 9,
                limit: 8,
            },
            Some(crate::inspect::Route::ChatCompletions),
            crate::core::Mode::ExtProc,
        )
    }

    #[test]
    fn buffered_allow_answers_headers_then_body() {
        let (mut s, out) = inspecting(BodySendMode::Buffered);
        assert!(out.len() == 1 && is_headers_continue(&out[0]));
        assert!(s.on_end().is_err(), "no clean end before a decision");
        assert_eq!(
            judged(s.on_message(body(b"{}", true))),
            Bytes::from_static(b"{}")
        );
        assert!(s.on_end().is_err(), "nor while judging");
        let out = s.allow();
        assert!(
            matches!(&out[..], [ProcessingResponse { response: Some(Response::RequestBody(b)), .. }]
            if b.response.as_ref().is_some_and(|c| c.status == 0 && c.body_mutation.is_none()))
        );
        assert!(s.on_end().is_ok());
        // The response path passes untouched.
        let resp = ProcessingRequest {
            request: Some(Request::ResponseHeaders(HttpHeaders::default())),
            ..Default::default()
        };
        assert!(matches!(
            &sent(s.on_message(resp))[..],
            [ProcessingResponse {
                response: Some(Response::ResponseHeaders(_)),
                ..
            }]
        ));
    }

    #[test]
    fn buffered_deny_is_one_immediate_response_with_the_native_body() {
        let (mut s, _) = inspecting(BodySendMode::Buffered);
        judged(s.on_message(body(b"{}", true)));
        let d = denial();
        let out = s.deny(&d);
        let Some(Response::ImmediateResponse(ir)) = &out[0].response else {
            panic!("an immediate response");
        };
        assert_eq!(ir.status.unwrap().code, 400);
        assert_eq!(ir.body, d.body.to_vec());
        let h = &ir.headers.as_ref().unwrap().set_headers[0];
        let h = h.header.as_ref().unwrap();
        assert_eq!(
            (h.key.as_str(), h.raw_value.as_slice()),
            ("content-type", &b"application/json"[..])
        );
        assert!(s.finished() && s.on_end().is_ok());
        // Whatever Envoy still sends is ignored.
        assert!(sent(s.on_message(body(b"x", true))).is_empty());
    }

    #[test]
    fn full_duplex_waits_then_answers_headers_first_and_echoes_in_chunks() {
        let (mut s, out) = inspecting(BodySendMode::FullDuplexStreamed);
        assert!(out.is_empty(), "the header answer waits for the decision");
        let input: Vec<u8> = (0..LIMIT).map(|i| (i % 251) as u8).collect();
        for piece in input[..LIMIT - 1].chunks(7) {
            assert!(sent(s.on_message(body(piece, false))).is_empty());
        }
        assert_eq!(judged(s.on_message(body(&input[LIMIT - 1..], true))), input);
        let out = s.allow();
        assert!(is_headers_continue(&out[0]));
        assert_eq!(out.len(), 2, "{LIMIT} bytes fit one echo chunk");
        assert_eq!(streamed(&out[1]), (&input[..], true));
    }

    #[test]
    fn echo_chunks_are_bounded_and_only_the_last_ends_the_stream() {
        let body_bytes = Bytes::from(vec![7u8; 3 * ECHO_CHUNK + 5]);
        let chunks: Vec<BodyResponse> = echo(&body_bytes, true).collect();
        assert_eq!(chunks.len(), 4);
        let mut joined = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let r = response(Response::RequestBody(c.clone()));
            let (b, eos) = streamed(&r);
            assert!(b.len() <= ECHO_CHUNK);
            assert_eq!(eos, i == 3);
            joined.extend_from_slice(b);
        }
        assert_eq!(joined, body_bytes.to_vec());
        // Trailers follow: no chunk ends the stream.
        assert!(echo(&body_bytes, false).all(|c| {
            let (_, eos) = streamed(&response(Response::RequestBody(c))).to_owned();
            !eos
        }));
        // An empty body that ends the stream is still one chunk.
        assert_eq!(echo(&Bytes::new(), true).count(), 1);
    }

    #[test]
    fn full_duplex_ended_by_trailers_answers_them_last() {
        let (mut s, _) = inspecting(BodySendMode::FullDuplexStreamed);
        sent(s.on_message(body(b"{\"a\":", false)));
        sent(s.on_message(body(b"1}", false)));
        assert_eq!(
            judged(s.on_message(trailers())),
            Bytes::from_static(b"{\"a\":1}")
        );
        let out = s.allow();
        assert_eq!(out.len(), 3);
        assert!(is_headers_continue(&out[0]));
        assert_eq!(streamed(&out[1]), (&b"{\"a\":1}"[..], false));
        assert!(matches!(
            out[2].response,
            Some(Response::RequestTrailers(_))
        ));
    }

    #[test]
    fn over_the_body_cap_is_refused_at_once() {
        let (mut s, _) = inspecting(BodySendMode::FullDuplexStreamed);
        sent(s.on_message(body(&[b' '; LIMIT], false)));
        let r = refused(s.on_message(body(b" ", false)));
        assert_eq!(r.label(), "body_too_large");
        let (mut s, _) = inspecting(BodySendMode::Buffered);
        assert_eq!(
            refused(s.on_message(body(&[b' '; LIMIT + 1], true))).label(),
            "body_too_large"
        );
    }

    #[test]
    fn modes_that_cannot_deliver_a_whole_body_are_refused() {
        for mode in [
            BodySendMode::None,
            BodySendMode::Streamed,
            BodySendMode::BufferedPartial,
            BodySendMode::Grpc,
        ] {
            let mut s = Session::new(LIMIT);
            s.on_message(first(mode, "/v1/chat/completions", false));
            let r = refused(s.classified(Class::Inspect));
            assert_eq!(r.label(), "internal_error", "{mode:?}");
        }
        // No protocol_config at all: the mode is unknown.
        let mut s = Session::new(LIMIT);
        let mut m = first(BodySendMode::Buffered, "/v1/chat/completions", false);
        m.protocol_config = None;
        s.on_message(m);
        refused(s.classified(Class::Inspect));
        // BUFFERED with trailers after the body.
        let (mut s, _) = inspecting(BodySendMode::Buffered);
        refused(s.on_message(body(b"{}", false)));
    }

    #[test]
    fn no_body_at_the_headers_is_judged_empty() {
        let mut s = Session::new(LIMIT);
        s.on_message(first(
            BodySendMode::FullDuplexStreamed,
            "/v1/chat/completions",
            true,
        ));
        assert!(judged(s.classified(Class::Inspect)).is_empty());
        let out = s.allow();
        assert_eq!(out.len(), 1);
        assert!(is_headers_continue(&out[0]));
    }

    #[test]
    fn pass_through_continues_at_the_headers_and_echoes_in_full_duplex() {
        let mut s = Session::new(LIMIT);
        s.on_message(first(BodySendMode::FullDuplexStreamed, "/v1/models", false));
        let out = sent(s.classified(Class::PassThrough));
        assert!(is_headers_continue(&out[0]));
        assert!(s.on_end().is_ok());
        let out = sent(s.on_message(body(b"abc", true)));
        assert_eq!(streamed(&out[0]), (&b"abc"[..], true));
    }

    #[test]
    fn out_of_order_messages_are_refused() {
        let mut s = Session::new(LIMIT);
        refused(s.on_message(body(b"{}", true)));
        let mut s = Session::new(LIMIT);
        let resp = ProcessingRequest {
            request: Some(Request::ResponseHeaders(HttpHeaders::default())),
            ..Default::default()
        };
        refused(s.on_message(resp));
        let mut s = Session::new(LIMIT);
        let mut m = first(BodySendMode::Buffered, "/x", false);
        if let Some(Request::RequestHeaders(h)) = &mut m.request {
            h.headers
                .as_mut()
                .unwrap()
                .headers
                .retain(|h| h.key != ":path");
        }
        assert_eq!(refused(s.on_message(m)).label(), "bad_path");
    }
}
