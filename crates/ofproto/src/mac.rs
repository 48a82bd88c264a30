//! The MAC learning table of one bridge, keyed by (VLAN, MAC), with aging and a size limit
//! (the least recently seen entry is evicted).
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

#[derive(Clone, Copy, Debug)]
struct Entry {
    port: OfPort,
    seen: Instant,
    stamp: u64,
}

/// A learned entry as shown to users: (VLAN, MAC, OpenFlow port, age).
pub type MacEntry = (u16, [u8; 6], OfPort, Duration);

/// What [`MacTable::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// Already known on this port (refreshed).
    Refreshed,
    /// A new entry (possibly evicting the oldest).
    New,
    /// The MAC moved from another port.
    Moved,
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
}

impl MacTable {
    /// An empty table.
    pub fn new(aging: Duration, max_entries: usize) -> MacTable {
        MacTable {
            map: HashMap::new(),
            lru: BTreeMap::new(),
            next_stamp: 0,
            aging,
            max_entries: max_entries.max(1),
        }
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
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let key = (vlan, mac);
        if let Some(e) = self.map.get_mut(&key) {
            let outcome = if e.port == port && now.saturating_duration_since(e.seen) < self.aging {
                Learned::Refreshed
            } else if e.port == port {
                Learned::New
            } else {
                Learned::Moved
            };
            self.lru.remove(&e.stamp);
            *e = Entry {
                port,
                seen: now,
                stamp,
            };
            self.lru.insert(stamp, key);
            return outcome;
        }
        while self.map.len() >= self.max_entries {
            let Some((_, old)) = self.lru.pop_first() else {
                break;
            };
            self.map.remove(&old);
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
        Learned::New
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
        for (stamp, key) in &old {
            self.lru.remove(stamp);
            self.map.remove(key);
        }
        old.len()
    }

    /// Forgets every entry on `port` (port deleted or its VLAN config changed).
    pub fn flush_port(&mut self, port: OfPort) -> usize {
        let gone: Vec<((u16, u64), u64)> = self
            .map
            .iter()
            .filter(|(_, e)| e.port == port)
            .map(|(k, e)| (*k, e.stamp))
            .collect();
        for (k, stamp) in &gone {
            self.map.remove(k);
            self.lru.remove(stamp);
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
}
