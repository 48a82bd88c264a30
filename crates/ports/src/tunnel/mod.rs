//! The `vxlan` and `geneve` port kinds (first cut): a tunnel endpoint whose underlay is a
//! kernel UDP socket bound to `local_ip:dst_port`. Output to the port wraps the frame in a
//! VXLAN/Geneve header carrying the port's VNI (`key`) and sends it to `remote_ip:dst_port`;
//! the kernel adds the outer IPv4 or IPv6 and UDP headers, routes it and resolves the next hop. A
//! datagram received from `remote_ip` is checked by `wire::tunnel::decap` (flags, version,
//! Geneve options, critical options, VNI) and its inner frame enters the bridge with
//! `in_port` = this port; everything else is dropped and counted by reason.
//!
//! Submodules: `config` (options and their checks), `endpoint` (the shared socket, its
//! members and options), `io` (batched receive and send, decap and encap); this file holds
//! the port itself and its counters.
//!
//! Several ports of one kind may share `local_ip:dst_port` (one socket, `Endpoint`): each
//! datagram goes to the port with its source address and VNI; the port whose poll read it puts
//! it in the owner's bounded inbox when it is another port's.
//!
//! Flow-based tunnels (as OVS): `key=flow` takes the VNI from the packet's tunnel metadata
//! (`packet::TunMeta`, set by the pipeline's `set_field:..->tun_id`) on output and accepts any
//! VNI on input; `remote_ip=flow` sends to the metadata's `tun_dst` (a packet without one is
//! dropped as `no-tunnel-dst`) and accepts datagrams from any source. A received datagram goes
//! to the most specific port: same remote and VNI, then same remote with `key=flow`, then
//! `remote_ip=flow` with the same VNI, then `remote_ip=flow,key=flow`. Every decapsulated frame
//! carries its VNI as `tun_id`, the datagram's source as `tun_src` and the port's bound address
//! as `tun_dst` (IPv4; an IPv6 underlay leaves the addresses zero), which the pipeline can
//! match. `remote_ip=flow` with an IPv6 `local_ip` is served by native tunneling only (it
//! sends to the packet's `tun_ipv6_dst`): this socket has no IPv6 `tun_dst` to send to and
//! drops such packets as `no-tunnel-dst`. `local_ip=flow` (IPv4
//! too) binds the socket to 0.0.0.0 and sends each datagram from the packet's `tun_src`
//! (`IP_PKTINFO`) when the pipeline set one, else from the route's source; one the kernel
//! refuses (not this host's address) is dropped and counted in `tun_src_refused`. Other ports
//! send from their bound address (or the route's) whatever `tun_src` says, as OVS does.
//!
//! The socket path: no route table or neighbour cache of our own, IPv4 or IPv6 underlay.
//! When Vireo's own route table reaches the remote through one of its internal ports, native
//! tunneling (`crates/tnl`, `dp::tnl`, the daemon's `native.rs`) encapsulates and decapsulates
//! in the datapath instead and this port's socket sees none of that traffic. The socket
//! never fragments (`IP_PMTUDISC_DO`): a frame that does not fit the underlay route's MTU after
//! encapsulation is dropped as `too-big` and counted in `mtu_drops`. Outer fragments are
//! reassembled by the kernel before the socket sees them.
//!
//! Threads: `rx_burst` on the one PMD polling the port: drains its inbox, then, if no other
//! port's poll holds the socket (`try_lock`), reads it with `recvmmsg`, up to 32 datagrams a
//! call into buffers kept with the socket, at most two calls a poll (counted in
//! `rx_batches`); `tx_burst` from any PMD: the burst's datagrams leave with one `sendmmsg` on
//! the shared socket (no lock; counted in `tx_batches`), more only after a refused datagram;
//! `open` and drop on the control thread (or the last holder).
//!
//! Upgrade: the old vireod hands the socket over (`dup_fd`, one duplicate per port), stops
//! reading it at the switch-over (`hold_rx`: datagrams wait in the socket), and the new one
//! `adopt`s it (checked to be a datagram socket bound to `local_ip:dst_port`).
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Packet, Pool};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
pub use wire::tunnel::TunnelKind;
use wire::tunnel::{encap_header, DecapError};

mod config;
mod endpoint;
mod io;
pub use config::{check_option, TunnelConfig, OPTIONS};
use endpoint::Endpoint;

/// An IPv4 address as the key's big-endian number (0 for IPv6 or unspecified).
fn v4_num(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(_) => 0,
    }
}

fn flow_or<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("flow".to_string(), |v| v.to_string())
}

fn kind_name(k: TunnelKind) -> &'static str {
    match k {
        TunnelKind::Vxlan => "vxlan",
        TunnelKind::Geneve => "geneve",
    }
}

/// Most decapsulated frames waiting for a port whose datagrams another port's poll read.
const INBOX: usize = 1024;

/// Counters and the inbox of one tunnel port, shared with the endpoint's member list.
#[derive(Default)]
struct Shared {
    counters: PortCounters,
    decap_drops: [AtomicU64; DecapError::ALL.len()],
    remote_mismatch: AtomicU64,
    mtu_drops: AtomicU64,
    no_tun_dst: AtomicU64,
    /// `recvmmsg` calls that returned datagrams (made by this port's poll, for every port on
    /// its socket).
    rx_batches: AtomicU64,
    /// `sendmmsg` calls this port made.
    tx_batches: AtomicU64,
    /// Datagrams of a `local_ip=flow` port the kernel refused to send from their `tun_src`.
    tun_src_refused: AtomicU64,
    inbox: Mutex<VecDeque<Packet>>,
}

impl Shared {
    fn refuse(&self, why: DropReason) {
        self.counters.drop(why, 1);
        self.counters.rx_error(1);
    }
}

/// A `vxlan` or `geneve` port.
pub struct TunnelPort {
    cfg: TunnelConfig,
    ep: Arc<Endpoint>,
    /// The fixed remote (`None`: `remote_ip=flow`).
    remote: Option<SocketAddr>,
    /// The header for the fixed VNI (`key=flow`: built per packet).
    header: [u8; 8],
    /// `tun_dst` of what this port decapsulates (its bound IPv4 address, or 0).
    local_num: u32,
    sh: Arc<Shared>,
}

impl std::fmt::Debug for TunnelPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelPort")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Drop for TunnelPort {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl TunnelPort {
    /// Opens the port: binds the underlay socket `local_ip:dst_port`, or joins the socket
    /// another tunnel port of the same kind already bound there (its remote and VNI must then
    /// differ from every other port's on that socket, and its `tos`/`ttl`/`csum` be the same).
    pub fn open(cfg: TunnelConfig) -> Result<Arc<TunnelPort>, PortError> {
        Self::open_with(cfg, None)
    }

    /// [`TunnelPort::open`] with the socket the previous vireod handed over at an upgrade
    /// (datagrams that arrived meanwhile wait in it). A second port on the same socket was
    /// handed a duplicate of it: it joins the endpoint the first one adopted, and its duplicate
    /// is closed.
    pub fn adopt(cfg: TunnelConfig, fd: OwnedFd) -> Result<Arc<TunnelPort>, PortError> {
        Self::open_with(cfg, Some(fd))
    }

    fn open_with(cfg: TunnelConfig, fd: Option<OwnedFd>) -> Result<Arc<TunnelPort>, PortError> {
        let sh = Arc::new(Shared::default());
        let ep = Endpoint::join(&cfg, &sh, fd)?;
        Ok(Arc::new(TunnelPort {
            remote: cfg.remote.map(|r| SocketAddr::new(r, cfg.dst_port)),
            header: encap_header(cfg.kind, cfg.vni.unwrap_or(0)),
            local_num: v4_num(cfg.local),
            cfg,
            ep,
            sh,
        }))
    }

    /// The configuration the port runs with.
    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }

    /// Leaves the socket: datagrams for this port's remote and VNI are refused from now on,
    /// and a port re-created with the same ones may join (the datapath may hold this one a
    /// little longer).
    pub fn shutdown(&self) {
        let mut m = self.ep.members.write().unwrap_or_else(|e| e.into_inner());
        m.retain(|m| !Arc::ptr_eq(&m.sh, &self.sh));
    }

    /// Stops (or resumes) reading the socket, for every port on it: at an upgrade's
    /// switch-over what arrives then waits in the socket for the next vireod.
    pub fn hold_rx(&self, on: bool) {
        self.ep.held.store(on, Relaxed);
    }

    /// A duplicate of the underlay socket (shared with the other ports on it), to hand it to
    /// the next vireod.
    pub fn dup_fd(&self) -> Option<OwnedFd> {
        self.ep.sock.as_fd().try_clone_to_owned().ok()
    }
}

impl Port for TunnelPort {
    fn kind(&self) -> &'static str {
        kind_name(self.cfg.kind)
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        if let Ok(mut q) = self.sh.inbox.try_lock() {
            while !out.is_full() {
                let Some(p) = q.pop_front() else { break };
                let _ = out.push(p);
                n += 1;
            }
        }
        n + self.read_socket(pool, out)
    }

    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        self.send_burst(pkts)
    }

    fn link(&self) -> Link {
        Link::Up
    }

    fn preload_stats(&self, s: &PortStats) {
        self.sh.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        self.sh.counters.snapshot()
    }

    fn status(&self) -> serde_json::Value {
        let mut drops = serde_json::Map::new();
        for e in DecapError::ALL {
            let n = self.sh.decap_drops[e as usize].load(Relaxed);
            drops.insert(e.name().into(), n.into());
        }
        let rm = self.sh.remote_mismatch.load(Relaxed);
        drops.insert("remote-mismatch".into(), rm.into());
        let ports_on_socket = self
            .ep
            .members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        serde_json::json!({
            "remote_ip": flow_or(self.cfg.remote),
            "local_ip": if self.cfg.local_flow {
                "flow".to_string()
            } else {
                self.cfg.local.to_string()
            },
            "key": self.cfg.vni.map_or(serde_json::json!("flow"), |v| v.into()),
            "no_tun_dst_drops": self.sh.no_tun_dst.load(Relaxed),
            "dst_port": self.cfg.dst_port,
            "tos": self.cfg.tos,
            "csum": self.cfg.csum,
            "ttl": self.cfg.ttl,
            "df_default": self.cfg.df,
            // Per remote, decided at translation: a remote whose route goes through a Vireo
            // internal port is reached natively (`tnl_push`/`tnl_pop` in `dump-megaflows`,
            // `tnl/neigh/show`); the socket's counters here cover only the others.
            "underlay": "native through a Vireo internal port where the route says so, else this kernel UDP socket",
            "ports_on_socket": ports_on_socket,
            "decap_drops": drops,
            "mtu_drops": self.sh.mtu_drops.load(Relaxed),
            "rx_batches": self.sh.rx_batches.load(Relaxed),
            "tx_batches": self.sh.tx_batches.load(Relaxed),
            "tun_src_refused": self.sh.tun_src_refused.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests;
