//! Fuzz target `log_header`: the body is `txmap::fuzz::log_header` (also run on stable by
//! crates/txmap/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txmap::fuzz::log_header(data));
