//! End-to-end datapath tests with dummy ports and a scriptable pipeline.
mod common;

use common::*;
use dp::{Action, AssignMode, Datapath, DpConfig, DpTuning, Topology, Upcall};
use ports::dummy::DummyPort;
use ports::Port;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;
use wire::Field;

fn config(cores: &[usize]) -> DpConfig {
    DpConfig {
        topology: Topology::single(0..2),
        pmd_cores: cores.to_vec(),
        assign: AssignMode::Cycles,
        auto_lb: None,
    }
}

/// Tunables for tests: always insert into the EMC, so hit counts are deterministic.
fn tuning() -> DpTuning {
    DpTuning {
        emc_insert_inv_prob: 1,
        ..DpTuning::default()
    }
}

fn start(cfg: DpConfig, pipe: Arc<dyn Upcall>) -> Datapath {
    Datapath::with_tuning(cfg, tuning(), pipe).unwrap()
}

fn two_ports(dp: &Datapath) -> (Arc<DummyPort>, Arc<DummyPort>) {
    let (a, b) = (Arc::new(DummyPort::new()), Arc::new(DummyPort::new()));
    dp.add_port(1, "p1", a.clone(), &[]).unwrap();
    dp.add_port(2, "p2", b.clone(), &[]).unwrap();
    (a, b)
}

#[test]
fn packets_from_port1_leave_port2_with_actions_applied() {
    let pipe = TestPipeline::new(vec![
        Action::SetIpv4Dst(0xc0a8_0005),
        Action::SetTpDst(4242),
        Action::PushVlan(0x2064),
        Action::Output(2),
    ]);
    let dp = start(config(&[0, 1]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    for i in 0..20 {
        p1.inject(udp_frame(0x0a00_0002, 1000 + i)).unwrap();
    }
    let got = collect(&p2, 20);
    assert_eq!(got.len(), 20);
    for f in &got {
        let k = wire::extract(f, 2);
        assert_eq!(k.get(Field::VlanTci), 0x2064 | 0x1000);
        assert_eq!(k.get(Field::Ipv4Dst), 0xc0a8_0005);
        assert_eq!(k.get(Field::TpDst), 4242);
        assert!(checksums_ok(f), "checksums must be updated");
    }
    assert!(p1.take_captured().is_empty());
}

#[test]
fn megaflow_is_installed_once_then_hits_and_stats_add_up() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    for i in 0..300u16 {
        p1.inject(udp_frame(0x0a00_0002, i % 7)).unwrap();
    }
    assert_eq!(collect(&p2, 300).len(), 300);
    assert_eq!(
        pipe.upcalls.load(SeqCst),
        1,
        "one megaflow covers every packet"
    );
    let flows = dp.megaflows();
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].packets, 300);
    assert_eq!(flows[0].actions, "output:2");
    assert_eq!(
        flows[0].match_,
        "in_port=1,eth_type=0x0800,ipv4_dst=10.0.0.2"
    );
    wait_for("stats published", || {
        dp.pmd_stats().iter().map(|s| s.packets).sum::<u64>() == 300
    });
    let s = &dp.pmd_stats()[0];
    assert_eq!(
        s.packets,
        s.emc_hits + s.smc_hits + s.megaflow_hits + s.misses
    );
    assert_eq!(s.misses, 1);
    assert!(s.emc_hits > 200, "EMC serves the bulk: {s:?}");
    assert!(s.busy_cycles > 0 && s.cycles_per_packet > 0.0);
    assert_eq!(s.megaflows, 1);
    dp.clear_pmd_stats();
    assert_eq!(dp.pmd_stats()[0].packets, 0);
}

#[test]
fn revalidate_changes_the_decision_immediately() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0, 1]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    let p3 = Arc::new(DummyPort::new());
    dp.add_port(3, "p3", p3.clone(), &[]).unwrap();
    for _ in 0..50 {
        p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    }
    assert_eq!(collect(&p2, 50).len(), 50);
    pipe.set(vec![Action::Output(3)]);
    dp.try_revalidate().unwrap();
    assert!(
        dp.megaflows().is_empty(),
        "revalidation drops cached decisions"
    );
    for _ in 0..50 {
        p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    }
    assert_eq!(collect(&p3, 50).len(), 50);
    assert!(
        p2.take_captured().is_empty(),
        "no packet followed the old decision"
    );
    assert_eq!(pipe.upcalls.load(SeqCst), 2);
    wait_for("stats published", || {
        dp.pmd_stats().iter().map(|s| s.packets).sum::<u64>() == 100
    });
    let (mut hits, mut packets) = (0, 0);
    for s in dp.pmd_stats() {
        assert_eq!(
            s.packets,
            s.emc_hits + s.smc_hits + s.megaflow_hits + s.misses
        );
        hits += s.emc_hits + s.smc_hits + s.megaflow_hits;
        packets += s.packets;
    }
    assert_eq!((packets, hits), (100, 98));
}

#[test]
fn revalidate_tags_removes_only_megaflows_carrying_a_changed_tag() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    let p3 = Arc::new(DummyPort::new());
    dp.add_port(3, "p3", p3.clone(), &[]).unwrap();
    let dsts = [0x0a00_0002u32, 0x0a00_0003, 0x0a00_0004];
    for d in dsts {
        for _ in 0..10 {
            p1.inject(udp_frame(d, 1)).unwrap();
        }
    }
    assert_eq!(collect(&p2, 30).len(), 30);
    assert_eq!(dp.megaflows().len(), 3);
    // The pipeline's answer changes, but only 10.0.0.3's dependency is reported changed.
    pipe.set(vec![Action::Output(3)]);
    let v = pipe.version.fetch_add(1, SeqCst) + 1;
    assert_eq!(dp.revalidate_tags(v, &[0x0a00_0003]).unwrap(), 1);
    let left: Vec<String> = dp.megaflows().into_iter().map(|f| f.match_).collect();
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|m| !m.contains("10.0.0.3")), "{left:?}");
    for d in dsts {
        for _ in 0..10 {
            p1.inject(udp_frame(d, 1)).unwrap();
        }
    }
    assert_eq!(
        collect(&p2, 20).len(),
        20,
        "kept megaflows keep their decision"
    );
    assert_eq!(
        collect(&p3, 10).len(),
        10,
        "the removed one is decided again"
    );
    assert_eq!(pipe.upcalls.load(SeqCst), 4);
    assert_eq!(dp.revalidate_tags(v, &[0x0a00_0009]).unwrap(), 0);
    assert_eq!(dp.megaflows().len(), 3);
}

#[test]
fn revalidate_all_removes_only_megaflows_whose_translation_changed() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0, 1]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    for d in [2u32, 3] {
        for _ in 0..5 {
            p1.inject(udp_frame(0x0a00_0000 + d, 1)).unwrap();
        }
    }
    assert_eq!(collect(&p2, 10).len(), 10);
    let v = pipe.version.load(SeqCst);
    assert_eq!(dp.revalidate_all(v).unwrap(), 0, "nothing changed");
    assert_eq!(dp.megaflows().len(), 2);
    pipe.set(vec![Action::Output(1)]);
    assert_eq!(dp.revalidate_all(v).unwrap(), 2);
    assert!(dp.megaflows().is_empty());
}

#[test]
fn datapath_is_shareable_between_control_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Datapath>();
    let pipe = TestPipeline::new(vec![]);
    let dp = Arc::new(start(config(&[0]), pipe));
    let threads: Vec<_> = (0..4u32)
        .map(|i| {
            let dp = dp.clone();
            std::thread::spawn(move || {
                dp.add_port(i + 1, &format!("p{i}"), Arc::new(DummyPort::new()), &[])
                    .unwrap();
                dp.revalidate();
                dp.pmd_stats().len()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 1);
    }
    assert_eq!(dp.rxq_show().len(), 4);
}

#[test]
fn del_port_while_traffic_flows() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0, 1]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let (p1, stop) = (p1.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                let _ = p1.inject(udp_frame(0x0a00_0002, 9));
                std::thread::sleep(Duration::from_micros(20));
            }
        })
    };
    wait_for("traffic", || !p2.take_captured().is_empty());
    dp.try_del_port(2).unwrap();
    let _ = p2.take_captured();
    assert_eq!(Arc::strong_count(&p2), 1, "no PMD holds port 2 any more");
    std::thread::sleep(Duration::from_millis(20));
    assert!(p2.take_captured().is_empty());
    dp.try_del_port(1).unwrap();
    assert_eq!(
        Arc::strong_count(&p1),
        2,
        "only the test and the feeder hold port 1"
    );
    stop.store(true, SeqCst);
    feeder.join().unwrap();
    assert!(dp.pmd_stats().iter().map(|s| s.lost).sum::<u64>() > 0 || p1.pending() > 0);
    assert_eq!(
        dp.try_del_port(1),
        Err(dp::DpError::NoSuchPort(1)),
        "deleting twice is an error"
    );
}

#[test]
fn output_to_in_port_userspace_and_multiple_outputs() {
    let pipe = TestPipeline::new(vec![
        Action::Output(1),
        Action::Userspace(77),
        Action::PopVlan,
        Action::Output(2),
    ]);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    for _ in 0..10 {
        p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    }
    assert_eq!(
        collect(&p1, 10).len(),
        10,
        "hairpin to the in_port is allowed"
    );
    assert_eq!(collect(&p2, 10).len(), 10);
    let up = pipe.userspace.lock().unwrap();
    assert_eq!(up.len(), 10);
    assert_eq!(up[0].0, 77);
    assert_eq!(up[0].1.get(Field::InPort), 1);
}

#[test]
fn uninstalled_decisions_still_execute() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    pipe.install.store(false, SeqCst);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    for _ in 0..5 {
        p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    }
    assert_eq!(collect(&p2, 5).len(), 5);
    assert_eq!(pipe.upcalls.load(SeqCst), 5);
    assert!(dp.megaflows().is_empty());
}

#[test]
fn set_pmd_cores_live_keeps_forwarding() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    assert_eq!(collect(&p2, 1).len(), 1);
    dp.set_pmd_cores(&[1]).unwrap();
    assert_eq!(
        dp.pmd_stats().iter().map(|s| s.core).collect::<Vec<_>>(),
        vec![1]
    );
    assert!(dp.rxq_show().iter().all(|r| r.core == 1));
    p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    assert_eq!(collect(&p2, 1).len(), 1);
    dp.set_pmd_cores(&[0, 1]).unwrap();
    assert_eq!(dp.pmd_stats().len(), 2);
    assert_eq!(dp.set_pmd_cores(&[]), Err(dp::DpError::NoPmdCores));
    assert_eq!(
        dp.set_pmd_cores(&[1, 1]),
        Err(dp::DpError::DuplicateCore(1))
    );
}

/// Issue 15 item 3: PMDs send on dense tx queue ids (their position among the PMDs), not on
/// their core ids. PMDs on cores 0 and 2 used to take tx queues 0 and 2, which a two-queue
/// port wraps onto its queue 0: both PMDs shared one guest rx ring (and its lock) while the
/// other stayed idle.
#[test]
fn two_pmds_send_on_both_queues_of_a_two_queue_port() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let cfg = DpConfig {
        topology: Topology::single(0..4),
        ..config(&[0, 2])
    };
    let dp = start(cfg, pipe);
    let a = MultiQueuePort::new(2);
    let b = MultiQueuePort::new(2);
    // a's queue 0 on the PMD of core 0, queue 1 on core 2's.
    dp.add_port(1, "a", a.clone(), &[(0, 0), (1, 2)]).unwrap();
    dp.add_port(2, "b", b.clone(), &[]).unwrap();
    let mut txqs: Vec<(usize, usize)> = dp.pmd_stats().iter().map(|s| (s.core, s.txq)).collect();
    txqs.sort_unstable();
    assert_eq!(txqs, vec![(0, 0), (2, 1)], "dense tx queue per PMD");
    for q in 0..2 {
        for i in 0..10 {
            a.queues[q].inject(udp_frame(0x0a00_0002, 100 + i)).unwrap();
        }
    }
    wait_for("20 frames out of b", || b.sent().iter().sum::<u64>() == 20);
    assert_eq!(b.sent(), vec![10, 10], "each PMD on its own tx queue of b");

    // A PMD set that changes keeps the ids dense: core 2 alone takes queue 0.
    dp.set_pmd_cores(&[2]).unwrap();
    assert_eq!(
        dp.pmd_stats()
            .iter()
            .map(|s| (s.core, s.txq))
            .collect::<Vec<_>>(),
        vec![(2, 0)]
    );
    dp.set_pmd_cores(&[0, 1, 2]).unwrap();
    let mut ids: Vec<usize> = dp.pmd_stats().iter().map(|s| s.txq).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2]);
}

#[test]
fn numa_aware_assignment_with_two_node_override() {
    let pipe = TestPipeline::new(vec![]);
    let cfg = DpConfig {
        topology: Topology::parse("0:0;1:1").unwrap(),
        assign: AssignMode::RoundRobin,
        ..config(&[0, 1])
    };
    let dp = start(cfg, pipe);
    let far = NumaPort::new(Some(1), 3);
    let near = NumaPort::new(Some(0), 2);
    let lost = NumaPort::new(Some(7), 1);
    dp.add_port(1, "far", far, &[]).unwrap();
    dp.add_port(2, "near", near, &[]).unwrap();
    dp.add_port(3, "nonode", lost, &[]).unwrap();
    let rxqs = dp.rxq_show();
    assert_eq!(rxqs.len(), 6);
    for r in &rxqs {
        match r.port.as_str() {
            "far" => assert_eq!((r.core, r.numa), (1, 1)),
            "near" => assert_eq!((r.core, r.numa), (0, 0)),
            _ => assert_eq!(
                r.port_numa,
                Some(7),
                "a node without PMDs still gets polled"
            ),
        }
    }
    let stats = dp.pmd_stats();
    assert_eq!(stats.iter().map(|s| s.numa).collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn pinned_rxq_isolates_its_pmd_and_can_be_moved() {
    let pipe = TestPipeline::new(vec![]);
    let dp = start(config(&[0, 1]), pipe);
    let a = NumaPort::new(None, 2);
    let b = NumaPort::new(None, 2);
    dp.add_port(1, "a", a, &[(0, 1)]).unwrap();
    dp.add_port(2, "b", b, &[]).unwrap();
    let rxqs = dp.rxq_show();
    for r in &rxqs {
        if r.port == "a" && r.rxq == 0 {
            assert!(r.pinned && r.core == 1);
        } else {
            assert_eq!(r.core, 0, "core 1 is isolated: {r:?}");
        }
    }
    dp.set_port_affinity(1, &[]).unwrap();
    assert!(dp.rxq_show().iter().any(|r| r.core == 1 && r.port == "b"));
    assert!(dp.set_port_affinity(9, &[]).is_err());
}

#[test]
fn rxq_count_change_is_picked_up() {
    let pipe = TestPipeline::new(vec![]);
    let dp = start(config(&[0]), pipe);
    let p = NumaPort::new(None, 1);
    dp.add_port(1, "mq", p.clone(), &[]).unwrap();
    assert_eq!(dp.rxq_show().len(), 1);
    p.rxqs.store(4, SeqCst);
    wait_for("housekeeper to notice 4 queues", || {
        dp.rxq_show().len() == 4
    });
}

#[test]
fn auto_lb_moves_a_hot_queue() {
    let pipe = TestPipeline::new(vec![Action::Output(9)]);
    let cfg = DpConfig {
        assign: AssignMode::Cycles,
        auto_lb: Some(dp::AutoLb {
            threshold_pct: 10,
            interval: Duration::from_secs(3600),
            min_load_pct: 0,
        }),
        ..config(&[0, 1])
    };
    let dp = start(cfg, pipe);
    let ports: Vec<Arc<DummyPort>> = (0..4).map(|_| Arc::new(DummyPort::new())).collect();
    for (i, p) in ports.iter().enumerate() {
        dp.add_port(i as u32 + 1, &format!("p{i}"), p.clone(), &[])
            .unwrap();
    }
    let rxqs = dp.rxq_show();
    let core_of = |name: &str| rxqs.iter().find(|r| r.port == name).unwrap().core;
    // Load the two ports that share a PMD.
    let hot: Vec<usize> = (0..4)
        .filter(|&i| core_of(&format!("p{i}")) == core_of("p0"))
        .collect();
    assert_eq!(hot.len(), 2);
    for _ in 0..20 {
        for &i in &hot {
            for _ in 0..32 {
                ports[i].inject(udp_frame(0x0a00_0002, 1)).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    wait_for("traffic drained", || {
        hot.iter().all(|&i| ports[i].pending() == 0)
    });
    assert!(
        dp.rebalance().unwrap(),
        "moving one hot queue halves the imbalance"
    );
    let after = dp.rxq_show();
    let c0 = after
        .iter()
        .find(|r| r.port == format!("p{}", hot[0]))
        .unwrap()
        .core;
    let c1 = after
        .iter()
        .find(|r| r.port == format!("p{}", hot[1]))
        .unwrap()
        .core;
    assert_ne!(c0, c1, "hot queues now on different PMDs");
}

#[test]
fn stats_and_dumps_serialize_to_json() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0]), pipe);
    let (p1, p2) = two_ports(&dp);
    p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    collect(&p2, 1);
    let s = serde_json::to_value(dp.pmd_stats()).unwrap();
    assert!(s[0]["cycles_per_packet"].is_number());
    let m = serde_json::to_value(dp.megaflows()).unwrap();
    assert_eq!(m[0]["actions"], "output:2");
    assert!(m[0]["match"].as_str().unwrap().contains("in_port=1"));
    let r = serde_json::to_value(dp.rxq_show()).unwrap();
    assert_eq!(r.as_array().unwrap().len(), 2);
    dp.shutdown();
    assert_eq!(dp.add_port(5, "x", p2, &[]), Err(dp::DpError::ShutDown));
    assert!(p1.n_rxq() == 1);
}

#[test]
fn pmd_stats_name_the_lookup_kernels() {
    for isa in dp::simd::Isa::available() {
        let t = DpTuning {
            lookup_isa: isa,
            ..tuning()
        };
        let dp = Datapath::with_tuning(config(&[0]), t, TestPipeline::new(vec![])).unwrap();
        let s = serde_json::to_value(dp.pmd_stats()).unwrap();
        assert_eq!(s[0]["lookup"], isa.name());
        dp.shutdown();
    }
}

/// A port that misbehaves on request: its next rx burst with a frame waiting panics while
/// `armed` (a buggy port kind), and every rx burst stalls the PMD for `stall_ms` while that is
/// non-zero (a PMD too busy to answer).
#[derive(Default)]
struct Misbehaving {
    inner: DummyPort,
    armed: std::sync::atomic::AtomicBool,
    stall_ms: std::sync::atomic::AtomicU64,
}

impl Port for Misbehaving {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, q: usize, pool: &mut packet::Pool, out: &mut packet::Batch) -> usize {
        if self.inner.pending() > 0 && self.armed.swap(false, SeqCst) {
            panic!("port bug");
        }
        let ms = self.stall_ms.load(SeqCst);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
        self.inner.rx_burst(q, pool, out)
    }
    fn tx_burst(&self, q: usize, pkts: &mut packet::Batch) -> usize {
        self.inner.tx_burst(q, pkts)
    }
    fn link(&self) -> ports::Link {
        ports::Link::Up
    }
    fn stats(&self) -> ports::PortStats {
        self.inner.stats()
    }
}

#[test]
fn a_dead_pmd_is_restarted_and_traffic_resumes() {
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = start(config(&[0]), pipe);
    let bad = Arc::new(Misbehaving::default());
    bad.armed.store(true, SeqCst);
    let out = Arc::new(DummyPort::new());
    // Queued before the port is polled at all: the first poll finds it and panics (injected
    // later, a poll could check `pending` just before the frame came and take it without
    // panicking).
    bad.inner.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    dp.add_port(2, "out", out.clone(), &[]).unwrap();
    dp.add_port(1, "bad", bad.clone(), &[]).unwrap();
    assert_eq!(
        collect(&out, 1).len(),
        1,
        "the restarted PMD forwards again"
    );
    assert!(!bad.armed.load(SeqCst));
    dp.try_revalidate().unwrap();
}

/// A pipeline that blocks far longer than the acknowledgment timeout.
struct Stuck(std::sync::atomic::AtomicBool);
impl dp::Upcall for Stuck {
    fn upcall(&self, _: &wire::FlowKey, _: &packet::Packet) -> dp::UpcallResult {
        self.0.store(true, SeqCst);
        std::thread::sleep(Duration::from_millis(3000));
        dp::UpcallResult {
            actions: Arc::from(vec![]),
            mask: wire::FlowKey::ZERO,
            install: false,
            deps: Default::default(),
        }
    }
}

#[test]
fn a_stuck_pmd_gives_a_clear_error_not_a_hang() {
    let t = DpTuning {
        ack_timeout: Duration::from_millis(1000),
        ..tuning()
    };
    let stuck = Arc::new(Stuck(Default::default()));
    let dp = Datapath::with_tuning(config(&[0]), t, stuck.clone()).unwrap();
    let p = Arc::new(DummyPort::new());
    dp.add_port(1, "p", p.clone(), &[]).unwrap();
    p.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    // A PMD inside an upcall may hold a decision from before the change: it must be waited for.
    wait_for("the PMD to enter the upcall", || stuck.0.load(SeqCst));
    let err = dp.try_revalidate().unwrap_err();
    assert!(matches!(err, dp::DpError::PmdStuck { ref cores, .. } if cores == &[0]));
    assert!(err.to_string().contains("core(s) [0]"));
    // Once the upcall returns, the PMD answers again (retry: the machine may be loaded).
    let t0 = std::time::Instant::now();
    while dp.try_revalidate().is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "PMD never came back"
        );
    }
}

/// Revalidation does not wait for a PMD that holds no decision (nothing cached, not in an
/// upcall), even when that PMD is too busy to answer; it does wait once the PMD holds a flow.
#[test]
fn revalidate_waits_only_for_pmds_holding_decisions() {
    let t = DpTuning {
        ack_timeout: Duration::from_millis(300),
        ..tuning()
    };
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = Datapath::with_tuning(config(&[0]), t, pipe.clone()).unwrap();
    let (p1, p2) = two_ports(&dp);
    let t0 = std::time::Instant::now();
    for _ in 0..1000 {
        dp.try_revalidate().unwrap();
    }
    let idle = t0.elapsed();
    p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    assert_eq!(collect(&p2, 1).len(), 1);
    // Now the PMD holds a megaflow: the next revalidation must reach it and flush it.
    dp.try_revalidate().unwrap();
    p1.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    assert_eq!(collect(&p2, 1).len(), 1);
    let misses: u64 = dp.pmd_stats().iter().map(|s| s.misses).sum();
    assert_eq!(
        misses, 2,
        "the flow installed before revalidation was dropped"
    );
    assert!(
        idle < Duration::from_secs(2),
        "1000 revalidations of an empty datapath took {idle:?}"
    );
}

/// A per-flow revalidation that finds nothing stale does not wait for a PMD holding flows but
/// not in an upcall (nothing it holds or installs later predates the change); it waits when
/// something is stale, and for a PMD inside an upcall even when nothing is.
#[test]
fn revalidating_nothing_stale_waits_only_for_a_pmd_in_an_upcall() {
    let t = DpTuning {
        ack_timeout: Duration::from_millis(300),
        ..tuning()
    };
    let pipe = TestPipeline::new(vec![Action::Output(2)]);
    let dp = Datapath::with_tuning(config(&[0]), t, pipe).unwrap();
    let p1 = Arc::new(Misbehaving::default());
    let p2 = Arc::new(DummyPort::new());
    dp.add_port(1, "p1", p1.clone(), &[]).unwrap();
    dp.add_port(2, "p2", p2.clone(), &[]).unwrap();
    p1.inner.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    assert_eq!(collect(&p2, 1).len(), 1);
    assert_eq!(dp.megaflows().len(), 1);
    // From now on the PMD answers nothing for seconds at a time.
    p1.stall_ms.store(2000, SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    let t0 = std::time::Instant::now();
    assert_eq!(dp.revalidate_flows(1, &|_| false), Ok(0));
    assert!(
        t0.elapsed() < Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let err = dp.revalidate_flows(2, &|_| true).unwrap_err();
    assert!(matches!(err, dp::DpError::PmdStuck { .. }), "{err}");
    p1.stall_ms.store(0, SeqCst);
    let t0 = std::time::Instant::now();
    while !dp.megaflows().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the stale flow never went"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // A PMD inside an upcall is waited for even when nothing is stale.
    let stuck = Arc::new(Stuck(Default::default()));
    let dp = Datapath::with_tuning(config(&[0]), t, stuck.clone()).unwrap();
    let p = Arc::new(DummyPort::new());
    dp.add_port(1, "p", p.clone(), &[]).unwrap();
    p.inject(udp_frame(0x0a00_0002, 1)).unwrap();
    wait_for("the PMD to enter the upcall", || stuck.0.load(SeqCst));
    let err = dp.revalidate_flows(1, &|_| false).unwrap_err();
    assert!(matches!(err, dp::DpError::PmdStuck { .. }), "{err}");
}

#[test]
fn execute_runs_packet_out_actions_from_the_control_thread() {
    let pipe = TestPipeline::new(vec![]);
    let dp = start(config(&[0]), pipe.clone());
    let (p1, p2) = two_ports(&dp);
    let frame = udp_frame(0x0a00_0002, 53);
    let actions = [
        Action::Output(1),
        Action::SetTpDst(5353),
        Action::PushVlan(0x1000 | 7),
        Action::Output(2),
    ];
    dp.execute(Some(1), &actions, &frame).unwrap();
    let a = p1.take_captured();
    let b = p2.take_captured();
    assert_eq!(
        a,
        vec![frame.clone()],
        "first output sees the frame unmodified"
    );
    assert_eq!(b.len(), 1);
    let k = wire::extract(&b[0], 2);
    assert_eq!(k.get(Field::TpDst), 5353);
    assert_eq!(k.get(Field::VlanTci), 0x1000 | 7);
    assert!(checksums_ok(&b[0]));
    // An unknown output port fails before anything is sent.
    let err = dp.execute(None, &[Action::Output(1), Action::Output(9)], &frame);
    assert!(matches!(err, Err(dp::DpError::NoSuchPort(9))));
    assert!(p1.take_captured().is_empty());
}
