//! Handing an open device to another process and adopting it there (`vireoctl upgrade`): the
//! old vireod gives the new one duplicates of the bpf link, program and XSKMAP and, per
//! queue, the socket and its UMEM memfd, plus the frame books (which frames each half holds;
//! the kernel holds the rest, in the fill/rx or tx/completion rings). The new process checks
//! every fd, maps the same UMEM frames from the memfd and the four rings from the socket
//! (offsets from `XDP_MMAP_OFFSETS`), and carries on at the ring indices the old one
//! published. The program stays attached throughout (the link lives while any process holds
//! it) and the XSKMAP entries keep pointing at the same sockets.
//!
//! With `xdp-steering` the steering map and counter array travel too, and per queue each
//! steering socket (bound to the queue with `XDP_SHARED_UMEM`: it has only an rx ring and draws
//! from the queue socket's fill ring, whose books cover it); with `xdp-mark` the mark map. The
//! maps keep their entries (the new vireod reads them back to diff against: `entries`).
//! What cannot be checked from user space: which queue a socket is bound to (no
//! `getsockname` for AF_XDP; `xsk_diag` is optional) and which slot of the XSKMAP holds which
//! socket (the XSKMAP is not readable from user space). Both were set by the old vireod, which
//! handed over the objects themselves, not names of them.
//!
//! Threads: control thread (old process: after the PMDs stopped using the halves; new
//! process: before any PMD sees the port).
use crate::bpf::MapShape;
use crate::device::{Device, DeviceConfig, ModeInUse};
use crate::frames::FramePool;
use crate::mark::MarkMap;
use crate::ring::Ring;
use crate::socket::{offsets, Fill, FillSide, RxSide, Shared, TxSide};
use crate::steer::SteerMaps;
use crate::{bpf, sys, Error, FiveTuple, FRAMES_PER_QUEUE, FRAME_SIZE, RING_SIZE};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// One queue's socket and UMEM memfd, and its steering sockets.
#[derive(Debug)]
pub struct QueueFds {
    /// The AF_XDP socket (bound, rings set up, UMEM registered).
    pub sock: OwnedFd,
    /// The memfd behind its UMEM.
    pub umem: OwnedFd,
    /// With steering: one socket per steering target (bound to the same queue, sharing the
    /// UMEM), in target order.
    pub steered: Vec<OwnedFd>,
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
    /// With steering: the MAC → target map and the counter array.
    pub steer: Option<(OwnedFd, OwnedFd)>,
    /// With marks: the 5-tuple → mark map.
    pub marks: Option<OwnedFd>,
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

/// The steering map and counters (with steering), the mark map (with marks).
pub type MapFds = (Option<(OwnedFd, OwnedFd)>, Option<OwnedFd>);

fn dup(f: &OwnedFd) -> Result<OwnedFd, Error> {
    f.try_clone().map_err(|e| Error::os("duplicate fd", e))
}

impl RxSide {
    /// Duplicates of the socket and its UMEM memfd (a queue socket, not a steering one; the
    /// caller adds the queue's steering sockets, [`RxSide::dup_steering`]).
    pub fn dup_fds(&self) -> Result<QueueFds, Error> {
        if self.own.is_some() {
            return Err(Error("a steering socket is not a queue socket".into()));
        }
        let memfd = self
            .shared
            .memfd
            .as_ref()
            .ok_or_else(|| Error("the UMEM is not a memfd".into()))?;
        Ok(QueueFds {
            sock: dup(&self.shared.fd)?,
            umem: dup(memfd)?,
            steered: Vec::new(),
        })
    }

    /// A duplicate of a steering socket's own fd.
    pub fn dup_steering(&self) -> Result<OwnedFd, Error> {
        let own = self
            .own
            .as_ref()
            .ok_or_else(|| Error("a queue socket is not a steering socket".into()))?;
        dup(own)
    }

    /// The frames of the rx half we hold (for a queue with steering: of the fill side its
    /// sockets share).
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

impl Device {
    /// Duplicates of the link, program and XSKMAP.
    pub fn dup_program(&self) -> Result<(OwnedFd, OwnedFd, OwnedFd), Error> {
        Ok((dup(&self._link)?, dup(&self._prog)?, dup(&self._map)?))
    }

    /// Duplicates of the steering map and counters (with steering) and of the mark map (with
    /// marks).
    pub fn dup_maps(&self) -> Result<MapFds, Error> {
        let steer = match &self.steer {
            Some(m) => Some((dup(&m.steer)?, dup(&m.stats)?)),
            None => None,
        };
        let marks = match &self.marks {
            Some(m) => Some(dup(&m.fd)?),
            None => None,
        };
        Ok((steer, marks))
    }

    /// The steering map's entries (MAC → target; empty without steering).
    pub fn steer_entries(&self) -> Result<Vec<([u8; 6], u32)>, Error> {
        self.steer
            .as_ref()
            .map_or(Ok(Vec::new()), SteerMaps::entries)
    }

    /// The mark map's entries (5-tuple → mark; empty without marks).
    pub fn mark_entries(&self) -> Result<Vec<(FiveTuple, u32)>, Error> {
        self.marks.as_ref().map_or(Ok(Vec::new()), MarkMap::entries)
    }

    /// Adopts a device another vireod handed over: `cfg` as it was opened, in `mode`, with
    /// `books[q]` for queue `q`. Every fd is checked first (link on this interface running
    /// Vireo's program, which uses exactly the maps handed over; an XSKMAP with a slot per
    /// socket, steering and mark maps of their shapes; AF_XDP sockets that are bound, in the
    /// handed mode; memfds of the UMEM's size; as many steering sockets per queue as `cfg`
    /// has targets); nothing is kept on failure (the caller's fds close).
    pub fn adopt(
        cfg: &DeviceConfig,
        mode: ModeInUse,
        fds: DeviceFds,
        books: &[Books],
    ) -> Result<Device, Error> {
        let name = &cfg.ifname;
        let targets = cfg.steer_targets;
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
        if let Some(q) = fds
            .queues
            .iter()
            .position(|q| q.steered.len() != targets as usize)
        {
            return Err(Error(format!(
                "{name} queue {q}: {} steering sockets handed over, the port has {targets} steering targets",
                fds.queues[q].steered.len()
            )));
        }
        if fds.steer.is_some() != (targets > 0) || fds.marks.is_some() != cfg.marks {
            return Err(Error(format!(
                "{name}: the maps handed over (steering {}, marks {}) are not the port's (xdp-steering {}, xdp-mark {})",
                on(fds.steer.is_some()),
                on(fds.marks.is_some()),
                on(targets > 0),
                on(cfg.marks)
            )));
        }
        let mut maps: Vec<(&OwnedFd, MapShape)> =
            vec![(&fds.map, MapShape::xskmap(cfg.queues * (targets + 1)))];
        if let Some((steer, stats)) = &fds.steer {
            let [a, b] = SteerMaps::shapes(cfg.queues, targets);
            maps.push((steer, a));
            maps.push((stats, b));
        }
        if let Some(m) = &fds.marks {
            maps.push((m, MarkMap::SHAPE));
        }
        bpf::check_handed(&fds.link, &fds.prog, ifindex, &maps)
            .map_err(|e| Error(format!("{name}: {e}")))?;
        let mut queues = Vec::new();
        let mut steered = Vec::new();
        for (q, (qf, b)) in fds.queues.into_iter().zip(books).enumerate() {
            let err = |e: Error| Error(format!("{name} queue {q}: {e}"));
            let QueueFds {
                sock,
                umem,
                steered: st,
            } = qf;
            let (rx, tx) = adopt_queue(sock, umem, b, mode, targets > 0, cfg.marks).map_err(err)?;
            let mut mine = Vec::new();
            for (t, fd) in st.into_iter().enumerate() {
                let r = adopt_steering(fd, &rx, mode)
                    .map_err(|e| err(Error(format!("steering socket {t}: {e}"))))?;
                mine.push(r);
            }
            queues.push((rx, tx));
            steered.push(mine);
        }
        let steer = fds
            .steer
            .map(|(s, st)| SteerMaps::adopt(s, st, cfg.queues, targets));
        Ok(Device {
            ifname: name.clone(),
            ifindex,
            mode,
            _link: fds.link,
            _prog: fds.prog,
            _map: fds.map,
            steer,
            marks: fds.marks.map(|fd| MarkMap { fd }),
            queues,
            steered,
            replaced: 0,
        })
    }
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Checks that `fd` is an AF_XDP socket, bound, in `mode`.
fn check_socket(fd: i32, mode: ModeInUse) -> Result<(), Error> {
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
    Ok(())
}

/// Checks a steering socket and maps its rx ring; it shares `queue_rx`'s UMEM and fill side.
fn adopt_steering(fd: OwnedFd, queue_rx: &RxSide, mode: ModeInUse) -> Result<RxSide, Error> {
    check_socket(fd.as_raw_fd(), mode)?;
    let Fill::Shared(fill) = &queue_rx.fill else {
        return Err(Error(
            "internal: queue socket adopted without a shared fill side".into(),
        ));
    };
    let off = offsets(&fd)?;
    let rx = Ring::adopt(
        fd.as_raw_fd(),
        libc::XDP_PGOFF_RX_RING as u64,
        &off.rx,
        RING_SIZE,
        false,
    )
    .map_err(|e| Error::os("map the steering rx ring", e))?;
    Ok(RxSide {
        shared: queue_rx.shared.clone(),
        own: Some(fd),
        meta: queue_rx.meta,
        rx,
        fill: Fill::Shared(fill.clone()),
    })
}

/// Checks one queue's socket and memfd, maps both, and rebuilds its halves from the books
/// (`shared_fill`: steering sockets draw from its fill side; `meta`: frames carry marks).
fn adopt_queue(
    sock: OwnedFd,
    umem_fd: OwnedFd,
    b: &Books,
    mode: ModeInUse,
    shared_fill: bool,
    meta: bool,
) -> Result<(RxSide, TxSide), Error> {
    let fd = sock.as_raw_fd();
    check_socket(fd, mode)?;
    let len = FRAMES_PER_QUEUE as usize * FRAME_SIZE as usize;
    let got =
        sys::memfd_len(umem_fd.as_raw_fd()).map_err(|e| Error::os("the handed-over UMEM", e))?;
    if got != len as u64 {
        return Err(Error(format!(
            "the handed-over UMEM has {got} bytes, not {len}"
        )));
    }
    let umem =
        sys::Mmap::shared(umem_fd.as_raw_fd(), len, 0).map_err(|e| Error::os("map the UMEM", e))?;
    let off = offsets(&sock)?;
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
        fd: sock,
        memfd: Some(umem_fd),
        umem,
    });
    let rxs = RxSide {
        shared: shared.clone(),
        own: None,
        meta,
        rx,
        fill: Fill::new(
            FillSide {
                fill,
                frames: rx_frames,
            },
            shared_fill,
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
