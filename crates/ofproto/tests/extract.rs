//! End-to-end through `wire::extract`: real frames → flow key → translation.
mod common;

use common::*;
use dpif::Action;
use std::collections::HashSet;
use wire::{extract, Field};

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn ether(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, ty: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ty.to_be_bytes());
    f
}

fn tcp_frame(
    src: [u8; 6],
    dst: [u8; 6],
    vlan: Option<u16>,
    ips: ([u8; 4], [u8; 4]),
    ports: (u16, u16),
    frag: u16,
) -> Vec<u8> {
    let mut f = ether(dst, src, vlan, 0x0800);
    let mut ip = vec![0x45, 0, 0, 40, 0, 1];
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, 6, 0, 0]);
    ip.extend_from_slice(&ips.0);
    ip.extend_from_slice(&ips.1);
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&ports.0.to_be_bytes());
    f.extend_from_slice(&ports.1.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    f
}

fn arp_frame(src: [u8; 6], op: u16, spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = ether(BCAST, src, None, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&src);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa);
    f
}

#[test]
fn tcp_rule_on_a_real_frame() {
    let pl = pipeline();
    flows(
        &pl,
        &["priority=10,tcp,nw_dst=10.0.0.0/24,tp_dst=80,actions=mod_tp_dst:8080,output:p2"],
    );
    let f = tcp_frame(
        MAC_A,
        MAC_B,
        None,
        ([10, 1, 1, 1], [10, 0, 0, 7]),
        (3333, 80),
        0,
    );
    let k = extract(&f, dp(1));
    assert_eq!(
        xlate(&pl, &k).actions,
        vec![Action::SetTpDst(8080), Action::Output(dp(2))]
    );
    let other = tcp_frame(
        MAC_A,
        MAC_B,
        None,
        ([10, 1, 1, 1], [10, 0, 1, 7]),
        (3333, 80),
        0,
    );
    assert!(xlate(&pl, &extract(&other, dp(1))).actions.is_empty());
    // A later fragment carries no TCP header: the port rewrite is skipped.
    flows(&pl, &["priority=10,tcp,actions=mod_tp_dst:8080,output:p2"]);
    let later = tcp_frame(
        MAC_A,
        MAC_B,
        None,
        ([10, 1, 1, 1], [10, 0, 0, 7]),
        (3333, 80),
        100,
    );
    let tr = xlate(&pl, &extract(&later, dp(1)));
    assert_eq!(tr.actions, vec![Action::Output(dp(2))]);
    assert_ne!(tr.mask.get(Field::IpFrag) & 2, 0);
}

#[test]
fn arp_and_vlan_frames() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=10,arp,arp_op=1,arp_tpa=10.0.0.1,actions=output:3",
            "priority=5,dl_vlan=7,actions=strip_vlan,output:4",
        ],
    );
    let req = arp_frame(MAC_A, 1, [10, 0, 0, 2], [10, 0, 0, 1]);
    assert_eq!(
        xlate(&pl, &extract(&req, dp(1))).actions,
        vec![Action::Output(dp(3))]
    );
    let reply = arp_frame(MAC_A, 2, [10, 0, 0, 2], [10, 0, 0, 1]);
    assert!(xlate(&pl, &extract(&reply, dp(1))).actions.is_empty());
    let tagged = tcp_frame(
        MAC_A,
        MAC_B,
        Some(0x2007),
        ([1, 1, 1, 1], [2, 2, 2, 2]),
        (1, 2),
        0,
    );
    assert_eq!(
        xlate(&pl, &extract(&tagged, dp(1))).actions,
        vec![Action::PopVlan, Action::Output(dp(4))]
    );
}

#[test]
fn normal_megaflows_from_real_frames() {
    let pl = pipeline_with(
        ofproto::PipelineConfig::default(),
        &[Some(10), None, None, None],
    );
    let mut set = HashSet::new();
    for i in 0..1000u16 {
        let a = tcp_frame(
            MAC_A,
            MAC_B,
            None,
            ([10, 0, (i >> 8) as u8, i as u8], [10, 9, 9, 9]),
            (i, 80),
            0,
        );
        let b = tcp_frame(
            MAC_B,
            MAC_A,
            Some(10),
            ([10, 9, 9, 9], [10, 0, (i >> 8) as u8, i as u8]),
            (80, i),
            0,
        );
        for (frame, inp) in [(a, 1), (b, 2)] {
            let k = extract(&frame, dp(inp));
            let tr = xlate(&pl, &k);
            set.insert((k.masked(&tr.mask), tr.mask));
        }
    }
    assert!(set.len() <= 4, "{} megaflows", set.len());
    // A on access port p1 (VLAN 10) reaches B on trunk p2 tagged; B's tagged reply leaves
    // p1 untagged.
    let a = tcp_frame(MAC_A, MAC_B, None, ([1, 1, 1, 1], [2, 2, 2, 2]), (1, 2), 0);
    assert_eq!(
        xlate(&pl, &extract(&a, dp(1))).actions,
        vec![Action::PushVlan(0x100a), Action::Output(dp(2))]
    );
    let b = tcp_frame(
        MAC_B,
        MAC_A,
        Some(10),
        ([2, 2, 2, 2], [1, 1, 1, 1]),
        (2, 1),
        0,
    );
    assert_eq!(
        xlate(&pl, &extract(&b, dp(2))).actions,
        vec![Action::PopVlan, Action::Output(dp(1))]
    );
}
