//! Fuzz target: the conntrack parser and execute path (tracking, NAT rewrites, related ICMP,
//! fragment reassembly) never panic on any input, never change a frame's length, and keep the
//! table's accounting consistent. The first byte picks the action; the rest is a sequence of
//! frames (2-byte length prefix each) fed to one tracker, so multi-packet state is reached.
#![no_main]
use conntrack::{Conntrack, CtAction, FragLimits, Nat, NatSpec, Outcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let ct = Conntrack::with_limits(
        64,
        FragLimits {
            max_datagrams: 8,
            max_bytes: 16 * 1024,
            timeout_ms: 50,
        },
    );
    ct.set_zone_window_check(1, false);
    let nat = match sel % 4 {
        0 => Nat::Off,
        1 => Nat::Existing,
        2 => Nat::Set(NatSpec::parse("src=192.168.0.1-192.168.0.3:2000-2010").unwrap()),
        _ => Nat::Set(NatSpec::parse("dst=[fd00::1]-[fd00::2]:80,random").unwrap()),
    };
    let mut now = 0u64;
    let mut i = 0u32;
    while rest.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])) % 1600;
        rest = &rest[2..];
        let n = n.min(rest.len());
        let mut f = rest[..n].to_vec();
        rest = &rest[n..];
        let a = CtAction {
            zone: u16::from(sel >> 7),
            commit: sel & 0x10 != 0 || i % 2 == 0,
            force: sel & 0x20 != 0,
            nat: if i % 3 == 2 { Nat::Existing } else { nat },
            mark: Some((i, 0xff)),
            label: None,
        };
        let len = f.len();
        match ct.execute(&mut f, &a, now) {
            Outcome::Done(_) | Outcome::Held => {}
            Outcome::Released { held, .. } => assert!(held.len() <= 64),
        }
        assert_eq!(f.len(), len);
        now += u64::from(sel & 0x0f) * 10;
        i += 1;
        if i % 8 == 0 {
            ct.sweep(now, 256);
            let _ = ct.expire_frags(now);
        }
    }
    assert!(ct.len() <= 64);
    assert_eq!(ct.dump(None, now).len() as u32 <= ct.len(), true);
    ct.flush(None);
    assert_eq!(ct.len(), 0);
});
