//! The MAC learning table of one bridge, keyed by (VLAN, MAC), with aging, a bridge-wide size
//! limit (the least recently seen entry is evicted) and a per-port limit (a MAC beyond its
//! port's limit is not learned, and counted), so one port cannot own the table.
//!
//! Every entry that appears, moves or goes is logged ([`MacTable::take_changes`]), with the
//! ports that gained room under their limit: the pipeline turns these into revalidation tags,
//! so only megaflows that looked at a changed entry are removed.
//!
//! Owns: [`MacTable`]. Threads: PMD threads learn and look up during upcalls, the control thread
//! ages and flushes; all under the bridge's `Mutex<MacTable>`, held for a few hash operations.
//! Lock order: taken after the bridge's table lock, never the other way round.

use crate::types::OfPort;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Default aging time (seconds), as OVS.
pub const DEFAULT_AGING: Duration = Duration::from_secs(300);
/// Default maximum number of entries, as OVS.
pub const DEFAULT_MAX_ENTRIES: usize = 8192;
/// Default per-port limit on learned MACs (`mac-limit`); 0 means none.
pub const DEFAULT_PORT_LIMIT: usize = 1024;

#[derive(Clone, Copy, Debug)]
struct Entry {
    port: OfPort,
    seen: Instant,
    stamp: u64,
}

/// A learned entry as shown to users: (VLAN, MAC, OpenFlow port, age).
pub type MacEntry = (u16, [u8; 6], OfPort, Duration);

/// A learned entry with its port's name instead of its number: (VLAN, MAC, port name, age),
/// as an upgrade hands it to the new vireod.
pub type NamedMacEntry = (u16, [u8; 6], String, Duration);

/// What [`MacTable::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// Already known on this port (refreshed).
    Refreshed,
    /// A new entry (possibly evicting the oldest).
    New,
    /// The MAC moved from another port.
    Moved,
    /// Not learned: the port holds its limit of MACs (a known entry on another port is
    /// forgotten, as its location is stale).
    Refused,
}

/// One port's share of the table, for `dump-macs` / `port-stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortMacStats {
    /// Entries learned on the port (including aged ones not yet swept).
    pub entries: usize,
    /// Its limit (0 = none).
    pub limit: usize,
    /// MACs not learned because the port was at its limit.
    pub refused: u64,
}

/// What changed in a table since [`MacTable::take_changes`] was last called.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MacChanges {
    /// (VLAN, MAC) of entries that appeared, moved or went.
    pub keys: Vec<(u16, u64)>,
    /// Ports that were at their limit and lost an entry (MACs refused there may now fit).
    pub freed: Vec<OfPort>,
}

/// MAC learning table.
#[derive(Debug)]
pub struct MacTable {
    map: HashMap<(u16, u64), Entry>,
    /// stamp -> key, oldest first (stamps grow with every learn/refresh).
    lru: BTreeMap<u64, (u16, u64)>,
    next_stamp: u64,
    aging: Duration,
    max_entries: usize,
    default_limit: usize,
    /// Per-port limits that differ from `default_limit`.
    limits: HashMap<OfPort, usize>,
    /// Entries per port.
    counts: HashMap<OfPort, usize>,
    /// MACs refused per port.
    refused: HashMap<OfPort, u64>,
    changes: MacChanges,
}

impl MacTable {
    /// An empty table with no per-port limit.
    pub fn new(aging: Duration, max_entries: usize) -> MacTable {
        MacTable::with_port_limit(aging, max_entries, 0)
    }

    /// An empty table whose ports may each hold `port_limit` entries (0 = no limit).
    pub fn with_port_limit(aging: Duration, max_entries: usize, port_limit: usize) -> MacTable {
        MacTable {
            map: HashMap::new(),
            lru: BTreeMap::new(),
            next_stamp: 0,
            aging,
            max_entries: max_entries.max(1),
            default_limit: port_limit,
            limits: HashMap::new(),
            counts: HashMap::new(),
            refused: HashMap::new(),
            changes: MacChanges::default(),
        }
    }

    /// Sets a port's limit (`None`: the table's default; 0: none). Entries above a lowered
    /// limit stay until they age or move; new ones are refused meanwhile.
    pub fn set_port_limit(&mut self, port: OfPort, limit: Option<usize>) {
        let was_full = self.port_full(port);
        match limit {
            Some(l) if l != self.default_limit => self.limits.insert(port, l),
            _ => self.limits.remove(&port),
        };
        if was_full && !self.port_full(port) {
            self.changes.freed.push(port);
        }
    }

    /// The limit of `port` (0 = none).
    pub fn port_limit(&self, port: OfPort) -> usize {
        self.limits
            .get(&port)
            .copied()
            .unwrap_or(self.default_limit)
    }

    /// True if `port` holds its limit of entries.
    pub fn port_full(&self, port: OfPort) -> bool {
        let limit = self.port_limit(port);
        limit != 0 && self.counts.get(&port).copied().unwrap_or(0) >= limit
    }

    /// Entries, limit and refusals of `port`.
    pub fn port_stats(&self, port: OfPort) -> PortMacStats {
        PortMacStats {
            entries: self.counts.get(&port).copied().unwrap_or(0),
            limit: self.port_limit(port),
            refused: self.refused.get(&port).copied().unwrap_or(0),
        }
    }

    /// Forgets a deleted port's limit and counters (its entries go with [`MacTable::flush_port`]).
    pub fn forget_port(&mut self, port: OfPort) {
        self.limits.remove(&port);
        self.refused.remove(&port);
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> MacChanges {
        std::mem::take(&mut self.changes)
    }

    /// The port an entry is on, aged or not (for revalidation tags, which must not depend on
    /// the clock).
    pub fn entry_port(&self, vlan: u16, mac: u64) -> Option<OfPort> {
        self.map.get(&(vlan, mac)).map(|e| e.port)
    }

    fn count(&mut self, port: OfPort, up: bool) {
        let c = self.counts.entry(port).or_insert(0);
        if up {
            *c += 1;
            return;
        }
        let limit = self
            .limits
            .get(&port)
            .copied()
            .unwrap_or(self.default_limit);
        if limit != 0 && *c == limit {
            self.changes.freed.push(port);
        }
        *c = c.saturating_sub(1);
        if *c == 0 {
            self.counts.remove(&port);
        }
    }

    /// Removes an entry (eviction, aging, flush), logging the change.
    fn drop_entry(&mut self, key: (u16, u64)) {
        if let Some(e) = self.map.remove(&key) {
            self.lru.remove(&e.stamp);
            self.count(e.port, false);
            self.changes.keys.push(key);
        }
    }

    fn refuse(&mut self, port: OfPort) -> Learned {
        *self.refused.entry(port).or_insert(0) += 1;
        Learned::Refused
    }

    /// Number of entries (including aged ones not yet swept).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Records that `mac` on `vlan` was seen on `port` at `now`.
    pub fn learn(&mut self, vlan: u16, mac: u64, port: OfPort, now: Instant) -> Learned {
        let key = (vlan, mac);
        let old_port = self.map.get(&key).map(|e| e.port);
        if old_port.is_some_and(|p| p != port) && self.port_full(port) {
            // A move onto a full port: not learned, and the old location is stale.
            self.drop_entry(key);
            return self.refuse(port);
        }
        if old_port.is_none() && self.port_full(port) {
            return self.refuse(port);
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        if let Some(e) = self.map.get_mut(&key) {
            let outcome = if e.port == port && now.saturating_duration_since(e.seen) < self.aging {
                Learned::Refreshed
            } else if e.port == port {
                Learned::New
            } else {
                Learned::Moved
            };
            let from = e.port;
            self.lru.remove(&e.stamp);
            *e = Entry {
                port,
                seen: now,
                stamp,
            };
            self.lru.insert(stamp, key);
            if outcome == Learned::Moved {
                self.count(from, false);
                self.count(port, true);
            }
            if outcome != Learned::Refreshed {
                self.changes.keys.push(key);
            }
            return outcome;
        }
        while self.map.len() >= self.max_entries {
            let Some((_, old)) = self.lru.first_key_value().map(|(s, k)| (*s, *k)) else {
                break;
            };
            self.drop_entry(old);
        }
        self.map.insert(
            key,
            Entry {
                port,
                seen: now,
                stamp,
            },
        );
        self.lru.insert(stamp, key);
        self.count(port, true);
        self.changes.keys.push(key);
        Learned::New
    }

    /// Marks an existing entry of `mac` on `port` as seen at `now` (traffic a megaflow carried:
    /// it keeps an active MAC from aging). Learns nothing new; true if refreshed.
    pub fn refresh(&mut self, vlan: u16, mac: u64, port: OfPort, now: Instant) -> bool {
        let key = (vlan, mac);
        let Some(e) = self.map.get_mut(&key) else {
            return false;
        };
        if e.port != port || now.saturating_duration_since(e.seen) >= self.aging {
            return false;
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.lru.remove(&e.stamp);
        e.seen = now;
        e.stamp = stamp;
        self.lru.insert(stamp, key);
        true
    }

    /// The port `mac` on `vlan` was learned on, unless unknown or aged out.
    pub fn lookup(&self, vlan: u16, mac: u64, now: Instant) -> Option<OfPort> {
        let e = self.map.get(&(vlan, mac))?;
        (now.saturating_duration_since(e.seen) < self.aging).then_some(e.port)
    }

    /// Removes entries older than the aging time; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let aging = self.aging;
        let old: Vec<(u64, (u16, u64))> = self
            .lru
            .iter()
            .filter(|(_, k)| {
                self.map
                    .get(k)
                    .is_some_and(|e| now.saturating_duration_since(e.seen) >= aging)
            })
            .map(|(s, k)| (*s, *k))
            .collect();
        for (_, key) in &old {
            self.drop_entry(*key);
        }
        old.len()
    }

    /// Forgets every entry on `port` (port deleted or its VLAN config changed).
    pub fn flush_port(&mut self, port: OfPort) -> usize {
        let gone: Vec<(u16, u64)> = self
            .map
            .iter()
            .filter(|(_, e)| e.port == port)
            .map(|(k, _)| *k)
            .collect();
        for k in &gone {
            self.drop_entry(*k);
        }
        gone.len()
    }

    /// Every live entry as (vlan, mac, port, age), for `fdb/show`-style output.
    pub fn entries(&self, now: Instant) -> Vec<MacEntry> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|((vlan, mac), e)| {
                let age = now.saturating_duration_since(e.seen);
                (*vlan, wire::FlowKey::u64_to_mac(*mac), e.port, age)
            })
            .filter(|e| e.3 < self.aging)
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learn_move_age_and_evict() {
        let t0 = Instant::now();
        let mut t = MacTable::new(Duration::from_secs(10), 2);
        assert_eq!(t.learn(1, 0xa, 1, t0), Learned::New);
        assert_eq!(t.learn(1, 0xa, 1, t0), Learned::Refreshed);
        assert_eq!(t.learn(1, 0xa, 2, t0), Learned::Moved);
        assert_eq!(t.lookup(1, 0xa, t0), Some(2));
        assert_eq!(t.lookup(2, 0xa, t0), None, "keyed by vlan too");
        t.learn(1, 0xb, 1, t0 + Duration::from_secs(1));
        t.learn(1, 0xc, 1, t0 + Duration::from_secs(2));
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(1, 0xa, t0), None, "oldest evicted");
        let later = t0 + Duration::from_secs(11);
        assert_eq!(t.lookup(1, 0xb, later), None, "aged");
        assert_eq!(t.lookup(1, 0xc, later), Some(1));
        assert_eq!(t.expire(later), 1);
        assert_eq!(t.flush_port(1), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn changes_are_logged_for_new_moved_evicted_aged_and_flushed_entries() {
        let t0 = Instant::now();
        let mut t = MacTable::new(Duration::from_secs(10), 2);
        t.learn(1, 0xa, 1, t0);
        t.learn(1, 0xa, 1, t0);
        assert_eq!(
            t.take_changes().keys,
            vec![(1, 0xa)],
            "a refresh is no change"
        );
        t.learn(1, 0xa, 2, t0);
        assert_eq!(t.take_changes().keys, vec![(1, 0xa)], "a move is");
        t.learn(1, 0xb, 1, t0);
        t.learn(1, 0xc, 1, t0);
        assert_eq!(
            t.take_changes().keys,
            vec![(1, 0xb), (1, 0xa), (1, 0xc)],
            "the evicted entry is a change too"
        );
        t.expire(t0 + Duration::from_secs(11));
        let mut aged = t.take_changes().keys;
        aged.sort();
        assert_eq!(aged, vec![(1, 0xb), (1, 0xc)]);
        t.learn(2, 0xd, 3, t0);
        t.take_changes();
        t.flush_port(3);
        assert_eq!(t.take_changes().keys, vec![(2, 0xd)]);
    }

    #[test]
    fn per_port_limit_refuses_counts_and_frees() {
        let t0 = Instant::now();
        let mut t = MacTable::with_port_limit(Duration::from_secs(10), 100, 2);
        assert_eq!(t.learn(0, 1, 7, t0), Learned::New);
        assert_eq!(t.learn(0, 2, 7, t0), Learned::New);
        assert!(t.port_full(7));
        for m in 3..10 {
            assert_eq!(t.learn(0, m, 7, t0), Learned::Refused);
            assert_eq!(t.lookup(0, m, t0), None, "not learned");
        }
        assert_eq!(
            t.learn(0, 1, 7, t0),
            Learned::Refreshed,
            "known MACs refresh"
        );
        let s = t.port_stats(7);
        assert_eq!((s.entries, s.limit, s.refused), (2, 2, 7));
        assert_eq!(
            t.learn(0, 20, 8, t0),
            Learned::New,
            "other ports unaffected"
        );
        t.take_changes();
        // MAC 1 moves to port 8: port 7 has room again and says so.
        assert_eq!(t.learn(0, 1, 8, t0), Learned::Moved);
        assert_eq!(t.take_changes().freed, vec![7]);
        assert_eq!(t.learn(0, 3, 7, t0), Learned::New);
        // A move onto a full port: refused, and the stale entry goes.
        t.set_port_limit(8, Some(2));
        assert_eq!(t.learn(0, 2, 8, t0), Learned::Refused);
        assert_eq!(t.lookup(0, 2, t0), None);
        assert_eq!(t.port_stats(7).entries, 1);
        // Raising or removing a limit frees room; 0 means no limit.
        t.set_port_limit(8, Some(0));
        assert_eq!(t.port_limit(8), 0);
        assert_eq!(t.learn(0, 30, 8, t0), Learned::New);
        assert_eq!(t.learn(0, 31, 8, t0), Learned::New);
        // Aging frees room too.
        let later = t0 + Duration::from_secs(11);
        t.learn(0, 4, 7, t0);
        assert!(t.port_full(7));
        t.take_changes();
        t.expire(later);
        assert!(!t.port_full(7));
        assert!(t.take_changes().freed.contains(&7));
    }

    #[test]
    fn refresh_keeps_an_entry_alive_but_learns_nothing() {
        let t0 = Instant::now();
        let mut t = MacTable::new(Duration::from_secs(10), 10);
        t.learn(0, 1, 1, t0);
        assert!(!t.refresh(0, 2, 1, t0), "unknown: not learned");
        assert!(!t.refresh(0, 1, 2, t0), "other port: not moved");
        assert!(t.refresh(0, 1, 1, t0 + Duration::from_secs(8)));
        assert_eq!(t.lookup(0, 1, t0 + Duration::from_secs(15)), Some(1));
        assert_eq!(t.len(), 1);
    }
}
