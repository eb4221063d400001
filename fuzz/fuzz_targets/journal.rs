//! Fuzz target `journal`: the body is `txmap::fuzz::journal` (also run on stable by
//! crates/txmap/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txmap::fuzz::journal(data));
