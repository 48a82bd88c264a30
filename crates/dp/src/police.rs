//! Per-port policing: a rate limiter on what a port receives (ingress, applied right after the
//! rx burst, before flow lookup, so a noisy guest's excess costs no classification) and on what
//! the switch sends to it (egress, applied to each tx batch before `tx_burst`). Each limiter is
//! a one-band drop [`Meter`] (the same GCRA bucket on one atomic word as OpenFlow meters), so
//! any PMD may police a port without a lock.
//!
//! Owns: [`Policers`], the table of limiters by datapath port number, published by the
//! control thread with an atomic swap and read by PMDs with one `ArcSwap` load per non-empty
//! rx burst or tx batch. Drops are counted by the limiter's band (`policed` in `port-stats`).
use crate::meter::{BandConfig, BandKind, Meter, MeterConfig, Verdict};
use arc_swap::ArcSwap;
use packet::{Batch, Pool};
use std::sync::Arc;

/// A port's limiters.
#[derive(Default)]
pub struct PortPolicer {
    /// On what the port receives.
    pub ingress: Option<Meter>,
    /// On what the switch sends out of the port.
    pub egress: Option<Meter>,
}

/// A limiter's configuration: kilobits (bytes counted from the Ethernet header on) or packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Packets per second (else kilobits per second).
    pub pktps: bool,
    /// Rate (kbps or pps), not 0.
    pub rate: u32,
    /// Burst (kilobits or packets); 0 = the meters' default (0.1 s at the rate).
    pub burst: u32,
}

impl Limit {
    fn meter(self, port: u32) -> Meter {
        Meter::new(
            port,
            MeterConfig {
                pktps: self.pktps,
                bands: vec![BandConfig {
                    kind: BandKind::Drop,
                    rate: self.rate,
                    burst: self.burst,
                }],
            },
        )
    }
}

/// Limiters of every port, indexed by datapath port number.
#[derive(Default)]
pub struct Policers {
    table: ArcSwap<Vec<Option<Arc<PortPolicer>>>>,
}

/// Port numbers beyond this cannot be policed.
pub const MAX_POLICED_PORT: u32 = 65_535;

impl Policers {
    /// Sets (or with both `None`, clears) the limiters of `port` (control thread). New limiters
    /// start with a full bucket and zero counters.
    pub fn set(&self, port: u32, ingress: Option<Limit>, egress: Option<Limit>) -> bool {
        if port > MAX_POLICED_PORT {
            return false;
        }
        let mut t: Vec<Option<Arc<PortPolicer>>> = (**self.table.load()).clone();
        let i = port as usize;
        if ingress.is_none() && egress.is_none() {
            if let Some(slot) = t.get_mut(i) {
                *slot = None;
            }
        } else {
            if t.len() <= i {
                t.resize(i + 1, None);
            }
            t[i] = Some(Arc::new(PortPolicer {
                ingress: ingress.map(|l| l.meter(port)),
                egress: egress.map(|l| l.meter(port)),
            }));
        }
        while t.last().is_some_and(Option::is_none) {
            t.pop();
        }
        self.table.store(Arc::new(t));
        true
    }

    /// The limiters of `port`, if any.
    #[inline]
    pub fn get(&self, port: u32) -> Option<Arc<PortPolicer>> {
        let t = self.table.load();
        if t.is_empty() {
            return None;
        }
        t.get(port as usize).and_then(Clone::clone)
    }

    /// Packets dropped by `port`'s (ingress, egress) limiters since they were set.
    pub fn drops(&self, port: u32) -> (u64, u64) {
        let Some(p) = self.get(port) else {
            return (0, 0);
        };
        let d = |m: &Option<Meter>| m.as_ref().map_or(0, |m| m.stats().bands[0].0);
        (d(&p.ingress), d(&p.egress))
    }
}

/// Drops from `batch` what `meter` does not let through; the dropped buffers go back to `pool`.
#[inline]
pub fn police(meter: &Meter, batch: &mut Batch, pool: &mut Pool, now_ns: u64) {
    batch.retain(
        |p| meter.apply(p.frame_len(), now_ns) != Verdict::Drop,
        |p| pool.put(p),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_clear_and_police() {
        let p = Policers::default();
        assert!(p.get(3).is_none());
        let l = Limit {
            pktps: true,
            rate: 1000,
            burst: 4,
        };
        assert!(p.set(3, Some(l), None));
        assert!(p.get(3).unwrap().ingress.is_some() && p.get(3).unwrap().egress.is_none());
        assert!(p.get(2).is_none() && p.get(4).is_none());
        let mut pool = Pool::new(0, 0);
        let mut b = Batch::new();
        for _ in 0..10 {
            b.push(packet::Packet::from_slice(&[0u8; 60])).unwrap();
        }
        let pol = p.get(3).unwrap();
        police(
            pol.ingress.as_ref().unwrap(),
            &mut b,
            &mut pool,
            1_000_000_000,
        );
        assert_eq!(b.len(), 5, "a burst of 4 (+1)");
        assert_eq!(p.drops(3), (5, 0));
        assert_eq!(pool.free_count(), 5, "dropped buffers recycled");
        assert!(p.set(3, None, None));
        assert!(p.get(3).is_none());
        assert!(!p.set(MAX_POLICED_PORT + 1, Some(l), None));
    }
}
