//! A minimal vhost-user frontend (the VM side of the socket) for tests: sends raw or
//! well-formed messages with fds and reads replies. Not used by the switch itself.
//!
//! Threads: the test's own.
use crate::msg::{encode, Header, FLAG_NEED_REPLY, HDR_SIZE, MAX_PAYLOAD};
use crate::sock::send_msg;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A connected test frontend.
pub struct Frontend {
    sock: UnixStream,
}

impl Frontend {
    /// Connects to a backend listening on `path`; replies time out after 5 s.
    pub fn connect(path: &Path) -> io::Result<Frontend> {
        Frontend::from_stream(UnixStream::connect(path)?)
    }

    /// Wraps an accepted or connected stream.
    pub fn from_stream(sock: UnixStream) -> io::Result<Frontend> {
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Frontend { sock })
    }

    /// The socket.
    pub fn stream(&self) -> &UnixStream {
        &self.sock
    }

    /// Sends bytes as they are, with fds.
    pub fn send_raw(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        send_msg(&self.sock, bytes, fds)
    }

    /// Sends a request.
    pub fn send(&self, req: u32, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_raw(&encode(req, 0, payload), fds)
    }

    /// Reads one reply.
    pub fn recv_reply(&self) -> io::Result<(Header, Vec<u8>)> {
        let mut h = [0u8; HDR_SIZE];
        (&self.sock).read_exact(&mut h)?;
        let hdr = Header::decode(&h).map_err(|e| io::Error::other(e.to_string()))?;
        let mut p = vec![0u8; (hdr.size as usize).min(MAX_PAYLOAD)];
        (&self.sock).read_exact(&mut p)?;
        Ok((hdr, p))
    }

    /// Sends a request that has a u64 reply and returns it.
    pub fn get_u64(&self, req: u32, payload: &[u8]) -> io::Result<u64> {
        self.send(req, payload, &[])?;
        let (_, p) = self.recv_reply()?;
        let b: [u8; 8] = p
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| io::Error::other("short reply"))?;
        Ok(u64::from_le_bytes(b))
    }

    /// Sends a request with NEED_REPLY and returns the REPLY_ACK value (0 = success).
    pub fn request_ack(&self, req: u32, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<u64> {
        self.send_raw(&encode(req, FLAG_NEED_REPLY, payload), fds)?;
        let (_, p) = self.recv_reply()?;
        let b: [u8; 8] = p
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| io::Error::other("short reply"))?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A whole test guest: a frontend connection plus shared memory (a memfd) holding mock-driver
/// rings for each virtqueue, set up with the usual handshake.
pub struct MockGuest {
    /// The connection.
    pub fe: Frontend,
    /// Shared memory, as the guest maps it.
    pub mem: std::sync::Arc<guestmem::GuestMemory>,
    /// The memfd backing it.
    pub mem_fd: std::os::fd::OwnedFd,
    /// The region sent in SET_MEM_TABLE.
    pub region: guestmem::RegionSpec,
    /// Mock driver per virtqueue (2p = guest rx, 2p + 1 = guest tx).
    pub rings: Vec<virtq::mock::MockDriver>,
    /// Negotiated features.
    pub features: u64,
}

/// Frontend user-virtual base of the mock guest's memory (differs from its guest-physical
/// base so translation mistakes show).
pub const MOCK_UVA: u64 = 0x7f00_0000_0000;

impl MockGuest {
    /// Connects to `path` and sets up `pairs` split queue pairs of `size` entries, acking
    /// `features & offered` (never `VIRTIO_F_RING_PACKED`).
    pub fn connect(path: &Path, pairs: usize, size: u16, features: u64) -> io::Result<MockGuest> {
        Self::with_frontend(Frontend::connect(path)?, pairs, size, features)
    }

    /// As [`MockGuest::connect`] over an existing connection.
    pub fn with_frontend(
        fe: Frontend,
        pairs: usize,
        size: u16,
        features: u64,
    ) -> io::Result<MockGuest> {
        use crate::msg::{feat, req};
        use std::os::fd::AsFd;
        let per = virtq::mock::MockDriver::memory_size(size);
        let total = per * (2 * pairs as u64);
        let mem_fd = rustix::fs::memfd_create("vireo-mock-guest", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(io::Error::from)?;
        rustix::fs::ftruncate(&mem_fd, total).map_err(io::Error::from)?;
        let region = guestmem::RegionSpec {
            guest_phys_addr: virtq::mock::MOCK_BASE,
            memory_size: total,
            userspace_addr: MOCK_UVA,
            mmap_offset: 0,
        };
        let mem = guestmem::GuestMemory::from_fds(&[region], &[mem_fd.as_fd()])
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mem = std::sync::Arc::new(mem);
        fe.send(req::SET_OWNER, &[], &[])?;
        let offered = fe.get_u64(req::GET_FEATURES, &[])?;
        // Its rings are split rings (the mock driver): never ack the packed layout.
        let features = offered & features & !(1u64 << feat::VIRTIO_F_RING_PACKED);
        let pf = 1u64 << feat::VHOST_USER_F_PROTOCOL_FEATURES;
        if offered & pf != 0 {
            let p = fe.get_u64(req::GET_PROTOCOL_FEATURES, &[])?;
            fe.send(req::SET_PROTOCOL_FEATURES, &p.to_le_bytes(), &[])?;
        }
        ack(&fe, req::SET_FEATURES, &features.to_le_bytes(), &[])?;
        let mb = crate::msg::mem_bytes(&[region]);
        ack(&fe, req::SET_MEM_TABLE, &mb, &[mem_fd.as_fd()])?;
        let mut rings = Vec::new();
        for i in 0..2 * pairs {
            let base = virtq::mock::MOCK_BASE + per * i as u64;
            let d = virtq::mock::MockDriver::with_memory(
                std::sync::Arc::clone(&mem),
                base,
                size,
                0,
                12,
            );
            rings.push(d);
        }
        let g = MockGuest {
            fe,
            mem,
            mem_fd,
            region,
            rings,
            features,
        };
        for i in 0..2 * pairs {
            g.start_ring(i)?;
        }
        Ok(g)
    }

    /// Frontend user-virtual address of guest-physical `gpa`.
    pub fn uva(&self, gpa: u64) -> u64 {
        gpa - self.region.guest_phys_addr + self.region.userspace_addr
    }

    /// Sends NUM, BASE, ADDR, CALL (none), KICK (none: polling) and ENABLE for ring `i`.
    pub fn start_ring(&self, i: usize) -> io::Result<()> {
        use crate::msg::{req, state_bytes, VringAddr, VRING_NOFD_MASK};
        let a = self.rings[i].addrs();
        let idx = i as u32;
        ack(
            &self.fe,
            req::SET_VRING_NUM,
            &state_bytes(idx, u32::from(a.size)),
            &[],
        )?;
        ack(&self.fe, req::SET_VRING_BASE, &state_bytes(idx, 0), &[])?;
        let va = VringAddr {
            index: idx,
            flags: 0,
            desc: self.uva(a.desc),
            used: self.uva(a.used),
            avail: self.uva(a.avail),
            log: 0,
        };
        ack(
            &self.fe,
            req::SET_VRING_ADDR,
            &crate::msg::addr_bytes(&va),
            &[],
        )?;
        let nofd = (u64::from(idx) | VRING_NOFD_MASK).to_le_bytes();
        ack(&self.fe, req::SET_VRING_CALL, &nofd, &[])?;
        ack(&self.fe, req::SET_VRING_KICK, &nofd, &[])?;
        ack(&self.fe, req::SET_VRING_ENABLE, &state_bytes(idx, 1), &[])
    }
}

/// Sends with NEED_REPLY and fails unless the backend acks 0.
pub fn ack(fe: &Frontend, req: u32, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    match fe.request_ack(req, payload, fds)? {
        0 => Ok(()),
        n => Err(io::Error::other(format!("request {req} refused ({n})"))),
    }
}
