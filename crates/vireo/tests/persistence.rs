//! The store's promises: restart restores every bridge and port (and the conntrack limits); `kill -9` during a burst of
//! changes never leaves a store that fails to load; a store that fails to load is refused,
//! named, and left untouched; a second daemon on the same run directory is refused; SIGTERM
//! stops cleanly.
mod common;
use common::{spawn_daemon, Daemon};
use std::time::{Duration, Instant};

#[test]
fn restart_restores_bridges_ports_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-br", "br1", "internal=false"]);
    d.ok(&["add-port", "br0", "a", "type=dummy", "tag=7"]);
    d.ok(&["add-port", "br1", "b", "type=dummy", "trunks=1,2"]);
    d.ok(&["del-port", "br0", "a"]);
    d.ok(&["add-port", "br0", "c", "type=dummy"]);
    d.ok(&["set-pmd-rxq-assign", "roundrobin"]);
    d.ok(&["set-pmd-auto-lb", "30"]);
    d.ok(&["set-fail-mode", "br1", "secure"]);
    let before = d.json(&["show"]);
    assert_eq!(d.stop(), Some(0));
    let d = Daemon::start(&run);
    assert_eq!(d.json(&["show"]), before);
    assert_eq!(before["pmd_cores"], "0");
    assert_eq!(before["pmd_rxq_assign"], "roundrobin");
    assert_eq!(before["pmd_auto_lb"], 30);
    assert_eq!(before["bridges"][1]["fail_mode"], "secure");
    d.ok(&["set-pmd-auto-lb", "off"]);
    assert!(d.json(&["show"])["pmd_auto_lb"].is_null());
}

#[test]
fn conntrack_limits_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    let default = d.json(&["ct-stats"])["limit"].clone();
    d.ok(&["set-ct-limit", "5000"]);
    d.ok(&["set-ct-limit", "zone=3", "50"]);
    d.ok(&["set-ct-limit", "zone=4", "60"]);
    d.ok(&["set-ct-limit", "zone=4", "0"]);
    assert_ne!(d.ctl(&["set-ct-limit", "zone=70000", "5"]).code, 0);
    assert_eq!(d.stop(), Some(0));
    let d = Daemon::start(&run);
    let st = d.json(&["ct-stats"]);
    assert_ne!(st["limit"], default, "{st}");
    assert_eq!(st["limit"], 5000, "{st}");
    assert_eq!(st["zones"]["3"]["limit"], 50, "{st}");
    assert!(st["zones"].get("4").is_none_or(|z| z["limit"] == 0), "{st}");
}

#[test]
fn sigterm_stops_cleanly_and_removes_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    assert!(run.join("vireod.ctl").exists());
    assert_eq!(d.stop(), Some(0));
    assert!(!run.join("vireod.ctl").exists());
}

#[test]
fn a_second_daemon_on_the_same_run_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let _d = Daemon::start(&run);
    let out = spawn_daemon(&run, &[]).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another vireod"), "{err}");
}

#[test]
fn corrupt_or_foreign_stores_are_refused_and_left_untouched() {
    let cases: &[(&[u8], &str)] = &[
        (b"{\"format\": \"vireo-conf\", \"vers", "not valid JSON"),
        (b"\x00\x01garbage", "not valid JSON"),
        (
            br#"{"format":"vireo-conf","version":2}"#,
            "version 2 is not supported",
        ),
        (br#"{"format":"other","version":1}"#, "not a Vireo store"),
    ];
    for (content, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        let db = dir.path().join("conf.db");
        std::fs::write(&db, content).unwrap();
        let out = spawn_daemon(&run, &["--db", db.to_str().unwrap()])
            .wait_with_output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(db.to_str().unwrap()), "names the file: {err}");
        assert!(err.contains(want), "names the problem ({want}): {err}");
        assert_eq!(
            &std::fs::read(&db).unwrap()[..],
            *content,
            "store was rewritten"
        );
        assert!(!run.join("vireod.ctl").exists());
    }
}

/// Starts vireod, fires a burst of changes from another thread, `kill -9`s the daemon at a
/// varying moment, and checks that the store loads and that a restarted daemon serves exactly
/// what the store holds. Repeated many times.
#[test]
fn kill_9_during_changes_never_breaks_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let db = run.join("conf.db");
    let rounds = 40;
    let mut interrupted = 0;
    for round in 0..rounds {
        let d = Daemon::start(&run);
        let run2 = run.clone();
        let burst = std::thread::spawn(move || {
            for i in 0..200 {
                let br = format!("br{round}x{i}");
                if common::ctl(&run2, &["add-br", &br, "internal=false"]).code != 0 {
                    return true; // the daemon is gone: killed mid-burst
                }
                let p = format!("p{round}x{i}");
                let _ = common::ctl(&run2, &["add-port", &br, &p, "type=dummy", "tag=3"]);
                if i % 3 == 0 {
                    let _ = common::ctl(&run2, &["del-br", &br]);
                }
            }
            false
        });
        // Vary the kill moment from "almost at once" to "mid-burst".
        std::thread::sleep(Duration::from_millis(5 + (round * 7 % 60) as u64));
        let mut d = d;
        d.child.kill().unwrap(); // SIGKILL
        d.child.wait().unwrap();
        interrupted += usize::from(burst.join().unwrap());
        // No file yet (killed before the first change) is the empty store.
        let config = match std::fs::read(&db) {
            Ok(bytes) => vireo::store::parse(&bytes)
                .unwrap_or_else(|e| panic!("round {round}: store does not load: {e}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => panic!("round {round}: {e}"),
        };
        // A restarted daemon serves exactly what the store holds.
        let start = Instant::now();
        let d = Daemon::start(&run);
        let listed: Vec<String> = serde_json::from_value(d.json(&["list-br"])).unwrap();
        let stored: Vec<String> = config.bridges.keys().cloned().collect();
        assert_eq!(listed, stored, "round {round}");
        assert!(start.elapsed() < Duration::from_secs(10));
        drop(d);
    }
    assert!(
        interrupted >= rounds / 2,
        "only {interrupted} of {rounds} kills landed mid-burst"
    );
}
