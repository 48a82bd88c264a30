//! Microbenchmarks: EMC hit, SMC hit, dpcls lookup at 1/10/100 subtables, dpcls batched
//! lookups (bursts of 32) in one subtable of 1K/10K/100K flows, and a whole burst
//! through the worker with EMC hits (port I/O measured separately so it can be subtracted),
//! and with XDP marks: every packet a mark hit, with and without key extraction (the same
//! flow but for a TOS match, which rules the skip out).
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dp::dpcls::Dpcls;
use dp::emc::Emc;
use dp::flow::{FlowTable, Megaflow, Registry};
use dp::smc::Smc;
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::sync::Arc;
use wire::{Field, FlowKey};

fn key(dst: u32, port: u16) -> FlowKey {
    key_from(dst, 0x3039, port)
}

fn key_from(dst: u32, sport: u16, port: u16) -> FlowKey {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1]);
    f.extend_from_slice(&dst.to_be_bytes());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    wire::extract(&f, 1)
}

/// The i-th of up to 132 distinct masks (all match tp_src exactly, so flows with distinct
/// source ports never overlap).
fn mask(i: usize) -> FlowKey {
    let mut m = FlowKey::ZERO;
    m.set_exact(Field::TpSrc);
    m.set_exact(Field::InPort);
    m.set_exact(Field::EthType);
    let prefix = (i % 33) as u32;
    m.set(
        Field::Ipv4Dst,
        u64::from(u32::MAX.checked_shl(32 - prefix).unwrap_or(0)),
    );
    if i / 33 % 2 == 1 {
        m.set_exact(Field::TpDst);
    }
    if i / 66 == 1 {
        m.set_exact(Field::IpProto);
    }
    m
}

fn caches(c: &mut Criterion) {
    let mut emc = Emc::new();
    for i in 0..1000 {
        let k = key(i, 1);
        emc.insert(&k, k.hash(), i, 0);
    }
    let k = key(500, 1);
    let h = k.hash();
    c.bench_function("emc/hit", |b| {
        b.iter(|| emc.lookup(black_box(&k), black_box(h)))
    });

    let mut smc = Smc::new();
    let mut flows = FlowTable::new(Registry::default());
    let (id, _) = flows.insert(Megaflow::new(&k, &mask(32), Arc::from(vec![])));
    smc.insert(h, id);
    c.bench_function("smc/hit+verify", |b| {
        b.iter(|| {
            let id = smc.lookup(black_box(h)).unwrap();
            flows.get(id).is_some_and(|f| f.covers(black_box(&k)))
        })
    });

    let mut g = c.benchmark_group("dpcls/hit_in_last_subtable");
    for n in [1usize, 10, 100] {
        let mut cls = Dpcls::new();
        for i in 0..n {
            let k = key_from(0x0a00_0000 + i as u32 * 77, i as u16, 9);
            cls.insert(&k, &mask(i), i as u32).unwrap();
        }
        // A key only the last-inserted subtable's flow covers: every subtable is probed.
        let probe = key_from(0x0a00_0000 + (n as u32 - 1) * 77, n as u16 - 1, 9);
        assert_eq!(cls.lookup(&probe), n as u32 - 1);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| cls.lookup(black_box(&probe)))
        });
    }
    g.finish();

    // One subtable of n flows (one mask, as `flowsN` scenarios install), bursts of 32 keys
    // each hitting a different flow, walking the table in a scattered order.
    let mut g = c.benchmark_group("dpcls/batch32_one_subtable");
    g.throughput(Throughput::Elements(32));
    for n in [1_000u32, 10_000, 100_000] {
        let mut cls = Dpcls::new();
        let keys: Vec<FlowKey> = (0..n).map(|i| key_from(0x0a00_0000 + i, 7, 9)).collect();
        for (i, k) in keys.iter().enumerate() {
            cls.insert(k, &mask(32), i as u32).unwrap();
        }
        let order: Vec<usize> = (0..n as usize).map(|i| i * 7919 % n as usize).collect();
        let mut at = 0usize;
        let (mut burst, mut out) = ([FlowKey::ZERO; 32], [0u32; 32]);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                for k in burst.iter_mut() {
                    *k = keys[order[at]];
                    at = (at + 1) % order.len();
                }
                let left = cls.lookup_batch(black_box(&burst), &mut out, u32::MAX);
                assert_eq!(left, 0);
                out[0]
            })
        });
    }
    g.finish();
}

/// Frames to loop, and the XDP mark and hash they arrive with (0: none).
struct LoopPort(Vec<u8>, u32, u32);
impl Port for LoopPort {
    fn kind(&self) -> &'static str {
        "loop"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        while !out.is_full() {
            let mut p = pool.get();
            p.set_frame(&self.0);
            p.meta.mark = self.1;
            p.meta.hash = self.2;
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

/// Everything to port 2, by eth_type and ipv4_dst (and the TOS when `.0`).
struct Fwd(bool);
impl Upcall for Fwd {
    fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set_exact(Field::Ipv4Dst);
        if self.0 {
            mask.set_exact(Field::IpTos);
        }
        UpcallResult {
            actions: Arc::from(vec![Action::Output(2)]),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

fn pipeline(c: &mut Criterion) {
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    frame.extend_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    frame.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 26, 0, 0]);
    frame.resize(64, 0);
    let port = Arc::new(LoopPort(frame.clone(), 0, 0));
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(Arc::new(Fwd(false)), cfg, Registry::default());
    w.set_ports(&[(2, port.clone() as Arc<dyn Port>)]);
    w.poll(1, &*port, 0);
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(32));
    g.bench_function("burst32_emc_hit_port_to_port", |b| {
        b.iter(|| w.poll(1, &*port, 0))
    });
    let mut pool = Pool::new(0, 64);
    let mut batch = Batch::new();
    g.bench_function("burst32_port_io_only", |b| {
        b.iter(|| {
            port.rx_burst(0, &mut pool, &mut batch);
            port.tx_burst(0, &mut batch);
            pool.put_batch(&mut batch);
        })
    });
    // Marked: flow 0 of the PMD with tag 0, an XDP hash on every frame.
    let mark = dp::flow::mark_of(dp::flow::mark_tag(0), 0).unwrap();
    let marked = Arc::new(LoopPort(frame, mark, 0x5bd1_e995));
    for (name, tos) in [("burst32_mark_skip", false), ("burst32_mark_extract", true)] {
        let mut w = Worker::new(Arc::new(Fwd(tos)), cfg, Registry::default());
        w.set_ports(&[(2, marked.clone() as Arc<dyn Port>)]);
        w.poll(1, &*port, 0);
        w.poll(1, &*marked, 0);
        let _ = w.take_tally();
        w.poll(1, &*marked, 0);
        let t = w.take_tally();
        assert_eq!(t.mark_hits, 32, "{name}");
        assert_eq!(t.mark_skips, if tos { 0 } else { 32 }, "{name}");
        g.bench_function(name, |b| b.iter(|| w.poll(1, &*marked, 0)));
    }
    g.finish();
    eprintln!("TSC rate: {:.3} GHz", dp::cycles::hz() as f64 / 1e9);
}

criterion_group!(benches, caches, pipeline);
criterion_main!(benches);
