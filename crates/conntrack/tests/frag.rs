//! Fragments: reassembly for tracking only (the originals are released with the verdict),
//! overlapping, tiny and flooding fragments, IPv6 fragments, NAT of a fragmented datagram.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtResult, FragLimits, Outcome};

fn released(o: Outcome) -> (CtResult, Vec<Vec<u8>>) {
    match o {
        Outcome::Released { result, held } => (result, held),
        o => panic!("expected Released, got {o:?}"),
    }
}

#[test]
fn fragments_reassembled_for_tracking_originals_released() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let whole = udp(c, s, 5000, 53, 100);
    let mut fr = fragment_v4(&whole, &[48, 32]);
    assert_eq!(fr.len(), 3);
    // Out of order: last, first, middle.
    assert!(matches!(ct.execute(&mut fr[2], &a, 0), Outcome::Held));
    assert!(matches!(ct.execute(&mut fr[0], &a, 0), Outcome::Held));
    let keep = fr[1].clone();
    let (r, held) = released(ct.execute(&mut fr[1], &a, 0));
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(held, vec![fr[2].clone(), fr[0].clone()]);
    assert_eq!(fr[1], keep, "originals are forwarded unchanged");
    assert_eq!(ct.len(), 1);
    // The reply (whole) is established against the reassembled connection.
    assert_eq!(
        run(&ct, &mut udp(s, c, 53, 5000, 1), &a, 0),
        TRK | EST | RPL
    );
    assert_eq!(ct.stats().frag_held, (0, 0));
}

#[test]
fn overlapping_and_tiny_fragments_are_invalid() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let whole = udp(c, s, 5000, 53, 100);
    let p = &whole[34..];
    let mut f0 = frag_v4_raw(&whole, 0, &p[..48], true);
    let mut f1 = frag_v4_raw(&whole, 40, &p[40..], false); // overlaps bytes 40..48
    assert!(matches!(ct.execute(&mut f0, &a, 0), Outcome::Held));
    let (r, held) = released(ct.execute(&mut f1, &a, 0));
    assert_eq!(r.state, TRK | INV);
    assert_eq!(
        held.len(),
        1,
        "the held fragment comes back, marked invalid"
    );
    assert_eq!(inv(&ct, "frag_overlap"), 1);
    assert_eq!(ct.len(), 0);
    // Tiny first fragment: 8 bytes of a TCP header.
    let t = tcp(c, s, 1, 2, 0, 0, SYN, 40);
    let mut tiny = frag_v4_raw(&t, 0, &t[34..42], true);
    assert_eq!(run(&ct, &mut tiny, &a, 0), TRK | INV);
    assert_eq!(inv(&ct, "frag_tiny"), 1);
    // Non-final fragment length not a multiple of 8.
    let mut odd = frag_v4_raw(&whole, 0, &p[..13], true);
    assert_eq!(run(&ct, &mut odd, &a, 0), TRK | INV);
    assert_eq!(inv(&ct, "frag_tiny"), 2);
    // Beyond 65,535 bytes.
    let mut big = frag_v4_raw(&whole, 65_528, &p[..16], false);
    assert_eq!(run(&ct, &mut big, &a, 0), TRK | INV);
    assert_eq!(inv(&ct, "frag_too_big"), 1);
    assert_eq!(ct.stats().frag_held, (0, 0));
}

#[test]
fn fragment_floods_are_bounded_and_time_out() {
    let lim = FragLimits {
        max_datagrams: 50,
        max_bytes: 1 << 20,
        timeout_ms: 1000,
    };
    let ct = Conntrack::with_limits(1000, lim);
    let a = commit(0);
    let s = v4(C, 0, 0, 2);
    let mut held = 0;
    for i in 0..10_000u32 {
        let whole = udp(v4(12, 0, (i >> 8) as u8, i as u8), s, 1, 2, 64);
        let mut f = frag_v4_raw(&whole, 0, &whole[34..34 + 48], true);
        match ct.execute(&mut f, &a, 0) {
            Outcome::Held => held += 1,
            Outcome::Done(r) => assert_eq!(r.state, TRK | INV),
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(held, 50);
    let st = ct.stats();
    assert_eq!(st.frag_held.0, 50);
    assert!(st.frag_held.1 <= 1 << 20);
    assert_eq!(st.invalid["frag_full"], 9950);
    // Byte bound: big fragments stop at max_bytes.
    let ct2 = Conntrack::with_limits(
        1000,
        FragLimits {
            max_datagrams: 1000,
            max_bytes: 64 * 1024,
            timeout_ms: 1000,
        },
    );
    let mut n = 0;
    for i in 0..1000u32 {
        let whole = udp(v4(12, 1, (i >> 8) as u8, i as u8), s, 1, 2, 1500);
        let mut f = frag_v4_raw(&whole, 0, &whole[34..34 + 1400], true);
        if matches!(ct2.execute(&mut f, &a, 0), Outcome::Held) {
            n += 1;
        }
    }
    assert!(ct2.stats().frag_held.1 <= 64 * 1024);
    assert_eq!(n, 64 * 1024 / 1448);
    // Timeout releases the held fragments, counted.
    assert_eq!(ct.expire_frags(999).len(), 0);
    assert_eq!(ct.expire_frags(1000).len(), 50);
    assert_eq!(ct.stats().invalid["frag_timeout"], 50);
    assert_eq!(ct.stats().frag_held, (0, 0));
}

#[test]
fn ipv6_fragments_reassembled_for_tracking() {
    let ct = Conntrack::new();
    let a = commit(0);
    let (c, s) = (v6(1), v6(2));
    let whole = udp(c, s, 5000, 53, 100);
    // Split the UDP datagram (108 bytes) at 56 with a fragment header.
    let l4 = &whole[54..];
    let frag = |off: usize, data: &[u8], more: bool| {
        let mut f = whole[..54].to_vec();
        f[20] = 44; // next header: fragment
        let plen = (8 + data.len()) as u16;
        f[18..20].copy_from_slice(&plen.to_be_bytes());
        let of = (off as u16) | u16::from(more);
        f.extend_from_slice(&[17, 0]);
        f.extend_from_slice(&of.to_be_bytes());
        f.extend_from_slice(&0xdead_beefu32.to_be_bytes());
        f.extend_from_slice(data);
        f
    };
    let mut f0 = frag(0, &l4[..56], true);
    let mut f1 = frag(56, &l4[56..], false);
    assert!(matches!(ct.execute(&mut f1, &a, 0), Outcome::Held));
    let (r, held) = released(ct.execute(&mut f0, &a, 0));
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(held.len(), 1);
    assert_eq!(
        run(&ct, &mut udp(s, c, 53, 5000, 1), &a, 0),
        TRK | EST | RPL
    );
    // Overlap in IPv6 too.
    let mut g0 = frag(0, &l4[..56], true);
    let mut g1 = frag(48, &l4[48..], false);
    g0[58..62].copy_from_slice(&7u32.to_be_bytes());
    g1[58..62].copy_from_slice(&7u32.to_be_bytes());
    assert!(matches!(ct.execute(&mut g0, &a, 0), Outcome::Held));
    let (r, _) = released(ct.execute(&mut g1, &a, 0));
    assert_eq!(r.state, TRK | INV);
}

#[test]
fn snat_of_a_fragmented_datagram_rewrites_every_fragment() {
    let ct = Conntrack::new();
    let a = nat("src=192.168.0.100:40000-40100");
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let whole = udp(c, s, 5000, 53, 100);
    let mut fr = fragment_v4(&whole, &[48, 32]);
    assert!(matches!(ct.execute(&mut fr[1], &a, 0), Outcome::Held));
    assert!(matches!(ct.execute(&mut fr[0], &a, 0), Outcome::Held));
    let (r, held) = released(ct.execute(&mut fr[2], &a, 0));
    assert_eq!(r.state, TRK | NEW | SNAT);
    // Reassemble what would be forwarded (held in arrival order, then the current frame).
    let out = [held[1].clone(), held[0].clone(), fr[2].clone()];
    let mut payload = Vec::new();
    for f in &out {
        assert_eq!(
            addrs4(f).0,
            [192, 168, 0, 100],
            "every fragment's source translated"
        );
        assert_eq!(
            wire::checksum::fold(wire::checksum::sum(&f[14..34], 0)),
            0xffff,
            "IP header checksum"
        );
        payload.extend_from_slice(&f[34..]);
    }
    let mut rebuilt = out[0][..34].to_vec();
    rebuilt[16..18].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    rebuilt[20..22].copy_from_slice(&[0, 0]);
    rebuilt[24..26].copy_from_slice(&[0, 0]);
    let hc = !wire::checksum::fold(wire::checksum::sum(&rebuilt[14..34], 0));
    rebuilt[24..26].copy_from_slice(&hc.to_be_bytes());
    rebuilt.extend_from_slice(&payload);
    assert!(
        checksums_ok(&rebuilt),
        "UDP checksum over the translated datagram"
    );
    let sp = ports(&rebuilt).0;
    assert!((40000..=40100).contains(&sp));
    // The (unfragmented) reply is un-NATed.
    let mut rp = udp(s, v4(192, 168, 0, 100), 53, sp, 4);
    assert_eq!(run(&ct, &mut rp, &NAT_APPLY, 0), TRK | EST | RPL | SNAT);
    assert_eq!((addrs4(&rp).1, ports(&rp).1), ([C, 0, 0, 1], 5000));
    assert!(checksums_ok(&rp));
}
