//! A tunnel port's datagrams: receive (`recvmmsg` bursts on the shared socket, decap, each
//! datagram to the port it belongs to) and send (encap headers, one `sendmmsg` per burst).
//!
//! Threads: `read_socket` on the PMD polling the port, holding the endpoint's reader lock;
//! `send_burst` on any PMD sending to the port (the socket is shared without a lock: the
//! kernel serializes what it must).
use super::endpoint::{best_member, lock, Member};
use super::{v4_num, TunnelPort, INBOX};
use crate::{udp, DropReason};
use packet::{Batch, Packet, Pool, MAX_FRAME};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use wire::tunnel::{decap_any, encap_header, DecapError};

/// `recvmmsg` calls one poll may make (a full first call is followed by one more).
const RX_CALLS: usize = 2;

impl TunnelPort {
    /// Reads datagrams with `recvmmsg` (up to [`RX_CALLS`] calls of up to the room left in
    /// `out`, at most [`udp::MAX_BATCH`] each) and hands each to its port: into `out` if it is
    /// this port's, else into that port's inbox. Holds the endpoint's reader lock, whose
    /// buffers are filled from `pool` only as far as they were used.
    pub(super) fn read_socket(&self, pool: &mut Pool, out: &mut Batch) -> usize {
        if self.ep.held.load(Relaxed) {
            return 0;
        }
        let Ok(mut rx) = self.ep.reader.try_lock() else {
            return 0;
        };
        let rx = &mut *rx;
        let members = self.ep.members.read().unwrap_or_else(|e| e.into_inner());
        let (mut n, mut bytes) = (0, 0u64);
        for _ in 0..RX_CALLS {
            let want = out.room().min(udp::MAX_BATCH);
            if want == 0 {
                break;
            }
            while rx.fill.len() < want {
                rx.fill.push(pool.get());
            }
            let got = {
                let mut frames: [&mut [u8]; udp::MAX_BATCH] = Default::default();
                for (f, p) in frames.iter_mut().zip(rx.fill.iter_mut()) {
                    *f = p.reset_for_fill(MAX_FRAME);
                }
                udp::recv_batch(self.ep.sock.as_fd(), &mut frames[..want], &mut rx.bufs)
            };
            let got = match got {
                Ok(k) => k,
                Err(_) => {
                    self.sh.counters.rx_error(1);
                    0
                }
            };
            if got == 0 {
                break;
            }
            self.sh.rx_batches.fetch_add(1, Relaxed);
            for (d, p) in rx.bufs.info.iter().zip(rx.fill.drain(..got)) {
                if let Some(len) = self.take(&members, p, d, pool, out) {
                    n += 1;
                    bytes += len as u64;
                }
            }
            if got < want {
                break;
            }
        }
        if n > 0 {
            self.sh.counters.rx(n as u64, bytes);
        }
        n
    }

    /// One received datagram: checked, decapsulated and given to its port (this one: pushed
    /// to `out`, returning the inner frame's length), or dropped and counted.
    fn take(
        &self,
        members: &[Member],
        mut p: Packet,
        d: &udp::Datagram,
        pool: &mut Pool,
        out: &mut Batch,
    ) -> Option<usize> {
        let Some(ip) = d.from.map(|a| a.ip()) else {
            self.sh.remote_mismatch.fetch_add(1, Relaxed);
            self.sh.refuse(DropReason::Malformed);
            pool.put(p);
            return None;
        };
        // Errors before the VNI is known go to the first port with that remote (or, if none,
        // the first with `remote_ip=flow`).
        let first = members
            .iter()
            .find(|m| m.remote == Some(ip))
            .or_else(|| members.iter().find(|m| m.remote.is_none()));
        let Some(first) = first else {
            self.sh.remote_mismatch.fetch_add(1, Relaxed);
            self.sh.refuse(DropReason::Malformed);
            pool.put(p);
            return None;
        };
        if d.truncated {
            // Larger than a packet buffer: it was cut.
            first.sh.refuse(DropReason::TooBig);
            pool.put(p);
            return None;
        }
        p.truncate(d.len);
        let (hlen, vni) = match decap_any(self.ep.kind, p.data()) {
            Ok(x) => x,
            Err(e) => {
                first.sh.decap_drops[e as usize].fetch_add(1, Relaxed);
                first.sh.refuse(DropReason::Malformed);
                pool.put(p);
                return None;
            }
        };
        let Some(m) = best_member(members, ip, vni) else {
            first.sh.decap_drops[DecapError::VniMismatch as usize].fetch_add(1, Relaxed);
            first.sh.refuse(DropReason::Malformed);
            pool.put(p);
            return None;
        };
        p.pull_front(hlen);
        p.meta.tun = packet::TunMeta {
            id: vni,
            src: v4_num(ip),
            dst: self.local_num,
        };
        if Arc::ptr_eq(&m.sh, &self.sh) {
            let len = p.len();
            let _ = out.push(p);
            return Some(len);
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
        None
    }

    /// Encapsulates `pkts` and sends them with one `sendmmsg` per [`udp::MAX_BATCH`] (each
    /// datagram its header and the frame, gathered by the kernel: the packets are not
    /// changed; a `local_ip=flow` port's datagram leaves from the packet's `tun_src`). A datagram the kernel refuses is skipped with its reason and the rest
    /// follow in another call; when the socket's buffer is full (`EAGAIN`, `ENOBUFS`) the
    /// rest of the burst is dropped as `queue-full`, never waited for.
    pub(super) fn send_burst(&self, pkts: &Batch) -> usize {
        let (mut sent, mut bytes) = (0, 0u64);
        for chunk in pkts.as_slice().chunks(udp::MAX_BATCH) {
            let (s, b) = self.send_chunk(chunk);
            sent += s;
            bytes += b;
        }
        if sent > 0 {
            self.sh.counters.tx(sent as u64, bytes);
        }
        sent
    }

    fn send_chunk(&self, pkts: &[Packet]) -> (usize, u64) {
        let c = &self.sh.counters;
        let mut heads = [[0u8; 8]; udp::MAX_BATCH];
        let mut dests = [None::<SocketAddr>; udp::MAX_BATCH];
        for (i, p) in pkts.iter().enumerate() {
            dests[i] = match self.remote {
                Some(r) => Some(r),
                None if p.meta.tun.dst == 0 => {
                    self.sh.no_tun_dst.fetch_add(1, Relaxed);
                    c.drop(DropReason::NoTunnelDst, 1);
                    None
                }
                None => Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(p.meta.tun.dst)),
                    self.cfg.dst_port,
                )),
            };
            heads[i] = match self.cfg.vni {
                Some(_) => self.header,
                None => encap_header(self.cfg.kind, p.meta.tun.id & 0xff_ffff),
            };
        }
        let mut msgs = [udp::Outgoing::default(); udp::MAX_BATCH];
        let mut n = 0;
        for (i, p) in pkts.iter().enumerate() {
            if let Some(to) = dests[i] {
                // `local_ip=flow`: from the pipeline's `tun_src`, if it set one.
                let src = (self.cfg.local_flow && p.meta.tun.src != 0)
                    .then(|| IpAddr::V4(Ipv4Addr::from(p.meta.tun.src)));
                msgs[n] = udp::Outgoing {
                    head: &heads[i],
                    frame: p.data(),
                    to,
                    src,
                };
                n += 1;
            }
        }
        let (mut at, mut sent, mut bytes) = (0, 0, 0u64);
        while at < n {
            let r = udp::send_batch(self.ep.sock.as_fd(), &msgs[at..n]);
            self.sh.tx_batches.fetch_add(1, Relaxed);
            match r {
                Ok(k) if k > 0 => {
                    bytes += msgs[at..at + k]
                        .iter()
                        .map(|m| m.frame.len() as u64)
                        .sum::<u64>();
                    sent += k;
                    at += k;
                }
                Ok(_) => {
                    c.drop(DropReason::QueueFull, (n - at) as u64);
                    break;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMSGSIZE) => {
                        self.sh.mtu_drops.fetch_add(1, Relaxed);
                        c.drop(DropReason::TooBig, 1);
                        at += 1;
                    }
                    Some(libc::EAGAIN | libc::ENOBUFS) => {
                        c.drop(DropReason::QueueFull, (n - at) as u64);
                        break;
                    }
                    Some(libc::ENETUNREACH | libc::EINVAL) if msgs[at].src.is_some() => {
                        // The `tun_src` is not this host's (or no route leaves from it).
                        self.sh.tun_src_refused.fetch_add(1, Relaxed);
                        c.tx_error(1);
                        c.drop(DropReason::LinkDown, 1);
                        at += 1;
                    }
                    _ => {
                        // Unreachable network or host, or an ICMP error an earlier datagram
                        // drew.
                        c.tx_error(1);
                        c.drop(DropReason::LinkDown, 1);
                        at += 1;
                    }
                },
            }
        }
        (sent, bytes)
    }
}
