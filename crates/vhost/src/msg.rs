//! vhost-user wire format (QEMU docs/interop/vhost-user.rst): header, request codes, payloads,
//! feature bits, and a decoder that checks syntax (sizes, fd counts) before any meaning.
//!
//! Threads: used by a port's control thread (and by the test frontend); pure functions.
use std::os::fd::OwnedFd;

/// Header bytes: request u32, flags u32, size u32.
pub const HDR_SIZE: usize = 12;
/// Largest payload we accept (the largest request we handle is far smaller).
pub const MAX_PAYLOAD: usize = 4096;
/// Most fds one message may carry.
pub const MAX_FDS: usize = 8;
/// Protocol version in the flags' low two bits.
pub const VERSION: u32 = 0x1;
/// Flags: this is a reply.
pub const FLAG_REPLY: u32 = 0x4;
/// Flags: the frontend wants a REPLY_ACK.
pub const FLAG_NEED_REPLY: u32 = 0x8;
/// In SET_VRING_KICK/CALL/ERR: no fd follows (polling).
pub const VRING_NOFD_MASK: u64 = 0x100;
/// In SET_VRING_KICK/CALL/ERR: the queue index bits.
pub const VRING_IDX_MASK: u64 = 0xff;

/// Request codes, frontend → backend.
#[allow(missing_docs)]
pub mod req {
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_LOG_FD: u32 = 7;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const SEND_RARP: u32 = 19;
    pub const NET_SET_MTU: u32 = 20;
    pub const GET_CONFIG: u32 = 24;
    pub const RESET_DEVICE: u32 = 34;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
}

/// Virtio and vhost-user feature bits.
#[allow(missing_docs)]
pub mod feat {
    pub const VIRTIO_NET_F_CSUM: u32 = 0;
    pub const VIRTIO_NET_F_GUEST_CSUM: u32 = 1;
    pub const VIRTIO_NET_F_MAC: u32 = 5;
    pub const VIRTIO_NET_F_GUEST_TSO4: u32 = 7;
    pub const VIRTIO_NET_F_GUEST_TSO6: u32 = 8;
    pub const VIRTIO_NET_F_GUEST_ECN: u32 = 9;
    pub const VIRTIO_NET_F_GUEST_UFO: u32 = 10;
    pub const VIRTIO_NET_F_HOST_TSO4: u32 = 11;
    pub const VIRTIO_NET_F_HOST_TSO6: u32 = 12;
    pub const VIRTIO_NET_F_HOST_ECN: u32 = 13;
    pub const VIRTIO_NET_F_HOST_UFO: u32 = 14;
    pub const VIRTIO_NET_F_MRG_RXBUF: u32 = 15;
    pub const VIRTIO_NET_F_STATUS: u32 = 16;
    pub const VIRTIO_NET_F_CTRL_VQ: u32 = 17;
    pub const VIRTIO_NET_F_MQ: u32 = 22;
    pub const VIRTIO_RING_F_INDIRECT_DESC: u32 = 28;
    pub const VIRTIO_RING_F_EVENT_IDX: u32 = 29;
    pub const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;
    pub const VIRTIO_F_VERSION_1: u32 = 32;
    pub const VIRTIO_F_RING_PACKED: u32 = 34;
    pub const VIRTIO_F_IN_ORDER: u32 = 35;

    pub const PROTOCOL_F_MQ: u32 = 0;
    pub const PROTOCOL_F_REPLY_ACK: u32 = 3;

    /// Names of the virtio feature bits we may report.
    pub const NAMES: &[(u32, &str)] = &[
        (VIRTIO_NET_F_CSUM, "csum"),
        (VIRTIO_NET_F_GUEST_CSUM, "guest_csum"),
        (VIRTIO_NET_F_MAC, "mac"),
        (VIRTIO_NET_F_GUEST_TSO4, "guest_tso4"),
        (VIRTIO_NET_F_GUEST_TSO6, "guest_tso6"),
        (VIRTIO_NET_F_GUEST_ECN, "guest_ecn"),
        (VIRTIO_NET_F_GUEST_UFO, "guest_ufo"),
        (VIRTIO_NET_F_HOST_TSO4, "host_tso4"),
        (VIRTIO_NET_F_HOST_TSO6, "host_tso6"),
        (VIRTIO_NET_F_HOST_ECN, "host_ecn"),
        (VIRTIO_NET_F_HOST_UFO, "host_ufo"),
        (VIRTIO_NET_F_MRG_RXBUF, "mrg_rxbuf"),
        (VIRTIO_NET_F_STATUS, "status"),
        (VIRTIO_NET_F_CTRL_VQ, "ctrl_vq"),
        (VIRTIO_NET_F_MQ, "mq"),
        (VIRTIO_RING_F_INDIRECT_DESC, "indirect_desc"),
        (VIRTIO_RING_F_EVENT_IDX, "event_idx"),
        (VHOST_USER_F_PROTOCOL_FEATURES, "protocol_features"),
        (VIRTIO_F_VERSION_1, "version_1"),
        (VIRTIO_F_RING_PACKED, "ring_packed"),
        (VIRTIO_F_IN_ORDER, "in_order"),
    ];

    /// Names of the vhost-user protocol feature bits we may report.
    pub const PROTOCOL_NAMES: &[(u32, &str)] =
        &[(PROTOCOL_F_MQ, "mq"), (PROTOCOL_F_REPLY_ACK, "reply_ack")];

    /// Names of the set bits of `features` (unknown bits as `bitN`).
    pub fn names(features: u64) -> Vec<String> {
        names_in(NAMES, features)
    }

    /// Names of the set bits of protocol `features`.
    pub fn protocol_names(features: u64) -> Vec<String> {
        names_in(PROTOCOL_NAMES, features)
    }

    fn names_in(table: &[(u32, &str)], features: u64) -> Vec<String> {
        (0..64)
            .filter(|b| features & (1u64 << b) != 0)
            .map(|b| {
                table
                    .iter()
                    .find(|(n, _)| *n == b)
                    .map_or_else(|| format!("bit{b}"), |(_, s)| (*s).to_string())
            })
            .collect()
    }
}

/// A message header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Request code.
    pub request: u32,
    /// Version and flags.
    pub flags: u32,
    /// Payload size in bytes.
    pub size: u32,
}

/// Why a message was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsgError {
    /// Header flags carry a version other than 1.
    BadVersion(u32),
    /// Payload larger than [`MAX_PAYLOAD`] (the stream cannot be resynchronized).
    TooLarge(u32),
    /// Payload size does not fit the request.
    BadSize {
        /// Request code.
        request: u32,
        /// Size received.
        size: u32,
    },
    /// Wrong number of fds for the request.
    BadFds {
        /// Request code.
        request: u32,
        /// Fds received.
        fds: usize,
    },
    /// Request code we do not handle.
    Unknown(u32),
    /// Queue index beyond the configured queues.
    BadQueue(u32),
    /// A value is invalid (ring size, region table, feature bits, ...).
    Invalid(&'static str),
    /// A request arrived in a state where it cannot apply.
    BadState(&'static str),
}

impl std::fmt::Display for MsgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MsgError::BadVersion(v) => write!(f, "bad version in flags {v:#x}"),
            MsgError::TooLarge(n) => write!(f, "payload of {n} bytes too large"),
            MsgError::BadSize { request, size } => {
                write!(f, "request {request}: bad payload size {size}")
            }
            MsgError::BadFds { request, fds } => write!(f, "request {request}: bad fd count {fds}"),
            MsgError::Unknown(r) => write!(f, "unknown request {r}"),
            MsgError::BadQueue(q) => write!(f, "bad queue index {q}"),
            MsgError::Invalid(w) => write!(f, "invalid {w}"),
            MsgError::BadState(w) => write!(f, "bad state: {w}"),
        }
    }
}

impl std::error::Error for MsgError {}

impl Header {
    /// Decodes and checks a header (version, size bound).
    pub fn decode(b: &[u8; HDR_SIZE]) -> Result<Header, MsgError> {
        let h = Header {
            request: u32_at(b, 0),
            flags: u32_at(b, 4),
            size: u32_at(b, 8),
        };
        if h.flags & 0x3 != VERSION {
            return Err(MsgError::BadVersion(h.flags));
        }
        if h.size as usize > MAX_PAYLOAD {
            return Err(MsgError::TooLarge(h.size));
        }
        Ok(h)
    }

    /// Encodes.
    pub fn encode(&self) -> [u8; HDR_SIZE] {
        let mut b = [0u8; HDR_SIZE];
        b[..4].copy_from_slice(&self.request.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..].copy_from_slice(&self.size.to_le_bytes());
        b
    }
}

/// One received message: header, payload and fds.
#[derive(Debug)]
pub struct Msg {
    /// Header.
    pub hdr: Header,
    /// Payload (`hdr.size` bytes).
    pub payload: Vec<u8>,
    /// Fds received with it (closed when the message is dropped unless taken).
    pub fds: Vec<OwnedFd>,
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// `VhostUserVringState`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VringState {
    /// Queue index.
    pub index: u32,
    /// Value (size, base, enable flag).
    pub num: u32,
}

/// `VhostUserVringAddr` (frontend user-virtual addresses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VringAddr {
    /// Queue index.
    pub index: u32,
    /// Flags (bit 0: logging).
    pub flags: u32,
    /// Descriptor table.
    pub desc: u64,
    /// Used ring.
    pub used: u64,
    /// Avail ring.
    pub avail: u64,
    /// Log address.
    pub log: u64,
}

/// Payload sizes by shape.
pub const U64_SIZE: usize = 8;
/// `VhostUserVringState` size.
pub const STATE_SIZE: usize = 8;
/// `VhostUserVringAddr` size.
pub const ADDR_SIZE: usize = 40;
/// `VhostUserMemoryRegion` size.
pub const REGION_SIZE: usize = 32;
/// `VhostUserMemory` header size (nregions + padding).
pub const MEM_HDR_SIZE: usize = 8;

impl Msg {
    /// The payload as a u64 (caller checked the size).
    pub fn as_u64(&self) -> u64 {
        u64_at(&self.payload, 0)
    }

    /// The payload as a vring state.
    pub fn as_state(&self) -> VringState {
        VringState {
            index: u32_at(&self.payload, 0),
            num: u32_at(&self.payload, 4),
        }
    }

    /// The payload as vring addresses.
    pub fn as_addr(&self) -> VringAddr {
        let p = &self.payload;
        VringAddr {
            index: u32_at(p, 0),
            flags: u32_at(p, 4),
            desc: u64_at(p, 8),
            used: u64_at(p, 16),
            avail: u64_at(p, 24),
            log: u64_at(p, 32),
        }
    }

    /// The memory table: checks the region count against the size and returns the regions.
    pub fn as_mem(&self) -> Result<Vec<guestmem::RegionSpec>, MsgError> {
        let p = &self.payload;
        let n = u32_at(p, 0) as usize;
        if n == 0 || n > guestmem::MAX_REGIONS || p.len() < MEM_HDR_SIZE + n * REGION_SIZE {
            return Err(MsgError::Invalid("region count"));
        }
        Ok((0..n)
            .map(|i| {
                let o = MEM_HDR_SIZE + i * REGION_SIZE;
                guestmem::RegionSpec {
                    guest_phys_addr: u64_at(p, o),
                    memory_size: u64_at(p, o + 8),
                    userspace_addr: u64_at(p, o + 16),
                    mmap_offset: u64_at(p, o + 24),
                }
            })
            .collect())
    }
}

/// Encodes a message (for replies and the test frontend).
pub fn encode(request: u32, flags: u32, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        request,
        flags: flags | VERSION,
        size: payload.len() as u32,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(payload);
    v
}

/// Encodes a vring state payload.
pub fn state_bytes(index: u32, num: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&index.to_le_bytes());
    b[4..].copy_from_slice(&num.to_le_bytes());
    b
}

/// Encodes a vring address payload.
pub fn addr_bytes(a: &VringAddr) -> [u8; ADDR_SIZE] {
    let mut b = [0u8; ADDR_SIZE];
    b[..4].copy_from_slice(&a.index.to_le_bytes());
    b[4..8].copy_from_slice(&a.flags.to_le_bytes());
    b[8..16].copy_from_slice(&a.desc.to_le_bytes());
    b[16..24].copy_from_slice(&a.used.to_le_bytes());
    b[24..32].copy_from_slice(&a.avail.to_le_bytes());
    b[32..40].copy_from_slice(&a.log.to_le_bytes());
    b
}

/// Encodes a memory table payload.
pub fn mem_bytes(regions: &[guestmem::RegionSpec]) -> Vec<u8> {
    let mut v = (regions.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(&[0u8; 4]);
    for r in regions {
        for x in [
            r.guest_phys_addr,
            r.memory_size,
            r.userspace_addr,
            r.mmap_offset,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }
    v
}
