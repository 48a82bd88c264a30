//! Building and checking test frames: Ethernet (optionally 802.1Q-tagged), IPv4 with UDP, TCP or
//! ICMP, and ARP, all with correct checksums; plus hex and checksum verification of the frames
//! the switch sends back.
#![allow(dead_code)]

pub type Mac = [u8; 6];

pub const ETH_IP: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_VLAN: u16 = 0x8100;

/// `02:00:00:00:00:0N`.
pub fn mac(n: u8) -> Mac {
    [2, 0, 0, 0, 0, n]
}

pub const BCAST: Mac = [0xff; 6];

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Internet checksum (RFC 1071) of `data`, starting from `init`.
pub fn csum(init: u32, data: &[u8]) -> u16 {
    let mut s = init;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u32::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn pseudo(src: [u8; 4], dst: [u8; 4], proto: u8, len: usize) -> u32 {
    let mut s = 0u32;
    for c in src.chunks(2).chain(dst.chunks(2)) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    s + u32::from(proto) + len as u32
}

/// An Ethernet frame, padded to 60 bytes.
pub fn eth(dst: Mac, src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// An IPv4 packet (20-byte header, checksum set) carrying `l4`.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let total = 20 + l4.len();
    let mut h = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0,
        0,
        64,
        proto,
        0,
        0,
    ];
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(0, &h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(l4);
    h
}

pub fn udp_seg(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut u = Vec::with_capacity(len);
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&(len as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let mut c = csum(pseudo(src, dst, 17, len), &u);
    if c == 0 {
        c = 0xffff;
    }
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

pub fn tcp_seg(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + payload.len());
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&1000u32.to_be_bytes()); // seq
    t.extend_from_slice(&0u32.to_be_bytes()); // ack
    t.extend_from_slice(&[0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]); // SYN, window
    t.extend_from_slice(payload);
    let c = csum(pseudo(src, dst, 6, t.len()), &t);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

/// An Ethernet + IPv4 + UDP frame whose payload is `id` (4 bytes) and some filler.
pub fn udp(dst: Mac, src: Mac, sip: [u8; 4], dip: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    udp_id(dst, src, sip, dip, sport, dport, 0)
}

pub fn udp_id(
    dst: Mac,
    src: Mac,
    sip: [u8; 4],
    dip: [u8; 4],
    sport: u16,
    dport: u16,
    id: u32,
) -> Vec<u8> {
    let mut payload = id.to_be_bytes().to_vec();
    payload.extend_from_slice(b"vireo-test");
    eth(
        dst,
        src,
        ETH_IP,
        &ipv4(sip, dip, 17, &udp_seg(sip, dip, sport, dport, &payload)),
    )
}

pub fn tcp(dst: Mac, src: Mac, sip: [u8; 4], dip: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    eth(
        dst,
        src,
        ETH_IP,
        &ipv4(sip, dip, 6, &tcp_seg(sip, dip, sport, dport, b"hello")),
    )
}

/// ICMP echo request (type 8) or any other type/code.
pub fn icmp(dst: Mac, src: Mac, sip: [u8; 4], dip: [u8; 4], ty: u8, code: u8) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0, 0, 1, 0, 1];
    m.extend_from_slice(b"ping-payload");
    let c = csum(0, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    eth(dst, src, ETH_IP, &ipv4(sip, dip, 1, &m))
}

/// ARP over Ethernet/IPv4; requests go to broadcast.
pub fn arp(op: u16, sha: Mac, spa: [u8; 4], tha: Mac, tpa: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa);
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa);
    let dst = if op == 1 { BCAST } else { tha };
    eth(dst, sha, ETH_ARP, &a)
}

/// Inserts an 802.1Q tag (PCP 0) with `vid`.
pub fn tagged(f: &[u8], vid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&ETH_VLAN.to_be_bytes());
    t.extend_from_slice(&(vid & 0xfff).to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

/// The VLAN ID of a tagged frame.
pub fn vlan_of(f: &[u8]) -> Option<u16> {
    (u16::from_be_bytes([f[12], f[13]]) == ETH_VLAN)
        .then(|| u16::from_be_bytes([f[14], f[15]]) & 0xfff)
}

/// The frame without its outer tag, if any.
pub fn untagged(f: &[u8]) -> Vec<u8> {
    if vlan_of(f).is_some() {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&f[16..]);
        t
    } else {
        f.to_vec()
    }
}

/// Offset of the L3 header and the ethertype after any tag.
pub fn l3(f: &[u8]) -> (usize, u16) {
    let mut off = 12;
    let mut et = u16::from_be_bytes([f[off], f[off + 1]]);
    while et == ETH_VLAN {
        off += 4;
        et = u16::from_be_bytes([f[off], f[off + 1]]);
    }
    (off + 2, et)
}

/// Verifies the IPv4 header checksum and the TCP/UDP/ICMP checksum of an IPv4 frame.
pub fn check_sums(f: &[u8]) -> Result<(), String> {
    let (o, et) = l3(f);
    if et != ETH_IP {
        return Ok(());
    }
    let ihl = usize::from(f[o] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([f[o + 2], f[o + 3]]));
    if csum(0, &f[o..o + ihl]) != 0 {
        return Err(format!("bad IPv4 header checksum in {}", hex(f)));
    }
    let src: [u8; 4] = f[o + 12..o + 16].try_into().unwrap();
    let dst: [u8; 4] = f[o + 16..o + 20].try_into().unwrap();
    let proto = f[o + 9];
    let l4 = &f[o + ihl..o + total];
    let ok = match proto {
        6 | 17 => csum(pseudo(src, dst, proto, l4.len()), l4) == 0,
        1 => csum(0, l4) == 0,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("bad L4 checksum (proto {proto}) in {}", hex(f)))
    }
}

/// IPv4 source and destination, L4 ports of an IPv4 frame.
pub fn ip_fields(f: &[u8]) -> ([u8; 4], [u8; 4], u16, u16) {
    let (o, _) = l3(f);
    let ihl = usize::from(f[o] & 0xf) * 4;
    let p = o + ihl;
    (
        f[o + 12..o + 16].try_into().unwrap(),
        f[o + 16..o + 20].try_into().unwrap(),
        u16::from_be_bytes([f[p], f[p + 1]]),
        u16::from_be_bytes([f[p + 2], f[p + 3]]),
    )
}

#[test]
fn checksums_of_built_frames_verify() {
    let f = udp(mac(2), mac(1), [10, 0, 0, 1], [10, 0, 0, 2], 1000, 53);
    check_sums(&f).unwrap();
    check_sums(&tcp(mac(2), mac(1), [10, 0, 0, 1], [10, 0, 0, 2], 1, 80)).unwrap();
    check_sums(&icmp(mac(2), mac(1), [10, 0, 0, 1], [10, 0, 0, 2], 8, 0)).unwrap();
    let mut bad = f.clone();
    bad[40] ^= 1;
    assert!(check_sums(&bad).is_err());
    let t = tagged(&f, 100);
    assert_eq!(vlan_of(&t), Some(100));
    assert_eq!(untagged(&t), f);
    check_sums(&t).unwrap();
}
