//! A vhost-user frontend (the VM's side of the socket) for vireo-gen: it creates the guest
//! memory, negotiates features, hands the switch its rings and then drives them. Each
//! [`VhostPort`] is one virtio-net device with `pairs` rx/tx queue pairs.
//!
//! Threads: set up on vireo-gen's main thread; afterwards only its poll loop touches it.
pub mod ring;
pub mod shm;

use ring::{Ring, RingLayout, VIRTQ_DESC_F_WRITE};
use rustix::event::{eventfd, EventfdFlags};
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use shm::Shm;
use std::io::{self, IoSlice, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// vhost-user requests the frontend sends.
mod req {
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const SET_VRING_ENABLE: u32 = 18;
}

const F_MRG_RXBUF: u64 = 1 << 15;
const F_PROTOCOL_FEATURES: u64 = 1 << 30;
const F_VERSION_1: u64 = 1 << 32;
const PROTOCOL_F_MQ: u64 = 1;
/// Guest-physical address of the start of our memory.
pub const GPA_BASE: u64 = 0x4000_0000;
/// Bytes per rx buffer (header + the largest frame).
pub const RX_BUF: usize = 2048;

/// One rx/tx queue pair of a port.
pub struct QueuePair {
    /// Device-to-driver ring (even vring index).
    pub rx: Ring,
    /// Driver-to-device ring (odd vring index).
    pub tx: Ring,
    /// Free tx descriptor ids.
    pub tx_free: Vec<u16>,
    kick_rx: OwnedFd,
    kick_tx: OwnedFd,
    _calls: [OwnedFd; 2],
}

/// A connected, running virtio-net device seen from the driver side.
pub struct VhostPort {
    _sock: UnixStream,
    /// Guest memory holding every ring and buffer of this port.
    pub shm: Shm,
    /// Queue pairs.
    pub qps: Vec<QueuePair>,
    /// virtio-net header length (12 with VERSION_1 or MRG_RXBUF, else 10).
    pub hdr_len: usize,
    /// Features agreed.
    pub features: u64,
}

/// Where a port's socket comes from.
pub enum Endpoint {
    /// Connect to a switch listening here.
    Connect(std::path::PathBuf),
    /// Accept the switch's connection on this listener.
    Listen(UnixListener),
}

impl Endpoint {
    /// For `path`: binds a listener now (so the switch can connect to every port at once)
    /// when `server`, else remembers the path.
    pub fn new(path: &Path, server: bool) -> io::Result<Endpoint> {
        if !server {
            return Ok(Endpoint::Connect(path.to_path_buf()));
        }
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("bind {path:?}: {e}")))?;
        l.set_nonblocking(true)?;
        Ok(Endpoint::Listen(l))
    }

    fn stream(self, timeout: Duration) -> io::Result<UnixStream> {
        let deadline = Instant::now() + timeout;
        loop {
            let r = match &self {
                Endpoint::Listen(l) => l.accept().map(|(s, _)| s),
                Endpoint::Connect(p) => UnixStream::connect(p),
            };
            match r {
                Ok(s) => {
                    s.set_nonblocking(false)?;
                    return Ok(s);
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("no vhost-user peer within {timeout:?}: {e}"),
                    ))
                }
            }
        }
    }
}

fn send(sock: &UnixStream, req: u32, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(12 + payload.len());
    msg.extend_from_slice(&req.to_le_bytes());
    msg.extend_from_slice(&1u32.to_le_bytes()); // version 1, no flags
    msg.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    msg.extend_from_slice(payload);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many fds"));
    }
    let n = sendmsg(sock, &[IoSlice::new(&msg)], &mut cmsg, SendFlags::NOSIGNAL)?;
    if n != msg.len() {
        return Err(io::Error::other("short vhost-user send"));
    }
    Ok(())
}

fn get_u64(sock: &UnixStream, req: u32) -> io::Result<u64> {
    send(sock, req, &[], &[])?;
    let mut h = [0u8; 12];
    (&*sock).read_exact(&mut h)?;
    let size = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut p = vec![0u8; size.min(4096)];
    (&*sock).read_exact(&mut p)?;
    let got = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    if got != req || size < 8 {
        return Err(io::Error::other(format!(
            "bad reply to request {req}: {got}/{size}"
        )));
    }
    Ok(u64::from_le_bytes(
        p[..8].try_into().map_err(io::Error::other)?,
    ))
}

fn state(index: u32, num: u32) -> Vec<u8> {
    [index.to_le_bytes(), num.to_le_bytes()].concat()
}

/// Port settings.
#[derive(Clone, Copy, Debug)]
pub struct PortConfig {
    /// Queue pairs.
    pub pairs: u16,
    /// Entries per tx ring.
    pub ring_size: u16,
    /// Entries of each rx ring (deeper than tx: it absorbs the generator's own stalls).
    pub rx_ring_size: u16,
    /// How long to wait for the peer.
    pub timeout: Duration,
    /// Negotiate VIRTIO_NET_F_MRG_RXBUF when the switch offers it.
    pub mrg_rxbuf: bool,
}

impl VhostPort {
    /// Connects (or accepts), negotiates and starts every queue.
    pub fn open(ep: Endpoint, cfg: PortConfig) -> io::Result<VhostPort> {
        let sock = ep.stream(cfg.timeout)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        let offered = get_u64(&sock, req::GET_FEATURES)?;
        if offered & F_PROTOCOL_FEATURES != 0 {
            let pf = get_u64(&sock, req::GET_PROTOCOL_FEATURES)?;
            send(
                &sock,
                req::SET_PROTOCOL_FEATURES,
                &(pf & PROTOCOL_F_MQ).to_le_bytes(),
                &[],
            )?;
        }
        send(&sock, req::SET_OWNER, &[], &[])?;
        // Like a Linux guest and testpmd's virtio-user: mergeable rx buffers when offered
        // (our 2 KiB buffers always hold a whole frame, so num_buffers stays 1).
        let mrg = if cfg.mrg_rxbuf { F_MRG_RXBUF } else { 0 };
        let features = offered & (F_VERSION_1 | F_PROTOCOL_FEATURES | mrg);
        send(&sock, req::SET_FEATURES, &features.to_le_bytes(), &[])?;
        let hdr_len = if features & (F_VERSION_1 | F_MRG_RXBUF) != 0 {
            12
        } else {
            10
        };
        let mut layouts = Vec::new();
        let mut at = 0;
        for i in 0..2 * cfg.pairs {
            let size = if i % 2 == 0 {
                cfg.rx_ring_size
            } else {
                cfg.ring_size
            };
            let (l, end) = RingLayout::at(at, size, RX_BUF);
            layouts.push(l);
            at = end;
        }
        let shm = Shm::new("vireo-gen", at)?;
        let mut mt = Vec::new();
        mt.extend_from_slice(&1u32.to_le_bytes());
        mt.extend_from_slice(&0u32.to_le_bytes());
        for v in [GPA_BASE, shm.len() as u64, shm.uva(), 0] {
            mt.extend_from_slice(&v.to_le_bytes());
        }
        send(&sock, req::SET_MEM_TABLE, &mt, &[shm.fd()])?;
        let mut qps = Vec::new();
        for p in 0..cfg.pairs {
            let (lr, lt) = (layouts[2 * p as usize], layouts[2 * p as usize + 1]);
            qps.push(Self::start_pair(&sock, &shm, p, lr, lt, hdr_len)?);
        }
        Ok(VhostPort {
            _sock: sock,
            shm,
            qps,
            hdr_len,
            features,
        })
    }

    fn start_pair(
        sock: &UnixStream,
        shm: &Shm,
        pair: u16,
        lr: RingLayout,
        lt: RingLayout,
        hdr_len: usize,
    ) -> io::Result<QueuePair> {
        let mut rx = Ring::init(shm, lr, GPA_BASE, RX_BUF as u32, VIRTQ_DESC_F_WRITE);
        let tx = Ring::init(shm, lt, GPA_BASE, (hdr_len + 60) as u32, 0);
        for i in 0..lr.size {
            rx.push(shm, i);
        }
        rx.publish(shm);
        let mk = || eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC);
        let (kick_rx, kick_tx, call_rx, call_tx) = (mk()?, mk()?, mk()?, mk()?);
        for (k, l, kick, call) in [(0u32, lr, &kick_rx, &call_rx), (1, lt, &kick_tx, &call_tx)] {
            let idx = 2 * u32::from(pair) + k;
            let uva = |off: usize| shm.uva() + off as u64;
            send(
                sock,
                req::SET_VRING_NUM,
                &state(idx, u32::from(l.size)),
                &[],
            )?;
            send(sock, req::SET_VRING_BASE, &state(idx, 0), &[])?;
            let mut a = Vec::new();
            a.extend_from_slice(&idx.to_le_bytes());
            a.extend_from_slice(&0u32.to_le_bytes());
            for v in [uva(l.desc), uva(l.used), uva(l.avail), 0] {
                a.extend_from_slice(&v.to_le_bytes());
            }
            send(sock, req::SET_VRING_ADDR, &a, &[])?;
            send(
                sock,
                req::SET_VRING_KICK,
                &u64::from(idx).to_le_bytes(),
                &[kick.as_fd()],
            )?;
            send(
                sock,
                req::SET_VRING_CALL,
                &u64::from(idx).to_le_bytes(),
                &[call.as_fd()],
            )?;
            send(sock, req::SET_VRING_ENABLE, &state(idx, 1), &[])?;
        }
        // Kick the rx ring once so a device that waits for the first kick starts.
        let _ = rustix::io::write(&kick_rx, &1u64.to_ne_bytes());
        Ok(QueuePair {
            rx,
            tx_free: (0..lt.size).rev().collect(),
            tx,
            kick_rx,
            kick_tx,
            _calls: [call_rx, call_tx],
        })
    }
}

impl QueuePair {
    /// Signals the device that the tx ring has new entries.
    #[inline]
    pub fn kick_tx(&self) {
        let _ = rustix::io::write(&self.kick_tx, &1u64.to_ne_bytes());
    }

    /// Signals the device that the rx ring has new buffers.
    #[inline]
    pub fn kick_rx(&self) {
        let _ = rustix::io::write(&self.kick_rx, &1u64.to_ne_bytes());
    }
}
