//! Property test: the tuple-space classifier (with staged lookup) against a linear-scan oracle,
//! including deletes, and the megaflow property (every key that agrees with the looked-up key on
//! the returned mask gets the same rule).
use ofproto::tables::FlowTables;
use ofproto::{FlowMod, FlowModCommand, Match};
use proptest::prelude::*;
use std::time::Instant;
use wire::{Field, FlowKey, KEY_WORDS};

/// L2, L3 and L4 fields, so every lookup stage is exercised.
const FIELDS: [Field; 8] = [
    Field::InPort,
    Field::EthSrc,
    Field::VlanTci,
    Field::IpTos,
    Field::Ipv4Dst,
    Field::TpDst,
    Field::TpSrc,
    Field::EthType,
];
const MASKS: [u64; 4] = [u64::MAX, 1, 2, 3];
const ETH_TYPES: [u64; 4] = [0x0800, 0x0806, 0x0800, 0x86dd];

/// A match from (field, value, mask choice). L3 fields pull in eth_type=IPv4 and L4 fields
/// ip_proto (TCP if `tcp`, else UDP), so prerequisites hold.
fn build_match(spec: &[(usize, u64, usize)], tcp: bool) -> Match {
    let mut m = Match::ANY;
    // eth_type first, so an L3/L4 field's eth_type=IPv4 wins over it.
    for &(f, v, _) in spec.iter().filter(|s| FIELDS[s.0] == Field::EthType) {
        m.set(FIELDS[f], ETH_TYPES[v as usize]);
    }
    for &(f, v, mi) in spec.iter().filter(|s| FIELDS[s.0] != Field::EthType) {
        let f = FIELDS[f];
        m.set_masked(f, v, MASKS[mi] & f.full());
        if matches!(
            f,
            Field::IpTos | Field::Ipv4Dst | Field::TpDst | Field::TpSrc
        ) {
            m.set(Field::EthType, 0x0800);
        }
        if matches!(f, Field::TpDst | Field::TpSrc) {
            m.set(Field::IpProto, if tcp { 6 } else { 17 });
        }
    }
    m
}

fn key(vals: &[u64], tcp: bool) -> FlowKey {
    let mut k = FlowKey::ZERO;
    for (f, v) in FIELDS.iter().zip(vals) {
        let v = if *f == Field::EthType {
            ETH_TYPES[*v as usize]
        } else {
            *v
        };
        k.set(*f, v);
    }
    k.set(Field::IpProto, if tcp { 6 } else { 17 });
    k
}

type RuleSpec = (Vec<(usize, u64, usize)>, u16, bool);

fn rule_strategy() -> impl Strategy<Value = RuleSpec> {
    (
        prop::collection::vec((0..FIELDS.len(), 0..4u64, 0..MASKS.len()), 0..4),
        0..16u16,
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn tuple_space_matches_linear_scan(
        rules in prop::collection::vec(rule_strategy(), 1..60),
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        keys in prop::collection::vec(
            (prop::collection::vec(0..4u64, FIELDS.len()), any::<bool>()), 1..40),
        noise in prop::collection::vec(any::<[u64; KEY_WORDS]>(), 4),
    ) {
        let now = Instant::now();
        let mut t = FlowTables::default();
        t.apply(FlowMod::delete(Match::ANY), now, "br").unwrap();
        let mut oracle: Vec<(Match, u16)> = Vec::new();
        for (spec, prio, tcp) in &rules {
            let m = build_match(spec, *tcp);
            let mut fm = FlowMod::add(m, vec![]);
            fm.priority = *prio;
            t.apply(fm, now, "br").unwrap();
            oracle.retain(|(om, op)| !(*om == m && op == prio));
            oracle.push((m, *prio));
        }
        for d in &deletes {
            if oracle.is_empty() {
                break;
            }
            let (m, p) = oracle.remove(d.index(oracle.len()));
            let mut fm = FlowMod::delete(m);
            fm.command = FlowModCommand::DeleteStrict;
            fm.priority = p;
            let gone = t.apply(fm, now, "br").unwrap();
            prop_assert_eq!(gone.len(), 1);
        }
        prop_assert_eq!(t.len(), oracle.len());
        for (vals, tcp) in &keys {
            let k = key(vals, *tcp);
            let mut wc = FlowKey::ZERO;
            let got = t.table(0).lookup(&k, &mut wc).map(|r| (r.match_, r.priority));
            let best = oracle.iter().filter(|(m, _)| m.matches(&k)).map(|(_, p)| *p).max();
            prop_assert_eq!(got.map(|g| g.1), best);
            if let Some((m, _)) = got {
                prop_assert!(m.matches(&k));
            }
            for n in &noise {
                let mut k2 = k;
                for (i, w) in k2.w.iter_mut().enumerate() {
                    *w = (k.w[i] & wc.w[i]) | (n[i] & !wc.w[i]);
                }
                let mut wc2 = FlowKey::ZERO;
                let got2 = t.table(0).lookup(&k2, &mut wc2).map(|r| (r.match_, r.priority));
                prop_assert_eq!(got2, got, "a key agreeing on the mask must get the same rule");
            }
        }
    }
}
