//! Plain `ovs-ofctl` against the real daemon, as an OVS user types it (no `-O`: OpenFlow
//! 1.0), and `-O OpenFlow14` / `-O OpenFlow15`: rules added through the bridge's management
//! socket steer frames injected on dummy ports (`vireoctl inject` / `capture`); packet-out
//! frames leave the named port; `set-bridge BR protocols=` limits negotiation and survives
//! a restart. Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.
mod common;

use std::path::Path;
use std::time::Duration;

use common::wait_until;
use common::Daemon;
use testkit::{have_ofctl, ofctl_version, Out};

fn frame(src: u8, dst: u8, fill: u8) -> String {
    let mut f = vec![2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, src, 0x08, 0x00];
    f.resize(60, fill);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

fn captured(d: &Daemon, port: &str) -> Vec<String> {
    d.ok(&["capture", port])
        .lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect()
}

fn ofctl(run: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> Out {
    ofctl_version(&run.join("br0.mgmt"), v, &[], cmd, args)
}

fn must(run: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> String {
    let o = ofctl(run, v, cmd, args);
    assert!(o.ok, "ovs-ofctl {v:?} {cmd} {args:?}: {}", o.stderr);
    o.stdout
}

#[test]
fn plain_ovs_ofctl_and_1_4_1_5_steer_real_traffic() {
    if !have_ofctl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["p1", "p2", "p3"] {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
    for (i, v) in [None, Some("OpenFlow14"), Some("OpenFlow15")]
        .into_iter()
        .enumerate()
    {
        let ctx = format!("{v:?}");
        let show = must(&run, v, "show", &[]);
        assert!(
            show.contains("(p1): addr:") && show.contains("(p3): addr:"),
            "{ctx}: {show}"
        );
        must(&run, v, "del-flows", &[]);
        must(
            &run,
            v,
            "add-flow",
            &["priority=100,in_port=1,actions=output:2"],
        );
        for p in ["p1", "p2", "p3"] {
            captured(&d, p);
        }
        let f = frame(0xa, 0xb, i as u8);
        d.ok(&["inject", "p1", &f]);
        assert!(
            wait_until(Duration::from_secs(10), || captured(&d, "p2").contains(&f)),
            "{ctx}: not on p2"
        );
        assert!(captured(&d, "p3").is_empty(), "{ctx}");
        let flows = must(&run, v, "dump-flows", &[]);
        assert!(
            flows.contains("n_packets=1,") && flows.contains("in_port=1 actions=output:2"),
            "{ctx}: {flows}"
        );
        must(&run, v, "mod-flows", &["in_port=1,actions=output:3"]);
        let g = frame(0xa, 0xb, 0x40 + i as u8);
        d.ok(&["inject", "p1", &g]);
        assert!(
            wait_until(Duration::from_secs(10), || captured(&d, "p3").contains(&g)),
            "{ctx}: not on p3"
        );
        assert!(!captured(&d, "p2").contains(&g), "{ctx}");
        // packet-out leaves the named port.
        let po = frame(0xc, 0xd, 0x80 + i as u8);
        must(
            &run,
            v,
            "packet-out",
            &[&format!("in_port=3,packet={po},actions=output:1")],
        );
        assert!(
            wait_until(Duration::from_secs(10), || captured(&d, "p1").contains(&po)),
            "{ctx}: packet-out"
        );
        let ports = must(&run, v, "dump-ports", &[]);
        assert!(ports.contains("port  1: rx pkts="), "{ctx}: {ports}");
        let rx: u64 = ports
            .split("port  1: rx pkts=")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|n| n.parse().ok())
            .expect("rx pkts of port 1");
        assert!(rx >= 2 * (i as u64 + 1), "{ctx}: {ports}");
        let tables = must(&run, v, "dump-tables", &[]);
        assert!(tables.contains("active=1"), "{ctx}: {tables}");
        must(&run, v, "del-flows", &["in_port=1"]);
        assert!(
            !must(&run, v, "dump-flows", &[]).contains("in_port=1"),
            "{ctx}"
        );
    }
    // protocols=: plain ovs-ofctl is refused as OVS refuses it; the limit is persisted.
    d.ok(&["set-bridge", "br0", "protocols=OpenFlow13,OpenFlow14"]);
    let o = ofctl(&run, None, "dump-flows", &[]);
    assert!(
        !o.ok && o.stderr.contains("version negotiation failed"),
        "{}",
        o.stderr
    );
    assert!(must(&run, Some("OpenFlow14"), "show", &[]).contains("(OF1.4)"));
    let show = d.json(&["show"]);
    assert_eq!(show["bridges"][0]["protocols"], "OpenFlow13,OpenFlow14");
    assert!(d.ok(&["show"]).contains("protocols: OpenFlow13,OpenFlow14"));
    let bad = d.ctl(&["set-bridge", "br0", "protocols=OpenFlow12"]);
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.contains("OpenFlow12 is not supported"),
        "{}",
        bad.stderr
    );
    assert_eq!(d.stop(), Some(0));
    let d = Daemon::start(&run);
    let o = ofctl(&run, None, "show", &[]);
    assert!(
        !o.ok && o.stderr.contains("version negotiation failed"),
        "{}",
        o.stderr
    );
    d.ok(&[
        "set-bridge",
        "br0",
        "protocols=OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15",
    ]);
    assert!(must(&run, None, "show", &[]).contains("OFPT_FEATURES_REPLY (xid="));
}
