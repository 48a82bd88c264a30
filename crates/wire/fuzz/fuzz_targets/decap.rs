//! Fuzz target: the tunnel decapsulation parser never panics, and whatever it accepts leaves
//! at least an Ethernet header after the tunnel header it reports.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::tunnel::{decap, TunnelKind};

fuzz_target!(|data: &[u8]| {
    let vni = data.get(6).copied().map_or(0, u32::from);
    for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
        if let Ok(h) = decap(kind, data, vni) {
            assert!(h >= 8 && h + 14 <= data.len());
        }
    }
});
