//! The `af-xdp` port kind: a kernel interface reached through AF_XDP sockets (crate `xsk`),
//! one socket per queue, frames copied between UMEM frames and `packet::Packet` buffers.
//!
//! Threads: created and shut down by the daemon's control thread. `rx_burst(q)` runs on the
//! PMD that polls rx queue `q` (`try_lock` on the queue's rx half: a PMD never waits);
//! `tx_burst` may come from any PMD and takes the tx half's lock for one burst. `shutdown`
//! (control thread) takes every half out under its lock, so a PMD that still holds the port
//! for a moment after removal finds a down link instead of a closed socket.
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use packet::{Batch, Pool};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use xsk::{Device, DeviceConfig, ModeInUse, ModeRequest, RxSide, TxSide};

/// Largest MTU the kind accepts on an interface (a frame must fit in one UMEM frame).
pub const MAX_MTU: u32 = xsk::MAX_MTU;

struct Queue {
    rx: Mutex<Option<RxSide>>,
    tx: Mutex<Option<TxSide>>,
}

/// An AF_XDP port.
pub struct AfXdpPort {
    ifname: String,
    mode: ModeInUse,
    replaced: usize,
    queues: Vec<Queue>,
    device: Mutex<Option<Device>>,
    counters: PortCounters,
    bad_rx_descs: AtomicU64,
    bad_completions: AtomicU64,
    kick_errors: AtomicU64,
}

impl std::fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("ifname", &self.ifname)
            .field("mode", &self.mode)
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
        let req = ModeRequest::parse(mode).ok_or_else(|| {
            PortError(format!(
                "af-xdp {ifname}: xdp-mode {mode:?} is not best-effort, native or generic"
            ))
        })?;
        let cfg = DeviceConfig {
            ifname: ifname.to_string(),
            queues: queues as u32,
            mode: req,
        };
        let mut dev = Device::open(&cfg).map_err(|e| PortError(format!("af-xdp {e}")))?;
        let queues = dev
            .take_queues()
            .into_iter()
            .map(|(rx, tx)| Queue {
                rx: Mutex::new(Some(rx)),
                tx: Mutex::new(Some(tx)),
            })
            .collect();
        Ok(AfXdpPort {
            ifname: ifname.to_string(),
            mode: dev.mode(),
            replaced: dev.replaced(),
            queues,
            device: Mutex::new(Some(dev)),
            counters: PortCounters::default(),
            bad_rx_descs: AtomicU64::new(0),
            bad_completions: AtomicU64::new(0),
            kick_errors: AtomicU64::new(0),
        })
    }

    /// The XDP mode in use.
    pub fn mode(&self) -> ModeInUse {
        self.mode
    }

    /// Detaches the program, closes the sockets and unmaps the UMEMs (frames in flight go
    /// with them). Also done on drop; calling it twice is harmless.
    pub fn shutdown(&self) {
        // Program first: the kernel stops redirecting before the sockets go.
        drop(lock(&self.device).take());
        for q in &self.queues {
            drop(lock(&q.rx).take());
            drop(lock(&q.tx).take());
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
        self.queues.len()
    }

    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let Some(queue) = self.queues.get(q) else {
            return 0;
        };
        let Ok(mut guard) = queue.rx.try_lock() else {
            return 0;
        };
        let Some(rx) = guard.as_mut() else {
            return 0;
        };
        let b = rx.recv(out.room() as u32, |frame| {
            let mut p = pool.get();
            p.set_frame(frame);
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
        b.packets as usize
    }

    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let n = self.queues.len();
        let queue = &self.queues[q % n];
        let mut guard = lock(&queue.tx);
        let Some(tx) = guard.as_mut() else {
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
        crate::sys::set_admin(&self.ifname, up)
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
        serde_json::json!({
            "ifname": self.ifname,
            "xdp_mode": self.mode.name(),
            "queues": self.queues.len(),
            "replaced_programs": self.replaced,
            "bad_rx_descs": self.bad_rx_descs.load(Relaxed),
            "bad_completions": self.bad_completions.load(Relaxed),
            "kick_errors": self.kick_errors.load(Relaxed),
            "rings": queues,
        })
    }
}
