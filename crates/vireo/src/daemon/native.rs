//! Native tunneling's hook for translation ([`ofproto::native::NativeTunnels`]): which
//! datapath ports are tunnel ports and internal ports, and, from the underlay state
//! (`tnl::Underlay`), what an output to them becomes.
//!
//! An output to a `vxlan`/`geneve` port whose remote (`remote_ip`, IPv4 or IPv6, or with
//! `remote_ip=flow` the packet's `tun_dst`, else its `tun_ipv6_dst`) is routed by Vireo's
//! route table through an internal port Vireo owns becomes a native encap: the header
//! template (IPv4 or IPv6 by the remote's family) is built from the route (source:
//! `local_ip`, else the route's), the internal port's MAC and the next hop's MAC from the
//! neighbour cache. On a neighbour miss the packet is dropped (counted in `miss_drops`) and an
//! ARP request or, for an IPv6 next hop, a Neighbor Solicitation (at most one per address per
//! second) leaves through the underlay bridge as if the internal port had sent it
//! ([`super::underlay::SnoopPort::inject`]). A remote with no such route keeps the socket
//! path (the port's own UDP socket).
//!
//! An output to an internal port is preceded by `TnlPop` when tunnel ports receive on one of
//! its addresses (`local_ip`, or every address of the port of `local_ip`'s family when
//! `local_ip` is unset).
//!
//! Geneve options: the template carries the options whose `tun_metadataN` value is not zero
//! in the packet's key, as the tunnel port's bridge maps them (class, type, length).
//!
//! Outer DF per the port's `df_default` (default true), outer TOS is the port's `tos` (default
//! 0), TTL its `ttl` (default 64), the UDP checksum per `csum`.
//!
//! Threads: `encap`/`pop_before` on the PMD doing an upcall or the thread re-checking a
//! megaflow; `add_*`/`remove` on the control thread. Lock order: `ports`, then the underlay.
use super::underlay::{now_ms, SnoopPort};
use dpif::action::{PopPort, TnlPop, TnlPush};
use ofproto::native::{Encap, NativeTunnels};
use ports::tunnel::{TunnelConfig, TunnelKind};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use tnl::header::{Params, Template};
use tnl::Underlay;
use wire::tunmd::TlvTable;
use wire::{Field, FlowKey};

#[derive(Default)]
struct Ports {
    /// Tunnel ports by datapath number: name and options.
    tunnels: BTreeMap<u32, (String, TunnelConfig)>,
    /// Internal ports by name: datapath number and the port (to send ARP from).
    internals: BTreeMap<String, (u32, Arc<SnoopPort>)>,
}

/// The hook.
pub struct NativeHook {
    underlay: Arc<Mutex<Underlay>>,
    ports: Mutex<Ports>,
}

fn set(a: IpAddr) -> Option<IpAddr> {
    (!a.is_unspecified()).then_some(a)
}

/// The remote of a `remote_ip=flow` port from the packet's key: `tun_dst`, else
/// `tun_ipv6_dst`.
fn key_remote(key: &FlowKey) -> Option<IpAddr> {
    let d = key.get(Field::TunDst) as u32;
    if d != 0 {
        return Some(IpAddr::V4(Ipv4Addr::from(d)));
    }
    let v6 =
        u128::from(key.get(Field::TunIpv6DstHi)) << 64 | u128::from(key.get(Field::TunIpv6DstLo));
    (v6 != 0).then(|| IpAddr::V6(Ipv6Addr::from(v6)))
}

impl NativeHook {
    /// A hook over `underlay`.
    pub fn new(underlay: Arc<Mutex<Underlay>>) -> NativeHook {
        NativeHook {
            underlay,
            ports: Mutex::default(),
        }
    }

    fn ports(&self) -> std::sync::MutexGuard<'_, Ports> {
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A tunnel port was attached as datapath port `dp`.
    pub fn add_tunnel(&self, dp: u32, name: &str, cfg: TunnelConfig) {
        self.ports().tunnels.insert(dp, (name.to_string(), cfg));
    }

    /// An internal port was attached as datapath port `dp`.
    pub fn add_internal(&self, dp: u32, name: &str, port: Arc<SnoopPort>) {
        self.ports().internals.insert(name.to_string(), (dp, port));
    }

    /// A port went.
    pub fn remove(&self, name: &str) {
        let mut p = self.ports();
        p.tunnels.retain(|_, (n, _)| n != name);
        p.internals.remove(name);
    }
}

impl NativeTunnels for NativeHook {
    fn encap(&self, dp_port: u32, key: &FlowKey, tlv: &TlvTable) -> Option<Encap> {
        let ports = self.ports();
        let (_, cfg) = ports.tunnels.get(&dp_port)?;
        let remote = match cfg.remote {
            Some(r) => set(r)?,
            None => key_remote(key)?,
        };
        let mut u = self.underlay.lock().unwrap_or_else(|e| e.into_inner());
        let nh = u.next_hop(remote)?;
        let (local_dp, snoop) = ports.internals.get(&nh.dev)?;
        let src = set(cfg.local)
            .filter(|l| l.is_ipv4() == remote.is_ipv4())
            .or(nh.src)?;
        let src_mac = *u.port_macs.get(&nh.dev)?;
        let Some(dst_mac) = u.neigh.lookup(nh.via) else {
            if u.neigh.miss(nh.via, now_ms()) {
                let req_src = nh.src.unwrap_or(src);
                match (req_src, nh.via) {
                    (IpAddr::V4(s), IpAddr::V4(via)) => {
                        snoop.inject(tnl::neigh::arp_request(src_mac, s, via));
                    }
                    (IpAddr::V6(s), IpAddr::V6(via)) => {
                        snoop.inject(tnl::nd::solicit(src_mac, s, via));
                    }
                    _ => {}
                }
            }
            u.neigh.count_miss_drops(1);
            return Some(Encap::Drop);
        };
        let mtu = u.port_mtus.get(&nh.dev).copied().unwrap_or(1500);
        let vni = cfg
            .vni
            .unwrap_or((key.get(Field::TunId) & 0x00ff_ffff) as u32);
        let template = Template::build(&Params {
            kind: cfg.kind,
            vni,
            src_mac,
            dst_mac,
            src_ip: src,
            dst_ip: remote,
            dst_port: cfg.dst_port,
            tos: cfg.tos.unwrap_or(0),
            ttl: cfg.ttl.unwrap_or(64),
            df: cfg.df,
            csum: cfg.csum,
            options: if cfg.kind == TunnelKind::Geneve {
                let opts = wire::tunmd::options_of(key, tlv);
                tnl::header::geneve_options(opts.iter().map(|(c, t, v)| (*c, *t, &v[..])))
            } else {
                Vec::new()
            },
        });
        Some(Encap::Push {
            push: Box::new(TnlPush {
                template,
                mtu: mtu.min(u32::from(u16::MAX)) as u16,
                actions: Vec::new(),
            }),
            local_dp: *local_dp,
        })
    }

    fn pop_before(&self, dp_port: u32) -> Option<Arc<TnlPop>> {
        let ports = self.ports();
        let (dev, _) = ports.internals.iter().find(|(_, (dp, _))| *dp == dp_port)?;
        let u = self.underlay.lock().unwrap_or_else(|e| e.into_inner());
        let addrs: Vec<IpAddr> = u
            .routes
            .local_addrs()
            .filter(|(d, _)| d == dev)
            .map(|(_, a)| a)
            .collect();
        let local_mac = *u.port_macs.get(dev)?;
        let mut pops = Vec::new();
        for (dp, (_, cfg)) in &ports.tunnels {
            let ips: Vec<IpAddr> = match set(cfg.local) {
                Some(a) if addrs.contains(&a) => vec![a],
                Some(_) => continue,
                None => addrs
                    .iter()
                    .copied()
                    .filter(|a| a.is_ipv4() == cfg.local.is_ipv4())
                    .collect(),
            };
            for ip in ips {
                pops.push(PopPort {
                    ip,
                    udp_port: cfg.dst_port,
                    geneve: cfg.kind == TunnelKind::Geneve,
                    vni: cfg.vni,
                    remote: cfg.remote.and_then(set),
                    port: *dp,
                });
            }
        }
        if pops.is_empty() {
            return None;
        }
        // Most specific first: a remote and a VNI before wildcards.
        pops.sort_by_key(|p| (p.remote.is_none(), p.vni.is_none()));
        pops.truncate(8);
        Some(Arc::new(TnlPop {
            local_mac,
            ports: pops,
            // Filled by translation (the TLV maps are the bridges').
            tlvs: Vec::new(),
        }))
    }
}
