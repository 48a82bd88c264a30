//! What the PMD threads see of a vhost-user device: one slot per virtqueue holding the running
//! queue (if any), and atomics for link state, negotiated features and counters.
//!
//! Threads: PMDs call [`Device::rx_burst`] / [`Device::tx_burst`]; the control thread installs
//! and removes queues (and thereby memory tables) under the slot's lock, holding it only to swap
//! the `Option` — never across I/O. Lock order: one slot at a time. rx takes the slot with
//! `try_lock` (a PMD never waits for the control thread: it skips the burst); tx uses `lock`
//! because tx bursts from several PMDs to one virtqueue must serialize (uncontended in the
//! usual case, held for one burst). The mutex is not fair, so a PMD bursting back to back could
//! starve the control thread; the control thread raises the slot's `wanted` flag first, and
//! PMDs skip a slot while it is raised (a few microseconds).
//!
//! Lost guest memory: after every access to guest memory (a burst, a status read) the thread
//! that made it checks the table's `poisoned` flag (see `guestmem::lost`: the frontend's file
//! shrank or vanished and the mapping now holds zero pages). A PMD that finds it drops that
//! burst's packets (counted in [`DeviceStats::memory_lost_drops`]) and raises the device's
//! `lost` flag; from then on every burst skips the device, without waiting on anything. The
//! control thread sees the flag within one poll tick, logs it, closes the connection and clears
//! the flag once every queue is stopped, so the frontend can reconnect with fresh memory.
use guestmem::GuestMemory;
use packet::{Batch, Pool};
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex, TryLockError};
use virtq::{Burst, VirtQueue};

/// The one-copy threshold for guest tx queues: `VIREO_ONE_COPY_MIN` (bytes; 0 turns one copy
/// off) if set, read once, else `None` (virtq's default). A knob for measuring the threshold
/// (BENCHMARKS.md), not a configuration.
pub fn one_copy_min() -> Option<usize> {
    static MIN: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("VIREO_ONE_COPY_MIN")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    })
}

/// A running virtqueue and its interrupt eventfd.
#[derive(Debug)]
pub struct Running {
    /// The device-side ring (split or packed).
    pub queue: VirtQueue,
    /// Call eventfd (written at most once per burst when the driver wants it).
    pub call: Option<Arc<File>>,
}

impl Running {
    #[inline]
    fn notify(&self, b: &Burst) {
        if b.notify {
            if let Some(f) = &self.call {
                // A full eventfd counter (EAGAIN) still leaves the driver notified.
                let _ = (&**f).write(&1u64.to_ne_bytes());
            }
        }
    }
}

/// One running ring's indices (see [`Device::ring_states`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingState {
    /// Virtqueue number (even: guest rx, odd: guest tx).
    pub vring: usize,
    /// Entries.
    pub size: u16,
    /// Packed ring (indices carry their wrap counter in bit 15).
    pub packed: bool,
    /// The avail index the driver published (None: unreadable, or a packed ring, which has
    /// no such index).
    pub driver_avail: Option<u16>,
    /// The next avail entry this device takes (packed: position, wrap counter in bit 15).
    pub last_avail: u16,
    /// The used index this device published (packed: position, wrap counter in bit 15).
    pub used: u16,
    /// Broken by a driver error.
    pub broken: bool,
}

/// How many of `rings` are broken (a status report that already holds the ring states counts
/// them here instead of reading every ring again).
pub fn broken_count(rings: &[RingState]) -> usize {
    rings.iter().filter(|r| r.broken).count()
}

/// Connection state for status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Server mode, waiting for a frontend.
    Listening = 0,
    /// Client mode, trying to connect.
    Connecting = 1,
    /// A frontend is connected.
    Connected = 2,
    /// Shut down.
    Stopped = 3,
}

impl ConnState {
    /// Name for status output.
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Listening => "listening",
            ConnState::Connecting => "connecting",
            ConnState::Connected => "connected",
            ConnState::Stopped => "stopped",
        }
    }
}

/// Counters and state of a device, readable from any thread.
#[derive(Debug, Default)]
pub struct DeviceStats {
    /// Queues found broken (each counted once).
    pub broken_queues: AtomicU64,
    /// Protocol messages refused.
    pub protocol_errors: AtomicU64,
    /// Connections accepted or made.
    pub connections: AtomicU64,
    /// Connections closed because their guest memory shrank or vanished.
    pub memory_lost: AtomicU64,
    /// Packets dropped because the guest memory they were in (or were going to) was lost.
    pub memory_lost_drops: AtomicU64,
}

/// The guest memory region that was found lost (for the log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostRegion {
    /// Index in the memory table.
    pub index: usize,
    /// Guest-physical start.
    pub guest_phys_addr: u64,
    /// Size in bytes.
    pub size: u64,
}

/// The PMD-facing half of a vhost-user device.
#[derive(Debug)]
pub struct Device {
    pairs: usize,
    slots: Box<[Mutex<Option<Running>>]>,
    /// Per slot: the control thread wants the lock; PMDs stay away.
    wanted: Box<[AtomicBool]>,
    /// Bit p set: both rings of pair p are running.
    running_pairs: AtomicU32,
    features: AtomicU64,
    protocol_features: AtomicU64,
    state: AtomicU8,
    /// NUMA node of the guest memory + 1 (0: unknown).
    numa: AtomicU32,
    /// The connection's guest memory was lost: every burst skips the device until the control
    /// thread has closed the connection and stopped every queue.
    lost: AtomicBool,
    /// Which region: index + 1 (0: not known), guest-physical start, size.
    lost_region: [AtomicU64; 3],
    /// Whether checksum and TSO offloads are offered to frontends (a port option).
    offloads: bool,
    /// Counters.
    pub stats: DeviceStats,
}

impl Device {
    /// A device with `pairs` queue pairs (virtqueues `2p` = guest rx, `2p + 1` = guest tx),
    /// offering offloads.
    pub fn new(pairs: usize) -> Device {
        Device::with_offloads(pairs, true)
    }

    /// [`Device::new`], offering checksum and TSO offloads only if `offloads`.
    pub fn with_offloads(pairs: usize, offloads: bool) -> Device {
        Device {
            offloads,
            pairs,
            slots: (0..pairs * 2).map(|_| Mutex::new(None)).collect(),
            wanted: (0..pairs * 2).map(|_| AtomicBool::new(false)).collect(),
            running_pairs: AtomicU32::new(0),
            features: AtomicU64::new(0),
            protocol_features: AtomicU64::new(0),
            state: AtomicU8::new(ConnState::Stopped as u8),
            numa: AtomicU32::new(0),
            lost: AtomicBool::new(false),
            lost_region: Default::default(),
            stats: DeviceStats::default(),
        }
    }

    /// Configured queue pairs.
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// Virtqueues (2 per pair).
    pub fn n_vrings(&self) -> usize {
        self.slots.len()
    }

    /// Pairs running now (both rings), counted from pair 0 up to the first that is not.
    #[inline]
    pub fn running_pairs(&self) -> usize {
        self.running_pairs.load(Relaxed).trailing_ones() as usize
    }

    /// Bitmask of running pairs.
    pub fn running_mask(&self) -> u32 {
        self.running_pairs.load(Relaxed)
    }

    /// Negotiated virtio features (0 when not connected).
    pub fn features(&self) -> u64 {
        self.features.load(Relaxed)
    }

    /// Whether offloads are offered to frontends.
    pub fn offloads_offered(&self) -> bool {
        self.offloads
    }

    /// What the frontend's rx queues take (from the negotiated features): a packet needing
    /// more is completed in software before it is sent here.
    #[inline]
    pub fn guest_offloads(&self) -> packet::vnet::Offloads {
        crate::backend::guest_offloads(self.features())
    }

    /// Negotiated protocol features.
    pub fn protocol_features(&self) -> u64 {
        self.protocol_features.load(Relaxed)
    }

    /// Connection state.
    pub fn conn_state(&self) -> ConnState {
        match self.state.load(Relaxed) {
            0 => ConnState::Listening,
            1 => ConnState::Connecting,
            2 => ConnState::Connected,
            _ => ConnState::Stopped,
        }
    }

    /// NUMA node of the current guest memory, if known.
    pub fn numa_node(&self) -> Option<usize> {
        (self.numa.load(Relaxed) as usize).checked_sub(1)
    }

    pub(crate) fn set_numa_node(&self, n: Option<usize>) {
        self.numa.store(n.map_or(0, |n| n as u32 + 1), Relaxed);
    }

    pub(crate) fn set_conn_state(&self, s: ConnState) {
        self.state.store(s as u8, Relaxed);
    }

    pub(crate) fn set_features(&self, f: u64, pf: u64) {
        self.features.store(f, Relaxed);
        self.protocol_features.store(pf, Relaxed);
    }

    /// True once the connection's guest memory was found lost (until the control thread has
    /// closed that connection).
    #[inline]
    pub fn memory_lost(&self) -> bool {
        self.lost.load(Acquire)
    }

    /// The region found lost, if known.
    pub fn lost_region(&self) -> Option<LostRegion> {
        let index = (self.lost_region[0].load(Relaxed) as usize).checked_sub(1)?;
        Some(LostRegion {
            index,
            guest_phys_addr: self.lost_region[1].load(Relaxed),
            size: self.lost_region[2].load(Relaxed),
        })
    }

    /// Any thread: `mem` (this connection's table) was found poisoned. No locks, no allocation.
    pub(crate) fn lose(&self, mem: &GuestMemory) {
        if let Some((i, spec)) = mem.lost_region() {
            self.lost_region[1].store(spec.guest_phys_addr, Relaxed);
            self.lost_region[2].store(spec.memory_size, Relaxed);
            self.lost_region[0].store(i as u64 + 1, Relaxed);
        }
        self.lost.store(true, Release);
    }

    /// Control thread, with every queue stopped (no PMD can raise it again for the old table).
    pub(crate) fn clear_lost(&self) {
        self.lost.store(false, Release);
        self.lost_region[0].store(0, Relaxed);
    }

    fn lock_slot(&self, vring: usize) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.slots[vring].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Control thread: runs `f` on the slot of `vring` with PMDs kept away (a hold raised
    /// with [`Device::hold_rx`] stays raised).
    fn with_slot<T>(&self, vring: usize, f: impl FnOnce(&mut Option<Running>) -> T) -> T {
        let held = self.wanted[vring].swap(true, Relaxed);
        let r = f(&mut self.lock_slot(vring));
        self.wanted[vring].store(held, Relaxed);
        r
    }

    /// Handover: keeps PMDs from taking anything from the guest's tx virtqueues (`on`) or lets
    /// them again. Sends to the guest are not affected and the pairs stay running, so a
    /// packet already taken from another port is still delivered.
    pub(crate) fn hold_rx(&self, on: bool) {
        for i in (1..self.wanted.len()).step_by(2) {
            self.wanted[i].store(on, Relaxed);
        }
    }

    /// Reads the slot of `vring` for a status report. Unlike [`Self::with_slot`] it does not
    /// ask PMDs to stay away (a PMD that finds the slot wanted drops its tx burst as link
    /// down): a PMD that meets the lock here skips one rx poll or waits a moment to send,
    /// and no packet is lost to someone looking.
    fn peek_slot<T>(&self, vring: usize, f: impl FnOnce(&Option<Running>) -> T) -> T {
        f(&self.lock_slot(vring))
    }

    /// Control thread: removes the running queue of `vring`, if any, with the chains it held
    /// for one-copy tails returned first (the queue is at rest: its used index is where its
    /// avail index stands). A packet still holding such a tail keeps the memory table mapped
    /// by its own `Arc`; the guest may reuse that buffer now, which changes only its own
    /// payload.
    pub(crate) fn take(&self, vring: usize) -> Option<Running> {
        let r = self.with_slot(vring, |s| {
            if let Some(r) = s.as_mut() {
                r.queue.return_held();
            }
            s.take()
        });
        self.update_pair(vring / 2);
        r
    }

    /// Control thread: installs a running queue (guest tx queues dequeue large frames with one
    /// copy, see [`one_copy_min`]).
    pub(crate) fn install(&self, vring: usize, mut r: Running) {
        r.queue.set_one_copy(if vring % 2 == 1 {
            one_copy_min()
        } else {
            Some(0)
        });
        let old = self.with_slot(vring, |s| s.replace(r));
        drop(old);
        self.update_pair(vring / 2);
    }

    fn update_pair(&self, pair: usize) {
        let rx = self.peek_slot(2 * pair, Option::is_some);
        let tx = self.peek_slot(2 * pair + 1, Option::is_some);
        let up = rx && tx;
        let bit = 1u32 << pair.min(31);
        if up {
            self.running_pairs.fetch_or(bit, Relaxed);
        } else {
            self.running_pairs.fetch_and(!bit, Relaxed);
        }
    }

    #[inline]
    fn account(&self, b: &Burst) {
        if b.broke {
            self.stats.broken_queues.fetch_add(1, Relaxed);
        }
    }

    /// PMD: dequeues from the guest's tx virtqueue of `pair`. Empty if the pair is not running
    /// or the control thread holds the slot right now.
    #[inline]
    pub fn rx_burst(&self, pair: usize, pool: &mut Pool, out: &mut Batch) -> Burst {
        let Some(i) = pair
            .checked_mul(2)
            .map(|i| i + 1)
            .filter(|&i| i < self.slots.len())
        else {
            return Burst::default();
        };
        if self.wanted[i].load(Relaxed) || self.memory_lost() {
            return Burst::default();
        }
        let slot = &self.slots[i];
        let mut g = match slot.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => return Burst::default(),
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let Some(r) = g.as_mut() else {
            return Burst::default();
        };
        let before = out.len();
        let mut b = r.queue.dequeue(pool, out);
        if r.queue.mem().poisoned() {
            // What this burst copied may come from zero pages, not from the guest: drop it.
            let n = out.len().saturating_sub(before);
            for _ in 0..n {
                if let Some(p) = out.pop() {
                    pool.put(p);
                }
            }
            // Every packet this burst took (delivered or found malformed) came from lost
            // memory: count them all as such.
            let lost = u64::from(b.malformed) + u64::from(b.too_big) + n as u64;
            self.lose(r.queue.mem());
            self.stats.memory_lost_drops.fetch_add(lost, Relaxed);
            b = Burst {
                broke: b.broke,
                notify: b.notify,
                ..Burst::default()
            };
        }
        r.notify(&b);
        self.account(&b);
        b
    }

    /// PMD: enqueues `pkts` into the guest's rx virtqueue of `pair`. `None` if that pair is not
    /// running (the caller counts the packets as link-down drops).
    #[inline]
    pub fn tx_burst(&self, pair: usize, pkts: &Batch) -> Option<Burst> {
        let i = pair.checked_mul(2).filter(|&i| i < self.slots.len())?;
        if self.wanted[i].load(Relaxed) {
            return None;
        }
        if self.memory_lost() {
            self.stats
                .memory_lost_drops
                .fetch_add(pkts.len() as u64, Relaxed);
            return Some(Burst::default());
        }
        let mut g = self.lock_slot(i);
        let r = g.as_mut()?;
        let mut b = r
            .queue
            .enqueue_from(pkts.as_slice(), pkts.tails().map(|m| &**m));
        if r.queue.mem().poisoned() {
            // Whatever this burst did went to (or was decided from) zero pages the guest
            // never sees: every packet of it is lost.
            self.lose(r.queue.mem());
            self.stats
                .memory_lost_drops
                .fetch_add(pkts.len() as u64, Relaxed);
            b = Burst {
                broke: b.broke,
                notify: b.notify,
                ..Burst::default()
            };
        }
        r.notify(&b);
        self.account(&b);
        Some(b)
    }

    /// Where each running ring stands, for status reports: `(vring, size, driver's avail
    /// index, next avail to take, used index, broken)`; rings not running are left out.
    pub fn ring_states(&self) -> Vec<RingState> {
        (0..self.slots.len())
            .filter_map(|i| {
                self.peek_slot(i, |s| {
                    s.as_ref().map(|r| {
                        let driver_avail = r.queue.driver_avail_idx();
                        if r.queue.mem().poisoned() {
                            self.lose(r.queue.mem());
                        }
                        RingState {
                            vring: i,
                            size: r.queue.size(),
                            packed: r.queue.is_packed(),
                            driver_avail,
                            last_avail: r.queue.last_avail(),
                            used: r.queue.used_idx(),
                            broken: r.queue.broken().is_some() || self.memory_lost(),
                        }
                    })
                })
            })
            .collect()
    }

    /// Number of running queues that are broken now.
    pub fn broken_now(&self) -> usize {
        broken_count(&self.ring_states())
    }
}
