//! Several threads committing, looking up, sweeping and dumping at once: no deadlock, counts
//! consistent.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, Outcome};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn parallel_commits_lookups_and_sweeps_stay_consistent() {
    let ct = Arc::new(Conntrack::new());
    const THREADS: u8 = 4;
    const OWN: u16 = 3000;
    const SHARED: u16 = 500;
    let (tx, rx) = std::sync::mpsc::channel();
    let mut hs = Vec::new();
    for t in 0..THREADS {
        let ct = ct.clone();
        let tx = tx.clone();
        hs.push(std::thread::spawn(move || {
            let a = CtAction {
                zone: u16::from(t % 2),
                commit: true,
                ..CtAction::default()
            };
            let s = v4(10, 0, 0, 2);
            let mut news = 0u32;
            for round in 0..3 {
                for i in 0..OWN {
                    let c = v4(20 + t, 0, (i >> 8) as u8, i as u8);
                    let mut f = udp(c, s, 1000, 53, 0);
                    let Outcome::Done(r) = ct.execute(&mut f, &a, 0) else {
                        panic!()
                    };
                    assert_eq!(r.state & TRK, TRK);
                    if round == 0 {
                        assert_eq!(r.state, TRK | NEW);
                    }
                    // Reply lookups.
                    let mut rp = udp(s, c, 53, 1000, 0);
                    let Outcome::Done(r) = ct.execute(&mut rp, &a, 0) else {
                        panic!()
                    };
                    assert_eq!(r.state, TRK | EST | RPL);
                }
                // Every thread races to commit the same tuples in zone 7.
                let a7 = CtAction {
                    zone: 7,
                    commit: true,
                    ..CtAction::default()
                };
                for i in 0..SHARED {
                    let mut f = udp(v4(30, 0, (i >> 8) as u8, i as u8), s, 1, 2, 0);
                    let Outcome::Done(r) = ct.execute(&mut f, &a7, 0) else {
                        panic!()
                    };
                    assert!(
                        r.state == TRK | NEW || r.state == TRK | EST,
                        "{:x}",
                        r.state
                    );
                    news += u32::from(r.state == TRK | NEW);
                }
            }
            tx.send(news).unwrap();
        }));
    }
    // A control thread sweeping (nothing is expired at t=1) and dumping meanwhile.
    {
        let ct = ct.clone();
        let tx = tx.clone();
        hs.push(std::thread::spawn(move || {
            let mut removed = 0;
            for _ in 0..50 {
                removed += ct.sweep(1, 64).removed;
                let _ = ct.dump(Some(7), 1).len();
                let _ = ct.stats();
            }
            assert_eq!(removed, 0);
            tx.send(0).unwrap();
        }));
    }
    drop(tx);
    let mut got = 0;
    for _ in 0..=THREADS {
        rx.recv_timeout(Duration::from_secs(120))
            .expect("a thread hung (deadlock?)");
        got += 1;
    }
    assert_eq!(got, THREADS + 1);
    for h in hs {
        h.join().unwrap();
    }
    let st = ct.stats();
    let want = u32::from(THREADS) * u32::from(OWN) + u32::from(SHARED);
    assert_eq!(st.total, want);
    assert_eq!(st.per_zone.values().sum::<u32>(), want);
    assert_eq!(st.per_zone[&7], u32::from(SHARED));
    assert_eq!(st.created, u64::from(want));
    assert_eq!(ct.dump(None, 1).len(), want as usize);
    // Everything expires and the sweep removes all of it, exactly once.
    let r = ct.sweep(10_000_000, conntrack::table::SHARDS);
    assert_eq!(r.removed, want as usize);
    assert_eq!(ct.len(), 0);
    assert_eq!(ct.stats().per_zone.len(), 0);
}
