//! Frames of many distinct UDP connections, shared by `tests/bench.rs` and
//! `benches/lookup.rs`.

/// UDP frame of connection `i` (10.x.x.x:port to 10.255.0.1:53), the reply if `rev`.
pub fn frame_of(tpl: &[u8], i: u32, rev: bool) -> Vec<u8> {
    let mut f = tpl.to_vec();
    let c = [10, (i >> 16) as u8 & 0x7f, (i >> 8) as u8, i as u8];
    let port = (1024 + (i >> 23)) as u16;
    if rev {
        f[30..34].copy_from_slice(&c);
        f[36..38].copy_from_slice(&port.to_be_bytes());
    } else {
        f[26..30].copy_from_slice(&c);
        f[34..36].copy_from_slice(&port.to_be_bytes());
    }
    // The tracker checks the IPv4 header checksum: keep it valid.
    f[24..26].copy_from_slice(&[0, 0]);
    let sum = wire::checksum::compute(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f
}
