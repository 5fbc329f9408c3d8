//! The floor `bench/run.sh` compares the guard's decision time against: one
//! single-threaded `tokenizers` encode of a text, with the same tokenizers core
//! the guard links (Cargo.toml pins it), no guard code involved.
//!
//! Usage: `bench_encode TOKENIZER_JSON TEXT_FILE [REPEATS]`
//! Prints one JSON line: {"tokens":N,"best_s":..,"median_s":..,"repeats":R}.
//! Run it with RAYON_NUM_THREADS=1 so nothing in the library fans out.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let (Some(tokenizer), Some(text)) = (args.next(), args.next()) else {
        return Err("usage: bench_encode TOKENIZER_JSON TEXT_FILE [REPEATS]".into());
    };
    let repeats: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    let tokenizer = tokenizers::Tokenizer::from_file(&tokenizer)?;
    let text = std::fs::read_to_string(&text)?;
    let mut times = Vec::with_capacity(repeats);
    let mut tokens = 0;
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        let encoding = tokenizer.encode(text.as_str(), false)?;
        times.push(started.elapsed().as_secs_f64());
        tokens = encoding.len();
    }
    times.sort_by(f64::total_cmp);
    println!(
        r#"{{"tokens":{tokens},"best_s":{:.6},"median_s":{:.6},"repeats":{}}}"#,
        times[0],
        times[times.len() / 2],
        times.len()
    );
    Ok(())
}
