//! 100,000 rules: insert time (batched, one by one, and from `ovs-ofctl` text) and lookup time.
//! Figures are printed (`cargo test --release -p ofproto --test scale -- --nocapture`);
//! the assertions are ratios or loose bounds so a debug build on a busy machine passes.
mod common;

use common::*;
use ofproto::{FlowMod, Instruction, Match, OfAction};
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

const N: u32 = 100_000;

/// Rule `i` and a key that hits it. Four shapes (four masks), like a real rule set: exact
/// TCP dst+port, /24 source prefixes, in_port+MAC, UDP ports.
fn rule(i: u32) -> (FlowMod, FlowKey) {
    let mut m = Match::ANY;
    let mut k = tcp(
        1 + i % 4,
        MAC_A,
        MAC_B,
        (0xc0a8_0000 | (i & 0xffff), 0x0a00_0000 | i),
        (7, 9),
    );
    let prio = match i % 10 {
        0..=5 => {
            m.set(Field::EthType, 0x0800).set(Field::IpProto, 6);
            m.set(Field::Ipv4Dst, u64::from(0x0a00_0000 | i))
                .set(Field::TpDst, 80);
            k.set(Field::TpDst, 80);
            300
        }
        6 | 7 => {
            m.set(Field::EthType, 0x0800);
            m.set_masked(Field::Ipv4Src, u64::from(0xac00_0000 | i << 8), 0xffff_ff00);
            k.set(Field::Ipv4Src, u64::from(0xac00_0000 | i << 8 | 5));
            k.set(Field::Ipv4Dst, 1);
            200
        }
        8 => {
            m.set_in_port(1 + i % 4)
                .set(Field::EthDst, u64::from(i) << 8);
            k.set(Field::EthDst, u64::from(i) << 8);
            k.set(Field::Ipv4Dst, 1);
            100
        }
        _ => {
            m.set(Field::EthType, 0x0800)
                .set(Field::IpProto, 17)
                .set(Field::TpDst, u64::from(i));
            k.set(Field::IpProto, 17);
            k.set(Field::TpDst, u64::from(i & 0xffff));
            k.set(Field::Ipv4Dst, 1);
            50 + (i >> 16) as u16
        }
    };
    let mut fm = FlowMod::add(
        m,
        vec![Instruction::ApplyActions(vec![OfAction::output(
            1 + (i + 1) % 4,
        )])],
    );
    fm.priority = prio;
    fm.cookie = u64::from(i);
    (fm, k)
}

#[test]
fn hundred_thousand_rules() {
    let pl = pipeline();
    let (fms, keys): (Vec<_>, Vec<_>) = (0..N).map(rule).unzip();

    let t = Instant::now();
    pl.flow_mods("br0", fms.clone()).unwrap();
    let batched = t.elapsed();
    assert_eq!(pl.dump_flows("br0", None).unwrap().len(), N as usize + 1);

    pl.del_flows("br0", None, false).unwrap();
    let t = Instant::now();
    for fm in fms.iter().cloned() {
        pl.flow_mod("br0", fm).unwrap();
    }
    let single = t.elapsed();

    let lines: String = (0..N)
        .map(|i| {
            format!(
                "priority=300,tcp,nw_dst={}.{}.{}.{},tp_dst=80,cookie={i},actions=output:2\n",
                11,
                i >> 16,
                (i >> 8) & 255,
                i & 255
            )
        })
        .collect();
    let t = Instant::now();
    assert_eq!(pl.add_flows("br0", &lines).unwrap(), N as usize);
    let text = t.elapsed();

    let t = Instant::now();
    let mut hits = 0usize;
    let rounds = 3;
    for _ in 0..rounds {
        for k in &keys {
            let tr = xlate(&pl, k);
            hits += usize::from(!tr.actions.is_empty());
        }
    }
    let per_lookup = t.elapsed() / (rounds * N);
    println!(
        "100k rules: insert batched {batched:?}, one by one {single:?}, from text {text:?}; \
         translate {per_lookup:?} per packet ({hits} hits)"
    );
    assert_eq!(hits, (rounds * N) as usize, "every key hits its rule");
    let tr = xlate(&pl, &keys[0]);
    assert_eq!(tr.rules, vec![(0, 300, 0)]);
    // Linear, not quadratic: a tenth of the rules into a fresh pipeline takes about a tenth
    // of the time (a ratio, so that a debug build on a loaded machine holds it; quadratic
    // insertion would be near 100x).
    let small = pipeline();
    let tenth: Vec<FlowMod> = fms[..N as usize / 10].to_vec();
    let t = Instant::now();
    small.flow_mods("br0", tenth.clone()).unwrap();
    let batched_10 = t.elapsed();
    small.del_flows("br0", None, false).unwrap();
    let t = Instant::now();
    for fm in tenth {
        small.flow_mod("br0", fm).unwrap();
    }
    let single_10 = t.elapsed();
    println!("10k rules: insert batched {batched_10:?}, one by one {single_10:?}");
    assert!(
        batched < batched_10 * 40 && single < single_10 * 40,
        "insertion grows faster than linearly: 100k batched {batched:?} / one by one \
         {single:?} against 10k {batched_10:?} / {single_10:?}"
    );
    assert!(per_lookup < Duration::from_millis(1), "not a linear scan");

    let t = Instant::now();
    let gone = pl.del_flows("br0", Some("udp"), false).unwrap();
    println!(
        "non-strict delete of {} udp rules: {:?}",
        gone.len(),
        t.elapsed()
    );
    assert_eq!(gone.len(), (N / 10) as usize);
}
