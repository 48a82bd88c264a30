//! `mac-limit` through vireoctl, against a running vireod with dummy ports: a port learns at
//! most its limit of MACs, frames from MACs beyond it are still switched (flooded, as from an
//! unknown source) and counted as `refused` in `port-stats`; the option is checked, persisted
//! across a restart, and clearing it restores the default (1024).
mod common;
mod frames;

use common::Daemon;
use frames::*;
use std::time::{Duration, Instant};

fn hex(f: &[u8]) -> String {
    f.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac_stats(d: &Daemon, port: &str) -> serde_json::Value {
    d.json(&["port-stats", port])[0]["mac"].clone()
}

fn wait_captured(d: &Daemon, port: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < n && Instant::now() < deadline {
        got += d.json(&["capture", port]).as_array().unwrap().len();
        std::thread::sleep(Duration::from_millis(20));
    }
    got
}

#[test]
fn a_port_learns_at_most_its_mac_limit_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["p1", "p2", "p3"] {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
    assert_eq!(mac_stats(&d, "p3")["limit"], 1024, "the default");
    let bad = d.ctl(&["set-port", "p3", "mac-limit=lots"]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains("bad value for mac-limit"),
        "{}",
        bad.stderr
    );
    d.ok(&["set-port", "p3", "mac-limit=2"]);
    for i in 0..5u8 {
        let f = udp(BCAST, mac(0x10 + i), [10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        d.ok(&["inject", "p3", &hex(&f)]);
    }
    assert_eq!(
        wait_captured(&d, "p1", 5),
        5,
        "every frame is still flooded"
    );
    let m = mac_stats(&d, "p3");
    assert_eq!(
        (
            m["entries"].as_u64(),
            m["limit"].as_u64(),
            m["refused"].as_u64()
        ),
        (Some(2), Some(2), Some(3)),
        "{m}"
    );
    let text = d.ok(&["port-stats", "p3"]);
    assert!(text.contains("macs learned=2 limit=2 refused=3"), "{text}");
    let macs = d.json(&["dump-macs", "br0"]);
    assert_eq!(macs.as_array().unwrap().len(), 2, "{macs}");
    // Persisted: a restarted daemon keeps the limit.
    d.stop();
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    assert_eq!(mac_stats(&d, "p3")["limit"], 2);
    assert_eq!(mac_stats(&d, "p1")["limit"], 1024);
    d.ok(&["set-port", "p3", "mac-limit=0"]);
    let text = d.ok(&["port-stats", "p3"]);
    assert!(text.contains("limit=none"), "{text}");
    d.ok(&["set-port", "p3", "mac-limit="]);
    assert_eq!(
        mac_stats(&d, "p3")["limit"],
        1024,
        "cleared: the default again"
    );
}
