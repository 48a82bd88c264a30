//! vhost-user ports against a real frontend: DPDK testpmd's `net_virtio_user`.
//!
//! Two Vireo ports A and B are wired port to port by a forwarding thread in the test; testpmd
//! attaches one virtio-user vdev to each and forwards between them, so traffic circles
//! testpmd port 0 → A → B → testpmd port 1 → testpmd port 0 … Skipped (with a message) only when
//! dpdk-testpmd is not installed.
mod vhost_common;

use ports::vhost_user::VhostUserPort;
use ports::{Link, Port};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use vhost_common::*;

fn vdev(i: u8, path: &Path, queues: usize, extra: &str) -> String {
    let m = mac(i);
    format!(
        "net_virtio_user{i},mac={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x},path={},queues={queues}{extra}",
        m[0], m[1], m[2], m[3], m[4], m[5],
        path.display()
    )
}

fn prefix(name: &str) -> String {
    format!("vireo-{name}-{}", std::process::id())
}

fn links_up(a: &VhostUserPort, b: &VhostUserPort) -> bool {
    a.link() == Link::Up && b.link() == Link::Up
}

/// Runs traffic for `secs` in mac mode and checks flow both ways, content and accounting.
fn traffic_round(tp: &mut Testpmd, a: &Arc<VhostUserPort>, b: &Arc<VhostUserPort>, queues: usize) {
    assert!(
        wait_until(Duration::from_secs(30), || links_up(a, b)),
        "ports never came up: {}\n{}",
        a.status(),
        tp.log.join("\n")
    );
    tp.sync();
    let (sa0, sb0) = (a.stats(), b.stats());
    let fwd = Forwarder::start(Arc::clone(a), Arc::clone(b), true, None);
    tp.cmd("start tx_first");
    let moving = wait_until(Duration::from_secs(20), || {
        fwd.stats.a_to_b.load(Relaxed) > 2000 && fwd.stats.b_to_a.load(Relaxed) > 2000
    });
    std::thread::sleep(Duration::from_millis(500));
    tp.stop_fwd();
    std::thread::sleep(Duration::from_millis(300));
    let st = fwd.stop();
    let tps = tp.port_stats(2);
    let (sa, sb) = (a.stats(), b.stats());
    let (a2b, b2a) = (st.a_to_b.load(Relaxed), st.b_to_a.load(Relaxed));
    eprintln!(
        "forwarded a->b {a2b} b->a {b2a}; checked {}; testpmd {tps:?}; A {sa:?}; B {sb:?}",
        st.checked.load(Relaxed)
    );
    assert!(
        moving,
        "traffic did not flow both ways: a->b {a2b} b->a {b2a}\n{}",
        tp.log.join("\n")
    );
    assert_eq!(st.bad.load(Relaxed), 0, "frames with wrong content");
    assert_eq!(st.checked.load(Relaxed), a2b + b2a);
    if queues > 1 {
        for q in 0..queues {
            assert!(
                st.per_queue[q].load(Relaxed) > 0,
                "queue pair {q} carried nothing"
            );
        }
    }
    // Accounting against testpmd's own counters: everything testpmd port 0 sent, A received;
    // everything testpmd port 1 received, B sent (B may have sent a ring's worth more that
    // testpmd had not polled when it stopped).
    assert_eq!(tps.len(), 2);
    assert_eq!(
        sa.rx_packets - sa0.rx_packets,
        tps[0].1,
        "A rx vs testpmd port 0 tx"
    );
    assert_eq!(
        sb.rx_packets - sb0.rx_packets,
        tps[1].1,
        "B rx vs testpmd port 1 tx"
    );
    let b_tx = sb.tx_packets - sb0.tx_packets;
    assert!(
        b_tx >= tps[1].0 && b_tx - tps[1].0 <= 1024 * queues as u64,
        "B tx {b_tx} vs testpmd port 1 rx {}",
        tps[1].0
    );
    assert_eq!(b_tx + (sb.total_drops() - sb0.total_drops()), a2b);
}

/// Loops testpmd's traffic through two server ports (surviving `restarts` testpmd kills) and
/// checks what every variant shares; returns the features negotiated, for the variant's own
/// checks, or None when testpmd is not installed.
fn loop_test(name: &str, extra: &str, queues: usize, restarts: usize) -> Option<Vec<String>> {
    let _g = serial();
    let bin = testpmd_bin()?;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = VhostUserPort::server(&pa, queues).unwrap();
    let b = VhostUserPort::server(&pb, queues).unwrap();
    assert_eq!(a.link(), Link::Down);
    let q = format!("--rxq={queues}");
    let t = format!("--txq={queues}");
    let vdevs = [vdev(0, &pa, queues, extra), vdev(1, &pb, queues, extra)];
    let args = ["-i", "--forward-mode=mac", &q, &t];
    for round in 0..restarts {
        // The same server ports serve a new testpmd after the last one was killed.
        let mut tp = Testpmd::start(&bin, &prefix(&format!("{name}{round}")), &vdevs, &args);
        traffic_round(&mut tp, &a, &b, queues);
        tp.kill();
        assert!(wait_until(Duration::from_secs(10), || a.link() == Link::Down));
    }
    let mut tp = Testpmd::start(&bin, &prefix(name), &vdevs, &args);
    traffic_round(&mut tp, &a, &b, queues);
    let s = a.status();
    assert_eq!(s["state"], "connected");
    assert_eq!(s["queues"], queues);
    let feats: Vec<String> = serde_json::from_value(s["features"].clone()).unwrap();
    assert!(feats.iter().any(|f| f == "version_1"), "{s}");
    assert_eq!(s["broken_queues"], 0);
    // Every running ring reports its indices; the device returns each tx buffer in the burst
    // that took it, so on the guest's tx rings what it took and what it used agree.
    let rings = s["rings"].as_array().expect("rings");
    assert_eq!(rings.len(), 2 * queues, "{s}");
    for r in rings {
        assert_eq!(r["broken"], false, "{r}");
        assert!(r["size"].as_u64().unwrap() >= 64, "{r}");
        if has(&feats, "ring_packed") {
            // Packed rings have no avail index; positions carry their wrap counters.
            assert_eq!(r["layout"], "packed", "{r}");
            assert!(r["avail_wrap"].is_u64() && r["used_wrap"].is_u64(), "{r}");
            assert!(r["last_avail_idx"].as_u64().unwrap() < r["size"].as_u64().unwrap());
        } else {
            assert_eq!(r["layout"], "split", "{r}");
            assert!(r["driver_avail_idx"].is_u64(), "{r}");
        }
        if r["vring"].as_u64().unwrap() % 2 == 1 {
            assert_eq!(r["last_avail_idx"], r["used_idx"], "{r}");
            assert_eq!(r["avail_wrap"], r["used_wrap"], "{r}");
        }
    }
    tp.quit();
    // The frontend went away: links go down, the server waits for the next one.
    assert!(wait_until(Duration::from_secs(10), || a.link()
        == Link::Down
        && b.link() == Link::Down));
    assert_eq!(a.status()["state"], "listening");
    a.shutdown();
    b.shutdown();
    assert!(!pa.exists() && !pb.exists(), "socket files not removed");
    Some(feats)
}

fn has(feats: &[String], name: &str) -> bool {
    feats.iter().any(|f| f == name)
}

#[test]
fn testpmd_split_ring_mrg_rxbuf() {
    let Some(f) = loop_test("mrg", ",in_order=0", 1, 1) else {
        return;
    };
    assert!(has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_split_ring_no_mrg_rxbuf() {
    let Some(f) = loop_test("nomrg", ",mrg_rxbuf=0", 1, 0) else {
        return;
    };
    assert!(!has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_in_order() {
    let Some(f) = loop_test("inorder", ",in_order=1", 1, 0) else {
        return;
    };
    assert!(has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_two_queue_pairs() {
    let Some(f) = loop_test("mq", "", 2, 0) else {
        return;
    };
    assert!(has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_packed_ring_mrg_rxbuf() {
    let Some(f) = loop_test("pk-mrg", ",packed_vq=1,in_order=0", 1, 1) else {
        return;
    };
    assert!(has(&f, "ring_packed") && has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_packed_ring_no_mrg_rxbuf() {
    let Some(f) = loop_test("pk-nomrg", ",packed_vq=1,mrg_rxbuf=0,in_order=0", 1, 0) else {
        return;
    };
    assert!(has(&f, "ring_packed") && !has(&f, "mrg_rxbuf"), "{f:?}");
}

#[test]
fn testpmd_packed_ring_in_order() {
    let Some(f) = loop_test("pk-inorder", ",packed_vq=1,in_order=1", 1, 0) else {
        return;
    };
    assert!(has(&f, "ring_packed") && has(&f, "in_order"), "{f:?}");
}

#[test]
fn testpmd_packed_ring_two_queue_pairs() {
    let Some(f) = loop_test("pk-mq", ",packed_vq=1", 2, 0) else {
        return;
    };
    assert!(has(&f, "ring_packed"), "{f:?}");
}

/// Client mode on packed rings: testpmd (the server) stays up while the switch's ports go away
/// and come back (a switch restart); the new ports resume the rings and traffic flows again.
#[test]
fn testpmd_packed_client_mode_survives_switch_restart() {
    let _g = serial();
    let Some(bin) = testpmd_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let vdevs = [
        vdev(0, &pa, 1, ",server=1,packed_vq=1"),
        vdev(1, &pb, 1, ",server=1,packed_vq=1"),
    ];
    let mut tp = Testpmd::start(
        &bin,
        &prefix("pk-client"),
        &vdevs,
        &["-i", "--forward-mode=mac"],
    );
    for round in 0..3 {
        let a = VhostUserPort::client(&pa, 1, 100).unwrap();
        let b = VhostUserPort::client(&pb, 1, 100).unwrap();
        // The accounting in `traffic_round` is per round on both sides.
        tp.cmd("clear port stats all");
        tp.wait_for("port 1 cleared", Duration::from_secs(10))
            .expect("stats cleared");
        traffic_round(&mut tp, &a, &b, 1);
        let feats: Vec<String> = serde_json::from_value(a.status()["features"].clone()).unwrap();
        assert!(has(&feats, "ring_packed"), "round {round}: {feats:?}");
        assert_eq!(a.status()["broken_queues"], 0);
        // The switch goes away (its ports shut down); testpmd keeps its rings.
        a.shutdown();
        b.shutdown();
        drop((a, b));
        std::thread::sleep(Duration::from_millis(500));
    }
    tp.quit();
}

#[test]
fn testpmd_client_mode_survives_testpmd_restart() {
    let _g = serial();
    let Some(bin) = testpmd_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    // Vireo starts first and keeps trying to connect.
    let a = VhostUserPort::client(&pa, 1, 100).unwrap();
    let b = VhostUserPort::client(&pb, 1, 100).unwrap();
    assert_eq!(a.kind(), "vhost-user-client");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.status()["state"], "connecting");
    let vdevs = [vdev(0, &pa, 1, ",server=1"), vdev(1, &pb, 1, ",server=1")];
    for round in 0..2 {
        let mut tp = Testpmd::start(
            &bin,
            &prefix(&format!("client{round}")),
            &vdevs,
            &["-i", "--forward-mode=mac"],
        );
        traffic_round(&mut tp, &a, &b, 1);
        // A VM crash: testpmd dies without closing anything cleanly.
        tp.kill();
        assert!(wait_until(Duration::from_secs(10), || a.link()
            == Link::Down
            && b.link() == Link::Down));
        let _ = std::fs::remove_file(&pa);
        let _ = std::fs::remove_file(&pb);
    }
    assert!(a.status()["connections"].as_u64().unwrap() >= 2);
    a.shutdown();
    b.shutdown();
}

/// Throughput of the port-to-port loop with testpmd in io mode: the forwarding thread on core 0,
/// testpmd's forwarding lcore on core 1. Run with
/// `cargo test --release -p ports --test vhost_testpmd -- --ignored --nocapture throughput`;
/// `VIREO_PERF_VDEV=,packed_vq=1` adds options to both vdevs (packed rings).
#[test]
#[ignore]
fn throughput_io_loop() {
    let _g = serial();
    let Some(bin) = testpmd_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = VhostUserPort::server(&pa, 1).unwrap();
    let b = VhostUserPort::server(&pb, 1).unwrap();
    let extra = std::env::var("VIREO_PERF_VDEV").unwrap_or_default();
    let vdevs = [vdev(0, &pa, 1, &extra), vdev(1, &pb, 1, &extra)];
    let mut tp = Testpmd::start(&bin, &prefix("perf"), &vdevs, &["-i", "--forward-mode=io"]);
    assert!(wait_until(Duration::from_secs(30), || links_up(&a, &b)));
    tp.sync();
    let fwd = Forwarder::start(Arc::clone(&a), Arc::clone(&b), false, Some(0));
    // 16 bursts of 32 per port keep enough packets in flight for full bursts.
    let burst = std::env::var("VIREO_PERF_TXFIRST").unwrap_or_else(|_| "16".into());
    tp.cmd(&format!("start tx_first {burst}"));
    std::thread::sleep(Duration::from_secs(1));
    let secs = std::env::var("VIREO_PERF_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    let c0 = fwd.stats.a_to_b.load(Relaxed) + fwd.stats.b_to_a.load(Relaxed);
    let busy0 = fwd.stats.busy_ns.load(Relaxed);
    let it0 = fwd.stats.bursts.load(Relaxed);
    let (rx0, tx0) = (fwd.stats.rx_ns.load(Relaxed), fwd.stats.tx_ns.load(Relaxed));
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let c1 = fwd.stats.a_to_b.load(Relaxed) + fwd.stats.b_to_a.load(Relaxed);
    let busy = fwd.stats.busy_ns.load(Relaxed) - busy0;
    let its = fwd.stats.bursts.load(Relaxed) - it0;
    let rx_ns = fwd.stats.rx_ns.load(Relaxed) - rx0;
    let tx_ns = fwd.stats.tx_ns.load(Relaxed) - tx0;
    let dt = t0.elapsed().as_secs_f64();
    tp.stop_fwd();
    let st = fwd.stop();
    let (rx_med, tx_med) = (
        median(&st.rx_hist.lock().unwrap()),
        median(&st.tx_hist.lock().unwrap()),
    );
    eprintln!(
        "MEDIAN per packet (bursts of ~32): rx_burst {rx_med} ns = {:.0} cycles, tx_burst {tx_med} ns = {:.0} cycles",
        rx_med as f64 * cpu_mhz() / 1000.0,
        tx_med as f64 * cpu_mhz() / 1000.0
    );
    let pps = (c1 - c0) as f64 / dt;
    let ns_per_pkt = busy as f64 / (c1 - c0).max(1) as f64;
    eprintln!(
        "THROUGHPUT: {:.3} Mpps switched (both directions), {:.1} s; forwarder busy {:.1} ns/pkt \
         = {:.0} cycles/pkt at {:.0} MHz for rx_burst + tx_burst + pool (busy share {:.0}%)",
        pps / 1e6,
        dt,
        ns_per_pkt,
        ns_per_pkt * cpu_mhz() / 1000.0,
        cpu_mhz(),
        100.0 * busy as f64 / (dt * 1e9)
    );
    eprintln!(
        "per packet: rx_burst {:.0} cycles, tx_burst {:.0} cycles; packets per busy loop \
         iteration (both directions): {:.1}\nA {:?}\nB {:?}",
        rx_ns as f64 / (c1 - c0).max(1) as f64 * cpu_mhz() / 1000.0,
        tx_ns as f64 / (c1 - c0).max(1) as f64 * cpu_mhz() / 1000.0,
        (c1 - c0) as f64 / its.max(1) as f64,
        a.stats(),
        b.stats()
    );
    let feats: Vec<String> = serde_json::from_value(a.status()["features"].clone()).unwrap();
    eprintln!(
        "RING: {}",
        if has(&feats, "ring_packed") {
            "packed"
        } else {
            "split"
        }
    );
    assert!(pps > 0.0);
    tp.quit();
}

fn cpu_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1000.0)
}
