//! One AF_XDP socket: its UMEM, its four rings, bind with the requested copy mode and
//! need-wakeup, and the per-burst rx and tx work on its two halves.
//!
//! Threads: built on the control thread ([`Socket::open`]), then split into an [`RxSide`]
//! (fill + rx rings, the first half of the UMEM) used by the PMD polling the queue, and a
//! [`TxSide`] (tx + completion rings, the second half) used by whichever PMD holds its lock.
//! The halves share only the socket fd and the UMEM mapping (`Arc`), never a frame.
//! A [`SteerSocket`] (steering) is a second socket on the same queue with only an rx ring; its
//! rx half shares the queue socket's UMEM and [`FillSide`] (fill ring and rx frame books, under
//! a mutex held for one burst by whichever PMD receives).
use crate::frames::{FramePool, RawDesc};
use crate::mark::{self, XdpMeta, META_LEN};
use crate::ring::Ring;
use crate::sys::{self, Mmap};
use crate::{Error, FRAMES_PER_QUEUE, FRAME_SIZE, RING_SIZE};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the two halves share: the socket and the UMEM. Dropped (socket closed, UMEM unmapped)
/// when both halves are gone.
pub(crate) struct Shared {
    pub(crate) fd: OwnedFd,
    /// The memfd behind `umem` (None only in tests over private memory).
    pub(crate) memfd: Option<OwnedFd>,
    pub(crate) umem: Mmap,
}

impl Shared {
    /// The bytes `[addr, addr + len)` of the UMEM. Callers pass ranges that
    /// [`FramePool`] checked lie inside one frame the caller holds.
    fn frame(&self, addr: u64, len: u32) -> &[u8] {
        let end = addr as usize + len as usize;
        assert!(end <= self.umem.len(), "frame range checked by FramePool");
        // The frame is ours (the kernel gave it back through a ring), so the kernel does not
        // write it meanwhile.
        // SAFETY: the range lies inside the mapping (asserted) and nobody writes it.
        unsafe { std::slice::from_raw_parts(self.umem.ptr().add(addr as usize), len as usize) }
    }

    /// Copies `data` into the UMEM at `addr` (a frame the caller holds, `data` fits in it).
    fn write(&self, addr: u64, data: &[u8]) {
        let end = addr as usize + data.len();
        assert!(end <= self.umem.len(), "frame range checked by the caller");
        // The frame is ours until it is published in the tx ring, and `data` (a packet
        // buffer) cannot overlap the UMEM.
        // SAFETY: the range lies inside the mapping (asserted) and nobody else touches it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.umem.ptr().add(addr as usize),
                data.len(),
            )
        }
    }
}

/// A socket before it is split.
pub(crate) struct Socket {
    shared: Arc<Shared>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<RawDesc>,
    tx: Ring<RawDesc>,
}

impl Socket {
    /// A socket with its UMEM registered and its four rings mapped, not bound yet.
    pub(crate) fn open() -> Result<Socket, Error> {
        let fd = sys::xdp_socket().map_err(|e| Error::os("create AF_XDP socket", e))?;
        let len = FRAMES_PER_QUEUE as usize * FRAME_SIZE as usize;
        let (memfd, umem) = Mmap::memfd(len).map_err(|e| Error::os("map UMEM", e))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr() as u64,
            len: len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sys::set_xdp_opt(&fd, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| Error::os("register UMEM", e))?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            sys::set_xdp_opt(&fd, opt, &RING_SIZE).map_err(|e| Error::os("size rings", e))?;
        }
        let off = offsets(&fd)?;
        let raw = fd.as_raw_fd();
        let m = |e| Error::os("map rings", e);
        let fill = Ring::map(raw, libc::XDP_UMEM_PGOFF_FILL_RING, &off.fr, RING_SIZE).map_err(m)?;
        let comp = Ring::map(
            raw,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            &off.cr,
            RING_SIZE,
        )
        .map_err(m)?;
        let rx = Ring::map(raw, libc::XDP_PGOFF_RX_RING as u64, &off.rx, RING_SIZE).map_err(m)?;
        let tx = Ring::map(raw, libc::XDP_PGOFF_TX_RING as u64, &off.tx, RING_SIZE).map_err(m)?;
        Ok(Socket {
            shared: Arc::new(Shared {
                fd,
                memfd: Some(memfd),
                umem,
            }),
            fill,
            comp,
            rx,
            tx,
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.shared.fd.as_raw_fd()
    }

    /// Binds to `(ifindex, queue)` with copy-mode `flags` (`XDP_COPY` or `XDP_ZEROCOPY`) and
    /// need-wakeup.
    pub(crate) fn bind(&self, ifindex: u32, queue: u32, flags: u16) -> std::io::Result<()> {
        sys::bind_xdp(
            &self.shared.fd,
            ifindex,
            queue,
            flags | libc::XDP_USE_NEED_WAKEUP,
        )
    }

    /// Splits into the two halves, with the fill ring filled; `shared_fill` when steering
    /// sockets will draw from the queue's fill side too.
    pub(crate) fn split(self, shared_fill: bool) -> (RxSide, TxSide) {
        let half = FRAMES_PER_QUEUE / 2;
        let mut fill = FillSide {
            fill: self.fill,
            frames: FramePool::new(FRAME_SIZE, 0, half),
        };
        fill.refill();
        let rx = RxSide {
            shared: self.shared.clone(),
            own: None,
            meta: false,
            rx: self.rx,
            fill: Fill::new(fill, shared_fill),
        };
        let tx = TxSide {
            shared: self.shared,
            tx: self.tx,
            comp: self.comp,
            frames: FramePool::new(FRAME_SIZE, half, half),
        };
        (rx, tx)
    }
}

/// What one rx burst did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxBurst {
    /// Frames delivered.
    pub packets: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Descriptors refused (address/length outside the UMEM or frame, frame not the kernel's).
    pub bad_descs: u32,
    /// Kicks that failed with an error other than "try again".
    pub kick_errors: u32,
    /// Frames delivered with the XDP program's metadata.
    pub marked: u32,
}

/// The fill side of a queue: the fill ring and the rx frames it cycles. The queue's own
/// socket and its steering sockets (bound to the same queue with `XDP_SHARED_UMEM`) draw from
/// one kernel buffer pool, so they share this, under a mutex held for one burst.
pub(crate) struct FillSide {
    pub(crate) fill: Ring<u64>,
    pub(crate) frames: FramePool,
}

/// A queue's fill side: its socket's own (no steering: no lock on the rx path), or shared
/// with the queue's steering sockets.
pub(crate) enum Fill {
    Own(Box<FillSide>),
    Shared(Arc<Mutex<FillSide>>),
}

/// Access to a [`Fill`] for one burst.
enum FillGuard<'a> {
    Own(&'a mut FillSide),
    Shared(MutexGuard<'a, FillSide>),
}

impl std::ops::Deref for FillGuard<'_> {
    type Target = FillSide;
    fn deref(&self) -> &FillSide {
        match self {
            FillGuard::Own(f) => f,
            FillGuard::Shared(g) => g,
        }
    }
}

impl std::ops::DerefMut for FillGuard<'_> {
    fn deref_mut(&mut self) -> &mut FillSide {
        match self {
            FillGuard::Own(f) => f,
            FillGuard::Shared(g) => g,
        }
    }
}

impl Fill {
    pub(crate) fn new(f: FillSide, shared: bool) -> Fill {
        if shared {
            Fill::Shared(Arc::new(Mutex::new(f)))
        } else {
            Fill::Own(Box::new(f))
        }
    }

    fn lock(&mut self) -> FillGuard<'_> {
        match self {
            Fill::Own(f) => FillGuard::Own(f),
            Fill::Shared(m) => FillGuard::Shared(m.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }

    pub(crate) fn read<R>(&self, f: impl FnOnce(&FillSide) -> R) -> R {
        match self {
            Fill::Own(o) => f(o),
            Fill::Shared(m) => f(&m.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

/// The receive half of a socket: its rx ring, and the fill side it shares with the other
/// sockets of its queue (if any).
pub struct RxSide {
    pub(crate) shared: Arc<Shared>,
    /// A steering socket's own fd (the UMEM and fill ring are the queue socket's, in `shared`).
    pub(crate) own: Option<OwnedFd>,
    /// The program writes metadata marks in front of frames (`mark.rs`): read them.
    pub(crate) meta: bool,
    pub(crate) rx: Ring<RawDesc>,
    pub(crate) fill: Fill,
}

impl FillSide {
    /// Gives every frame we hold to the kernel through the fill ring, as room allows.
    fn refill(&mut self) -> u32 {
        let want = self.frames.free_count() as u32;
        let room = self.fill.prod_room(want).min(want);
        for i in 0..room {
            // Cannot fail: `room` <= free frames.
            let addr = self.frames.give().unwrap_or_default();
            self.fill.prod_write(i, addr);
        }
        if room > 0 {
            self.fill.prod_submit(room);
        }
        room
    }
}

impl RxSide {
    /// Receives up to `max` frames, calling `deliver` with each (the bytes are valid only
    /// during the call), returns every frame to the fill ring, and kicks the kernel if the
    /// fill ring asks for it.
    pub fn recv(&mut self, max: u32, mut deliver: impl FnMut(&[u8])) -> RxBurst {
        self.recv_meta(max, |f, _| deliver(f))
    }

    /// [`RxSide::recv`] that also hands over the metadata the XDP program put in front of each
    /// frame (`None` without `xdp-mark`, or when the program wrote none for the frame).
    pub fn recv_meta(
        &mut self,
        max: u32,
        mut deliver: impl FnMut(&[u8], Option<XdpMeta>),
    ) -> RxBurst {
        let mut b = RxBurst::default();
        let n = self.rx.cons_peek(max);
        let mut fs = self.fill.lock();
        for i in 0..n {
            let d = self.rx.cons_read(i);
            match fs.frames.take_rx(d) {
                Ok((addr, len)) => {
                    let meta = if self.meta {
                        take_meta(&self.shared, addr)
                    } else {
                        None
                    };
                    if meta.is_some() {
                        b.marked += 1;
                    }
                    deliver(self.shared.frame(addr, len), meta);
                    b.packets += 1;
                    b.bytes += u64::from(len);
                }
                Err(_) => b.bad_descs += 1,
            }
        }
        if n > 0 {
            self.rx.cons_release(n);
        }
        fs.refill();
        let wake = fs.fill.needs_wakeup();
        drop(fs);
        if wake {
            if let Err(e) = sys::kick_rx(self.fd()) {
                if !is_transient(&e) {
                    b.kick_errors += 1;
                }
            }
        }
        b
    }

    /// Reads the program's metadata marks from now on (set once, before the first burst).
    pub(crate) fn set_meta(&mut self, on: bool) {
        self.meta = on;
    }

    fn fd(&self) -> RawFd {
        self.own
            .as_ref()
            .map_or_else(|| self.shared.fd.as_raw_fd(), |f| f.as_raw_fd())
    }

    /// Frames the queue's fill side holds / the kernel holds (fill + rx rings of every socket
    /// of the queue).
    pub fn frames(&self) -> (usize, usize) {
        self.fill
            .read(|fs| (fs.frames.free_count(), fs.frames.in_kernel()))
    }

    /// The kernel's statistics of the socket.
    pub fn kernel_stats(&self) -> Option<libc::xdp_statistics> {
        sys::get_xdp_opt(
            self.fd(),
            libc::XDP_STATISTICS,
            libc::xdp_statistics {
                rx_dropped: 0,
                rx_invalid_descs: 0,
                tx_invalid_descs: 0,
                rx_ring_full: 0,
                rx_fill_ring_empty_descs: 0,
                tx_ring_empty_descs: 0,
            },
        )
        .ok()
    }
}

/// The metadata in front of the frame at `addr` (a frame we hold, checked by the pool),
/// if it lies inside the same UMEM frame and carries the magic; the magic is cleared so
/// a later frame the program did not mark cannot show this one's.
fn take_meta(shared: &Shared, addr: u64) -> Option<XdpMeta> {
    let len = META_LEN as u64;
    if addr % u64::from(FRAME_SIZE) < len {
        return None;
    }
    let m = mark::read_meta(shared.frame(addr - len, META_LEN as u32))?;
    shared.write(addr - 4, &[0; 4]);
    Some(m)
}

/// A steering socket before it gets its queue's fill side: bound to the same queue as the
/// queue's socket with `XDP_SHARED_UMEM`, with an rx ring only.
pub(crate) struct SteerSocket {
    fd: OwnedFd,
    rx: Ring<RawDesc>,
}

impl SteerSocket {
    /// A socket with an rx ring, bound to `(ifindex, queue)` sharing `primary`'s UMEM and
    /// buffer pool (`primary` must be bound to the same queue already).
    pub(crate) fn open(primary: &Socket, ifindex: u32, queue: u32) -> Result<SteerSocket, Error> {
        let fd = sys::xdp_socket().map_err(|e| Error::os("create AF_XDP socket", e))?;
        sys::set_xdp_opt(&fd, libc::XDP_RX_RING, &RING_SIZE)
            .map_err(|e| Error::os("size steering rx ring", e))?;
        let off = offsets(&fd)?;
        let rx = Ring::map(
            fd.as_raw_fd(),
            libc::XDP_PGOFF_RX_RING as u64,
            &off.rx,
            RING_SIZE,
        )
        .map_err(|e| Error::os("map steering rx ring", e))?;
        sys::bind_xdp_shared(&fd, ifindex, queue, primary.fd())
            .map_err(|e| Error::os(format!("bind steering socket to queue {queue}"), e))?;
        Ok(SteerSocket { fd, rx })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The receive half, drawing frames from the fill side of `queue_rx` (the queue socket's
    /// rx half, split with a shared fill side).
    pub(crate) fn into_rx(self, queue_rx: &RxSide) -> Result<RxSide, Error> {
        let Fill::Shared(fill) = &queue_rx.fill else {
            return Err(Error(
                "internal: queue socket split without a shared fill side".into(),
            ));
        };
        Ok(RxSide {
            shared: queue_rx.shared.clone(),
            own: Some(self.fd),
            meta: queue_rx.meta,
            rx: self.rx,
            fill: Fill::Shared(fill.clone()),
        })
    }
}

pub(crate) fn offsets(fd: &OwnedFd) -> Result<libc::xdp_mmap_offsets, Error> {
    let zero = libc::xdp_ring_offset {
        producer: 0,
        consumer: 0,
        desc: 0,
        flags: 0,
    };
    sys::get_xdp_opt(
        fd.as_raw_fd(),
        libc::XDP_MMAP_OFFSETS,
        libc::xdp_mmap_offsets {
            rx: zero,
            tx: zero,
            fr: zero,
            cr: zero,
        },
    )
    .map_err(|e| Error::os("read ring offsets", e))
}

/// What one tx burst did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxBurst {
    /// Frames queued to the kernel.
    pub packets: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Frames dropped: no free frame or no room in the tx ring.
    pub full: u32,
    /// Frames dropped: larger than a UMEM frame.
    pub too_big: u32,
    /// Completion descriptors refused (not a frame in flight).
    pub bad_completions: u32,
    /// Kicks that failed with an error other than "try again" / "busy".
    pub kick_errors: u32,
}

/// The transmit half of a socket: tx and completion rings.
pub struct TxSide {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tx: Ring<RawDesc>,
    pub(crate) comp: Ring<u64>,
    pub(crate) frames: FramePool,
}

impl TxSide {
    /// Takes back the frames of completed sends.
    fn reap(&mut self, b: &mut TxBurst) {
        let n = self.comp.cons_peek(RING_SIZE);
        for i in 0..n {
            let addr = self.comp.cons_read(i);
            if self.frames.take_completion(addr).is_err() {
                b.bad_completions += 1;
            }
        }
        if n > 0 {
            self.comp.cons_release(n);
        }
    }

    /// Copies each frame into a UMEM frame, queues it on the tx ring and kicks the kernel
    /// (copy mode needs a kick for every batch). Frames that do not fit are counted.
    pub fn send<'a>(&mut self, frames: impl ExactSizeIterator<Item = &'a [u8]>) -> TxBurst {
        let mut b = TxBurst::default();
        self.reap(&mut b);
        let want = frames.len() as u32;
        let room = self.tx.prod_room(want);
        let mut queued = 0u32;
        for f in frames {
            if f.len() > FRAME_SIZE as usize {
                b.too_big += 1;
                continue;
            }
            if queued == room {
                b.full += 1;
                continue;
            }
            let Some(addr) = self.frames.give() else {
                b.full += 1;
                continue;
            };
            self.shared.write(addr, f);
            self.tx.prod_write(
                queued,
                RawDesc {
                    addr,
                    len: f.len() as u32,
                    options: 0,
                },
            );
            queued += 1;
            b.bytes += f.len() as u64;
        }
        if queued > 0 {
            self.tx.prod_submit(queued);
            b.packets = queued;
        }
        // Copy and generic mode process the tx ring only when kicked; zero-copy drivers say
        // through the flag whether they need it.
        if queued > 0 || self.tx.needs_wakeup() {
            if let Err(e) = sys::kick_tx(self.shared.fd.as_raw_fd()) {
                if !is_transient(&e) {
                    b.kick_errors += 1;
                }
            }
        }
        b
    }

    /// Frames this half holds / the kernel holds (tx + completion rings).
    pub fn frames(&self) -> (usize, usize) {
        (self.frames.free_count(), self.frames.in_kernel())
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An rx half over private memory: the test plays the kernel.
    fn fake_rx() -> RxSide {
        let half = FRAMES_PER_QUEUE / 2;
        let umem = Mmap::anon((FRAMES_PER_QUEUE * FRAME_SIZE) as usize).unwrap();
        let fd =
            sys::xdp_socket().unwrap_or_else(|_| std::fs::File::open("/dev/null").unwrap().into());
        let mut fill = FillSide {
            fill: Ring::anon(RING_SIZE),
            frames: FramePool::new(FRAME_SIZE, 0, half),
        };
        fill.refill();
        RxSide {
            shared: Arc::new(Shared {
                fd,
                memfd: None,
                umem,
            }),
            own: None,
            meta: false,
            rx: Ring::anon(RING_SIZE),
            fill: Fill::new(fill, false),
        }
    }

    #[test]
    fn hostile_rx_descriptors_are_counted_and_dropped_and_no_frame_is_lost() {
        let mut rx = fake_rx();
        assert_eq!(rx.frames(), (2048, 2048));
        // The "kernel" takes two frames from the fill ring and writes a frame into one.
        let a = rx.fill.lock().fill.kernel_consume().unwrap();
        let b = rx.fill.lock().fill.kernel_consume().unwrap();
        let c = rx.fill.lock().fill.kernel_consume().unwrap();
        let payload = [0xabu8; 60];
        rx.shared.write(a + 256, &payload);
        let good = RawDesc {
            addr: a + 256,
            len: 60,
            options: 0,
        };
        let umem_len = u64::from(FRAMES_PER_QUEUE * FRAME_SIZE);
        for d in [
            good,
            // The same frame again.
            good,
            // Past the end of the UMEM, and far past it.
            RawDesc {
                addr: umem_len,
                len: 60,
                options: 0,
            },
            RawDesc {
                addr: u64::MAX - 10,
                len: 60,
                options: 0,
            },
            // A tx-half frame (never given to the fill ring).
            RawDesc {
                addr: umem_len - 4096,
                len: 60,
                options: 0,
            },
            // Across the end of a frame the kernel holds (reclaimed, not delivered).
            RawDesc {
                addr: b + 4000,
                len: 200,
                options: 0,
            },
            // Shorter than an Ethernet header (reclaimed, not delivered).
            RawDesc {
                addr: c + 256,
                len: 3,
                options: 0,
            },
        ] {
            rx.rx.kernel_produce(d);
        }
        let mut got = Vec::new();
        let r = rx.recv(32, |f| got.push(f.to_vec()));
        assert_eq!(got, vec![payload.to_vec()]);
        assert_eq!((r.packets, r.bytes), (1, 60));
        assert_eq!(r.bad_descs, 6);
        // The three frames came back and went to the fill ring again; nothing lost.
        let (ours, kernel) = rx.frames();
        assert_eq!(ours + kernel, 4096);
        let mut filled = 0;
        while rx.fill.lock().fill.kernel_consume().is_some() {
            filled += 1;
        }
        assert_eq!(filled, 2048, "the fill ring was refilled to the brim");
    }

    #[test]
    fn tx_counts_full_and_too_big_and_refuses_bad_completions() {
        let half = FRAMES_PER_QUEUE / 2;
        let umem = Mmap::anon((FRAMES_PER_QUEUE * FRAME_SIZE) as usize).unwrap();
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let mut tx = TxSide {
            shared: Arc::new(Shared {
                fd,
                memfd: None,
                umem,
            }),
            tx: Ring::anon(4),
            comp: Ring::anon(RING_SIZE),
            frames: FramePool::new(FRAME_SIZE, half, half),
        };
        let small = [1u8; 64];
        let big = vec![0u8; FRAME_SIZE as usize + 1];
        let frames: Vec<&[u8]> = vec![&small, &big, &small, &small, &small, &small];
        let b = tx.send(frames.into_iter());
        // A ring of 4: four queued, one too big, one with no room.
        assert_eq!((b.packets, b.too_big, b.full), (4, 1, 1));
        let d = tx.tx.kernel_consume().unwrap();
        assert_eq!(tx.shared.frame(d.addr, d.len), &small[..]);
        // The kernel completes one frame, then the same one again, then one it never had.
        tx.comp.kernel_produce(d.addr);
        tx.comp.kernel_produce(d.addr);
        tx.comp.kernel_produce(0);
        let b = tx.send(std::iter::empty());
        assert_eq!(b.bad_completions, 2);
        assert_eq!(tx.frames(), (half as usize - 3, 3));
    }
}
