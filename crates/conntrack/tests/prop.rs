//! Property tests: parsing/execution never panics; NAT round trips keep checksums valid.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, Nat, NatSpec, Outcome};
use proptest::prelude::*;

proptest! {
    #[test]
    fn execute_never_panics_on_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..200), ipv6 in any::<bool>()) {
        let ct = Conntrack::new();
        let mut f = data.clone();
        if f.len() >= 14 {
            f[12..14].copy_from_slice(if ipv6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
            if f.len() > 14 {
                f[14] = if ipv6 { 0x60 } else { 0x45 };
            }
        }
        let a = CtAction { commit: true, nat: Nat::Set(NatSpec::parse("src=1.2.3.4").unwrap()), ..CtAction::default() };
        let n = f.len();
        let _ = ct.execute(&mut f, &a, 0);
        prop_assert_eq!(f.len(), n);
        let _ = ct.execute(&mut f, &CtAction::default(), 0);
    }

    #[test]
    fn mutated_valid_frames_never_panic(byte in 14usize..80, val in any::<u8>(), kind in 0u8..4) {
        let ct = Conntrack::new();
        let (c, s) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2));
        let mut f = match kind {
            0 => tcp(c, s, 1, 2, 3, 0, SYN, 10),
            1 => udp(c, s, 1, 2, 30),
            2 => icmp_error(v4(9, 9, 9, 9), c, &udp(c, s, 1, 2, 30)),
            _ => tcp(v6(1), v6(2), 1, 2, 3, 0, SYN, 10),
        };
        let a = CtAction { commit: true, ..CtAction::default() };
        let _ = ct.execute(&mut f.clone(), &a, 0);
        if byte < f.len() {
            f[byte] = val;
        }
        let _ = ct.execute(&mut f, &a, 0);
    }

    #[test]
    fn nat_round_trips_keep_checksums_valid(
        cs in any::<[u8; 4]>(), ss in any::<[u8; 4]>(), sp in 1u16.., dp in 1u16..,
        lo in any::<u32>(), span in 0u32..4, plo in 1024u16..60000, pspan in 0u16..100,
        snat in any::<bool>(), is_tcp in any::<bool>(), data in 0usize..64, random in any::<bool>(),
    ) {
        prop_assume!(cs != ss);
        let ct = Conntrack::new();
        let hi = lo.saturating_add(span);
        let ip = |x: u32| std::net::Ipv4Addr::from(x).to_string();
        let spec = format!("{}={}-{}:{}-{}{}", if snat { "src" } else { "dst" }, ip(lo), ip(hi), plo, plo + pspan, if random { ",random" } else { "" });
        let a = CtAction { commit: true, nat: Nat::Set(NatSpec::parse(&spec).unwrap()), ..CtAction::default() };
        let (c, s) = (Addr::V4(cs), Addr::V4(ss));
        let mut f = if is_tcp { tcp(c, s, sp, dp, 5, 0, SYN, data) } else { udp(c, s, sp, dp, data) };
        let Outcome::Done(r) = ct.execute(&mut f, &a, 0) else { panic!() };
        prop_assert_eq!(r.state, TRK | NEW | if snat { SNAT } else { DNAT });
        prop_assert!(checksums_ok(&f));
        let (ns, nd) = addrs4(&f);
        let (nsp, ndp) = ports(&f);
        let moved = if snat { (u32::from_be_bytes(ns), nsp) } else { (u32::from_be_bytes(nd), ndp) };
        prop_assert!((lo..=hi).contains(&moved.0));
        prop_assert!((plo..=plo + pspan).contains(&moved.1));
        let mut rp = if is_tcp { tcp(Addr::V4(nd), Addr::V4(ns), ndp, nsp, 77, 6 + data as u32, SYN | ACK, data) } else { udp(Addr::V4(nd), Addr::V4(ns), ndp, nsp, data) };
        let back = CtAction { nat: Nat::Existing, ..CtAction::default() };
        let Outcome::Done(r) = ct.execute(&mut rp, &back, 0) else { panic!() };
        prop_assert_eq!(r.state & (EST | RPL), EST | RPL);
        prop_assert!(checksums_ok(&rp));
        prop_assert_eq!(addrs4(&rp), (ss, cs));
        prop_assert_eq!(ports(&rp), (dp, sp));
    }
}

proptest! {
    /// Any in-order exchange (with retransmissions of the previous segment) after a handshake
    /// stays established and valid; a segment a quarter of the sequence space away is invalid
    /// and leaves the connection alone.
    #[test]
    fn tcp_in_window_exchanges_are_valid(
        isn_c in any::<u32>(), isn_s in any::<u32>(),
        segs in proptest::collection::vec((any::<bool>(), 0usize..1400, any::<bool>()), 1..60),
    ) {
        let ct = Conntrack::new();
        let a = CtAction { commit: true, ..CtAction::default() };
        let (c, s) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2));
        let run = |f: &mut Vec<u8>| match ct.execute(f, &a, 0) {
            Outcome::Done(r) => r.state,
            _ => panic!(),
        };
        prop_assert_eq!(run(&mut tcp(c, s, 1, 2, isn_c, 0, SYN, 0)), TRK | NEW);
        let (mut sc, mut ss) = (isn_c.wrapping_add(1), isn_s.wrapping_add(1));
        prop_assert_eq!(run(&mut tcp(s, c, 2, 1, isn_s, sc, SYN | ACK, 0)), TRK | EST | RPL);
        prop_assert_eq!(run(&mut tcp(c, s, 1, 2, sc, ss, ACK, 0)), TRK | EST);
        for (from_client, len, retransmit) in segs {
            let (seq, ack) = if from_client { (sc, ss) } else { (ss, sc) };
            let mut f = if from_client { tcp(c, s, 1, 2, seq, ack, ACK, len) } else { tcp(s, c, 2, 1, seq, ack, ACK, len) };
            let want = TRK | EST | if from_client { 0 } else { RPL };
            prop_assert_eq!(run(&mut f), want);
            if retransmit {
                prop_assert_eq!(run(&mut f), want);
            }
            if from_client { sc = sc.wrapping_add(len as u32) } else { ss = ss.wrapping_add(len as u32) }
        }
        let mut far = tcp(c, s, 1, 2, sc.wrapping_add(1 << 30), ss, ACK, 10);
        prop_assert_eq!(run(&mut far), TRK | INV);
        prop_assert_eq!(ct.dump(None, 0)[0].state, "ESTABLISHED");
    }
}
