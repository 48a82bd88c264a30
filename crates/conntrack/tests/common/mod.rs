//! Frame builders and checksum checks shared by the conntrack tests.
#![allow(dead_code, clippy::too_many_arguments)]

use conntrack::{Conntrack, CtAction, CtResult, Nat, NatSpec, Outcome};
use wire::checksum::{fold, pseudo_v4, pseudo_v6, sum};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const FIN: u8 = 0x01;
pub const RST: u8 = 0x04;

#[derive(Clone, Copy, Debug)]
pub enum Addr {
    V4([u8; 4]),
    V6([u8; 16]),
}

pub fn v4(a: u8, b: u8, c: u8, d: u8) -> Addr {
    Addr::V4([a, b, c, d])
}
pub fn v6(last: u16) -> Addr {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[14..].copy_from_slice(&last.to_be_bytes());
    Addr::V6(a)
}

/// Ethernet + IP header around an L4 payload (checksums filled).
pub fn ip_frame(src: Addr, dst: Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    match (src, dst) {
        (Addr::V4(s), Addr::V4(d)) => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let tl = (20 + l4.len()) as u16;
            let mut h = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
            h[2..4].copy_from_slice(&tl.to_be_bytes());
            h.extend_from_slice(&s);
            h.extend_from_slice(&d);
            let c = !fold(sum(&h, 0));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
        }
        (Addr::V6(s), Addr::V6(d)) => {
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            let mut h = vec![0x60, 0, 0, 0, 0, 0, proto, 64];
            h[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
            h.extend_from_slice(&s);
            h.extend_from_slice(&d);
            f.extend_from_slice(&h);
        }
        _ => panic!("mixed families"),
    }
    f.extend_from_slice(l4);
    fill_l4_checksum(&mut f);
    f
}

fn pseudo(f: &[u8], proto: u8, len: usize) -> u64 {
    if f[12] == 0x08 {
        let s = u32::from_be_bytes([f[26], f[27], f[28], f[29]]);
        let d = u32::from_be_bytes([f[30], f[31], f[32], f[33]]);
        pseudo_v4(s, d, proto, len as u16)
    } else {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&f[22..38]);
        d.copy_from_slice(&f[38..54]);
        pseudo_v6(&s, &d, proto, len as u32)
    }
}

/// (proto, l4 offset, l4 end) of a simple (no options/extension) frame.
pub fn l4_of(f: &[u8]) -> (u8, usize, usize) {
    if f[12] == 0x08 {
        let tl = usize::from(u16::from_be_bytes([f[16], f[17]]));
        (f[23], 14 + usize::from(f[14] & 15) * 4, 14 + tl)
    } else {
        let pl = usize::from(u16::from_be_bytes([f[18], f[19]]));
        (f[20], 54, 54 + pl)
    }
}

fn csum_at(proto: u8) -> usize {
    match proto {
        6 => 16,
        17 => 6,
        _ => 2,
    }
}

pub fn fill_l4_checksum(f: &mut [u8]) {
    let (p, o, e) = l4_of(f);
    let at = o + csum_at(p);
    f[at..at + 2].copy_from_slice(&[0, 0]);
    let init = if p == 1 { 0 } else { pseudo(f, p, e - o) };
    let mut c = !fold(sum(&f[o..e], init));
    if p == 17 && c == 0 {
        c = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// True if the IPv4 header checksum (if v4) and the L4 checksum verify.
pub fn checksums_ok(f: &[u8]) -> bool {
    let (p, o, e) = l4_of(f);
    if f[12] == 0x08 && fold(sum(&f[14..o], 0)) != 0xffff {
        return false;
    }
    let init = if p == 1 { 0 } else { pseudo(f, p, e - o) };
    fold(sum(&f[o..e], init)) == 0xffff
}

pub fn tcp(
    src: Addr,
    dst: Addr,
    sp: u16,
    dp: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    data: usize,
) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sp.to_be_bytes());
    t[2..4].copy_from_slice(&dp.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t.extend(std::iter::repeat_n(0xab, data));
    ip_frame(src, dst, TCP, &t)
}

pub fn udp(src: Addr, dst: Addr, sp: u16, dp: u16, data: usize) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sp.to_be_bytes());
    u[2..4].copy_from_slice(&dp.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + data) as u16).to_be_bytes());
    u.extend((0..data).map(|i| i as u8));
    ip_frame(src, dst, UDP, &u)
}

/// ICMP(v6) echo request/reply.
pub fn echo(src: Addr, dst: Addr, id: u16, request: bool) -> Vec<u8> {
    let is6 = matches!(src, Addr::V6(_));
    let ty = match (is6, request) {
        (false, true) => 8,
        (false, false) => 0,
        (true, true) => 128,
        (true, false) => 129,
    };
    let mut i = vec![ty, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4];
    i[4..6].copy_from_slice(&id.to_be_bytes());
    ip_frame(src, dst, if is6 { 58 } else { 1 }, &i)
}

/// ICMP(v6) destination-unreachable from `src` to `dst` quoting `quoted` (a frame; its IP
/// packet is quoted, cut to 28 bytes past the IP header for IPv4).
pub fn icmp_error(src: Addr, dst: Addr, quoted: &[u8]) -> Vec<u8> {
    let is6 = matches!(src, Addr::V6(_));
    let mut i = vec![if is6 { 1 } else { 3 }, 3, 0, 0, 0, 0, 0, 0];
    let ip = &quoted[14..];
    let cut = if is6 {
        ip.len().min(40 + 8)
    } else {
        ip.len().min(28)
    };
    i.extend_from_slice(&ip[..cut]);
    ip_frame(src, dst, if is6 { 58 } else { 1 }, &i)
}

pub fn ports(f: &[u8]) -> (u16, u16) {
    let (_, o, _) = l4_of(f);
    (
        u16::from_be_bytes([f[o], f[o + 1]]),
        u16::from_be_bytes([f[o + 2], f[o + 3]]),
    )
}

pub fn addrs4(f: &[u8]) -> ([u8; 4], [u8; 4]) {
    let mut s = [0; 4];
    let mut d = [0; 4];
    s.copy_from_slice(&f[26..30]);
    d.copy_from_slice(&f[30..34]);
    (s, d)
}

/// Splits an IPv4 frame into fragments carrying `sizes` bytes of IP payload each (the last
/// takes the rest).
pub fn fragment_v4(f: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let payload = &f[34..];
    let mut out = Vec::new();
    let mut off = 0;
    let mut i = 0;
    while off < payload.len() {
        let n = sizes
            .get(i)
            .copied()
            .unwrap_or(payload.len() - off)
            .min(payload.len() - off);
        let more = off + n < payload.len();
        out.push(frag_v4_raw(f, off, &payload[off..off + n], more));
        off += n;
        i += 1;
    }
    out
}

/// One IPv4 fragment of `f`'s datagram: `data` at byte offset `off`.
pub fn frag_v4_raw(f: &[u8], off: usize, data: &[u8], more: bool) -> Vec<u8> {
    let mut g = f[..34].to_vec();
    let tl = (20 + data.len()) as u16;
    g[16..18].copy_from_slice(&tl.to_be_bytes());
    let ff = ((off / 8) as u16) | if more { 0x2000 } else { 0 };
    g[20..22].copy_from_slice(&ff.to_be_bytes());
    g[24..26].copy_from_slice(&[0, 0]);
    let c = !fold(sum(&g[14..34], 0));
    g[24..26].copy_from_slice(&c.to_be_bytes());
    g.extend_from_slice(data);
    g
}

// ---- Running the tracker (shared by ct.rs and frag.rs) ----

/// The result of a packet that was not held (not a fragment).
pub fn done(o: Outcome) -> CtResult {
    match o {
        Outcome::Done(r) => r,
        o => panic!("expected Done, got {o:?}"),
    }
}

/// The state bits `execute` gave one packet.
pub fn run(ct: &Conntrack, f: &mut [u8], a: &CtAction, now: u64) -> u32 {
    done(ct.execute(f, a, now)).state
}

/// `ct(commit, zone=N)`.
pub fn commit(zone: u16) -> CtAction {
    CtAction {
        zone,
        commit: true,
        ..CtAction::default()
    }
}

/// How many packets were found invalid for `why`.
pub fn inv(ct: &Conntrack, why: &str) -> u64 {
    ct.stats().invalid[why]
}

/// `ct(commit, nat(SPEC))`.
pub fn nat(spec: &str) -> CtAction {
    CtAction {
        commit: true,
        nat: Nat::Set(NatSpec::parse(spec).unwrap()),
        ..CtAction::default()
    }
}
/// `ct(nat)` on an existing connection.
pub const NAT_APPLY: CtAction = CtAction {
    zone: 0,
    commit: false,
    force: false,
    nat: Nat::Existing,
    mark: None,
    label: None,
};

/// First octet of the test networks (10.0.0.0/8).
pub const C: u8 = 10;
