//! Meters in the pipeline: a rule's meter instruction becomes the datapath's meter action
//! (first, before the rule's actions), a rule naming a missing meter is refused, deleting a
//! meter deletes its rules, modifying one gives a new bucket, and METER statistics count
//! flows and packets.
mod common;

use common::*;
use dpif::Action;
use ofproto::meter::{METER_ALL, METER_CONTROLLER};
use ofproto::{Error, MeterBand, MeterCommand, MeterMod, OfError};

fn mm(command: MeterCommand, id: u32, rate: u32) -> MeterMod {
    MeterMod {
        command,
        meter_id: id,
        flags: ofproto::meter::meter_flags::PKTPS,
        bands: vec![MeterBand {
            kind: dpif::BandKind::Drop,
            rate,
            burst: 0,
        }],
    }
}

fn key() -> wire::FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0063, 0x0a00_0001), (1234, 80))
}

#[test]
fn meter_instruction_translates_to_a_meter_action_first() {
    let pl = pipeline();
    pl.meter_mod("br0", mm(MeterCommand::Add, 1, 1000)).unwrap();
    flows(&pl, &["actions=output:2,meter:1"]);
    let t = xlate(&pl, &key());
    let [Action::Meter(m), Action::Output(o)] = &t.actions[..] else {
        panic!("{:?}", t.actions)
    };
    assert_eq!((m.0.id(), *o), (1, dp(2)));
    let dump = pl.dump_flows_text("br0", None).unwrap().join("\n");
    assert!(dump.contains("actions=meter:1,output:2"), "{dump}");
    let s = pl.meter_stats("br0", METER_ALL).unwrap();
    assert_eq!((s.len(), s[0].flow_count), (1, 1));
}

#[test]
fn a_rule_naming_a_missing_meter_is_refused() {
    let pl = pipeline();
    flows(&pl, &[]);
    let e = pl.add_flow("br0", "actions=meter:9,output:2").unwrap_err();
    assert_eq!(e, Error::Of(OfError::InvalidMeter(9)));
    assert_eq!(OfError::InvalidMeter(9).type_code(), (12, 2));
    assert!(pl.dump_flows("br0", None).unwrap().is_empty());
}

#[test]
fn deleting_a_meter_deletes_its_rules_and_modify_makes_a_new_bucket() {
    let pl = pipeline();
    pl.meter_mod("br0", mm(MeterCommand::Add, 1, 1000)).unwrap();
    pl.meter_mod("br0", mm(MeterCommand::Add, 2, 1000)).unwrap();
    flows(
        &pl,
        &[
            "priority=10,tcp,actions=meter:1,output:2",
            "priority=5,actions=meter:2,output:3",
        ],
    );
    let before = xlate(&pl, &key()).actions;
    pl.meter_mod("br0", mm(MeterCommand::Modify, 1, 2000))
        .unwrap();
    let after = xlate(&pl, &key()).actions;
    assert_ne!(before, after, "a modified meter is a new datapath bucket");
    let gen = pl.generation();
    pl.meter_mod("br0", mm(MeterCommand::Delete, 1, 0)).unwrap();
    assert!(pl.generation() > gen, "delete asks for revalidation");
    let left = pl.dump_flows_text("br0", None).unwrap().join("\n");
    assert!(
        !left.contains("meter:1") && left.contains("meter:2"),
        "{left}"
    );
    let [Action::Meter(m), Action::Output(_)] = &xlate(&pl, &key()).actions[..] else {
        panic!()
    };
    assert_eq!(m.0.id(), 2);
    pl.meter_mod("br0", mm(MeterCommand::Delete, METER_ALL, 0))
        .unwrap();
    assert!(pl.dump_flows("br0", None).unwrap().is_empty());
    assert!(pl.meter_stats("br0", METER_ALL).unwrap().is_empty());
}

#[test]
fn failed_meter_mods_change_nothing() {
    let pl = pipeline();
    pl.meter_mod("br0", mm(MeterCommand::Add, 1, 1000)).unwrap();
    let e = |r: Result<_, Error>| match r {
        Err(Error::Of(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        e(pl.meter_mod("br0", mm(MeterCommand::Add, 1, 5))),
        OfError::MeterExists(1)
    );
    assert_eq!(
        e(pl.meter_mod("br0", mm(MeterCommand::Modify, 1, 0))),
        OfError::BadRate
    );
    assert_eq!(
        e(pl.meter_mod("br0", mm(MeterCommand::Modify, 4, 5))),
        OfError::UnknownMeter(4)
    );
    let cfg = pl.meter_configs("br0", METER_ALL).unwrap();
    assert_eq!(cfg.len(), 1);
    assert_eq!(cfg[0].2[0].rate, 1000);
}

#[test]
fn controller_meter_limits_packet_ins() {
    let pl = pipeline();
    flows(&pl, &["actions=controller"]);
    let t = xlate(&pl, &key());
    let [Action::Userspace(c)] = t.actions[..] else {
        panic!("{:?}", t.actions)
    };
    let frame = vec![0u8; 64];
    let sent = |pl: &ofproto::Pipeline| {
        (0..100)
            .filter(|_| pl.packet_in_for(c, &key(), &frame).is_some())
            .count()
    };
    assert_eq!(sent(&pl), 100, "no controller meter: every packet-in");
    let mut m = mm(MeterCommand::Add, METER_CONTROLLER, 1);
    m.flags |= ofproto::meter::meter_flags::BURST;
    m.bands[0].burst = 10;
    pl.meter_mod("br0", m).unwrap();
    // A burst of 10 (plus one, GCRA) at once, then 1 per second.
    assert_eq!(sent(&pl), 11);
    let s = pl.meter_stats("br0", METER_CONTROLLER).unwrap();
    assert_eq!((s[0].packets, s[0].bands[0].0), (100, 89));
}

#[test]
fn slowpath_meter_limits_upcalls_not_installed_flows() {
    use dpif::Upcall;
    use ofproto::meter::METER_SLOWPATH;
    let pl = pipeline();
    flows(&pl, &["actions=output:2"]);
    let pkt = packet::Packet::from_slice(&[0u8; 64]);
    let translated = |pl: &ofproto::Pipeline| {
        (0..100)
            .filter(|_| {
                let r = pl.upcall(&key(), &pkt);
                assert_eq!(
                    r.install,
                    !r.actions.is_empty(),
                    "a metered-out upcall is not cached"
                );
                !r.actions.is_empty()
            })
            .count()
    };
    assert_eq!(
        translated(&pl),
        100,
        "no slow-path meter: every upcall translates"
    );
    let mut m = mm(MeterCommand::Add, METER_SLOWPATH, 1);
    m.flags |= ofproto::meter::meter_flags::BURST;
    m.bands[0].burst = 5;
    pl.meter_mod("br0", m).unwrap();
    // A burst of 5 (plus one, GCRA) at once; the rest dropped without a translation.
    assert_eq!(translated(&pl), 6);
    let s = pl.meter_stats("br0", METER_SLOWPATH).unwrap();
    assert_eq!((s[0].packets, s[0].bands[0].0), (100, 94));
    // Translating directly (packet-out, revalidation) is not the slow path: not metered.
    assert_eq!(xlate(&pl, &key()).actions, vec![Action::Output(dp(2))]);
    assert_eq!(
        pl.meter_stats("br0", METER_SLOWPATH).unwrap()[0].packets,
        100
    );
}
