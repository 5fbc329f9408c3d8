#![no_main]

use std::sync::LazyLock;

use prefill_guard_fuzz::checks::{extract, Counter};

static COUNTER: LazyLock<Counter> = LazyLock::new(|| Counter::load(&prefill_guard_fuzz::shared()));

libfuzzer_sys::fuzz_target!(|data: &[u8]| extract(&COUNTER, data));
