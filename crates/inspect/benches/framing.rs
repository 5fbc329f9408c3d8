//! The HTTP/1 framing sniffer on what it sees most: one request, head and
//! body, in a single read (a 1k chat of 4.5 kB and a 32k chat of 139 kB, as
//! bench/run.sh's workloads send them), and the same 139 kB in the 16 KiB
//! reads a slower client arrives in.
//!
//! `cargo bench -p prefill-guard-inspect --bench framing` measures; `cargo
//! test --all-targets` runs each benchmark once.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prefill_guard_inspect::framing::Sniffer;

fn request(body_len: usize) -> Vec<u8> {
    let body = vec![b'a'; body_len];
    let mut wire = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\
         Content-Type: application/json\r\nContent-Length: {body_len}\r\n\r\n"
    )
    .into_bytes();
    wire.extend_from_slice(&body);
    wire
}

fn framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing");
    for (name, len, read) in [
        ("1k chat, one read", 4_500, usize::MAX),
        ("32k chat, one read", 139_000, usize::MAX),
        ("32k chat, 16 KiB reads", 139_000, 16 * 1024),
    ] {
        let wire = request(len);
        group.throughput(Throughput::Bytes(wire.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &wire, |b, wire| {
            b.iter(|| {
                let mut sniffer = Sniffer::default();
                for piece in wire.chunks(read.min(wire.len())) {
                    sniffer.feed(piece);
                }
                sniffer
            })
        });
    }
    group.finish();
}

criterion_group!(benches, framing);
criterion_main!(benches);
