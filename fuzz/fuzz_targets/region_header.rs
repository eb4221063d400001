//! Fuzz target `region_header`: the body is `txmap::fuzz::region_header` (also run on stable by
//! crates/txmap/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txmap::fuzz::region_header(data));
