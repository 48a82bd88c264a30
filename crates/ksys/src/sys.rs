//! The raw kernel calls behind the kernel-facing ports (`af-packet`, `tap`, `internal`): packet
//! sockets and their options, `recvmmsg`/`sendmmsg` batches, interface ioctls (index, flags,
//! MTU) and tap creation (`TUNSETIFF`, `TUNSETOFFLOAD`, `TUNGETIFF`).
//!
//! Why `unsafe` lives here: neither `nix` 0.29 nor `rustix` 1 wraps `PACKET_*` socket options
//! (`PACKET_AUXDATA`, `PACKET_VNET_HDR`, `PACKET_IGNORE_OUTGOING`, `PACKET_ADD_MEMBERSHIP`),
//! the tun ioctls, or a `recvmmsg` whose iovecs point into our own packet buffers with a raw
//! control buffer per message (nix's version allocates per call and per control message).
//! Each call here is one libc call on memory this function owns or borrows for the call's
//! duration; nothing here keeps a pointer past its return. Callers see only safe functions.
//!
//! Threads: any; functions hold no state. PMDs call [`recv_batch`] and [`send_batch`]; the
//! control and housekeeping threads call the rest.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Size of `struct virtio_net_hdr` (no `num_buffers`), what `PACKET_VNET_HDR` and
/// `IFF_VNET_HDR` put before each frame.
pub const VNET_HDR_LEN: usize = 10;
/// Room for the control messages of one received packet (one `tpacket_auxdata`).
pub const CMSG_SPACE: usize = 64;

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
/// `PACKET_RX_RING`.
pub const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_COPY_THRESH`.
pub const PACKET_COPY_THRESH: libc::c_int = 7;
const PACKET_AUXDATA: libc::c_int = 8;
/// `PACKET_VERSION`.
pub const PACKET_VERSION: libc::c_int = 10;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const ETH_P_ALL: u16 = 0x0003;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNGETIFF: libc::c_ulong = 0x8004_54d2;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A new non-blocking `AF_PACKET`/`SOCK_RAW` socket that receives nothing until bound.
pub fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; a non-negative return is a new fd we own.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            // Protocol 0: nothing is received until `bind_packet` names the interface (with
            // ETH_P_ALL here the socket would take every interface's frames until then, and a
            // port being opened would carry other interfaces' traffic into its bridge).
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds a packet socket to interface `ifindex` (all protocols).
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` lives across the call and its size is passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    })?;
    Ok(())
}

/// Sets socket option `level`/`name` to the plain-data value `v`.
pub fn set_opt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: `v` is a live plain-data value of the size passed, read by the kernel only.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as u32,
        )
    })?;
    Ok(())
}

/// Packet socket options Vireo uses, each a boolean `int`.
#[derive(Clone, Copy, Debug)]
pub enum PacketOpt {
    /// `PACKET_AUXDATA`: a `tpacket_auxdata` control message with each packet (VLAN tags).
    AuxData,
    /// `PACKET_VNET_HDR`: a virtio-net header before each frame (checksum and GSO state).
    VnetHdr,
    /// `PACKET_IGNORE_OUTGOING`: do not receive what this host sends on the interface.
    IgnoreOutgoing,
    /// `PACKET_QDISC_BYPASS`: hand sent frames straight to the driver.
    QdiscBypass,
}

/// Sets a boolean packet socket option.
pub fn set_packet_opt(fd: BorrowedFd<'_>, opt: PacketOpt, on: bool) -> io::Result<()> {
    let name = match opt {
        PacketOpt::AuxData => PACKET_AUXDATA,
        PacketOpt::VnetHdr => PACKET_VNET_HDR,
        PacketOpt::IgnoreOutgoing => PACKET_IGNORE_OUTGOING,
        PacketOpt::QdiscBypass => PACKET_QDISC_BYPASS,
    };
    set_opt(fd, SOL_PACKET, name, &libc::c_int::from(on))
}

/// Sets an `int` packet socket option (`PACKET_VERSION`, `PACKET_COPY_THRESH`).
pub fn set_packet_int(fd: BorrowedFd<'_>, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    set_opt(fd, SOL_PACKET, name, &v)
}

/// `PACKET_STATISTICS`: frames the socket received and dropped (no room in its ring or
/// buffer) since the last call, which resets both.
pub fn packet_stats(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let mut v = [0u32; 2];
    let mut len = size_of::<[u32; 2]>() as libc::socklen_t;
    // SAFETY: `v` and `len` live across the call; the kernel writes at most `len` bytes into
    // `v` (a `struct tpacket_stats`: two u32) and the length it wrote into `len`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_PACKET,
            PACKET_STATISTICS,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((v[0], v[1]))
}

/// Reads and clears the socket's pending error (`SO_ERROR`; 0 if none).
pub fn take_sock_error(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` live across the call; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut v).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// Puts the interface in promiscuous mode for as long as the socket lives.
pub fn add_promisc(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: packet_mreq is plain data; all-zero is a valid value.
    let mut mr: libc::packet_mreq = unsafe { zeroed() };
    mr.mr_ifindex = ifindex as i32;
    mr.mr_type = PACKET_MR_PROMISC;
    set_opt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr)
}

/// Sets a socket buffer size (`SO_RCVBUF`/`SO_SNDBUF`), best effort.
pub fn set_buf(fd: BorrowedFd<'_>, rcv: bool, bytes: libc::c_int) -> io::Result<()> {
    let name = if rcv {
        libc::SO_RCVBUF
    } else {
        libc::SO_SNDBUF
    };
    set_opt(fd, libc::SOL_SOCKET, name, &bytes)
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut r: libc::ifreq = unsafe { zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

fn ioctl_ifreq(fd: libc::c_int, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request passed here reads/writes one `struct ifreq`, which `r` is.
    check(unsafe { libc::ioctl(fd, req as _, r as *mut libc::ifreq) })?;
    Ok(())
}

fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative return is a new fd we own.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let fd = check(raw)?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The index of interface `name` in this network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a NUL-terminated string alive across the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// The interface's flags (`IFF_UP`, `IFF_RUNNING`, ...).
pub fn if_flags(name: &str) -> io::Result<u32> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    Ok(u32::from(unsafe { r.ifr_ifru.ifru_flags } as u16))
}

/// Brings the interface administratively up.
pub fn if_up(name: &str) -> io::Result<()> {
    set_if_up(name, true)
}

/// Sets or clears the interface's `IFF_UP` flag (administrative state).
pub fn set_if_up(name: &str, up: bool) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    let bit = libc::IFF_UP as libc::c_short;
    r.ifr_ifru.ifru_flags = if up { flags | bit } else { flags & !bit };
    ioctl_ifreq(s.as_raw_fd(), libc::SIOCSIFFLAGS, &mut r)
}

/// The interface's MTU.
pub fn if_mtu(name: &str) -> io::Result<u32> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    ioctl_ifreq(s.as_raw_fd(), libc::SIOCGIFMTU, &mut r)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as u32)
}

/// Sets the interface's MTU.
pub fn set_if_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    ioctl_ifreq(s.as_raw_fd(), libc::SIOCSIFMTU, &mut r)
}

/// `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6`: the reader takes partial checksums and TCP GSO
/// frames (never ECN or UFO).
const TUN_OFFLOADS: libc::c_ulong = 0x01 | 0x02 | 0x04;

/// Creates (or attaches to a free persistent) tap interface `name` with a virtio-net header
/// before each frame, and declares which offloads the reader takes (`TUNSETOFFLOAD`): with
/// `offloads`, partial checksums and TCP GSO frames up to 64 KB; without, none (the kernel
/// completes checksums and segments before handing frames over).
pub fn tap_create(name: &str, offloads: bool) -> io::Result<OwnedFd> {
    // SAFETY: the path is a NUL-terminated literal; a non-negative return is a new fd we own.
    let fd = check(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by open() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    ioctl_ifreq(fd.as_raw_fd(), TUNSETIFF, &mut r)?;
    tap_set_offloads(fd.as_fd(), offloads)?;
    Ok(fd)
}

/// Declares which offloads the reader of tap `fd` takes (`TUNSETOFFLOAD`, see [`tap_create`]).
pub fn tap_set_offloads(fd: BorrowedFd<'_>, offloads: bool) -> io::Result<()> {
    let off: libc::c_ulong = if offloads { TUN_OFFLOADS } else { 0 };
    // SAFETY: TUNSETOFFLOAD takes its argument by value; `fd` is a valid open descriptor.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD as _, off) })?;
    Ok(())
}

/// True while the tap behind `fd` still exists (it fails once the interface was deleted).
pub fn tap_attached(fd: BorrowedFd<'_>) -> bool {
    let Ok(mut r) = ifreq("x") else { return false };
    ioctl_ifreq(fd.as_raw_fd(), TUNGETIFF, &mut r).is_ok()
}

/// The name of the tap behind `fd` (a tap fd handed over by another process).
pub fn tap_name(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut r = ifreq("x")?;
    ioctl_ifreq(fd.as_raw_fd(), TUNGETIFF, &mut r)?;
    let name: Vec<u8> = r
        .ifr_name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&name).into_owned())
}

/// What one message of [`recv_batch`] received.
#[derive(Clone, Copy, Debug, Default)]
pub struct RxInfo {
    /// Bytes received after the virtio-net header (frame + spill); the full length when
    /// `truncated`.
    pub len: usize,
    /// The frame did not fit the buffers (`MSG_TRUNC`).
    pub truncated: bool,
    /// Bytes of control messages.
    pub cmsg_len: usize,
}

/// Most messages one [`recv_batch`] or [`send_batch`] moves.
pub const MAX_BATCH: usize = 32;

/// Per-message buffers of [`recv_batch`] other than the frame buffers.
pub struct RxBufs {
    /// Virtio-net header of each message.
    pub vnet: [[u8; VNET_HDR_LEN]; MAX_BATCH],
    /// Control messages of each message.
    pub cmsg: [[u8; CMSG_SPACE]; MAX_BATCH],
    /// Spill area of each message (`spill_each` bytes apiece): what does not fit its frame
    /// buffer (GSO frames).
    pub spill: Vec<u8>,
    /// Bytes of spill per message.
    pub spill_each: usize,
    /// What each message received.
    pub info: [RxInfo; MAX_BATCH],
}

impl RxBufs {
    /// Buffers with `spill_each` bytes of spill per message.
    pub fn new(spill_each: usize) -> RxBufs {
        RxBufs {
            vnet: [[0; VNET_HDR_LEN]; MAX_BATCH],
            cmsg: [[0; CMSG_SPACE]; MAX_BATCH],
            spill: vec![0; spill_each * MAX_BATCH],
            spill_each,
            info: [RxInfo::default(); MAX_BATCH],
        }
    }
}

/// One non-blocking `recvmmsg` into `hdrs` (datagrams cut to their buffers flagged
/// `MSG_TRUNC`): how many arrived, 0 when none wait or the call was interrupted.
///
/// # Safety
/// Every pointer in `hdrs` (names, iovecs, control buffers) must point into memory that is
/// valid for writes of the lengths given, exclusively borrowed for the call.
pub(crate) unsafe fn recvmmsg_now(
    fd: BorrowedFd<'_>,
    hdrs: &mut [libc::mmsghdr],
) -> io::Result<usize> {
    // SAFETY: the caller guarantees every buffer `hdrs` names; the count is `hdrs.len()`.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            hdrs.len() as u32,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    Ok(rc as usize)
}

/// `recvmmsg` into `frames` (at most [`MAX_BATCH`]) and `b`, non-blocking. Returns how many
/// messages arrived (0 when none is waiting); their sizes are in `b.info`.
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    frames: &mut [&mut [u8]],
    b: &mut RxBufs,
) -> io::Result<usize> {
    let n = frames.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
    let mut iov: [[libc::iovec; 3]; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    let spill_each = b.spill_each;
    let mut spills = b.spill.chunks_exact_mut(spill_each.max(1));
    for i in 0..n {
        let (sp_ptr, sp_len) = match spills.next() {
            Some(s) if spill_each > 0 => (s.as_mut_ptr(), s.len()),
            _ => (std::ptr::null_mut(), 0),
        };
        iov[i] = [
            libc::iovec {
                iov_base: b.vnet[i].as_mut_ptr().cast(),
                iov_len: VNET_HDR_LEN,
            },
            libc::iovec {
                iov_base: frames[i].as_mut_ptr().cast(),
                iov_len: frames[i].len(),
            },
            libc::iovec {
                iov_base: sp_ptr.cast(),
                iov_len: sp_len,
            },
        ];
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = iov[i].as_mut_ptr();
        h.msg_iovlen = 3;
        h.msg_control = b.cmsg[i].as_mut_ptr().cast();
        h.msg_controllen = CMSG_SPACE;
    }
    // Every pointer in `hdrs` points into `frames`, `b` or `iov`, which outlive the call and
    // are exclusively borrowed; the lengths passed are those buffers' lengths.
    // SAFETY: the kernel writes only within those buffers (see above).
    let got = unsafe { recvmmsg_now(fd, &mut hdrs[..n])? };
    for (i, h) in hdrs.iter().enumerate().take(got) {
        b.info[i] = RxInfo {
            len: (h.msg_len as usize).saturating_sub(VNET_HDR_LEN),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            cmsg_len: h.msg_hdr.msg_controllen.min(CMSG_SPACE),
        };
    }
    Ok(got)
}

/// `sendmmsg` of `frames` (at most [`MAX_BATCH`]), frame `i` after `vnets[i]`. Returns how
/// many the kernel took (it stops at the first error; the error is returned when none was
/// sent).
pub fn send_batch(
    fd: BorrowedFd<'_>,
    vnets: &[[u8; VNET_HDR_LEN]],
    frames: &[&[u8]],
) -> io::Result<usize> {
    let n = frames.len().min(vnets.len()).min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
    let mut iov: [[libc::iovec; 2]; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    for i in 0..n {
        iov[i] = [
            libc::iovec {
                iov_base: vnets[i].as_ptr() as *mut libc::c_void,
                iov_len: VNET_HDR_LEN,
            },
            libc::iovec {
                iov_base: frames[i].as_ptr() as *mut libc::c_void,
                iov_len: frames[i].len(),
            },
        ];
        hdrs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
        hdrs[i].msg_hdr.msg_iovlen = 2;
    }
    // Every pointer in `hdrs` points into `vnets`, `frames` or `iov`, which outlive the call.
    // SAFETY: the kernel only reads through the iovecs of a send, all in live buffers.
    unsafe { sendmmsg_now(fd, &mut hdrs[..n]) }
}

/// One non-blocking `sendmmsg` of `hdrs`: how many messages the kernel took.
///
/// # Safety
/// Every pointer in `hdrs` (names, iovecs, control buffers) must point into memory valid for
/// reads of the lengths given for the whole call.
pub(crate) unsafe fn sendmmsg_now(
    fd: BorrowedFd<'_>,
    hdrs: &mut [libc::mmsghdr],
) -> io::Result<usize> {
    // SAFETY: the caller guarantees every buffer `hdrs` names; the count is `hdrs.len()`.
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            hdrs.len() as u32,
            libc::MSG_DONTWAIT,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Forbids fragmentation on a UDP socket (`IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`, or the IPv6
/// options for an IPv6 socket): a datagram larger than the route's MTU fails with `EMSGSIZE`
/// instead of leaving in fragments.
pub fn set_pmtudisc_do(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        let (l, d) = (libc::IPPROTO_IPV6, libc::IPV6_PMTUDISC_DO);
        set_opt(fd, l, libc::IPV6_MTU_DISCOVER, &d)?;
        set_opt(fd, l, libc::IPV6_DONTFRAG, &1)
    } else {
        set_opt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            &libc::IP_PMTUDISC_DO,
        )
    }
}

/// Turns UDP checksums off (`on`) or on for datagrams an IPv4 UDP socket sends (`SO_NO_CHECK`).
pub fn set_no_check(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_opt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_NO_CHECK,
        &libc::c_int::from(on),
    )
}

/// An IPv4 socket's `IP_MTU_DISCOVER` mode (`libc::IP_PMTUDISC_*`).
pub fn pmtudisc(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int-sized buffer and its length, written by the kernel only.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// Whether an IPv4 socket's datagrams carry DF (`IP_MTU_DISCOVER`): `IP_PMTUDISC_DO` for
/// true, `IP_PMTUDISC_INTERFACE` for false (DF clear, yet a datagram over the interface's MTU
/// still fails with `EMSGSIZE` instead of leaving in fragments).
pub fn set_df(fd: BorrowedFd<'_>, df: bool) -> io::Result<()> {
    let v = if df {
        libc::IP_PMTUDISC_DO
    } else {
        libc::IP_PMTUDISC_INTERFACE
    };
    set_opt(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, &v)
}
