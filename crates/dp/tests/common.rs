//! Shared helpers for datapath integration tests: frame builders, a scriptable pipeline, a
//! port wrapper with a NUMA node and several rx queues, and a wait helper.
#![allow(dead_code)]
use dp::{Action, Actions, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::dummy::DummyPort;
use ports::{Link, Port, PortStats};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::{checksum, Field, FlowKey};

/// Ethernet + IPv4 + UDP with valid checksums, to `dst` port `dport`.
pub fn udp_frame(dst: u32, dport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1];
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::compute(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut udp = vec![0x30, 0x39];
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&[0, 12, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
    let ps = checksum::pseudo_v4(0x0a00_0001, dst, 17, 12);
    let c = !checksum::fold(checksum::sum(&udp, ps));
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&udp);
    f
}

/// True if the IPv4 header and UDP checksums of an (optionally VLAN-tagged) frame are valid.
pub fn checksums_ok(f: &[u8]) -> bool {
    let (_, off) = wire::l3_offset(f).unwrap();
    let ip = wire::ipv4::Ipv4Packet::new_checked(&f[off..]).unwrap();
    let l4 = ip.payload();
    let ps = checksum::pseudo_v4(ip.src(), ip.dst(), 17, l4.len() as u16);
    ip.verify_checksum() && checksum::fold(checksum::sum(l4, ps)) == 0xffff
}

/// A pipeline whose answer the test sets: `actions` for every packet, masked on
/// eth_type + ipv4_dst (+ in_port, which the datapath adds).
pub struct TestPipeline {
    pub actions: Mutex<Actions>,
    pub upcalls: AtomicU64,
    pub userspace: Mutex<Vec<(u64, FlowKey)>>,
    pub install: std::sync::atomic::AtomicBool,
    /// Version stamped on each answer (its `deps`); each answer is tagged with its IPv4
    /// destination, so a test can invalidate "every flow towards 10.0.0.N".
    pub version: AtomicU64,
}

impl TestPipeline {
    pub fn new(actions: Vec<Action>) -> Arc<TestPipeline> {
        Arc::new(TestPipeline {
            actions: Mutex::new(actions.into()),
            upcalls: AtomicU64::new(0),
            userspace: Mutex::new(Vec::new()),
            install: std::sync::atomic::AtomicBool::new(true),
            version: AtomicU64::new(0),
        })
    }

    pub fn set(&self, actions: Vec<Action>) {
        *self.actions.lock().unwrap() = actions.into();
    }
}

impl Upcall for TestPipeline {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        self.upcalls.fetch_add(1, SeqCst);
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set_exact(Field::Ipv4Dst);
        UpcallResult {
            actions: self.actions.lock().unwrap().clone(),
            mask,
            install: self.install.load(SeqCst),
            deps: dp::flow::Deps::new(self.version.load(SeqCst), vec![key.get(Field::Ipv4Dst)]),
        }
    }

    /// Valid while the flow's actions are the ones the test set now.
    fn still_valid(&self, flow: &dp::FlowRef<'_>) -> bool {
        *flow.actions == **self.actions.lock().unwrap()
    }

    fn userspace(&self, cookie: u64, key: &FlowKey, _pkt: &Packet) {
        self.userspace.lock().unwrap().push((cookie, *key));
    }
}

/// A dummy port with a NUMA node and `n_rxq` queues (only queue 0 carries packets).
pub struct NumaPort {
    pub inner: DummyPort,
    pub node: Option<usize>,
    pub rxqs: std::sync::atomic::AtomicUsize,
}

impl NumaPort {
    pub fn new(node: Option<usize>, n_rxq: usize) -> Arc<NumaPort> {
        Arc::new(NumaPort {
            inner: DummyPort::new(),
            node,
            rxqs: std::sync::atomic::AtomicUsize::new(n_rxq),
        })
    }
}

impl Port for NumaPort {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn n_rxq(&self) -> usize {
        self.rxqs.load(SeqCst)
    }
    fn numa_node(&self) -> Option<usize> {
        self.node
    }
    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        if q == 0 {
            self.inner.rx_burst(0, pool, out)
        } else {
            0
        }
    }
    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        self.inner.tx_burst(q, pkts)
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
}

/// Polls `f` until it returns true or 20 s pass (CI machines are small and shared).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Collects frames from `port` until `n` arrived (or 20 s pass).
pub fn collect(port: &DummyPort, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    wait_for(&format!("{n} frames"), || {
        got.extend(port.take_captured());
        got.len() >= n
    });
    got
}

/// A port with `n` queues, each its own dummy (frames injected per queue), that records
/// which tx queue every packet was sent on.
pub struct MultiQueuePort {
    pub queues: Vec<DummyPort>,
    pub sent_on: Vec<AtomicU64>,
}

impl MultiQueuePort {
    pub fn new(n: usize) -> Arc<MultiQueuePort> {
        Arc::new(MultiQueuePort {
            queues: (0..n).map(|_| DummyPort::new()).collect(),
            sent_on: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Packets sent on each tx queue so far.
    pub fn sent(&self) -> Vec<u64> {
        self.sent_on.iter().map(|c| c.load(SeqCst)).collect()
    }
}

impl Port for MultiQueuePort {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn n_rxq(&self) -> usize {
        self.queues.len()
    }
    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        self.queues[q % self.queues.len()].rx_burst(0, pool, out)
    }
    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize {
        // Like a vhost-user port: a tx queue id beyond the port's queues wraps onto them.
        let q = q % self.queues.len();
        self.sent_on[q].fetch_add(pkts.len() as u64, SeqCst);
        self.queues[q].tx_burst(0, pkts)
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        self.queues[0].stats()
    }
}
