//! The crate's one pseudo-random generator: deterministic from a seed (tests
//! and the simulator replay a failing seed exactly), and fresh seeds for
//! what must differ between calls, processes and times (region ids, fixed
//! addresses, log salts). Nothing here needs to be secret.

use std::sync::atomic::{AtomicU64, Ordering};

/// SplitMix64: small, fast, and good enough for test schedules and ids.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next pseudo-random value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A value that differs between calls, processes and times: the clock,
/// the process id and a per-process call counter, mixed.
pub fn fresh() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    SplitMix(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 40
            ^ CALLS.fetch_add(1, Ordering::Relaxed).rotate_left(20),
    )
    .next()
}
