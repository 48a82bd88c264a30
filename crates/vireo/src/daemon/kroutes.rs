//! The host's routing table for native tunneling: a route dump over rtnetlink when the daemon
//! starts and whenever the kernel announces a route change (a socket joined to the IPv4 and
//! IPv6 route groups, drained without blocking at every housekeeping upkeep), parsed by
//! `tnl::netlink`. The routes kept are those whose output interface is a Vireo internal port;
//! `underlay::upkeep` filters the last dump by the internal ports' interface indexes at every
//! upkeep (so a port attached later, or recreated with a new index, gets its routes) and
//! turns them into `tnl::route::Origin::Kernel` routes.
//!
//! A failed or malformed dump keeps the previous routes and is counted (`route/show`'s
//! `kernel` counters); a dump larger than [`MAX_ROUTES`] is cut there and counted, so a host
//! with a full Internet table costs bounded memory.
//!
//! Threads: the housekeeping thread (through `underlay::upkeep`); `route/show` reads the
//! counters on a control connection thread.
use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use std::os::fd::{AsRawFd, OwnedFd};
use tnl::netlink::{self, KernelRoute};

/// Most host routes kept from one dump.
pub const MAX_ROUTES: usize = 65_536;

/// What the watcher has done, for `route/show`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Counters {
    /// Complete dumps read.
    pub dumps: u64,
    /// Dumps that failed (socket error, timeout, malformed message): routes kept as they were.
    pub errors: u64,
    /// Change notifications seen.
    pub notifications: u64,
    /// Routes skipped in the last dump (other tables, non-unicast, connected, multipath).
    pub skipped: u64,
    /// Routes over [`MAX_ROUTES`] dropped from the last dump.
    pub truncated: u64,
}

/// The route listener and the last dump.
#[derive(Default)]
pub struct KernelRoutes {
    listener: Option<OwnedFd>,
    /// A dump is due (first upkeep, a notification, or the last one failed).
    stale: bool,
    started: bool,
    seq: u32,
    routes: Vec<KernelRoute>,
    /// Counters.
    pub counters: Counters,
}

fn open(groups: u32) -> nix::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
    Ok(fd)
}

impl KernelRoutes {
    /// Opens the change listener now (at daemon start, so the socket is there before anyone
    /// counts the daemon's descriptors) and asks for a dump at the first refresh.
    pub fn start() -> KernelRoutes {
        let mut k = KernelRoutes {
            started: true,
            stale: true,
            ..Default::default()
        };
        match open(netlink::ROUTE_GROUPS) {
            Ok(fd) => k.listener = Some(fd),
            Err(e) => {
                tracing::warn!("underlay: cannot listen for route changes ({e}); host routes are read at start only");
                k.counters.errors += 1;
            }
        }
        k
    }

    /// Drains change notifications and, when the table may have changed, dumps it again.
    /// Returns the routes of the last good dump (`None` before the first one).
    pub fn refresh(&mut self) -> Option<&[KernelRoute]> {
        if !self.started {
            *self = KernelRoutes::start();
        }
        if let Some(l) = &self.listener {
            let mut buf = [0u8; 8192];
            loop {
                match recv(l.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                    Ok(0) => break,
                    Ok(_) => {
                        self.counters.notifications += 1;
                        self.stale = true;
                    }
                    // ENOBUFS: notifications were lost; the dump below catches up.
                    Err(nix::errno::Errno::ENOBUFS) => self.stale = true,
                    Err(_) => break,
                }
            }
        }
        if self.stale {
            self.dump();
        }
        (self.counters.dumps > 0).then_some(self.routes.as_slice())
    }

    fn dump(&mut self) {
        self.seq = self.seq.wrapping_add(1);
        match dump(self.seq) {
            Ok((routes, skipped, truncated)) => {
                self.stale = false;
                self.counters.dumps += 1;
                self.counters.skipped = skipped;
                self.counters.truncated = truncated;
                self.routes = routes;
            }
            Err(e) => {
                self.counters.errors += 1;
                tracing::warn!("underlay: host route dump failed: {e}");
            }
        }
    }
}

/// One complete dump of every family's routes: those kept (at most [`MAX_ROUTES`]), the count
/// skipped and the count cut over the limit. Gives up after 2 s.
fn dump(seq: u32) -> Result<(Vec<KernelRoute>, u64, u64), String> {
    let fd = open(0).map_err(|e| format!("netlink socket: {e}"))?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )
    .map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
    send(
        fd.as_raw_fd(),
        &netlink::dump_request(seq),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("send: {e}"))?;
    let (mut routes, mut skipped, mut truncated) = (Vec::new(), 0u64, 0u64);
    let mut buf = vec![0u8; 32 * 1024];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if std::time::Instant::now() > deadline {
            return Err("dump did not finish in 2 s".into());
        }
        let n =
            recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(|e| format!("recv: {e}"))?;
        if n == 0 {
            return Err("socket closed".into());
        }
        let b = netlink::parse(&buf[..n]).map_err(|e| e.to_string())?;
        let s = b.skipped;
        skipped += s.table + s.kind + s.connected + s.unsupported + s.family;
        let room = MAX_ROUTES - routes.len();
        truncated += b.routes.len().saturating_sub(room) as u64;
        routes.extend(b.routes.into_iter().take(room));
        if b.done {
            return Ok((routes, skipped, truncated));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real kernel's dump parses and completes; the local table's routes (127.0.0.1 and
    /// the like) are skipped, not kept.
    #[test]
    fn a_real_dump_completes() {
        let mut k = KernelRoutes::default();
        let routes = k.refresh().expect("the first refresh dumps").to_vec();
        assert_eq!((k.counters.dumps, k.counters.errors), (1, 0));
        assert!(k.refresh().is_some(), "the last dump stays");
        assert!(k.counters.skipped > 0, "local-table routes are skipped");
        assert!(routes.iter().all(|r| !r.dst.is_loopback()));
    }
}
