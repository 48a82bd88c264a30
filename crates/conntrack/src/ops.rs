//! The operations API: dump, flush, statistics, limits, policies, expiry sweeps.
//!
//! Owns: [`ConnDump`], [`Stats`], [`SweepReport`] and the `Conntrack` methods a control thread
//! (`vireoctl dump-conntrack`, `flush-conntrack`, `ct-stats`, `set-ct-limit`) calls.
//!
//! Threads: the control thread. Everything here walks the table one shard at a time under
//! that shard's read lock (removal takes the write locks of one connection's two shards), so a
//! PMD is never stalled by more than one shard's worth of work.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::table::{Conn, SHARDS};
use crate::{Conntrack, Timeouts, Tuple, INVALID_NAMES};

/// One connection as dumped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnDump {
    /// Zone.
    pub zone: u16,
    /// Original direction tuple.
    pub orig: Tuple,
    /// Reply direction tuple (as replies arrive, i.e. after NAT).
    pub reply: Tuple,
    /// Protocol state (`ESTABLISHED`, ... for TCP; `REPLIED`/`UNREPLIED` otherwise).
    pub state: &'static str,
    /// Milliseconds until expiry.
    pub expires_in_ms: u64,
    /// Mark.
    pub mark: u32,
    /// Label.
    pub label: u128,
    /// Source translated.
    pub snat: bool,
    /// Destination translated.
    pub dnat: bool,
}

/// Counters and gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections in the table.
    pub total: u32,
    /// Connections per zone (zones with at least one).
    pub per_zone: BTreeMap<u16, u32>,
    /// Connections per protocol number (from a walk of the table).
    pub per_proto: BTreeMap<u8, u32>,
    /// TCP connections per state name.
    pub per_tcp_state: BTreeMap<&'static str, u32>,
    /// Packets marked invalid, by reason ([`crate::INVALID_NAMES`]).
    pub invalid: BTreeMap<&'static str, u64>,
    /// Commits refused by the global limit.
    pub limit_global_hits: u64,
    /// Commits refused by a zone limit.
    pub limit_zone_hits: u64,
    /// Commits refused because NAT found no free tuple (or a tuple clashed).
    pub nat_exhausted: u64,
    /// Connections created.
    pub created: u64,
    /// Connections expired.
    pub expired: u64,
    /// Global limit.
    pub limit: u32,
    /// Fragment datagrams and bytes held.
    pub frag_held: (usize, usize),
    /// Longest a sweep held a shard lock, ns (since creation).
    pub sweep_max_hold_ns: u64,
}

/// What one [`Conntrack::sweep`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Shards visited.
    pub shards: usize,
    /// Connections looked at.
    pub scanned: usize,
    /// Connections removed.
    pub removed: usize,
    /// Longest single lock hold in this call (read or write), ns.
    pub max_hold_ns: u64,
    /// Longest write-lock hold in this call (what a lookup could wait for), ns.
    pub max_write_hold_ns: u64,
}

impl Conntrack {
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<Conn>)) {
        for i in 0..SHARDS {
            self.table.scan_shard(i, |c| {
                if !c.dead.load(Ordering::Relaxed) {
                    f(c)
                }
            });
        }
    }

    /// Every connection (of `zone`, or all), alive at `now`.
    pub fn dump(&self, zone: Option<u16>, now: u64) -> Vec<ConnDump> {
        let mut v = Vec::new();
        self.for_each(|c| {
            if zone.is_some_and(|z| z != c.zone) || !c.alive(now) {
                return;
            }
            let g = c.lock();
            v.push(ConnDump {
                zone: c.zone,
                orig: c.orig,
                reply: c.trans.reverse(),
                state: match &g.tcp {
                    Some(t) => t.name(),
                    None if g.replied => "REPLIED",
                    None => "UNREPLIED",
                },
                expires_in_ms: c.expires.load(Ordering::Relaxed).saturating_sub(now),
                mark: g.mark,
                label: g.label,
                snat: c.nat.snat,
                dnat: c.nat.dnat,
            });
        });
        v.sort_by_key(|a| (a.zone, a.orig));
        v
    }

    /// Removes every connection (of `zone`, or all). Returns how many.
    pub fn flush(&self, zone: Option<u16>) -> usize {
        let mut n = 0;
        for i in 0..SHARDS {
            let mut victims = Vec::new();
            self.table.scan_shard(i, |c| {
                if zone.is_none_or(|z| z == c.zone) {
                    victims.push(c.clone());
                }
            });
            for c in victims {
                if self.table.remove(&c) {
                    self.account_gone(&c, false);
                    n += 1;
                }
            }
        }
        n
    }

    /// Removes the connection a packet with `tuple` in `zone` belongs to (either direction).
    pub fn flush_tuple(&self, zone: u16, tuple: &Tuple) -> bool {
        let k = crate::table::Key { zone, t: *tuple };
        match self.table.get(&k) {
            Some(c) if self.table.remove(&c) => {
                self.account_gone(&c, false);
                true
            }
            _ => false,
        }
    }

    /// Statistics; walks the table for the per-protocol and per-state counts.
    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            total: self.total.load(Ordering::Relaxed),
            limit: self.limit.load(Ordering::Relaxed),
            limit_global_hits: self.ctr.limit_global.load(Ordering::Relaxed),
            limit_zone_hits: self.ctr.limit_zone.load(Ordering::Relaxed),
            nat_exhausted: self.ctr.nat_exhausted.load(Ordering::Relaxed),
            created: self.ctr.created.load(Ordering::Relaxed),
            expired: self.ctr.expired.load(Ordering::Relaxed),
            sweep_max_hold_ns: self.sweep_max_hold_ns.load(Ordering::Relaxed),
            frag_held: self.frags.lock().unwrap_or_else(|e| e.into_inner()).usage(),
            ..Stats::default()
        };
        for (name, c) in INVALID_NAMES.iter().zip(self.ctr.invalid.iter()) {
            s.invalid.insert(*name, c.load(Ordering::Relaxed));
        }
        for (z, c) in self.zone_count.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n != 0 {
                s.per_zone.insert(z as u16, n);
            }
        }
        self.for_each(|c| {
            *s.per_proto.entry(c.orig.proto).or_default() += 1;
            if let Some(t) = c.lock().tcp {
                *s.per_tcp_state.entry(t.name()).or_default() += 1;
            }
        });
        s
    }

    /// Sets the global connection limit (existing connections stay).
    pub fn set_limit(&self, n: u32) {
        self.limit.store(n, Ordering::Relaxed);
    }

    /// Sets a zone's connection limit (0 = none).
    pub fn set_zone_limit(&self, zone: u16, n: u32) {
        self.zone_limit[usize::from(zone)].store(n, Ordering::Relaxed);
    }

    /// A zone's connection limit (0 = none).
    pub fn zone_limit(&self, zone: u16) -> u32 {
        self.zone_limit[usize::from(zone)].load(Ordering::Relaxed)
    }

    /// Connections in a zone.
    pub fn zone_count(&self, zone: u16) -> u32 {
        self.zone_count[usize::from(zone)].load(Ordering::Relaxed)
    }

    /// Connections in the table.
    pub fn len(&self) -> u32 {
        self.total.load(Ordering::Relaxed)
    }

    /// True if the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets a zone's timeout policy (`None`: back to the defaults). Applies to connections
    /// created afterwards (a connection keeps the policy it was created
    /// under, so the hot path reads no shared policy table).
    pub fn set_zone_policy(&self, zone: u16, t: Option<Timeouts>) {
        let mut p = self.policies.write().unwrap_or_else(|e| e.into_inner());
        match t {
            Some(t) => p.insert(zone, Arc::new(t)),
            None => p.remove(&zone),
        };
    }

    /// Turns TCP sequence-window checks on or off for a zone (on by default).
    pub fn set_zone_window_check(&self, zone: u16, on: bool) {
        let z = usize::from(zone);
        let bit = 1u64 << (z % 64);
        if on {
            self.no_window[z / 64].fetch_and(!bit, Ordering::Relaxed);
        } else {
            self.no_window[z / 64].fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Expires connections in the next `max_shards` shards (of [`SHARDS`]), resuming where the
    /// previous call stopped. Each shard is scanned under its read lock; each expired
    /// connection is removed under the write locks of its two shards. A control thread calling
    /// this with `SHARDS / 16` every 100 ms covers the table every 1.6 s.
    pub fn sweep(&self, now: u64, max_shards: usize) -> SweepReport {
        let mut r = SweepReport::default();
        for _ in 0..max_shards.min(SHARDS) {
            let i = self.sweep_cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut victims = Vec::with_capacity(64);
            let held = self.table.scan_shard(i, |c| {
                r.scanned += 1;
                if !c.alive(now) {
                    victims.push(c.clone());
                }
            });
            r.max_hold_ns = r.max_hold_ns.max(held);
            for c in victims {
                let (gone, held) = self.table.remove_timed(&c);
                if gone {
                    self.account_gone(&c, true);
                    r.removed += 1;
                }
                r.max_write_hold_ns = r.max_write_hold_ns.max(held);
            }
            r.max_write_hold_ns = r.max_write_hold_ns.max(self.table.purge_dead(i));
            r.max_hold_ns = r.max_hold_ns.max(r.max_write_hold_ns);
            r.shards += 1;
        }
        self.sweep_max_hold_ns
            .fetch_max(r.max_hold_ns, Ordering::Relaxed);
        r
    }
}
