//! The `vxlan` and `geneve` port kinds (first cut): a tunnel endpoint whose underlay is a
//! kernel UDP socket bound to `local_ip:dst_port`. Output to the port wraps the frame in a
//! VXLAN/Geneve header carrying the port's VNI (`key`) and sends it to `remote_ip:dst_port`;
//! the kernel adds the outer IPv4 or IPv6 and UDP headers, routes it and resolves the next hop. A
//! datagram received from `remote_ip` is checked by `wire::tunnel::decap` (flags, version,
//! Geneve options, critical options, VNI) and its inner frame enters the bridge with
//! `in_port` = this port; everything else is dropped and counted by reason.
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
//! match. `remote_ip=flow` needs an IPv4 underlay (`tun_dst` is IPv4); `local_ip=flow` is
//! refused; a `tun_src` set by the pipeline is not used (the socket's bound address is).
//!
//! Not native tunneling: no route table or neighbour cache of our own, IPv4 or IPv6 underlay
//! (see `docs/design-notes.md` for what native tunneling will change). The socket
//! never fragments (`IP_PMTUDISC_DO`): a frame that does not fit the underlay route's MTU after
//! encapsulation is dropped as `too-big` and counted in `mtu_drops`. Outer fragments are
//! reassembled by the kernel before the socket sees them.
//!
//! Threads: `rx_burst` on the one PMD polling the port: drains its inbox, then, if no other
//! port's poll holds the socket (`try_lock`), one `recvfrom` per datagram (at most 64) until
//! the socket is empty or the batch full; `tx_burst` from any PMD (one `sendto` per frame on
//! the shared socket, no lock); `open` and drop on the control thread (or the last holder).
//!
//! Upgrade: the old vireod hands the socket over (`dup_fd`, one duplicate per port), stops
//! reading it at the switch-over (`hold_rx`: datagrams wait in the socket), and the new one
//! `adopt`s it (checked to be a datagram socket bound to `local_ip:dst_port`).
use crate::sys;
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Packet, Pool, MAX_FRAME};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
pub use wire::tunnel::TunnelKind;
use wire::tunnel::{decap_any, encap_header, DecapError, GENEVE_PORT, VXLAN_PORT};

/// Options a tunnel port accepts.
pub const OPTIONS: &[&str] = &[
    "remote_ip",
    "local_ip",
    "key",
    "dst_port",
    "tos",
    "ttl",
    "csum",
];

/// A tunnel port's configuration, parsed from its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelConfig {
    /// VXLAN or Geneve.
    pub kind: TunnelKind,
    /// The far end's underlay address (`None`: `remote_ip=flow`, the packet's `tun_dst`).
    pub remote: Option<IpAddr>,
    /// Our underlay address (the socket's bind address; 0.0.0.0 = any).
    pub local: IpAddr,
    /// The VNI sent and required on receive (`None`: `key=flow`, the packet's `tun_id`).
    pub vni: Option<u32>,
    /// UDP destination port (and our bound port).
    pub dst_port: u16,
    /// Whether outer UDP checksums are sent (`csum`; IPv4 default false as in OVS, IPv6
    /// always).
    pub csum: bool,
    /// Outer TOS byte, if set.
    pub tos: Option<u8>,
    /// Outer TTL, if set.
    pub ttl: Option<u8>,
}

/// Checks one option's value (for `add-port`/`set-port`).
pub fn check_option(key: &str, v: &str) -> Result<(), String> {
    match key {
        "remote_ip" | "local_ip" => {
            if v == "flow" && key == "remote_ip" {
                return Ok(());
            }
            if v == "flow" {
                return Err(
                    "local_ip=flow is not supported (give an address or leave it out)".into(),
                );
            }
            v.parse::<IpAddr>()
                .map(|_| ())
                .map_err(|_| format!("{v:?} is not an IPv4 or IPv6 address"))
        }
        "key" => {
            if v == "flow" {
                return Ok(());
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
        "csum" => match v {
            "true" | "false" => Ok(()),
            _ => Err(format!("{v:?} is not true or false")),
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
        let remote = match opt("remote_ip")
            .ok_or_else(|| PortError("a tunnel port needs remote_ip=IP|flow".into()))?
        {
            "flow" => None,
            v => Some(
                v.parse::<IpAddr>()
                    .map_err(|_| PortError("bad remote_ip".into()))?,
            ),
        };
        let local = opt("local_ip").and_then(|v| v.parse::<IpAddr>().ok());
        let v6 = remote.map_or(local.is_some_and(|l| l.is_ipv6()), |r| r.is_ipv6());
        if remote.is_none() && v6 {
            return Err(PortError(
                "remote_ip=flow needs an IPv4 underlay (tun_dst is an IPv4 address)".into(),
            ));
        }
        let any = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        let local = local.unwrap_or(any);
        if local.is_ipv6() != v6 {
            return Err(PortError(
                "local_ip and remote_ip must both be IPv4 or both IPv6".into(),
            ));
        }
        let num = |k: &str| opt(k).and_then(|v| v.parse::<u32>().ok());
        Ok(TunnelConfig {
            kind,
            remote,
            local,
            vni: match opt("key") {
                Some("flow") => None,
                _ => Some(num("key").unwrap_or(0)),
            },
            dst_port: num("dst_port").map_or(
                match kind {
                    TunnelKind::Vxlan => VXLAN_PORT,
                    TunnelKind::Geneve => GENEVE_PORT,
                },
                |p| p as u16,
            ),
            csum: match opt("csum") {
                Some("true") => true,
                Some(_) if v6 => {
                    return Err(PortError(
                        "csum=false needs an IPv4 underlay (IPv6 requires UDP checksums)".into(),
                    ))
                }
                Some(_) => false,
                // As OVS: no UDP checksum over IPv4 unless asked; IPv6 always has one.
                None => v6,
            },
            tos: num("tos").map(|v| v as u8),
            ttl: num("ttl").map(|v| v as u8),
        })
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
    inbox: Mutex<VecDeque<Packet>>,
}

impl Shared {
    fn refuse(&self, why: DropReason) {
        self.counters.drop(why, 1);
        self.counters.rx_error(1);
    }
}

struct Member {
    /// `None`: `remote_ip=flow` (any source).
    remote: Option<IpAddr>,
    /// `None`: `key=flow` (any VNI).
    vni: Option<u32>,
    sh: Arc<Shared>,
}

/// The member a datagram from `ip` with `vni` belongs to: the most specific match (exact
/// remote and VNI, then exact remote with `key=flow`, then `remote_ip=flow` with the VNI, then
/// both flow).
fn best_member(members: &[Member], ip: IpAddr, vni: u32) -> Option<&Member> {
    let mut best: Option<(u8, &Member)> = None;
    for m in members {
        let r = match m.remote {
            Some(r) if r == ip => 2,
            None => 0,
            Some(_) => continue,
        };
        let v = match m.vni {
            Some(v) if v == vni => 1,
            None => 0,
            Some(_) => continue,
        };
        if best.is_none_or(|(s, _)| r + v > s) {
            best = Some((r + v, m));
        }
    }
    best.map(|(_, m)| m)
}

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

/// One UDP socket shared by every tunnel port of one kind on the same `local_ip:dst_port`;
/// a received datagram goes to the port whose `remote_ip` and VNI it carries.
struct Endpoint {
    kind: TunnelKind,
    bind: SocketAddr,
    /// The socket's outer TOS and TTL (shared by its ports; changed only while it has none).
    tos_ttl: Mutex<SockOpts>,
    sock: UdpSocket,
    /// Held (`try_lock`) by the port reading the socket; the others only drain their inbox.
    reader: Mutex<()>,
    members: RwLock<Vec<Member>>,
    /// No port reads the socket (an upgrade's switch-over: what arrives waits in the socket
    /// for the next vireod, which adopts it).
    held: AtomicBool,
}

/// Every live endpoint (control thread: `open`; a port's drop).
static ENDPOINTS: Mutex<Vec<Weak<Endpoint>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Endpoint {
    /// A new socket bound to `cfg`'s `local_ip:dst_port`, or the one handed over by the
    /// previous vireod (`adopted`), checked to be a UDP socket bound to that very address.
    fn open(cfg: &TunnelConfig, adopted: Option<OwnedFd>) -> Result<Arc<Endpoint>, PortError> {
        let bind = SocketAddr::new(cfg.local, cfg.dst_port);
        let sock = match adopted {
            None => UdpSocket::bind(bind)
                .map_err(|e| PortError(format!("cannot bind UDP {bind} for the tunnel: {e}")))?,
            Some(fd) => {
                use nix::sys::socket::{getsockopt, sockopt, SockType};
                let ty = getsockopt(&fd, sockopt::SockType);
                if ty != Ok(SockType::Datagram) {
                    return Err(PortError(format!(
                        "the handed-over tunnel socket for UDP {bind} is not a datagram socket"
                    )));
                }
                let sock = UdpSocket::from(fd);
                match sock.local_addr() {
                    Ok(a) if a == bind => sock,
                    other => {
                        return Err(PortError(format!(
                            "the handed-over tunnel socket is bound to {other:?}, not UDP {bind}"
                        )))
                    }
                }
            }
        };
        let err = |what: &str, e: std::io::Error| PortError(format!("tunnel socket {what}: {e}"));
        sock.set_nonblocking(true)
            .map_err(|e| err("non-blocking", e))?;
        sys::set_pmtudisc_do(sock.as_fd(), bind.is_ipv6()).map_err(|e| err("MTU_DISCOVER", e))?;
        set_sock_opts(&sock, bind.is_ipv6(), SockOpts::of(cfg))?;
        let _ = sys::set_buf(sock.as_fd(), true, 4 << 20);
        let _ = sys::set_buf(sock.as_fd(), false, 4 << 20);
        Ok(Arc::new(Endpoint {
            kind: cfg.kind,
            bind,
            tos_ttl: Mutex::new(SockOpts::of(cfg)),
            sock,
            reader: Mutex::new(()),
            members: RwLock::new(Vec::new()),
            held: AtomicBool::new(false),
        }))
    }

    /// The endpoint for `cfg` (an existing one on the same address, or a new socket), with
    /// `sh` joined as the member for `cfg`'s remote and VNI.
    fn join(
        cfg: &TunnelConfig,
        sh: &Arc<Shared>,
        adopted: Option<OwnedFd>,
    ) -> Result<Arc<Endpoint>, PortError> {
        let mut all = lock(&ENDPOINTS);
        all.retain(|w| w.strong_count() > 0);
        let bind = SocketAddr::new(cfg.local, cfg.dst_port);
        let found = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|e| e.bind == bind);
        let ep = match found {
            Some(e) if e.kind != cfg.kind => {
                return Err(PortError(format!(
                    "UDP {bind} is used by a {} tunnel port",
                    kind_name(e.kind)
                )))
            }
            Some(e) => {
                let mut tt = lock(&e.tos_ttl);
                if *tt != SockOpts::of(cfg) {
                    // A port being re-created (`set-port`) may find its old socket without
                    // ports: it takes the new values; with other ports on it, it must agree.
                    if !e
                        .members
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_empty()
                    {
                        return Err(PortError(format!(
                            "tos, ttl and csum must match the other tunnel ports on UDP {bind}"
                        )));
                    }
                    set_sock_opts(&e.sock, bind.is_ipv6(), SockOpts::of(cfg))?;
                    *tt = SockOpts::of(cfg);
                }
                drop(tt);
                e
            }
            None => {
                let e = Endpoint::open(cfg, adopted)?;
                all.push(Arc::downgrade(&e));
                e
            }
        };
        let mut m = ep.members.write().unwrap_or_else(|e| e.into_inner());
        if m.iter().any(|m| m.remote == cfg.remote && m.vni == cfg.vni) {
            return Err(PortError(format!(
                "another tunnel port on UDP {bind} already has remote_ip={} key={}",
                flow_or(cfg.remote),
                flow_or(cfg.vni)
            )));
        }
        m.push(Member {
            remote: cfg.remote,
            vni: cfg.vni,
            sh: sh.clone(),
        });
        drop(m);
        Ok(ep)
    }
}

/// The options that belong to the socket, so every port on it must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SockOpts {
    tos: Option<u8>,
    ttl: Option<u8>,
    csum: bool,
}

impl SockOpts {
    fn of(cfg: &TunnelConfig) -> SockOpts {
        SockOpts {
            tos: cfg.tos,
            ttl: cfg.ttl,
            csum: cfg.csum,
        }
    }
}

/// Sets the outer TOS (IPv6: traffic class) and TTL (hop limit), `None` restoring the default,
/// and for IPv4 whether UDP checksums are sent (`SO_NO_CHECK`).
fn set_sock_opts(sock: &UdpSocket, v6: bool, o: SockOpts) -> Result<(), PortError> {
    use nix::sys::socket::{setsockopt, sockopt};
    let ttl = o.ttl.map_or(-1, i32::from);
    let tos = o.tos.map_or(0, i32::from);
    let r = if v6 {
        setsockopt(sock, sockopt::Ipv6Ttl, &ttl).and(setsockopt(sock, sockopt::Ipv6TClass, &tos))
    } else {
        setsockopt(sock, sockopt::Ipv4Ttl, &ttl).and(setsockopt(sock, sockopt::IpTos, &tos))
    };
    r.map_err(|e| PortError(format!("tunnel socket TOS/TTL: {e}")))?;
    if !v6 {
        sys::set_no_check(sock.as_fd(), !o.csum)
            .map_err(|e| PortError(format!("tunnel socket SO_NO_CHECK: {e}")))?;
    }
    Ok(())
}

fn kind_name(k: TunnelKind) -> &'static str {
    match k {
        TunnelKind::Vxlan => "vxlan",
        TunnelKind::Geneve => "geneve",
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

    /// Reads datagrams (up to twice a batch) and hands each to its port: into `out` if it is
    /// this port's, else into that port's inbox. Holds the endpoint's reader lock.
    fn read_socket(&self, pool: &mut Pool, out: &mut Batch) -> usize {
        if self.ep.held.load(Relaxed) {
            return 0;
        }
        let Ok(_reader) = self.ep.reader.try_lock() else {
            return 0;
        };
        let members = self.ep.members.read().unwrap_or_else(|e| e.into_inner());
        let (mut n, mut bytes) = (0, 0u64);
        for _ in 0..2 * packet::BATCH_SIZE {
            if out.is_full() {
                break;
            }
            let mut p = pool.get();
            let r = self.ep.sock.recv_from(p.reset_for_fill(MAX_FRAME));
            let (len, from) = match r {
                Ok(x) => x,
                Err(e) => {
                    if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) {
                        self.sh.counters.rx_error(1);
                    }
                    pool.put(p);
                    break;
                }
            };
            p.truncate(len);
            let ip = from.ip();
            // Errors before the VNI is known go to the first port with that remote (or, if
            // none, the first with `remote_ip=flow`).
            let first = members
                .iter()
                .find(|m| m.remote == Some(ip))
                .or_else(|| members.iter().find(|m| m.remote.is_none()));
            let Some(first) = first else {
                self.sh.remote_mismatch.fetch_add(1, Relaxed);
                self.sh.refuse(DropReason::Malformed);
                pool.put(p);
                continue;
            };
            if len >= MAX_FRAME {
                // The datagram filled the buffer: it may have been cut.
                first.sh.refuse(DropReason::TooBig);
                pool.put(p);
                continue;
            }
            let (hlen, vni) = match decap_any(self.ep.kind, p.data()) {
                Ok(x) => x,
                Err(e) => {
                    first.sh.decap_drops[e as usize].fetch_add(1, Relaxed);
                    first.sh.refuse(DropReason::Malformed);
                    pool.put(p);
                    continue;
                }
            };
            let Some(m) = best_member(&members, ip, vni) else {
                first.sh.decap_drops[DecapError::VniMismatch as usize].fetch_add(1, Relaxed);
                first.sh.refuse(DropReason::Malformed);
                pool.put(p);
                continue;
            };
            p.pull_front(hlen);
            p.meta.tun = packet::TunMeta {
                id: vni,
                src: v4_num(ip),
                dst: self.local_num,
            };
            if Arc::ptr_eq(&m.sh, &self.sh) {
                bytes += p.len() as u64;
                let _ = out.push(p);
                n += 1;
                continue;
            }
            let mut q = lock(&m.sh.inbox);
            if q.len() >= INBOX {
                drop(q);
                m.sh.counters.drop(DropReason::QueueFull, 1);
                pool.put(p);
            } else {
                m.sh.counters.rx(1, p.len() as u64);
                q.push_back(p);
            }
        }
        if n > 0 {
            self.sh.counters.rx(n as u64, bytes);
        }
        n
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
        let c = &self.sh.counters;
        let (mut sent, mut bytes) = (0, 0u64);
        for p in pkts.as_mut_slice() {
            let remote = match self.remote {
                Some(r) => r,
                None if p.meta.tun.dst == 0 => {
                    self.sh.no_tun_dst.fetch_add(1, Relaxed);
                    c.drop(DropReason::NoTunnelDst, 1);
                    continue;
                }
                None => SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(p.meta.tun.dst)),
                    self.cfg.dst_port,
                ),
            };
            let header = match self.cfg.vni {
                Some(_) => self.header,
                None => encap_header(self.cfg.kind, p.meta.tun.id & 0xff_ffff),
            };
            let Some(h) = p.push_front(header.len()) else {
                c.drop(DropReason::TooBig, 1);
                continue;
            };
            h.copy_from_slice(&header);
            let r = self.ep.sock.send_to(p.data(), remote);
            p.pull_front(header.len());
            match r {
                Ok(_) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    self.sh.mtu_drops.fetch_add(1, Relaxed);
                    c.drop(DropReason::TooBig, 1);
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    c.drop(DropReason::QueueFull, 1);
                }
                Err(_) => {
                    // Unreachable network or host, or an ICMP error an earlier datagram drew.
                    c.tx_error(1);
                    c.drop(DropReason::LinkDown, 1);
                }
            }
        }
        if sent > 0 {
            c.tx(sent as u64, bytes);
        }
        sent
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
            "local_ip": self.cfg.local.to_string(),
            "key": self.cfg.vni.map_or(serde_json::json!("flow"), |v| v.into()),
            "no_tun_dst_drops": self.sh.no_tun_dst.load(Relaxed),
            "dst_port": self.cfg.dst_port,
            "tos": self.cfg.tos,
            "csum": self.cfg.csum,
            "ttl": self.cfg.ttl,
            "underlay": "kernel UDP socket",
            "ports_on_socket": ports_on_socket,
            "decap_drops": drops,
            "mtu_drops": self.sh.mtu_drops.load(Relaxed),
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
            (GENEVE_PORT, Some(7), IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        );
        let c = TunnelConfig::parse(
            TunnelKind::Vxlan,
            opts(&[("remote_ip", "flow"), ("key", "flow")]),
        )
        .unwrap();
        assert_eq!((c.remote, c.vni, c.csum), (None, None, false));
        let c = TunnelConfig::parse(TunnelKind::Vxlan, opts(&[("remote_ip", "10.0.0.1")])).unwrap();
        assert_eq!(c.dst_port, VXLAN_PORT);
        for bad in [
            vec![],
            vec![("remote_ip", "flow"), ("local_ip", "::1")],
            vec![("remote_ip", "10.0.0.1"), ("local_ip", "flow")],
            vec![("remote_ip", "::1"), ("local_ip", "127.0.0.1")],
            vec![("remote_ip", "10.0.0.1"), ("key", "16777216")],
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
                remote: Some(r.into()),
                local: l.into(),
                vni: Some(7),
                dst_port: port,
                csum: false,
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

    /// Two ports on one socket (same local address and port, different VNIs): the port that
    /// reads hands the other's datagram to its inbox; duplicates and conflicts are refused;
    /// the socket closes with its last port.
    #[test]
    fn ports_share_a_socket_by_remote_and_vni() {
        let port = 40000 + (std::process::id() % 20000) as u16;
        let cfg = |kind, l: [u8; 4], r: [u8; 4], vni| TunnelConfig {
            kind,
            remote: Some(r.into()),
            local: l.into(),
            vni: Some(vni),
            dst_port: port,
            csum: false,
            tos: None,
            ttl: None,
        };
        let vx = TunnelKind::Vxlan;
        let a7 = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 7)).unwrap();
        let a8 = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 8)).unwrap();
        let b7 = TunnelPort::open(cfg(vx, [127, 0, 0, 6], [127, 0, 0, 5], 7)).unwrap();
        let b8 = TunnelPort::open(cfg(vx, [127, 0, 0, 6], [127, 0, 0, 5], 8)).unwrap();
        assert_eq!(a7.status()["ports_on_socket"], 2);
        let dup = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 8)).unwrap_err();
        assert!(dup.0.contains("already has"), "{dup}");
        let other = TunnelPort::open(cfg(TunnelKind::Geneve, [127, 0, 0, 5], [127, 0, 0, 9], 1));
        assert!(other.unwrap_err().0.contains("vxlan"));
        let mut c = cfg(vx, [127, 0, 0, 5], [127, 0, 0, 9], 1);
        c.ttl = Some(9);
        assert!(TunnelPort::open(c).unwrap_err().0.contains("ttl"));

        for (tx, byte) in [(&b7, 7u8), (&b8, 8u8)] {
            let mut batch = Batch::new();
            batch.push(Packet::from_slice(&[byte; 64])).unwrap();
            assert_eq!(tx.tx_burst(0, &mut batch), 1);
        }
        let mut pool = Pool::new(0, 4);
        let (mut o7, mut o8) = (Batch::new(), Batch::new());
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        // Only a7 reads the socket until both datagrams are in.
        while o7.is_empty() || a8.sh.inbox.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < end, "datagrams did not arrive");
            a7.rx_burst(0, &mut pool, &mut o7);
        }
        assert_eq!(a8.rx_burst(0, &mut pool, &mut o8), 1);
        assert_eq!(o7.as_slice()[0].data(), &[7u8; 64][..]);
        assert_eq!(o8.as_slice()[0].data(), &[8u8; 64][..]);
        assert_eq!((a7.stats().rx_packets, a8.stats().rx_packets), (1, 1));
        drop((a7, a8, o7, o8));
        // The socket closed with its last port: the address can be bound again.
        UdpSocket::bind(("127.0.0.5", port)).unwrap();
    }

    /// A flow-based port (`remote_ip=flow,key=flow`) beside a fixed one on the same socket:
    /// the fixed one wins its own remote and VNI, the flow one takes any other VNI and marks
    /// it as tunnel metadata; output follows the packet's metadata, and a packet without
    /// `tun_dst` is dropped and counted.
    #[test]
    fn flow_based_port_uses_and_sets_tunnel_metadata() {
        let port = 30000 + (std::process::id() % 20000) as u16;
        let cfg = |l: [u8; 4], r: Option<[u8; 4]>, vni: Option<u32>| TunnelConfig {
            kind: TunnelKind::Vxlan,
            remote: r.map(IpAddr::from),
            local: l.into(),
            vni,
            dst_port: port,
            csum: false,
            tos: None,
            ttl: None,
        };
        let (a, b) = ([127, 0, 0, 7], [127, 0, 0, 8]);
        let flow = TunnelPort::open(cfg(a, None, None)).unwrap();
        let fixed = TunnelPort::open(cfg(a, Some(b), Some(9))).unwrap();
        let b5 = TunnelPort::open(cfg(b, Some(a), Some(5))).unwrap();
        let b9 = TunnelPort::open(cfg(b, Some(a), Some(9))).unwrap();
        assert_eq!(flow.status()["key"], "flow");
        for (tx, byte) in [(&b5, 5u8), (&b9, 9u8)] {
            let mut batch = Batch::new();
            batch.push(Packet::from_slice(&[byte; 64])).unwrap();
            assert_eq!(tx.tx_burst(0, &mut batch), 1);
        }
        let mut pool = Pool::new(0, 4);
        let (mut of, mut ox) = (Batch::new(), Batch::new());
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while of.is_empty() || fixed.sh.inbox.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < end, "datagrams did not arrive");
            flow.rx_burst(0, &mut pool, &mut of);
        }
        assert_eq!(fixed.rx_burst(0, &mut pool, &mut ox), 1);
        let (pf, px) = (&of.as_slice()[0], &ox.as_slice()[0]);
        assert_eq!(pf.data(), &[5u8; 64][..], "VNI 5 went to the flow port");
        assert_eq!(px.data(), &[9u8; 64][..], "VNI 9 went to the fixed port");
        let want = |id| packet::TunMeta {
            id,
            src: u32::from_be_bytes(b),
            dst: u32::from_be_bytes(a),
        };
        assert_eq!((pf.meta.tun, px.meta.tun), (want(5), want(9)));

        // Output: to tun_dst with tun_id's VNI; without tun_dst, dropped and counted.
        let mut batch = Batch::new();
        let mut p = Packet::from_slice(&[0x55; 64]);
        p.meta.tun = packet::TunMeta {
            id: 5,
            src: 0,
            dst: u32::from_be_bytes(b),
        };
        batch.push(p).unwrap();
        batch.push(Packet::from_slice(&[0x66; 64])).unwrap();
        assert_eq!(flow.tx_burst(0, &mut batch), 1);
        assert_eq!(flow.status()["no_tun_dst_drops"], 1);
        assert!(flow.stats().drops.contains(&(DropReason::NoTunnelDst, 1)));
        let mut o5 = Batch::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while o5.is_empty() {
            assert!(
                std::time::Instant::now() < end,
                "encap to tun_dst did not arrive"
            );
            b5.rx_burst(0, &mut pool, &mut o5);
            b9.rx_burst(0, &mut pool, &mut o5);
        }
        assert_eq!(o5.as_slice()[0].data(), &[0x55; 64][..]);
        assert_eq!(b5.stats().rx_packets, 1, "it carried VNI 5");
    }
}
