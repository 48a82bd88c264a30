//! Batched datagram I/O on UDP sockets for the tunnel ports: [`recv_batch`] (`recvmmsg` of up
//! to [`MAX_BATCH`] datagrams into the caller's packet buffers, with each one's source address)
//! and [`send_batch`] (`sendmmsg` of up to [`MAX_BATCH`] datagrams, each a header and a frame
//! gathered from two buffers, to its own destination, optionally from a source address of its
//! own: `IP_PKTINFO`/`IPV6_PKTINFO`).
//!
//! Why `unsafe` lives here: `std::net::UdpSocket` has one `recv_from`/`send_to` per datagram;
//! `nix`'s `recvmmsg`/`sendmmsg` allocate per call. Each call here is one libc call on memory
//! this function owns or borrows for the call's duration; nothing keeps a pointer past its
//! return. Callers see only safe functions.
//!
//! Threads: any; functions hold no state. The PMD polling a tunnel port calls
//! [`recv_batch`]; any PMD sending to one calls [`send_batch`].
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::BorrowedFd;

/// Most datagrams one [`recv_batch`] or [`send_batch`] moves.
pub const MAX_BATCH: usize = 32;

/// Room for an IPv4 or IPv6 socket address (what `msg_name` points at).
#[repr(C)]
#[derive(Clone, Copy)]
union SockName {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

impl SockName {
    fn zero() -> SockName {
        // SAFETY: both members are plain data; all-zero is a valid value of each.
        unsafe { zeroed() }
    }

    /// `a` as a `sockaddr_in`/`sockaddr_in6`, with its length.
    fn of(a: &SocketAddr) -> (SockName, libc::socklen_t) {
        let mut s = SockName::zero();
        match a {
            SocketAddr::V4(a) => {
                s.v4.sin_family = libc::AF_INET as libc::sa_family_t;
                s.v4.sin_port = a.port().to_be();
                s.v4.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                (s, size_of::<libc::sockaddr_in>() as libc::socklen_t)
            }
            SocketAddr::V6(a) => {
                s.v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.v6.sin6_port = a.port().to_be();
                s.v6.sin6_addr.s6_addr = a.ip().octets();
                s.v6.sin6_flowinfo = a.flowinfo();
                s.v6.sin6_scope_id = a.scope_id();
                (s, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
            }
        }
    }

    /// The address the kernel wrote (`len` bytes of it), if IPv4 or IPv6.
    fn to_addr(self, len: libc::socklen_t) -> Option<SocketAddr> {
        // SAFETY: every member starts with the family field; all bit patterns are valid
        // plain data, and the kernel wrote the member the family names (checked by `len`).
        let fam = unsafe { self.v4.sin_family } as libc::c_int;
        match fam {
            libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family says the kernel wrote a `sockaddr_in`.
                let a = unsafe { self.v4 };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the family says the kernel wrote a `sockaddr_in6`.
                let a = unsafe { self.v6 };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// What one datagram of [`recv_batch`] was.
#[derive(Clone, Copy, Debug, Default)]
pub struct Datagram {
    /// Bytes received (the datagram's full length when `truncated`).
    pub len: usize,
    /// The datagram did not fit its buffer (`MSG_TRUNC`): only the buffer's length was kept.
    pub truncated: bool,
    /// Its source (`None`: not an IPv4 or IPv6 address, which a UDP socket never gives).
    pub from: Option<SocketAddr>,
}

/// The per-datagram state of [`recv_batch`] other than the frame buffers, allocated once and
/// reused by every call.
pub struct RecvBufs {
    names: [SockName; MAX_BATCH],
    /// What each datagram of the last call was.
    pub info: [Datagram; MAX_BATCH],
}

impl Default for RecvBufs {
    fn default() -> RecvBufs {
        RecvBufs {
            names: [SockName::zero(); MAX_BATCH],
            info: [Datagram::default(); MAX_BATCH],
        }
    }
}

/// One `recvmmsg` into `frames` (at most [`MAX_BATCH`]; datagram `i` into `frames[i]`),
/// non-blocking. Returns how many datagrams arrived (0 when none is waiting); their lengths
/// and sources are in `b.info`.
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    frames: &mut [&mut [u8]],
    b: &mut RecvBufs,
) -> io::Result<usize> {
    let n = frames.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    for i in 0..n {
        iov[i] = libc::iovec {
            iov_base: frames[i].as_mut_ptr().cast(),
            iov_len: frames[i].len(),
        };
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = &raw mut iov[i];
        h.msg_iovlen = 1;
        h.msg_name = (&raw mut b.names[i]).cast();
        h.msg_namelen = size_of::<SockName>() as libc::socklen_t;
    }
    // Every pointer in `hdrs` points into `frames`, `b.names` or `iov`, which outlive the
    // call and are exclusively borrowed; the lengths passed are those buffers' lengths.
    // SAFETY: the kernel writes only within those buffers (see above).
    let got = unsafe { crate::sys::recvmmsg_now(fd, &mut hdrs[..n])? };
    for (i, h) in hdrs.iter().enumerate().take(got) {
        b.info[i] = Datagram {
            len: h.msg_len as usize,
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from: b.names[i].to_addr(h.msg_hdr.msg_namelen),
        };
    }
    Ok(got)
}

/// One datagram for [`send_batch`]: `head` then `frame`, to `to`.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The first bytes (a tunnel header).
    pub head: &'a [u8],
    /// The rest (the inner frame).
    pub frame: &'a [u8],
    /// Where it goes.
    pub to: SocketAddr,
    /// The source address it must leave from (`IP_PKTINFO`'s `ipi_spec_dst`, or
    /// `IPV6_PKTINFO`'s address; of the same family as `to`), instead of the socket's bound
    /// address or the route's choice. The kernel refuses one that is not an address of this
    /// host (`ENETUNREACH`; `EINVAL` for a multicast, broadcast or zero one).
    pub src: Option<IpAddr>,
}

impl Default for Outgoing<'_> {
    fn default() -> Self {
        Outgoing {
            head: &[],
            frame: &[],
            to: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            src: None,
        }
    }
}

/// Room for one `IP_PKTINFO` or `IPV6_PKTINFO` control message (`CMSG_SPACE` of the larger,
/// `in6_pktinfo`: 16 + 24 bytes), aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct PktInfoCmsg([u8; 40]);

/// Writes the control message that makes a datagram leave from `src` into `buf`; returns
/// its length (`msg_controllen`).
fn pktinfo(buf: &mut PktInfoCmsg, src: IpAddr) -> usize {
    let (level, ty, data_len) = match src {
        IpAddr::V4(_) => (
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            size_of::<libc::in_pktinfo>(),
        ),
        IpAddr::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            size_of::<libc::in6_pktinfo>(),
        ),
    };
    // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
    let (space, len) = unsafe {
        (
            libc::CMSG_SPACE(data_len as u32),
            libc::CMSG_LEN(data_len as u32),
        )
    };
    debug_assert!(space as usize <= buf.0.len());
    buf.0 = [0; 40];
    let hdr = libc::cmsghdr {
        cmsg_len: len as _,
        cmsg_level: level,
        cmsg_type: ty,
    };
    let hlen = size_of::<libc::cmsghdr>();
    // SAFETY: `buf` is 8-byte aligned and holds a whole `cmsghdr` (16 bytes) at its start;
    // the data that follows fits in its 40 bytes (checked above: `CMSG_SPACE` <= 40).
    unsafe {
        std::ptr::write(buf.0.as_mut_ptr().cast::<libc::cmsghdr>(), hdr);
        let data = buf.0.as_mut_ptr().add(hlen);
        match src {
            IpAddr::V4(a) => {
                let mut info: libc::in_pktinfo = zeroed();
                info.ipi_spec_dst.s_addr = u32::from(a).to_be();
                std::ptr::write_unaligned(data.cast::<libc::in_pktinfo>(), info);
            }
            IpAddr::V6(a) => {
                let mut info: libc::in6_pktinfo = zeroed();
                info.ipi6_addr.s6_addr = a.octets();
                std::ptr::write_unaligned(data.cast::<libc::in6_pktinfo>(), info);
            }
        }
    }
    space as usize
}

/// One `sendmmsg` of `msgs` (at most [`MAX_BATCH`]), non-blocking. Returns how many the kernel
/// took: it stops at the first datagram it refuses, and the error is returned when that is the
/// first one.
pub fn send_batch(fd: BorrowedFd<'_>, msgs: &[Outgoing<'_>]) -> io::Result<usize> {
    let n = msgs.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
    let mut iov: [[libc::iovec; 2]; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    let mut names = [SockName::zero(); MAX_BATCH];
    let mut cmsgs = [PktInfoCmsg([0; 40]); MAX_BATCH];
    for (i, m) in msgs.iter().enumerate().take(n) {
        let (name, len) = SockName::of(&m.to);
        names[i] = name;
        if let Some(src) = m.src {
            let clen = pktinfo(&mut cmsgs[i], src);
            hdrs[i].msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
            hdrs[i].msg_hdr.msg_controllen = clen as _;
        }
        iov[i] = [
            libc::iovec {
                iov_base: m.head.as_ptr() as *mut libc::c_void,
                iov_len: m.head.len(),
            },
            libc::iovec {
                iov_base: m.frame.as_ptr() as *mut libc::c_void,
                iov_len: m.frame.len(),
            },
        ];
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = iov[i].as_mut_ptr();
        h.msg_iovlen = 2;
        h.msg_name = (&raw mut names[i]).cast();
        h.msg_namelen = len;
    }
    // Every pointer in `hdrs` points into `msgs`' buffers, `names`, `cmsgs` or `iov`, which
    // outlive the call.
    // SAFETY: the kernel only reads through the names and iovecs of a send, all live buffers.
    unsafe { crate::sys::sendmmsg_now(fd, &mut hdrs[..n]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    /// A burst sent with one `sendmmsg` to two sockets arrives whole and in order, each
    /// datagram its header then its frame; one `recvmmsg` reads a socket's share with the
    /// sender's address, and a datagram larger than its buffer is marked truncated.
    #[test]
    fn batches_round_trip_over_loopback() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a, b) = (
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let frames: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 20 + i as usize]).collect();
        let heads: Vec<[u8; 2]> = (0..10u8).map(|i| [0xee, i]).collect();
        let msgs: Vec<Outgoing> = (0..10)
            .map(|i| Outgoing {
                head: &heads[i],
                frame: &frames[i],
                to: if i % 2 == 0 { to_a } else { to_b },
                src: None,
            })
            .collect();
        assert_eq!(send_batch(tx.as_fd(), &msgs).unwrap(), 10);
        std::thread::sleep(std::time::Duration::from_millis(50));
        for (sock, parity) in [(&a, 0u8), (&b, 1u8)] {
            let mut bufs: Vec<Vec<u8>> = vec![vec![0; 64]; MAX_BATCH];
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|v| &mut v[..]).collect();
            let mut rb = RecvBufs::default();
            let got = recv_batch(sock.as_fd(), &mut refs, &mut rb).unwrap();
            assert_eq!(got, 5, "one recvmmsg read the socket's five");
            for (k, (buf, d)) in refs.iter().zip(rb.info).take(got).enumerate() {
                let i = (2 * k) as u8 + parity;
                assert_eq!(d.from, Some(tx.local_addr().unwrap()));
                assert!(!d.truncated);
                let mut want = vec![0xee, i];
                want.extend(vec![i; 20 + i as usize]);
                assert_eq!(&buf[..d.len], &want[..], "datagram {k} in order");
            }
            assert_eq!(recv_batch(sock.as_fd(), &mut refs, &mut rb).unwrap(), 0);
        }
        tx.send_to(&[7; 100], to_a).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut small = [0u8; 10];
        let mut refs: [&mut [u8]; 1] = [&mut small];
        let mut rb = RecvBufs::default();
        assert_eq!(recv_batch(a.as_fd(), &mut refs, &mut rb).unwrap(), 1);
        assert!(rb.info[0].truncated && rb.info[0].len == 100);
    }

    /// IPv6 addresses survive the round trip through `sockaddr_in6`.
    #[test]
    fn ipv6_names() {
        let tx = UdpSocket::bind("[::1]:0").unwrap();
        let rx = UdpSocket::bind("[::1]:0").unwrap();
        let m = Outgoing {
            head: &[1],
            frame: &[2, 3],
            to: rx.local_addr().unwrap(),
            src: None,
        };
        assert_eq!(send_batch(tx.as_fd(), &[m]).unwrap(), 1);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut buf = [0u8; 8];
        let mut refs: [&mut [u8]; 1] = [&mut buf];
        let mut rb = RecvBufs::default();
        assert_eq!(recv_batch(rx.as_fd(), &mut refs, &mut rb).unwrap(), 1);
        assert_eq!(rb.info[0].from, Some(tx.local_addr().unwrap()));
        assert_eq!(&buf[..3], &[1, 2, 3]);
    }

    /// A socket bound to 0.0.0.0 sends from the source each datagram names: two loopback
    /// addresses in one `sendmmsg`, as the receiver sees them; a source that is not this
    /// host's is refused and nothing of it is sent.
    #[test]
    fn per_datagram_source_addresses() {
        let tx = UdpSocket::bind("0.0.0.0:0").unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let to = rx.local_addr().unwrap();
        let srcs = [[127, 0, 0, 21], [127, 0, 0, 22]];
        let msgs = srcs.map(|s| Outgoing {
            head: &[9],
            frame: &[8],
            to,
            src: Some(IpAddr::from(s)),
        });
        assert_eq!(send_batch(tx.as_fd(), &msgs).unwrap(), 2);
        let mut buf = [0u8; 8];
        for s in srcs {
            let (len, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!((len, from.ip()), (2, IpAddr::from(s)));
            assert_eq!(from.port(), tx.local_addr().unwrap().port());
        }
        let foreign = Outgoing {
            src: Some(IpAddr::from([192, 0, 2, 1])),
            ..msgs[0]
        };
        let e = send_batch(tx.as_fd(), &[foreign]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH), "{e}");
        assert!(rx.set_nonblocking(true).is_ok() && rx.recv_from(&mut buf).is_err());
    }
}
