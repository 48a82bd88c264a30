//! Real OpenFlow controllers from PyPI against a `BridgeOf` over a real pipeline: os-ken's
//! `simple_switch_13` and Faucet (two VLANs). Frames go through the pipeline and a simulated
//! datapath (`common::inject`): packet-ins reach the controller, its flow-mods and
//! packet-outs come back, and the test checks the pipeline's rules and translations.
//!
//! Needs the venv `scripts/setup.sh` creates (`/opt/vireo-venv`, or `$VIREO_VENV`); skipped
//! with a message when it is missing.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use dpif::Action;

use testkit::{free_port, venv_file, Proc};

/// os-ken's own `simple_switch_13` app (shipped in the os-ken 1.4.1 wheel; later wheels
/// dropped the sample apps), run by the installed `osken-manager`.
fn osken(bin: &PathBuf, port: u16, dir: &std::path::Path) -> Proc {
    let app = venv_file("apps/simple_switch_13.py").expect("app");
    let mut cmd = Command::new(bin);
    cmd.args([
        "--ofp-listen-host",
        "127.0.0.1",
        "--ofp-tcp-listen-port",
        &port.to_string(),
        app.to_str().unwrap(),
    ]);
    Proc::spawn(cmd, dir.join(format!("osken-{port}.log")))
}

fn out_ports(sent: &[(u32, Vec<u8>)]) -> Vec<u32> {
    let mut v: Vec<u32> = sent.iter().map(|(p, _)| *p).collect();
    v.sort();
    v
}

const T: Duration = Duration::from_secs(30);

#[test]
fn os_ken_simple_switch_13_learns_and_installs_flows() {
    let (Some(bin), Some(_)) = (
        venv_file("bin/osken-manager"),
        venv_file("apps/simple_switch_13.py"),
    ) else {
        return;
    };
    let h = start();
    let port = free_port();
    let ctl = osken(&bin, port, h.dir.path());
    h.br.set_controllers(&[format!("tcp:127.0.0.1:{port}")])
        .unwrap();
    assert!(
        wait_for(T, || has_flow(&h, "priority=0 actions=CONTROLLER:65535")),
        "table-miss flow not installed; flows {:?}\nlog:\n{}",
        h.pl.dump_flows_text("br0", None),
        ctl.log()
    );
    let st = h.br.controllers();
    assert!(st[0].connected && st[0].role == "equal", "{st:?}");
    assert!(!h.br.failed_open());

    // A -> B from p1: table miss -> packet-in -> the controller floods it.
    let ab = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    let (t, sent) = inject(&h, 1, &ab);
    assert!(matches!(t.actions[..], [Action::Userspace(_)]), "{t:?}");
    assert!(sent.is_empty());
    assert!(
        wait_for(T, || !h.hooks.sent.lock().unwrap().is_empty()),
        "no packet-out; log:\n{}",
        ctl.log()
    );
    let outs = packet_out_ports(&h);
    assert_eq!(outs, vec![vec![12, 13, 14]], "flooded (in_port excluded)");

    // B -> A from p2: the controller knows A is on p1: flow + packet-out to p1.
    let ba = frame(MAC_B, MAC_A, 0x0800, &[0x45]);
    inject(&h, 2, &ba);
    assert!(
        wait_for(T, || has_flow(
            &h,
            "priority=1,in_port=p2,dl_src=00:00:00:00:00:0b,dl_dst=00:00:00:00:00:0a"
        )),
        "learned flow missing: {:?}\nlog:\n{}",
        h.pl.dump_flows_text("br0", None),
        ctl.log()
    );
    assert!(wait_for(T, || !h.hooks.sent.lock().unwrap().is_empty()));
    assert_eq!(packet_out_ports(&h), vec![vec![11]]);
    let (t, sent) = inject(&h, 2, &ba);
    assert_eq!(t.actions, vec![Action::Output(11)]);
    assert_eq!(out_ports(&sent), vec![11]);

    // Controller gone: standalone fails open (NORMAL) and keeps the controller's rules.
    drop(ctl);
    assert!(wait_for(T, || h.br.failed_open()), "did not fail open");
    assert!(has_flow(&h, "priority=1,in_port=p2"));
    let (_, sent) = inject(&h, 1, &ab);
    assert_eq!(out_ports(&sent), vec![12, 13, 14], "NORMAL floods");
    // It comes back on the same port: the bridge follows its rules again.
    let ctl = osken(&bin, port, h.dir.path());
    assert!(
        wait_for(T, || !h.br.failed_open()),
        "still failed open; log:\n{}",
        ctl.log()
    );
    let (t, _) = inject(&h, 2, &ba);
    assert_eq!(t.actions, vec![Action::Output(11)]);
}

#[test]
fn secure_mode_never_fails_open() {
    let h = start();
    h.br.set_fail_mode(ofswitch::FailMode::Secure);
    let port = free_port(); // nobody listens here
    h.br.set_controllers(&[format!("tcp:127.0.0.1:{port}")])
        .unwrap();
    h.pl.del_flows("br0", None, false).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!h.br.failed_open());
    let (t, _) = inject(&h, 1, &frame(MAC_A, MAC_B, 0x0800, &[0x45]));
    assert!(t.actions.is_empty(), "no rule, no controller: drop");
    h.br.set_fail_mode(ofswitch::FailMode::Standalone);
    assert!(wait_for(T, || h.br.failed_open()));
    let (_, sent) = inject(&h, 1, &frame(MAC_A, MAC_B, 0x0800, &[0x45]));
    assert_eq!(out_ports(&sent), vec![12, 13, 14]);
    assert!(h.br.set_controllers(&["bogus:1".into()]).is_err());
    assert_eq!(h.br.controllers().len(), 1, "a bad list changes nothing");
    h.br.set_controllers(&[]).unwrap();
    assert!(
        wait_for(T, || !h.br.failed_open()),
        "no controller: tables apply"
    );
}

fn faucet_yaml(dpid: u64) -> String {
    format!(
        "vlans:
  office:
    vid: 100
  guest:
    vid: 200
dps:
  br0:
    dp_id: {dpid:#x}
    hardware: \"Open vSwitch\"
    interfaces:
      1:
        native_vlan: office
      2:
        native_vlan: office
      3:
        native_vlan: guest
      4:
        native_vlan: guest
"
    )
}

#[test]
fn faucet_two_vlans_are_isolated() {
    let Some(bin) = venv_file("bin/faucet") else {
        return;
    };
    let h = start();
    let dir = h.dir.path();
    let conf = dir.join("faucet.yaml");
    std::fs::write(&conf, faucet_yaml(h.br.datapath_id())).unwrap();
    let port = free_port();
    let mut cmd = Command::new(&bin);
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path)
        .env("FAUCET_CONFIG", &conf)
        .env("FAUCET_LOG", dir.join("faucet.log"))
        .env("FAUCET_EXCEPTION_LOG", dir.join("faucet_exception.log"))
        .env("FAUCET_PROMETHEUS_ADDR", "127.0.0.1")
        .env("FAUCET_PROMETHEUS_PORT", free_port().to_string())
        .args([
            "--ryu-ofp-listen-host=127.0.0.1",
            &format!("--ryu-ofp-tcp-listen-port={port}"),
        ]);
    let ctl = Proc::spawn(cmd, dir.join("faucet.out"));
    h.br.set_controllers(&[format!("tcp:127.0.0.1:{port}")])
        .unwrap();
    let flog = || {
        format!(
            "{}\n{}\n{}",
            ctl.log(),
            std::fs::read_to_string(dir.join("faucet.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("faucet_exception.log")).unwrap_or_default()
        )
    };
    // Faucet programs its pipeline (vlan, eth_src, eth_dst, flood tables).
    assert!(
        wait_for(T, || has_flow(&h, "dl_vlan=200")
            && h.pl.dump_flows("br0", None).unwrap().len() > 10),
        "faucet flows missing: {:?}\n{}",
        h.pl.dump_flows_text("br0", None),
        flog()
    );
    std::thread::sleep(Duration::from_secs(2)); // let it finish its batch
    let hosts = [
        (1, [0x02, 0, 0, 0, 1, 1]),
        (2, [0x02, 0, 0, 0, 1, 2]),
        (3, [0x02, 0, 0, 0, 1, 3]),
        (4, [0x02, 0, 0, 0, 1, 4]),
    ];
    // Broadcasts stay in their VLAN (and leave untagged on access ports).
    for (of, mac) in hosts {
        let (_, sent) = inject(&h, of, &frame(mac, BCAST, 0x0806, &[0; 28]));
        let want = match of {
            1 => vec![12],
            2 => vec![11],
            3 => vec![14],
            _ => vec![13],
        };
        assert_eq!(
            out_ports(&sent),
            want,
            "broadcast from p{of}: {sent:?}\nflows {:#?}\n{}",
            h.pl.dump_flows_text("br0", None),
            flog()
        );
        assert!(
            sent.iter().all(|(_, f)| f[12..14] == [0x08, 0x06]),
            "untagged"
        );
    }
    // Faucet learns from the packet-ins; then unicast within a VLAN goes to one port.
    let learned = wait_for(T, || {
        let flows = h.pl.dump_flows_text("br0", None).unwrap();
        hosts.iter().all(|(_, m)| {
            flows
                .iter()
                .any(|l| l.contains(&format!("dl_dst={}", mac_str(m))))
        })
    });
    assert!(
        learned,
        "hosts not learned: {:?}\n{}",
        h.pl.dump_flows_text("br0", None),
        flog()
    );
    let (_, sent) = inject(&h, 1, &frame(hosts[0].1, hosts[1].1, 0x0800, &[0x45]));
    assert_eq!(out_ports(&sent), vec![12]);
    let (_, sent) = inject(&h, 4, &frame(hosts[3].1, hosts[2].1, 0x0800, &[0x45]));
    assert_eq!(out_ports(&sent), vec![13]);
    // Across VLANs nothing arrives: p1 -> host 3's MAC stays in VLAN 100.
    let (_, sent) = inject(&h, 1, &frame(hosts[0].1, hosts[2].1, 0x0800, &[0x45]));
    assert!(!out_ports(&sent).contains(&13), "VLAN leak: {sent:?}");
    assert!(!out_ports(&sent).contains(&14), "VLAN leak: {sent:?}");
}

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
