#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| prefill_guard_fuzz::checks::json(data));
