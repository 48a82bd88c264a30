//! Handing an open device to another process and adopting it there (`vireoctl upgrade`): the
//! old vireod gives the new one duplicates of the bpf link, program and XSKMAP and, per
//! queue, the socket and its UMEM memfd, plus the frame books (which frames each half holds;
//! the kernel holds the rest, in the fill/rx or tx/completion rings). The new process checks
//! every fd, maps the same UMEM frames from the memfd and the four rings from the socket
//! (offsets from `XDP_MMAP_OFFSETS`), and carries on at the ring indices the old one
//! published. The program stays attached throughout (the link lives while any process holds
//! it) and the XSKMAP entries keep pointing at the same sockets.
//!
//! Only devices without steering or marks are handed over ([`Device::hand_over`] says so
//! otherwise); the caller reopens those.
//!
//! Threads: control thread (old process: after the PMDs stopped using the halves; new
//! process: before any PMD sees the port).
use crate::device::{Device, DeviceConfig, ModeInUse};
use crate::frames::FramePool;
use crate::ring::Ring;
use crate::socket::{offsets, Fill, FillSide, RxSide, Shared, TxSide};
use crate::{bpf, sys, Error, FRAMES_PER_QUEUE, FRAME_SIZE, RING_SIZE};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// One queue's socket and UMEM memfd.
#[derive(Debug)]
pub struct QueueFds {
    /// The AF_XDP socket (bound, rings set up, UMEM registered).
    pub sock: OwnedFd,
    /// The memfd behind its UMEM.
    pub umem: OwnedFd,
}

/// The fds of a device handed over.
#[derive(Debug)]
pub struct DeviceFds {
    /// The bpf link that attaches the program.
    pub link: OwnedFd,
    /// The program.
    pub prog: OwnedFd,
    /// The XSKMAP.
    pub map: OwnedFd,
    /// Per queue.
    pub queues: Vec<QueueFds>,
}

/// Which frames of one queue the process holds (frame numbers): every other frame of the
/// half is the kernel's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Books {
    /// Rx half (fill and rx rings).
    pub rx_free: Vec<u32>,
    /// Tx half (tx and completion rings).
    pub tx_free: Vec<u32>,
}

impl RxSide {
    /// Duplicates of the socket and its UMEM memfd (a queue socket, not a steering one).
    pub fn dup_fds(&self) -> Result<QueueFds, Error> {
        if self.own.is_some() {
            return Err(Error("a steering socket is not handed over".into()));
        }
        let memfd = self
            .shared
            .memfd
            .as_ref()
            .ok_or_else(|| Error("the UMEM is not a memfd".into()))?;
        let dup = |f: &OwnedFd| f.try_clone().map_err(|e| Error::os("duplicate fd", e));
        Ok(QueueFds {
            sock: dup(&self.shared.fd)?,
            umem: dup(memfd)?,
        })
    }

    /// The frames of the rx half we hold.
    pub fn free_frames(&self) -> Vec<u32> {
        self.fill.read(|fs| fs.frames.free_frames())
    }
}

impl TxSide {
    /// The frames of the tx half we hold.
    pub fn free_frames(&self) -> Vec<u32> {
        self.frames.free_frames()
    }
}

fn dup(f: &OwnedFd) -> Result<OwnedFd, Error> {
    f.try_clone().map_err(|e| Error::os("duplicate fd", e))
}

impl Device {
    /// Duplicates of the link, program and XSKMAP, for a device without steering or marks.
    pub fn dup_program(&self) -> Result<(OwnedFd, OwnedFd, OwnedFd), Error> {
        if self.steer.is_some() || self.marks.is_some() {
            return Err(Error(format!(
                "{}: a device with xdp-steering or xdp-mark is not handed over",
                self.ifname
            )));
        }
        Ok((dup(&self._link)?, dup(&self._prog)?, dup(&self._map)?))
    }

    /// Adopts a device another vireod handed over: `cfg` as it was opened, in `mode`, with
    /// `books[q]` for queue `q`. Every fd is checked first (link on this interface running
    /// Vireo's program, an XSKMAP with a slot per queue, AF_XDP sockets that are bound, memfds
    /// of the UMEM's size); nothing is kept on failure (the caller's fds close).
    pub fn adopt(
        cfg: &DeviceConfig,
        mode: ModeInUse,
        fds: DeviceFds,
        books: &[Books],
    ) -> Result<Device, Error> {
        let name = &cfg.ifname;
        if cfg.steer_targets > 0 || cfg.marks {
            return Err(Error(format!(
                "{name}: a device with xdp-steering or xdp-mark is not adopted"
            )));
        }
        let ifindex =
            sys::ifindex(name).map_err(|e| Error::os(format!("no interface {name:?}"), e))?;
        if fds.queues.len() != cfg.queues as usize || books.len() != fds.queues.len() {
            return Err(Error(format!(
                "{name}: {} sockets and {} books handed over for {} queues",
                fds.queues.len(),
                books.len(),
                cfg.queues
            )));
        }
        bpf::check_handed(&fds.link, &fds.prog, &fds.map, ifindex, cfg.queues)
            .map_err(|e| Error(format!("{name}: {e}")))?;
        let mut queues = Vec::new();
        for (q, (qf, b)) in fds.queues.into_iter().zip(books).enumerate() {
            let halves =
                adopt_queue(qf, b, mode).map_err(|e| Error(format!("{name} queue {q}: {e}")))?;
            queues.push(halves);
        }
        Ok(Device {
            ifname: name.clone(),
            ifindex,
            mode,
            _link: fds.link,
            _prog: fds.prog,
            _map: fds.map,
            steer: None,
            marks: None,
            queues,
            steered: Vec::new(),
            replaced: 0,
        })
    }
}

/// Checks one queue's socket and memfd, maps both, and rebuilds its halves from the books.
fn adopt_queue(qf: QueueFds, b: &Books, mode: ModeInUse) -> Result<(RxSide, TxSide), Error> {
    let fd = qf.sock.as_raw_fd();
    match sys::socket_domain(fd) {
        Ok(d) if d == libc::AF_XDP => {}
        Ok(d) => {
            return Err(Error(format!(
                "the handed-over socket is of family {d}, not AF_XDP"
            )))
        }
        Err(e) => return Err(Error::os("the handed-over socket", e)),
    }
    // A socket that is not bound answers ENXIO; a bound one has nothing to refill here.
    if let Err(e) = sys::kick_rx(fd) {
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Err(Error("the handed-over socket is not bound".into()));
        }
    }
    let opts = sys::get_xdp_opt(fd, libc::XDP_OPTIONS, libc::xdp_options { flags: 0 })
        .map_err(|e| Error::os("read the socket's options", e))?;
    let zc = opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
    if zc != (mode == ModeInUse::NativeZeroCopy) {
        return Err(Error(format!(
            "the handed-over socket is {}zero-copy, the mode handed over is {}",
            if zc { "" } else { "not " },
            mode.name()
        )));
    }
    let len = FRAMES_PER_QUEUE as usize * FRAME_SIZE as usize;
    let got =
        sys::memfd_len(qf.umem.as_raw_fd()).map_err(|e| Error::os("the handed-over UMEM", e))?;
    if got != len as u64 {
        return Err(Error(format!(
            "the handed-over UMEM has {got} bytes, not {len}"
        )));
    }
    let umem =
        sys::Mmap::shared(qf.umem.as_raw_fd(), len, 0).map_err(|e| Error::os("map the UMEM", e))?;
    let off = offsets(&qf.sock)?;
    let m = |e| Error::os("map rings", e);
    let fill =
        Ring::adopt(fd, libc::XDP_UMEM_PGOFF_FILL_RING, &off.fr, RING_SIZE, true).map_err(m)?;
    let comp = Ring::adopt(
        fd,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        &off.cr,
        RING_SIZE,
        false,
    )
    .map_err(m)?;
    let rx = Ring::adopt(
        fd,
        libc::XDP_PGOFF_RX_RING as u64,
        &off.rx,
        RING_SIZE,
        false,
    )
    .map_err(m)?;
    let tx =
        Ring::adopt(fd, libc::XDP_PGOFF_TX_RING as u64, &off.tx, RING_SIZE, true).map_err(m)?;
    let half = FRAMES_PER_QUEUE / 2;
    let books = |first, free: &[u32], what| {
        FramePool::with_free(FRAME_SIZE, first, half, free)
            .map_err(|e| Error(format!("{what} books: {e}")))
    };
    let rx_frames = books(0, &b.rx_free, "rx")?;
    let tx_frames = books(half, &b.tx_free, "tx")?;
    let shared = Arc::new(Shared {
        fd: qf.sock,
        memfd: Some(qf.umem),
        umem,
    });
    let rxs = RxSide {
        shared: shared.clone(),
        own: None,
        meta: false,
        rx,
        fill: Fill::new(
            FillSide {
                fill,
                frames: rx_frames,
            },
            false,
        ),
    };
    let txs = TxSide {
        shared,
        tx,
        comp,
        frames: tx_frames,
    };
    Ok((rxs, txs))
}
