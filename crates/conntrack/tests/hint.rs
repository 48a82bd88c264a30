//! `Conntrack::execute_hinted`: the hint a `ct` pass leaves for the same packet's next pass
//! (after recirculation) only skips work. Its verdicts, rewrites and table contents equal those
//! of plain `execute` calls, including when the connection is removed or expires between the
//! passes, the second pass runs in another zone, NAT rewrote the frame, or the hint was left
//! by another packet.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, Hint, Nat, NatSpec};
use proptest::prelude::*;

fn hinted(ct: &Conntrack, f: &mut [u8], a: &CtAction, now: u64, h: &mut Hint) -> u32 {
    done(ct.execute_hinted(f, a, now, h)).state
}

#[test]
fn second_pass_reuses_the_first_pass_connection() {
    let ct = Conntrack::new();
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let mut f = udp(c, s, 1000, 53, 10);
    let mut h = Hint::default();
    // New connection, not committed: no connection to carry.
    assert_eq!(
        hinted(&ct, &mut f, &CtAction::default(), 1, &mut h),
        TRK | NEW
    );
    assert!(!h.is_set());
    assert_eq!(hinted(&ct, &mut f, &commit(0), 1, &mut h), TRK | NEW);
    assert!(h.is_set(), "{h:?}");
    assert_eq!(ct.len(), 1);
    // A later packet: both passes see the committed connection.
    let mut h = Hint::default();
    assert_eq!(
        hinted(&ct, &mut f, &CtAction::default(), 2, &mut h),
        TRK | NEW
    );
    assert!(h.is_set());
    let mut r = udp(s, c, 53, 1000, 10);
    let mut hr = Hint::default();
    assert_eq!(
        hinted(&ct, &mut r, &CtAction::default(), 3, &mut hr),
        TRK | EST | RPL
    );
    assert_eq!(hinted(&ct, &mut r, &commit(0), 3, &mut hr), TRK | EST | RPL);
    assert_eq!(ct.stats().created, 1);
}

#[test]
fn a_connection_removed_between_passes_is_not_used() {
    let ct = Conntrack::new();
    let mut f = udp(v4(C, 0, 0, 1), v4(C, 0, 0, 2), 1000, 53, 10);
    run(&ct, &mut f, &commit(0), 1);
    let mut h = Hint::default();
    assert_eq!(
        hinted(&ct, &mut f, &CtAction::default(), 2, &mut h),
        TRK | NEW
    );
    assert!(h.is_set());
    assert_eq!(ct.flush(None), 1);
    // The hint's connection is dead: looked up again, not found, committed anew.
    assert_eq!(hinted(&ct, &mut f, &commit(0), 2, &mut h), TRK | NEW);
    assert_eq!((ct.len(), ct.stats().created), (1, 2));
    // Expired between passes (UDP first-packet timeout is 60 s): a new one, the old counted
    // as expired.
    let mut h = Hint::default();
    hinted(&ct, &mut f, &CtAction::default(), 3, &mut h);
    assert!(h.is_set());
    assert_eq!(
        hinted(&ct, &mut f, &commit(0), 3 + 61_000, &mut h),
        TRK | NEW
    );
    let st = ct.stats();
    assert_eq!((st.total, st.created, st.expired), (1, 3, 1));
}

#[test]
fn another_zone_looks_up_its_own_connection() {
    let ct = Conntrack::new();
    let mut f = udp(v4(C, 0, 0, 1), v4(C, 0, 0, 2), 1000, 53, 10);
    run(&ct, &mut f, &commit(1), 1);
    let mut h = Hint::default();
    assert_eq!(hinted(&ct, &mut f, &commit(1), 2, &mut h), TRK | NEW);
    assert!(h.is_set());
    // Zone 2 has no such connection: the hint's zone-1 connection must not answer.
    assert_eq!(
        hinted(
            &ct,
            &mut f,
            &CtAction {
                zone: 2,
                ..CtAction::default()
            },
            2,
            &mut h
        ),
        TRK | NEW
    );
    assert!(!h.is_set());
    assert_eq!(ct.zone_count(2), 0);
}

#[test]
fn a_hint_for_another_packet_is_not_used() {
    let ct = Conntrack::new();
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    // SNAT rewrote the frame: the rewritten tuple is neither key of the connection, so the
    // second pass looks it up (and, uncommitted, finds nothing: new).
    let mut f = udp(c, s, 1000, 53, 10);
    let mut h = Hint::default();
    let st = hinted(&ct, &mut f, &nat("src=192.0.2.1:4000"), 1, &mut h);
    assert_eq!(st, TRK | NEW | SNAT);
    assert_eq!(addrs4(&f).0, [192, 0, 2, 1]);
    assert!(h.is_set());
    assert_eq!(
        hinted(&ct, &mut f, &CtAction::default(), 1, &mut h),
        TRK | NEW
    );
    // A hint left by one packet handed to another one (a caller's mistake): the other
    // packet's own connection answers, not the hint's.
    let mut g = udp(c, s, 2000, 53, 10);
    run(&ct, &mut g, &commit(0), 1);
    let mut r = udp(s, c, 53, 2000, 10);
    let mut h = Hint::default();
    assert_eq!(
        hinted(&ct, &mut r, &CtAction::default(), 2, &mut h),
        TRK | EST | RPL
    );
    assert!(h.is_set());
    let mut other = udp(c, s, 3000, 53, 10);
    assert_eq!(
        hinted(&ct, &mut other, &CtAction::default(), 2, &mut h),
        TRK | NEW
    );
    assert!(!h.is_set());
    // The hint's connection seen from the other direction: the original side's packet is
    // original, not reply.
    let mut h = Hint::default();
    hinted(&ct, &mut r, &CtAction::default(), 2, &mut h);
    assert_eq!(
        hinted(&ct, &mut g, &CtAction::default(), 2, &mut h),
        TRK | EST
    );
}

/// One packet of the property test: flow, direction, TCP flags, and the two passes' actions.
#[derive(Clone, Debug)]
struct Step {
    flow: u8,
    reply: bool,
    flags: u8,
    first: u8,
    second: u8,
    flush: u8,
    dt: u64,
}

fn action(k: u8) -> CtAction {
    match k % 6 {
        0 => CtAction::default(),
        1 => commit(0),
        2 => CtAction {
            zone: 1,
            ..commit(0)
        },
        3 => CtAction {
            force: true,
            ..commit(0)
        },
        4 => CtAction {
            mark: Some((7, 0xff)),
            ..commit(0)
        },
        _ => CtAction {
            commit: true,
            nat: Nat::Set(NatSpec::parse("src=192.0.2.9:4000").unwrap()),
            ..CtAction::default()
        },
    }
}

fn frame(s: &Step) -> Vec<u8> {
    let (c, v) = (v4(C, 0, 0, 1 + s.flow % 3), v4(C, 9, 0, 1));
    let (a, b, sp, dp) = if s.reply {
        (v, c, 80, 1000)
    } else {
        (c, v, 1000, 80)
    };
    if s.flow >= 3 {
        udp(a, b, sp, dp, 8)
    } else {
        tcp(a, b, sp, dp, 100, 200, s.flags, 0)
    }
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..6,
        any::<bool>(),
        prop_oneof![
            Just(SYN),
            Just(SYN | ACK),
            Just(ACK),
            Just(FIN | ACK),
            Just(RST)
        ],
        0u8..6,
        0u8..6,
        0u8..12,
        0u64..40_000,
    )
        .prop_map(|(flow, reply, flags, first, second, flush, dt)| Step {
            flow,
            reply,
            flags,
            first,
            second,
            flush,
            dt,
        })
}

proptest! {
    /// Two trackers see the same packets, each through two `ct` passes: one with plain
    /// `execute`, one with `execute_hinted` sharing one hint between all passes (so a
    /// packet's first pass gets the previous packet's hint). Sometimes a flush runs between
    /// the passes, and time moves on (connections expire). Verdicts, frames, tables and
    /// counters stay equal.
    #[test]
    fn hinted_passes_equal_plain_ones(steps in proptest::collection::vec(step(), 1..60)) {
        let (plain, hint) = (Conntrack::new(), Conntrack::new());
        let mut now = 1_000;
        // Never reset: each packet's first pass also gets the previous packet's hint.
        let mut h = Hint::default();
        for s in &steps {
            now += s.dt;
            let (mut f1, mut f2) = (frame(s), frame(s));
            let r1 = done(plain.execute(&mut f1, &action(s.first), now));
            let r2 = done(hint.execute_hinted(&mut f2, &action(s.first), now, &mut h));
            prop_assert_eq!(r1, r2);
            prop_assert_eq!(&f1, &f2);
            if s.flush == 0 {
                prop_assert_eq!(plain.flush(None), hint.flush(None));
            }
            let r1 = done(plain.execute(&mut f1, &action(s.second), now));
            let r2 = done(hint.execute_hinted(&mut f2, &action(s.second), now, &mut h));
            prop_assert_eq!(r1, r2);
            prop_assert_eq!(&f1, &f2);
        }
        prop_assert_eq!(plain.dump(None, now), hint.dump(None, now));
        let (a, b) = (plain.stats(), hint.stats());
        prop_assert_eq!((a.total, a.created, a.expired, a.invalid), (b.total, b.created, b.expired, b.invalid));
    }
}
