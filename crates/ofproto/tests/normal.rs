//! NORMAL: learning, flooding, aging, size limit, MAC moves, VLAN access and trunk ports, and
//! megaflow mask minimality.
mod common;

use common::*;
use dpif::Action;
use ofproto::PipelineConfig;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

fn o(n: u32) -> Action {
    Action::Output(dp(n))
}

#[test]
fn learns_floods_and_forwards() {
    let pl = pipeline();
    let g0 = pl.generation();
    let ab = eth(1, MAC_A, MAC_B, 0x0800);
    assert_eq!(
        xlate(&pl, &ab).actions,
        vec![o(2), o(3), o(4)],
        "B unknown: flood"
    );
    let g1 = pl.generation();
    assert!(g1 > g0, "learning A bumps the generation");
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, MAC_A, 0x0800)).actions,
        vec![o(1)]
    );
    assert_eq!(xlate(&pl, &ab).actions, vec![o(2)], "B learned on p2");
    let g2 = pl.generation();
    assert_eq!(xlate(&pl, &ab).actions, vec![o(2)]);
    assert_eq!(pl.generation(), g2, "a refresh does not bump");
    assert_eq!(
        xlate(&pl, &eth(1, MAC_A, BCAST, 0x0806)).actions,
        vec![o(2), o(3), o(4)],
        "broadcast floods"
    );
    let mcast = [0x01, 0x00, 0x5e, 0, 0, 1];
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, mcast, 0x0800)).actions,
        vec![o(1), o(3), o(4)],
        "multicast floods"
    );
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, MAC_B, 0x0800)).actions,
        vec![],
        "dst on the ingress port: drop"
    );
    let lldp = [0x01, 0x80, 0xc2, 0, 0, 0x0e];
    let tr = xlate(&pl, &eth(2, MAC_B, lldp, 0x88cc));
    assert_eq!(tr.actions, vec![], "802.1D reserved: not forwarded");
    let macs = pl.mac_entries("br0").unwrap();
    assert_eq!(
        macs.iter().map(|e| (e.1, e.2)).collect::<Vec<_>>(),
        vec![(MAC_A, 1), (MAC_B, 2)]
    );
}

#[test]
fn mac_move_bumps_generation_and_redirects() {
    let pl = pipeline();
    xlate(&pl, &eth(1, MAC_A, BCAST, 0x0800));
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, MAC_A, 0x0800)).actions,
        vec![o(1)]
    );
    let g = pl.generation();
    xlate(&pl, &eth(3, MAC_A, BCAST, 0x0800));
    assert!(pl.generation() > g, "move bumps");
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, MAC_A, 0x0800)).actions,
        vec![o(3)]
    );
}

#[test]
fn aging_and_size_limit() {
    let cfg = PipelineConfig {
        mac_aging: Duration::from_secs(10),
        mac_max_entries: 2,
        ..PipelineConfig::default()
    };
    let pl = pipeline_with(cfg, &[None, None, None, None]);
    let t0 = Instant::now();
    xlate_at(&pl, &eth(1, MAC_A, BCAST, 0x0800), t0);
    assert_eq!(
        xlate_at(&pl, &eth(2, MAC_B, MAC_A, 0x0800), t0).actions,
        vec![o(1)]
    );
    let t11 = t0 + Duration::from_secs(11);
    assert_eq!(
        xlate_at(&pl, &eth(4, MAC_C, MAC_A, 0x0800), t11).actions,
        vec![o(1), o(2), o(3)],
        "A aged out"
    );
    // Now B (t0) and C (t11) are in the table; learning A again evicts the oldest (B).
    let g = pl.generation();
    pl.expire(t11);
    assert!(pl.generation() > g, "aging out entries bumps");
    xlate_at(&pl, &eth(1, MAC_A, BCAST, 0x0800), t11);
    xlate_at(&pl, &eth(2, MAC_B, BCAST, 0x0800), t11);
    xlate_at(&pl, &eth(3, MAC_C, BCAST, 0x0800), t11);
    assert_eq!(pl.mac_entries("br0").unwrap().len(), 2, "limit holds");
    assert_eq!(
        xlate_at(&pl, &eth(4, [2, 0, 0, 0, 0, 9], MAC_A, 0x0800), t11)
            .actions
            .len(),
        3,
        "A evicted: flood"
    );
}

#[test]
fn access_ports_tag_and_untag() {
    // p1, p2: access VLAN 10; p3: access VLAN 20; p4: trunk (all VLANs).
    let pl = pipeline_with(
        PipelineConfig::default(),
        &[Some(10), Some(10), Some(20), None],
    );
    let bc = eth(1, MAC_A, BCAST, 0x0800);
    assert_eq!(
        xlate(&pl, &bc).actions,
        vec![o(2), Action::PushVlan(0x100a), o(4)],
        "untagged in on an access port: VLAN 10; access out untagged, trunk out tagged"
    );
    let from_trunk = with(eth(4, MAC_B, BCAST, 0x0800), Field::VlanTci, 0x1000 | 10);
    assert_eq!(
        xlate(&pl, &from_trunk).actions,
        vec![Action::PopVlan, o(1), o(2)]
    );
    let pcp = with(
        eth(4, MAC_B, BCAST, 0x0800),
        Field::VlanTci,
        0xa000 | 0x1000 | 20,
    );
    assert_eq!(xlate(&pl, &pcp).actions, vec![Action::PopVlan, o(3)]);
    assert_eq!(
        xlate(&pl, &with(bc, Field::VlanTci, 0x1000 | 10)).actions,
        vec![],
        "tagged frame on an access port: drop"
    );
    assert_eq!(
        xlate(&pl, &with(bc, Field::VlanTci, 0x1000)).actions,
        vec![Action::PopVlan, o(2), Action::PushVlan(0x100a), o(4)],
        "priority-tagged frame accepted as untagged"
    );
    // Learning is per VLAN: B learned on VLAN 10 via the trunk.
    assert_eq!(
        xlate(&pl, &eth(1, MAC_A, MAC_B, 0x0800)).actions,
        vec![Action::PushVlan(0x100a), o(4)]
    );
    // ...but not on VLAN 20.
    assert_eq!(
        xlate(&pl, &eth(3, MAC_C, MAC_B, 0x0800)).actions,
        vec![Action::PushVlan(0x1014), o(4)],
        "flood in VLAN 20 only"
    );
}

#[test]
fn trunk_lists_filter_vlans() {
    let pl = ofproto::Pipeline::default();
    pl.add_bridge("br0").unwrap();
    pl.add_port("br0", port("p1", 1, None, &[10])).unwrap();
    pl.add_port("br0", port("p2", 2, None, &[10, 20])).unwrap();
    pl.add_port("br0", port("p3", 3, None, &[20])).unwrap();
    pl.add_port("br0", port("p4", 4, Some(20), &[])).unwrap();
    let v = |in_of, tci| with(eth(in_of, MAC_A, BCAST, 0x0800), Field::VlanTci, tci);
    assert_eq!(xlate(&pl, &v(1, 0x1000 | 10)).actions, vec![o(2)]);
    assert_eq!(
        xlate(&pl, &v(1, 0x1000 | 20)).actions,
        vec![],
        "VLAN 20 not on p1's list"
    );
    assert_eq!(
        xlate(&pl, &v(1, 0)).actions,
        vec![],
        "untagged = VLAN 0, not listed"
    );
    assert_eq!(
        xlate(&pl, &v(2, 0x1000 | 20)).actions,
        vec![o(3), Action::PopVlan, o(4)]
    );
    pl.set_port_vlans("br0", "p1", None, vec![10, 20]).unwrap();
    assert_eq!(
        xlate(&pl, &v(1, 0x1000 | 20)).actions,
        vec![o(2), o(3), Action::PopVlan, o(4)]
    );
}

/// NORMAL between two MACs: 1000 different IP/port tuples each way need only a handful of
/// megaflows, because NORMAL consults in_port, VLAN and the MACs only.
#[test]
fn megaflow_masks_stay_minimal_under_normal() {
    let pl = pipeline();
    let mut all = HashSet::new();
    // Simulated megaflow cache: (key & mask, mask) entries; only misses are translated.
    let mut cache: Vec<(FlowKey, FlowKey)> = Vec::new();
    let mut upcalls = 0;
    for i in 0..1000u32 {
        for (inp, src, dst) in [(1, MAC_A, MAC_B), (2, MAC_B, MAC_A)] {
            let k = tcp(
                inp,
                src,
                dst,
                (0x0a00_0000 + i, 0x0b00_0000 + i * 7),
                (i as u16, 80 + i as u16),
            );
            let tr = xlate(&pl, &k);
            for f in [
                Field::Ipv4Src,
                Field::Ipv4Dst,
                Field::TpSrc,
                Field::TpDst,
                Field::IpProto,
                Field::EthType,
            ] {
                assert_eq!(tr.mask.get(f), 0, "{f:?} must not be in a NORMAL megaflow");
            }
            all.insert((k.masked(&tr.mask), tr.mask));
            if !cache.iter().any(|(mk, m)| k.masked(m) == *mk) {
                upcalls += 1;
                cache.push((k.masked(&tr.mask), tr.mask));
            }
        }
    }
    println!("distinct megaflows {}, upcalls {upcalls}", all.len());
    assert!(all.len() <= 4, "distinct (key&mask, mask): {}", all.len());
    assert!(upcalls <= 4);
}

/// Staged lookup: an ACL on TCP port 22 in front of NORMAL does not put UDP ports (or the TCP
/// port of ARP/non-IP traffic) into the megaflows.
#[test]
fn acl_in_front_of_normal_keeps_udp_megaflows_few() {
    let pl = pipeline();
    pl.add_flow("br0", "priority=100,tcp,tp_dst=22,actions=drop")
        .unwrap();
    let mut set = HashSet::new();
    for i in 0..1000u32 {
        let mut k = tcp(1, MAC_A, MAC_B, (i, 7), (i as u16, 1000 + i as u16));
        k.set(Field::IpProto, 17);
        let tr = xlate(&pl, &k);
        assert_eq!(
            tr.mask.get(Field::TpDst),
            0,
            "UDP misses the ACL at the L3 stage"
        );
        set.insert((k.masked(&tr.mask), tr.mask));
        let arp = eth(1, MAC_A, MAC_B, 0x0806);
        let tr = xlate(&pl, &arp);
        assert_eq!(tr.mask.get(Field::IpProto), 0, "ARP misses at the L2 stage");
    }
    assert!(set.len() <= 2, "{} megaflows", set.len());
    let ssh = tcp(1, MAC_A, MAC_B, (1, 2), (3, 22));
    assert!(xlate(&pl, &ssh).actions.is_empty());
}

/// A MAC whose traffic megaflows carry (credited once a second by the daemon) does not age
/// out; an idle one does, and its aging is a revalidation tag, not a full revalidation.
#[test]
fn credited_traffic_keeps_a_mac_alive_and_aging_is_a_tag_change() {
    let cfg = PipelineConfig {
        mac_aging: Duration::from_secs(10),
        ..PipelineConfig::default()
    };
    let pl = pipeline_with(cfg, &[None, None, None, None]);
    let t0 = Instant::now();
    let ab = eth(1, MAC_A, MAC_B, 0x0800);
    xlate_at(&pl, &ab, t0);
    xlate_at(&pl, &eth(2, MAC_B, MAC_A, 0x0800), t0);
    pl.take_changes();
    // Only A->B traffic flows after t0, through its megaflow (never an upcall).
    for s in [4, 8, 12] {
        pl.credit(&ab, 10, 600, t0 + Duration::from_secs(s));
    }
    let t13 = t0 + Duration::from_secs(13);
    pl.expire(t13);
    let macs: Vec<_> = pl.mac_entries("br0").unwrap();
    assert_eq!(macs.iter().map(|e| e.1).collect::<Vec<_>>(), vec![MAC_A]);
    let ch = pl.take_changes();
    assert!(!ch.full, "aging is not a rule change");
    assert_eq!(
        ch.tags,
        vec![ofproto::normal::mac_tag(0, 0, 0x0b)],
        "B's entry went"
    );
    let tr = xlate_at(&pl, &ab, t13);
    assert_eq!(tr.actions, vec![o(2), o(3), o(4)], "B unknown again: flood");
    assert!(tr.deps.tags.contains(&ofproto::normal::mac_tag(0, 0, 0x0b)));
}

#[test]
fn learned_macs_move_to_another_pipeline_by_port_name_with_their_age() {
    let pl = pipeline();
    let t0 = Instant::now();
    xlate_at(&pl, &eth(1, MAC_A, BCAST, 0x0800), t0);
    xlate_at(&pl, &eth(2, MAC_B, MAC_A, 0x0800), t0);
    let named = pl.mac_entries_named("br0").unwrap();
    assert_eq!(
        named
            .iter()
            .map(|e| (e.1, e.2.as_str()))
            .collect::<Vec<_>>(),
        vec![(MAC_A, "p1"), (MAC_B, "p2")]
    );
    // The new pipeline numbers its ports the other way round, and has no port p9.
    let new = ofproto::Pipeline::new(PipelineConfig::default());
    new.add_bridge("br0").unwrap();
    for (name, n) in [("p2", 1), ("p1", 2), ("p3", 3)] {
        new.add_port("br0", port(name, n, None, &[])).unwrap();
    }
    let mut with_stray = named.clone();
    with_stray.push((0, MAC_C, "p9".into(), Duration::ZERO));
    let g = new.generation();
    assert_eq!(new.restore_macs("br0", &with_stray).unwrap(), 2);
    assert!(new.generation() > g, "restored entries bump the generation");
    let got = new.mac_entries("br0").unwrap();
    assert_eq!(
        got.iter().map(|e| (e.1, e.2)).collect::<Vec<_>>(),
        vec![(MAC_A, 2), (MAC_B, 1)]
    );
    // Ages came along (learned moments ago, not now): never younger than in the old table.
    for ((_, _, _, old_age), (_, _, _, new_age)) in named.iter().zip(got.iter()) {
        assert!(new_age >= old_age);
    }
    // And forwarding uses them: B → A goes to A's port (2 here), no flood.
    assert_eq!(
        xlate(&new, &eth(1, MAC_B, MAC_A, 0x0800)).actions,
        vec![o(2)]
    );
}
