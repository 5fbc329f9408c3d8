#![no_main]

use std::sync::LazyLock;

use prefill_guard_fuzz::checks::{template, Templates};

static TEMPLATES: LazyLock<Templates> =
    LazyLock::new(|| Templates::load(&prefill_guard_fuzz::shared()));

libfuzzer_sys::fuzz_target!(|data: &[u8]| template(&TEMPLATES, data));
