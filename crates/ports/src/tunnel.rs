//! The `vxlan` and `geneve` port kinds (first cut): a tunnel endpoint whose underlay is a
//! kernel UDP socket bound to `local_ip:dst_port`. Output to the port wraps the frame in a
//! VXLAN/Geneve header carrying the port's VNI (`key`) and sends it to `remote_ip:dst_port`;
//! the kernel adds the outer IPv4/UDP headers, routes it and resolves the next hop. A
//! datagram received from `remote_ip` is checked by `wire::tunnel::decap` (flags, version,
//! Geneve options, critical options, VNI) and its inner frame enters the bridge with
//! `in_port` = this port; everything else is dropped and counted by reason.
//!
//! Not native tunneling: no route table or neighbour cache of our own, no `tun_id` metadata
//! (one port per VNI and remote, `key=flow`/`remote_ip=flow` refused), IPv4 only. The socket
//! never fragments (`IP_PMTUDISC_DO`): a frame that does not fit the underlay route's MTU after
//! encapsulation is dropped as `too-big` and counted in `mtu_drops`. Outer fragments are
//! reassembled by the kernel before the socket sees them.
//!
//! Threads: `rx_burst` on the one PMD polling the port (one `recvfrom` per datagram until the
//! socket is empty or the batch full); `tx_burst` from any PMD (one `sendto` per frame; the
//! socket is shared, no lock).
use crate::sys;
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Pool, MAX_FRAME};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
pub use wire::tunnel::TunnelKind;
use wire::tunnel::{decap, encap_header, DecapError, GENEVE_PORT, VXLAN_PORT};

/// Options a tunnel port accepts.
pub const OPTIONS: &[&str] = &["remote_ip", "local_ip", "key", "dst_port", "tos", "ttl"];

/// A tunnel port's configuration, parsed from its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelConfig {
    /// VXLAN or Geneve.
    pub kind: TunnelKind,
    /// The far end's underlay address.
    pub remote: Ipv4Addr,
    /// Our underlay address (the socket's bind address; 0.0.0.0 = any).
    pub local: Ipv4Addr,
    /// The VNI sent and required on receive.
    pub vni: u32,
    /// UDP destination port (and our bound port).
    pub dst_port: u16,
    /// Outer TOS byte, if set.
    pub tos: Option<u8>,
    /// Outer TTL, if set.
    pub ttl: Option<u8>,
}

/// Checks one option's value (for `add-port`/`set-port`).
pub fn check_option(key: &str, v: &str) -> Result<(), String> {
    match key {
        "remote_ip" | "local_ip" => {
            if v == "flow" {
                return Err(
                    "flow-based addresses are not supported yet (give an IPv4 address)".into(),
                );
            }
            v.parse::<Ipv4Addr>().map(|_| ()).map_err(|_| {
                format!("{v:?} is not an IPv4 address (IPv6 underlay is not supported yet)")
            })
        }
        "key" => {
            if v == "flow" {
                return Err("key=flow is not supported yet (give a VNI)".into());
            }
            match v.parse::<u32>() {
                Ok(n) if n < 1 << 24 => Ok(()),
                _ => Err(format!("{v:?} is not a VNI from 0 to 16777215")),
            }
        }
        "dst_port" => match v.parse::<u16>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{v:?} is not a UDP port from 1 to 65535")),
        },
        "tos" => v
            .parse::<u8>()
            .map(|_| ())
            .map_err(|_| format!("{v:?} is not a TOS byte (0..255)")),
        "ttl" => match v.parse::<u8>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{v:?} is not a TTL from 1 to 255")),
        },
        _ => Ok(()),
    }
}

impl TunnelConfig {
    /// Parses the options of a `vxlan` or `geneve` port (`opt` looks one up by name).
    pub fn parse<'a>(
        kind: TunnelKind,
        opt: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<TunnelConfig, PortError> {
        for k in OPTIONS {
            if let Some(v) = opt(k) {
                check_option(k, v).map_err(|e| PortError(format!("{k}: {e}")))?;
            }
        }
        let remote = opt("remote_ip")
            .ok_or_else(|| PortError("a tunnel port needs remote_ip=IPv4".into()))?
            .parse()
            .map_err(|_| PortError("bad remote_ip".into()))?;
        let num = |k: &str| opt(k).and_then(|v| v.parse::<u32>().ok());
        Ok(TunnelConfig {
            kind,
            remote,
            local: opt("local_ip")
                .and_then(|v| v.parse().ok())
                .unwrap_or(Ipv4Addr::UNSPECIFIED),
            vni: num("key").unwrap_or(0),
            dst_port: num("dst_port").map_or(
                match kind {
                    TunnelKind::Vxlan => VXLAN_PORT,
                    TunnelKind::Geneve => GENEVE_PORT,
                },
                |p| p as u16,
            ),
            tos: num("tos").map(|v| v as u8),
            ttl: num("ttl").map(|v| v as u8),
        })
    }
}

/// A `vxlan` or `geneve` port.
pub struct TunnelPort {
    cfg: TunnelConfig,
    sock: UdpSocket,
    remote: SocketAddr,
    header: [u8; 8],
    counters: PortCounters,
    decap_drops: [AtomicU64; DecapError::ALL.len()],
    remote_mismatch: AtomicU64,
    mtu_drops: AtomicU64,
}

impl std::fmt::Debug for TunnelPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelPort")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl TunnelPort {
    /// Binds the underlay socket (`local_ip:dst_port`). Fails if another socket holds it
    /// (two tunnel ports need distinct local addresses or ports in this first cut).
    pub fn open(cfg: TunnelConfig) -> Result<Arc<TunnelPort>, PortError> {
        let bind = SocketAddrV4::new(cfg.local, cfg.dst_port);
        let sock = UdpSocket::bind(bind)
            .map_err(|e| PortError(format!("cannot bind UDP {bind} for the tunnel: {e}")))?;
        let err = |what: &str, e: std::io::Error| PortError(format!("tunnel socket {what}: {e}"));
        sock.set_nonblocking(true)
            .map_err(|e| err("non-blocking", e))?;
        sys::set_pmtudisc_do(sock.as_fd()).map_err(|e| err("IP_MTU_DISCOVER", e))?;
        if let Some(t) = cfg.ttl {
            sock.set_ttl(u32::from(t)).map_err(|e| err("TTL", e))?;
        }
        if let Some(t) = cfg.tos {
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::IpTos, &i32::from(t))
                .map_err(|e| err("TOS", e.into()))?;
        }
        let _ = sys::set_buf(sock.as_fd(), true, 4 << 20);
        let _ = sys::set_buf(sock.as_fd(), false, 4 << 20);
        Ok(Arc::new(TunnelPort {
            remote: SocketAddr::V4(SocketAddrV4::new(cfg.remote, cfg.dst_port)),
            header: encap_header(cfg.kind, cfg.vni),
            cfg,
            sock,
            counters: PortCounters::default(),
            decap_drops: Default::default(),
            remote_mismatch: AtomicU64::new(0),
            mtu_drops: AtomicU64::new(0),
        }))
    }

    /// The configuration the port runs with.
    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }
}

impl Port for TunnelPort {
    fn kind(&self) -> &'static str {
        match self.cfg.kind {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Geneve => "geneve",
        }
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let (mut n, mut bytes) = (0, 0u64);
        while !out.is_full() {
            let mut p = pool.get();
            let r = self.sock.recv_from(p.reset_for_fill(MAX_FRAME));
            let (len, from) = match r {
                Ok(x) => x,
                Err(e) => {
                    if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) {
                        self.counters.rx_error(1);
                    }
                    pool.put(p);
                    break;
                }
            };
            p.truncate(len);
            let verdict = if from.ip() != self.remote.ip() {
                self.remote_mismatch.fetch_add(1, Relaxed);
                Err(DropReason::Malformed)
            } else if len >= MAX_FRAME {
                // The datagram filled the buffer: it may have been cut.
                Err(DropReason::TooBig)
            } else {
                decap(self.cfg.kind, p.data(), self.cfg.vni).map_err(|e| {
                    self.decap_drops[e as usize].fetch_add(1, Relaxed);
                    DropReason::Malformed
                })
            };
            match verdict {
                Ok(hlen) => {
                    p.pull_front(hlen);
                    bytes += p.len() as u64;
                    let _ = out.push(p);
                    n += 1;
                }
                Err(why) => {
                    self.counters.drop(why, 1);
                    self.counters.rx_error(1);
                    pool.put(p);
                }
            }
        }
        if n > 0 {
            self.counters.rx(n as u64, bytes);
        }
        n
    }

    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        let (mut sent, mut bytes) = (0, 0u64);
        for p in pkts.as_mut_slice() {
            let Some(h) = p.push_front(self.header.len()) else {
                self.counters.drop(DropReason::TooBig, 1);
                continue;
            };
            h.copy_from_slice(&self.header);
            let r = self.sock.send_to(p.data(), self.remote);
            p.pull_front(self.header.len());
            match r {
                Ok(_) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    self.mtu_drops.fetch_add(1, Relaxed);
                    self.counters.drop(DropReason::TooBig, 1);
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    self.counters.drop(DropReason::QueueFull, 1);
                }
                Err(e)
                    if e.raw_os_error().is_some_and(|c| {
                        [
                            libc::ENETUNREACH,
                            libc::EHOSTUNREACH,
                            libc::ENETDOWN,
                            libc::EHOSTDOWN,
                        ]
                        .contains(&c)
                    }) =>
                {
                    self.counters.drop(DropReason::LinkDown, 1);
                }
                Err(_) => {
                    // ECONNREFUSED etc. report an ICMP error from an earlier datagram.
                    self.counters.tx_error(1);
                    self.counters.drop(DropReason::LinkDown, 1);
                }
            }
        }
        if sent > 0 {
            self.counters.tx(sent as u64, bytes);
        }
        sent
    }

    fn link(&self) -> Link {
        Link::Up
    }

    fn stats(&self) -> PortStats {
        self.counters.snapshot()
    }

    fn status(&self) -> serde_json::Value {
        let mut drops = serde_json::Map::new();
        for e in DecapError::ALL {
            drops.insert(
                e.name().into(),
                self.decap_drops[e as usize].load(Relaxed).into(),
            );
        }
        drops.insert(
            "remote-mismatch".into(),
            self.remote_mismatch.load(Relaxed).into(),
        );
        serde_json::json!({
            "remote_ip": self.cfg.remote.to_string(),
            "local_ip": self.cfg.local.to_string(),
            "key": self.cfg.vni,
            "dst_port": self.cfg.dst_port,
            "underlay": "kernel UDP socket",
            "decap_drops": drops,
            "mtu_drops": self.mtu_drops.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts<'a>(kv: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |k| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    #[test]
    fn options_parsed_and_checked() {
        let c = TunnelConfig::parse(
            TunnelKind::Geneve,
            opts(&[("remote_ip", "127.0.0.9"), ("key", "7")]),
        )
        .unwrap();
        assert_eq!(
            (c.dst_port, c.vni, c.local),
            (GENEVE_PORT, 7, Ipv4Addr::UNSPECIFIED)
        );
        let c = TunnelConfig::parse(TunnelKind::Vxlan, opts(&[("remote_ip", "10.0.0.1")])).unwrap();
        assert_eq!(c.dst_port, VXLAN_PORT);
        for bad in [
            vec![],
            vec![("remote_ip", "flow")],
            vec![("remote_ip", "::1")],
            vec![("remote_ip", "10.0.0.1"), ("key", "16777216")],
            vec![("remote_ip", "10.0.0.1"), ("key", "flow")],
            vec![("remote_ip", "10.0.0.1"), ("dst_port", "0")],
            vec![("remote_ip", "10.0.0.1"), ("ttl", "0")],
        ] {
            assert!(
                TunnelConfig::parse(TunnelKind::Vxlan, opts(&bad)).is_err(),
                "{bad:?}"
            );
        }
    }

    /// Two ports on loopback addresses: a frame sent on one comes out of the other; bad
    /// datagrams from the remote and datagrams from elsewhere are counted by reason.
    #[test]
    fn loopback_pair_and_bad_datagrams() {
        let pid = std::process::id();
        let port = 20000 + (pid % 20000) as u16;
        let mk = |l: [u8; 4], r: [u8; 4]| {
            TunnelPort::open(TunnelConfig {
                kind: TunnelKind::Geneve,
                remote: r.into(),
                local: l.into(),
                vni: 7,
                dst_port: port,
                tos: None,
                ttl: None,
            })
            .unwrap()
        };
        let a = mk([127, 0, 0, 2], [127, 0, 0, 3]);
        let b = mk([127, 0, 0, 3], [127, 0, 0, 2]);
        let frame: Vec<u8> = (0..60u8).collect();
        let mut batch = Batch::new();
        batch.push(packet::Packet::from_slice(&frame)).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch), 1);
        assert_eq!(
            batch.as_slice()[0].data(),
            &frame[..],
            "tx restores the frame"
        );
        let mut pool = Pool::new(0, 4);
        let mut out = Batch::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while out.is_empty() && std::time::Instant::now() < end {
            b.rx_burst(0, &mut pool, &mut out);
        }
        assert_eq!(out.as_slice()[0].data(), &frame[..]);
        // From the remote, but a wrong VNI and a critical option; then from a stranger.
        let raw = UdpSocket::bind("127.0.0.2:0").unwrap();
        let mut wrong_vni = encap_header(TunnelKind::Geneve, 8).to_vec();
        wrong_vni.extend(&frame);
        let mut crit = vec![0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 0, 1, 0x80, 0];
        crit.extend(&frame);
        let to = ("127.0.0.3", port);
        raw.send_to(&wrong_vni, to).unwrap();
        raw.send_to(&crit, to).unwrap();
        raw.send_to(&[1, 2, 3], to).unwrap();
        let stranger = UdpSocket::bind("127.0.0.4:0").unwrap();
        let mut good = encap_header(TunnelKind::Geneve, 7).to_vec();
        good.extend(&frame);
        stranger.send_to(&good, to).unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while b.stats().rx_errors < 4 && std::time::Instant::now() < end {
            b.rx_burst(0, &mut pool, &mut out);
        }
        let st = b.status();
        let d = &st["decap_drops"];
        assert_eq!(
            (
                d["vni-mismatch"].as_u64(),
                d["critical-option"].as_u64(),
                d["truncated"].as_u64()
            ),
            (Some(1), Some(1), Some(1)),
            "{st}"
        );
        assert_eq!(d["remote-mismatch"], 1, "{st}");
        assert_eq!(out.len(), 1, "only the good frame came through");
        assert_eq!(b.stats().rx_errors, 4);
    }
}
