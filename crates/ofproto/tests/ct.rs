//! Conntrack in the pipeline: `ct(...)` translates to the datapath's `Ct` action (zone from an
//! immediate or a register, commit, NAT, `exec(set_field:..->ct_mark)`), `ct(table=N)`
//! freezes the walk into a recirculation id that a recirculated packet resumes from (with its
//! registers), rules match the ct fields the datapath put in the key, and the tutorial's
//! firewall translates as expected for new, established and reply packets.
mod common;

use common::*;
use conntrack::{state, Nat, NatDir};
use dpif::{Action, CtSpec};
use wire::{Field, FlowKey};

fn base() -> FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0001, 0x0a00_0002), (1234, 80))
}

fn ct_of(a: &Action) -> &CtSpec {
    match a {
        Action::Ct(c) => c,
        other => panic!("not a ct action: {other:?}"),
    }
}

/// The key the datapath hands back after `ct(table=N)`: recirc_id and ct fields set.
fn recirculated(k: &FlowKey, id: u32, st: u32, zone: u16) -> FlowKey {
    let mut k = *k;
    k.set(Field::RecircId, id.into());
    k.set(Field::CtState, st.into());
    k.set(Field::CtZone, zone.into());
    k
}

const TUTORIAL: &[&str] = &[
    "table=0,priority=1,actions=drop",
    "table=0,priority=10,arp,actions=normal",
    "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
    "table=1,in_port=1,ip,ct_state=+trk+new,actions=ct(commit),output:2",
    "table=1,in_port=1,ip,ct_state=+trk+est,actions=output:2",
    "table=1,in_port=2,ip,ct_state=+trk+new,actions=drop",
    "table=1,in_port=2,ip,ct_state=+trk+est,actions=output:1",
];

#[test]
fn the_tutorial_firewall_recirculates_then_allows_new_from_1_and_established_both_ways() {
    let pl = pipeline();
    flows(&pl, TUTORIAL);
    let t = xlate(&pl, &base());
    assert_eq!(t.actions.len(), 1, "{:?}", t.actions);
    let c = ct_of(&t.actions[0]);
    let id = c.recirc.expect("ct(table=1) recirculates");
    assert!(!c.ct.commit && c.ct.zone == 0);
    assert_ne!(t.mask.get(Field::CtState), 0, "ct_state=-trk was consulted");
    // The same state always gets the same id (port 2's packets too: same table, same regs).
    let t2 = xlate(
        &pl,
        &tcp(2, MAC_B, MAC_A, (0x0a00_0002, 0x0a00_0001), (80, 1234)),
    );
    assert_eq!(ct_of(&t2.actions[0]).recirc, Some(id));

    let new = recirculated(&base(), id, state::TRK | state::NEW, 0);
    let t = xlate(&pl, &new);
    assert_eq!(t.actions.len(), 2, "{:?}", t.actions);
    let c = ct_of(&t.actions[0]);
    assert!(c.ct.commit && c.recirc.is_none());
    assert_eq!(t.actions[1], Action::Output(dp(2)));
    assert_ne!(t.mask.get(Field::CtState), 0);

    let est = recirculated(&base(), id, state::TRK | state::EST, 0);
    assert_eq!(xlate(&pl, &est).actions, vec![Action::Output(dp(2))]);
    let back = tcp(2, MAC_B, MAC_A, (0x0a00_0002, 0x0a00_0001), (80, 1234));
    let rpl = recirculated(&back, id, state::TRK | state::EST | state::RPL, 0);
    assert_eq!(xlate(&pl, &rpl).actions, vec![Action::Output(dp(1))]);
    let b_new = recirculated(&back, id, state::TRK | state::NEW, 0);
    assert!(
        xlate(&pl, &b_new).actions.is_empty(),
        "B may not open connections"
    );
    // An id nobody handed out is dropped.
    let bogus = recirculated(&base(), id + 1000, state::TRK | state::EST, 0);
    assert!(xlate(&pl, &bogus).actions.is_empty());
    // dump-flows prints the ct fields and actions back as written.
    let dump = pl.dump_flows_text("br0", None).unwrap().join("\n");
    assert!(
        dump.contains("ct_state=-trk,ip actions=ct(table=1)"),
        "{dump}"
    );
    assert!(
        dump.contains("ct_state=+new+trk,ip,in_port=p1 actions=ct(commit),output:2"),
        "{dump}"
    );
}

#[test]
fn zone_from_a_register_exec_mark_and_nat_translate() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "table=0,ip,actions=load:0x2a->NXM_NX_REG0[0..15],resubmit(,1)",
            "table=1,ip,ct_state=-trk,actions=ct(zone=NXM_NX_REG0[0..15],table=2)",
            "table=2,ip,ct_state=+trk+new,reg0=0x2a,actions=ct(commit,zone=NXM_NX_REG0[0..15],\
             exec(set_field:0x5->ct_mark),nat(src=10.9.0.1-10.9.0.3:2000-3000)),output:2",
            "table=2,ip,ct_state=+trk+est,ct_mark=0x5,actions=output:3",
        ],
    );
    let t = xlate(&pl, &base());
    let c = ct_of(&t.actions[0]);
    assert_eq!(c.ct.zone, 42, "zone read from reg0");
    let id = c.recirc.unwrap();
    // The registers were frozen: the recirculated walk still sees reg0=0x2a.
    let t = xlate(&pl, &recirculated(&base(), id, state::TRK | state::NEW, 42));
    assert_eq!(t.actions.len(), 2, "{:?}", t.actions);
    let c = ct_of(&t.actions[0]);
    assert_eq!(c.ct.zone, 42);
    assert!(c.ct.commit);
    assert_eq!(c.ct.mark, Some((5, u32::MAX)));
    match c.ct.nat {
        Nat::Set(n) => {
            assert_eq!(n.dir, NatDir::Src);
            assert_eq!((n.addr_lo, n.addr_hi), (0x0a09_0001, 0x0a09_0003));
            assert_eq!((n.port_lo, n.port_hi), (2000, 3000));
        }
        other => panic!("{other:?}"),
    }
    let mut est = recirculated(&base(), id, state::TRK | state::EST, 42);
    est.set(Field::CtMark, 5);
    assert_eq!(xlate(&pl, &est).actions, vec![Action::Output(dp(3))]);
    est.set(Field::CtMark, 6);
    assert!(xlate(&pl, &est).actions.is_empty(), "ct_mark is matched");
}

#[test]
fn ct_clear_translates_and_bad_ct_rules_are_refused() {
    let pl = pipeline();
    flows(&pl, &["ip,actions=ct_clear,output:2"]);
    assert_eq!(
        xlate(&pl, &base()).actions,
        vec![Action::CtClear, Action::Output(dp(2))]
    );
    for bad in [
        "ip,actions=ct(exec(set_field:1->ct_mark))",
        "ip,actions=ct(commit,nat(src=10.0.0.9-10.0.0.1))",
        "ct_nw_src=10.0.0.1,actions=drop",
        "ct_state=+trk+bogus,actions=drop",
    ] {
        assert!(pl.add_flow("br0", bad).is_err(), "{bad} must be refused");
    }
}

#[test]
fn megaflows_after_recirculation_revalidate_like_any_other() {
    let pl = pipeline();
    flows(&pl, TUTORIAL);
    let id = ct_of(&xlate(&pl, &base()).actions[0]).recirc.unwrap();
    let est = recirculated(&base(), id, state::TRK | state::EST, 0);
    // As the datapath installs it: in_port and recirc_id exact, the key masked.
    let installed = |pl: &ofproto::Pipeline| {
        let t = xlate(pl, &est);
        let mut mask = t.mask;
        mask.set_exact(Field::InPort);
        mask.set_exact(Field::RecircId);
        (est.masked(&mask), mask, t.actions, t.deps.tags.to_vec())
    };
    let (k, m, acts, tags) = installed(&pl);
    assert_eq!(acts, vec![Action::Output(dp(2))]);
    assert!(pl.still_valid_flow(&k, &m, &acts, &tags), "nothing changed");
    // A change to the rule the recirculated walk used makes the megaflow stale.
    pl.add_flow(
        "br0",
        "table=1,in_port=1,ip,ct_state=+trk+est,actions=output:3",
    )
    .unwrap();
    assert!(!pl.still_valid_flow(&k, &m, &acts, &tags), "rule changed");
    let (k2, m2, acts2, tags2) = installed(&pl);
    assert_eq!(acts2, vec![Action::Output(dp(3))]);
    assert!(pl.still_valid_flow(&k2, &m2, &acts2, &tags2));
}

/// `ct_nw_src` / `ct_nw_dst` share their key word with the high half of `ct_ipv6_src`: a
/// rule on either address alone (with `ip`), and one on a whole `ct_ipv6_src` (with `ipv6`),
/// are accepted; the wrong or a missing eth_type is refused. (`ip,ct_nw_dst=` alone and every
/// full `ct_ipv6_src` match used to be refused as ambiguous.)
#[test]
fn ct_address_matches_take_their_own_eth_type() {
    let pl = pipeline();
    for ok in [
        "ip,ct_nw_dst=10.0.0.2,actions=drop",
        "ip,ct_nw_src=10.0.0.1,actions=drop",
        "ip,ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,actions=drop",
        "ipv6,ct_ipv6_src=2001:db8::1,actions=drop",
        "ipv6,ct_ipv6_dst=2001:db8::2,actions=drop",
    ] {
        pl.add_flow("br0", ok)
            .unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        "ct_nw_dst=10.0.0.2,actions=drop",
        "arp,ct_nw_src=10.0.0.1,actions=drop",
        "ip,ct_ipv6_dst=2001:db8::2,actions=drop",
    ] {
        assert!(pl.add_flow("br0", bad).is_err(), "{bad}");
    }
}

/// Actions after `ct(table=N)` fork the packet, as in OVS: the `Ct` action is marked `fork`
/// and the walk goes on for the packet itself with its conntrack fields cleared (a later
/// match on `ct_state` sees it untracked); `ct(table=N)` with nothing after it is no fork.
#[test]
fn actions_after_ct_table_fork_the_packet_and_run_untracked() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "table=0,ip,ct_state=-trk,actions=ct(table=1)",
            "table=1,ip,ct_state=+trk,actions=ct(commit,table=2),resubmit(,3)",
            "table=3,ip,ct_state=-trk,actions=output:2",
            "table=3,ip,ct_state=+trk,actions=output:3",
        ],
    );
    let t = xlate(&pl, &base());
    assert_eq!(t.actions.len(), 1, "{:?}", t.actions);
    let first = ct_of(&t.actions[0]);
    assert!(!first.fork, "nothing follows: no fork");
    let id = first.recirc.unwrap();
    // The recirculated packet (tracked, new) meets the forking ct in table 1.
    let new = recirculated(&base(), id, state::TRK | state::NEW, 0);
    let t = xlate(&pl, &new);
    assert_eq!(t.actions.len(), 2, "{:?}", t.actions);
    let c = ct_of(&t.actions[0]);
    assert!(c.ct.commit && c.recirc.is_some() && c.fork, "{c:?}");
    assert_eq!(
        t.actions[1],
        Action::Output(dp(2)),
        "the packet itself goes on untracked"
    );
}
