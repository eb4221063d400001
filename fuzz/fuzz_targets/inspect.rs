//! Fuzz target `inspect`: the body is `txmap::fuzz::inspect` (also run on stable by
//! crates/txmap/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txmap::fuzz::inspect(data));
