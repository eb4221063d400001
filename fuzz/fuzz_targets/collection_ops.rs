//! Fuzz target `collection_ops`: the body is `txmap::fuzz::collection_ops` (also run on stable by
//! crates/txmap/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txmap::fuzz::collection_ops(data));
