//! The vhost-user backend state machine: feature negotiation, memory table, vring setup, and
//! the ONE table mapping each request to its handler, payload shape, fd rule and quiescing.
//!
//! Threads: owned by a port's control thread. It hands running queues to the PMDs through
//! [`Device`] slots: a ring is installed when complete (memory, size, addresses, kick, enabled,
//! features) and removed (under the slot lock) before anything it depends on changes, so a PMD
//! never sees a half-configured ring or an unmapped memory table.
//!
//! Lost memory: the handlers here touch guest memory too (activating a ring reads and writes
//! it, a new table's first access can fault). [`Backend::memory_lost`] checks the current table
//! and the device's flag (raised by PMDs); the endpoint asks after every message and every poll
//! tick and closes the connection when it says so.
//!
//! Packed rings (`VIRTIO_F_RING_PACKED`): the three ring addresses are the descriptor table
//! and the driver and device event suppression areas; any size up to 32768; the ring base of
//! `SET/GET_VRING_BASE` carries the avail index in bits 0..15 with its wrap counter in bit 15,
//! and (as QEMU reads it) the used index and wrap counter in bits 16..31. This device returns
//! every buffer in the burst that took it, so at rest both halves are equal.
use crate::msg::{feat::*, req::*, *};
use crate::shared::{Device, Running};
use guestmem::GuestMemory;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use virtq::packed::{self, PackedQueue};
use virtq::ring::{avail_ring_size, desc_table_size, used_ring_size, valid_size};
use virtq::{NetFeatures, Queue, RingAddrs, VirtQueue};

pub mod handover;

/// Payload shape a request must carry (checked before the handler runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// No payload (some frontends send 8 bytes of zeroes: accepted and ignored).
    Empty,
    U64,
    State,
    Addr,
    Mem,
}

/// Fds a request must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fds {
    Zero,
    /// One, unless bit 8 of the u64 payload says "no fd".
    RingFlag,
    /// One per memory region.
    Regions,
}

/// What must be stopped while the handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quiesce {
    No,
    /// The ring named in the payload.
    Ring,
    /// Every ring.
    All,
}

/// A handler's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing (or a REPLY_ACK if asked).
    None,
    /// A u64 reply.
    U64(u64),
    /// A vring state reply.
    State(VringState),
}

type HandlerFn = fn(&mut Backend, &mut Msg, usize) -> Result<Reply, MsgError>;

struct Handler {
    req: u32,
    payload: Payload,
    fds: Fds,
    quiesce: Quiesce,
    run: HandlerFn,
}

const fn h(req: u32, payload: Payload, fds: Fds, quiesce: Quiesce, run: HandlerFn) -> Handler {
    Handler {
        req,
        payload,
        fds,
        quiesce,
        run,
    }
}

use Fds::*;
use Payload::*;
use Quiesce::*;

/// Every request we handle. Anything else is refused as unknown.
const HANDLERS: &[Handler] = &[
    h(GET_FEATURES, Empty, Zero, No, Backend::get_features),
    h(SET_FEATURES, U64, Zero, All, Backend::set_features),
    h(SET_OWNER, Empty, Zero, No, Backend::set_owner),
    h(RESET_OWNER, Empty, Zero, All, Backend::reset_owner),
    h(SET_MEM_TABLE, Mem, Regions, All, Backend::set_mem_table),
    h(SET_VRING_NUM, State, Zero, Ring, Backend::set_vring_num),
    h(SET_VRING_ADDR, Addr, Zero, Ring, Backend::set_vring_addr),
    h(SET_VRING_BASE, State, Zero, Ring, Backend::set_vring_base),
    h(GET_VRING_BASE, State, Zero, Ring, Backend::get_vring_base),
    h(SET_VRING_KICK, U64, RingFlag, Ring, Backend::set_vring_kick),
    h(SET_VRING_CALL, U64, RingFlag, Ring, Backend::set_vring_call),
    h(SET_VRING_ERR, U64, RingFlag, No, Backend::set_vring_err),
    h(
        GET_PROTOCOL_FEATURES,
        Empty,
        Zero,
        No,
        Backend::get_protocol_features,
    ),
    h(
        SET_PROTOCOL_FEATURES,
        U64,
        Zero,
        No,
        Backend::set_protocol_features,
    ),
    h(GET_QUEUE_NUM, Empty, Zero, No, Backend::get_queue_num),
    h(
        SET_VRING_ENABLE,
        State,
        Zero,
        Ring,
        Backend::set_vring_enable,
    ),
    h(RESET_DEVICE, Empty, Zero, All, Backend::reset_owner),
];

/// The offload features offered (unless the port turns offloads off): partial checksums and
/// TCP segmentation both ways. Never ECN or UFO: Vireo's software segmentation does not
/// handle them, and a receiver must be able to take whatever it negotiated.
pub const OFFLOAD_FEATURES: u64 = (1 << VIRTIO_NET_F_CSUM)
    | (1 << VIRTIO_NET_F_GUEST_CSUM)
    | (1 << VIRTIO_NET_F_HOST_TSO4)
    | (1 << VIRTIO_NET_F_HOST_TSO6)
    | (1 << VIRTIO_NET_F_GUEST_TSO4)
    | (1 << VIRTIO_NET_F_GUEST_TSO6);

/// What a driver that negotiated `features` may ask of us on its tx queues. TSO without
/// `CSUM` is not honoured (virtio 1.1 §5.1.3.1: TSO requires it).
pub fn host_offloads(features: u64) -> packet::vnet::Offloads {
    let has = |b: u32| features & (1u64 << b) != 0;
    let csum = has(VIRTIO_NET_F_CSUM);
    packet::vnet::Offloads {
        csum,
        tso4: csum && has(VIRTIO_NET_F_HOST_TSO4),
        tso6: csum && has(VIRTIO_NET_F_HOST_TSO6),
    }
}

/// What a driver that negotiated `features` takes on its rx queues.
pub fn guest_offloads(features: u64) -> packet::vnet::Offloads {
    let has = |b: u32| features & (1u64 << b) != 0;
    let csum = has(VIRTIO_NET_F_GUEST_CSUM);
    packet::vnet::Offloads {
        csum,
        tso4: csum && has(VIRTIO_NET_F_GUEST_TSO4),
        tso6: csum && has(VIRTIO_NET_F_GUEST_TSO6),
    }
}

/// Protocol features we offer.
pub const PROTOCOL_FEATURES: u64 = (1 << PROTOCOL_F_MQ) | (1 << PROTOCOL_F_REPLY_ACK);

/// Control-side state of one virtqueue.
#[derive(Debug, Default)]
struct Vring {
    num: u16,
    addr: Option<VringAddr>,
    /// Ring base as `SET_VRING_BASE` gave it or the stopped queue left it (split: the avail
    /// index; packed: index and wrap counter in bits 0..16).
    base: u16,
    started: bool,
    enabled: bool,
    running: bool,
    /// Activation failed; not retried until a message touches the ring again.
    failed: bool,
    kick: Option<OwnedFd>,
    call: Option<Arc<File>>,
    err: Option<OwnedFd>,
}

/// The backend of one vhost-user connection.
pub struct Backend {
    dev: Arc<Device>,
    offered: u64,
    acked: u64,
    features_set: bool,
    protocol: u64,
    owner: bool,
    mem: Option<Arc<GuestMemory>>,
    /// The fds of the current memory table (kept for a handover to a new vireod).
    mem_fds: Vec<OwnedFd>,
    vrings: Vec<Vring>,
}

impl Backend {
    /// A backend for `dev`, offering the virtio features it handles end to end.
    pub fn new(dev: Arc<Device>) -> Backend {
        let mut offered = (1u64 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_NET_F_MRG_RXBUF)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VIRTIO_F_IN_ORDER)
            | (1 << VIRTIO_F_RING_PACKED)
            | (1 << VHOST_USER_F_PROTOCOL_FEATURES);
        if dev.pairs() > 1 {
            offered |= 1 << VIRTIO_NET_F_MQ;
        }
        if dev.offloads_offered() {
            offered |= OFFLOAD_FEATURES;
        }
        let vrings = (0..dev.n_vrings()).map(|_| Vring::default()).collect();
        Backend {
            dev,
            offered,
            acked: 0,
            features_set: false,
            protocol: 0,
            owner: false,
            mem: None,
            mem_fds: Vec::new(),
            vrings,
        }
    }

    /// Virtio features offered.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Stops every ring and forgets the frontend's state (disconnect, reset).
    pub fn reset(&mut self) {
        self.stop_all();
        for v in &mut self.vrings {
            *v = Vring::default();
        }
        self.mem = None;
        self.mem_fds.clear();
        self.dev.set_numa_node(None);
        self.acked = 0;
        self.features_set = false;
        self.protocol = 0;
        self.owner = false;
        self.dev.set_features(0, 0);
    }

    /// The connection ends: everything is reset, and a lost-memory flag raised for it is
    /// cleared (every queue is stopped, so no PMD can raise it again for the old table).
    pub fn end_connection(&mut self) {
        self.reset();
        self.dev.clear_lost();
    }

    /// Why this connection's guest memory is gone, if it is: its table (current, or one a PMD
    /// was still using) faulted because the frontend's file shrank or vanished.
    pub fn memory_lost(&self) -> Option<String> {
        if let Some(m) = &self.mem {
            if m.poisoned() {
                self.dev.lose(m);
            }
        }
        if !self.dev.memory_lost() {
            return None;
        }
        Some(match self.dev.lost_region() {
            Some(r) => format!(
                "guest memory lost: region {} (guest-physical {:#x}, {} bytes) shrank or vanished \
                 under its mapping",
                r.index, r.guest_phys_addr, r.size
            ),
            None => "guest memory lost: a region shrank or vanished under its mapping".into(),
        })
    }

    /// Handles one message; returns the reply bytes to send, if any. Errors are counted.
    pub fn handle(&mut self, mut msg: Msg) -> Option<Vec<u8>> {
        let need_ack = msg.hdr.flags & FLAG_NEED_REPLY != 0
            && self.protocol & (1 << PROTOCOL_F_REPLY_ACK) != 0;
        let request = msg.hdr.request;
        let r = self.dispatch(&mut msg);
        if r.is_err() {
            self.dev
                .stats
                .protocol_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let payload = match r {
            Ok(Reply::U64(v)) => v.to_le_bytes().to_vec(),
            Ok(Reply::State(s)) => state_bytes(s.index, s.num).to_vec(),
            Ok(Reply::None) if need_ack => 0u64.to_le_bytes().to_vec(),
            Err(_) if need_ack => 1u64.to_le_bytes().to_vec(),
            _ => return None,
        };
        Some(encode(request, FLAG_REPLY, &payload))
    }

    /// Syntax (size, fds, index) first, then meaning.
    fn dispatch(&mut self, msg: &mut Msg) -> Result<Reply, MsgError> {
        let req = msg.hdr.request;
        let hd = HANDLERS
            .iter()
            .find(|h| h.req == req)
            .ok_or(MsgError::Unknown(req))?;
        check_payload(hd.payload, msg)?;
        check_fds(hd.fds, msg)?;
        let ring = self.ring_index(hd.payload, msg)?;
        match hd.quiesce {
            Quiesce::No => {}
            Quiesce::Ring => {
                self.stop(ring);
                self.vrings[ring].failed = false;
            }
            Quiesce::All => {
                self.stop_all();
                self.vrings.iter_mut().for_each(|v| v.failed = false);
            }
        }
        let r = (hd.run)(self, msg, ring);
        let started = self.reconcile();
        let r = r?;
        started?;
        Ok(r)
    }

    /// The queue index a message names (0 if none), checked against the configured queues.
    fn ring_index(&self, p: Payload, msg: &Msg) -> Result<usize, MsgError> {
        let idx = match p {
            Payload::State | Payload::Addr => msg.as_state().index as u64,
            Payload::U64
                if matches!(
                    msg.hdr.request,
                    SET_VRING_KICK | SET_VRING_CALL | SET_VRING_ERR
                ) =>
            {
                msg.as_u64() & VRING_IDX_MASK
            }
            _ => return Ok(0),
        };
        if idx >= self.vrings.len() as u64 {
            return Err(MsgError::BadQueue(idx as u32));
        }
        Ok(idx as usize)
    }

    fn stop(&mut self, i: usize) {
        let v = &mut self.vrings[i];
        if v.running {
            if let Some(r) = self.dev.take(i) {
                v.base = r.queue.last_avail();
            }
            v.running = false;
        }
    }

    fn stop_all(&mut self) {
        for i in 0..self.vrings.len() {
            self.stop(i);
        }
    }

    fn net_features(&self) -> NetFeatures {
        let has = |b: u32| self.acked & (1u64 << b) != 0;
        let mrg = has(VIRTIO_NET_F_MRG_RXBUF);
        NetFeatures {
            hdr_len: if has(VIRTIO_F_VERSION_1) || mrg {
                12
            } else {
                10
            },
            mrg_rxbuf: mrg,
            indirect: has(VIRTIO_RING_F_INDIRECT_DESC),
            event_idx: has(VIRTIO_RING_F_EVENT_IDX),
            host: host_offloads(self.acked),
            guest: guest_offloads(self.acked),
        }
    }

    fn packed(&self) -> bool {
        self.acked & (1u64 << VIRTIO_F_RING_PACKED) != 0
    }

    fn wants_running(&self, v: &Vring) -> bool {
        let enabled = v.enabled || self.acked & (1 << VHOST_USER_F_PROTOCOL_FEATURES) == 0;
        self.features_set
            && self.mem.is_some()
            && v.num != 0
            && v.addr.is_some()
            && v.started
            && enabled
    }

    /// Starts every ring that is complete and not running. Returns the first failure.
    fn reconcile(&mut self) -> Result<(), MsgError> {
        self.reconcile_where(&|_| true)
    }

    /// [`Backend::reconcile`] for the rings `which` selects.
    fn reconcile_where(&mut self, which: &dyn Fn(usize) -> bool) -> Result<(), MsgError> {
        let mut res = Ok(());
        for i in 0..self.vrings.len() {
            let v = &self.vrings[i];
            if v.running || v.failed || !which(i) || !self.wants_running(v) {
                continue;
            }
            match self.activate(i) {
                Ok(r) => {
                    self.dev.install(i, r);
                    self.vrings[i].running = true;
                }
                Err(e) => {
                    self.vrings[i].failed = true;
                    res = res.and(Err(e));
                }
            }
        }
        res
    }

    fn activate(&self, i: usize) -> Result<Running, MsgError> {
        let v = &self.vrings[i];
        let (Some(mem), Some(a)) = (self.mem.as_ref(), v.addr) else {
            return Err(MsgError::BadState("ring incomplete"));
        };
        let bad = MsgError::Invalid("ring address");
        if self.packed() {
            let addrs = RingAddrs {
                size: v.num,
                desc: mem
                    .uva_to_gpa(a.desc, 16 * u64::from(v.num))
                    .ok_or(bad.clone())?,
                avail: mem.uva_to_gpa(a.avail, 4).ok_or(bad.clone())?,
                used: mem.uva_to_gpa(a.used, 4).ok_or(bad.clone())?,
            };
            let queue =
                PackedQueue::new(Arc::clone(mem), addrs, self.net_features(), v.base, v.base)
                    .map_err(|_| bad)?;
            return Ok(Running {
                queue: VirtQueue::Packed(queue),
                call: v.call.clone(),
            });
        }
        let addrs = RingAddrs {
            size: v.num,
            desc: mem
                .uva_to_gpa(a.desc, desc_table_size(v.num))
                .ok_or(bad.clone())?,
            avail: mem
                .uva_to_gpa(a.avail, avail_ring_size(v.num))
                .ok_or(bad.clone())?,
            used: mem
                .uva_to_gpa(a.used, used_ring_size(v.num))
                .ok_or(bad.clone())?,
        };
        let mut queue = Queue::new(Arc::clone(mem), addrs, self.net_features(), v.base, v.base)
            .map_err(|_| bad)?;
        // A frontend that reconnects after the backend died (DPDK virtio-user with server=1
        // after a `kill -9` of the switch) sends base 0 although its ring has moved on: trust
        // the ring's used index over the base it sent.
        queue.resync_to_used_ring();
        Ok(Running {
            queue: VirtQueue::Split(queue),
            call: v.call.clone(),
        })
    }

    fn get_features(&mut self, _: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        Ok(Reply::U64(self.offered))
    }

    fn set_features(&mut self, m: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        let f = m.as_u64();
        if f & !self.offered != 0 {
            return Err(MsgError::Invalid("feature bits not offered"));
        }
        self.acked = f;
        self.features_set = true;
        self.dev.set_features(self.acked, self.protocol);
        Ok(Reply::None)
    }

    fn set_owner(&mut self, _: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        self.owner = true;
        Ok(Reply::None)
    }

    fn reset_owner(&mut self, _: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        let protocol = self.protocol;
        self.reset();
        // The protocol features stay negotiated for the connection.
        self.protocol = protocol;
        Ok(Reply::None)
    }

    fn set_mem_table(&mut self, m: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        let regions = m.as_mem()?;
        let fds: Vec<_> = m.fds.iter().map(|f| f.as_fd()).collect();
        let mem =
            GuestMemory::from_fds(&regions, &fds).map_err(|_| MsgError::Invalid("memory table"))?;
        // The old table goes when the last queue holding it was dropped (all stopped above).
        self.dev.set_numa_node(mem.numa_node());
        self.mem = Some(Arc::new(mem));
        self.mem_fds = std::mem::take(&mut m.fds);
        Ok(Reply::None)
    }

    fn set_vring_num(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        let n = m.as_state().num;
        let ok = if self.packed() {
            packed::valid_size(n)
        } else {
            valid_size(n)
        };
        if !ok {
            return Err(MsgError::Invalid("ring size"));
        }
        self.vrings[i].num = n as u16;
        Ok(Reply::None)
    }

    fn set_vring_addr(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        self.vrings[i].addr = Some(m.as_addr());
        Ok(Reply::None)
    }

    fn set_vring_base(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        let n = m.as_state().num;
        self.vrings[i].base = if self.packed() {
            // Bits 16..31 (the used half) equal the avail half at rest; ours is always at rest.
            n as u16
        } else {
            u16::try_from(n).map_err(|_| MsgError::Invalid("ring base"))?
        };
        Ok(Reply::None)
    }

    fn get_vring_base(&mut self, _: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        let packed = self.packed();
        let v = &mut self.vrings[i];
        v.started = false;
        v.kick = None;
        let num = if packed {
            // Avail and used halves: equal, every buffer taken was returned.
            u32::from(v.base) | u32::from(v.base) << 16
        } else {
            u32::from(v.base)
        };
        Ok(Reply::State(VringState {
            index: i as u32,
            num,
        }))
    }

    fn ring_fd(m: &mut Msg) -> Option<OwnedFd> {
        if m.as_u64() & VRING_NOFD_MASK != 0 {
            None
        } else {
            m.fds.pop()
        }
    }

    fn set_vring_kick(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        let v = &mut self.vrings[i];
        v.kick = Self::ring_fd(m);
        v.started = true;
        Ok(Reply::None)
    }

    fn set_vring_call(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        self.vrings[i].call = Self::ring_fd(m).map(|fd| Arc::new(File::from(fd)));
        Ok(Reply::None)
    }

    fn set_vring_err(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        self.vrings[i].err = Self::ring_fd(m);
        Ok(Reply::None)
    }

    fn get_protocol_features(&mut self, _: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        Ok(Reply::U64(PROTOCOL_FEATURES))
    }

    fn set_protocol_features(&mut self, m: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        let f = m.as_u64();
        if f & !PROTOCOL_FEATURES != 0 {
            return Err(MsgError::Invalid("protocol feature bits not offered"));
        }
        self.protocol = f;
        self.dev.set_features(self.acked, self.protocol);
        Ok(Reply::None)
    }

    fn get_queue_num(&mut self, _: &mut Msg, _: usize) -> Result<Reply, MsgError> {
        Ok(Reply::U64(self.dev.pairs() as u64))
    }

    fn set_vring_enable(&mut self, m: &mut Msg, i: usize) -> Result<Reply, MsgError> {
        self.vrings[i].enabled = match m.as_state().num {
            0 => false,
            1 => true,
            _ => return Err(MsgError::Invalid("enable flag")),
        };
        Ok(Reply::None)
    }
}

fn check_payload(p: Payload, msg: &Msg) -> Result<(), MsgError> {
    let size = msg.payload.len();
    let ok = match p {
        Payload::Empty => size == 0 || size == U64_SIZE,
        Payload::U64 => size == U64_SIZE,
        Payload::State => size == STATE_SIZE,
        Payload::Addr => size == ADDR_SIZE,
        Payload::Mem => {
            size >= MEM_HDR_SIZE && {
                let n = u32_at(&msg.payload, 0) as usize;
                (1..=guestmem::MAX_REGIONS).contains(&n)
                    && (size == MEM_HDR_SIZE + n * REGION_SIZE
                        || size == MEM_HDR_SIZE + guestmem::MAX_REGIONS * REGION_SIZE)
            }
        }
    };
    if ok {
        Ok(())
    } else {
        Err(MsgError::BadSize {
            request: msg.hdr.request,
            size: size as u32,
        })
    }
}

fn check_fds(f: Fds, msg: &Msg) -> Result<(), MsgError> {
    let want = match f {
        Fds::Zero => 0,
        Fds::RingFlag => usize::from(msg.as_u64() & VRING_NOFD_MASK == 0),
        Fds::Regions => u32_at(&msg.payload, 0) as usize,
    };
    if msg.fds.len() != want {
        return Err(MsgError::BadFds {
            request: msg.hdr.request,
            fds: msg.fds.len(),
        });
    }
    Ok(())
}
