//! OpenFlow 1.5 bucket editing with the real `ovs-ofctl -O OpenFlow15 insert-buckets` /
//! `remove-buckets` against a `BridgeOf` over a real pipeline: buckets keep the ids the
//! controller gave, land where `command_bucket_id` says (first, last, right after a bucket,
//! as Open vSwitch 3.1 places them), `dump-groups` shows the result, a packet through the
//! group follows the new bucket list, and the refusals are the ones OVS 3.1 answers for the
//! same commands (`OFPGMFC_UNKNOWN_BUCKET`, `OFPGMFC_BUCKET_EXISTS`, `OFPGMFC_UNKNOWN_GROUP`).
//! Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.

mod common;

use common::*;
use testkit::{have_ofctl, Out};

const V15: Option<&str> = Some("OpenFlow15");

fn run(h: &Harness, cmd: &str, arg: &str) -> Out {
    testkit::ofctl_version(&h.sock, V15, &[], cmd, &[arg])
}

fn must(h: &Harness, cmd: &str, arg: &str) {
    let o = run(h, cmd, arg);
    assert!(o.ok, "ovs-ofctl {cmd} {arg} failed: {}", o.stderr);
}

fn refused(h: &Harness, cmd: &str, arg: &str, error: &str) {
    let o = run(h, cmd, arg);
    assert!(
        !o.ok && o.stderr.contains(error),
        "{cmd} {arg}: {}",
        o.stderr
    );
}

/// The `bucket_id:N,actions=...` parts of group 1 in `dump-groups`.
fn buckets(h: &Harness) -> Vec<String> {
    let o = testkit::ofctl_version(&h.sock, V15, &[], "dump-groups", &[]);
    assert!(o.ok, "{}", o.stderr);
    let line = o
        .stdout
        .lines()
        .find(|l| l.contains("group_id=1,"))
        .unwrap_or_else(|| panic!("no group 1: {}", o.stdout))
        .to_string();
    line.split(",bucket=").skip(1).map(str::to_string).collect()
}

#[test]
fn insert_and_remove_buckets_with_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(
        &h,
        "add-group",
        "group_id=1,type=all,bucket=bucket_id:5,output:1,bucket=bucket_id:7,output:2",
    );
    must(&h, "add-flow", "in_port=4,actions=group:1");
    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    assert_eq!(outputs(&xlate(&h.pl, 4, &f)), vec![11, 12]);

    must(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=5,bucket=bucket_id:6,output:3",
    );
    must(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=first,bucket=bucket_id:1,output:4",
    );
    must(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=last,bucket=bucket_id:9,output:LOCAL",
    );
    assert_eq!(
        buckets(&h),
        [
            "bucket_id:1,actions=output:4",
            "bucket_id:5,actions=output:1",
            "bucket_id:6,actions=output:3",
            "bucket_id:7,actions=output:2",
            "bucket_id:9,actions=LOCAL",
        ]
    );
    // The rule through the group follows the new buckets (in_port 4 is not echoed).
    let outs = outputs(&xlate(&h.pl, 4, &f));
    assert_eq!(&outs[..3], &[11, 13, 12], "{outs:?}");

    // What OVS 3.1 answers for the same mistakes.
    refused(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=99,bucket=bucket_id:10,output:1",
        "OFPGMFC_UNKNOWN_BUCKET",
    );
    refused(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=last,bucket=bucket_id:9,output:1",
        "OFPGMFC_BUCKET_EXISTS",
    );
    refused(
        &h,
        "insert-buckets",
        "group_id=7,command_bucket_id=last,bucket=bucket_id:9,output:1",
        "OFPGMFC_UNKNOWN_GROUP",
    );
    refused(
        &h,
        "remove-buckets",
        "group_id=1,command_bucket_id=99",
        "OFPGMFC_UNKNOWN_BUCKET",
    );
    // Weights stay for select groups.
    refused(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=last,bucket=bucket_id:3,weight:5,output:1",
        "OFPGMFC_BAD_BUCKET",
    );
    assert_eq!(buckets(&h).len(), 5, "nothing of a refused edit applied");

    must(&h, "remove-buckets", "group_id=1,command_bucket_id=6");
    must(&h, "remove-buckets", "group_id=1,command_bucket_id=first");
    must(&h, "remove-buckets", "group_id=1,command_bucket_id=last");
    assert_eq!(
        buckets(&h),
        [
            "bucket_id:5,actions=output:1",
            "bucket_id:7,actions=output:2"
        ]
    );
    assert_eq!(outputs(&xlate(&h.pl, 4, &f)), vec![11, 12]);
    // No command bucket id: every bucket goes; the group stays.
    must(&h, "remove-buckets", "group_id=1");
    assert!(buckets(&h).is_empty());
    assert!(outputs(&xlate(&h.pl, 4, &f)).is_empty());
    must(&h, "remove-buckets", "group_id=1,command_bucket_id=first");
}

/// Buckets a 1.3 / 1.4 controller adds are numbered 0, 1, ... (as OVS numbers them), which a
/// 1.5 session sees and can edit by id.
#[test]
fn buckets_from_earlier_versions_get_position_ids() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let o = testkit::ofctl_version(
        &h.sock,
        Some("OpenFlow13"),
        &[],
        "add-group",
        &["group_id=1,type=select,bucket=weight:1,output:1,bucket=weight:2,output:2"],
    );
    assert!(o.ok, "{}", o.stderr);
    let b = buckets(&h);
    assert!(
        // (ovs-ofctl does not print the default weight 1.)
        b[0] == "bucket_id:0,actions=output:1" && b[1].starts_with("bucket_id:1,weight:2"),
        "{b:?}"
    );
    must(
        &h,
        "insert-buckets",
        "group_id=1,command_bucket_id=0,bucket=bucket_id:8,weight:3,output:3",
    );
    let b = buckets(&h);
    assert!(b[1].starts_with("bucket_id:8,weight:3"), "{b:?}");
}
