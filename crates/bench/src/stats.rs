//! Summary statistics for repeated measurements (median and spread over rounds) and a
//! fixed-bucket latency histogram for `vireo-gen`.
//!
//! Threads: the caller's (the histogram lives in vireo-gen's poll loop).
use serde::{Deserialize, Serialize};

/// Median, minimum, maximum and relative spread of a set of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median (mean of the two middle samples when `n` is even).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// (max - min) / median, in percent; 0 when the median is 0.
    pub spread_pct: f64,
}

/// Summarises `samples`; `None` when there are none (or any is NaN).
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let (min, max) = (v[0], v[n - 1]);
    let spread_pct = if median == 0.0 {
        0.0
    } else {
        (max - min) / median * 100.0
    };
    Some(Summary {
        n,
        median,
        min,
        max,
        spread_pct,
    })
}

/// Buckets per tier of the latency histogram.
const TIER: u64 = 1000;
/// Number of latency buckets: 100 ns wide up to 100 us, 10 us wide up to 10 ms, 1 ms wide up
/// to 1 s; anything slower goes to the last bucket.
pub const BUCKETS: usize = 3 * TIER as usize;

/// The bucket holding `ns`.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    let b = if ns < 100 * TIER {
        ns / 100
    } else if ns < 10_000 * TIER {
        TIER + (ns - 100 * TIER) / 9_900
    } else {
        2 * TIER + (ns - 10_000 * TIER) / 990_000
    };
    (b as usize).min(BUCKETS - 1)
}

/// Lower edge of bucket `b`, ns.
pub fn bucket_start(b: usize) -> u64 {
    let b = b as u64;
    match b / TIER {
        0 => b * 100,
        1 => 100 * TIER + (b - TIER) * 9_900,
        _ => 10_000 * TIER + (b - 2 * TIER) * 990_000,
    }
}

/// Latency histogram (three tiers of buckets, see [`BUCKETS`]) plus exact min, max and sum.
#[derive(Clone, Debug)]
pub struct LatencyHist {
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            buckets: vec![0; BUCKETS],
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

/// What a histogram reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Smallest latency, ns.
    pub min_ns: u64,
    /// Mean latency, ns.
    pub avg_ns: f64,
    /// 99th percentile (upper edge of its bucket), ns.
    pub p99_ns: u64,
    /// Largest latency, ns.
    pub max_ns: u64,
    /// Non-empty buckets as (lower edge ns, count), for plots.
    pub buckets: Vec<(u64, u64)>,
}

impl LatencyHist {
    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_of(ns)] += 1;
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Latency at quantile `q` (0..=1): the upper edge of the bucket holding it, capped by max.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return bucket_start(i + 1).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// The summary (all zero when empty).
    pub fn summary(&self) -> LatencySummary {
        if self.count == 0 {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.count,
            min_ns: self.min_ns,
            avg_ns: self.sum_ns as f64 / self.count as f64,
            p99_ns: self.quantile(0.99),
            max_ns: self.max_ns,
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| (bucket_start(i), c))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_and_spread() {
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert!((s.spread_pct - 100.0).abs() < 1e-9);
        let s = summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!((s.spread_pct - 120.0).abs() < 1e-9);
        assert_eq!(summarize(&[0.0, 0.0]).unwrap().spread_pct, 0.0);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn bucket_tiers_are_contiguous() {
        for b in 0..BUCKETS - 1 {
            assert!(bucket_start(b) < bucket_start(b + 1));
            assert_eq!(bucket_of(bucket_start(b)), b, "bucket {b}");
            assert_eq!(bucket_of(bucket_start(b + 1) - 1), b, "bucket {b} end");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = LatencyHist::default();
        for ns in 1..=1000u64 {
            h.record(ns * 10); // 10 ns .. 10 us, uniform
        }
        let s = h.summary();
        assert_eq!((s.count, s.min_ns, s.max_ns), (1000, 10, 10_000));
        assert!((s.avg_ns - 5005.0).abs() < 1e-6);
        assert_eq!(s.p99_ns, 10_000); // upper edge of the bucket holding 9_900
        h.record(5_000_000_000); // beyond the last bucket: counted, max exact
        assert_eq!(h.summary().max_ns, 5_000_000_000);
        for _ in 0..20 {
            h.record(3_000_000); // 3 ms: second tier
        }
        assert_eq!(h.quantile(0.99), bucket_start(bucket_of(3_000_000) + 1));
        assert!(h.quantile(0.99) > 3_000_000 && h.quantile(0.99) <= 3_009_900);
        assert_eq!(LatencyHist::default().summary().count, 0);
    }
}
