//! vhost-user ports against a real frontend: DPDK testpmd's `net_virtio_user`.
//!
//! Two Vireo ports A and B are wired port to port by a forwarding thread in the test; testpmd
//! attaches one virtio-user vdev to each and forwards between them, so traffic circles
//! testpmd port 0 → A → B → testpmd port 1 → testpmd port 0 … Skipped (with a message) only when
//! dpdk-testpmd is not installed.
mod vhost_common;

use vhost_common::*;
use ports::vhost_user::VhostUserPort;
use ports::{Link, Port};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

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

fn loop_test(name: &str, extra: &str, queues: usize, expect_mrg: bool) {
    let _g = serial();
    let Some(bin) = testpmd_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = VhostUserPort::server(&pa, queues).unwrap();
    let b = VhostUserPort::server(&pb, queues).unwrap();
    assert_eq!(a.link(), Link::Down);
    let q = format!("--rxq={queues}");
    let t = format!("--txq={queues}");
    let vdevs = [vdev(0, &pa, queues, extra), vdev(1, &pb, queues, extra)];
    let mut tp = Testpmd::start(
        &bin,
        &prefix(name),
        &vdevs,
        &["-i", "--forward-mode=mac", &q, &t],
    );
    traffic_round(&mut tp, &a, &b, queues);
    let s = a.status();
    assert_eq!(s["state"], "connected");
    assert_eq!(s["queues"], queues);
    let feats: Vec<String> = serde_json::from_value(s["features"].clone()).unwrap();
    assert!(feats.iter().any(|f| f == "version_1"), "{s}");
    assert_eq!(feats.iter().any(|f| f == "mrg_rxbuf"), expect_mrg, "{s}");
    assert_eq!(s["broken_queues"], 0);
    tp.quit();
    // The frontend went away: links go down, the server waits for the next one.
    assert!(wait_until(Duration::from_secs(10), || a.link()
        == Link::Down
        && b.link() == Link::Down));
    assert_eq!(a.status()["state"], "listening");
    a.shutdown();
    b.shutdown();
    assert!(!pa.exists() && !pb.exists(), "socket files not removed");
}

#[test]
fn testpmd_split_ring_mrg_rxbuf() {
    loop_test("mrg", ",in_order=0", 1, true);
}

#[test]
fn testpmd_split_ring_no_mrg_rxbuf() {
    loop_test("nomrg", ",mrg_rxbuf=0", 1, false);
}

#[test]
fn testpmd_in_order() {
    loop_test("inorder", ",in_order=1", 1, true);
}

#[test]
fn testpmd_two_queue_pairs() {
    loop_test("mq", "", 2, true);
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
/// `cargo test --release -p ports --test vhost_testpmd -- --ignored --nocapture throughput`.
#[test]
#[ignore]
fn throughput_io_loop() {
    let _g = serial();
    let Some(bin) = testpmd_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = VhostUserPort::server(&pa, 1).unwrap();
    let b = VhostUserPort::server(&pb, 1).unwrap();
    let vdevs = [vdev(0, &pa, 1, ""), vdev(1, &pb, 1, "")];
    let mut tp = Testpmd::start(&bin, &prefix("perf"), &vdevs, &["-i", "--forward-mode=io"]);
    assert!(wait_until(Duration::from_secs(30), || links_up(&a, &b)));
    let fwd = Forwarder::start(Arc::clone(&a), Arc::clone(&b), false, Some(0));
    tp.cmd("start tx_first");
    std::thread::sleep(Duration::from_secs(1));
    let secs = std::env::var("VIREO_PERF_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    let c0 = fwd.stats.a_to_b.load(Relaxed) + fwd.stats.b_to_a.load(Relaxed);
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let c1 = fwd.stats.a_to_b.load(Relaxed) + fwd.stats.b_to_a.load(Relaxed);
    let dt = t0.elapsed().as_secs_f64();
    tp.stop_fwd();
    fwd.stop();
    let pps = (c1 - c0) as f64 / dt;
    eprintln!(
        "THROUGHPUT: {:.3} Mpps switched (both directions), {:.1} s",
        pps / 1e6,
        dt
    );
    eprintln!("A {:?}\nB {:?}", a.stats(), b.stats());
    assert!(pps > 0.0);
    tp.quit();
}
