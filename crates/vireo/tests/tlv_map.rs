//! Geneve option maps (`NXT_TLV_TABLE_*`) and `tun_metadataN` fields through the real
//! daemon, driven by the real `ovs-ofctl` in OpenFlow 1.0 (its default) and 1.3, and
//! compared with Open vSwitch 3.1 itself: the same `add-tlv-map` / `dump-tlv-map` /
//! `del-tlv-map` commands and the same bad mods run against an `ovs-vswitchd` (in a
//! namespace of the test) and against vireod, and must give the same mapping table and the
//! same error names (`NXTTMFC_ALREADY_MAPPED`, `DUP_ENTRY`, `BAD_OPT_LEN`, `TABLE_FULL`,
//! `INVALID_TLV_DEL`, `NXFMFC_INVALID_TLV_FIELD`). Flows that match and set
//! `tun_metadata0` are dumped back as ovs-ofctl wrote them. Fails under
//! VIREO_REQUIRE_PEERS=1 without ovs-ofctl or OVS.
//!
//! Names: namespace `gmd-t-o-PID` (OVS), removed by its Drop guard.
mod common;

use common::host::Ns;
use common::ovs::Ovs;
use common::Daemon;
use std::path::Path;
use testkit::{have_ofctl, ofctl_version, require_peer, Out};

fn ofctl(sock: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> Out {
    ofctl_version(sock, v, &[], cmd, args)
}

fn must(sock: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> String {
    let o = ofctl(sock, v, cmd, args);
    assert!(o.ok, "ovs-ofctl {v:?} {cmd} {args:?}: {}", o.stderr);
    o.stdout
}

/// The error name ovs-ofctl printed for a refused command (`OFPT_ERROR (...): NAME`).
fn error_name(o: &Out) -> String {
    assert!(!o.ok, "expected a refusal, got: {}", o.stdout);
    o.stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("OFPT_ERROR")
                .map(|r| r.rsplit(": ").next().unwrap())
        })
        .unwrap_or_else(|| panic!("no OFPT_ERROR in: {}", o.stderr))
        .trim()
        .to_string()
}

/// The rows of `dump-tlv-map`'s mapping table.
fn map_rows(dump: &str) -> Vec<String> {
    dump.lines()
        .skip_while(|l| !l.contains("-----"))
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

const MAP0: &str = "{class=0x0102,type=0x80,len=4}->tun_metadata0";

/// Runs the same sequence against a switch, returning what a reader compares: each step's
/// mapping table or error name.
fn sequence(sock: &Path, v: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut step = |cmd: &str, args: &[&str]| {
        let o = ofctl(sock, v, cmd, args);
        out.push(if o.ok {
            map_rows(&must(sock, v, "dump-tlv-map", &[])).join("; ")
        } else {
            error_name(&o)
        });
    };
    step(
        "add-tlv-map",
        &[&format!(
            "{MAP0},{{class=0xffff,type=0x1,len=8}}->tun_metadata1"
        )],
    );
    step(
        "add-tlv-map",
        &["{class=0x0103,type=0x80,len=4}->tun_metadata0"],
    );
    step(
        "add-tlv-map",
        &["{class=0x0102,type=0x80,len=4}->tun_metadata5"],
    );
    step(
        "add-tlv-map",
        &["{class=0x0102,type=0x81,len=6}->tun_metadata6"],
    );
    step(
        "add-tlv-map",
        &["{class=0x0102,type=0x81,len=128}->tun_metadata6"],
    );
    step(
        "del-tlv-map",
        &["{class=0xffff,type=0x1,len=8}->tun_metadata1"],
    );
    step(
        "del-tlv-map",
        &["{class=0xffff,type=0x1,len=8}->tun_metadata1"],
    );
    step("del-tlv-map", &[]);
    step("add-tlv-map", &[MAP0]);
    out
}

fn ovs_available() -> bool {
    require_peer("ovs-vswitchd", "openvswitch-switch")
}

#[test]
fn tlv_map_commands_and_errors_match_ovs_3_1() {
    if !have_ofctl() || !ovs_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-br", "br1", "internal=false"]);
    let vsock = run.join("br0.mgmt");

    let ns = Ns::create("gmd", 't', 'o');
    let odir = tempfile::tempdir().unwrap();
    let ovs = Ovs::start(&ns, odir.path());
    ovs.add_netdev_br("br0");
    ovs.add_netdev_br("br1");
    let osock = odir.path().join("br0.mgmt");

    for (v, vs, os) in [
        (None, vsock.clone(), osock.clone()),
        (
            Some("OpenFlow13"),
            run.join("br1.mgmt"),
            odir.path().join("br1.mgmt"),
        ),
    ] {
        let ours = sequence(&vs, v);
        let theirs = sequence(&os, v);
        assert_eq!(ours, theirs, "{v:?}: vireod vs OVS 3.1");
        // The sequence really exercised every refusal.
        for e in [
            "NXTTMFC_ALREADY_MAPPED",
            "NXTTMFC_DUP_ENTRY",
            "NXTTMFC_BAD_OPT_LEN",
        ] {
            assert!(
                ours.iter().any(|s| s == e),
                "{v:?}: {e} missing in {ours:?}"
            );
        }
        assert_eq!(ours.last().unwrap(), "0x102 0x80 4 tun_metadata0");
    }

    // Space: Vireo holds 32 option bytes (OVS 256), options up to 16 bytes; both refuse
    // what does not fit with TABLE_FULL, and a refused mod adds nothing.
    let dump = must(&vsock, None, "dump-tlv-map", &[]);
    assert!(dump.contains("max option space=32 max fields=64"), "{dump}");
    assert!(dump.contains("allocated option space=4"), "{dump}");
    let o = ofctl(
        &vsock,
        None,
        "add-tlv-map",
        &["{class=0x0102,type=0x82,len=16}->tun_metadata7,{class=0x0102,type=0x83,len=16}->tun_metadata8"],
    );
    assert_eq!(error_name(&o), "NXTTMFC_TABLE_FULL");
    let o = ofctl(
        &vsock,
        None,
        "add-tlv-map",
        &["{class=0x0102,type=0x82,len=124}->tun_metadata7"],
    );
    assert_eq!(error_name(&o), "NXTTMFC_TABLE_FULL");
    assert_eq!(
        map_rows(&must(&vsock, None, "dump-tlv-map", &[])),
        ["0x102 0x80 4 tun_metadata0"]
    );
    // Per bridge: br1's map is its own.
    assert_eq!(
        map_rows(&must(&run.join("br1.mgmt"), None, "dump-tlv-map", &[])),
        ["0x102 0x80 4 tun_metadata0"]
    );
    must(&run.join("br1.mgmt"), None, "del-tlv-map", &[]);
    assert_eq!(map_rows(&must(&vsock, None, "dump-tlv-map", &[])).len(), 1);
    drop(ovs);
}

#[test]
fn tun_metadata_flows_install_and_dump_as_ovs_ofctl_writes_them() {
    if !have_ofctl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "p1", "type=dummy"]);
    let sock = run.join("br0.mgmt");
    let v13 = Some("OpenFlow13");

    // Unmapped: refused as OVS refuses it.
    let o = ofctl(
        &sock,
        v13,
        "add-flow",
        &["priority=7,tun_metadata1=0x1,actions=drop"],
    );
    assert_eq!(error_name(&o), "NXFMFC_INVALID_TLV_FIELD");
    let o = ofctl(
        &sock,
        None,
        "add-flow",
        &["priority=7,tun_metadata1=0x1,actions=drop"],
    );
    assert_eq!(error_name(&o), "NXFMFC_INVALID_TLV_FIELD");

    must(
        &sock,
        None,
        "add-tlv-map",
        &["{class=0x0102,type=0x80,len=4}->tun_metadata0,{class=0x0102,type=0x81,len=16}->tun_metadata3"],
    );
    let flows = [
        "priority=9,tun_metadata0=0x1234 actions=set_field:0x5678->tun_metadata0,output:1",
        "priority=5,tun_metadata0=0x1200/0xff00,tun_metadata3=0xabcdef actions=set_field:0x1->tun_metadata3,output:1",
    ];
    for f in flows {
        must(
            &sock,
            v13,
            "add-flow",
            &[&f.replace(" actions", ",actions")],
        );
    }
    // A value longer than its option is refused.
    let o = ofctl(
        &sock,
        v13,
        "add-flow",
        &["priority=8,tun_metadata0=0x112345678,actions=drop"],
    );
    assert!(!o.ok);
    for v in [v13, None] {
        let dump = must(&sock, v, "dump-flows", &[]);
        for f in flows {
            assert!(
                dump.lines().any(|l| l.trim_end().ends_with(f)),
                "{v:?}: {f} not in\n{dump}"
            );
        }
    }
    // In use: the mapping cannot go (as OVS), once the flows are gone it can.
    let o = ofctl(
        &sock,
        v13,
        "del-tlv-map",
        &["{class=0x0102,type=0x80,len=4}->tun_metadata0"],
    );
    assert_eq!(error_name(&o), "NXTTMFC_INVALID_TLV_DEL");
    let o = ofctl(&sock, v13, "del-tlv-map", &[]);
    assert_eq!(error_name(&o), "NXTTMFC_INVALID_TLV_DEL");
    must(&sock, v13, "del-flows", &[]);
    must(&sock, v13, "del-tlv-map", &[]);
    assert!(map_rows(&must(&sock, v13, "dump-tlv-map", &[])).is_empty());
}
