//! XDP steering upkeep for `af-xdp` ports with `xdp-steering=on`: which destination MAC goes
//! to which NUMA node's steering sockets. The wanted map is the operator's entries
//! (`set-mac-numa`, kept in the config store) plus, for each MAC that NORMAL learned on a
//! vhost-user port whose guest memory's node is known (`Port::numa_node`), that node; an
//! operator entry wins over a learned one. Each steering port's BPF map is brought to the
//! wanted map by a diff against what was installed (one `bpf()` call per change); a port
//! adopted at an upgrade starts the diff from what its map holds (read back from the map). A
//! node the port has no steering sockets for is skipped and counted.
//!
//! Threads: [`Steering::sync`] runs on the housekeeping thread (every 500 ms, so learned MACs,
//! ports and assignments are followed) and on the control thread right after a command changes
//! ports or entries; a mutex serializes the two. Never on a PMD.
use super::runtime::Shared;
use ports::af_xdp::AfXdpPort;
use ports::Port;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A MAC address as 6 bytes.
pub type Mac = [u8; 6];

/// Steering state shared by the control and housekeeping threads.
#[derive(Default)]
pub struct Steering {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Steering ports by name.
    ports: BTreeMap<String, Arc<AfXdpPort>>,
    /// Operator entries.
    manual: BTreeMap<Mac, usize>,
    /// What each port's map holds now.
    installed: BTreeMap<String, BTreeMap<Mac, usize>>,
    /// Entries not installed (node out of the port's range, or the map refused them).
    skipped: u64,
}

/// One row of `dump-mac-numa`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The MAC.
    pub mac: Mac,
    /// The node it is steered to.
    pub node: usize,
    /// `manual` (set-mac-numa) or `learned` (NORMAL on a vhost-user port).
    pub source: &'static str,
    /// Steering ports whose map holds it.
    pub ports: Vec<String>,
}

impl Steering {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new steering port: the diff starts from what its map holds (empty for a port opened
    /// here; the old vireod's entries for one adopted at an upgrade, which keep steering).
    pub fn add_port(&self, name: &str, port: Arc<AfXdpPort>) {
        let have: BTreeMap<Mac, usize> = match port.steer_entries() {
            Ok(v) => v.into_iter().collect(),
            Err(e) => {
                tracing::warn!(port = %name, error = %e.0, "cannot read the steering map; refilling it");
                BTreeMap::new()
            }
        };
        let mut g = self.lock();
        g.ports.insert(name.to_string(), port);
        g.installed.insert(name.to_string(), have);
    }

    /// A port gone (its map went with it).
    pub fn remove_port(&self, name: &str) {
        let mut g = self.lock();
        g.ports.remove(name);
        g.installed.remove(name);
    }

    /// Replaces the operator entries.
    pub fn set_manual(&self, manual: BTreeMap<Mac, usize>) {
        self.lock().manual = manual;
    }

    /// Entries skipped since start.
    pub fn skipped(&self) -> u64 {
        self.lock().skipped
    }

    /// The wanted map with each entry's source.
    fn wanted(manual: &BTreeMap<Mac, usize>, shared: &Shared) -> BTreeMap<Mac, (usize, bool)> {
        let mut out: BTreeMap<Mac, (usize, bool)> = learned(shared)
            .into_iter()
            .map(|(m, n)| (m, (n, false)))
            .collect();
        for (&m, &n) in manual {
            out.insert(m, (n, true));
        }
        out
    }

    /// Brings every steering port's map to the wanted map.
    pub fn sync(&self, shared: &Shared) {
        let mut g = self.lock();
        if g.ports.is_empty() {
            return;
        }
        let wanted = Self::wanted(&g.manual, shared);
        let Inner {
            ports,
            installed,
            skipped,
            ..
        } = &mut *g;
        for (name, port) in ports.iter() {
            let have = installed.entry(name.clone()).or_default();
            let nodes = port.steer_nodes();
            let stale: Vec<Mac> = have
                .keys()
                .filter(|m| wanted.get(*m).is_none_or(|(n, _)| *n >= nodes))
                .copied()
                .collect();
            for m in stale {
                if let Err(e) = port.steer_del(m) {
                    tracing::warn!(port = %name, error = %e.0, "cannot remove a steering entry");
                }
                have.remove(&m);
            }
            for (&m, &(n, _)) in &wanted {
                if have.get(&m) == Some(&n) {
                    continue;
                }
                if n >= nodes {
                    *skipped += 1;
                    continue;
                }
                match port.steer_set(m, n) {
                    Ok(()) => {
                        have.insert(m, n);
                    }
                    Err(e) => {
                        *skipped += 1;
                        tracing::warn!(port = %name, error = %e.0, "cannot add a steering entry");
                    }
                }
            }
        }
    }

    /// The wanted entries and the ports holding each.
    pub fn dump(&self, shared: &Shared) -> Vec<Row> {
        let g = self.lock();
        Self::wanted(&g.manual, shared)
            .into_iter()
            .map(|(mac, (node, manual))| Row {
                mac,
                node,
                source: if manual { "manual" } else { "learned" },
                ports: g
                    .installed
                    .iter()
                    .filter(|(_, h)| h.get(&mac) == Some(&node))
                    .map(|(p, _)| p.clone())
                    .collect(),
            })
            .collect()
    }
}

/// MAC → node for every MAC NORMAL learned on a vhost-user port whose guest memory's node is
/// known.
fn learned(shared: &Shared) -> BTreeMap<Mac, usize> {
    let bridges: Vec<String> = shared
        .bridges
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect();
    let mut out = BTreeMap::new();
    for br in bridges {
        let (Ok(pcs), Ok(macs)) = (shared.pipeline.ports(&br), shared.pipeline.mac_entries(&br))
        else {
            continue;
        };
        for (_vlan, mac, ofport, _age) in macs {
            let Some(pc) = pcs.iter().find(|p| p.ofport == ofport) else {
                continue;
            };
            let port: Option<Arc<dyn Port>> = shared
                .ports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&pc.name)
                .map(|p| p.port.clone());
            let Some(port) = port else {
                continue;
            };
            if port.kind().starts_with("vhost-user") {
                if let Some(n) = port.numa_node() {
                    out.insert(mac, n);
                }
            }
        }
    }
    out
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<Mac, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if m[0] & 1 == 1 {
        return Err(format!(
            "{s} is a multicast MAC: only unicast MACs are steered"
        ));
    }
    Ok(m)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_print() {
        let m = parse_mac("02:AB:cd:00:00:0f").unwrap();
        assert_eq!(m, [2, 0xab, 0xcd, 0, 0, 0xf]);
        assert_eq!(mac_text(&m), "02:ab:cd:00:00:0f");
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:0g",
            "002:00:00:00:00:00",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        assert!(parse_mac("01:00:5e:00:00:01")
            .unwrap_err()
            .contains("multicast"));
    }
}
