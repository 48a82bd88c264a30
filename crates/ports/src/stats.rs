//! Port counters: lock-free atomics written by the PMD threads (each into its own shard),
//! summed when the control thread reads them.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a port dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropReason {
    /// Link down or peer not ready.
    LinkDown,
    /// The peer's ring or queue had no room.
    QueueFull,
    /// The frame was larger than the peer's buffers.
    TooBig,
    /// The guest or frontend gave malformed descriptors or headers.
    Malformed,
    /// The queue was disabled after a protocol violation.
    QueueBroken,
    /// The guest memory the packet was in (or was going to) shrank or vanished under its
    /// mapping (vhost-user: the frontend truncated its memory file).
    MemoryLost,
    /// Left unsent because the burst ended early: the guest's descriptors used up the burst's
    /// descriptor budget, or an earlier packet of the burst found no room in its buffers.
    BurstCut,
    /// Over the port's ingress policing or egress policer rate (counted by the datapath's
    /// policer and added to the port's counters when they are read).
    Policed,
    /// The sender's virtio-net header asked for a partial checksum it had not negotiated, or
    /// put the checksum field outside the frame.
    VnetBadCsum,
    /// The sender's virtio-net header named a GSO type not negotiated or unknown (UDP, ECN),
    /// or GSO without a partial checksum.
    VnetBadGsoType,
    /// A GSO frame that is not the TCP frame its header says, or a zero or oversize
    /// `gso_size`.
    VnetBadGso,
    /// A GSO frame above 64 KB plus headers, or needing more segments than the cap.
    VnetGsoTooBig,
    /// Output to a `remote_ip=flow` tunnel port with no `tun_dst` set by the pipeline.
    NoTunnelDst,
}

/// Every reason, in declaration order (so `reason as usize` indexes `PortCounters::drops`).
const REASONS: [DropReason; 13] = [
    DropReason::LinkDown,
    DropReason::QueueFull,
    DropReason::TooBig,
    DropReason::Malformed,
    DropReason::QueueBroken,
    DropReason::MemoryLost,
    DropReason::BurstCut,
    DropReason::Policed,
    DropReason::VnetBadCsum,
    DropReason::VnetBadGsoType,
    DropReason::VnetBadGso,
    DropReason::VnetGsoTooBig,
    DropReason::NoTunnelDst,
];

/// Counter shards per port: one per PMD (by its dense tx queue id, [`set_thread_shard`]) plus
/// shard 0 for every other thread, so no two PMDs write the same cache line of a port's
/// counters. PMDs beyond this many share shards (still correct: the counters are atomics).
pub const SHARDS: usize = 16;

std::thread_local! {
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes the calling thread count into shard `i % SHARDS` of every port's counters (PMD
/// threads: their dense position + 1; other threads keep shard 0).
pub fn set_thread_shard(i: usize) {
    SHARD.with(|s| s.set(i % SHARDS));
}

#[inline(always)]
fn shard_index() -> usize {
    SHARD.with(|s| s.get())
}

/// One thread's share of a port's counters, on cache lines of its own.
#[derive(Default, Debug)]
#[repr(align(128))]
struct Shard {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    rx_errors: AtomicU64,
    tx_errors: AtomicU64,
    drops: [AtomicU64; 13],
    budget_cuts: AtomicU64,
    rx_one_copy: AtomicU64,
    tx_one_copy: AtomicU64,
}

/// Live counters of one port, sharded per writing thread and summed on read.
#[derive(Default, Debug)]
pub struct PortCounters {
    shards: [Shard; SHARDS],
}

impl PortCounters {
    #[inline(always)]
    fn mine(&self) -> &Shard {
        // `shard_index` is always below SHARDS; `get` keeps the bounds check out of sight.
        self.shards.get(shard_index()).unwrap_or(&self.shards[0])
    }

    /// Adds received packets.
    #[inline]
    pub fn rx(&self, packets: u64, bytes: u64) {
        let s = self.mine();
        s.rx_packets.fetch_add(packets, Relaxed);
        s.rx_bytes.fetch_add(bytes, Relaxed);
    }

    /// Adds sent packets.
    #[inline]
    pub fn tx(&self, packets: u64, bytes: u64) {
        let s = self.mine();
        s.tx_packets.fetch_add(packets, Relaxed);
        s.tx_bytes.fetch_add(bytes, Relaxed);
    }

    /// Adds drops for a reason.
    #[inline]
    pub fn drop(&self, reason: DropReason, n: u64) {
        self.mine().drops[reason as usize].fetch_add(n, Relaxed);
    }

    /// Adds an rx error (bad input from the peer).
    #[inline]
    pub fn rx_error(&self, n: u64) {
        self.mine().rx_errors.fetch_add(n, Relaxed);
    }

    /// Counts a burst the per-burst descriptor budget ended early (rx or tx).
    #[inline]
    pub fn budget_cut(&self) {
        self.mine().budget_cuts.fetch_add(1, Relaxed);
    }

    /// Adds packets moved with one copy (vhost-user): received with their tail left in the
    /// guest's buffer (`rx`), or sent with a tail copied straight from the sender's memory.
    #[inline]
    pub fn one_copy(&self, rx: bool, n: u64) {
        let s = self.mine();
        if rx {
            s.rx_one_copy.fetch_add(n, Relaxed);
        } else {
            s.tx_one_copy.fetch_add(n, Relaxed);
        }
    }

    /// Adds a tx error.
    #[inline]
    pub fn tx_error(&self, n: u64) {
        self.mine().tx_errors.fetch_add(n, Relaxed);
    }

    /// Adds counts a previous owner of the port had (an upgrade's old vireod), so that they
    /// go on from there (vhost-user `memory_lost` is not carried). Called by the control
    /// thread: they land in shard 0.
    pub fn preload(&self, s: &PortStats) {
        self.rx(s.rx_packets, s.rx_bytes);
        self.tx(s.tx_packets, s.tx_bytes);
        self.rx_error(s.rx_errors);
        self.tx_error(s.tx_errors);
        self.mine().budget_cuts.fetch_add(s.budget_cuts, Relaxed);
        self.one_copy(true, s.rx_one_copy);
        self.one_copy(false, s.tx_one_copy);
        for &(r, n) in &s.drops {
            self.drop(r, n);
        }
    }

    /// A consistent-enough copy for display: the sum over the shards.
    pub fn snapshot(&self) -> PortStats {
        let sum = |f: fn(&Shard) -> &AtomicU64| -> u64 {
            self.shards.iter().map(|s| f(s).load(Relaxed)).sum()
        };
        let mut drops = Vec::new();
        for (i, r) in REASONS.iter().enumerate() {
            let n: u64 = self.shards.iter().map(|s| s.drops[i].load(Relaxed)).sum();
            if n > 0 {
                drops.push((*r, n));
            }
        }
        PortStats {
            rx_packets: sum(|s| &s.rx_packets),
            rx_bytes: sum(|s| &s.rx_bytes),
            tx_packets: sum(|s| &s.tx_packets),
            tx_bytes: sum(|s| &s.tx_bytes),
            rx_errors: sum(|s| &s.rx_errors),
            tx_errors: sum(|s| &s.tx_errors),
            drops,
            memory_lost: 0,
            budget_cuts: sum(|s| &s.budget_cuts),
            rx_one_copy: sum(|s| &s.rx_one_copy),
            tx_one_copy: sum(|s| &s.tx_one_copy),
        }
    }
}

/// A copy of a port's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PortStats {
    /// Packets received from the peer.
    pub rx_packets: u64,
    /// Bytes received from the peer.
    pub rx_bytes: u64,
    /// Packets sent to the peer.
    pub tx_packets: u64,
    /// Bytes sent to the peer.
    pub tx_bytes: u64,
    /// Malformed input from the peer.
    pub rx_errors: u64,
    /// Errors sending.
    pub tx_errors: u64,
    /// Drops by reason (only reasons with a non-zero count).
    pub drops: Vec<(DropReason, u64)>,
    /// Connections given up because the peer's shared memory shrank or vanished (vhost-user).
    pub memory_lost: u64,
    /// Bursts the per-burst descriptor budget ended early (a guest posting costly chains).
    pub budget_cuts: u64,
    /// Packets received with one copy: their tail stayed in the sender's buffer until output
    /// (vhost-user, frames of at least `virtq::copy::ONE_COPY_MIN` bytes).
    pub rx_one_copy: u64,
    /// Packets sent with one copy: their tail went straight from the sender's memory into
    /// this port's guest.
    pub tx_one_copy: u64,
}

impl PortStats {
    /// Adds `n` drops for `reason` (a port kind that keeps some drop counts elsewhere).
    pub fn add_drops(&mut self, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        match self.drops.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, m)) => *m += n,
            None => self.drops.push((reason, n)),
        }
    }

    /// Total drops over all reasons.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preloaded_counts_go_on() {
        let old = PortCounters::default();
        old.rx(3, 300);
        old.tx(2, 200);
        old.drop(DropReason::QueueFull, 4);
        old.budget_cut();
        old.one_copy(true, 2);
        let carried: PortStats =
            serde_json::from_value(serde_json::to_value(old.snapshot()).unwrap()).unwrap();
        let new = PortCounters::default();
        new.rx(1, 100);
        new.drop(DropReason::QueueFull, 1);
        new.preload(&carried);
        let s = new.snapshot();
        assert_eq!((s.rx_packets, s.rx_bytes, s.tx_packets), (4, 400, 2));
        assert_eq!((s.rx_one_copy, s.tx_one_copy), (2, 0));
        assert_eq!(
            (s.drops.clone(), s.budget_cuts),
            (vec![(DropReason::QueueFull, 5)], 1)
        );
    }

    #[test]
    fn drops_are_kept_by_reason() {
        let c = PortCounters::default();
        c.drop(DropReason::QueueFull, 3);
        c.drop(DropReason::Malformed, 1);
        c.drop(DropReason::QueueFull, 2);
        c.budget_cut();
        let s = c.snapshot();
        assert_eq!(s.budget_cuts, 1);
        assert_eq!(
            s.drops,
            vec![(DropReason::QueueFull, 5), (DropReason::Malformed, 1)]
        );
        assert_eq!(s.total_drops(), 6);
    }

    #[test]
    fn threads_count_into_their_own_shards_and_reads_sum_them() {
        let c = std::sync::Arc::new(PortCounters::default());
        c.rx(1, 60);
        let ts: Vec<_> = (1..=3)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    set_thread_shard(i);
                    for _ in 0..1000 {
                        c.rx(2, 120);
                        c.tx(1, 60);
                    }
                    PortCounters::drop(&c, DropReason::QueueFull, i as u64);
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        for i in 1..=3 {
            assert_eq!(c.shards[i].rx_packets.load(Relaxed), 2000, "shard {i}");
        }
        assert_eq!(c.shards[0].rx_packets.load(Relaxed), 1);
        let s = c.snapshot();
        assert_eq!((s.rx_packets, s.rx_bytes), (6001, 360_060));
        assert_eq!((s.tx_packets, s.tx_bytes), (3000, 180_000));
        assert_eq!(s.drops, vec![(DropReason::QueueFull, 6)]);
        // Shards start on cache lines of their own.
        let a = &c.shards[0] as *const Shard as usize;
        let b = &c.shards[1] as *const Shard as usize;
        assert_eq!(b - a, std::mem::size_of::<Shard>());
        assert_eq!(a % 128, 0);
    }
}
