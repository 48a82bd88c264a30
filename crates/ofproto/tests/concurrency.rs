//! Upcalls from several "PMD" threads while the control thread rewrites rules and ports: no
//! deadlock, every answer is one the pipeline could give at some instant, and a result computed
//! across a change is marked not installable.
mod common;

use common::*;
use dpif::{Action, Upcall};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

#[test]
fn upcalls_race_flow_mods_and_port_changes() {
    let pl = Arc::new(pipeline());
    flows(&pl, &["priority=10,actions=output:2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let (pl, stop, seen) = (Arc::clone(&pl), Arc::clone(&stop), Arc::clone(&seen));
            thread::spawn(move || {
                let pkt = packet::Packet::from_slice(&[0u8; 64]);
                let k = tcp(1, MAC_A, MAC_B, (t, 2), (3, 4));
                while !stop.load(Ordering::Relaxed) {
                    let r = pl.upcall(&k, &pkt);
                    let ok = [
                        vec![],
                        vec![Action::Output(dp(2))],
                        vec![Action::Output(dp(3))],
                    ];
                    assert!(ok.contains(&r.actions.to_vec()), "{:?}", r.actions);
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Keep changing until the readers have done a fair number of upcalls (2 shared cores).
    for i in 0.. {
        if i >= 300 && seen.load(Ordering::Relaxed) >= 3000 {
            break;
        }
        let port = if i % 2 == 0 { 3 } else { 2 };
        pl.mod_flows("br0", &format!("actions=output:{port}"), false)
            .unwrap();
        if i % 50 == 0 {
            pl.add_port("br0", port_spec(i)).unwrap();
            pl.del_port("br0", &format!("x{i}")).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(seen.load(Ordering::Relaxed) > 0);
    let f = &pl.dump_flows("br0", None).unwrap()[0];
    assert_eq!(
        f.packet_count,
        seen.load(Ordering::Relaxed) as u64,
        "every upcall counted once"
    );
    assert_eq!(f.byte_count, 64 * f.packet_count);
}

fn port_spec(i: u64) -> ofproto::PortSpec {
    ofproto::PortSpec {
        name: format!("x{i}"),
        dp_port: 1000 + i as u32,
        ofport: None,
        tag: None,
        trunks: vec![],
        mac_limit: None,
    }
}
