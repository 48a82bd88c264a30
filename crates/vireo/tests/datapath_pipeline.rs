//! Golden datapath tests through a real vireod with dummy ports (harness in `dp_harness`):
//! goto_table and priorities, revalidation without delay, megaflow masks and statistics, port
//! drop counters, a live PMD core change, and flow counters and idle timeouts of cached
//! traffic.
mod common;
mod dp_harness;
mod frames;

use dp_harness::*;
use frames::*;
use std::time::{Duration, Instant};

#[test]
fn goto_table_and_priorities() {
    let _g = serial();
    let sw = Sw::simple(4);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    sw.flows(&[
        "table=0,priority=10,in_port=p1,actions=mod_dl_src:02:00:00:00:00:aa,goto_table:1",
        "table=1,priority=5,udp,actions=output:p3",
        "table=1,priority=6,udp,tp_dst=2000,actions=output:p4",
    ]);
    let o = sw.one("p1", &f, "p4");
    assert_eq!(o[6..12], mac(0xaa));
    assert_eq!(o[12..], f[12..]);
    let o = sw.one("p1", &udp(mac(2), mac(1), IP1, IP2, 1000, 2001), "p3");
    assert_eq!(o[6..12], mac(0xaa));
    // A table miss in table 1 drops.
    sw.expect_same("p1", &tcp(mac(2), mac(1), IP1, IP2, 1, 2), &[]);
    // A higher priority rule in table 0 wins over the goto.
    sw.ok(&[
        "add-flow",
        BR,
        "table=0,priority=20,udp,in_port=p1,actions=output:p2",
    ]);
    sw.expect_same("p1", &f, &["p2"]);
    // Deleting it strictly brings the lower one back, at once.
    sw.ok(&[
        "del-flows",
        BR,
        "--strict",
        "table=0,priority=20,udp,in_port=p1",
    ]);
    assert_eq!(sw.one("p1", &f, "p4")[6..12], mac(0xaa));
    // Same priority, more specific flow wins nothing by itself: priority decides.
    sw.ok(&[
        "add-flow",
        BR,
        "table=1,priority=1,udp,tp_dst=2000,actions=output:p2",
    ]);
    sw.one("p1", &f, "p4");
    // mod-flows changes actions in place.
    sw.ok(&["mod-flows", BR, "table=1,udp,tp_dst=2000,actions=output:p2"]);
    assert_eq!(sw.one("p1", &f, "p2")[6..12], mac(0xaa));
    let dump = sw.ok(&["dump-flows", BR]);
    assert!(dump.contains("goto_table:1"), "{dump}");
}

#[test]
fn revalidation_is_immediate() {
    let _g = serial();
    let sw = Sw::simple(3);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    // Learn both MACs, then warm the caches with the same frame.
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
    sw.learned("p1", &f, "p2");
    for _ in 0..3 {
        sw.expect_same("p1", &f, &["p2"]);
    }
    for round in 0..5 {
        // The very first packet after each command follows the new decision.
        sw.ok(&["add-flow", BR, "priority=100,in_port=p1,actions=drop"]);
        sw.expect_same("p1", &f, &[]);
        sw.ok(&["mod-flows", BR, "in_port=p1,actions=output:p3"]);
        sw.expect_same("p1", &f, &["p3"]);
        sw.ok(&["del-flows", BR, "in_port=p1"]);
        sw.expect_same("p1", &f, &["p2"]);
        // A port's VLAN change too.
        sw.ok(&["set-port", "p2", "tag=5"]);
        // MAC 2 is unknown in VLAN 0 now: flooded there, and p2 is not in it.
        sw.expect_same("p1", &f, &["p3"]);
        sw.ok(&["set-port", "p2", "tag="]);
        // Back in VLAN 0, p2 is flooded to at once (its MACs may have been forgotten).
        let got = sw.send("p1", &f);
        assert_eq!(got["p2"], vec![f.clone()], "round {round}");
        sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
        sw.learned("p1", &f, "p2");
    }
}

#[test]
fn megaflows_are_masked_and_stats_add_up() {
    let _g = serial();
    let sw = Sw::simple(3);
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 1, 1));
    sw.learned("p1", &udp(mac(2), mac(1), IP1, IP2, 1, 1), "p2");
    sw.learned("p2", &udp(mac(1), mac(2), IP2, IP1, 1, 1), "p1");
    sw.ok(&["pmd-stats-clear"]);
    // 100 flows differing in UDP ports, both ways, all through NORMAL.
    for i in 0..100u16 {
        sw.inject(
            "p1",
            &udp_id(mac(2), mac(1), IP1, IP2, 1000 + i, 2000 + i, i.into()),
        );
        sw.inject(
            "p2",
            &udp_id(mac(1), mac(2), IP2, IP1, 3000 + i, 4000 + i, i.into()),
        );
    }
    let got1 = sw.flush("p1");
    let got2 = sw.flush("p2");
    assert_eq!(got1["p2"].len(), 100);
    assert_eq!(got1["p1"].len() + got2["p1"].len(), 100);
    assert!(got1["p3"].is_empty() && got2["p3"].is_empty());
    // In order, unmodified.
    for (i, fr) in got1["p2"].iter().enumerate() {
        assert_eq!(fr[42..46], (i as u32).to_be_bytes());
    }
    let mf = sw.json(&["dump-megaflows"]);
    let mfs = mf.as_array().unwrap();
    let udp_mfs: Vec<&serde_json::Value> = mfs
        .iter()
        .filter(|m| !m["match"].as_str().unwrap().contains("0x88b5"))
        .collect();
    assert!(
        !udp_mfs.is_empty() && udp_mfs.len() <= 4,
        "NORMAL needs a handful of megaflows, got {}: {mf:#}",
        udp_mfs.len()
    );
    for m in &udp_mfs {
        let s = m["match"].as_str().unwrap();
        assert!(!s.contains("tp_dst") && !s.contains("tp_src"), "{s}");
        assert!(!s.contains("ipv4"), "NORMAL does not look at IP: {s}");
    }
    let pkts: u64 = udp_mfs.iter().map(|m| m["packets"].as_u64().unwrap()).sum();
    assert!(pkts >= 198, "megaflow hits {pkts}: {mf:#}");
    // PMD counters add up.
    let st = sw.json(&["pmd-stats-show"]);
    let pmds = st.as_array().unwrap();
    assert_eq!(pmds.len(), 1, "{st:#}");
    let p = &pmds[0];
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    assert_eq!(p["core"], 0);
    // 200 frames plus 4 markers.
    assert_eq!(n("packets"), 204, "{p}");
    assert_eq!(
        n("packets"),
        n("emc_hits") + n("smc_hits") + n("megaflow_hits") + n("misses"),
        "{p}"
    );
    assert!(n("misses") <= 6, "{p}");
    assert_eq!(n("lost"), 0, "{p}");
    assert!(n("busy_cycles") > 0, "{p}");
    // Port counters: what went in and out.
    let ps = sw.json(&["port-stats", "p1"]);
    assert_eq!(ps[0]["rx_packets"], sw.injected.borrow()["p1"]);
    sw.ok(&["pmd-stats-clear"]);
    let p = &sw.json(&["pmd-stats-show"])[0];
    assert_eq!(p["packets"], 0);
    assert_eq!(p["emc_hits"], 0);
}

#[test]
fn port_stats_count_drops_by_reason() {
    let _g = serial();
    let sw = Sw::simple(3);
    // A vhost-user port nobody connected to: its link is down.
    sw.ok(&["add-port", BR, "v1", "type=vhost-user"]);
    let drops = |p: &str, why: &str| {
        sw.json(&["port-stats", p])[0]["drops"][why]
            .as_u64()
            .unwrap_or(0)
    };
    let before = drops("v1", "link-down");
    let bc = udp(BCAST, mac(1), IP1, IP2, 1, 2);
    for _ in 0..5 {
        sw.inject("p1", &bc);
    }
    let got = sw.flush("p1");
    assert_eq!(got["p2"].len(), 5);
    assert_eq!(got["p3"].len(), 5);
    // Five floods plus the two markers (ALL) reached v1 and were dropped there as link-down.
    assert_eq!(drops("v1", "link-down") - before, 7);
    let ps = sw.json(&["port-stats"]);
    let v1 = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == "v1")
        .unwrap();
    assert_eq!(v1["tx_packets"], 0);
    let p2 = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == "p2")
        .unwrap();
    assert_eq!(p2["tx_packets"], 6);
    assert_eq!(p2["tx_bytes"], 5 * bc.len() as u64 + 60);
    let text = sw.ok(&["port-stats", "v1"]);
    assert!(text.contains("link-down=7"), "{text}");
}

#[test]
fn set_pmd_cores_live_keeps_forwarding() {
    let _g = serial();
    let sw = Sw::simple(3);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
    sw.learned("p1", &f, "p2");
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let other = if online > 1 { "1" } else { "0" };
    for cores in [other, "0", if online > 1 { "0,1" } else { "0" }, "0"] {
        eprintln!("pmd cores {cores}");
        sw.ok(&["set-pmd-cores", cores]);
        let want: Vec<u64> = cores.split(',').map(|c| c.parse().unwrap()).collect();
        let st = sw.json(&["pmd-stats-show"]);
        let mut have: Vec<u64> = st
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["core"].as_u64().unwrap())
            .collect();
        have.sort();
        assert_eq!(have, want, "{st:#}");
        // Every rx queue is polled by one of them.
        let rxq = sw.json(&["pmd-rxq-show"]);
        assert_eq!(rxq.as_array().unwrap().len(), 3, "{rxq:#}");
        for q in rxq.as_array().unwrap() {
            assert!(want.contains(&q["core"].as_u64().unwrap()), "{rxq:#}");
        }
        for _ in 0..3 {
            sw.expect_same("p1", &f, &["p2"]);
            sw.expect_same("p3", &udp(BCAST, mac(3), IP1, IP2, 1, 1), &["p1", "p2"]);
        }
        // The MAC table survived.
        sw.expect_same("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000), &["p1"]);
    }
    assert_eq!(sw.json(&["show"])["pmd_cores"], "0");
}

fn n_packets(sw: &Sw, flow: &str) -> u64 {
    let flows = sw.json(&["dump-flows", BR]);
    let line = flows
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .find(|f| f.contains(flow))
        .unwrap_or_else(|| panic!("no flow with {flow}: {flows:#}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in {line}"))
}

/// OpenFlow rule counters and idle timeouts must see the traffic the datapath caches
/// (megaflow/EMC hits) carry, not only the packets that went up to the pipeline.
#[test]
fn flow_counters_and_idle_timeouts_see_cached_traffic() {
    let _g = serial();
    let sw = Sw::simple(3);
    sw.flows(&[
        "priority=100,in_port=p1,actions=output:p2",
        "priority=100,idle_timeout=2,in_port=p3,actions=output:p2",
    ]);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    for _ in 0..20 {
        sw.inject("p1", &f);
    }
    assert_eq!(sw.flush("p1")["p2"].len(), 20);
    let deadline = Instant::now() + Duration::from_secs(3);
    while n_packets(&sw, "in_port=p1") != 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        n_packets(&sw, "in_port=p1"),
        20,
        "dump-flows does not count cached hits: {}",
        sw.ok(&["dump-flows", BR])
    );
    // A flow with traffic every 300 ms outlives its 2 s idle timeout.
    let g = udp(mac(2), mac(3), IP1, IP2, 3, 4);
    for i in 0..12 {
        let got = sw.send("p3", &g);
        assert!(
            got["p2"] == vec![g.clone()] && got["p1"].is_empty(),
            "packet {i}: the idle timeout expired a busy flow (NORMAL took over): {}\n{}",
            dump(&got),
            sw.ok(&["dump-flows", BR])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Cached hits are credited to rules once a second.
    let deadline = Instant::now() + Duration::from_secs(3);
    while n_packets(&sw, "in_port=p3") < 12 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(n_packets(&sw, "in_port=p3") >= 12);
}
