//! The connection table handed to another tracker (what `vireoctl upgrade` does between two
//! vireods): connections keep their state, NAT, windows, mark, label, limits and time left;
//! a malformed snapshot changes nothing.

mod common;
use common::*;
use conntrack::snapshot::RECORD;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, Nat};

/// A tracker with: an established TCP connection in zone 0, an SNATed UDP flow in zone 2 with
/// a mark, an IPv6 UDP flow not yet replied to in zone 7, limits on zones 2 and 7.
fn populated() -> Conntrack {
    let ct = Conntrack::new();
    ct.set_limit(1000);
    ct.set_zone_limit(2, 50);
    ct.set_zone_limit(7, 3);
    let a = commit(0);
    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    run(&ct, &mut tcp(c, s, 1000, 80, 100, 0, SYN, 0), &a, 0);
    run(
        &ct,
        &mut tcp(s, c, 80, 1000, 5000, 101, SYN | ACK, 0),
        &a,
        0,
    );
    assert_eq!(
        run(&ct, &mut tcp(c, s, 1000, 80, 101, 5001, ACK, 0), &a, 0),
        TRK | EST
    );
    let mut n = nat("src=192.168.0.100:30000-30010");
    n.zone = 2;
    n.mark = Some((0x2a, u32::MAX));
    let mut f = udp(c, s, 5353, 53, 20);
    assert_eq!(run(&ct, &mut f, &n, 0), TRK | NEW | SNAT);
    let mut u6 = commit(7);
    u6.commit = true;
    assert_eq!(
        run(&ct, &mut udp(v6(1), v6(2), 9, 10, 5), &u6, 0),
        TRK | NEW
    );
    assert_eq!(ct.len(), 3);
    ct
}

#[test]
fn connections_survive_a_handover_with_their_state_nat_and_time_left() {
    let old = populated();
    // Exported 5 s after creation; imported by a tracker whose clock reads 1,000,000 ms.
    let snap = old.export(5_000);
    assert_eq!(snap.len(), 4 + 4 + 4 + 2 * 6 + 4 + 3 * RECORD);
    let new = Conntrack::new();
    let r = new.import(&snap, 1_000_000).unwrap();
    assert_eq!((r.added, r.skipped), (3, 0));
    assert_eq!(new.len(), 3);
    assert_eq!(new.stats().limit, 1000);
    assert_eq!((new.zone_limit(2), new.zone_limit(7)), (50, 3));
    assert_eq!(
        (new.zone_count(0), new.zone_count(2), new.zone_count(7)),
        (1, 1, 1)
    );
    // The same connections, each with the time it had left.
    let (a, b) = (old.dump(None, 5_000), new.dump(None, 1_000_000));
    assert_eq!(a, b);
    assert_eq!(b[0].state, "ESTABLISHED");
    assert_eq!(b[0].expires_in_ms, 24 * 3600 * 1000 - 5_000);

    let (c, s) = (v4(C, 0, 0, 1), v4(C, 0, 0, 2));
    let t = 1_000_001;
    // Established TCP goes on as established, and its windows came along: in-window data
    // passes, a segment far outside the window is invalid.
    assert_eq!(
        run(
            &new,
            &mut tcp(c, s, 1000, 80, 101, 5001, ACK, 100),
            &commit(0),
            t
        ),
        TRK | EST
    );
    assert_eq!(
        run(
            &new,
            &mut tcp(c, s, 1000, 80, 101 + 1_000_000, 5001, ACK, 10),
            &commit(0),
            t
        ),
        TRK | INV
    );
    // The SNATed flow's reply is un-NATed to the client, with the mark.
    let mut snap2 = old.dump(Some(2), 5_000);
    let sp = snap2.pop().unwrap().reply.dport;
    let mut rp = udp(s, v4(192, 168, 0, 100), 53, sp, 8);
    let mut un = CtAction {
        zone: 2,
        nat: Nat::Existing,
        ..CtAction::default()
    };
    un.commit = false;
    let res = done(new.execute(&mut rp, &un, t));
    assert_eq!(res.state, TRK | EST | RPL | SNAT);
    assert_eq!(res.mark, 0x2a);
    assert_eq!(addrs4(&rp).1, [C, 0, 0, 1]);
    assert_eq!(ports(&rp).1, 5353);
    assert!(checksums_ok(&rp));
    // Zone 7's limit holds with the imported connection counted: 2 more fit, not 3.
    let u6 = commit(7);
    for (i, want) in [(20u16, TRK | NEW), (21, TRK | NEW), (22, TRK | INV)] {
        assert_eq!(run(&new, &mut udp(v6(1), v6(2), i, 10, 5), &u6, t), want);
    }
}

#[test]
fn expired_connections_stay_behind_and_duplicates_are_skipped() {
    let old = populated();
    // At 61 s the unreplied UDP flows (60 s) are gone; the established TCP connection is left.
    let snap = old.export(61_000);
    let new = Conntrack::new();
    assert_eq!(new.import(&snap, 50).unwrap().added, 1);
    // Importing again: the same tuple is already tracked.
    let r = new.import(&snap, 50).unwrap();
    assert_eq!((r.added, r.skipped), (0, 1));
    assert_eq!(new.len(), 1);
    // A lower limit in the snapshot than the connections it carries: the rest is skipped.
    let mut full = old.export(0);
    full[4..8].copy_from_slice(&2u32.to_le_bytes());
    let fresh = Conntrack::new();
    let r = fresh.import(&full, 0).unwrap();
    assert_eq!((r.added, r.skipped), (2, 1));
    // A record with no time left (found by the import fuzz target: it was entered, counted,
    // and then never exported again) is skipped.
    let mut zero = old.export(0);
    let rec0 = zero.len() - 3 * RECORD;
    zero[rec0 + 76..rec0 + 84].copy_from_slice(&0u64.to_le_bytes());
    let z = Conntrack::new();
    let r = z.import(&zero, 0).unwrap();
    assert_eq!((r.added, r.skipped, z.len()), (2, 1, 2));
    let again = Conntrack::new();
    assert_eq!(again.import(&z.export(0), 0).unwrap().added, 2);
}

#[test]
fn a_malformed_snapshot_is_refused_whole_and_changes_nothing() {
    let snap = populated().export(0);
    let rec0 = snap.len() - 3 * RECORD;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("magic", [b"XCT1", &snap[4..]].concat()),
        ("truncated", snap[..snap.len() - 1].to_vec()),
        ("extra byte", [&snap[..], &[0]].concat()),
        ("empty", Vec::new()),
    ];
    let mut flags = snap.clone();
    flags[rec0 + 2] |= 0x80;
    cases.push(("flags", flags));
    // TCP state on the UDP record, and an unknown TCP state on the TCP record.
    let recs: Vec<usize> = (0..3).map(|i| rec0 + i * RECORD).collect();
    let udp_rec = *recs.iter().find(|&&o| snap[o + 3] == 17).unwrap();
    let tcp_rec = *recs.iter().find(|&&o| snap[o + 3] == 6).unwrap();
    let mut tcp_on_udp = snap.clone();
    tcp_on_udp[udp_rec + 2] |= 16;
    cases.push(("tcp on udp", tcp_on_udp));
    let mut bad_state = snap.clone();
    bad_state[tcp_rec + RECORD - 31] = 9;
    cases.push(("tcp state", bad_state));
    let mut many_zones = snap.clone();
    many_zones[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(("zone count", many_zones));
    for (what, bytes) in cases {
        let ct = Conntrack::new();
        let e = ct.import(&bytes, 0);
        assert!(e.is_err(), "{what}: accepted");
        assert_eq!(ct.len(), 0, "{what}");
        assert_eq!(ct.stats().limit, conntrack::DEFAULT_LIMIT, "{what}");
    }
}

/// The fuzz target's seed is a real snapshot (`CONNTRACK_WRITE_SEEDS=1` rewrites it).
#[test]
fn the_import_fuzz_seed_is_a_valid_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/import/populated");
    if std::env::var_os("CONNTRACK_WRITE_SEEDS").is_some() {
        std::fs::write(path, populated().export(0)).unwrap();
    }
    let seed = std::fs::read(path).expect("committed seed");
    let r = Conntrack::new().import(&seed, 0).unwrap();
    assert_eq!((r.added, r.skipped), (3, 0));
}
