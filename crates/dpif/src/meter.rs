//! Meters on the fast path: rate limiters that a megaflow's action list names
//! ([`crate::Action::Meter`]), so a metered flow stays in the caches and never upcalls per
//! packet.
//!
//! Owns: [`Meter`] (one OpenFlow meter's bands, their token state and counters) and
//! [`MeterRef`] (the shared handle an action carries).
//!
//! Algorithm: each band is a GCRA ("virtual scheduling") limiter, the single-word form of a
//! token bucket. A band keeps one atomic word, the *theoretical arrival time* (TAT) in 1/256
//! ns since the process's meter epoch. A packet costing `inc` (one packet, or its bytes
//! converted to time at the band's rate) conforms when `TAT <= now + tolerance`, and then moves
//! TAT to `max(TAT, now) + inc` with one compare-and-swap; a packet that exceeds leaves TAT
//! alone (it takes no tokens). `tolerance` is the burst: `burst * inc_per_unit`, so a band
//! idle long enough passes `burst` units back to back and then exactly its rate. Without the
//! BURST flag the burst is a tenth of a second at the band's rate (at least one packet, or
//! 1,600 bytes), so the measured rate over any second is within 10% of the rate at worst
//! right after idling, and converges to it.
//!
//! Bands are checked from the highest rate down; the first band the packet exceeds is the one
//! that applies (OpenFlow's "highest rate lower than the measured rate"); bands above it were
//! charged. DROP drops the packet; DSCP_REMARK raises the drop precedence of an AF-class DSCP
//! by `prec_level` (capped at 3) and lets the packet through.
//!
//! Why atomics and not per-PMD shares: one CAS per packet per band on a word shared by the
//! PMDs that carry the meter's flows keeps the rate exact whatever the split of traffic across
//! PMDs (per-PMD shares need rebalancing and under-use a share whose PMD is idle); the word is
//! written only by PMDs that carry this meter's flows. Counters are relaxed `fetch_add`s.
//! Threads: PMD threads call [`Meter::apply`]; the control thread makes meters and reads
//! their counters. No locks.
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Time unit of the limiters: 1/256 ns.
const SUB_NS: u64 = 256;

/// What a band does to a packet that exceeds its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BandKind {
    /// Drop the packet.
    Drop,
    /// Raise the DSCP drop precedence by this many levels (AF classes only).
    DscpRemark(u8),
}

/// One band's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BandConfig {
    pub kind: BandKind,
    /// Packets per second, or kilobits per second (see [`MeterConfig::pktps`]).
    pub rate: u32,
    /// Packets, or kilobits; 0 = the default burst (a tenth of a second at `rate`).
    pub burst: u32,
}

/// A meter's configuration (already validated: at least one band, every rate non-zero).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeterConfig {
    /// Rates in packets per second (else kilobits per second, counting the whole frame).
    pub pktps: bool,
    pub bands: Vec<BandConfig>,
}

/// Counters of one band.
#[derive(Debug, Default)]
pub struct BandCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
}

/// A meter's counters; shared by the old and new [`Meter`] when a meter is modified.
#[derive(Debug, Default)]
pub struct MeterCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// One per band, in the order of [`MeterConfig::bands`].
    pub bands: Vec<BandCounters>,
}

/// A snapshot of a meter's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeterStats {
    pub packets: u64,
    pub bytes: u64,
    /// (packets, bytes) per band, in configuration order.
    pub bands: Vec<(u64, u64)>,
}

struct Band {
    kind: BandKind,
    /// Cost of one packet (pktps) or one byte (kbps), in 1/256 ns.
    inc: u64,
    /// Burst tolerance, in 1/256 ns.
    tolerance: u64,
    tat: AtomicU64,
    /// Index into the counters (configuration order).
    index: usize,
}

/// One meter: bands ordered by rate, highest first.
pub struct Meter {
    id: u32,
    config: MeterConfig,
    pktps: bool,
    bands: Vec<Band>,
    counters: Arc<MeterCounters>,
}

/// Nanoseconds since the meters' epoch (the first call), for [`Meter::apply`].
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let e = *EPOCH.get_or_init(Instant::now);
    u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// What a meter decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within every band (or a remark band applied; `remark` levels, 0 = none).
    Pass { remark: u8 },
    /// A drop band applied.
    Drop,
}

impl Verdict {
    /// True for [`Verdict::Drop`].
    pub fn dropped(self) -> bool {
        self == Verdict::Drop
    }
}

impl Meter {
    /// A new meter with fresh counters.
    pub fn new(id: u32, config: MeterConfig) -> Meter {
        let counters = Arc::new(MeterCounters {
            bands: config
                .bands
                .iter()
                .map(|_| BandCounters::default())
                .collect(),
            ..MeterCounters::default()
        });
        Meter::with_counters(id, config, counters)
    }

    /// A meter replacing `old` (meter-mod MODIFY): new bands, the old meter's counters when
    /// the number of bands is unchanged.
    pub fn replacing(old: &Meter, config: MeterConfig) -> Meter {
        if old.config.bands.len() == config.bands.len() {
            Meter::with_counters(old.id, config, old.counters.clone())
        } else {
            let m = Meter::new(old.id, config);
            m.counters
                .packets
                .store(old.counters.packets.load(Relaxed), Relaxed);
            m.counters
                .bytes
                .store(old.counters.bytes.load(Relaxed), Relaxed);
            m
        }
    }

    fn with_counters(id: u32, config: MeterConfig, counters: Arc<MeterCounters>) -> Meter {
        let pktps = config.pktps;
        let mut bands: Vec<Band> = config
            .bands
            .iter()
            .enumerate()
            .map(|(index, b)| {
                let rate = u64::from(b.rate.max(1));
                // pktps: ns per packet; kbps: ns per byte = 8e6 / rate.
                let inc = if pktps {
                    1_000_000_000 * SUB_NS / rate
                } else {
                    8_000_000 * SUB_NS / rate
                };
                let burst_units = if b.burst != 0 {
                    if pktps {
                        u64::from(b.burst)
                    } else {
                        u64::from(b.burst) * 1000 / 8
                    }
                } else if pktps {
                    (rate / 10).max(1)
                } else {
                    (rate * 1000 / 8 / 10).max(1600)
                };
                Band {
                    kind: b.kind,
                    inc,
                    tolerance: burst_units.saturating_mul(inc),
                    tat: AtomicU64::new(0),
                    index,
                }
            })
            .collect();
        bands.sort_by_key(|b| std::cmp::Reverse(config.bands[b.index].rate));
        Meter {
            id,
            config,
            pktps,
            bands,
            counters,
        }
    }

    /// The meter id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The configuration it was made from.
    pub fn config(&self) -> &MeterConfig {
        &self.config
    }

    /// Runs one packet of `len` bytes through the meter at time `now_ns` ([`now_ns`]).
    #[inline]
    pub fn apply(&self, len: usize, now_ns: u64) -> Verdict {
        let c = &self.counters;
        c.packets.fetch_add(1, Relaxed);
        c.bytes.fetch_add(len as u64, Relaxed);
        let now = now_ns.saturating_mul(SUB_NS);
        let units = if self.pktps { 1 } else { len as u64 };
        for b in &self.bands {
            if !b.conform(now, units) {
                if let Some(bc) = c.bands.get(b.index) {
                    bc.packets.fetch_add(1, Relaxed);
                    bc.bytes.fetch_add(len as u64, Relaxed);
                }
                return match b.kind {
                    BandKind::Drop => Verdict::Drop,
                    BandKind::DscpRemark(p) => Verdict::Pass { remark: p },
                };
            }
        }
        Verdict::Pass { remark: 0 }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> MeterStats {
        let c = &self.counters;
        MeterStats {
            packets: c.packets.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            bands: c
                .bands
                .iter()
                .map(|b| (b.packets.load(Relaxed), b.bytes.load(Relaxed)))
                .collect(),
        }
    }
}

impl Band {
    #[inline]
    fn conform(&self, now: u64, units: u64) -> bool {
        let inc = self.inc.saturating_mul(units);
        let mut tat = self.tat.load(Relaxed);
        loop {
            if tat > now.saturating_add(self.tolerance) {
                return false;
            }
            let next = tat.max(now).saturating_add(inc);
            match self.tat.compare_exchange_weak(tat, next, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

/// Raises the drop precedence of an AF-class DSCP (`aaa dd 0`, class 1-4, precedence 1-3)
/// by `levels`, capped at 3; other code points are unchanged.
pub fn remark_dscp(dscp: u8, levels: u8) -> u8 {
    let class = dscp >> 3;
    let prec = (dscp >> 1) & 0x3;
    if !(1..=4).contains(&class) || prec == 0 || dscp & 1 != 0 {
        return dscp;
    }
    let p = (prec + levels).min(3);
    (class << 3) | (p << 1)
}

/// The handle a [`crate::Action::Meter`] carries: equal only to itself (a modified meter is a
/// new handle, so revalidation replaces the megaflows that used the old one).
#[derive(Clone)]
pub struct MeterRef(pub Arc<Meter>);

impl PartialEq for MeterRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for MeterRef {}
impl Hash for MeterRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}
impl fmt::Debug for MeterRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "meter({})", self.0.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_meter(pktps: bool, rate: u32, burst: u32) -> Meter {
        Meter::new(
            1,
            MeterConfig {
                pktps,
                bands: vec![BandConfig {
                    kind: BandKind::Drop,
                    rate,
                    burst,
                }],
            },
        )
    }

    /// Offers `offered` packets per second evenly for `secs` and counts what passes.
    fn run(m: &Meter, offered: u64, secs: u64, len: usize) -> u64 {
        let step = 1_000_000_000 / offered;
        let mut passed = 0;
        for i in 0..offered * secs {
            if m.apply(len, 1_000_000_000 + i * step) != Verdict::Drop {
                passed += 1;
            }
        }
        passed
    }

    #[test]
    fn pktps_rate_is_exact_after_the_burst() {
        for rate in [10_000u32, 50_000, 500_000] {
            let m = drop_meter(true, rate, 0);
            let passed = run(&m, u64::from(rate) * 3, 2, 64);
            // Two seconds at `rate` plus the default burst (rate / 10).
            let expect = 2 * u64::from(rate) + u64::from(rate) / 10;
            let err = passed.abs_diff(expect) as f64 / expect as f64;
            assert!(
                err < 0.01,
                "rate {rate}: passed {passed}, expected {expect}"
            );
            let s = m.stats();
            assert_eq!(s.packets, u64::from(rate) * 6);
            assert_eq!(s.bands[0].0, s.packets - passed);
        }
    }

    #[test]
    fn under_the_rate_nothing_drops() {
        let m = drop_meter(true, 100_000, 0);
        assert_eq!(run(&m, 50_000, 1, 64), 50_000);
        assert_eq!(m.stats().bands[0].0, 0);
    }

    #[test]
    fn kbps_counts_bytes() {
        // 8000 kbps = 1,000,000 bytes/s; 1000-byte packets -> 1000 pps, burst 100 kb.
        let m = drop_meter(false, 8000, 100);
        let passed = run(&m, 5000, 2, 1000);
        let expect = 2000 + 100_000 / 8 / 1000;
        assert!(passed.abs_diff(expect) <= 2, "{passed} vs {expect}");
    }

    #[test]
    fn explicit_burst_passes_back_to_back() {
        let m = drop_meter(true, 1000, 50);
        let passed = (0..200)
            .filter(|_| m.apply(64, 5_000_000_000) != Verdict::Drop)
            .count();
        // tolerance of 50 packets: 51 pass at one instant (GCRA's +1).
        assert_eq!(passed, 51);
    }

    #[test]
    fn highest_exceeded_band_applies() {
        let m = Meter::new(
            2,
            MeterConfig {
                pktps: true,
                bands: vec![
                    BandConfig {
                        kind: BandKind::Drop,
                        rate: 2000,
                        burst: 10,
                    },
                    BandConfig {
                        kind: BandKind::DscpRemark(1),
                        rate: 1000,
                        burst: 10,
                    },
                ],
            },
        );
        let mut remarked = 0;
        let mut dropped = 0;
        // 3000 pps for a second: ~1000 pass clean, ~1000 remarked, ~1000 dropped.
        for i in 0..3000u64 {
            match m.apply(64, 1_000_000_000 + i * 333_333) {
                Verdict::Drop => dropped += 1,
                Verdict::Pass { remark: 1 } => remarked += 1,
                _ => {}
            }
        }
        assert!((980..=1030).contains(&dropped), "dropped {dropped}");
        assert!((980..=1030).contains(&remarked), "remarked {remarked}");
        let s = m.stats();
        assert_eq!(s.bands[0].0, dropped);
        assert_eq!(s.bands[1].0, remarked);
    }

    #[test]
    fn remark_raises_af_precedence_only() {
        assert_eq!(remark_dscp(10, 1), 12); // AF11 -> AF12
        assert_eq!(remark_dscp(10, 5), 14); // capped at AF13
        assert_eq!(remark_dscp(46, 1), 46); // EF unchanged
        assert_eq!(remark_dscp(0, 2), 0);
    }

    #[test]
    fn modify_keeps_counters() {
        let m = drop_meter(true, 10, 1);
        m.apply(64, 0);
        let cfg = m.config().clone();
        let m2 = Meter::replacing(&m, cfg);
        assert_eq!(m2.stats().packets, 1);
        assert!(MeterRef(Arc::new(m)) != MeterRef(Arc::new(m2)));
    }
}
