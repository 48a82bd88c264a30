//! Fuzz target: a conntrack snapshot (what an old vireod hands the new one on `vireoctl
//! upgrade`) read by `Conntrack::import`. Anything may be refused; nothing may panic, and an
//! accepted snapshot exports again to bytes that import the same way.
#![no_main]
use conntrack::Conntrack;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ct = Conntrack::new();
    if let Ok(r) = ct.import(data, 1_000) {
        assert_eq!(ct.len() as usize, r.added);
        let again = Conntrack::new();
        let r2 = again.import(&ct.export(1_000), 1_000).expect("own export refused");
        assert_eq!(r2.added, r.added);
    }
});
