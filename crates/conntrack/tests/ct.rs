//! Behaviour tests for the connection tracker: state machine, windows, NAT, related ICMP,
//! zones, limits, fragments, hostile input, operations API.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, FragLimits, Nat, NatSpec, Timeouts, Tuple};

#[test]
fn tcp_handshake_data_fin_walk() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    // Uncommitted SYN: new but nothing stored.
    let mut syn = tcp(c, s, 1000, 80, 100, 0, SYN, 0);
    assert_eq!(run(&ct, &mut syn, &CtAction::default(), 0), TRK | NEW);
    assert_eq!(ct.len(), 0);
    assert_eq!(run(&ct, &mut syn, &a, 0), TRK | NEW);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.dump(None, 0)[0].state, "SYN_SENT");
    let mut synack = tcp(s, c, 80, 1000, 5000, 101, SYN | ACK, 0);
    assert_eq!(run(&ct, &mut synack, &a, 1), TRK | EST | RPL);
    assert_eq!(ct.dump(None, 1)[0].state, "SYN_RECV");
    let mut ack = tcp(c, s, 1000, 80, 101, 5001, ACK, 0);
    assert_eq!(run(&ct, &mut ack, &a, 2), TRK | EST);
    let d = ct.dump(None, 2);
    assert_eq!(d[0].state, "ESTABLISHED");
    assert_eq!(d[0].expires_in_ms, 24 * 3600 * 1000);
    let mut data = tcp(c, s, 1000, 80, 101, 5001, ACK, 1000);
    assert_eq!(run(&ct, &mut data, &a, 3), TRK | EST);
    let mut data2 = tcp(s, c, 80, 1000, 5001, 1101, ACK, 500);
    assert_eq!(run(&ct, &mut data2, &a, 4), TRK | EST | RPL);
    let mut fin = tcp(c, s, 1000, 80, 1101, 5501, FIN | ACK, 0);
    assert_eq!(run(&ct, &mut fin, &a, 5), TRK | EST);
    let d = ct.dump(None, 5);
    assert_eq!(
        (d[0].state, d[0].expires_in_ms),
        ("FIN_WAIT", 15 * 60 * 1000)
    );
    let mut fin2 = tcp(s, c, 80, 1000, 5501, 1102, FIN | ACK, 0);
    assert_eq!(run(&ct, &mut fin2, &a, 6), TRK | EST | RPL);
    let mut last = tcp(c, s, 1000, 80, 1102, 5502, ACK, 0);
    assert_eq!(run(&ct, &mut last, &a, 7), TRK | EST);
    let d = ct.dump(None, 7);
    assert_eq!((d[0].state, d[0].expires_in_ms), ("TIME_WAIT", 45_000));
    // A new SYN on the same tuple starts a fresh connection.
    let mut syn2 = tcp(c, s, 1000, 80, 90_000, 0, SYN, 0);
    assert_eq!(run(&ct, &mut syn2, &a, 8), TRK | NEW);
    assert_eq!(ct.dump(None, 8)[0].state, "SYN_SENT");
    assert_eq!(ct.len(), 1);
    // RST closes.
    let mut synack2 = tcp(s, c, 80, 1000, 7000, 90_001, SYN | ACK, 0);
    assert_eq!(run(&ct, &mut synack2, &a, 9), TRK | EST | RPL);
    let mut rst = tcp(s, c, 80, 1000, 7001, 0, RST, 0);
    assert_eq!(run(&ct, &mut rst, &a, 10), TRK | EST | RPL);
    assert_eq!(ct.dump(None, 10)[0].state, "CLOSED");
}

fn established(ct: &Conntrack, zone: u16) {
    let a = commit(zone);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    run(ct, &mut tcp(c, s, 1000, 80, 100, 0, SYN, 0), &a, 0);
    run(ct, &mut tcp(s, c, 80, 1000, 5000, 101, SYN | ACK, 0), &a, 0);
    assert_eq!(
        run(ct, &mut tcp(c, s, 1000, 80, 101, 5001, ACK, 0), &a, 0),
        TRK | EST
    );
}

#[test]
fn tcp_segments_outside_window_are_invalid_and_counted() {
    let ct = Conntrack::new();
    established(&ct, 0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let a = commit(0);
    // Far beyond what the server allowed (window 65535 from seq 101).
    let mut far = tcp(c, s, 1000, 80, 101 + 1_000_000, 5001, ACK, 10);
    assert_eq!(run(&ct, &mut far, &a, 1), TRK | INV);
    // Acknowledging data the server never sent.
    let mut bad_ack = tcp(c, s, 1000, 80, 101, 5001 + 500_000, ACK, 0);
    assert_eq!(run(&ct, &mut bad_ack, &a, 1), TRK | INV);
    // A RST with a blind sequence number.
    let mut blind = tcp(s, c, 80, 1000, 5001u32.wrapping_sub(3_000_000), 0, RST, 0);
    assert_eq!(run(&ct, &mut blind, &a, 1), TRK | INV);
    assert_eq!(inv(&ct, "tcp_window"), 3);
    assert_eq!(ct.dump(None, 1)[0].state, "ESTABLISHED");
    // In-window data still passes.
    assert_eq!(
        run(&ct, &mut tcp(c, s, 1000, 80, 101, 5001, ACK, 100), &a, 1),
        TRK | EST
    );
    // With window checks off for zone 3, the same far segment is accepted there.
    ct.set_zone_window_check(3, false);
    established(&ct, 3);
    let a3 = commit(3);
    assert_eq!(
        run(
            &ct,
            &mut tcp(c, s, 1000, 80, 101 + 1_000_000, 5001, ACK, 10),
            &a3,
            1
        ),
        TRK | EST
    );
    assert_eq!(inv(&ct, "tcp_window"), 3);
}

#[test]
fn tcp_bad_flags_and_midstream_are_invalid() {
    let ct = Conntrack::new();
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let a = commit(0);
    assert_eq!(
        run(&ct, &mut tcp(c, s, 1, 2, 0, 0, ACK, 0), &a, 0),
        TRK | INV
    );
    assert_eq!(
        run(&ct, &mut tcp(c, s, 1, 2, 0, 0, SYN | RST, 0), &a, 0),
        TRK | INV
    );
    assert_eq!(run(&ct, &mut tcp(c, s, 1, 2, 0, 0, 0, 0), &a, 0), TRK | INV);
    assert_eq!(ct.len(), 0);
    assert_eq!(inv(&ct, "tcp_flags"), 3);
}

#[test]
fn udp_and_icmp_pseudo_connections_and_timeouts() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    assert_eq!(run(&ct, &mut udp(c, s, 5000, 53, 10), &a, 0), TRK | NEW);
    assert_eq!(ct.dump(None, 0)[0].expires_in_ms, 60_000);
    assert_eq!(run(&ct, &mut udp(c, s, 5000, 53, 10), &a, 1000), TRK | NEW);
    assert_eq!(
        run(&ct, &mut udp(s, c, 53, 5000, 10), &a, 2000),
        TRK | EST | RPL
    );
    let d = ct.dump(None, 2000);
    assert_eq!((d[0].state, d[0].expires_in_ms), ("REPLIED", 30_000));
    // Expired at 32 s: the next packet is new again.
    assert_eq!(
        run(
            &ct,
            &mut udp(s, c, 53, 5000, 10),
            &CtAction::default(),
            32_001
        ),
        TRK | NEW
    );
    // ICMP echo.
    assert_eq!(run(&ct, &mut echo(c, s, 77, true), &a, 0), TRK | NEW);
    assert_eq!(run(&ct, &mut echo(s, c, 77, false), &a, 1), TRK | EST | RPL);
    assert_eq!(run(&ct, &mut echo(s, c, 78, false), &a, 1), TRK | INV);
    assert_eq!(inv(&ct, "icmp_other"), 1);
    // IPv6 echo and UDP.
    let (c6, s6) = (v6(1), v6(2));
    assert_eq!(run(&ct, &mut echo(c6, s6, 5, true), &a, 0), TRK | NEW);
    assert_eq!(
        run(&ct, &mut echo(s6, c6, 5, false), &a, 0),
        TRK | EST | RPL
    );
    assert_eq!(run(&ct, &mut udp(c6, s6, 1, 2, 3), &a, 0), TRK | NEW);
    assert_eq!(run(&ct, &mut udp(s6, c6, 2, 1, 3), &a, 0), TRK | EST | RPL);
}

#[test]
fn ipv6_tcp_handshake() {
    let ct = Conntrack::new();
    let a = commit(9);
    let (c, s) = (v6(1), v6(2));
    assert_eq!(
        run(&ct, &mut tcp(c, s, 4000, 443, 1, 0, SYN, 0), &a, 0),
        TRK | NEW
    );
    assert_eq!(
        run(&ct, &mut tcp(s, c, 443, 4000, 9, 2, SYN | ACK, 0), &a, 0),
        TRK | EST | RPL
    );
    assert_eq!(
        run(&ct, &mut tcp(c, s, 4000, 443, 2, 10, ACK, 0), &a, 0),
        TRK | EST
    );
    assert_eq!(ct.dump(Some(9), 0)[0].state, "ESTABLISHED");
}

#[test]
fn zone_policy_changes_timeouts() {
    let ct = Conntrack::new();
    ct.set_zone_policy(
        4,
        Some(Timeouts {
            udp_first: 5,
            ..Timeouts::default()
        }),
    );
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    run(&ct, &mut udp(c, s, 1, 2, 0), &commit(4), 0);
    run(&ct, &mut udp(c, s, 1, 2, 0), &commit(0), 0);
    let d = ct.dump(None, 0);
    assert_eq!(
        d.iter()
            .map(|x| (x.zone, x.expires_in_ms))
            .collect::<Vec<_>>(),
        vec![(0, 60_000), (4, 5_000)]
    );
    // The sweep removes the zone-4 one after 5 s and keeps the other.
    let r = ct.sweep(5_001, conntrack::table::SHARDS);
    assert_eq!(r.removed, 1);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.stats().expired, 1);
}

#[test]
fn zones_isolate_the_same_tuple_and_marks_labels() {
    let ct = Conntrack::new();
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let mut a1 = commit(1);
    a1.mark = Some((0xaa, 0xff));
    a1.label = Some((1 << 100, 1 << 100));
    let r = done(ct.execute(&mut udp(c, s, 1, 2, 0), &a1, 0));
    assert_eq!(
        (r.state, r.mark, r.label, r.zone),
        (TRK | NEW, 0xaa, 1 << 100, 1)
    );
    // Zone 2 does not see zone 1's connection.
    let r2 = done(ct.execute(
        &mut udp(s, c, 2, 1, 0),
        &CtAction {
            zone: 2,
            ..CtAction::default()
        },
        0,
    ));
    assert_eq!((r2.state, r2.mark), (TRK | NEW, 0));
    // Zone 1 does.
    let r1 = done(ct.execute(
        &mut udp(s, c, 2, 1, 0),
        &CtAction {
            zone: 1,
            ..CtAction::default()
        },
        0,
    ));
    assert_eq!(
        (r1.state, r1.mark, r1.label),
        (TRK | EST | RPL, 0xaa, 1 << 100)
    );
    // Set the mark later (commit again), masked.
    let mut a = commit(1);
    a.mark = Some((0x0100, 0xff00));
    let r = done(ct.execute(&mut udp(c, s, 1, 2, 0), &a, 0));
    assert_eq!(r.mark, 0x01aa);
    assert_eq!(ct.dump(Some(1), 0)[0].mark, 0x01aa);
    assert_eq!(ct.stats().per_zone.get(&1), Some(&1));
}

#[test]
fn force_restarts_a_connection_seen_in_reply_direction() {
    let ct = Conntrack::new();
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    run(&ct, &mut udp(c, s, 1, 2, 0), &commit(0), 0);
    let mut f = commit(0);
    f.force = true;
    assert_eq!(run(&ct, &mut udp(s, c, 2, 1, 0), &f, 0), TRK | NEW);
    let d = ct.dump(None, 0);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].orig.src[..4], [C, 0, 0, 2]);
}

#[test]
fn icmp_errors_related_or_invalid() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s, r) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2), v4(C, 0, 0, 254));
    let mut q = udp(c, s, 5000, 53, 20);
    run(&ct, &mut q, &a, 0);
    // A router's error about the client's packet: related, reply direction.
    let mut e = icmp_error(r, c, &q);
    assert_eq!(run(&ct, &mut e, &a, 1), TRK | REL | RPL);
    // An error quoting something never seen: invalid.
    let mut e2 = icmp_error(r, c, &udp(c, s, 5001, 53, 20));
    assert_eq!(run(&ct, &mut e2, &a, 1), TRK | INV);
    assert_eq!(inv(&ct, "icmp_unknown"), 1);
    // IPv6 too.
    let (c6, s6) = (v6(1), v6(2));
    let mut q6 = udp(c6, s6, 7, 8, 4);
    run(&ct, &mut q6, &a, 0);
    assert_eq!(
        run(&ct, &mut icmp_error(s6, c6, &q6), &a, 1),
        TRK | REL | RPL
    );
    assert_eq!(
        run(&ct, &mut icmp_error(s6, c6, &udp(c6, s6, 7, 9, 4)), &a, 1),
        TRK | INV
    );
}

#[test]
fn snat_round_trip_keeps_checksums_valid() {
    let ct = Conntrack::new();
    let a = nat("src=192.168.0.100:30000-30010");
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    for (i, mk) in [
        (
            0u16,
            &(|c, s, sp, dp| udp(c, s, sp, dp, 33)) as &dyn Fn(Addr, Addr, u16, u16) -> Vec<u8>,
        ),
        (1, &|c, s, sp, dp| tcp(c, s, sp, dp, 7, 0, SYN, 0)),
    ] {
        let mut f = mk(c, s, 5000 + i, 80);
        assert!(checksums_ok(&f));
        let st = run(&ct, &mut f, &a, 0);
        assert_eq!(st, TRK | NEW | SNAT);
        assert!(checksums_ok(&f), "orig direction checksum after SNAT");
        assert_eq!(addrs4(&f).0, [192, 168, 0, 100]);
        let sp = ports(&f).0;
        assert!((30000..=30010).contains(&sp));
        // The reply comes to the translated address and is un-NATed.
        let mut rp = match i {
            0 => udp(s, v4(192, 168, 0, 100), 80, sp, 12),
            _ => tcp(s, v4(192, 168, 0, 100), 80, sp, 50, 8, SYN | ACK, 0),
        };
        assert_eq!(run(&ct, &mut rp, &NAT_APPLY, 1), TRK | EST | RPL | SNAT);
        assert!(checksums_ok(&rp), "reply checksum after un-SNAT");
        assert_eq!(addrs4(&rp).1, [C, 0, 0, 1]);
        assert_eq!(ports(&rp).1, 5000 + i);
    }
    // IPv6 UDP.
    let a6 = nat("src=[fd00::99]");
    let mut f = udp(v6(1), v6(2), 9, 10, 5);
    assert_eq!(run(&ct, &mut f, &a6, 0), TRK | NEW | SNAT);
    assert!(checksums_ok(&f));
    assert_eq!(
        f[22..38],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99]
    );
    let mut dn = nat("src=[fd00::99]");
    dn.commit = false;
    dn.nat = Nat::Existing;
    let mut rp = ip_frame_reply6(&f);
    assert_eq!(run(&ct, &mut rp, &dn, 0), TRK | EST | RPL | SNAT);
    assert!(checksums_ok(&rp));
    let Addr::V6(c6) = v6(1) else { unreachable!() };
    assert_eq!(rp[38..54], c6);
}

fn ip_frame_reply6(f: &[u8]) -> Vec<u8> {
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&f[22..38]);
    d.copy_from_slice(&f[38..54]);
    let (sp, dp) = ports(f);
    udp(Addr::V6(d), Addr::V6(s), dp, sp, 7)
}

#[test]
fn snat_one_address_many_clients_never_collides() {
    let ct = Conntrack::new();
    let a = nat("src=192.168.0.1");
    let s = v4(8, 8, 8, 8);
    let mut seen = std::collections::HashSet::new();
    for i in 0..5000u32 {
        // Every client uses the same source port.
        let c = v4(10, 1, (i >> 8) as u8, i as u8);
        let mut f = udp(c, s, 40000, 53, 0);
        assert_eq!(run(&ct, &mut f, &a, 0), TRK | NEW | SNAT);
        assert!(checksums_ok(&f));
        assert!(
            seen.insert(ports(&f).0),
            "client {i} got a port already in use"
        );
    }
    assert_eq!(ct.len(), 5000);
    let d = ct.dump(None, 0);
    let replies: std::collections::HashSet<Tuple> = d.iter().map(|x| x.reply).collect();
    assert_eq!(replies.len(), 5000);
    // A tiny range is exhausted: refused and counted, not shared.
    let ct2 = Conntrack::new();
    let a2 = nat("src=192.168.0.1:2000-2003");
    for i in 0..6u8 {
        let st = run(&ct2, &mut udp(v4(10, 0, 0, i), s, 1, 53, 0), &a2, 0);
        assert_eq!(
            st,
            if i < 4 { TRK | NEW | SNAT } else { TRK | INV },
            "client {i}"
        );
    }
    assert_eq!(ct2.stats().nat_exhausted, 2);
}

#[test]
fn dnat_to_two_backends_with_hash_selection() {
    let ct = Conntrack::new();
    let a = nat("dst=10.9.0.1-10.9.0.2:8080,hash");
    let vip = v4(172, 16, 0, 1);
    let mut hits = [0u32; 2];
    for i in 0..200u16 {
        let c = v4(10, 0, (i >> 8) as u8, i as u8);
        let mut f = tcp(c, vip, 10_000 + i, 80, 1, 0, SYN, 0);
        assert_eq!(run(&ct, &mut f, &a, 0), TRK | NEW | DNAT);
        assert!(checksums_ok(&f));
        let (_, d) = addrs4(&f);
        assert_eq!(ports(&f).1, 8080);
        hits[usize::from(d[3] - 1)] += 1;
        // The backend's SYN-ACK is un-NATed to the VIP.
        let mut r = tcp(Addr::V4(d), c, 8080, 10_000 + i, 99, 2, SYN | ACK, 0);
        assert_eq!(run(&ct, &mut r, &NAT_APPLY, 0), TRK | EST | RPL | DNAT);
        assert!(checksums_ok(&r));
        assert_eq!((addrs4(&r).0, ports(&r).0), ([172, 16, 0, 1], 80));
    }
    assert!(hits[0] > 40 && hits[1] > 40, "hash spreads: {hits:?}");
    // The same client tuple always maps to the same backend (hash, not random).
    let ct2 = Conntrack::new();
    let c = v4(10, 0, 0, 7);
    let mut f1 = tcp(c, vip, 10_007, 80, 1, 0, SYN, 0);
    run(&ct2, &mut f1, &a, 0);
    let mut f0 = tcp(c, vip, 10_007, 80, 1, 0, SYN, 0);
    run(&ct, &mut f0, &NAT_APPLY, 0);
    assert_eq!(addrs4(&f0).1[..3], [10, 9, 0]);
}

#[test]
fn related_icmp_is_un_natted_inner_and_outer() {
    let ct = Conntrack::new();
    let a = nat("src=192.168.0.100");
    let (c, s, r) = (v4(C, 0, 0, 1), v4(8, 8, 8, 8), v4(9, 9, 9, 9));
    let mut q = udp(c, s, 5000, 53, 20);
    run(&ct, &mut q, &a, 0);
    assert_eq!(addrs4(&q).0, [192, 168, 0, 100]);
    // A router on the outside reports the translated packet unreachable.
    let mut e = icmp_error(r, v4(192, 168, 0, 100), &q);
    assert_eq!(run(&ct, &mut e, &NAT_APPLY, 1), TRK | REL | RPL | SNAT);
    assert_eq!(addrs4(&e).1, [C, 0, 0, 1], "outer destination un-NATed");
    assert!(checksums_ok(&e), "outer ICMP checksum");
    // Inner IP header: source back to the client, header checksum valid.
    let inner = &e[42..62];
    assert_eq!(inner[12..16], [C, 0, 0, 1]);
    assert_eq!(wire::checksum::fold(wire::checksum::sum(inner, 0)), 0xffff);
    assert_eq!(u16::from_be_bytes([e[62], e[63]]), 5000);
}

#[test]
fn syn_flood_past_the_limit_is_refused_and_counted() {
    let ct = Conntrack::with_limits(1000, FragLimits::default());
    established(&ct, 0);
    let a = commit(0);
    let s = v4(C, 0, 0, 2);
    let mut refused = 0;
    for i in 0..5000u32 {
        let c = v4(11, (i >> 16) as u8, (i >> 8) as u8, i as u8);
        if run(&ct, &mut tcp(c, s, 1234, 80, i, 0, SYN, 0), &a, 1) == TRK | INV {
            refused += 1;
        }
    }
    assert_eq!(ct.len(), 1000);
    assert_eq!(refused, 4001);
    let st = ct.stats();
    assert_eq!(st.limit_global_hits, 4001);
    assert_eq!(st.per_tcp_state["SYN_SENT"], 999);
    // The established connection is unaffected.
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    assert_eq!(
        run(&ct, &mut tcp(c, s, 1000, 80, 101, 5001, ACK, 10), &a, 2),
        TRK | EST
    );
    // Once the SYNs time out (30 s) and are swept, new connections are accepted again.
    ct.sweep(31_000, conntrack::table::SHARDS);
    assert_eq!(ct.len(), 1);
    assert_eq!(
        run(
            &ct,
            &mut tcp(v4(12, 0, 0, 1), s, 1, 80, 0, 0, SYN, 0),
            &a,
            31_000
        ),
        TRK | NEW
    );
    // Zone limit.
    ct.set_zone_limit(5, 2);
    let a5 = commit(5);
    let st: Vec<u32> = (0..4u8)
        .map(|i| run(&ct, &mut udp(v4(1, 1, 1, i), s, 1, 2, 0), &a5, 0))
        .collect();
    assert_eq!(st, vec![TRK | NEW, TRK | NEW, TRK | INV, TRK | INV]);
    assert_eq!(ct.stats().limit_zone_hits, 2);
    assert_eq!(ct.zone_count(5), 2);
}

#[test]
fn truncated_headers_are_invalid_never_panic() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let frames = [
        tcp(c, s, 1, 2, 0, 0, SYN, 0),
        udp(c, s, 1, 2, 0),
        echo(c, s, 1, true),
        icmp_error(v4(1, 1, 1, 1), c, &udp(c, s, 1, 2, 0)),
        tcp(v6(1), v6(2), 1, 2, 0, 0, SYN, 0),
        echo(v6(1), v6(2), 1, true),
    ];
    let mut n_trunc = 0;
    for f in &frames {
        for cut in 0..f.len() {
            let mut g = f[..cut].to_vec();
            let r = done(ct.execute(&mut g, &a, 0));
            assert_eq!(r.state & INV, INV, "cut at {cut} of {f:?}");
            if cut >= 14 {
                n_trunc += 1;
            }
        }
    }
    let st = ct.stats();
    assert_eq!(st.invalid["truncated"], n_trunc);
    assert_eq!(ct.len(), 0);
}

#[test]
fn flush_dump_and_stats() {
    let ct = Conntrack::new();
    let s = v4(C, 0, 0, 2);
    for z in 0..3u16 {
        for i in 0..10u8 {
            run(&ct, &mut udp(v4(1, 0, 0, i), s, 1, 2, 0), &commit(z), 0);
        }
    }
    run(&ct, &mut echo(v4(1, 0, 0, 1), s, 3, true), &commit(0), 0);
    let st = ct.stats();
    assert_eq!(st.total, 31);
    assert_eq!(st.per_proto.get(&17), Some(&30));
    assert_eq!(st.per_proto.get(&1), Some(&1));
    assert_eq!(ct.dump(Some(1), 0).len(), 10);
    assert_eq!(ct.flush(Some(1)), 10);
    assert_eq!(ct.dump(Some(1), 0).len(), 0);
    assert_eq!(ct.zone_count(1), 0);
    // One tuple, given in the reply direction.
    let t = Tuple::v4([C, 0, 0, 2], [1, 0, 0, 3], 2, 1, 17);
    assert!(ct.flush_tuple(2, &t));
    assert!(!ct.flush_tuple(2, &t));
    assert_eq!(ct.zone_count(2), 9);
    assert_eq!(ct.flush(None), 20);
    assert_eq!(ct.len(), 0);
    assert!(ct.dump(None, 0).is_empty());
}

#[test]
fn nat_spec_parsing() {
    let s = NatSpec::parse("src=10.0.0.1-10.0.0.9:1024-2048,persistent,random").unwrap();
    assert_eq!(
        (s.addr_lo, s.addr_hi, s.port_lo, s.port_hi, s.persistent),
        (0x0a00_0001, 0x0a00_0009, 1024, 2048, true)
    );
    assert_eq!(s.sel, conntrack::PortSel::Random);
    let d = NatSpec::parse("dst=[fd00::1]-[fd00::2]:80").unwrap();
    assert!(d.v6 && d.port_lo == 80 && d.addr_hi - d.addr_lo == 1);
    assert!(NatSpec::parse("dst=fd00::1").unwrap().v6);
    for bad in [
        "src=",
        "x=1.2.3.4",
        "src=1.2.3.4:0",
        "src=1.2.3.9-1.2.3.1",
        "src=1.2.3.4,bogus",
        "src=1.2.3.4-fd00::1",
    ] {
        assert!(NatSpec::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn rst_refusing_a_syn_closes_and_a_blind_one_does_not() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    run(&ct, &mut tcp(c, s, 1000, 80, 100, 0, SYN, 0), &a, 0);
    // A RST acknowledging something else is invalid.
    assert_eq!(
        run(&ct, &mut tcp(s, c, 80, 1000, 0, 9999, RST | ACK, 0), &a, 0),
        TRK | INV
    );
    assert_eq!(ct.dump(None, 0)[0].state, "SYN_SENT");
    assert_eq!(
        run(&ct, &mut tcp(s, c, 80, 1000, 0, 101, RST | ACK, 0), &a, 0),
        TRK | EST | RPL
    );
    assert_eq!(ct.dump(None, 0)[0].state, "CLOSED");
}

#[test]
fn persistent_snat_keeps_a_clients_address() {
    let ct = Conntrack::new();
    let a = nat("src=192.168.1.1-192.168.1.200,persistent");
    let s = v4(8, 8, 8, 8);
    for client in 1..20u8 {
        let mut addrs = std::collections::HashSet::new();
        for sp in 0..10u16 {
            let mut f = udp(v4(10, 0, 0, client), s, 2000 + sp, 53, 0);
            assert_eq!(run(&ct, &mut f, &a, 0), TRK | NEW | SNAT);
            addrs.insert(addrs4(&f).0);
        }
        assert_eq!(addrs.len(), 1, "client {client} moved between addresses");
    }
}

/// An IPv4 header whose checksum does not verify is invalid (and counted): no connection is
/// made for a packet its receiver drops, as OVS's and Linux's trackers refuse it. The same
/// packet with its checksum fixed is tracked; a quoted header inside an ICMP error is not
/// checked (see `icmp_errors_related_or_invalid`).
#[test]
fn an_ipv4_header_with_a_bad_checksum_is_invalid_and_makes_no_connection() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let mut bad = udp(c, s, 5000, 53, 10);
    bad[24] ^= 0x01; // the header checksum (frame offset 14 + 10)
    assert_eq!(run(&ct, &mut bad, &a, 0), TRK | INV);
    assert_eq!(inv(&ct, "l3_checksum"), 1);
    assert_eq!(ct.len(), 0, "nothing committed");
    assert_eq!(run(&ct, &mut udp(c, s, 5000, 53, 10), &a, 0), TRK | NEW);
    assert_eq!(ct.len(), 1);
}
