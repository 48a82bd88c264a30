//! Interop tests with the real OpenFlow client, `ovs-ofctl -O OpenFlow13`, against the
//! in-test switch of `common`. Skipped (with a message) when ovs-ofctl is not installed.

mod common;

use std::process::Command;

use common::Harness;

fn have_ofctl() -> bool {
    Command::new("ovs-ofctl").arg("--version").output().is_ok_and(|o| o.status.success())
}

fn ofctl(h: &Harness, args: &[&str]) -> (bool, String, String) {
    let target = format!("unix:{}", h.sock.display());
    let mut cmd = Command::new("timeout");
    cmd.args(["20", "ovs-ofctl", "-O", "OpenFlow13"]);
    let (first, rest) = args.split_first().unwrap();
    cmd.arg(first).arg(&target).args(rest);
    let out = cmd.output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), so, se)
}

#[test]
fn explore() {
    if !have_ofctl() {
        eprintln!("ovs-ofctl not installed; skipping");
        return;
    }
    let h = common::start();
    for args in [
        vec!["show"],
        vec!["dump-ports-desc"],
        vec!["add-flow", "priority=100,ip,nw_dst=10.0.0.0/24,tcp,tp_dst=80,actions=output:2"],
        vec!["dump-flows"],
        vec!["dump-aggregate"],
        vec!["dump-ports"],
        vec!["add-group", "group_id=1,type=select,bucket=output:1,bucket=output:2"],
        vec!["dump-groups"],
        vec!["packet-out", "in_port=1 packet=ffffffffffff00000000000108060001080006040001000000000001c0a80001000000000000c0a80002 actions=output:2"],
    ] {
        let (ok, so, se) = ofctl(&h, &args);
        println!("== {args:?} ok={ok}\n{so}\n-- stderr: {se}");
    }
    println!("{:#?}", h.sw.received.lock().unwrap());
}
