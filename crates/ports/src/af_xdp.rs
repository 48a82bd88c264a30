//! The `af-xdp` port kind: a kernel interface reached through AF_XDP sockets (crate `xsk`),
//! one socket per queue, frames copied between UMEM frames and `packet::Packet` buffers.
//!
//! Threads: created and shut down by the daemon's control thread. `rx_burst(q)` runs on the
//! PMD that polls rx queue `q` (`try_lock` on the queue's rx half: a PMD never waits);
//! `tx_burst` may come from any PMD and takes the tx half's lock for one burst. `shutdown`
//! (control thread) takes every half out under its lock, so a PMD that still holds the port
//! for a moment after removal finds a down link instead of a closed socket.
//!
//! Link state: `open` brings the interface up, as af-packet does (OVS's `afxdp` leaves it as
//! it is). While it is not up and running afterwards (`ip link set down`, PORT_MOD, or a veth
//! whose peer is down; the kernel then refuses AF_XDP transmit kicks with `ENETDOWN` and leaves
//! the descriptors in the tx ring, to go out whenever the link comes back), the port queues
//! nothing and counts its output as `link-down` drops. The housekeeping thread refreshes that state
//! ([`Port::maintain`], every 500 ms); receiving needs nothing: the sockets stay bound and
//! frames arrive again once the link is up. An interface that is deleted (its index gone or
//! changed) takes the port down: the housekeeping thread drops the program and sockets
//! (counted as `link_lost`, logged) and opens the interface again once one of that name exists
//! (`reopened`). Lock order: `device`, then a queue's halves; `shutdown` marks the port closed
//! before it takes `device`, so a re-open cannot follow it.
//!
//! Upgrade (`vireoctl upgrade`): the old vireod hands the device over (`dup_fds`: link,
//! program, XSKMAP, each queue's socket and UMEM memfd), stops receiving at the switch-over
//! (`hold_rx`), stops sending once the PMDs have quiesced and reads the frame books (`books`);
//! the new one `adopt`s it (every fd checked by `xsk::Device::adopt`). With steering the
//! steering sockets and maps travel too, with marks the mark map; their entries stay, and the
//! new vireod reads them back (`steer_entries`, `mark_entries`) to diff against.
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
/// What an upgrade hands over per port (`AfXdpPort::dup_fds`, `AfXdpPort::books`).
pub use xsk::{Books, DeviceFds, QueueFds};
use xsk::{Device, DeviceConfig, ModeInUse, ModeRequest, RxSide, TxSide};
pub use xsk::{FiveTuple, MARK_MAP_ENTRIES};

type Halves = (Vec<(RxSide, TxSide)>, Vec<Vec<RxSide>>);

/// Largest MTU the kind accepts on an interface (a frame must fit in one UMEM frame).
pub const MAX_MTU: u32 = xsk::MAX_MTU;

struct Queue {
    rx: Mutex<Option<RxSide>>,
    tx: Mutex<Option<TxSide>>,
    /// With `xdp-steering`: one steering socket per NUMA node (index = node).
    steer: Vec<Mutex<Option<RxSide>>>,
}

/// An AF_XDP port.
pub struct AfXdpPort {
    ifname: String,
    /// The mode of the current open (an interface re-created may take another).
    mode: Mutex<ModeInUse>,
    replaced: usize,
    queues: Vec<Queue>,
    /// NUMA nodes with a steering socket on every queue (0: no steering).
    steer_nodes: usize,
    /// The program writes metadata marks (`xdp-mark=on`).
    marks: bool,
    /// Frames received with the program's metadata.
    rx_marked: AtomicU64,
    /// Entries in the mark map and entries it refused, as vireod last set them.
    marks_installed: AtomicU64,
    marks_refused: AtomicU64,
    device: Mutex<Option<Device>>,
    /// The interface was up and running at the last look (open, [`Port::maintain`]).
    up: AtomicBool,
    /// What was opened (to open it again when the interface comes back).
    cfg: DeviceConfig,
    /// `shutdown` ran: never re-open.
    closed: AtomicBool,
    /// Times the interface disappeared / was opened again.
    link_lost: AtomicU64,
    reopened: AtomicU64,
    /// A failed re-open was logged (once per loss).
    reopen_warned: AtomicBool,
    counters: PortCounters,
    /// Set by [`AfXdpPort::hold_rx`]: the rx rings are not touched (an upgrade hands them
    /// over).
    held: AtomicBool,
    /// Set by [`AfXdpPort::books`]: the tx rings are not touched either.
    tx_held: AtomicBool,
    /// How the port came through an upgrade (`adopted`, or why it was opened anew).
    upgrade: Mutex<Option<String>>,
    bad_rx_descs: AtomicU64,
    bad_completions: AtomicU64,
    kick_errors: AtomicU64,
}

impl std::fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("ifname", &self.ifname)
            .field("mode", &*lock(&self.mode))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AfXdpPort {
    /// Opens `ifname` with `queues` queues in `mode` (`best-effort`, `native`, `generic`).
    /// Errors are one line naming the interface and the step that failed.
    pub fn open(ifname: &str, queues: usize, mode: &str) -> Result<AfXdpPort, PortError> {
        Self::open_with(ifname, queues, mode, 0, false)
    }

    /// [`AfXdpPort::open`] with XDP steering over `nodes` NUMA nodes (0: off). With steering,
    /// each interface queue `q` is `1 + nodes` rx queues of the port: `q·(1+nodes)` is the
    /// queue's own socket (any PMD polls it), `q·(1+nodes) + 1 + n` its steering socket for
    /// node `n` (a PMD on node `n` polls it; see [`Port::rxq_numa`]), and frames whose
    /// destination MAC is mapped to node `n` ([`AfXdpPort::steer_set`]) go there. With
    /// `marks`, the program writes a flow hash and mark in front of each frame and the port
    /// copies them into `packet::Meta` (`hash`, `mark`).
    pub fn open_with(
        ifname: &str,
        queues: usize,
        mode: &str,
        nodes: u32,
        marks: bool,
    ) -> Result<AfXdpPort, PortError> {
        let cfg = Self::config(ifname, queues, mode, nodes, marks)?;
        let dev = Device::open(&cfg).map_err(|e| PortError(format!("af-xdp {e}")))?;
        Self::with_device(dev, cfg)
    }

    /// The device configuration of a port (`mode` checked).
    fn config(
        ifname: &str,
        queues: usize,
        mode: &str,
        nodes: u32,
        marks: bool,
    ) -> Result<DeviceConfig, PortError> {
        let req = ModeRequest::parse(mode).ok_or_else(|| {
            PortError(format!(
                "af-xdp {ifname}: xdp-mode {mode:?} is not best-effort, native or generic"
            ))
        })?;
        Ok(DeviceConfig {
            ifname: ifname.to_string(),
            queues: queues as u32,
            mode: req,
            steer_targets: nodes,
            marks,
        })
    }

    /// Takes over `ifname`'s device from the vireod this one replaces (`vireoctl upgrade`):
    /// the same program, XSKMAP, sockets and UMEMs (`fds`), in the mode it ran (`mode_in_use`),
    /// each queue carrying on with the frame books it kept (`books`). Every fd is checked
    /// (`xsk::Device::adopt`); on failure nothing is kept and the caller opens the port anew.
    /// `nodes` and `marks` as for [`AfXdpPort::open_with`]: they must match what was handed
    /// over.
    pub fn adopt(
        ifname: &str,
        queues: usize,
        mode: &str,
        mode_in_use: &str,
        (nodes, marks): (u32, bool),
        fds: xsk::DeviceFds,
        books: &[xsk::Books],
    ) -> Result<AfXdpPort, PortError> {
        let cfg = Self::config(ifname, queues, mode, nodes, marks)?;
        let in_use = ModeInUse::parse(mode_in_use).ok_or_else(|| {
            PortError(format!(
                "af-xdp {ifname}: unknown mode {mode_in_use:?} handed over"
            ))
        })?;
        let dev = Device::adopt(&cfg, in_use, fds, books)
            .map_err(|e| PortError(format!("af-xdp {e}")))?;
        let p = Self::with_device(dev, cfg)?;
        *lock(&p.upgrade) = Some("adopted".into());
        Ok(p)
    }

    /// Duplicates of the device's fds and its mode, to hand it to the next vireod (an error
    /// for a port whose interface is gone: it is opened anew there).
    pub fn dup_fds(&self) -> Result<(xsk::DeviceFds, &'static str), PortError> {
        let e = |e: xsk::Error| PortError(format!("af-xdp {}: {e}", self.ifname));
        let dev = lock(&self.device);
        let d = dev
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: no device open", self.ifname)))?;
        let (link, prog, map) = d.dup_program().map_err(e)?;
        let (steer, marks) = d.dup_maps().map_err(e)?;
        let closed = || PortError(format!("af-xdp {}: queue closed", self.ifname));
        let mut queues = Vec::new();
        for q in &self.queues {
            let rx = lock(&q.rx);
            let mut fds = rx.as_ref().ok_or_else(closed)?.dup_fds().map_err(e)?;
            for s in &q.steer {
                let s = lock(s);
                fds.steered
                    .push(s.as_ref().ok_or_else(closed)?.dup_steering().map_err(e)?);
            }
            queues.push(fds);
        }
        Ok((
            xsk::DeviceFds {
                link,
                prog,
                map,
                queues,
                steer,
                marks,
            },
            d.mode().name(),
        ))
    }

    /// Stops (or resumes) receiving: at an upgrade's switch-over the old vireod leaves what
    /// arrives in the rx rings for the new one, which maps the same rings and UMEMs. Sending
    /// goes on (the PMDs send what they had taken) until [`AfXdpPort::books`]; resuming
    /// resumes both.
    pub fn hold_rx(&self, on: bool) {
        self.held.store(on, Relaxed);
        if !on {
            self.tx_held.store(false, Relaxed);
        }
    }

    /// Stops sending too and reads each queue's frame books (frames this process holds)
    /// under the halves' locks: no PMD changes them afterwards (a frame to send is dropped
    /// as `link-down`; the PMDs are quiesced by then).
    pub fn books(&self) -> Vec<xsk::Books> {
        self.tx_held.store(true, Relaxed);
        self.queues
            .iter()
            .map(|q| xsk::Books {
                rx_free: lock(&q.rx)
                    .as_ref()
                    .map(|r| r.free_frames())
                    .unwrap_or_default(),
                tx_free: lock(&q.tx)
                    .as_ref()
                    .map(|t| t.free_frames())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Records how the port came through an upgrade (shown in `status` as `upgrade`); a port
    /// opened anew because its hand-over failed says why.
    pub fn note_upgrade(&self, note: String) {
        *lock(&self.upgrade) = Some(note);
    }

    fn with_device(mut dev: Device, cfg: DeviceConfig) -> Result<AfXdpPort, PortError> {
        let ifname = cfg.ifname.as_str();
        let (nodes, marks) = (cfg.steer_targets, cfg.marks);
        let cfg_kept = cfg.clone();
        // As for af-packet: the interface is on a bridge, so it is up (a veth whose host end
        // stays down gives its peer no carrier, and nothing would ever arrive).
        crate::sys::if_up(ifname)
            .map_err(|e| PortError(format!("af-xdp {ifname}: cannot bring it up: {e}")))?;
        let mut steered = dev.take_steered().into_iter();
        let queues = dev
            .take_queues()
            .into_iter()
            .map(|(rx, tx)| Queue {
                rx: Mutex::new(Some(rx)),
                tx: Mutex::new(Some(tx)),
                steer: steered
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| Mutex::new(Some(r)))
                    .collect(),
            })
            .collect();
        let up = AtomicBool::new(dev.running());
        Ok(AfXdpPort {
            ifname: ifname.to_string(),
            up,
            cfg: cfg_kept,
            closed: AtomicBool::new(false),
            link_lost: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
            reopen_warned: AtomicBool::new(false),
            mode: Mutex::new(dev.mode()),
            replaced: dev.replaced(),
            queues,
            steer_nodes: nodes as usize,
            marks,
            rx_marked: AtomicU64::new(0),
            marks_installed: AtomicU64::new(0),
            marks_refused: AtomicU64::new(0),
            device: Mutex::new(Some(dev)),
            counters: PortCounters::default(),
            held: AtomicBool::new(false),
            tx_held: AtomicBool::new(false),
            upgrade: Mutex::new(None),
            bad_rx_descs: AtomicU64::new(0),
            bad_completions: AtomicU64::new(0),
            kick_errors: AtomicU64::new(0),
        })
    }

    /// The XDP mode in use.
    pub fn mode(&self) -> ModeInUse {
        *lock(&self.mode)
    }

    /// Detaches the program, closes the sockets and unmaps the UMEMs (frames in flight go
    /// with them). Also done on drop; calling it twice is harmless.
    pub fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        // Program first: the kernel stops redirecting before the sockets go.
        drop(lock(&self.device).take());
        self.drop_halves();
    }

    /// Closes every socket half (the caller dropped the device, and with it the program).
    fn drop_halves(&self) {
        for q in &self.queues {
            drop(lock(&q.rx).take());
            drop(lock(&q.tx).take());
            for s in &q.steer {
                drop(lock(s).take());
            }
        }
    }

    /// Puts a re-opened device's socket halves in the queues' slots.
    fn install(&self, (queues, steered): Halves) {
        let mut steered = steered.into_iter();
        for (q, (rx, tx)) in self.queues.iter().zip(queues) {
            *lock(&q.rx) = Some(rx);
            *lock(&q.tx) = Some(tx);
            for (slot, r) in q.steer.iter().zip(steered.next().unwrap_or_default()) {
                *lock(slot) = Some(r);
            }
        }
    }

    /// Housekeeping: notices a deleted interface (drops program and sockets) and opens the
    /// interface again once it exists. Returns whether it is up and running now.
    fn follow_interface(&self) -> bool {
        let mut dev = lock(&self.device);
        if self.closed.load(Relaxed) {
            return false;
        }
        let now = crate::sys::if_index(&self.ifname).ok();
        if dev.as_ref().is_some_and(|d| Some(d.ifindex()) != now) {
            drop(dev.take());
            self.drop_halves();
            self.link_lost.fetch_add(1, Relaxed);
            self.reopen_warned.store(false, Relaxed);
            tracing::warn!(ifname = %self.ifname, "interface gone: af-xdp port link down");
        }
        if dev.is_none() && now.is_some() {
            match Device::open(&self.cfg) {
                Ok(mut d) => {
                    let halves = (d.take_queues(), d.take_steered());
                    self.install(halves);
                    if let Err(e) = crate::sys::if_up(&self.ifname) {
                        tracing::warn!(ifname = %self.ifname, error = %e, "cannot bring it up");
                    }
                    let mode = d.mode();
                    *lock(&self.mode) = mode;
                    *dev = Some(d);
                    self.reopened.fetch_add(1, Relaxed);
                    tracing::info!(ifname = %self.ifname, mode = mode.name(), "interface back: af-xdp port re-opened");
                }
                Err(e) => {
                    if !self.reopen_warned.swap(true, Relaxed) {
                        tracing::warn!(ifname = %self.ifname, error = %e, "cannot re-open");
                    }
                }
            }
        }
        dev.as_ref().is_some_and(|d| d.running())
    }

    /// NUMA nodes steered to (0: `xdp-steering` off).
    pub fn steer_nodes(&self) -> usize {
        self.steer_nodes
    }

    /// Steers frames whose destination MAC is `mac` to the steering sockets of `node`
    /// (replacing an entry). Control thread only (one `bpf()` call).
    pub fn steer_set(&self, mac: [u8; 6], node: usize) -> Result<(), PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.steer_set(mac, node as u32)
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// What the steering map holds: MAC → node (an adopted port keeps the old vireod's).
    pub fn steer_entries(&self) -> Result<Vec<([u8; 6], usize)>, PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.steer_entries()
            .map(|v| v.into_iter().map(|(m, t)| (m, t as usize)).collect())
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// What the mark map holds: 5-tuple → mark (an adopted port keeps the old vireod's).
    pub fn mark_entries(&self) -> Result<Vec<(xsk::FiveTuple, u32)>, PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.mark_entries()
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// Whether the program writes metadata marks (`xdp-mark=on`).
    pub fn marks(&self) -> bool {
        self.marks
    }

    /// Times the interface was opened again: each open starts with an empty mark map.
    pub fn opens(&self) -> u64 {
        self.reopened.load(Relaxed)
    }

    /// Marks frames of the IPv4 5-tuple `t` with `mark` (not 0), replacing an entry. Control
    /// thread only (one `bpf()` call).
    pub fn mark_set(&self, t: &xsk::FiveTuple, mark: u32) -> Result<(), PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.mark_set(t, mark)
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// Records how many marks the map holds and how many it refused (for `show`).
    pub fn set_marks_installed(&self, n: usize, refused: u64) {
        self.marks_installed.store(n as u64, Relaxed);
        self.marks_refused.store(refused, Relaxed);
    }

    /// Removes `t`'s mark; true if it had one.
    pub fn mark_del(&self, t: &xsk::FiveTuple) -> Result<bool, PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.mark_del(t)
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// Stops steering `mac`; true if it had an entry.
    pub fn steer_del(&self, mac: [u8; 6]) -> Result<bool, PortError> {
        let d = lock(&self.device);
        let d = d
            .as_ref()
            .ok_or_else(|| PortError(format!("af-xdp {}: port is shut down", self.ifname)))?;
        d.steer_del(mac)
            .map_err(|e| PortError(format!("af-xdp {}: {e}", self.ifname)))
    }

    /// The rx half behind port rx queue `i`.
    fn rx_slot(&self, i: usize) -> Option<&Mutex<Option<RxSide>>> {
        let per = 1 + self.steer_nodes;
        let q = self.queues.get(i / per)?;
        match i % per {
            0 => Some(&q.rx),
            k => q.steer.get(k - 1),
        }
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Port for AfXdpPort {
    fn kind(&self) -> &'static str {
        "af-xdp"
    }

    fn n_rxq(&self) -> usize {
        self.queues.len() * (1 + self.steer_nodes)
    }

    fn rxq_numa(&self, q: usize) -> Option<usize> {
        match q % (1 + self.steer_nodes) {
            0 => None,
            k => Some(k - 1),
        }
    }

    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let Some(slot) = self.rx_slot(q) else {
            return 0;
        };
        let Ok(mut guard) = slot.try_lock() else {
            return 0;
        };
        let Some(rx) = guard.as_mut().filter(|_| !self.held.load(Relaxed)) else {
            return 0;
        };
        let b = rx.recv_meta(out.room() as u32, |frame, meta| {
            let mut p = pool.get();
            p.set_frame(frame);
            if let Some(m) = meta {
                p.meta.hash = m.hash;
                p.meta.mark = m.mark;
            }
            // Cannot fail: at most `room` frames are delivered.
            let _ = out.push(p);
        });
        drop(guard);
        if b.packets > 0 {
            self.counters.rx(u64::from(b.packets), b.bytes);
        }
        if b.bad_descs > 0 {
            self.counters
                .drop(DropReason::Malformed, u64::from(b.bad_descs));
            self.counters.rx_error(u64::from(b.bad_descs));
            self.bad_rx_descs.fetch_add(u64::from(b.bad_descs), Relaxed);
        }
        if b.kick_errors > 0 {
            self.kick_errors
                .fetch_add(u64::from(b.kick_errors), Relaxed);
        }
        if b.marked > 0 {
            self.rx_marked.fetch_add(u64::from(b.marked), Relaxed);
        }
        b.packets as usize
    }

    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let n = self.queues.len();
        let queue = &self.queues[q % n];
        let mut guard = lock(&queue.tx);
        let Some(tx) = guard
            .as_mut()
            .filter(|_| self.up.load(Relaxed) && !self.tx_held.load(Relaxed))
        else {
            drop(guard);
            self.counters.drop(DropReason::LinkDown, pkts.len() as u64);
            return 0;
        };
        let b = tx.send(pkts.as_slice().iter().map(|p| p.data()));
        drop(guard);
        if b.packets > 0 {
            self.counters.tx(u64::from(b.packets), b.bytes);
        }
        for (k, why) in [
            (b.full, DropReason::QueueFull),
            (b.too_big, DropReason::TooBig),
        ] {
            if k > 0 {
                self.counters.drop(why, u64::from(k));
            }
        }
        if b.bad_completions > 0 {
            self.counters.tx_error(u64::from(b.bad_completions));
            self.bad_completions
                .fetch_add(u64::from(b.bad_completions), Relaxed);
        }
        if b.kick_errors > 0 {
            self.counters.tx_error(u64::from(b.kick_errors));
            self.kick_errors
                .fetch_add(u64::from(b.kick_errors), Relaxed);
        }
        b.packets as usize
    }

    fn link(&self) -> Link {
        match lock(&self.device).as_ref() {
            Some(d) if d.running() => Link::Up,
            _ => Link::Down,
        }
    }

    fn set_admin_up(&self, up: bool) -> Result<(), PortError> {
        crate::set_admin(&self.ifname, up)
    }

    fn maintain(&self) {
        let running = self.follow_interface();
        if self.up.swap(running, Relaxed) != running {
            tracing::info!(ifname = %self.ifname, up = running, "af-xdp link changed");
        }
    }

    fn preload_stats(&self, s: &PortStats) {
        self.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        self.counters.snapshot()
    }

    fn status(&self) -> serde_json::Value {
        let queues: Vec<serde_json::Value> = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                // The rx half is the PMD's; wait for at most one burst.
                let rx = lock(&q.rx);
                let tx = lock(&q.tx);
                let ks = rx.as_ref().map(|r| r.queue_stats()).unwrap_or_default();
                let (rx_ours, rx_kernel) = rx.as_ref().map_or((0, 0), |r| r.frames());
                let (tx_ours, tx_kernel) = tx.as_ref().map_or((0, 0), |t| t.frames());
                serde_json::json!({
                    "queue": i,
                    "rx_frames_free": rx_ours, "rx_frames_in_kernel": rx_kernel,
                    "tx_frames_free": tx_ours, "tx_frames_in_kernel": tx_kernel,
                    "kernel_rx_dropped": ks.rx_dropped,
                    "kernel_rx_ring_full": ks.rx_ring_full,
                    "kernel_rx_fill_ring_empty": ks.rx_fill_ring_empty,
                    "kernel_tx_invalid_descs": ks.tx_invalid_descs,
                })
            })
            .collect();
        let steer: Vec<serde_json::Value> = lock(&self.device)
            .as_ref()
            .map(|d| d.steer_stats())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(q, s)| {
                serde_json::json!({"queue": q, "arrived": s.arrived, "steered_to_node": s.steered})
            })
            .collect();
        serde_json::json!({
            "ifname": self.ifname,
            "xdp_steering": if self.steer_nodes > 0 { "on" } else { "off" },
            "xdp_mark": if self.marks { "on" } else { "off" },
            "rx_marked": self.rx_marked.load(Relaxed),
            "xdp_marks": self.marks_installed.load(Relaxed),
            "xdp_marks_refused": self.marks_refused.load(Relaxed),
            "steering": steer,
            "xdp_mode": self.mode().name(),
            "queues": self.queues.len(),
            "replaced_programs": self.replaced,
            "link_lost": self.link_lost.load(Relaxed),
            "reopened": self.reopened.load(Relaxed),
            "upgrade": *lock(&self.upgrade),
            "bad_rx_descs": self.bad_rx_descs.load(Relaxed),
            "bad_completions": self.bad_completions.load(Relaxed),
            "kick_errors": self.kick_errors.load(Relaxed),
            "rings": queues,
        })
    }
}
