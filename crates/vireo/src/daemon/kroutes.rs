//! The host's routes through Vireo's internal ports, read from the kernel over rtnetlink for
//! native tunneling's route table (`tnl::route::RouteTable::set_kernel`).
//!
//! One `RTM_GETROUTE` dump (IPv4 and IPv6) per housekeeping round on a fresh `NETLINK_ROUTE`
//! socket with a 200 ms receive timeout (the housekeeping thread never waits longer), at most
//! [`MAX_READS`] datagrams; parsed by `tnl::netlink::parse_routes` (checked, fuzzed). Only
//! routes whose output interface is one of the given internal ports are returned, with the
//! port's name. No notifications (RTNLGRP): a change is seen at the next round (~0.5 s).
//!
//! Threads: the housekeeping thread (and a port's attach), through `underlay::upkeep`.
use nix::sys::socket::{
    recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use tnl::route::KernelEntry;

/// Most datagrams one dump may take.
pub const MAX_READS: usize = 1024;

/// Routes (prefix, length, port, gateway) of the kernel's main table whose output interface
/// is one of `ports` (Vireo internal ports, by name).
pub fn read(ports: &[String]) -> Result<Vec<KernelEntry>, String> {
    static SEQ: AtomicU32 = AtomicU32::new(1);
    let seq = SEQ.fetch_add(1, Relaxed);
    let by_index: Vec<(u32, String)> = nix::net::if_::if_nameindex()
        .map_err(|e| format!("if_nameindex: {e}"))?
        .iter()
        .filter_map(|i| {
            let name = i.name().to_str().ok()?.to_string();
            ports.contains(&name).then_some((i.index(), name))
        })
        .collect();
    if by_index.is_empty() {
        return Ok(Vec::new());
    }
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("netlink socket: {e}"))?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000))
        .map_err(|e| format!("netlink timeout: {e}"))?;
    sendto(
        fd.as_raw_fd(),
        &tnl::netlink::dump_request(seq),
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("netlink send: {e}"))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    for _ in 0..MAX_READS {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())
            .map_err(|e| format!("netlink recv: {e}"))?;
        let (routes, done) = tnl::netlink::parse_routes(&buf[..n], seq)
            .map_err(|e| format!("netlink dump: {e:?}"))?;
        for r in routes {
            if let Some((_, name)) = by_index.iter().find(|(i, _)| *i == r.oif) {
                out.push((r.prefix, r.len, name.clone(), r.gw));
            }
        }
        if done {
            return Ok(out);
        }
    }
    Err(format!("netlink dump longer than {MAX_READS} datagrams"))
}
