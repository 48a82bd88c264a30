//! Native tunneling in the datapath: the `TnlPush` and `TnlPop` actions (issue 12) and their
//! drop counters.
//!
//! `TnlPush` puts a megaflow's header template (`tnl::header::Template`, built at
//! translation) in front of the frame from the buffer's headroom and fills only the
//! per-packet fields; a frame that no longer fits the underlay MTU is dropped (`mtu`), never
//! fragmented. `TnlPop` checks the outer headers (`tnl::pop::parse_outer`) and the tunnel
//! header (`wire::tunnel::decap_any`) of a frame on its way to the underlay's internal port,
//! finds the endpoint (address, UDP port, kind, VNI, remote), strips both headers and hands
//! the inner frame back for another classification with `in_port` = the tunnel port and its
//! tunnel metadata set, as a socket tunnel port's receive does; the Geneve options that the
//! endpoint's bridge maps (its TLV map, `TnlPop::tlvs`) are understood and their values land
//! in the inner key's `tun_metadataN` words (an unknown critical option is still refused,
//! `critical-option`; unknown others are skipped). Frames not for an endpoint
//! are left alone. Every drop is counted by reason in [`COUNTERS`] (process-wide, relaxed
//! atomics, touched only on drops), shown by [`drop_counters`].
//!
//! Over an IPv6 underlay the same holds with the IPv6 template and parser; the decapsulated
//! packet's outer addresses go to the key's `tun_ipv6_src`/`tun_ipv6_dst` words (its
//! `packet::TunMeta` carries only the VNI then: the key travels with the recirculation).
//!
//! Decapsulated packets' outer source (address, MAC) is offered to the neighbour cache
//! through [`take_sources`]: each PMD notes a source at most once per housekeeping round
//! (when it differs from the last it noted, or the round moved), into a bounded list taken
//! with `try_lock` (a PMD never waits; a busy list loses the note until the next round).
//!
//! Threads: the actions run on PMDs; the counters are read by the control thread.
use crate::action::{TnlPop, TnlPush};
use packet::{Packet, TunMeta};
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use tnl::pop::{parse_outer, Endpoint, PopError};
use wire::tunnel::{decap_any_with, DecapError, TunnelKind};
use wire::{Field, FlowKey};

/// Drop reasons, in counter order.
pub const REASONS: [&str; 21] = [
    "mtu",
    "no-headroom",
    "outer-truncated",
    "outer-bad-ip",
    "outer-bad-checksum",
    "outer-fragment",
    "outer-bad-udp",
    "outer-bad-l2",
    "truncated",
    "bad-flags",
    "bad-version",
    "option-overrun",
    "critical-option",
    "control",
    "not-ethernet",
    "vni-mismatch",
    "inner-truncated",
    "no-port",
    "gso",
    "outer-ext-header",
    "outer-bad-udp-checksum",
];

/// Drops by reason ([`REASONS`]).
pub static COUNTERS: [AtomicU64; 21] = [const { AtomicU64::new(0) }; 21];

fn count(i: usize) {
    COUNTERS[i].fetch_add(1, Relaxed);
}

/// Counts a GSO frame sent to `TnlPush` that could not be cut into segments (its headers
/// no longer parse as TCP; a well-formed GSO frame is segmented in software before encap).
pub fn count_gso() {
    count(18);
}

fn pop_index(e: PopError) -> usize {
    match e {
        PopError::ExtHeader => 19,
        PopError::BadUdpChecksum => 20,
        _ => 2 + PopError::DROPS.iter().position(|d| *d == e).unwrap_or(0),
    }
}

fn decap_index(e: DecapError) -> usize {
    8 + DecapError::ALL.iter().position(|d| *d == e).unwrap_or(0)
}

/// The drop counters as (reason, count), zeros included.
pub fn drop_counters() -> Vec<(&'static str, u64)> {
    REASONS
        .iter()
        .zip(COUNTERS.iter())
        .map(|(r, c)| (*r, c.load(Relaxed)))
        .collect()
}

/// Outer sources noted since the last [`take_sources`] (at most [`SOURCES_MAX`]).
static SOURCES: Mutex<Vec<(IpAddr, [u8; 6])>> = Mutex::new(Vec::new());
/// Rounds of [`take_sources`] (a PMD notes each source again once per round).
static ROUND: AtomicU64 = AtomicU64::new(0);
/// Most sources kept between two rounds.
pub const SOURCES_MAX: usize = 256;

thread_local! {
    static LAST: Cell<(IpAddr, [u8; 6], u64)> =
        const { Cell::new((IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), [0; 6], u64::MAX)) };
}

fn note_source(ip: IpAddr, mac: [u8; 6]) {
    let round = ROUND.load(Relaxed);
    if LAST.with(|l| l.get()) == (ip, mac, round) {
        return;
    }
    LAST.with(|l| l.set((ip, mac, round)));
    if let Ok(mut v) = SOURCES.try_lock() {
        if v.len() < SOURCES_MAX && !v.contains(&(ip, mac)) {
            v.push((ip, mac));
        }
    }
}

/// The outer sources (address, MAC) of traffic decapsulated since the last call, for the
/// neighbour cache (housekeeping thread).
pub fn take_sources() -> Vec<(IpAddr, [u8; 6])> {
    ROUND.fetch_add(1, Relaxed);
    std::mem::take(&mut *SOURCES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Encapsulates `pkt` in place. False: dropped (counted).
pub fn push(pkt: &mut Packet, t: &TnlPush) -> bool {
    if !t.template.fits(pkt.len(), usize::from(t.mtu)) {
        count(0);
        return false;
    }
    // The flow hash gives the outer source port its entropy. `execute` hashes an unhashed
    // packet's key before calling this; a caller that did not gets its frame's key hashed
    // here (one more extraction).
    let hash = match pkt.meta.hash {
        0 => wire::extract(pkt.data(), pkt.meta.in_port).hash(),
        h => h,
    };
    match pkt.push_front(t.template.len()) {
        Some(_) => {
            t.template.push(pkt.data_mut(), hash);
            true
        }
        None => {
            count(1);
            false
        }
    }
}

/// Writes an IPv6 address into a key's two words `hi`/`lo` (an IPv4 one as ::ffff:a.b.c.d,
/// which a well-formed pop never gives).
pub fn set_ipv6(key: &mut FlowKey, hi: Field, lo: Field, a: IpAddr) {
    let v = match a {
        IpAddr::V6(a) => u128::from(a),
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
    };
    key.set(hi, (v >> 64) as u64);
    key.set(lo, v as u64);
}

/// What [`pop`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Popped {
    /// Not for an endpoint: the action list goes on.
    NotTunnel,
    /// Dropped (counted).
    Dropped,
    /// Decapsulated: `key` is the inner frame's, classify again.
    Inner,
}

/// Decapsulates `pkt` if it is for one of `t`'s endpoints; on success `key` becomes the inner
/// frame's key (with `in_port` and tunnel words).
pub fn pop(pkt: &mut Packet, t: &TnlPop, key: &mut FlowKey) -> Popped {
    let mut eps = [Endpoint {
        ip: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        port: 0,
    }; 8];
    let n = t.ports.len().min(eps.len());
    for (e, p) in eps.iter_mut().zip(&t.ports) {
        *e = Endpoint {
            ip: p.ip,
            port: p.udp_port,
        };
    }
    let outer = match parse_outer(pkt.data(), t.local_mac, &eps[..n]) {
        Ok(o) => o,
        Err(PopError::NotTunnel) => return Popped::NotTunnel,
        Err(e) => {
            count(pop_index(e));
            return Popped::Dropped;
        }
    };
    let payload = &pkt.data()[outer.payload_at..outer.payload_at + outer.payload_len];
    let (src, dst) = (outer.src, outer.dst);
    let candidates = t
        .ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.ip == dst && p.udp_port == outer.dst_port);
    let mut first_err = None;
    let mut found = None;
    let empty = wire::tunmd::TlvTable::default();
    for (i, p) in candidates {
        let kind = if p.geneve {
            TunnelKind::Geneve
        } else {
            TunnelKind::Vxlan
        };
        let tlv = t.tlvs.get(i).map_or(&empty, |t| &**t);
        let known = |c, ty, l| wire::tunmd::knows(tlv, c, ty, l);
        match decap_any_with(kind, payload, known) {
            Ok((hlen, vni)) => {
                let vni_ok = p.vni.is_none_or(|v| v == vni);
                let remote_ok = p.remote.is_none_or(|r| r == src);
                if vni_ok && remote_ok {
                    found = Some((p.port, hlen, vni, i));
                    break;
                }
                first_err.get_or_insert(if vni_ok {
                    17
                } else {
                    decap_index(DecapError::VniMismatch)
                });
            }
            Err(e) => {
                first_err.get_or_insert(decap_index(e));
            }
        }
    }
    let Some((port, hlen, vni, i)) = found else {
        count(first_err.unwrap_or(17));
        return Popped::Dropped;
    };
    // The option values, read before the headers go (Geneve only; nothing mapped: none).
    let mut opts = FlowKey::ZERO;
    if let Some(tlv) = t.tlvs.get(i).filter(|_| t.ports[i].geneve) {
        wire::tunmd::read_geneve(
            &pkt.data()[outer.payload_at..outer.payload_at + hlen],
            tlv,
            &mut opts,
        );
    }
    let inner_len = outer.payload_len - hlen;
    if !pkt.pull_front(outer.payload_at + hlen) {
        count(2);
        return Popped::Dropped;
    }
    pkt.truncate(inner_len);
    note_source(src, outer.src_mac);
    pkt.meta.in_port = port;
    wire::extract_into(pkt.data(), port, key);
    key.set(Field::TunId, u64::from(vni));
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let (src, dst) = (u32::from(s), u32::from(d));
            pkt.meta.tun = TunMeta { id: vni, src, dst };
            key.set(Field::TunSrc, u64::from(src));
            key.set(Field::TunDst, u64::from(dst));
        }
        (s, d) => {
            pkt.meta.tun = TunMeta {
                id: vni,
                src: 0,
                dst: 0,
            };
            set_ipv6(key, Field::TunIpv6SrcHi, Field::TunIpv6SrcLo, s);
            set_ipv6(key, Field::TunIpv6DstHi, Field::TunIpv6DstLo, d);
        }
    }
    for w in wire::flow::TUN_MD_WORDS {
        key.w[w] = opts.w[w];
    }
    pkt.meta.hash = key.hash();
    Popped::Inner
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::PopPort;
    use std::net::Ipv4Addr;
    use std::sync::Arc;
    use tnl::header::{Params, Template, HEADER_LEN, HEADER_LEN_V6};

    const LOCAL: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn template(kind: TunnelKind, vni: u32) -> TnlPush {
        TnlPush {
            template: Template::build(&Params {
                kind,
                vni,
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: LOCAL,
                src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
                dst_ip: Ipv4Addr::new(10, 0, 0, 2).into(),
                dst_port: if kind == TunnelKind::Vxlan {
                    4789
                } else {
                    6081
                },
                tos: 0,
                ttl: 64,
                df: true,
                csum: false,
                options: Vec::new(),
            }),
            mtu: 1500,
            actions: vec![],
        }
    }

    fn inner() -> Vec<u8> {
        // An IPv4/UDP frame between two VMs.
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
        f[12..14].copy_from_slice(&[8, 0]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[192, 168, 0, 1]);
        f[30..34].copy_from_slice(&[192, 168, 0, 2]);
        f
    }

    fn pop_spec(vni: Option<u32>, remote: Option<IpAddr>) -> TnlPop {
        TnlPop {
            local_mac: LOCAL,
            ports: vec![
                PopPort {
                    ip: Ipv4Addr::new(10, 0, 0, 2).into(),
                    udp_port: 4789,
                    geneve: false,
                    vni,
                    remote,
                    port: 7,
                },
                PopPort {
                    ip: Ipv4Addr::new(10, 0, 0, 2).into(),
                    udp_port: 6081,
                    geneve: true,
                    vni: None,
                    remote: None,
                    port: 8,
                },
            ],
            tlvs: Vec::new(),
        }
    }

    /// A packet the worker did not hash (its burst probed no cache) gets the source port its
    /// key's hash gives, so one flow keeps one outer source port and flows spread.
    #[test]
    fn an_unhashed_packet_is_hashed_for_its_source_port() {
        let mut sports = std::collections::BTreeSet::new();
        for dst in 1..=8u8 {
            let mut frame = inner();
            frame[33] = dst;
            let mut p = Packet::from_slice(&frame);
            p.meta.in_port = 3;
            p.meta.hash = 0;
            assert!(push(&mut p, &template(TunnelKind::Vxlan, 5)));
            let sport = u16::from_be_bytes([p.data()[34], p.data()[35]]);
            let want = wire::extract(&frame, 3).hash();
            assert_eq!(sport, tnl::header::src_port(want));
            sports.insert(sport);
        }
        assert!(sports.len() > 1, "one source port for 8 flows: {sports:?}");
    }

    #[test]
    fn push_then_pop_gives_the_inner_frame_with_tunnel_metadata() {
        for (kind, port) in [(TunnelKind::Vxlan, 7), (TunnelKind::Geneve, 8)] {
            let mut p = Packet::from_slice(&inner());
            p.meta.hash = 0xdead_beef;
            assert!(push(&mut p, &template(kind, 5)));
            assert_eq!(p.len(), 60 + HEADER_LEN);
            let sport = u16::from_be_bytes([p.data()[34], p.data()[35]]);
            assert_eq!(sport, tnl::header::src_port(0xdead_beef));
            let mut key = FlowKey::ZERO;
            assert_eq!(
                pop(&mut p, &pop_spec(Some(5), None), &mut key),
                Popped::Inner
            );
            assert_eq!(p.data(), &inner()[..]);
            assert_eq!(p.meta.in_port, port);
            assert_eq!(
                p.meta.tun,
                TunMeta {
                    id: 5,
                    src: 0x0a00_0001,
                    dst: 0x0a00_0002
                }
            );
            let mut want = wire::extract(&inner(), port);
            want.set(Field::TunId, 5);
            want.set(Field::TunSrc, 0x0a00_0001);
            want.set(Field::TunDst, 0x0a00_0002);
            assert_eq!(key, want);
        }
    }

    #[test]
    fn geneve_options_in_the_map_reach_the_key_and_unknown_critical_ones_drop() {
        let mut tlv = wire::tunmd::TlvTable::new();
        tlv.add(&[(0x0102, 0x80, 4, 0)]).unwrap();
        let mut push_t = template(TunnelKind::Geneve, 5);
        let mut params = push_t.template.params().clone();
        params.options = tnl::header::geneve_options([(0x0102, 0x80, &[0, 0, 0x12, 0x34][..])]);
        push_t.template = Template::build(&params);
        let encap = || {
            let mut p = Packet::from_slice(&inner());
            assert!(push(&mut p, &push_t));
            assert_eq!(p.len(), 60 + HEADER_LEN + 8);
            p
        };
        // Mapped on the receiving endpoint: decapsulated, the value in tun_metadata0.
        let mut spec = pop_spec(None, None);
        spec.tlvs = vec![Arc::new(wire::tunmd::TlvTable::new()), Arc::new(tlv)];
        let mut key = FlowKey::ZERO;
        let mut p = encap();
        assert_eq!(pop(&mut p, &spec, &mut key), Popped::Inner);
        assert_eq!(p.data(), &inner()[..]);
        assert_eq!(wire::tunmd::get(&key, 0, 4), 0x1234);
        assert_eq!(key.hash(), p.meta.hash);
        // Not mapped: the critical option drops the packet, counted.
        let i = REASONS
            .iter()
            .position(|r| *r == "critical-option")
            .unwrap();
        let before = COUNTERS[i].load(Relaxed);
        let mut p = encap();
        assert_eq!(
            pop(&mut p, &pop_spec(None, None), &mut { FlowKey::ZERO }),
            Popped::Dropped
        );
        assert!(COUNTERS[i].load(Relaxed) > before);
    }

    #[test]
    fn oversize_frames_are_dropped_and_counted_not_fragmented() {
        let before = COUNTERS[0].load(Relaxed);
        let mut t = template(TunnelKind::Vxlan, 5);
        t.mtu = 60 + 35;
        let mut p = Packet::from_slice(&inner());
        assert!(!push(&mut p, &t));
        assert_eq!(p.data(), &inner()[..], "a dropped frame is left as it was");
        assert!(COUNTERS[0].load(Relaxed) > before);
        t.mtu = 60 + 36;
        assert!(push(&mut p, &t));
    }

    #[test]
    fn pop_counts_each_refusal_and_leaves_other_traffic_alone() {
        let reason = |r: &str| REASONS.iter().position(|x| *x == r).unwrap();
        let encap = |vni| {
            let mut p = Packet::from_slice(&inner());
            assert!(push(&mut p, &template(TunnelKind::Vxlan, vni)));
            p
        };
        let check = |p: &mut Packet, spec: &TnlPop, r: &str| {
            let before = COUNTERS[reason(r)].load(Relaxed);
            assert_eq!(pop(p, spec, &mut { FlowKey::ZERO }), Popped::Dropped, "{r}");
            assert!(
                COUNTERS[reason(r)].load(Relaxed) > before,
                "{r} not counted"
            );
        };
        // Another VNI, another remote, a bad tunnel header, a fragment.
        check(&mut encap(6), &pop_spec(Some(5), None), "vni-mismatch");
        check(
            &mut encap(5),
            &pop_spec(Some(5), Some(Ipv4Addr::new(10, 0, 0, 9).into())),
            "no-port",
        );
        let mut p = encap(5);
        p.data_mut()[42] = 0; // VXLAN I flag
        check(&mut p, &pop_spec(None, None), "bad-flags");
        let mut p = encap(5);
        p.data_mut()[20] = 0x20; // MF (checksum now wrong too: checked first)
        check(&mut p, &pop_spec(None, None), "outer-bad-checksum");
        // Not ours: untouched.
        let mut p = Packet::from_slice(&inner());
        assert_eq!(
            pop(&mut p, &pop_spec(None, None), &mut { FlowKey::ZERO }),
            Popped::NotTunnel
        );
        assert_eq!(p.data(), &inner()[..]);
        assert!(drop_counters()
            .iter()
            .any(|(r, n)| *r == "vni-mismatch" && *n > 0));
    }

    #[test]
    fn ipv6_push_then_pop_sets_the_ipv6_tunnel_words_and_refusals_are_counted() {
        let (s6, d6): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let mut t = template(TunnelKind::Vxlan, 5);
        let mut p6 = t.template.params().clone();
        p6.src_ip = s6;
        p6.dst_ip = d6;
        p6.csum = true;
        t.template = Template::build(&p6);
        let spec = TnlPop {
            local_mac: LOCAL,
            ports: vec![PopPort {
                ip: d6,
                udp_port: 4789,
                geneve: false,
                vni: Some(5),
                remote: Some(s6),
                port: 9,
            }],
            tlvs: Vec::new(),
        };
        let mut p = Packet::from_slice(&inner());
        p.meta.hash = 77;
        assert!(push(&mut p, &t));
        assert_eq!(p.len(), 60 + HEADER_LEN_V6);
        assert_eq!(&p.data()[12..14], &[0x86, 0xdd]);
        let outer = p.data().to_vec();
        let mut key = FlowKey::ZERO;
        assert_eq!(pop(&mut p, &spec, &mut key), Popped::Inner);
        assert_eq!(p.data(), &inner()[..]);
        assert_eq!(p.meta.in_port, 9);
        let mut want = wire::extract(&inner(), 9);
        want.set(Field::TunId, 5);
        set_ipv6(&mut want, Field::TunIpv6SrcHi, Field::TunIpv6SrcLo, s6);
        set_ipv6(&mut want, Field::TunIpv6DstHi, Field::TunIpv6DstLo, d6);
        assert_eq!(key, want);
        assert_eq!(key.get(Field::TunSrc), 0, "no IPv4 tunnel address");
        assert_eq!(key.get(Field::TunIpv6DstLo), 2);
        // A corrupted UDP checksum, and a hop-by-hop header: dropped, counted by reason.
        let reason = |r: &str| REASONS.iter().position(|x| *x == r).unwrap();
        let before = COUNTERS[reason("outer-bad-udp-checksum")].load(Relaxed);
        let mut bad = outer.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x10;
        let mut p = Packet::from_slice(&bad);
        assert_eq!(pop(&mut p, &spec, &mut { FlowKey::ZERO }), Popped::Dropped);
        assert!(COUNTERS[reason("outer-bad-udp-checksum")].load(Relaxed) > before);
        let before = COUNTERS[reason("outer-ext-header")].load(Relaxed);
        let mut ext = outer[..54].to_vec();
        ext[20] = 0;
        ext.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        ext.extend_from_slice(&outer[54..]);
        let plen = (ext.len() - 54) as u16;
        ext[18..20].copy_from_slice(&plen.to_be_bytes());
        let mut p = Packet::from_slice(&ext);
        assert_eq!(pop(&mut p, &spec, &mut { FlowKey::ZERO }), Popped::Dropped);
        assert!(COUNTERS[reason("outer-ext-header")].load(Relaxed) > before);
        // Too big for the MTU over IPv6 (56 bytes of overhead), fits over IPv4 (36).
        let mut small = t.clone();
        small.mtu = 60 + 55;
        assert!(!push(&mut Packet::from_slice(&inner()), &small));
        let mut v4 = template(TunnelKind::Vxlan, 5);
        v4.mtu = 60 + 55;
        assert!(push(&mut Packet::from_slice(&inner()), &v4));
        let _ = HEADER_LEN;
    }
}
