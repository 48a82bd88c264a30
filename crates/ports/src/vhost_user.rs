//! The `vhost-user` and `vhost-user-client` port kinds: a virtio-net device served to a VM or
//! container over a vhost-user socket.
//!
//! Threads: the port owns one control thread (in `vhost::Endpoint`) for its socket; PMDs call
//! `rx_burst` (dequeue from the guest's TX virtqueue of pair `q`) and `tx_burst` (enqueue into
//! the guest's RX virtqueue of pair `q` modulo the running pairs). rx never waits; tx takes the
//! virtqueue's lock for one burst (several PMDs may send to one port).
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Pool};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use vhost::msg::feat;
use vhost::sockfile::Access;
use vhost::{Endpoint, Mode};
use virtq::Burst;

/// A vhost-user port (server or client mode).
pub struct VhostUserPort {
    ep: Endpoint,
    mode: Mode,
    counters: PortCounters,
}

impl std::fmt::Debug for VhostUserPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserPort")
            .field("path", &self.ep.path())
            .field("mode", &self.mode)
            .finish()
    }
}

impl VhostUserPort {
    fn start(
        path: &Path,
        queues: usize,
        mode: Mode,
        access: Access,
        offloads: bool,
    ) -> Result<Arc<VhostUserPort>, PortError> {
        let ep = Endpoint::start_opts(path, queues, mode, access, offloads)
            .map_err(|e| PortError(format!("vhost-user {}: {e}", path.display())))?;
        Ok(Arc::new(VhostUserPort {
            ep,
            mode,
            counters: PortCounters::default(),
        }))
    }

    /// A port around an endpoint handed over by another vireod (`vireoctl upgrade`, see
    /// `vhost::Endpoint::adopt`); its control thread starts with `Endpoint::resume`.
    pub fn adopted(ep: Endpoint, mode: Mode) -> Arc<VhostUserPort> {
        Arc::new(VhostUserPort {
            ep,
            mode,
            counters: PortCounters::default(),
        })
    }

    /// The endpoint, for a handover (park, export, resume).
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// A port listening on `path` (type `vhost-user`) with `queues` queue pairs (1..=32).
    /// A stale socket file at `path` is replaced; any other file is an error.
    pub fn server(path: &Path, queues: usize) -> Result<Arc<VhostUserPort>, PortError> {
        Self::start(path, queues, Mode::Server, Access::default(), true)
    }

    /// [`VhostUserPort::server`] with the socket file's mode and group (default 0660, the
    /// process's group). A symlink at `path` is refused, never followed.
    pub fn server_with(
        path: &Path,
        queues: usize,
        access: Access,
    ) -> Result<Arc<VhostUserPort>, PortError> {
        Self::start(path, queues, Mode::Server, access, true)
    }

    /// [`VhostUserPort::server_with`], offering checksum and TSO offloads to the frontend
    /// only if `offloads` (option `offloads=false` turns them off).
    pub fn server_opts(
        path: &Path,
        queues: usize,
        access: Access,
        offloads: bool,
    ) -> Result<Arc<VhostUserPort>, PortError> {
        Self::start(path, queues, Mode::Server, access, offloads)
    }

    /// A port connecting to `path` (type `vhost-user-client`), retrying every `reconnect_ms`
    /// for as long as the port lives, and again whenever the frontend goes away.
    pub fn client(
        path: &Path,
        queues: usize,
        reconnect_ms: u64,
    ) -> Result<Arc<VhostUserPort>, PortError> {
        Self::client_opts(path, queues, reconnect_ms, true)
    }

    /// [`VhostUserPort::client`], offering offloads only if `offloads`.
    pub fn client_opts(
        path: &Path,
        queues: usize,
        reconnect_ms: u64,
        offloads: bool,
    ) -> Result<Arc<VhostUserPort>, PortError> {
        Self::start(
            path,
            queues,
            Mode::Client { reconnect_ms },
            Access::default(),
            offloads,
        )
    }

    /// Stops the control thread, closes the connection, removes the socket file it created.
    /// Also done on drop; calling it twice is harmless. rx/tx afterwards see a down link.
    pub fn shutdown(&self) {
        self.ep.shutdown();
    }

    /// The first half of [`VhostUserPort::shutdown`]: asks the control thread to stop and
    /// removes the socket file, without waiting (safe under a lock).
    pub fn stop(&self) {
        self.ep.stop();
    }

    /// The second half: waits for the control thread (bounded; call with no lock held).
    pub fn join(&self) {
        self.ep.join();
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        self.ep.path()
    }

    #[inline]
    fn count(&self, b: &Burst, rx: bool) {
        if b.packets > 0 {
            if rx {
                self.counters.rx(u64::from(b.packets), b.bytes);
            } else {
                self.counters.tx(u64::from(b.packets), b.bytes);
            }
        }
        if b.budget_cut {
            self.counters.budget_cut();
        }
        if b.one_copy > 0 {
            self.counters.one_copy(rx, u64::from(b.one_copy));
        }
        let vnet = b.vnet.iter().fold(0, |a, n| a | n);
        let bad = b.malformed | b.too_big | b.full | b.broken_drops | b.cut | vnet;
        if bad == 0 {
            return;
        }
        if vnet != 0 {
            for (n, why) in b.vnet.iter().zip([
                DropReason::VnetBadCsum,
                DropReason::VnetBadGsoType,
                DropReason::VnetBadGso,
                DropReason::VnetGsoTooBig,
            ]) {
                if *n > 0 {
                    self.counters.drop(why, u64::from(*n));
                    self.counters.rx_error(u64::from(*n));
                }
            }
        }
        for (n, why) in [
            (b.malformed, DropReason::Malformed),
            (b.too_big, DropReason::TooBig),
            (b.full, DropReason::QueueFull),
            (b.broken_drops, DropReason::QueueBroken),
            (b.cut, DropReason::BurstCut),
        ] {
            if n > 0 {
                self.counters.drop(why, u64::from(n));
            }
        }
        if rx && b.malformed > 0 {
            self.counters.rx_error(u64::from(b.malformed));
        }
    }
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        self.ep.shutdown();
    }
}

impl Port for VhostUserPort {
    fn kind(&self) -> &'static str {
        match self.mode {
            Mode::Server => "vhost-user",
            Mode::Client { .. } => "vhost-user-client",
        }
    }

    fn n_rxq(&self) -> usize {
        self.ep.device().pairs()
    }

    fn numa_node(&self) -> Option<usize> {
        self.ep.device().numa_node()
    }

    #[inline]
    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let b = self.ep.device().rx_burst(q, pool, out);
        self.count(&b, true);
        b.packets as usize
    }

    #[inline]
    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let dev = self.ep.device();
        let n = dev.running_pairs();
        let b = if n == 0 {
            None
        } else {
            dev.tx_burst(q % n, pkts)
        };
        match b {
            Some(b) => {
                self.count(&b, false);
                b.packets as usize
            }
            None => {
                self.counters.drop(DropReason::LinkDown, pkts.len() as u64);
                0
            }
        }
    }

    #[inline]
    fn tx_offloads(&self) -> packet::vnet::Offloads {
        self.ep.device().guest_offloads()
    }

    #[inline]
    fn takes_tails(&self) -> bool {
        true
    }

    fn link(&self) -> Link {
        if self.ep.device().running_mask() != 0 {
            Link::Up
        } else {
            Link::Down
        }
    }

    fn preload_stats(&self, s: &PortStats) {
        self.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        let mut s = self.counters.snapshot();
        // Lost guest memory is found below the port (in the device, by PMDs and the control
        // thread), so it is counted there.
        let d = &self.ep.device().stats;
        s.add_drops(DropReason::MemoryLost, d.memory_lost_drops.load(Relaxed));
        s.memory_lost = d.memory_lost.load(Relaxed);
        s
    }

    fn status(&self) -> serde_json::Value {
        let dev = self.ep.device();
        let s = &dev.stats;
        let rings = dev.ring_states();
        serde_json::json!({
            "path": self.ep.path().display().to_string(),
            "mode": match self.mode { Mode::Server => "server", Mode::Client { .. } => "client" },
            "state": dev.conn_state().name(),
            "features": feat::names(dev.features()),
            "protocol_features": feat::protocol_names(dev.protocol_features()),
            "queues": dev.pairs(),
            "numa_node": dev.numa_node(),
            "running_queue_pairs": dev.running_mask().count_ones(),
            "broken_queues": s.broken_queues.load(Relaxed),
            "broken_queues_now": vhost::broken_count(&rings),
            "protocol_errors": s.protocol_errors.load(Relaxed),
            "connections": s.connections.load(Relaxed),
            "memory_lost": s.memory_lost.load(Relaxed),
            "rings": rings.iter().map(|r| if r.packed {
                // Packed: positions in the ring, each with its wrap counter (bit 15 of the base).
                serde_json::json!({
                    "vring": r.vring,
                    "size": r.size,
                    "layout": "packed",
                    "last_avail_idx": r.last_avail & 0x7fff,
                    "avail_wrap": r.last_avail >> 15,
                    "used_idx": r.used & 0x7fff,
                    "used_wrap": r.used >> 15,
                    "broken": r.broken,
                })
            } else {
                serde_json::json!({
                    "vring": r.vring,
                    "size": r.size,
                    "layout": "split",
                    "driver_avail_idx": r.driver_avail,
                    "last_avail_idx": r.last_avail,
                    "used_idx": r.used,
                    "broken": r.broken,
                })
            }).collect::<Vec<_>>(),
        })
    }
}
