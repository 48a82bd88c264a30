//! One interface opened for AF_XDP: checks (interface exists, MTU fits a frame), the XSKMAP
//! and program, one socket per queue bound in the best mode the interface allows, and the
//! program attached last (so no frame is redirected before every socket is in the map).
//!
//! Threads: control thread only. Dropping the [`Device`] detaches the program (the link fd
//! closes); the sockets and their UMEMs go when their halves are dropped.
use crate::bpf::{self, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use crate::socket::Socket;
use crate::{sys, Error, RxSide, TxSide, MAX_MTU};
use std::os::fd::OwnedFd;
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
    ifname: String,
    ifindex: u32,
    mode: ModeInUse,
    // Field order is drop order: detach the program first, then the map and program fds.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    queues: Vec<(RxSide, TxSide)>,
    replaced: usize,
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
                Ok((link, prog, map, queues, replaced)) => {
                    return Ok(Device {
                        ifname: name.clone(),
                        ifindex,
                        mode,
                        _link: link,
                        _prog: prog,
                        _map: map,
                        queues,
                        replaced,
                    })
                }
                Err(e) => errors.push(format!("{}: {e}", mode.name())),
            }
        }
        Err(Error(format!("{name}: {}", errors.join("; "))))
    }

    #[allow(clippy::type_complexity)]
    fn open_in(
        cfg: &DeviceConfig,
        ifindex: u32,
        mode: ModeInUse,
    ) -> Result<(OwnedFd, OwnedFd, OwnedFd, Vec<(RxSide, TxSide)>, usize), Error> {
        let map = bpf::create_map(cfg.queues)?;
        let prog = bpf::load_program(&map)?;
        let mut socks = Vec::new();
        for q in 0..cfg.queues {
            let s = Socket::open()?;
            bind_retrying(&s, ifindex, q, mode.bind_flags())
                .map_err(|e| Error::os(format!("bind queue {q}"), e))?;
            bpf::map_set(&map, q, s.fd())?;
            socks.push(s);
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
        let queues = socks.into_iter().map(Socket::split).collect();
        Ok((link, prog, map, queues, replaced))
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
