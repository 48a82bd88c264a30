//! The `dummy` port: no device. Tests inject frames into its rx side and capture what the
//! datapath sends to it, through the control socket.
//!
//! Threads: `inject`/`take_captured` run on the control thread, `rx_burst`/`tx_burst` on a PMD;
//! the two meet in small mutex-protected queues (the dummy port is for tests, not speed).
use crate::{Link, Port, PortCounters, PortStats};
use packet::{Batch, Pool};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Most frames kept on either side; beyond it injection is refused and capture drops the oldest.
pub const DUMMY_QUEUE_LIMIT: usize = 4096;

/// A port with no device.
#[derive(Default)]
pub struct DummyPort {
    rx: Mutex<VecDeque<Vec<u8>>>,
    captured: Mutex<VecDeque<Vec<u8>>>,
    counters: PortCounters,
}

impl DummyPort {
    /// A new dummy port.
    pub fn new() -> DummyPort {
        DummyPort::default()
    }

    /// Queues a frame to be received by the datapath. Fails if the queue is full.
    pub fn inject(&self, frame: Vec<u8>) -> Result<(), crate::PortError> {
        let mut q = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= DUMMY_QUEUE_LIMIT {
            return Err(crate::PortError("dummy rx queue full".into()));
        }
        q.push_back(frame);
        Ok(())
    }

    /// Removes and returns every frame the datapath sent to this port.
    pub fn take_captured(&self) -> Vec<Vec<u8>> {
        let mut q = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        q.drain(..).collect()
    }

    /// Frames injected and not yet received by the datapath.
    pub fn pending(&self) -> usize {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Port for DummyPort {
    fn kind(&self) -> &'static str {
        "dummy"
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut q = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        let mut bytes = 0;
        while !out.is_full() {
            let Some(frame) = q.pop_front() else { break };
            let mut p = pool.get();
            p.set_frame(&frame);
            bytes += p.len() as u64;
            // Cannot fail: checked `is_full` above.
            let _ = out.push(p);
            n += 1;
        }
        self.counters.rx(n as u64, bytes);
        n
    }

    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        let mut q = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = 0;
        for p in pkts.as_slice() {
            if q.len() >= DUMMY_QUEUE_LIMIT {
                q.pop_front();
            }
            q.push_back(p.data().to_vec());
            bytes += p.len() as u64;
        }
        self.counters.tx(pkts.len() as u64, bytes);
        pkts.len()
    }

    fn link(&self) -> Link {
        Link::Up
    }

    fn preload_stats(&self, s: &PortStats) {
        self.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use packet::Packet;

    #[test]
    fn injected_frames_come_out_of_rx_and_tx_is_captured() {
        let port = DummyPort::new();
        port.inject(vec![1, 2, 3]).unwrap();
        port.inject(vec![4, 5]).unwrap();
        let mut pool = Pool::new(0, 8);
        let mut b = Batch::new();
        assert_eq!(port.rx_burst(0, &mut pool, &mut b), 2);
        assert_eq!(b.as_slice()[1].data(), &[4, 5]);
        assert_eq!(port.tx_burst(0, &mut b), 2);
        assert_eq!(port.take_captured(), vec![vec![1, 2, 3], vec![4, 5]]);
        let s = port.stats();
        assert_eq!((s.rx_packets, s.tx_packets, s.tx_bytes), (2, 2, 5));
        let _ = Packet::from_slice(&[0]);
    }

    #[test]
    fn injection_is_bounded() {
        let port = DummyPort::new();
        for _ in 0..DUMMY_QUEUE_LIMIT {
            port.inject(vec![0]).unwrap();
        }
        assert!(port.inject(vec![0]).is_err());
    }
}
