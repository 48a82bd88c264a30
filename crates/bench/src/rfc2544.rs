//! The RFC 2544 throughput search: the highest offered rate whose trial loses at most a given
//! number of packets per million, found by binary search. Every trial is kept, so the searches
//! for stricter thresholds start from what the looser ones already learned.
//!
//! Threads: the caller's (vireo-gen's main thread, between trials).
use crate::stats::LatencySummary;
use serde::{Deserialize, Serialize};

/// What one fixed-rate trial measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Offered aggregate rate, packets/s (0 = as fast as possible).
    pub offered_pps: f64,
    /// Seconds of sending.
    pub secs: f64,
    /// Packets sent, all ports.
    pub sent: u64,
    /// Packets received back, all ports.
    pub received: u64,
    /// Received packets whose sequence number was below one already seen.
    pub reordered: u64,
    /// Aggregate rate actually received, packets/s.
    pub rx_pps: f64,
    /// Packets of an earlier trial that arrived during this one (not counted as received).
    #[serde(default)]
    pub late: u64,
    /// Times the generator's own loop stalled for more than 100 us (preempted: a noisy host).
    #[serde(default)]
    pub gen_stalls: u64,
    /// Longest such stall, microseconds.
    #[serde(default)]
    pub gen_max_stall_us: f64,
    /// Packets received per sending port (0, 1).
    #[serde(default)]
    pub per_src: [u64; 2],
    /// Times this trial was repeated because the generator stalled.
    #[serde(default)]
    pub retries: u32,
    /// Latency of the received packets.
    pub latency: LatencySummary,
}

impl Trial {
    /// Packets lost per million sent (received beyond sent counts as no loss).
    pub fn loss_ppm(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        self.sent.saturating_sub(self.received) as f64 * 1e6 / self.sent as f64
    }
}

/// Runs one trial at an offered rate.
pub trait TrialRunner {
    /// Error type.
    type Error;
    /// Sends at `rate_pps` for the configured trial length and reports.
    fn trial(&mut self, rate_pps: f64) -> Result<Trial, Self::Error>;
}

/// Search settings.
#[derive(Clone, Copy, Debug)]
pub struct SearchConfig {
    /// Highest rate to try, packets/s.
    pub max_pps: f64,
    /// Stop when the bracket is narrower than this share of `max_pps` (e.g. 0.01).
    pub resolution: f64,
    /// At most this many trials per threshold.
    pub max_trials: usize,
}

/// The answer for one loss threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Allowed loss, packets per million.
    pub loss_ppm_allowed: f64,
    /// Highest rate that passed (0 if none did), packets/s.
    pub rate_pps: f64,
    /// The passing trial at that rate, if any.
    pub trial: Option<Trial>,
}

fn bracket(history: &[Trial], ppm: f64, max: f64) -> (f64, f64, Option<Trial>) {
    let mut lo = (0.0, None);
    let mut hi = f64::INFINITY;
    for t in history {
        if t.loss_ppm() <= ppm {
            if t.offered_pps > lo.0 {
                lo = (t.offered_pps, Some(t.clone()));
            }
        } else {
            hi = hi.min(t.offered_pps);
        }
    }
    (lo.0, hi.min(max), lo.1)
}

/// Searches each threshold in `ppm_thresholds`, loosest first; `history` receives every trial.
pub fn search<R: TrialRunner>(
    runner: &mut R,
    cfg: SearchConfig,
    ppm_thresholds: &[f64],
    history: &mut Vec<Trial>,
) -> Result<Vec<SearchResult>, R::Error> {
    let mut order: Vec<f64> = ppm_thresholds.to_vec();
    order.sort_by(|a, b| b.total_cmp(a));
    let step = cfg.max_pps * cfg.resolution;
    let mut out = Vec::new();
    for &ppm in &order {
        if !history.iter().any(|t| t.offered_pps >= cfg.max_pps) {
            history.push(runner.trial(cfg.max_pps)?);
        }
        for _ in 0..cfg.max_trials {
            let (lo, hi, _) = bracket(history, ppm, cfg.max_pps);
            let passed_max = history
                .iter()
                .any(|t| t.offered_pps >= cfg.max_pps && t.loss_ppm() <= ppm);
            if passed_max || hi - lo <= step {
                break;
            }
            history.push(runner.trial((lo + hi) / 2.0)?);
        }
        let (lo, _, trial) = bracket(history, ppm, cfg.max_pps);
        out.push(SearchResult {
            loss_ppm_allowed: ppm,
            rate_pps: lo,
            trial,
        });
    }
    out.sort_by(|a, b| a.loss_ppm_allowed.total_cmp(&b.loss_ppm_allowed));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that forwards everything up to `cap` pps, and beyond it loses a growing share;
    /// below `cap` it still drops `floor_ppm` per million.
    struct SimDevice {
        cap: f64,
        floor_ppm: f64,
        trials: usize,
    }

    impl TrialRunner for SimDevice {
        type Error = ();
        fn trial(&mut self, rate: f64) -> Result<Trial, ()> {
            self.trials += 1;
            let sent = rate as u64;
            let over = if rate > self.cap {
                rate - self.cap
            } else {
                0.0
            };
            let lost = over + rate * self.floor_ppm / 1e6 * (rate / self.cap).min(1.0).powi(4);
            Ok(Trial {
                offered_pps: rate,
                secs: 1.0,
                sent,
                received: sent - lost.round() as u64,
                ..Trial::default()
            })
        }
    }

    fn cfg() -> SearchConfig {
        SearchConfig {
            max_pps: 10_000_000.0,
            resolution: 0.001,
            max_trials: 20,
        }
    }

    #[test]
    fn finds_the_zero_loss_rate_within_resolution() {
        let mut d = SimDevice {
            cap: 3_456_789.0,
            floor_ppm: 0.0,
            trials: 0,
        };
        let mut h = Vec::new();
        let r = search(&mut d, cfg(), &[0.0], &mut h).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].rate_pps <= 3_456_789.0, "{}", r[0].rate_pps);
        assert!(r[0].rate_pps >= 3_456_789.0 - 10_000.0, "{}", r[0].rate_pps);
        assert_eq!(r[0].trial.as_ref().unwrap().loss_ppm(), 0.0);
        assert_eq!(d.trials, h.len());
        assert!(d.trials <= 14, "{} trials", d.trials);
    }

    #[test]
    fn looser_thresholds_give_higher_rates_and_reuse_trials() {
        let mut d = SimDevice {
            cap: 4_000_000.0,
            floor_ppm: 10.0,
            trials: 0,
        };
        let mut h = Vec::new();
        let r = search(&mut d, cfg(), &[0.0, 1.0, 5.0, 20.0], &mut h).unwrap();
        let rates: Vec<f64> = r.iter().map(|x| x.rate_pps).collect();
        assert_eq!(r[0].loss_ppm_allowed, 0.0);
        assert!(rates.windows(2).all(|w| w[0] <= w[1]), "{rates:?}");
        assert!(rates[0] < rates[3], "{rates:?}");
        for x in &r {
            assert!(x.trial.as_ref().unwrap().loss_ppm() <= x.loss_ppm_allowed);
        }
        // 20 ppm allows the cap itself (floor is 10 ppm there): within resolution of 4 Mpps.
        assert!((rates[3] - 4_000_000.0).abs() <= 10_000.0, "{rates:?}");
        assert!(d.trials < 4 * 14, "{} trials", d.trials);
    }

    #[test]
    fn a_device_that_passes_at_max_needs_one_trial() {
        let mut d = SimDevice {
            cap: 1e9,
            floor_ppm: 0.0,
            trials: 0,
        };
        let r = search(&mut d, cfg(), &[0.0, 20.0], &mut Vec::new()).unwrap();
        assert_eq!(d.trials, 1);
        assert_eq!(r[0].rate_pps, 10_000_000.0);
    }
}
