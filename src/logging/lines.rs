//! The decision line, written directly.
//!
//! Every request writes one decision line, and tracing-subscriber's
//! formatters spend most of a microsecond on it in `core::fmt`'s machinery
//! (padding, ANSI styles that are off, `Debug` of every string): a few
//! percent of a small request's whole cost in the guard. [`Lines`] writes
//! that one event's line itself and hands every other event to the standard
//! formatter it wraps.
//!
//! The bytes are the standard formatter's, by construction: each piece is
//! either written as the formatter writes it (the same timer, the level as
//! it pads it, the same field order) or, where a value could need escaping,
//! given back to the same `Debug` or serde_json call. The test
//! `decision_lines_are_the_standard_formatters` holds the two to each other
//! byte for byte but for the timestamp (two calls, two instants; the same
//! timer writes both) over values that take every path.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the decision line; [`super::decision`] is its only event.
pub const DECISION_TARGET: &str = "prefill_guard::decision";

/// A line format: `standard` for every event, except the decision line,
/// which is written directly in the same format.
pub struct Lines<F> {
    standard: F,
    json: bool,
}

impl<F> Lines<F> {
    /// Around tracing-subscriber's `Full` format with its default timer.
    pub fn human(standard: F) -> Self {
        Self {
            standard,
            json: false,
        }
    }

    /// Around a JSON format with its default timer, the event's fields
    /// flattened into the line, no span on a root event.
    pub fn json(standard: F) -> Self {
        Self {
            standard,
            json: true,
        }
    }
}

impl<S, N, F> FormatEvent<S, N> for Lines<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A terminal's colours, or an event inside a span (its prefix), are
        // the standard formatter's: the decision line has neither in
        // production (a root event, written to a pipe or a file).
        if event.metadata().target() == DECISION_TARGET
            && event.is_root()
            && !writer.has_ansi_escapes()
        {
            let mut line = String::with_capacity(512);
            let written = if self.json {
                json_line(&mut Writer::new(&mut line), event)
            } else {
                human_line(&mut Writer::new(&mut line), event)
            };
            // `Err`: a value this writer does not spell itself; the
            // standard formatter writes the whole line instead.
            if written.is_ok() {
                #[cfg(test)]
                tests::WRITTEN_DIRECTLY.with(|n| n.set(n.get() + 1));
                return writer.write_str(&line);
            }
        }
        self.standard.format_event(ctx, writer, event)
    }
}

/// The `Full` format's line: time, padded level, target, fields.
fn human_line(w: &mut Writer<'_>, event: &Event<'_>) -> fmt::Result {
    let meta = event.metadata();
    if SystemTime.format_time(w).is_err() {
        w.write_str("<unknown time>")?;
    }
    w.write_str(" ")?;
    w.write_str(padded(meta.level()))?;
    w.write_str(" ")?;
    w.write_str(meta.target())?;
    w.write_str(": ")?;
    let mut fields = HumanFields {
        writer: w,
        first: true,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    w.write_str("\n")
}

/// The JSON format's line: timestamp, level, the fields flattened, target.
fn json_line(w: &mut Writer<'_>, event: &Event<'_>) -> fmt::Result {
    let meta = event.metadata();
    let mut timestamp = String::with_capacity(32);
    SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
    w.write_str("{\"timestamp\":")?;
    json_str(w, &timestamp)?;
    w.write_str(",\"level\":\"")?;
    w.write_str(meta.level().as_str())?;
    w.write_str("\"")?;
    let mut fields = JsonFields {
        writer: w,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    w.write_str(",\"target\":")?;
    json_str(w, meta.target())?;
    w.write_str("}\n")
}

/// The level as the `Full` format pads it.
fn padded(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// The `Full` format's fields (tracing-subscriber's `DefaultVisitor`
/// without colours): the message, then `name=value` with the value's
/// `Debug`, one space apart.
struct HumanFields<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl HumanFields<'_, '_> {
    fn pad(&mut self) -> fmt::Result {
        if std::mem::take(&mut self.first) {
            Ok(())
        } else {
            self.writer.write_str(" ")
        }
    }

    fn field(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            self.pad()?;
            if field.name() != "message" {
                self.writer.write_str(field.name())?;
                self.writer.write_str("=")?;
            }
            value(self.writer)
        })();
    }
}

impl Visit for HumanFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.field(field, |w| message(w, value));
        } else {
            self.field(field, |w| debug_str(w, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.field(field, |w| message(w, &format!("{value:?}")));
        } else {
            self.field(field, |w| write!(w, "{value:?}"));
        }
    }
}

/// The message as it is, when the standard formatter would not escape any
/// of it (it escapes terminal controls); `Err` hands the line back to it.
fn message(w: &mut Writer<'_>, text: &str) -> fmt::Result {
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        w.write_str(text)
    } else {
        Err(fmt::Error)
    }
}

/// `<str as Debug>`: quoted as it is when nothing needs escaping, else
/// `Debug` itself.
fn debug_str(w: &mut Writer<'_>, s: &str) -> fmt::Result {
    if s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        w.write_str("\"")?;
        w.write_str(s)?;
        w.write_str("\"")
    } else {
        write!(w, "{s:?}")
    }
}

/// The JSON format's flattened fields (tracing-serde's `SerdeMapVisitor`
/// into serde_json): `,"name":value` each.
struct JsonFields<'a, 'w> {
    writer: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl JsonFields<'_, '_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            self.writer.write_str(",")?;
            json_str(self.writer, field.name())?;
            self.writer.write_str(":")?;
            value(self.writer)
        })();
    }
}

impl Visit for JsonFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |w| json_str(w, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // serde_json's own spelling (`1e+16`; null for a NaN or infinity).
        self.entry(field, |w| {
            let mut spelled = [0u8; 32];
            let mut out = &mut spelled[..];
            serde_json::to_writer(&mut out, &value).map_err(|_| fmt::Error)?;
            let len = 32 - out.len();
            w.write_str(std::str::from_utf8(&spelled[..len]).map_err(|_| fmt::Error)?)
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |w| json_str(w, &format!("{value:?}")));
    }
}

/// A JSON string as serde_json writes it: as it is when nothing needs
/// escaping (serde_json leaves non-ASCII as it is), else serde_json itself.
fn json_str(w: &mut Writer<'_>, s: &str) -> fmt::Result {
    if s.bytes().all(|b| b >= b' ' && b != b'"' && b != b'\\') {
        w.write_str("\"")?;
        w.write_str(s)?;
        w.write_str("\"")
    } else {
        let quoted = serde_json::to_string(s).map_err(|_| fmt::Error)?;
        w.write_str(&quoted)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Buf;
    use super::super::{decision, DecisionLine, JsonLines, LogFormat};
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        /// Decision lines [`super::Lines`] wrote itself on this thread.
        pub static WRITTEN_DIRECTLY: Cell<usize> = const { Cell::new(0) };
    }

    /// tracing-subscriber's own formatter, as the guard configured it
    /// before the decision line was written directly.
    fn standard(format: LogFormat, out: Buf) -> Box<dyn tracing::Subscriber + Send + Sync> {
        let builder = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_writer(move || out.clone())
            .with_ansi(false);
        match format {
            LogFormat::Human => Box::new(builder.finish()),
            LogFormat::Json => Box::new(builder.json().event_format(JsonLines::new()).finish()),
        }
    }

    /// The line without its timestamp, the one part two calls cannot share.
    fn untimed(format: LogFormat, line: &str) -> String {
        match format {
            LogFormat::Human => line.split_once(' ').unwrap().1.to_string(),
            LogFormat::Json => {
                let rest = line.strip_prefix("{\"timestamp\":\"").unwrap();
                rest.split_once('"').unwrap().1.to_string()
            }
        }
    }

    fn lines() -> Vec<DecisionLine<'static>> {
        let everyday = DecisionLine {
            request_id: "155ed1e7-2e8c-41e3-9043-5b640b54604a",
            mode: "proxy",
            method: "POST",
            route: "/v1/chat/completions",
            model: Some("qwen2.5"),
            count_method: Some("bound"),
            limit: Some(681_280),
            decision: "allowed",
            status: 200,
            upstream_status: Some(200),
            latency: Duration::from_micros(5_281),
            ..DecisionLine::default()
        };
        // Each character either format escapes, alone in an otherwise plain
        // value, so that each escape is the only reason to leave the fast path.
        let tricky = [
            "a\"b",
            "a\\b",
            "a\nb",
            "a\tb",
            "a\u{1}b",
            "a\u{1b}[31mb",
            "a\u{7f}b",
            "a'b",
            "é",
            "模型",
            "a\u{200b}b",
            "a\u{85}b",
            "",
        ];
        let mut lines: Vec<DecisionLine<'static>> = tricky
            .iter()
            .map(|s| DecisionLine {
                request_id: s,
                model: Some(s),
                refused_path: Some(s),
                ..everyday
            })
            .collect();
        lines.extend([
            DecisionLine {
                latency: Duration::ZERO,
                ..DecisionLine::default()
            },
            // Values a client chooses, with every kind of character either
            // format escapes: quotes, backslashes, controls, DEL, non-ASCII,
            // an invisible format character, a terminal escape.
            DecisionLine {
                request_id: "r\"1\\\n\t\u{1b}[31m\u{7f}é",
                model: Some("模型\u{200b}'"),
                refused_path: Some("/v1/a b%2F"),
                method: "GET",
                tokens: Some(u64::MAX as usize),
                count_method: Some("early_exit"),
                reason: Some("context_length_exceeded"),
                decision: "refused",
                status: 400,
                upstream_status: None,
                latency: Duration::from_nanos(1),
                ..everyday
            },
            DecisionLine {
                latency: Duration::from_nanos(10),
                ..everyday
            },
            DecisionLine {
                latency: Duration::from_secs(10_000_000_000_000),
                ..everyday
            },
            DecisionLine {
                tokens: Some(0),
                latency: Duration::from_secs(1_000_000) + Duration::from_nanos(123_456),
                ..everyday
            },
            everyday,
        ]);
        lines
    }

    #[test]
    fn decision_lines_are_the_standard_formatters() {
        for format in [LogFormat::Human, LogFormat::Json] {
            for line in lines() {
                let (theirs, ours) = (Buf::default(), Buf::default());
                tracing::subscriber::with_default(standard(format, theirs.clone()), || {
                    decision(&line)
                });
                let before = WRITTEN_DIRECTLY.with(Cell::get);
                let out = ours.clone();
                let sub = super::super::subscriber(format, "info", move || out.clone());
                tracing::subscriber::with_default(sub, || decision(&line));
                assert_eq!(
                    WRITTEN_DIRECTLY.with(Cell::get),
                    before + 1,
                    "{format:?}: the line was written directly"
                );
                let theirs = String::from_utf8(theirs.0.lock().unwrap().clone()).unwrap();
                let ours = String::from_utf8(ours.0.lock().unwrap().clone()).unwrap();
                assert_eq!(
                    untimed(format, &ours),
                    untimed(format, &theirs),
                    "{format:?}, {line:?}"
                );
                assert_eq!(ours.len(), theirs.len(), "{format:?}: timestamps alike");
            }
        }
    }

    #[test]
    fn other_events_are_the_standard_formatters() {
        for format in [LogFormat::Human, LogFormat::Json] {
            let (theirs, ours) = (Buf::default(), Buf::default());
            let event = || {
                let span = tracing::info_span!("request", request_id = "r1");
                let _entered = span.enter();
                tracing::warn!(n = 3, why = "a \"reason\"", "a warning inside the request");
            };
            tracing::subscriber::with_default(standard(format, theirs.clone()), event);
            let before = WRITTEN_DIRECTLY.with(Cell::get);
            let out = ours.clone();
            let sub = super::super::subscriber(format, "info", move || out.clone());
            tracing::subscriber::with_default(sub, event);
            assert_eq!(WRITTEN_DIRECTLY.with(Cell::get), before);
            let theirs = String::from_utf8(theirs.0.lock().unwrap().clone()).unwrap();
            let ours = String::from_utf8(ours.0.lock().unwrap().clone()).unwrap();
            assert_eq!(untimed(format, &ours), untimed(format, &theirs));
        }
    }
}
