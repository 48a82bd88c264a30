//! OpenFlow 1.3 messages a controller may rely on beyond flows and groups, through the real
//! `ovs-ofctl -O OpenFlow13` (and 1.4 / 1.5 where the message exists there): GROUP_FEATURES,
//! queue statistics and QUEUE_GET_CONFIG (correctly formed, empty: no port has queues) and
//! their refusals. Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.

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
