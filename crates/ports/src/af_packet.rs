//! The `af-packet` port kind: a kernel interface (a veth end, a NIC) through one `AF_PACKET`
//! raw socket. Frames come in through a memory-mapped receive ring (`PACKET_RX_RING`,
//! `TPACKET_V2`, `ring.rs`): the PMD reads slot status words and copies frames into
//! Vireo's packet buffers, with no system call while frames flow or while the ring is empty.
//! They go out in batches of up to 32 with `sendmmsg`. (Measured against `recvmmsg` on rx:
//! the ring wins, see BENCHMARKS.md "Kernel ports".)
//!
//! The socket: `PACKET_VNET_HDR` (each frame comes with its checksum and GSO state, in the
//! ring just before the frame), the VLAN tag the kernel stripped (the slot's `tp_vlan_tci`,
//! or `PACKET_AUXDATA` beside a frame read with `recvmsg`) is put back in,
//! `PACKET_IGNORE_OUTGOING` (what we send is not received back), promiscuous membership
//! (undone by the kernel when the socket closes), `PACKET_QDISC_BYPASS` on send. Ring slots
//! hold a jumbo frame (`ring::FRAME_SIZE`, 9344 bytes); a larger frame (a TCP GSO frame from
//! a veth peer with TSO) is cut in its slot (`TP_STATUS_COPY`) and read whole from the
//! socket's queue with `recvmmsg` (`PACKET_COPY_THRESH`). Every slot header is checked against
//! the slot ([`crate::kmeta::parse_tpacket2`]); a bad one is dropped and counted. Frames the
//! kernel could not put in a full ring are read from `PACKET_STATISTICS` by housekeeping and
//! counted as `queue-full` drops (`kernel_drops` in `show`).
//!
//! Offloads (option `offloads`, default on): a partial checksum or a TCP GSO frame (a veth
//! peer with TSO on hands over up to 64 KB) keeps its offload in the packet's metadata after
//! the header is checked (`packet::vnet`, a GSO frame in a large buffer); the datapath
//! finishes it only for outputs that do not take it. On tx each frame's virtio-net header
//! carries its offload and the kernel finishes it. With `offloads=false`, partial checksums
//! are completed and GSO frames segmented in software here (`wire::offload`), and tx takes no
//! offload.
//!
//! An upgrade hands the socket over with its ring (`adopt`): the new vireod maps the same
//! ring and finds the kernel's position in it; a socket from a vireod without a ring gets one,
//! and what was queued on it before is read first.
//!
//! Threads: `open`/`adopt` (socket, options, ring set-up and mapping) on the control thread;
//! `rx_burst` on the one PMD polling the port's single rx queue (its state and the ring's
//! cursor sit behind uncontended mutexes, taken once per burst); `tx_burst` from any PMD
//! (`sendmmsg` on a shared socket needs no lock); `maintain` on the housekeeping thread: it
//! reads the kernel's drop count and notices the interface going away (`ip link del`) or
//! coming back and closes or re-opens the socket (with a new ring), so PMDs never make that
//! check. A closed socket's ring is unmapped when the last PMD holding it lets go. Lock order:
//! `rx` before `sock` before the ring's cursor (rx_burst reads `sock` while holding `rx`;
//! maintain takes only `sock`).
use crate::kmeta::{self, VnetHdr};
use crate::ring::{self, RxRing};

// A slot holds what the kernel puts before a frame (76 bytes) and the largest frame.
const _: () = assert!(ring::FRAME_SIZE >= 76 + packet::MAX_FRAME);
use crate::sys::{self, PacketOpt, RxBufs, MAX_BATCH, VNET_HDR_LEN};
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Packet, Pool, MAX_FRAME};
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// Largest MTU a kernel port may have: a frame of MTU + Ethernet header + one VLAN tag must
/// fit a packet buffer.
pub const MAX_MTU: u32 = (MAX_FRAME - 18) as u32;
/// Largest frame (GSO included) the rx path takes; larger ones are dropped as too big.
const MAX_GSO_FRAME: usize = 65_536 + 256;

/// An open socket on one interface.
struct Sock {
    /// Its receive ring (declared before `fd`: unmapped before the socket closes); None only
    /// while `adopt` reads what was queued on a socket that had none.
    ring: Option<RxRing>,
    fd: OwnedFd,
    ifindex: u32,
}

/// Counters specific to kernel ports, shown in `show`.
#[derive(Default)]
pub(crate) struct KernelCounters {
    pub(crate) link_lost: AtomicU64,
    pub(crate) reopened: AtomicU64,
    pub(crate) csum_completed: AtomicU64,
    pub(crate) gso_frames: AtomicU64,
    pub(crate) gso_segments: AtomicU64,
    pub(crate) bad_vnet: AtomicU64,
    /// Frames the kernel dropped for want of room in the ring or socket buffer.
    pub(crate) kernel_drops: AtomicU64,
    /// Frames above a ring slot, read whole from the socket's queue.
    pub(crate) ring_copies: AtomicU64,
    /// Ring slots whose header was refused.
    pub(crate) bad_slots: AtomicU64,
}

impl KernelCounters {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "link_lost": self.link_lost.load(Relaxed),
            "reopened": self.reopened.load(Relaxed),
            "csum_completed": self.csum_completed.load(Relaxed),
            "gso_frames": self.gso_frames.load(Relaxed),
            "gso_segments": self.gso_segments.load(Relaxed),
            "bad_vnet_headers": self.bad_vnet.load(Relaxed),
            "kernel_drops": self.kernel_drops.load(Relaxed),
            "ring_copies": self.ring_copies.load(Relaxed),
            "bad_ring_slots": self.bad_slots.load(Relaxed),
        })
    }
}

/// Rx state: buffers reused every burst and segments waiting for room in a batch.
struct RxState {
    bufs: RxBufs,
    fill: Batch,
    seg: Vec<u8>,
    pending: VecDeque<Packet>,
}

/// An `af-packet` port.
pub struct AfPacketPort {
    ifname: String,
    /// Offloads kept as metadata (rx) and handed to the kernel (tx).
    offloads: bool,
    sock: RwLock<Option<Arc<Sock>>>,
    rx: Mutex<RxState>,
    up: AtomicBool,
    /// Set by `shutdown`: `maintain` must not re-open a deleted port.
    closed: AtomicBool,
    /// Set by [`AfPacketPort::hold_rx`]: nothing is read (frames wait in the socket).
    held: AtomicBool,
    numa: Option<usize>,
    counters: PortCounters,
    kc: KernelCounters,
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("ifname", &self.ifname)
            .finish()
    }
}

fn open(ifname: &str) -> Result<Sock, PortError> {
    let e = |what: &str, err: std::io::Error| PortError(format!("{ifname}: {what}: {err}"));
    let ifindex = sys::if_index(ifname)
        .map_err(|_| PortError(format!("no network interface named {ifname}")))?;
    let mtu = sys::if_mtu(ifname).map_err(|x| e("cannot read MTU", x))?;
    if mtu > MAX_MTU {
        return Err(PortError(format!(
            "{ifname} has MTU {mtu}, above the {MAX_MTU} Vireo's packet buffers hold; lower it"
        )));
    }
    let fd = sys::packet_socket().map_err(|x| e("cannot open a packet socket", x))?;
    for opt in [
        PacketOpt::VnetHdr,
        PacketOpt::AuxData,
        PacketOpt::IgnoreOutgoing,
    ] {
        sys::set_packet_opt(fd.as_fd(), opt, true).map_err(|x| e(&format!("{opt:?}"), x))?;
    }
    // Only a speed-up; older kernels lack it.
    let _ = sys::set_packet_opt(fd.as_fd(), PacketOpt::QdiscBypass, true);
    // The receive buffer holds only frames above a ring slot (TP_STATUS_COPY).
    let _ = sys::set_buf(fd.as_fd(), true, 4 << 20);
    let _ = sys::set_buf(fd.as_fd(), false, 4 << 20);
    // The ring before the bind: nothing arrives before it.
    let (ring, _) = RxRing::attach(fd.as_fd()).map_err(|x| e("cannot set up the rx ring", x))?;
    sys::bind_packet(fd.as_fd(), ifindex).map_err(|x| e("bind", x))?;
    sys::add_promisc(fd.as_fd(), ifindex).map_err(|x| e("promiscuous mode", x))?;
    sys::if_up(ifname).map_err(|x| e("cannot bring it up", x))?;
    // A bind to an interface that was down leaves ENETDOWN pending on the socket; with the rx
    // ring nothing reads it, and the first send would fail with it.
    let _ = sys::take_sock_error(fd.as_fd());
    Ok(Sock {
        ring: Some(ring),
        fd,
        ifindex,
    })
}

/// The interface a packet socket is bound to, from the kernel's own table of packet sockets
/// (`/proc/self/net/packet`: the socket's inode and its `Iface` column); None if `fd` is not a
/// packet socket of this network namespace.
fn packet_socket_ifindex(fd: &OwnedFd) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::File::from(fd.try_clone().ok()?)
        .metadata()
        .ok()?
        .ino()
        .to_string();
    let table = std::fs::read_to_string("/proc/self/net/packet").ok()?;
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next()?.split_whitespace().collect();
    let col = |name: &str| head.iter().position(|h| *h == name);
    let (iface, inode) = (col("Iface")?, col("Inode")?);
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.get(inode) == Some(&ino.as_str()))
        .and_then(|w| w.get(iface)?.parse().ok())
}

fn numa_of(ifname: &str) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/device/numa_node")).ok()?;
    s.trim().parse::<usize>().ok()
}

/// Puts back the VLAN tag the kernel stripped (from auxdata).
fn restore_vlan(p: &mut Packet, vlan: Option<(u16, u16)>) -> bool {
    let Some((tpid, tci)) = vlan else { return true };
    if p.len() < 12 {
        return false;
    }
    match p.insert_at(12, 4) {
        Some(gap) => {
            gap[..2].copy_from_slice(&tpid.to_be_bytes());
            gap[2..].copy_from_slice(&tci.to_be_bytes());
            true
        }
        None => false,
    }
}

impl AfPacketPort {
    /// Opens interface `ifname`: fails with a one-line reason if it does not exist, its MTU is
    /// too large, or the kernel refuses the socket, an option or the bind.
    pub fn open(ifname: &str) -> Result<Arc<AfPacketPort>, PortError> {
        AfPacketPort::open_opts(ifname, true)
    }

    /// [`AfPacketPort::open`] with offloads on or off (see the module doc).
    pub fn open_opts(ifname: &str, offloads: bool) -> Result<Arc<AfPacketPort>, PortError> {
        let sock = open(ifname)?;
        Ok(AfPacketPort::with_sock(ifname, offloads, sock))
    }

    /// Takes over packet socket `fd`, handed over by the vireod this one replaces (`vireoctl
    /// upgrade`): it must be a packet socket bound to `ifname`. Its options, its promiscuous
    /// membership, its receive ring and the frames waiting in it (or, from a vireod without a
    /// ring, queued on the socket) come along, so the port sees no gap.
    pub fn adopt(
        ifname: &str,
        offloads: bool,
        fd: OwnedFd,
    ) -> Result<Arc<AfPacketPort>, PortError> {
        let want = sys::if_index(ifname)
            .map_err(|_| PortError(format!("no network interface named {ifname}")))?;
        let bound = packet_socket_ifindex(&fd).ok_or_else(|| {
            PortError(format!(
                "the handed-over socket of {ifname} is not a packet socket of this namespace"
            ))
        })?;
        if bound != want {
            return Err(PortError(format!(
                "the handed-over packet socket is bound to ifindex {bound}, not {ifname} ({want})"
            )));
        }
        let had_ring = ring::has_ring(fd.as_fd());
        let sock = Sock {
            ring: None,
            fd,
            ifindex: want,
        };
        let port = AfPacketPort::with_sock(ifname, offloads, sock);
        if !had_ring {
            // Setting up a ring discards what waits on the socket's queue: take it first.
            port.read_queue();
        }
        let mut slot = port.sock.write().unwrap_or_else(|e| e.into_inner());
        let sock = slot
            .as_mut()
            .and_then(Arc::get_mut)
            .expect("the port is not shared yet");
        let (ring, _) = RxRing::attach(sock.fd.as_fd()).map_err(|x| {
            PortError(format!(
                "{ifname}: cannot set up the rx ring on the handed-over socket: {x}"
            ))
        })?;
        sock.ring = Some(ring);
        drop(slot);
        Ok(port)
    }

    /// Stops (or resumes) reading the socket: at an upgrade's switch-over the old vireod
    /// leaves what arrives queued in the kernel for the new one, which holds the same socket.
    pub fn hold_rx(&self, on: bool) {
        self.held.store(on, Relaxed);
    }

    /// A duplicate of the packet socket, to hand it to the next vireod.
    pub fn dup_fd(&self) -> Option<OwnedFd> {
        self.sock()?.fd.try_clone().ok()
    }

    fn with_sock(ifname: &str, offloads: bool, sock: Sock) -> Arc<AfPacketPort> {
        Arc::new(AfPacketPort {
            ifname: ifname.to_string(),
            offloads,
            sock: RwLock::new(Some(Arc::new(sock))),
            rx: Mutex::new(RxState {
                bufs: RxBufs::new(MAX_GSO_FRAME - MAX_FRAME),
                fill: Batch::new(),
                seg: Vec::with_capacity(MAX_FRAME),
                pending: VecDeque::with_capacity(64),
            }),
            up: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            held: AtomicBool::new(false),
            numa: numa_of(ifname),
            counters: PortCounters::default(),
            kc: KernelCounters::default(),
        })
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    fn sock(&self) -> Option<Arc<Sock>> {
        self.sock.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Closes the socket (the port stays, link down).
    pub fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        *self.sock.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Moves every frame waiting on the socket's queue to the rx state's pending packets
    /// (control thread, at adoption, before the ring exists).
    fn read_queue(&self) {
        let Some(sock) = self.sock() else { return };
        let mut st = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut pool = Pool::new(self.numa.unwrap_or(0), 0);
        while self.recv_queued(&mut st, &sock, MAX_BATCH, &mut pool) > 0 {}
    }

    /// Reads what the ring holds (up to `want` slots) and queues the packets on `st.pending`.
    fn rx_ring(&self, st: &mut RxState, sock: &Sock, want: usize, pool: &mut Pool) {
        let Some(ring) = &sock.ring else { return };
        let mut r = ring.reader();
        for _ in 0..want {
            let Some(slot) = r.next_slot() else { break };
            self.take_slot(st, sock, slot.bytes(), pool);
        }
    }

    /// Turns one ring slot into packets on `st.pending` (or a counted drop).
    fn take_slot(&self, st: &mut RxState, sock: &Sock, slot: &[u8], pool: &mut Pool) {
        let t = match kmeta::parse_tpacket2(slot, VNET_HDR_LEN) {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(ifname = %self.ifname, error = ?e, "bad rx ring slot");
                self.kc.bad_slots.fetch_add(1, Relaxed);
                self.counters.drop(DropReason::Malformed, 1);
                self.counters.rx_error(1);
                return;
            }
        };
        if t.status & kmeta::TP_STATUS_COPY != 0 {
            // Above a slot: the whole frame waits on the socket's queue.
            self.kc.ring_copies.fetch_add(1, Relaxed);
            if self.recv_queued(st, sock, 1, pool) == 0 {
                self.counters.drop(DropReason::TooBig, 1);
                self.counters.rx_error(1);
            }
            return;
        }
        if t.truncated() || t.len < 14 {
            let why = if t.len < 14 {
                DropReason::Malformed
            } else {
                DropReason::TooBig
            };
            self.counters.drop(why, 1);
            self.counters.rx_error(1);
            return;
        }
        let mut vnet = [0u8; VNET_HDR_LEN];
        if let Some(v) = t.vnet {
            vnet.copy_from_slice(&slot[v]);
        }
        let data = &slot[t.data.clone()];
        let mut p = pool.get_for(data.len());
        p.set_frame(data);
        self.deliver(st, &vnet, p, pool, t.vlan);
    }

    /// `recvmmsg` of up to `max` frames waiting on the socket's queue (frames above a ring
    /// slot, or queued before the ring); their packets go to `st.pending`. Returns how many
    /// frames were read.
    fn recv_queued(&self, st: &mut RxState, sock: &Sock, max: usize, pool: &mut Pool) -> usize {
        for _ in 0..max.min(MAX_BATCH) {
            let mut p = pool.get();
            p.reset_for_fill(MAX_FRAME);
            let _ = st.fill.push(p);
        }
        let n = st.fill.len();
        let got = {
            let mut frames: [&mut [u8]; MAX_BATCH] = Default::default();
            for (f, p) in frames.iter_mut().zip(st.fill.as_mut_slice()) {
                *f = p.data_mut();
            }
            sys::recv_batch(sock.fd.as_fd(), &mut frames[..n], &mut st.bufs)
        };
        let got = match got {
            Ok(n) => n,
            Err(e) => {
                // ENETDOWN is reported once after a bind to an interface that was down, or
                // while it goes away (housekeeping notices and re-opens); anything else is
                // counted.
                if e.raw_os_error() != Some(libc::ENETDOWN) {
                    self.counters.rx_error(1);
                }
                0
            }
        };
        let mut taken: [Option<Packet>; MAX_BATCH] = Default::default();
        for (i, p) in st.fill.drain().enumerate() {
            if i < got {
                taken[i] = Some(p);
            } else {
                pool.put(p);
            }
        }
        for (i, p) in taken.iter_mut().enumerate().take(got) {
            if let Some(p) = p.take() {
                self.take_msg(st, i, p, pool);
            }
        }
        got
    }

    /// Turns message `i` of the last `recvmmsg` into packets (`p` holds its first bytes, the
    /// rest is in the spill area).
    fn take_msg(&self, st: &mut RxState, i: usize, mut p: Packet, pool: &mut Pool) {
        let info = st.bufs.info[i];
        let aux = kmeta::parse_auxdata(&st.bufs.cmsg[i][..info.cmsg_len]);
        let vlan = aux.and_then(|a| a.vlan);
        if info.truncated || info.len > packet::MAX_LARGE_FRAME || info.len < 14 {
            let why = if info.len < 14 {
                DropReason::Malformed
            } else {
                DropReason::TooBig
            };
            self.counters.drop(why, 1);
            self.counters.rx_error(1);
            pool.put(p);
            return;
        }
        if info.len > MAX_FRAME {
            // Its tail is in the spill area: gather it into a large buffer.
            let mut q = pool.get_large();
            let head = p.reset_for_fill(MAX_FRAME);
            let dst = q.reset_for_fill(info.len);
            dst[..MAX_FRAME].copy_from_slice(head);
            let off = i * st.bufs.spill_each;
            dst[MAX_FRAME..].copy_from_slice(&st.bufs.spill[off..off + info.len - MAX_FRAME]);
            pool.put(p);
            p = q;
        } else {
            p.truncate(info.len);
        }
        let vnet = st.bufs.vnet[i];
        self.deliver(st, &vnet, p, pool, vlan);
    }

    /// Takes one whole received frame `p` (a large buffer above [`MAX_FRAME`]) with its
    /// virtio-net header and stripped VLAN tag: checks the header, keeps or finishes its
    /// offload (see the module doc), puts the tag back and queues the result on `st.pending`.
    fn deliver(
        &self,
        st: &mut RxState,
        vnet: &[u8; VNET_HDR_LEN],
        p: Packet,
        pool: &mut Pool,
        vlan: Option<(u16, u16)>,
    ) {
        if self.offloads {
            return self.deliver_offloaded(st, vnet, p, pool, vlan);
        }
        let mut p = p;
        let len = p.len();
        let vnet = match VnetHdr::parse(vnet).and_then(|h| {
            h.check(len)?;
            Ok(h)
        }) {
            Ok(h) => h,
            Err(_) => {
                self.kc.bad_vnet.fetch_add(1, Relaxed);
                self.counters.drop(DropReason::Malformed, 1);
                self.counters.rx_error(1);
                pool.put(p);
                return;
            }
        };
        if vnet.is_gso() || len > MAX_FRAME {
            // Large or GSO frame: cut it into MSS-sized frames.
            if !vnet.is_gso() {
                self.counters.drop(DropReason::TooBig, 1);
                pool.put(p);
                return;
            }
            self.kc.gso_frames.fetch_add(1, Relaxed);
            let (seg, pending) = (&mut st.seg, &mut st.pending);
            let mut segs = 0u64;
            let mut bad = 0u64;
            let r = wire::offload::segment_tcp(
                p.data(),
                usize::from(vnet.gso_size),
                MAX_FRAME - 4,
                seg,
                |s| {
                    let mut q = pool.get();
                    q.set_frame(s);
                    if restore_vlan(&mut q, vlan) {
                        pending.push_back(q);
                        segs += 1;
                    } else {
                        pool.put(q);
                        bad += 1;
                    }
                },
            );
            pool.put(p);
            self.kc.gso_segments.fetch_add(segs, Relaxed);
            if r.is_err() || bad > 0 {
                self.counters.drop(DropReason::Malformed, 1);
                self.counters.rx_error(1);
            }
            return;
        }
        if vnet.needs_csum() {
            let (s, o) = (usize::from(vnet.csum_start), usize::from(vnet.csum_offset));
            if wire::offload::complete_partial(p.data_mut(), s, o).is_err() {
                self.counters.drop(DropReason::Malformed, 1);
                self.counters.rx_error(1);
                pool.put(p);
                return;
            }
            self.kc.csum_completed.fetch_add(1, Relaxed);
        }
        if !restore_vlan(&mut p, vlan) {
            self.counters.drop(DropReason::Malformed, 1);
            pool.put(p);
            return;
        }
        st.pending.push_back(p);
    }
}

impl AfPacketPort {
    /// [`AfPacketPort::deliver`] with offloads on: the header is checked against the whole
    /// frame and its offload kept in the metadata.
    fn deliver_offloaded(
        &self,
        st: &mut RxState,
        vnet: &[u8; VNET_HDR_LEN],
        mut p: Packet,
        pool: &mut Pool,
        vlan: Option<(u16, u16)>,
    ) {
        let h = packet::vnet::Hdr::parse(vnet);
        let o = if p.len() > MAX_FRAME && !h.is_gso() {
            Err(None)
        } else {
            h.validate(p.data(), packet::vnet::Offloads::ALL)
                .map_err(Some)
        };
        let o = match o {
            Ok(o) => o,
            Err(e) => {
                if e.is_some() {
                    self.kc.bad_vnet.fetch_add(1, Relaxed);
                }
                self.counters.drop(vnet_reason(e), 1);
                self.counters.rx_error(1);
                pool.put(p);
                return;
            }
        };
        if h.is_gso() {
            self.kc.gso_frames.fetch_add(1, Relaxed);
        }
        if !restore_vlan(&mut p, vlan) {
            self.counters.drop(DropReason::Malformed, 1);
            pool.put(p);
            return;
        }
        p.meta.set_offload(if vlan.is_some() {
            o.shifted(12, 4).unwrap_or(o)
        } else {
            o
        });
        st.pending.push_back(p);
    }
}

/// The drop reason of a refused header (`None`: a frame above a buffer without GSO).
pub(crate) fn vnet_reason(e: Option<packet::vnet::VnetError>) -> DropReason {
    use packet::vnet::VnetError as E;
    match e {
        None => DropReason::TooBig,
        Some(E::BadCsum) => DropReason::VnetBadCsum,
        Some(E::BadGsoType) => DropReason::VnetBadGsoType,
        Some(E::BadGso) => DropReason::VnetBadGso,
        Some(E::GsoTooBig) => DropReason::VnetGsoTooBig,
    }
}

impl Port for AfPacketPort {
    fn kind(&self) -> &'static str {
        "af-packet"
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn numa_node(&self) -> Option<usize> {
        self.numa
    }

    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        if self.held.load(Relaxed) {
            return 0;
        }
        let mut st = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        if st.pending.is_empty() {
            if let Some(sock) = self.sock() {
                let want = out.room().min(MAX_BATCH);
                self.rx_ring(st, &sock, want, pool);
            }
        }
        let mut n = 0;
        let mut bytes = 0;
        while !out.is_full() {
            let Some(p) = st.pending.pop_front() else {
                break;
            };
            bytes += p.len() as u64;
            let _ = out.push(p);
            n += 1;
        }
        if n > 0 {
            self.counters.rx(n as u64, bytes);
        }
        n
    }

    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let Some(sock) = self.sock() else {
            self.counters.drop(DropReason::LinkDown, pkts.len() as u64);
            return 0;
        };
        let mut frames: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        let n = pkts.len().min(MAX_BATCH);
        for (f, p) in frames.iter_mut().zip(pkts.as_slice()) {
            *f = p.data();
        }
        let mut vnets = [[0u8; VNET_HDR_LEN]; MAX_BATCH];
        if self.offloads {
            for (v, p) in vnets.iter_mut().zip(pkts.as_slice()) {
                if p.meta.has_offload() {
                    packet::vnet::write_hdr(p.meta.offload(), p.data(), v);
                }
            }
        }
        let (mut at, mut sent, mut bytes) = (0, 0, 0u64);
        while at < n {
            match sys::send_batch(sock.fd.as_fd(), &vnets[at..n], &frames[at..n]) {
                Ok(k) if k > 0 => {
                    bytes += frames[at..at + k]
                        .iter()
                        .map(|f| f.len() as u64)
                        .sum::<u64>();
                    sent += k;
                    at += k;
                }
                Ok(_) => break,
                Err(e) => {
                    // The frame at `at` was refused: skip it with its reason.
                    let why = match e.raw_os_error() {
                        Some(libc::EMSGSIZE) => DropReason::TooBig,
                        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV) => DropReason::LinkDown,
                        Some(libc::EAGAIN | libc::ENOBUFS) => {
                            self.counters.drop(DropReason::QueueFull, (n - at) as u64);
                            break;
                        }
                        _ => {
                            self.counters.tx_error(1);
                            DropReason::Malformed
                        }
                    };
                    self.counters.drop(why, 1);
                    at += 1;
                }
            }
        }
        if sent > 0 {
            self.counters.tx(sent as u64, bytes);
        }
        sent
    }

    fn tx_offloads(&self) -> packet::vnet::Offloads {
        if self.offloads {
            packet::vnet::Offloads::ALL
        } else {
            packet::vnet::Offloads::default()
        }
    }

    fn link(&self) -> Link {
        if self.up.load(Relaxed) && self.sock().is_some() {
            Link::Up
        } else {
            Link::Down
        }
    }

    fn preload_stats(&self, s: &PortStats) {
        self.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        self.counters.snapshot()
    }

    fn set_admin_up(&self, up: bool) -> Result<(), PortError> {
        crate::set_admin(&self.ifname, up)
    }

    fn maintain(&self) {
        if self.closed.load(Relaxed) {
            return;
        }
        if let Some(sock) = self.sock() {
            // The kernel leaves ENETDOWN pending when the interface goes down; no receive call
            // reports it (rx is the ring), so clear it here rather than fail a send with it
            // once the interface is back.
            let _ = sys::take_sock_error(sock.fd.as_fd());
            if let Ok((_, dropped)) = sys::packet_stats(sock.fd.as_fd()) {
                if dropped > 0 {
                    self.kc.kernel_drops.fetch_add(u64::from(dropped), Relaxed);
                    self.counters
                        .drop(DropReason::QueueFull, u64::from(dropped));
                }
            }
        }
        let now = sys::if_index(&self.ifname).ok();
        let cur = self.sock().map(|s| s.ifindex);
        if cur.is_some() && cur != now {
            *self.sock.write().unwrap_or_else(|e| e.into_inner()) = None;
            self.kc.link_lost.fetch_add(1, Relaxed);
            tracing::warn!(ifname = %self.ifname, "interface gone: port link down");
        }
        if self.sock().is_none() && now.is_some() {
            match open(&self.ifname) {
                Ok(s) => {
                    *self.sock.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(s));
                    self.kc.reopened.fetch_add(1, Relaxed);
                    tracing::info!(ifname = %self.ifname, "interface back: port re-opened");
                }
                Err(e) => tracing::warn!(ifname = %self.ifname, error = %e, "cannot re-open"),
            }
        }
        let running = sys::if_flags(&self.ifname)
            .map(|f| f & (libc::IFF_UP as u32) != 0)
            .unwrap_or(false);
        self.up.store(running, Relaxed);
    }

    fn status(&self) -> serde_json::Value {
        let mut v = self.kc.json();
        v["ifname"] = self.ifname.clone().into();
        v["ifindex"] = self.sock().map(|s| s.ifindex).into();
        v["numa_node"] = self.numa.into();
        v["rx_ring"] = serde_json::json!({
            "slots": ring::FRAMES,
            "slot_size": ring::FRAME_SIZE,
        });
        v
    }
}

#[cfg(test)]
#[path = "af_packet_tests.rs"]
mod tests;
