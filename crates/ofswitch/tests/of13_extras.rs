//! OpenFlow 1.3 messages a controller may rely on beyond flows and groups, through the real
//! `ovs-ofctl -O OpenFlow13` (and 1.4 / 1.5 where the message exists there): GROUP_FEATURES,
//! queue statistics and QUEUE_GET_CONFIG (correctly formed, empty: no port has queues) and
//! their refusals, and the GROUP_MOD refusals ovs-ofctl can send (invalid indirect group,
//! bad watch port, unknown chained group, loops, too many buckets). Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.

mod common;

use common::*;
use testkit::have_ofctl;

fn run(h: &Harness, v: &str, cmd: &str, args: &[&str]) -> testkit::Out {
    testkit::ofctl_version(&h.sock, Some(v), &[], cmd, args)
}

fn must(h: &Harness, v: &str, cmd: &str, args: &[&str]) -> String {
    let o = run(h, v, cmd, args);
    assert!(o.ok, "ovs-ofctl -O {v} {cmd} {args:?} failed: {}", o.stderr);
    o.stdout
}

/// ovs-ofctl prints an error reply to a statistics request on stdout and exits 0; to other
/// requests on stderr with a failure status. Either way the code must be there.
fn refused(h: &Harness, v: &str, cmd: &str, args: &[&str], code: &str) {
    let o = run(h, v, cmd, args);
    let text = format!("{}{}", o.stdout, o.stderr);
    assert!(
        text.contains("OFPT_ERROR") && text.contains(code),
        "{v} {cmd} {args:?}: expected {code}, got ok={} {}{}",
        o.ok,
        o.stdout,
        o.stderr
    );
}

#[test]
fn group_features_with_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    for v in ["OpenFlow13", "OpenFlow14", "OpenFlow15"] {
        let out = must(&h, v, "dump-group-features", &[]);
        for want in [
            "Group table:",
            // all, select, indirect, fast-failover.
            "Types:  0xf",
            // SELECT_WEIGHT, SELECT_LIVENESS, CHAINING, CHAINING_CHECKS.
            "Capabilities:  0xf",
        ] {
            assert!(out.contains(want), "{v}: no {want:?} in\n{out}");
        }
        // Four types, each with the bridge's group limit and the bucket actions.
        for t in ["all", "select", "indirect", "fast failover"] {
            let section = format!(
                "{t} group:\n       max_groups=0x10000\n       actions: output group set_field strip_vlan push_vlan\n"
            );
            assert!(out.contains(&section), "{v}: no {section:?} in\n{out}");
        }
        // No action the pipeline cannot execute is claimed.
        for absent in ["push_mpls", "dec_ttl", "set_queue", "copy_ttl"] {
            assert!(!out.contains(absent), "{v}: {absent} claimed in\n{out}");
        }
    }
    // 1.0 has no group features: ovs-ofctl asks with a Nicira statistics request, refused.
    refused(
        &h,
        "OpenFlow10",
        "dump-group-features",
        &[],
        "OFPBRC_BAD_VENDOR",
    );
}

#[test]
fn queue_stats_and_config_are_empty_with_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    for v in ["OpenFlow13", "OpenFlow14", "OpenFlow15"] {
        // Every port, every queue: a well-formed empty reply.
        let out = must(&h, v, "queue-stats", &[]);
        assert!(
            out.contains("OFPST_QUEUE reply") && out.contains("0 queues"),
            "{v}: {out}"
        );
        let out = must(&h, v, "queue-stats", &["1"]);
        assert!(out.contains("0 queues"), "{v}: {out}");
        // A named queue does not exist; an unknown port is refused.
        refused(&h, v, "queue-stats", &["1", "5"], "OFPQOFC_BAD_QUEUE");
        refused(&h, v, "queue-stats", &["77"], "OFPQOFC_BAD_PORT");
    }
    for v in ["OpenFlow10", "OpenFlow13"] {
        let out = must(&h, v, "queue-get-config", &["1"]);
        assert!(out.contains("QUEUE_GET_CONFIG_REPLY"), "{v}: {out}");
        assert!(!out.contains("queue "), "{v}: a queue listed: {out}");
        refused(&h, v, "queue-get-config", &["77"], "OFPQOFC_BAD_PORT");
    }
}

#[test]
fn group_mod_validation_with_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let v = "OpenFlow13";
    must(
        &h,
        v,
        "add-group",
        &["group_id=1,type=indirect,bucket=output:2"],
    );
    // An indirect group with two buckets, a fast-failover bucket without a watch and weights
    // on a non-select group ovs-ofctl refuses to encode itself: the unit tests in
    // crates/openflow/src/msg/tests.rs and crates/ofproto/src/group.rs cover those.
    let cases: Vec<(String, &str)> = vec![
        ("group_id=2,type=indirect".into(), "OFPGMFC_INVALID_GROUP"),
        (
            "group_id=2,type=ff,bucket=watch_port:CONTROLLER,output:2".into(),
            "OFPGMFC_BAD_WATCH",
        ),
        (
            "group_id=2,type=all,bucket=group:99".into(),
            "OFPGMFC_UNKNOWN_GROUP",
        ),
        ("group_id=2,type=all,bucket=group:2".into(), "OFPGMFC_LOOP"),
        (
            format!("group_id=2,type=all{}", ",bucket=output:3".repeat(257)),
            "OFPGMFC_OUT_OF_BUCKETS",
        ),
    ];
    for (spec, code) in &cases {
        let o = run(&h, v, "add-group", &[spec]);
        assert!(
            !o.ok && o.stderr.contains(code),
            "{}: expected {code}, got ok={} {}",
            &spec[..spec.len().min(80)],
            o.ok,
            o.stderr
        );
    }
    // 256 buckets are fine.
    must(
        &h,
        v,
        "add-group",
        &[&format!(
            "group_id=2,type=all{}",
            ",bucket=output:3".repeat(256)
        )],
    );
    // A loop through a chain: 3 -> 1; then 1 -> 3 loops.
    must(&h, v, "add-group", &["group_id=3,type=all,bucket=group:1"]);
    let o = run(
        &h,
        v,
        "mod-group",
        &["group_id=1,type=indirect,bucket=group:3"],
    );
    assert!(!o.ok && o.stderr.contains("OFPGMFC_LOOP"), "{}", o.stderr);
    // Nothing refused was applied: groups 1, 2, 3 as added.
    let out = must(&h, v, "dump-groups", &[]);
    assert!(
        out.contains("group_id=1,type=indirect,bucket=actions=output:2"),
        "{out}"
    );
    assert!(
        out.contains("group_id=3,type=all,bucket=actions=group:1"),
        "{out}"
    );
    assert_eq!(out.matches("group_id=").count(), 3, "{out}");
}

#[test]
fn port_mod_config_bits_apply_with_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let v = "OpenFlow13";
    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    let userspace = |t: &ofproto::Translation| {
        t.actions
            .iter()
            .any(|a| matches!(a, dpif::Action::Userspace(_)))
    };
    must(&h, v, "del-flows", &[]);
    must(&h, v, "add-flow", &["in_port=1,actions=output:2,output:3"]);
    must(&h, v, "add-flow", &["in_port=2,actions=flood"]);
    must(&h, v, "add-flow", &["in_port=3,actions=controller"]);
    must(
        &h,
        v,
        "add-flow",
        &["in_port=4,actions=controller,output:1"],
    );
    assert_eq!(outputs(&xlate(&h.pl, 1, &f)), vec![12, 13]);
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 13, 14]);
    assert!(userspace(&xlate(&h.pl, 3, &f)));

    // no-forward on port 3: output and flood skip it; shown in port-desc.
    must(&h, v, "mod-port", &["p3", "no-forward"]);
    assert_eq!(outputs(&xlate(&h.pl, 1, &f)), vec![12]);
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 14]);
    let desc = must(&h, v, "dump-ports-desc", &[]);
    let p3 = desc
        .lines()
        .skip_while(|l| !l.contains("(p3)"))
        .nth(1)
        .unwrap_or("");
    assert!(p3.contains("NO_FWD"), "{desc}");
    must(&h, v, "mod-port", &["p3", "forward"]);
    assert_eq!(outputs(&xlate(&h.pl, 1, &f)), vec![12, 13]);

    // no-packet-in on port 3: its packet-ins stop, port 4's go on.
    must(&h, v, "mod-port", &["p3", "no-packet-in"]);
    assert!(!userspace(&xlate(&h.pl, 3, &f)));
    let t4 = xlate(&h.pl, 4, &f);
    assert!(userspace(&t4) && outputs(&t4) == vec![11]);
    must(&h, v, "mod-port", &["p3", "packet-in"]);
    assert!(userspace(&xlate(&h.pl, 3, &f)));

    // no-receive on port 1: everything from it dropped; traffic to it still flows.
    must(&h, v, "mod-port", &["p1", "no-receive"]);
    assert!(xlate(&h.pl, 1, &f).actions.is_empty());
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 13, 14]);
    must(&h, v, "mod-port", &["p1", "receive"]);
    assert_eq!(outputs(&xlate(&h.pl, 1, &f)), vec![12, 13]);

    // down on port 4: neither received from nor forwarded to.
    must(&h, v, "mod-port", &["p4", "down"]);
    assert!(xlate(&h.pl, 4, &f).actions.is_empty());
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 13]);
    let desc = must(&h, v, "dump-ports-desc", &[]);
    let p4 = desc
        .lines()
        .skip_while(|l| !l.contains("(p4)"))
        .nth(1)
        .unwrap_or("");
    assert!(p4.contains("PORT_DOWN"), "{desc}");
    must(&h, v, "mod-port", &["p4", "up"]);
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 13, 14]);

    // A bit Vireo does not apply (1.0's no-flood) is refused, not ignored: BAD_CONFIG, which
    // 1.0 lacks, so 1.0's catch-all EPERM.
    let o = run(&h, "OpenFlow10", "mod-port", &["p2", "no-flood"]);
    assert!(!o.ok && o.stderr.contains("OFPBRC_EPERM"), "{}", o.stderr);
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![11, 13, 14]);
}
