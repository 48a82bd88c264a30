//! Native tunneling's underlay in the daemon (issue 12, stage 1): the `route/add`,
//! `route/del`, `route/show`, `tnl/neigh/show` and `tnl/neigh/flush` commands (IPv4 and
//! IPv6), the connected routes and MACs of internal ports (read from the kernel with
//! `getifaddrs` when a port is attached and at every housekeeping upkeep, so an `ip addr add`
//! on the port is seen within about half a second; IPv6 link-local addresses make no route),
//! the host's own routes through internal ports (read over rtnetlink by [`super::kroutes`]
//! when the kernel announces a route change, `ip route add ... dev brp` seen within a round),
//! neighbour aging and learning from decapsulated traffic's outer sources
//! (`dp::tnl::take_sources`), and [`SnoopPort`], the wrapper that lets the neighbour cache
//! learn from the ARP and IPv6 Neighbor Discovery frames the bridge delivers to an internal
//! port.
//!
//! The state itself is `tnl::Underlay`, in [`Shared::underlay`] behind a mutex.
//!
//! Threads: commands on a control connection thread (Switch mutex held); [`upkeep`] on the
//! housekeeping thread; [`SnoopPort`]'s tx bursts on any PMD: they take the underlay mutex
//! only when the burst holds an ARP or ND frame.
use super::runtime::Shared;
use super::switch::{CmdError, CmdResult};
use crate::proto::Response;
use packet::{Batch, Pool};
use ports::{Link, Port, PortStats};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tnl::neigh::mac_str;
use tnl::Underlay;

/// Milliseconds since the first call (the neighbour cache's clock).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

fn lock(u: &Mutex<Underlay>) -> std::sync::MutexGuard<'_, Underlay> {
    u.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one of the underlay commands.
pub fn command(shared: &Shared, command: &str, args: &[String]) -> CmdResult {
    let usage = |u: &str| CmdError(format!("usage: {command} {u}"));
    // The device's kind, looked up before the underlay lock is taken (lock order).
    let known = args.get(1).and_then(|dev| {
        shared
            .ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dev)
            .map(|p| p.port.kind())
    });
    let mut u = lock(&shared.underlay);
    match command {
        "route/add" => {
            if !(2..=3).contains(&args.len()) {
                return Err(usage("PREFIX DEV [GW]"));
            }
            let dev = &args[1];
            match known {
                Some("internal") => {}
                Some(k) => {
                    return Err(CmdError(format!(
                        "{dev} is a {k} port: a route's device must be an internal port"
                    )))
                }
                None => return Err(CmdError(format!("no port named {dev}"))),
            }
            u.routes
                .add(&args[0], dev, args.get(2).map(String::as_str))?;
            Ok(Response::ok("", json!(null)))
        }
        "route/del" => {
            if args.len() != 1 {
                return Err(usage("PREFIX"));
            }
            u.routes.del(&args[0])?;
            Ok(Response::ok("", json!(null)))
        }
        "route/show" => {
            if !args.is_empty() {
                return Err(usage(""));
            }
            let routes = u.routes.show();
            let data: Vec<_> = routes
                .iter()
                .map(|r| {
                    json!({
                        "prefix": format!("{}/{}", r.prefix, r.len),
                        "dev": r.dev,
                        "gw": r.gw.map(|g| g.to_string()),
                        "src": r.src.map(|s| s.to_string()),
                        "origin": r.origin.name(),
                    })
                })
                .collect();
            drop(u);
            let k = kernel_route_counters(shared);
            let text = super::format::lines(&routes)
                + &format!(
                    "host routes: dumps {} errors {} notifications {} skipped {} truncated {}\n",
                    k.dumps, k.errors, k.notifications, k.skipped, k.truncated
                );
            Ok(Response::ok(text, json!(data)))
        }
        "tnl/neigh/show" => {
            if !args.is_empty() {
                return Err(usage(""));
            }
            let now = now_ms();
            let entries = u.neigh.show();
            let c = u.neigh.counters();
            let mut text = String::new();
            for e in &entries {
                text += &format!(
                    "{} {} dev {} age {}s via {}\n",
                    e.ip,
                    mac_str(&e.mac),
                    e.dev,
                    now.saturating_sub(e.seen_ms) / 1000,
                    e.how.name()
                );
            }
            text += &format!(
                "learned {} misses {} requests {} ns_requests {} miss_drops {} snoop_ignored {} \
                 aged {} decap_seen {}\n",
                c.learned,
                c.misses,
                c.requests,
                c.ns_requests,
                c.miss_drops,
                c.snoop_ignored,
                c.aged,
                c.decap_seen
            );
            // The datapath's native push/pop drops by reason (process-wide).
            let drops = dp::tnl::drop_counters();
            text += "native drops:";
            for (r, n) in &drops {
                text += &format!(" {r} {n}");
            }
            text += "\n";
            let drops: serde_json::Map<String, serde_json::Value> = drops
                .iter()
                .map(|(r, n)| (r.to_string(), json!(n)))
                .collect();
            let data: Vec<_> = entries
                .iter()
                .map(|e| {
                    json!({
                        "ip": e.ip.to_string(),
                        "mac": mac_str(&e.mac),
                        "dev": e.dev,
                        "age_s": now.saturating_sub(e.seen_ms) / 1000,
                        "via": e.how.name(),
                    })
                })
                .collect();
            Ok(Response::ok(
                text,
                json!({
                    "entries": data,
                    "counters": {
                        "learned": c.learned,
                        "misses": c.misses,
                        "requests": c.requests,
                        "ns_requests": c.ns_requests,
                        "miss_drops": c.miss_drops,
                        "snoop_ignored": c.snoop_ignored,
                        "aged": c.aged,
                        "decap_seen": c.decap_seen,
                    },
                    "native_drops": drops,
                }),
            ))
        }
        "tnl/neigh/flush" => {
            if !args.is_empty() {
                return Err(usage(""));
            }
            let n = u.neigh.flush();
            Ok(Response::ok(
                format!("flushed {n}\n"),
                json!({ "flushed": n }),
            ))
        }
        _ => Err(CmdError(format!("unknown command {command}"))),
    }
}

/// An internal port's IPv4 and IPv6 addresses (with prefix lengths) and MAC, as the kernel
/// has them (link-local IPv6 addresses are left to the route table to skip).
fn kernel_addrs(
    all: &[nix::ifaddrs::InterfaceAddress],
    ifname: &str,
) -> (Vec<(IpAddr, u8)>, Option<[u8; 6]>) {
    let (mut v4, mut mac) = (Vec::new(), None);
    for a in all.iter().filter(|a| a.interface_name == ifname) {
        let Some(addr) = a.address else { continue };
        if let Some(sin) = addr.as_sockaddr_in() {
            let len = a
                .netmask
                .and_then(|m| m.as_sockaddr_in().map(|m| u32::from(m.ip()).count_ones()))
                .unwrap_or(32) as u8;
            v4.push((IpAddr::V4(sin.ip()), len));
        } else if let Some(sin6) = addr.as_sockaddr_in6() {
            let len = a
                .netmask
                .and_then(|m| m.as_sockaddr_in6().map(|m| u128::from(m.ip()).count_ones()))
                .unwrap_or(128) as u8;
            v4.push((IpAddr::V6(sin6.ip()), len));
        } else if let Some(l) = addr.as_link_addr() {
            mac = l.addr();
        }
    }
    (v4, mac)
}

/// The host's routes (both families) whose output interface is one of `internal` (by
/// interface index), best metric first, from the last good dump (`kroutes`).
fn kernel_routes<'a>(
    shared: &Shared,
    internal: impl Iterator<Item = &'a String>,
) -> Option<Vec<tnl::route::KernelEntry>> {
    let mut k = shared.kroutes.lock().unwrap_or_else(|e| e.into_inner());
    let routes = k.refresh()?;
    let by_index: BTreeMap<u32, &String> = internal
        .filter_map(|n| Some((nix::net::if_::if_nametoindex(n.as_str()).ok()?, n)))
        .collect();
    let mut v: Vec<_> = routes
        .iter()
        .filter_map(|r| {
            let dev = by_index.get(&r.oif)?;
            Some((r.metric, (r.dst, r.len, dev.to_string(), r.gw)))
        })
        .collect();
    v.sort_by_key(|(m, _)| *m);
    Some(v.into_iter().map(|(_, r)| r).collect())
}

/// The counters of the host-route reader, for `route/show`.
fn kernel_route_counters(shared: &Shared) -> super::kroutes::Counters {
    shared
        .kroutes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .counters
}

/// Brings connected routes and port MACs up to date with the kernel for every internal port
/// (and drops those of ports gone), then ages the neighbour cache. Housekeeping thread, and
/// after a port is attached.
pub fn upkeep(shared: &Shared) {
    let internal: Vec<String> = shared
        .ports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, p)| p.port.kind() == "internal")
        .map(|(n, _)| n.clone())
        .collect();
    // One dump for all ports; if the kernel does not answer this time, keep what we have
    // (clearing would send every native tunnel back to its socket until the next look).
    let Ok(all) = nix::ifaddrs::getifaddrs().map(|i| i.collect::<Vec<_>>()) else {
        tracing::warn!("underlay: getifaddrs failed; internal port addresses not refreshed");
        return;
    };
    let found: BTreeMap<String, _> = internal
        .into_iter()
        .map(|n| {
            let a = kernel_addrs(&all, &n);
            (n, a)
        })
        .collect();
    // The host's routes through the internal ports (outside the underlay lock: the dump, when
    // the kernel announced a change, may wait on it). Until a dump succeeds, none.
    let kernel = kernel_routes(shared, found.keys());
    let mtus: BTreeMap<String, u32> = found
        .keys()
        .filter_map(|n| {
            let m = std::fs::read_to_string(format!("/sys/class/net/{n}/mtu")).ok()?;
            Some((n.clone(), m.trim().parse().ok()?))
        })
        .collect();
    let mut u = lock(&shared.underlay);
    let before = (u.port_macs.clone(), u.port_mtus.clone());
    let stale: Vec<String> = u
        .routes
        .local_addrs()
        .map(|(d, _)| d.to_string())
        .filter(|d| !found.contains_key(d))
        .collect();
    for d in stale {
        u.routes.set_connected(&d, &[]);
        u.port_macs.remove(&d);
    }
    for (name, (v4, mac)) in &found {
        if u.routes.set_connected(name, v4) {
            tracing::info!(port = %name, addrs = ?v4, "underlay: connected routes changed");
        }
        match mac {
            Some(m) => {
                u.port_macs.insert(name.clone(), *m);
            }
            None => {
                u.port_macs.remove(name);
            }
        }
    }
    u.port_mtus = mtus;
    if let Some(k) = kernel {
        if u.routes.set_kernel(&k) {
            tracing::info!(routes = k.len(), "underlay: host routes changed");
        }
    }
    let now = now_ms();
    // Outer sources of decapsulated traffic, when directly connected (a routed peer's outer
    // MAC is its gateway's, which ARP teaches under the gateway's address).
    for (ip, mac) in dp::tnl::take_sources() {
        if let Some(nh) = u.next_hop(ip).filter(|nh| nh.via == ip) {
            u.neigh.learn_from_decap(ip, mac, &nh.dev, now);
        }
    }
    u.neigh.age(now);
    // Routes and neighbours also change between two upkeeps (commands, ARP snooped by the
    // PMDs): compare with what was last published, not with the start of this upkeep.
    let changed =
        u.generation() != u.published || before != (u.port_macs.clone(), u.port_mtus.clone());
    u.published = u.generation();
    drop(u);
    if changed {
        // Megaflows built from the old routes or neighbours (native encap) must go.
        shared.pipeline.underlay_changed();
        shared.revalidate();
    }
}

/// An internal port whose ARP and IPv6 ND traffic the neighbour cache snoops: the frames the
/// bridge delivers to it (tx: the peers' requests, solicitations, replies and
/// advertisements, broadcast, multicast or to this host). What the kernel sends through it
/// (rx) carries only this host's own addresses, so it is not snooped.
/// Everything else is the wrapped port's.
pub struct SnoopPort {
    inner: Arc<dyn Port>,
    name: String,
    underlay: Arc<Mutex<Underlay>>,
    /// Frames to receive as if the kernel had sent them (ARP requests of native tunneling).
    inject: Mutex<std::collections::VecDeque<Vec<u8>>>,
    injecting: std::sync::atomic::AtomicBool,
}

/// Frames waiting in [`SnoopPort::inject`] at most (more are dropped).
const INJECT_MAX: usize = 64;

impl SnoopPort {
    /// Wraps `inner` (port `name`).
    pub fn new(inner: Arc<dyn Port>, name: &str, underlay: Arc<Mutex<Underlay>>) -> SnoopPort {
        SnoopPort {
            inner,
            name: name.to_string(),
            underlay,
            inject: Mutex::default(),
            injecting: Default::default(),
        }
    }

    /// Queues `frame` to enter the bridge from this port at its next poll (an ARP request
    /// for a tunnel's next hop: it leaves through the underlay bridge as the kernel's would).
    pub fn inject(&self, frame: Vec<u8>) {
        let mut q = self.inject.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() < INJECT_MAX {
            q.push_back(frame);
            self.injecting
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    fn snoop(&self, pkts: &[packet::Packet]) {
        let is_arp = |d: &[u8]| d.len() >= 14 && d[12..14] == [0x08, 0x06];
        let wanted = |d: &[u8]| is_arp(d) || tnl::nd::looks_like_nd(d);
        if !pkts.iter().any(|p| wanted(p.data())) {
            return;
        }
        let now = now_ms();
        let mut u = lock(&self.underlay);
        for p in pkts.iter().filter(|p| wanted(p.data())) {
            if is_arp(p.data()) {
                u.neigh.snoop_arp(p.data(), &self.name, now);
            } else {
                u.neigh.snoop_nd(p.data(), &self.name, now);
            }
        }
    }
}

impl Port for SnoopPort {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn n_rxq(&self) -> usize {
        self.inner.n_rxq()
    }
    fn numa_node(&self) -> Option<usize> {
        self.inner.numa_node()
    }
    fn rxq_numa(&self, q: usize) -> Option<usize> {
        self.inner.rxq_numa(q)
    }
    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        if self.injecting.load(std::sync::atomic::Ordering::Acquire) {
            let mut pending = self.inject.lock().unwrap_or_else(|e| e.into_inner());
            while !out.is_full() {
                let Some(f) = pending.pop_front() else { break };
                let mut p = pool.get_for(f.len());
                p.set_frame(&f);
                let _ = out.push(p);
                n += 1;
            }
            self.injecting
                .store(!pending.is_empty(), std::sync::atomic::Ordering::Release);
        }
        n + self.inner.rx_burst(q, pool, out)
    }
    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        self.snoop(pkts.as_slice());
        self.inner.tx_burst(q, pkts)
    }
    fn link(&self) -> Link {
        self.inner.link()
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
    fn preload_stats(&self, s: &PortStats) {
        self.inner.preload_stats(s)
    }
    fn maintain(&self) {
        self.inner.maintain()
    }
    fn set_admin_up(&self, up: bool) -> Result<(), ports::PortError> {
        self.inner.set_admin_up(up)
    }
    fn tx_offloads(&self) -> packet::vnet::Offloads {
        self.inner.tx_offloads()
    }
    fn status(&self) -> serde_json::Value {
        self.inner.status()
    }
}
