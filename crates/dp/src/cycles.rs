//! Cycle counting for PMD busy/idle accounting.
//!
//! Owns: [`now`] (the CPU's time-stamp counter on x86_64) and [`hz`] (its rate, measured once).
//! Why the TSC and not `Instant`: it is one instruction (~20 cycles, no vDSO call), it is what
//! OVS reports in `pmd-stats-show`, so "busy cycles per packet" compares directly, and the PMD
//! reads it twice per burst. On other architectures `now` falls back to nanoseconds from a
//! monotonic clock (and `hz` is then 1e9).
//! Threads: any. The only `unsafe` in this crate lives here.
#![allow(unsafe_code)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The current cycle count (monotonic on invariant-TSC CPUs, which every x86_64 server has).
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // RDTSC exists on every x86_64 CPU and only reads the time-stamp counter.
        // SAFETY: no preconditions and no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Cycles per second, measured once over ~20 ms (the first caller pays for it).
pub fn hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1_000_000_000;
        }
        let (t0, c0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(20));
        let (dt, dc) = (t0.elapsed(), now().wrapping_sub(c0));
        let hz = (dc as f64 / dt.as_secs_f64()) as u64;
        hz.max(1_000_000)
    })
}

/// Cycles in a duration.
pub fn from_duration(d: Duration) -> u64 {
    (d.as_secs_f64() * hz() as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_advances_and_rate_is_plausible() {
        let a = now();
        std::thread::sleep(Duration::from_millis(1));
        assert!(now() > a);
        let h = hz();
        assert!((1_000_000..20_000_000_000).contains(&h), "hz = {h}");
        assert!(from_duration(Duration::from_secs(1)) >= h - 1);
    }
}
