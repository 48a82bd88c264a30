//! A real PMD thread forwarding port to port with EMC hits for one second; prints the busy TSC
//! cycles per packet `pmd-stats-show` reports (port I/O of an in-memory port included).
//! Run: `cargo bench -p dp --bench pmd`.
//!
//! Many flows: `cargo bench -p dp --bench pmd -- --flows 1000000 --rules 1000` cycles the
//! source over that many UDP flows (source address and port) spread over that many
//! destination ports, each destination port one megaflow (`in_port`, `udp`, `tp_dst`: one
//! subtable), as `vireo-bench`'s `flows1m` scenario does without the guest rings.
//! `--smc-min-subtables K` sets `DpTuning::smc_min_subtables`; `--secs S` the measured time;
//! `--isa scalar|avx512|auto` the lookup kernels (`dp::simd`, default `auto`).
use dp::{Action, AssignMode, Datapath, DpConfig, DpTuning, Topology, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::sync::Arc;
use std::time::Duration;
use wire::{Field, FlowKey};

/// Always has a full burst to receive (if it has a frame); sending just counts. With `flows`
/// above 1, each frame is the next of that many UDP flows over `rules` destination ports.
struct Source {
    frame: Vec<u8>,
    flows: u32,
    rules: u32,
    next: std::sync::atomic::AtomicU32,
}

impl Source {
    fn new(frame: Vec<u8>, flows: u32, rules: u32) -> Source {
        Source {
            frame,
            flows: flows.max(1),
            rules: rules.max(1),
            next: Default::default(),
        }
    }
}

impl Port for Source {
    fn kind(&self) -> &'static str {
        "loop"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        while !self.frame.is_empty() && !out.is_full() {
            let mut p = pool.get();
            p.set_frame(&self.frame);
            if self.flows > 1 {
                use std::sync::atomic::Ordering::Relaxed;
                let i = self.next.fetch_add(1, Relaxed) % self.flows;
                let d = p.data_mut();
                d[26..30].copy_from_slice(&(0x0a00_0000 | (i >> 4)).to_be_bytes());
                d[34..36].copy_from_slice(&(1024 + (i & 15) as u16).to_be_bytes());
                d[36..38].copy_from_slice(&((i % self.rules) as u16).to_be_bytes());
            }
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

/// Everything to port 2; megaflows on `eth_type` + `ipv4_dst` (one flow), or with `by_port`
/// on `in_port` + `ip_proto` + `tp_dst` (one per destination port).
struct Fwd {
    by_port: bool,
}
impl Upcall for Fwd {
    fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        if self.by_port {
            mask.set_exact(Field::InPort);
            mask.set_exact(Field::IpProto);
            mask.set_exact(Field::TpDst);
        } else {
            mask.set_exact(Field::Ipv4Dst);
        }
        UpcallResult {
            actions: Arc::from(vec![Action::Output(2)]),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let opt = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().expect("a number"))
            .unwrap_or(default)
    };
    let (flows, rules) = (opt("--flows", 1) as u32, opt("--rules", 1) as u32);
    let smc_min_subtables = opt("--smc-min-subtables", 1) as usize;
    let secs = opt("--secs", 1);
    let isa = args
        .iter()
        .position(|a| a == "--isa")
        .and_then(|i| args.get(i + 1))
        .map_or("auto", |s| s.as_str());
    let lookup_isa = dp::simd::Isa::by_name(isa).expect("--isa");
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
        emc_insert_inv_prob: if flows > 1 { 100 } else { 1 },
        smc_min_subtables,
        lookup_isa,
        ..DpTuning::default()
    };
    let by_port = flows > 1;
    let dp = Datapath::with_tuning(cfg, tuning, Arc::new(Fwd { by_port })).unwrap();
    dp.add_port(1, "src", Arc::new(Source::new(frame, flows, rules)), &[])
        .unwrap();
    dp.add_port(2, "sink", Arc::new(Source::new(Vec::new(), 1, 1)), &[])
        .unwrap();
    // Long enough for every flow to have passed once (caches warm).
    std::thread::sleep(Duration::from_millis(200 + u64::from(flows / 5_000)));
    dp.clear_pmd_stats();
    std::thread::sleep(Duration::from_secs(secs));
    for s in dp.pmd_stats() {
        println!(
            "pmd core {}: {} packets/s, {:.1} busy cycles/packet (emc {} smc {} megaflow {} miss {})",
            s.core, s.packets, s.cycles_per_packet, s.emc_hits, s.smc_hits, s.megaflow_hits, s.misses
        );
    }
    dp.shutdown();
}
