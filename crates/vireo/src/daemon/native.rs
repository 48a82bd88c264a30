//! Native tunneling's hook for translation ([`ofproto::native::NativeTunnels`]): which
//! datapath ports are tunnel ports and internal ports, and, from the underlay state
//! (`tnl::Underlay`), what an output to them becomes.
//!
//! An output to a `vxlan`/`geneve` port whose remote (IPv4: `remote_ip`, or the packet's
//! `tun_dst` with `remote_ip=flow`) is routed by Vireo's route table through an internal port
//! Vireo owns becomes a native encap: the header template is built from the route (source:
//! `local_ip`, else the route's), the internal port's MAC and the next hop's MAC from the
//! neighbour cache. On a neighbour miss the packet is dropped (counted in `miss_drops`) and an
//! ARP request (at most one per address per second) leaves through the underlay bridge as if
//! the internal port had sent it ([`super::underlay::SnoopPort::inject`]). A remote with no
//! such route, or an IPv6 one, keeps the socket path (the port's own UDP socket).
//!
//! An output to an internal port is preceded by `TnlPop` when tunnel ports receive on one of
//! its addresses (`local_ip`, or every address of the port when `local_ip` is unset).
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
use std::net::{IpAddr, Ipv4Addr};
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

fn v4(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) if !a.is_unspecified() => Some(a),
        _ => None,
    }
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
            Some(r) => v4(r)?,
            None => {
                let d = key.get(Field::TunDst) as u32;
                if d == 0 {
                    return None;
                }
                Ipv4Addr::from(d)
            }
        };
        let mut u = self.underlay.lock().unwrap_or_else(|e| e.into_inner());
        let nh = u.next_hop(remote)?;
        let (local_dp, snoop) = ports.internals.get(&nh.dev)?;
        let src = v4(cfg.local).or(nh.src)?;
        let src_mac = *u.port_macs.get(&nh.dev)?;
        let Some(dst_mac) = u.neigh.lookup(nh.via) else {
            if u.neigh.miss(nh.via, now_ms()) {
                let arp_src = nh.src.unwrap_or(src);
                snoop.inject(tnl::neigh::arp_request(src_mac, arp_src, nh.via));
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
        let addrs: Vec<Ipv4Addr> = u
            .routes
            .local_addrs()
            .filter(|(d, _)| d == dev)
            .map(|(_, a)| a)
            .collect();
        let local_mac = *u.port_macs.get(dev)?;
        let mut pops = Vec::new();
        for (dp, (_, cfg)) in &ports.tunnels {
            let ips: Vec<Ipv4Addr> = match v4(cfg.local) {
                Some(a) if addrs.contains(&a) => vec![a],
                Some(_) => continue,
                None if cfg.local.is_ipv4() => addrs.clone(),
                None => continue,
            };
            for ip in ips {
                pops.push(PopPort {
                    ip: u32::from(ip),
                    udp_port: cfg.dst_port,
                    geneve: cfg.kind == TunnelKind::Geneve,
                    vni: cfg.vni,
                    remote: cfg.remote.and_then(v4).map(u32::from),
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
