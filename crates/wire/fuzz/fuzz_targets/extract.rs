//! Fuzz target: flow-key extraction and the set-field rewrites must never panic on any input,
//! and a rewrite never changes a frame's length.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let k = wire::extract(data, 0x1234_5678);
    assert_eq!(k.get(wire::Field::InPort), 0x1234_5678);
    let _ = wire::l3_offset(data);
    let mut f = data.to_vec();
    let v = data.first().copied().unwrap_or(0);
    wire::rewrite::set_ipv4_src(&mut f, u32::from(v) << 24 | 1);
    wire::rewrite::set_ipv4_dst(&mut f, 0x0a00_0002);
    wire::rewrite::set_ip_dscp(&mut f, v);
    wire::rewrite::set_tp_src(&mut f, u16::from(v));
    wire::rewrite::set_tp_dst(&mut f, 4242);
    wire::rewrite::set_eth_src(&mut f, [v; 6]);
    assert_eq!(f.len(), data.len());
});
