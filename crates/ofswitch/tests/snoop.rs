//! `ovs-ofctl snoop` on the bridge's snoop socket (`BR.snoop`, beside `BR.mgmt`): while a
//! controller connection (here `ovs-ofctl` itself, connecting to the bridge's `ptcp:`
//! listener) adds a flow and dumps the table, the snooping `ovs-ofctl` prints both directions
//! of that session: plain (OpenFlow 1.0, how an OVS user types it), `-O OpenFlow13`, `14` and
//! `15`. Management-socket traffic is not copied (as with OVS). And `ovs-ofctl monitor`
//! printing a packet-in, plain, `-O OpenFlow14` and `-O OpenFlow15`. Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use testkit::{have_ofctl, listen_on_free_port};

/// What the snooping ovs-ofctl printed (None: ovs-ofctl missing, the test is skipped).
fn snoop_sees_the_controller_session(version: Option<&str>) -> Option<String> {
    if !have_ofctl() {
        return None;
    }
    let h = start();
    let (port, ()) =
        listen_on_free_port(|port| h.br.set_controllers(&[format!("ptcp:{port}:127.0.0.1")]))
            .unwrap();
    let snoop_sock = h.sock.with_extension("snoop");
    let out = h.dir.path().join("snoop.txt");
    let file = std::fs::File::create(&out).unwrap();
    let mut snoop = Command::new("stdbuf");
    snoop.args(["-oL", "ovs-ofctl"]);
    snoop.arg(format!(
        "--unixctl={}",
        h.dir.path().join("snoop.ctl").display()
    ));
    if let Some(v) = version {
        snoop.args(["-O", v]);
    }
    let mut snoop = snoop
        .arg("snoop")
        .arg(format!("unix:{}", snoop_sock.display()))
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let text = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(10), || h.br.snoop_clients().0 == 1),
        "snoop did not connect: {}",
        text(&out)
    );
    let target = format!("tcp:127.0.0.1:{port}");
    let ofctl = |args: &[&str]| {
        let mut c = Command::new("ovs-ofctl");
        if let Some(v) = version {
            c.args(["-O", v]);
        }
        let o = c
            .args([args[0], &target])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.br.controllers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    ofctl(&["add-flow", "priority=7,in_port=1,actions=output:2"]);
    ofctl(&["dump-flows"]);
    // And from the management socket, which snoop does not see.
    testkit::ofctl_version(&h.sock, version, &[], "dump-aggregate", &[]);
    let (req, reply): (String, String) = match version {
        // Plain ovs-ofctl dumps with Nicira's NXST_FLOW after NXT_SET_FLOW_FORMAT.
        None => (
            "NXST_FLOW request (xid=".into(),
            "NXST_FLOW reply (xid=".into(),
        ),
        Some(v) => {
            let tag = format!("(OF1.{})", &v[v.len() - 1..]);
            (
                format!("OFPST_FLOW request {tag}"),
                format!("OFPST_FLOW reply {tag}"),
            )
        }
    };
    let ok = wait_for(Duration::from_secs(10), || {
        let t = text(&out);
        t.contains("OFPT_FLOW_MOD") && t.contains(&req) && t.contains(&reply)
    });
    let _ = snoop.kill();
    let _ = snoop.wait();
    let t = text(&out);
    assert!(ok, "{version:?}: snoop output lacks the session:\n{t}");
    assert!(t.contains("priority=7,in_port=1"), "{t}");
    assert!(
        !t.contains("AGGREGATE"),
        "management traffic was copied:\n{t}"
    );
    // (In the 1.0 session ovs-ofctl first sets the NXM flow format, which Vireo accepts.)
    assert!(
        !t.contains("|ERR|") && !t.contains("!= expected"),
        "{version:?}:\n{t}"
    );
    Some(t)
}

#[test]
fn plain_ovs_ofctl_snoop_sees_an_openflow_1_0_controller_session() {
    if let Some(t) = snoop_sees_the_controller_session(None) {
        assert!(t.contains("OFPT_HELLO (xid="), "a 1.0 session: {t}");
    }
}

#[test]
fn ovs_ofctl_snoop_sees_an_openflow_1_3_controller_session() {
    if let Some(t) = snoop_sees_the_controller_session(Some("OpenFlow13")) {
        assert!(t.contains("OFPT_HELLO (OF1.3)"), "a 1.3 session: {t}");
    }
}

#[test]
fn ovs_ofctl_snoop_sees_openflow_1_4_and_1_5_controller_sessions() {
    for (v, tag) in [("OpenFlow14", "(OF1.4)"), ("OpenFlow15", "(OF1.5)")] {
        if let Some(t) = snoop_sees_the_controller_session(Some(v)) {
            assert!(
                t.contains(&format!("OFPT_HELLO {tag}")),
                "a {v} session: {t}"
            );
        }
    }
}

/// `ovs-ofctl [-O V] monitor BR 65535` on the management socket prints the packet-in of a
/// table miss sent to the controller, with the frame: plain (1.0), 1.4 and 1.5.
#[test]
fn ovs_ofctl_monitor_prints_packet_ins_in_1_0_1_4_and_1_5() {
    if !have_ofctl() {
        return;
    }
    for (v, tag) in [
        (None, "OFPT_PACKET_IN (xid="),
        (Some("OpenFlow14"), "OFPT_PACKET_IN (OF1.4) (xid="),
        (Some("OpenFlow15"), "OFPT_PACKET_IN (OF1.5) (xid="),
    ] {
        monitor_prints_packet_ins(v, tag);
    }
}

fn monitor_prints_packet_ins(version: Option<&str>, tag: &str) {
    let h = start();
    testkit::ofctl_must(
        &h.sock,
        "add-flow",
        &["priority=9,actions=CONTROLLER:65535"],
    );
    let out = h.dir.path().join("monitor.txt");
    let file = std::fs::File::create(&out).unwrap();
    let mut mon = Command::new("stdbuf");
    mon.args(["-oL", "ovs-ofctl"]).arg(format!(
        "--unixctl={}",
        h.dir.path().join("mon.ctl").display()
    ));
    if let Some(v) = version {
        mon.args(["-O", v]);
    }
    let mut mon = mon
        .arg("monitor")
        .arg(format!("unix:{}", h.sock.display()))
        .arg("65535")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45; 46]);
    let mut seen = false;
    for _ in 0..20 {
        inject(&h, 1, &f);
        if wait_for(Duration::from_millis(500), || {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .contains(tag)
        }) {
            seen = true;
            break;
        }
    }
    let _ = mon.kill();
    let _ = mon.wait();
    let t = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(seen, "{version:?}: no packet-in printed:\n{t}");
    assert!(t.contains("in_port=1"), "{version:?}: {t}");
    assert!(t.contains("00:00:00:00:00:0a"), "{version:?}: {t}");
}
