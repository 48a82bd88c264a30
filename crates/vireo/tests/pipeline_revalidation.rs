//! Per-flow revalidation against a real datapath (one PMD thread, dummy ports): MAC churn on
//! one port removes no other port's megaflows, a MAC move removes exactly the megaflows that
//! looked at that MAC, a rule change removes only the megaflows whose translation it changes,
//! rule changes as the pipeline records them re-translate only the megaflows they may touch,
//! and the per-port MAC limit keeps a churning port from learning (or revalidating) at all.
//!
//! Lives here (not in `ofproto`) because it needs the datapath: `ofproto` depends only on the
//! leaf crate `dpif`.

use dp::{AssignMode, Datapath, DpConfig, DpTuning, MegaflowInfo, Topology};
use ofproto::{Pipeline, PipelineConfig, PortSpec};
use ports::dummy::DummyPort;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0, 0, 0, 0, 0, 0x0b];
const MAC_C: [u8; 6] = [0, 0, 0, 0, 0, 0x0c];
const MAC_D: [u8; 6] = [0, 0, 0, 0, 0, 0x0d];
const BCAST: [u8; 6] = [0xff; 6];

/// Datapath port of OpenFlow port `n` (p1..p4 → 11..14).
fn dpno(n: u32) -> u32 {
    10 + n
}

/// br0 with p1..p4, all trunks of every VLAN.
fn pipeline() -> Pipeline {
    let pl = Pipeline::new(PipelineConfig::default());
    pl.add_bridge("br0").unwrap();
    for n in 1..=4 {
        pl.add_port(
            "br0",
            PortSpec {
                name: format!("p{n}"),
                dp_port: dpno(n),
                ofport: Some(n),
                tag: None,
                trunks: vec![],
                mac_limit: None,
            },
        )
        .unwrap();
    }
    pl
}

struct Rig {
    pl: Arc<Pipeline>,
    dp: Datapath,
    /// p1..p4 (index 0 unused).
    ports: Vec<Arc<DummyPort>>,
}

fn rig() -> Rig {
    let pl = Arc::new(pipeline());
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
    let dp = Datapath::with_tuning(cfg, tuning, pl.clone()).unwrap();
    let mut ports = vec![Arc::new(DummyPort::new())];
    for n in 1..=4 {
        let p = Arc::new(DummyPort::new());
        dp.add_port(dpno(n), &format!("p{n}"), p.clone(), &[])
            .unwrap();
        ports.push(p);
    }
    Rig { pl, dp, ports }
}

/// Ethernet + IPv4 + UDP, 60 bytes.
fn frame(src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 26, 0, 0]);
    f.resize(60, 0);
    f
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Rig {
    /// Sends `n` frames src→dst into port `from` and waits until port `to` got them all
    /// (`to` = None: nowhere to wait, e.g. a drop).
    fn send(&self, from: usize, src: [u8; 6], dst: [u8; 6], n: usize, to: Option<usize>) {
        let before = self.processed();
        for _ in 0..n {
            self.ports[from].inject(frame(src, dst)).unwrap();
        }
        if let Some(to) = to {
            let mut got = 0;
            wait_for("frames out", || {
                got += self.ports[to].take_captured().len();
                got >= n
            });
            assert_eq!(got, n);
        }
        wait_for("stats", || self.processed() >= before + n as u64);
    }

    fn processed(&self) -> u64 {
        self.dp.pmd_stats().iter().map(|s| s.packets).sum()
    }

    fn misses(&self) -> u64 {
        self.dp.pmd_stats().iter().map(|s| s.misses).sum()
    }

    fn drain(&self) {
        for p in &self.ports {
            p.take_captured();
        }
    }

    /// What the daemon's housekeeping does every 50 ms.
    fn reval(&self) -> usize {
        self.pl.revalidate_datapath(&self.dp, false).unwrap()
    }

    fn flow(&self, src: [u8; 6], dst: [u8; 6]) -> Option<MegaflowInfo> {
        let (s, d) = (
            format!("eth_src={}", mac_str(src)),
            format!("eth_dst={}", mac_str(dst)),
        );
        self.dp
            .megaflows()
            .into_iter()
            .find(|f| f.match_.contains(&s) && f.match_.contains(&d))
    }

    /// A on p1 and B on p2 know each other; A→B and B→A megaflows installed and warm.
    fn learn_a_b(&self) {
        self.send(1, MAC_A, MAC_B, 1, Some(2));
        self.reval();
        self.send(2, MAC_B, MAC_A, 1, Some(1));
        self.reval();
        self.send(1, MAC_A, MAC_B, 10, Some(2));
        self.send(2, MAC_B, MAC_A, 10, Some(1));
        self.reval();
        self.drain();
    }
}

#[test]
fn mac_churn_on_one_port_keeps_the_other_ports_megaflows() {
    let r = rig();
    r.pl.set_port_mac_limit("br0", "p3", Some(0)).unwrap(); // no limit: every MAC is learned
    r.learn_a_b();
    let ab = r.flow(MAC_A, MAC_B).expect("A->B megaflow");
    assert_eq!(ab.actions, format!("output:{}", dpno(2)));
    let misses = r.misses();
    // 300 new source MACs on p3, each learned (a MAC table change) and revalidated.
    for i in 0..300u32 {
        let x = [0x02, 0, 0, 0, (i >> 8) as u8, i as u8];
        r.send(3, x, BCAST, 1, Some(1));
        if i % 10 == 0 {
            r.reval();
        }
    }
    r.reval();
    assert!(r.pl.mac_entries("br0").unwrap().len() >= 302);
    r.drain();
    let churn_misses = r.misses() - misses;
    assert!(
        churn_misses >= 300,
        "each new MAC was an upcall: {churn_misses}"
    );
    // A<->B kept their megaflows through the churn: same flows, counters running on, and
    // their traffic causes no upcall.
    let before = r.misses();
    r.send(1, MAC_A, MAC_B, 50, Some(2));
    r.send(2, MAC_B, MAC_A, 50, Some(1));
    assert_eq!(r.misses(), before, "no upcall for A<->B after the churn");
    let ab2 = r.flow(MAC_A, MAC_B).expect("A->B megaflow still installed");
    assert_eq!(
        ab2.packets,
        ab.packets + 50,
        "the same megaflow, never flushed"
    );
    assert_eq!(
        r.flow(MAC_B, MAC_A).expect("B->A").packets,
        10 + 50,
        "B->A never flushed"
    );
}

#[test]
fn a_mac_move_removes_exactly_the_megaflows_that_looked_at_it() {
    let r = rig();
    r.learn_a_b();
    r.send(3, MAC_C, MAC_D, 1, Some(4)); // flood; C learned on p3
    r.send(4, MAC_D, MAC_C, 1, Some(3));
    r.reval();
    r.send(3, MAC_C, MAC_D, 5, Some(4));
    r.reval();
    r.drain();
    let cd = r.flow(MAC_C, MAC_D).expect("C->D").packets;
    // B moves from p2 to p4 (a VM migrating): B->A from p4.
    r.send(4, MAC_B, MAC_A, 1, Some(1));
    let stale = r.reval();
    assert!(stale >= 2, "A->B and the old B->A went: {stale}");
    assert!(r.flow(MAC_A, MAC_B).is_none(), "A->B looked at B: removed");
    assert_eq!(
        r.flow(MAC_C, MAC_D).map(|f| f.packets),
        Some(cd),
        "C->D kept"
    );
    let before = r.misses();
    r.send(1, MAC_A, MAC_B, 5, Some(4));
    assert!(
        r.ports[2].take_captured().is_empty(),
        "no packet followed the old decision"
    );
    assert_eq!(r.misses(), before + 1, "A->B translated again, once");
    r.send(3, MAC_C, MAC_D, 5, Some(4));
    assert_eq!(r.misses(), before + 1, "C->D still cached");
}

#[test]
fn a_rule_change_removes_only_the_megaflows_whose_translation_changed() {
    let r = rig();
    r.learn_a_b();
    r.send(3, MAC_C, MAC_D, 1, Some(4));
    r.send(4, MAC_D, MAC_C, 1, Some(3));
    r.reval();
    r.send(3, MAC_C, MAC_D, 5, Some(4));
    r.reval();
    r.drain();
    let ab = r.flow(MAC_A, MAC_B).unwrap().packets;
    r.pl.add_flow("br0", "priority=100,in_port=3,actions=drop")
        .unwrap();
    let stale = r.pl.revalidate_datapath(&r.dp, true).unwrap();
    assert_eq!(stale, 1, "only C->D (in_port=3) changed");
    assert!(r.flow(MAC_C, MAC_D).is_none());
    assert_eq!(r.flow(MAC_A, MAC_B).map(|f| f.packets), Some(ab));
    let before = r.misses();
    r.send(3, MAC_C, MAC_D, 5, None);
    assert!(r.ports[4].take_captured().is_empty(), "C->D now dropped");
    r.send(1, MAC_A, MAC_B, 5, Some(2));
    assert_eq!(r.misses(), before + 1, "only C->D was translated again");
    r.pl.del_flows("br0", Some("in_port=3"), false).unwrap();
    assert_eq!(r.pl.revalidate_datapath(&r.dp, true).unwrap(), 1);
    r.send(3, MAC_C, MAC_D, 5, Some(4));
    assert_eq!(r.flow(MAC_A, MAC_B).map(|f| f.packets), Some(ab + 5));
}

#[test]
fn recorded_rule_changes_recheck_only_the_megaflows_they_may_touch() {
    let r = rig();
    // p1's packets go through table 0 (seen as they arrived), a register load, then table 1
    // (seen changed); every other port's only through table 0.
    r.pl.add_flow(
        "br0",
        "priority=300,in_port=1,actions=load:0x1->NXM_NX_REG0[],resubmit(,1)",
    )
    .unwrap();
    r.pl.add_flow("br0", "table=1,priority=1,actions=NORMAL")
        .unwrap();
    r.reval();
    r.learn_a_b();
    r.send(3, MAC_C, MAC_D, 1, Some(4));
    r.send(4, MAC_D, MAC_C, 1, Some(3));
    r.reval();
    r.send(3, MAC_C, MAC_D, 5, Some(4));
    r.send(4, MAC_D, MAC_C, 5, Some(3));
    r.reval();
    r.drain();
    let flows: Vec<String> = r.dp.megaflows().iter().map(|f| f.match_.clone()).collect();
    assert_eq!(flows.len(), 4, "A->B, B->A, C->D, D->C: {flows:#?}");
    let ba = r.flow(MAC_B, MAC_A).unwrap().packets;
    let rechecks = |before: &mut u64| {
        let now = r.pl.revalidation_rechecks();
        let d = now - *before;
        *before = now;
        d
    };
    let mut n = r.pl.revalidation_rechecks();

    // A table no translation looked up: nothing to re-check.
    r.pl.add_flow("br0", "table=7,priority=5,actions=drop")
        .unwrap();
    assert_eq!(r.reval(), 0);
    assert_eq!(rechecks(&mut n), 0, "table 7 is in no megaflow's walk");
    // Table 0, a port no megaflow came in on: no overlap (every megaflow matches in_port).
    r.pl.add_flow("br0", "priority=100,in_port=5,actions=drop")
        .unwrap();
    r.pl.del_flows("br0", Some("in_port=5"), false).unwrap();
    assert_eq!(r.reval(), 0);
    assert_eq!(rechecks(&mut n), 0, "no megaflow came in on port 5");
    // Table 0, in_port=3: overlaps C->D only, which it changes.
    r.pl.add_flow("br0", "priority=100,in_port=3,actions=drop")
        .unwrap();
    assert_eq!(r.reval(), 1, "C->D is stale");
    assert_eq!(rechecks(&mut n), 1, "only C->D re-checked");
    assert!(r.flow(MAC_C, MAC_D).is_none());
    r.send(3, MAC_C, MAC_D, 5, None);
    assert!(r.ports[4].take_captured().is_empty(), "C->D now dropped");
    // Table 1, matching reg0=2: A->B looked table 1 up after the load, so it is re-checked
    // whatever the rule matches (and stays: reg0 is 1 there).
    r.pl.add_flow("br0", "table=1,priority=10,reg0=2,actions=drop")
        .unwrap();
    assert_eq!(r.reval(), 0);
    assert_eq!(rechecks(&mut n), 1, "only A->B visits table 1");
    // Table 1, matching reg0=1: the same re-check, and now A->B changes.
    r.pl.add_flow("br0", "table=1,priority=10,reg0=1,actions=drop")
        .unwrap();
    assert_eq!(r.reval(), 1, "A->B is stale");
    assert_eq!(rechecks(&mut n), 1);
    r.send(1, MAC_A, MAC_B, 5, None);
    assert!(r.ports[2].take_captured().is_empty(), "A->B now dropped");
    // B->A was never re-checked and still forwards, from its old megaflow.
    r.send(2, MAC_B, MAC_A, 5, Some(1));
    assert_eq!(r.flow(MAC_B, MAC_A).map(|f| f.packets), Some(ba + 5));
}

#[test]
fn a_port_at_its_mac_limit_learns_nothing_and_revalidates_nothing() {
    let r = rig();
    r.pl.set_port_mac_limit("br0", "p3", Some(8)).unwrap();
    r.learn_a_b();
    for i in 0..100u32 {
        let x = [0x02, 0, 0, 0, 0, i as u8];
        // Unknown source beyond the limit: still flooded, as NORMAL does.
        r.send(3, x, BCAST, 1, Some(1));
    }
    r.reval();
    let stats = r.pl.mac_port_stats("br0").unwrap();
    let p3 = stats.iter().find(|(n, _)| n == "p3").unwrap().1;
    assert_eq!((p3.entries, p3.limit, p3.refused), (8, 8, 92));
    assert_eq!(r.pl.mac_entries("br0").unwrap().len(), 10);
    // Once full, a churning port changes nothing, so nothing is revalidated.
    let before = r.misses();
    for i in 200..250u32 {
        r.send(3, [0x02, 0, 0, 0, 1, i as u8], BCAST, 1, Some(1));
    }
    assert_eq!(r.misses(), before + 50, "each new source is an upcall");
    assert!(
        r.pl.take_changes().tags.is_empty(),
        "but no MAC table change"
    );
    // A refused source is learned once its port has room (its megaflow carries the limit).
    let refused = [0x02, 0, 0, 0, 0, 50];
    r.drain();
    r.pl.set_port_mac_limit("br0", "p3", Some(100)).unwrap();
    assert!(r.reval() >= 1, "the refused sources' megaflows go");
    r.send(3, refused, BCAST, 1, Some(1));
    let known = r.pl.mac_entries("br0").unwrap();
    assert!(known.iter().any(|e| e.1 == refused && e.2 == 3));
}
