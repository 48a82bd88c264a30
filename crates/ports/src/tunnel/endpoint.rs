//! The underlay socket of the tunnel ports: one kernel UDP socket per `local_ip:dst_port`
//! (`Endpoint`), shared by every tunnel port of one kind bound there (its members, each with
//! its remote and VNI), the options that belong to the socket (`tos`, `ttl`, `csum`), the
//! buffers its reader fills with `recvmmsg`, and the registry that lets a port join an open
//! socket. Opened and joined on the control thread (`add-port`, an upgrade's adoption); read
//! by the PMD polling whichever member holds the reader lock, written by any PMD.
use super::{flow_or, kind_name, Shared, TunnelConfig, TunnelKind};
use crate::{sys, udp, PortError};
use packet::Packet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

pub(super) struct Member {
    /// `None`: `remote_ip=flow` (any source).
    pub(super) remote: Option<IpAddr>,
    /// `None`: `key=flow` (any VNI).
    pub(super) vni: Option<u32>,
    pub(super) sh: Arc<Shared>,
}

/// The member a datagram from `ip` with `vni` belongs to: the most specific match (exact
/// remote and VNI, then exact remote with `key=flow`, then `remote_ip=flow` with the VNI, then
/// both flow).
pub(super) fn best_member(members: &[Member], ip: IpAddr, vni: u32) -> Option<&Member> {
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

/// One UDP socket shared by every tunnel port of one kind on the same `local_ip:dst_port`;
/// a received datagram goes to the port whose `remote_ip` and VNI it carries.
pub(super) struct Endpoint {
    pub(super) kind: TunnelKind,
    bind: SocketAddr,
    /// The socket's outer TOS and TTL (shared by its ports; changed only while it has none).
    tos_ttl: Mutex<SockOpts>,
    pub(super) sock: UdpSocket,
    /// Held (`try_lock`) by the port reading the socket; the others only drain their inbox.
    pub(super) reader: Mutex<RxScratch>,
    pub(super) members: RwLock<Vec<Member>>,
    /// No port reads the socket (an upgrade's switch-over: what arrives waits in the socket
    /// for the next vireod, which adopts it).
    pub(super) held: AtomicBool,
}

/// What the reader of a socket reuses from one `recvmmsg` to the next: packet buffers
/// waiting to be filled (taken from the reading PMD's pool as needed, kept across polls, so an
/// empty poll takes and returns none) and the per-datagram addresses and lengths.
#[derive(Default)]
pub(super) struct RxScratch {
    pub(super) fill: Vec<Packet>,
    pub(super) bufs: udp::RecvBufs,
}

/// Every live endpoint (control thread: `open`; a port's drop).
static ENDPOINTS: Mutex<Vec<Weak<Endpoint>>> = Mutex::new(Vec::new());

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
            reader: Mutex::new(RxScratch::default()),
            members: RwLock::new(Vec::new()),
            held: AtomicBool::new(false),
        }))
    }

    /// The endpoint for `cfg` (an existing one on the same address, or a new socket), with
    /// `sh` joined as the member for `cfg`'s remote and VNI.
    pub(super) fn join(
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
                            "tos, ttl, csum and df_default must match the other tunnel ports on UDP {bind}"
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
    df: bool,
}

impl SockOpts {
    fn of(cfg: &TunnelConfig) -> SockOpts {
        SockOpts {
            tos: cfg.tos,
            ttl: cfg.ttl,
            csum: cfg.csum,
            df: cfg.df,
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
        sys::set_df(sock.as_fd(), o.df)
            .map_err(|e| PortError(format!("tunnel socket IP_MTU_DISCOVER: {e}")))?;
    }
    Ok(())
}
