//! `envoy.service.ext_proc.v3.ExternalProcessor/Process`: drives one
//! [`Session`] per stream through the shared decision core (`core`). The
//! protocol lives in `session.rs`; this file only moves messages and asks
//! `core` to classify and judge.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ext_proc::v3::{
    external_processor_server::ExternalProcessor, processing_request::Request as Message,
    ProcessingRequest, ProcessingResponse,
};
use futures_util::Stream;
use http::{Method, StatusCode, Uri};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::session::{Class, Head, Session, Step};
use crate::app::{App, Apps};
use crate::core::{self, Denial, Mode, Outcome, Record};
use crate::errors::Reason;
use crate::inspect::RouteClass;

/// Answers queued towards Envoy before the sender waits (echoing a large
/// body is then paced by the stream's flow control, not held in memory).
const OUTBOUND_QUEUE: usize = 16;

pub struct ExtProc {
    apps: Arc<Apps>,
}

impl ExtProc {
    pub fn new(apps: Arc<Apps>) -> Self {
        Self { apps }
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProc {
    type ProcessStream = Outbound;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Outbound>, Status> {
        // The state as of the stream's start, kept to its end (as the proxy
        // keeps it for a request across a reload).
        let app = self.apps.load_full();
        let inbound = request.into_inner();
        let (tx, mut rx) = mpsc::channel(OUTBOUND_QUEUE);
        tokio::spawn(run(app, inbound, tx));
        let outbound = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        Ok(Response::new(Box::pin(outbound)))
    }
}

type Tx = mpsc::Sender<Result<ProcessingResponse, Status>>;

/// The request being decided on this stream: what `core` needs between the
/// head and the body, and what `observe` reports.
struct Exchange {
    /// The Record `core` last returned (a fresh one until the head is
    /// classified).
    record: Record,
    method: String,
    request_id: String,
    started: Instant,
    class: Option<RouteClass>,
    headers: http::HeaderMap,
}

impl Exchange {
    fn new() -> Self {
        Self {
            record: Record::new(Mode::ExtProc),
            method: String::new(),
            request_id: String::new(),
            started: Instant::now(),
            class: None,
            headers: http::HeaderMap::new(),
        }
    }
}

/// Reads the stream to its end. Returning drops `tx`, which ends the answer
/// stream with OK: only after a decision (`Session::on_end`) or a refusal.
async fn run(app: Arc<App>, mut inbound: Streaming<ProcessingRequest>, tx: Tx) {
    let mut session = Session::new(app.gate.max_body_bytes);
    let mut x = Exchange::new();
    // The body being collected counts against the guard-wide budget for
    // bodies in flight, as the proxy's does; given back when the stream ends.
    let mut held = app.body_budget.reservation();
    loop {
        let msg = match inbound.message().await {
            Ok(Some(msg)) => msg,
            // Half-closed by Envoy.
            Ok(None) => {
                if let Err(status) = session.on_end() {
                    let _ = tx.send(Err(status)).await;
                }
                return;
            }
            // Reset by Envoy (the client went away, a timeout): nobody is
            // listening for an answer, and nothing was let through.
            Err(status) => {
                tracing::debug!(error = %status, "ext_proc stream reset by the data plane");
                return;
            }
        };
        let collected = match (&msg.request, session.collecting()) {
            (Some(Message::RequestBody(b)), true) => b.body.len(),
            _ => 0,
        };
        let mut step = session.on_message(msg);
        if collected > 0 && !matches!(step, Step::Refuse(_)) {
            if let Err(shed) = held.grow(collected) {
                step = Step::Refuse(shed);
            }
        }
        let out = loop {
            step = match step {
                Step::Send(out) => break out,
                Step::Classify(head) => classify(&app, &mut session, &mut x, head),
                Step::Judge(body) => {
                    let class = x.class.take().expect("a judged body was classified");
                    // The Record goes to the core and comes back with the verdict.
                    let record = std::mem::replace(&mut x.record, Record::new(Mode::ExtProc));
                    let Outcome { record, verdict } =
                        app.gate.check_body(record, class, &x.headers, body).await;
                    x.record = record;
                    match verdict {
                        Ok(_) => {
                            observe(&app, &x, None, StatusCode::OK);
                            Step::Send(session.allow())
                        }
                        Err(reason) => Step::Refuse(reason),
                    }
                }
                Step::Refuse(reason) => {
                    let denial = Denial::new(&reason, x.record.route, Mode::ExtProc);
                    // A stream that goes wrong after its request was let
                    // through is refused too, but counted once.
                    if !session.decided() {
                        observe(&app, &x, Some(&reason), denial.status);
                    }
                    Step::Send(session.deny(&denial))
                }
            };
        };
        if !session.observing() {
            for r in out {
                if tx.send(Ok(r)).await.is_err() {
                    return;
                }
            }
        }
        if session.decided() && held.bytes() > 0 {
            // The body is echoed or refused: its bytes are no longer held,
            // though the stream may stay open for the whole response.
            held = app.body_budget.reservation();
        }
        if session.finished() {
            return;
        }
    }
}

fn classify(app: &App, session: &mut Session, x: &mut Exchange, head: Head) -> Step {
    x.method = head.method.clone();
    x.request_id = crate::proxy::headers::request_id(&head.headers)
        .to_str()
        .unwrap_or_default()
        .to_string();
    let method = match Method::from_bytes(head.method.as_bytes()) {
        Ok(m) => m,
        Err(_) => {
            return Step::Refuse(Reason::MethodNotAllowed {
                method: head.method.escape_debug().to_string(),
                path: head.path,
            })
        }
    };
    let target: Uri = match head.path.parse() {
        Ok(u) => u,
        Err(_) => {
            return Step::Refuse(Reason::BadPath(
                "the request target is not a valid URI".into(),
            ))
        }
    };
    let gate_head = core::Head {
        method: &method,
        target: &target,
        headers: &head.headers,
    };
    let Outcome { record, verdict } = app.gate.classify(&gate_head, Mode::ExtProc);
    match verdict {
        Ok(RouteClass::PassThrough(path)) => {
            // Nothing to count: decided at the headers.
            x.record = app.gate.admit_unread(record, path);
            observe(app, x, None, StatusCode::OK);
            session.classified(Class::PassThrough)
        }
        Ok(class @ RouteClass::Inspect(_)) => {
            x.record = record;
            x.class = Some(class);
            x.headers = head.headers;
            session.classified(Class::Inspect)
        }
        Err(reason) => {
            x.record = record;
            Step::Refuse(reason)
        }
    }
}

fn observe(app: &App, x: &Exchange, reason: Option<&Reason>, status: StatusCode) {
    core::observe(
        &app.metrics,
        &x.record,
        reason,
        &x.request_id,
        &x.method,
        status,
        x.started.elapsed(),
    );
}
