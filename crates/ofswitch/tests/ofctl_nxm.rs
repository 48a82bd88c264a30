//! Plain `ovs-ofctl` (no `-O`: OpenFlow 1.0) with matches the standard 1.0 match cannot hold
//! (registers, conntrack state, tunnel id, cookies with masks): ovs-ofctl switches the session
//! to Nicira's NXM flow format and sends `NXT_FLOW_MOD` / `NXST_FLOW` / `NXST_AGGREGATE`.
//! Checked against a `BridgeOf` over a real `ofproto::Pipeline`: the rules land, a packet
//! follows them, `dump-flows` prints each match as ovs-ofctl's own `parse-flow` prints it,
//! `del-flows` / `mod-flows` select by them. Fails under VIREO_REQUIRE_PEERS=1 without
//! ovs-ofctl.

mod common;

use common::*;
use testkit::{have_ofctl, Out};

fn run(h: &Harness, cmd: &str, args: &[&str]) -> Out {
    testkit::ofctl_version(&h.sock, None, &["--no-names"], cmd, args)
}

fn must(h: &Harness, cmd: &str, args: &[&str]) -> String {
    let o = run(h, cmd, args);
    assert!(o.ok, "ovs-ofctl {cmd} {args:?} failed: {}", o.stderr);
    assert!(!o.stderr.contains("WARN"), "{cmd}: {}", o.stderr);
    o.stdout
}

fn flow_lines(h: &Harness, filter: &[&str]) -> Vec<String> {
    must(h, "dump-flows", filter)
        .lines()
        .filter(|l| l.contains("cookie="))
        .map(str::to_string)
        .collect()
}

/// The match (and actions) as ovs-ofctl itself writes the flow: the text after the table in
/// `ovs-ofctl parse-flow` (e.g. `priority=10,reg0=0x5 actions=output:3`).
fn ofctl_text(flow: &str) -> String {
    let out = std::process::Command::new("ovs-ofctl")
        .args(["--no-names", "parse-flow", flow])
        .output()
        .expect("ovs-ofctl parse-flow");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("_FLOW_MOD (xid="))
        .unwrap_or_else(|| panic!("{flow}: {text}"));
    // "NXT_FLOW_MOD (xid=0x1): ADD table:1 priority=10,reg0=0x5 actions=output:3"
    let rest = line.split("ADD ").nth(1).unwrap();
    let rest = rest
        .strip_prefix("table:")
        .map_or(rest, |r| r.split_once(' ').map_or(r, |(_, x)| x));
    rest.to_string()
}

const FLOWS: [&str; 5] = [
    "table=0,priority=10,in_port=1,actions=load:0x5->NXM_NX_REG0[],resubmit(,1)",
    "table=1,priority=10,reg0=0x5,actions=output:3",
    "table=1,priority=20,reg0=0x6,reg1=0x10/0xf0,actions=output:4",
    "table=1,priority=5,actions=output:2",
    "table=2,priority=5,ct_state=+trk+est,ip,actions=output:2",
];

#[test]
fn register_and_ct_matches_from_plain_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(&h, "del-flows", &[]);
    for f in FLOWS {
        must(&h, "add-flow", &[f]);
    }
    // A packet follows the register: port 1 loads reg0=5 and resubmits to table 1, whose
    // reg0=5 rule sends it to port 3 (datapath port 13), not the priority-5 catch-all.
    let fb = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    assert_eq!(outputs(&xlate(&h.pl, 1, &fb)), vec![13]);
    // A packet from port 2 has reg0=0: only the catch-all matches (no rule in table 0 for
    // it: dropped there).
    assert!(outputs(&xlate(&h.pl, 2, &fb)).is_empty());

    // dump-flows (NXST_FLOW) prints every match as ovs-ofctl writes the same flow.
    let lines = flow_lines(&h, &[]);
    assert_eq!(lines.len(), FLOWS.len(), "{lines:?}");
    for f in FLOWS {
        let want = ofctl_text(f);
        assert!(
            lines.iter().any(|l| l.ends_with(&want)),
            "{f}: want {want} in {lines:?}"
        );
    }
    let out = must(&h, "dump-flows", &[]);
    assert!(out.starts_with("NXST_FLOW reply (xid="), "{out}");
    assert!(
        lines.iter().any(
            |l| l.contains("table=1, n_packets=1,") && l.ends_with("reg0=0x5 actions=output:3")
        ),
        "counters of the rule the packet hit: {lines:?}"
    );

    // dump-flows and dump-aggregate with a register filter (NXST with an NXM).
    let only = flow_lines(&h, &["reg0=0x6"]);
    assert_eq!(only.len(), 1, "{only:?}");
    assert!(only[0].contains("reg0=0x6,reg1=0x10/0xf0"), "{only:?}");
    let agg = must(&h, "dump-aggregate", &["table=1,reg0=0x5"]);
    assert!(
        agg.contains("NXST_AGGREGATE reply") && agg.contains("flow_count=1"),
        "{agg}"
    );

    // mod-flows selects by register and the next packet follows the new actions.
    must(&h, "mod-flows", &["table=1,reg0=0x5,actions=output:4"]);
    assert_eq!(outputs(&xlate(&h.pl, 1, &fb)), vec![14]);

    // del-flows with a register match removes that rule only: the packet falls to the
    // catch-all (port 2).
    must(&h, "del-flows", &["table=1,reg0=0x5"]);
    let pf = h.pl.dump_flows_text("br0", Some("table=1")).unwrap();
    assert_eq!(pf.len(), 2, "{pf:?}");
    assert_eq!(outputs(&xlate(&h.pl, 1, &fb)), vec![12]);
    // --strict with the exact match and priority.
    let o = testkit::ofctl_version(
        &h.sock,
        None,
        &["--strict"],
        "del-flows",
        &["table=1,priority=20,reg0=0x6,reg1=0x10/0xf0"],
    );
    assert!(o.ok, "{}", o.stderr);
    let pf = h.pl.dump_flows_text("br0", Some("table=1")).unwrap();
    assert_eq!(pf.len(), 1, "{pf:?}");
    assert!(pf[0].contains("priority=5"), "{pf:?}");
}

/// Cookies with a mask select rules in an NXM session (NXM_NX_COOKIE in the match), and
/// tunnel fields (`tun_id`, `tun_src`, `load:..->NXM_NX_TUN_ID[]`) are accepted and dump back.
#[test]
fn cookie_masks_and_tunnel_fields_in_an_nxm_session() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(&h, "del-flows", &[]);
    must(&h, "add-flow", &["cookie=0x15,reg2=1,actions=output:1"]);
    must(&h, "add-flow", &["cookie=0x25,reg2=2,actions=output:2"]);
    must(&h, "add-flow", &["cookie=0x31,reg2=3,actions=output:3"]);
    let lines = flow_lines(&h, &["cookie=0x5/0xf"]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    must(&h, "del-flows", &["cookie=0x5/0xf"]);
    let lines = flow_lines(&h, &[]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("cookie=0x31") && lines[0].contains("reg2=0x3"),
        "{lines:?}"
    );

    // Tunnel fields over NXM (OpenFlow 1.0 + Nicira): matched and loaded.
    let o = run(
        &h,
        "add-flow",
        &["tun_id=0x7,tun_src=10.0.0.2,actions=load:0x9->NXM_NX_TUN_ID[],output:1"],
    );
    assert!(o.ok, "{}", o.stderr);
    let lines = flow_lines(&h, &[]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tun_id=0x7,tun_src=10.0.0.2")
                && l.contains("load:0x9->NXM_NX_TUN_ID[]")),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 2);
}

/// IPv6 tunnel fields (NXM_NX_TUN_IPV6_SRC/DST, class 0x0001, fields 109/110, masks too):
/// matched and set from plain ovs-ofctl (NXM) and OpenFlow 1.3 (OXM), dumped back as
/// ovs-ofctl's own `parse-flow` writes them.
#[test]
fn ipv6_tunnel_fields_from_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let flow = "tun_ipv6_src=fd00::2,tun_ipv6_dst=fd00:1::/64,\
                actions=set_field:fd00::9->tun_ipv6_dst,output:1";
    for version in [None, Some("OpenFlow13")] {
        let o = testkit::ofctl_version(&h.sock, version, &["--no-names"], "del-flows", &[]);
        assert!(o.ok, "{}", o.stderr);
        let o = testkit::ofctl_version(&h.sock, version, &["--no-names"], "add-flow", &[flow]);
        assert!(o.ok, "{version:?}: {}", o.stderr);
        let o = testkit::ofctl_version(&h.sock, version, &["--no-names"], "dump-flows", &[]);
        assert!(o.ok, "{}", o.stderr);
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("cookie="))
            .unwrap_or_else(|| panic!("{version:?}: no flow: {}", o.stdout))
            .to_string();
        // ovs-ofctl names the fields itself when it parses the reply: the match and the
        // action came back whole.
        // (OpenFlow 1.0 parse-flow writes the set-field as two 64-bit loads, which is what
        // the NXM session shows; OpenFlow 1.3 keeps the OXM set_field.)
        let want = ofctl_text(flow);
        let (want_match, want_actions) = want.split_once(" actions=").unwrap();
        assert!(line.contains(want_match), "{version:?}: {line} vs {want}");
        let want_actions = match version {
            None => want_actions,
            Some(_) => "set_field:fd00::9->tun_ipv6_dst,output:1",
        };
        assert!(
            line.contains(&format!("actions={want_actions}")),
            "{version:?}: {line} vs {want}"
        );
    }
    // The megaflow-side view: a load of 128 bits, read back through a register move.
    let o = run(
        &h,
        "add-flow",
        &[
            "priority=5,actions=load:0xfd000000000000000000000000000007->NXM_NX_TUN_IPV6_SRC[],\
           move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_XXREG0[],output:2",
        ],
    );
    assert!(o.ok, "{}", o.stderr);
    let lines = flow_lines(&h, &[]);
    assert!(
        lines.iter().any(|l| l.contains("NXM_NX_TUN_IPV6_SRC[]")),
        "{lines:?}"
    );
}

/// A table too large for one reply: `NXST_FLOW` is split into messages chained with the
/// MORE flag, and plain `ovs-ofctl dump-flows` reads every rule back.
#[test]
fn large_nxst_flow_replies_are_split() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(&h, "del-flows", &[]);
    let n = 3000;
    let flows: String = (0..n)
        .map(|i| {
            format!(
                "priority={},reg0={i},reg1=0x10/0xf0,actions=output:2\n",
                i % 100 + 1
            )
        })
        .collect();
    let file = h.dir.path().join("many.txt");
    std::fs::write(&file, flows).unwrap();
    must(&h, "add-flows", &[file.to_str().unwrap()]);
    let lines = flow_lines(&h, &[]);
    assert_eq!(lines.len(), n, "every rule read back");
    assert!(lines
        .iter()
        .any(|l| l.contains("reg0=0xbb7,reg1=0x10/0xf0")));
    let agg = must(&h, "dump-aggregate", &[]);
    assert!(agg.contains(&format!("flow_count={n}")), "{agg}");
}
