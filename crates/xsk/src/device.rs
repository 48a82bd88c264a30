//! One interface opened for AF_XDP: checks (interface exists, MTU fits a frame), the XSKMAP
//! and program, one socket per queue bound in the best mode the interface allows, and the
//! program attached last (so no frame is redirected before every socket is in the map).
//!
//! Threads: control thread only. Dropping the [`Device`] detaches the program (the link fd
//! closes); the sockets and their UMEMs go when their halves are dropped.
use crate::bpf::{self, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use crate::mark::{FiveTuple, MarkMap};
use crate::socket::{Socket, SteerSocket};
use crate::steer::{self, SteerArgs, SteerMaps};
use crate::{sys, Error, RxSide, TxSide, MAX_MTU};
use std::os::fd::{AsRawFd, OwnedFd};

/// What [`Device::open_in`] makes: link, program, XSKMAP, steering and mark maps, queues and
/// steering sockets, replaced programs.
type Opened = (
    OwnedFd,
    OwnedFd,
    OwnedFd,
    (Option<SteerMaps>, Option<MarkMap>),
    (Vec<(RxSide, TxSide)>, Vec<Vec<RxSide>>),
    usize,
);
use std::time::Duration;

/// The XDP mode the user asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRequest {
    /// Zero-copy, else native copy, else generic: the first the interface accepts.
    BestEffort,
    /// Native (driver) XDP: zero-copy if the driver has it, else copy.
    Native,
    /// Generic (SKB) XDP, copy mode.
    Generic,
}

impl ModeRequest {
    /// Parses `best-effort`, `native`, `generic`.
    pub fn parse(s: &str) -> Option<ModeRequest> {
        match s {
            "best-effort" => Some(ModeRequest::BestEffort),
            "native" => Some(ModeRequest::Native),
            "generic" => Some(ModeRequest::Generic),
            _ => None,
        }
    }
}

/// The mode a device runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeInUse {
    /// Native XDP, zero-copy sockets.
    NativeZeroCopy,
    /// Native XDP, copy-mode sockets.
    Native,
    /// Generic XDP, copy-mode sockets.
    Generic,
}

impl ModeInUse {
    /// As `vireoctl show` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ModeInUse::NativeZeroCopy => "native-zerocopy",
            ModeInUse::Native => "native",
            ModeInUse::Generic => "generic",
        }
    }

    /// The mode [`ModeInUse::name`] names.
    pub fn parse(s: &str) -> Option<ModeInUse> {
        [
            ModeInUse::NativeZeroCopy,
            ModeInUse::Native,
            ModeInUse::Generic,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }

    fn attach_flags(self) -> u32 {
        match self {
            ModeInUse::NativeZeroCopy | ModeInUse::Native => XDP_FLAGS_DRV_MODE,
            ModeInUse::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    fn bind_flags(self) -> u16 {
        match self {
            ModeInUse::NativeZeroCopy => libc::XDP_ZEROCOPY,
            ModeInUse::Native | ModeInUse::Generic => libc::XDP_COPY,
        }
    }
}

/// What to open.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Interface name.
    pub ifname: String,
    /// Queues (sockets), bound to the interface's rx queues `0..queues`.
    pub queues: u32,
    /// Mode wanted.
    pub mode: ModeRequest,
    /// Steering sockets per queue (0: no steering, the plain redirect program). With `T > 0`
    /// each queue gets `T` more sockets bound to it (sharing its UMEM), and the steering
    /// program (MAC → target map, per-queue counters) sends a frame whose destination MAC has
    /// target `t` to steering socket `t` of the queue it arrived on.
    pub steer_targets: u32,
    /// The program writes a flow hash and a mark (from the 5-tuple → mark map) in front of
    /// each frame, and the rx halves read them ([`RxSide::recv_meta`]).
    pub marks: bool,
}

/// Steering counters of one rx queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SteerStats {
    /// Frames that arrived on this rx queue (before any steering).
    pub arrived: u64,
    /// Frames the program steered to each steering socket of this queue by their
    /// destination MAC (the rest went to the queue's own socket or to the kernel).
    pub steered: Vec<u64>,
}

/// Kernel statistics of one queue's socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Frames the kernel dropped for this socket (rx ring full, no fill frame, ...).
    pub rx_dropped: u64,
    /// Rx ring full.
    pub rx_ring_full: u64,
    /// Fill ring empty when a frame arrived.
    pub rx_fill_ring_empty: u64,
    /// Tx descriptors the kernel refused.
    pub tx_invalid_descs: u64,
}

/// An interface with Vireo's program attached and one socket per queue.
pub struct Device {
    pub(crate) ifname: String,
    pub(crate) ifindex: u32,
    pub(crate) mode: ModeInUse,
    // Field order is drop order: detach the program first, then the map and program fds.
    pub(crate) _link: OwnedFd,
    pub(crate) _prog: OwnedFd,
    pub(crate) _map: OwnedFd,
    pub(crate) steer: Option<SteerMaps>,
    pub(crate) marks: Option<MarkMap>,
    pub(crate) queues: Vec<(RxSide, TxSide)>,
    pub(crate) steered: Vec<Vec<RxSide>>,
    pub(crate) replaced: usize,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ifname", &self.ifname)
            .field("mode", &self.mode)
            .finish()
    }
}

/// How long a bind that meets `EBUSY` (the previous socket on the queue is still being torn
/// down, asynchronously) is retried.
const BUSY_RETRY: Duration = Duration::from_secs(2);

impl Device {
    /// Opens `cfg.ifname`: checks, sockets, map, program, attachment. Every failure is one
    /// line naming the step and the interface; nothing is left behind on failure.
    pub fn open(cfg: &DeviceConfig) -> Result<Device, Error> {
        let name = &cfg.ifname;
        let ifindex =
            sys::ifindex(name).map_err(|e| Error::os(format!("no interface {name:?}"), e))?;
        let mtu = sys::mtu(name).map_err(|e| Error::os(format!("read the MTU of {name}"), e))?;
        if mtu > MAX_MTU {
            return Err(Error(format!(
                "{name} has MTU {mtu}; af-xdp frames hold at most MTU {MAX_MTU} (lower it with `ip link set dev {name} mtu {MAX_MTU}`)"
            )));
        }
        if cfg.queues == 0 {
            return Err(Error("queues must be at least 1".into()));
        }
        let tries: &[ModeInUse] = match cfg.mode {
            ModeRequest::BestEffort => &[
                ModeInUse::NativeZeroCopy,
                ModeInUse::Native,
                ModeInUse::Generic,
            ],
            ModeRequest::Native => &[ModeInUse::NativeZeroCopy, ModeInUse::Native],
            ModeRequest::Generic => &[ModeInUse::Generic],
        };
        let mut errors = Vec::new();
        for &mode in tries {
            match Self::open_in(cfg, ifindex, mode) {
                Ok((link, prog, map, (steer, marks), (queues, steered), replaced)) => {
                    return Ok(Device {
                        ifname: name.clone(),
                        ifindex,
                        mode,
                        _link: link,
                        _prog: prog,
                        _map: map,
                        steer,
                        marks,
                        queues,
                        steered,
                        replaced,
                    })
                }
                Err(e) => errors.push(format!("{}: {e}", mode.name())),
            }
        }
        Err(Error(format!("{name}: {}", errors.join("; "))))
    }

    fn open_in(cfg: &DeviceConfig, ifindex: u32, mode: ModeInUse) -> Result<Opened, Error> {
        let targets = cfg.steer_targets;
        let per_queue = targets + 1;
        let map = bpf::create_map(cfg.queues * per_queue)?;
        let steer = if targets > 0 {
            Some(SteerMaps::create(cfg.queues, targets)?)
        } else {
            None
        };
        let marks = if cfg.marks {
            Some(MarkMap::create()?)
        } else {
            None
        };
        let prog = if steer.is_some() || marks.is_some() {
            let args = steer.as_ref().map(|m| SteerArgs {
                steer: m.steer.as_raw_fd(),
                stats: m.stats.as_raw_fd(),
                queues: cfg.queues,
                targets,
            });
            let insns = steer::program(
                map.as_raw_fd(),
                per_queue,
                args.as_ref(),
                marks.as_ref().map(|m| m.fd.as_raw_fd()),
            );
            bpf::load(&insns)?
        } else {
            bpf::load_program(&map)?
        };
        let mut socks = Vec::new();
        let mut extra = Vec::new();
        for q in 0..cfg.queues {
            let s = Socket::open()?;
            bind_retrying(&s, ifindex, q, mode.bind_flags())
                .map_err(|e| Error::os(format!("bind queue {q}"), e))?;
            bpf::map_set(&map, q * per_queue, s.fd())?;
            let mut mine = Vec::new();
            for t in 0..targets {
                let st = SteerSocket::open(&s, ifindex, q)?;
                bpf::map_set(&map, q * per_queue + 1 + t, st.fd())?;
                mine.push(st);
            }
            socks.push(s);
            extra.push(mine);
        }
        // Only now, with every queue ours, take the interface from an earlier program of ours.
        let replaced = bpf::clear_ours(ifindex, &cfg.ifname)?;
        let link = bpf::attach(&prog, ifindex, mode.attach_flags()).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                Error(format!(
                    "another XDP program is attached to {0} (not Vireo's; remove it with `ip link set dev {0} xdp off`)",
                    cfg.ifname
                ))
            } else {
                Error::os("attach the XDP program", e)
            }
        })?;
        let mut queues: Vec<(RxSide, TxSide)> =
            socks.into_iter().map(|s| s.split(targets > 0)).collect();
        for (rx, _) in &mut queues {
            rx.set_meta(cfg.marks);
        }
        let steered = extra
            .into_iter()
            .zip(&queues)
            .map(|(mine, (rx, _))| mine.into_iter().map(|st| st.into_rx(rx)).collect())
            .collect::<Result<_, _>>()?;
        Ok((link, prog, map, (steer, marks), (queues, steered), replaced))
    }

    /// Whether the steering program is loaded.
    pub fn steering(&self) -> bool {
        self.steer.is_some()
    }

    /// Steers frames whose destination MAC is `mac` to steering socket `target` of the queue
    /// they arrive on (replacing an entry).
    pub fn steer_set(&self, mac: [u8; 6], target: u32) -> Result<(), Error> {
        self.steer_maps()?.set(mac, target)
    }

    /// Stops steering `mac`; true if it had an entry.
    pub fn steer_del(&self, mac: [u8; 6]) -> Result<bool, Error> {
        Ok(self.steer_maps()?.del(mac))
    }

    /// Per-queue steering counters (empty without steering).
    pub fn steer_stats(&self) -> Vec<SteerStats> {
        self.steer.as_ref().map_or_else(Vec::new, |m| {
            m.stats()
                .into_iter()
                .map(|(arrived, steered)| SteerStats { arrived, steered })
                .collect()
        })
    }

    /// Whether the program writes metadata marks.
    pub fn marks(&self) -> bool {
        self.marks.is_some()
    }

    /// Marks frames of the IPv4 5-tuple `t` with `mark` (not 0), replacing an entry.
    pub fn mark_set(&self, t: &FiveTuple, mark: u32) -> Result<(), Error> {
        self.mark_map()?.set(t, mark)
    }

    /// Removes `t`'s mark; true if it had one.
    pub fn mark_del(&self, t: &FiveTuple) -> Result<bool, Error> {
        Ok(self.mark_map()?.del(t))
    }

    fn mark_map(&self) -> Result<&MarkMap, Error> {
        self.marks
            .as_ref()
            .ok_or_else(|| Error(format!("{}: xdp-mark is off", self.ifname)))
    }

    fn steer_maps(&self) -> Result<&SteerMaps, Error> {
        self.steer
            .as_ref()
            .ok_or_else(|| Error(format!("{}: xdp-steering is off", self.ifname)))
    }

    /// The mode in use.
    pub fn mode(&self) -> ModeInUse {
        self.mode
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// True while the interface still exists under its name and index and is up and running
    /// (a control-plane query: two system calls).
    pub fn running(&self) -> bool {
        let same = sys::ifindex(&self.ifname).is_ok_and(|i| i == self.ifindex);
        let flags = sys::if_flags(&self.ifname).unwrap_or(0);
        let want = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        same && flags & want == want
    }

    /// How many programs of an earlier Vireo were detached from the interface at open.
    pub fn replaced(&self) -> usize {
        self.replaced
    }

    /// Takes the queues out (the device keeps the program attached until it is dropped).
    pub fn take_queues(&mut self) -> Vec<(RxSide, TxSide)> {
        std::mem::take(&mut self.queues)
    }

    /// Takes the steering sockets out: per queue, one rx half per steering target.
    pub fn take_steered(&mut self) -> Vec<Vec<RxSide>> {
        std::mem::take(&mut self.steered)
    }
}

fn bind_retrying(s: &Socket, ifindex: u32, q: u32, flags: u16) -> std::io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        match s.bind(ifindex, q, flags) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < BUSY_RETRY => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

impl RxSide {
    /// The kernel's drop counters for this queue's socket.
    pub fn queue_stats(&self) -> QueueStats {
        self.kernel_stats()
            .map(|s| QueueStats {
                rx_dropped: s.rx_dropped,
                rx_ring_full: s.rx_ring_full,
                rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
                tx_invalid_descs: s.tx_invalid_descs,
            })
            .unwrap_or_default()
    }
}
