//! A real PMD thread forwarding port to port with EMC hits for one second; prints the busy TSC
//! cycles per packet `pmd-stats-show` reports (port I/O of an in-memory port included).
//! Run: `cargo bench -p dp --bench pmd`.
use dp::{Action, AssignMode, Datapath, DpConfig, DpTuning, Topology, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::sync::Arc;
use std::time::Duration;
use wire::{Field, FlowKey};

/// Always has a full burst to receive (if it has a frame); sending just counts.
struct Source(Vec<u8>);
impl Port for Source {
    fn kind(&self) -> &'static str {
        "loop"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        while !self.0.is_empty() && !out.is_full() {
            let mut p = pool.get();
            p.set_frame(&self.0);
            let _ = out.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        pkts.len()
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

struct Fwd;
impl Upcall for Fwd {
    fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set_exact(Field::Ipv4Dst);
        UpcallResult {
            actions: Arc::from(vec![Action::Output(2)]),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    frame.extend_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    frame.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 26, 0, 0]);
    frame.resize(64, 0);
    let cfg = DpConfig {
        topology: Topology::single(0..2),
        pmd_cores: vec![0],
        assign: AssignMode::Cycles,
        auto_lb: None,
    };
    let tuning = DpTuning {
        emc_insert_inv_prob: 1,
        ..DpTuning::default()
    };
    let dp = Datapath::with_tuning(cfg, tuning, Arc::new(Fwd)).unwrap();
    dp.add_port(1, "src", Arc::new(Source(frame)), &[]).unwrap();
    dp.add_port(2, "sink", Arc::new(Source(Vec::new())), &[])
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    dp.clear_pmd_stats();
    std::thread::sleep(Duration::from_secs(1));
    for s in dp.pmd_stats() {
        println!(
            "pmd core {}: {} packets/s, {:.1} busy cycles/packet (emc {} smc {} megaflow {} miss {})",
            s.core, s.packets, s.cycles_per_packet, s.emc_hits, s.smc_hits, s.megaflow_hits, s.misses
        );
    }
    dp.shutdown();
}
