//! The flow key: every header field the datapath can match, packed into [`KEY_WORDS`] u64
//! words so that masking, hashing and comparing are a few word operations.
//!
//! Layout (bit ranges within each word, least significant bit 0):
//!
//! | word | bits 0..   | contents |
//! |---|---|---|
//! | 0 | 0..32 in_port, 32..48 eth_type, 48..64 vlan_tci (CFI bit 0x1000 set when a tag is present) |
//! | 1 | 0..48 eth_dst, 48..56 ip_proto (ARP: low byte of opcode), 56..64 ip_tos (DSCP+ECN) |
//! | 2 | 0..48 eth_src, 48..56 ip_ttl, 56..64 ip_frag (bit 0 fragment, bit 1 later fragment) |
//! | 3 | 0..16 tp_src (ICMP type), 16..32 tp_dst (ICMP code), 32..48 tcp_flags, 48..64 arp_op |
//! | 4 | 0..32 ipv4_src / arp_spa, 32..64 ipv4_dst / arp_tpa |
//! | 5 | ipv6_src high 64 bits; ARP: 0..48 arp_sha |
//! | 6 | ipv6_src low 64 bits; ARP: 0..48 arp_tha |
//! | 7 | ipv6_dst high 64 bits |
//! | 8 | ipv6_dst low 64 bits |
//! | 9 | 0..32 recirc_id, 32..40 ct_state, 40..48 ct_nw_proto, 48..64 ct_zone |
//! | 10 | 0..32 ct_mark, 32..48 ct_tp_src, 48..64 ct_tp_dst |
//! | 11 | ct_label high 64 bits |
//! | 12 | ct_label low 64 bits |
//! | 13 | ct_ipv6_src high 64 bits; IPv4: 0..32 ct_nw_src, 32..64 ct_nw_dst |
//! | 14 | ct_ipv6_src low 64 bits |
//! | 15 | ct_ipv6_dst high 64 bits |
//! | 16 | ct_ipv6_dst low 64 bits |
//! | 17 | tun_id (64 bits; VXLAN and Geneve carry the low 24) |
//! | 18 | 0..32 tun_src (IPv4), 32..64 tun_dst (IPv4) |
//! | 19 | tun_ipv6_src high 64 bits |
//! | 20 | tun_ipv6_src low 64 bits |
//! | 21 | tun_ipv6_dst high 64 bits |
//! | 22 | tun_ipv6_dst low 64 bits |
//! | 23 | Geneve option values (`tun_metadataN`) bytes 0..8 of the option space |
//! | 24 | option space bytes 8..16 |
//! | 25 | option space bytes 16..24 |
//! | 26 | option space bytes 24..32 |
//!
//! Words 23-26 hold the values of the Geneve options a bridge's TLV map names, each at the
//! offset the map gave it (see [`crate::tunmd`]; byte `i` of the space is big-endian byte
//! `i % 8` of word `23 + i / 8`).
//!
//! Words 9-26 are metadata, not headers: zero on a packet from a port; the datapath's `ct`
//! action sets the conntrack words and recirculation sets `recirc_id` (see `dp::worker`); a
//! packet decapsulated by a `vxlan`/`geneve` port carries its tunnel id and outer IPv4
//! addresses in `packet::Meta`, which the datapath copies into words 17-18 (and a
//! `set_tunnel` action writes both). The outer IPv6 addresses (words 19-22) are set only by
//! native decapsulation (`dp::tnl::pop`), which writes the key directly; the socket path
//! over an IPv6 underlay leaves them zero.
//!
//! Head and tail: words `0..HEAD_WORDS` (the headers and word 9, which holds `recirc_id`,
//! `ct_state` and `ct_zone`, the metadata most masks use) are the *head*; words
//! `HEAD_WORDS..KEY_WORDS` (mark, label, original tuple) the *tail*. A packet that never went
//! through `ct` has an all-zero tail, and so does every megaflow mask that matches no tail
//! field. The caches use that: the hash of a key whose tail is zero covers the head words only
//! ([`FlowKey::hash_head`], the same value [`FlowKey::hash`] gives), and the EMC and the
//! classifier's subtables compare the tail only when one side has one. A key with a tail
//! hashes and compares every word, so keys that differ only in the tail never meet.
//! `ct_nw_src/dst` and `ct_ipv6_src` share word 13 the way ARP and IPv6 share words 5 and 6:
//! a mask that uses them always includes eth_type.
//!
//! MAC addresses are stored as the 48-bit big-endian number of their six bytes; IPv4 addresses
//! as the 32-bit big-endian number. The same struct serves as a mask (a set bit means "this bit
//! is matched"). ARP and IPv6 fields share words 5 and 6: a mask that uses them always includes
//! eth_type, so the overlap is never ambiguous.

/// Number of 64-bit words in a key.
pub const KEY_WORDS: usize = 27;

/// The conntrack words (`recirc_id` and the `ct_*` fields): `ct_clear` zeroes them (keeping
/// `recirc_id`).
pub const CT_WORDS: std::ops::Range<usize> = 9..17;

/// The tunnel words (`tun_id`, `tun_src`, `tun_dst`, `tun_ipv6_src`, `tun_ipv6_dst`).
pub const TUN_WORDS: std::ops::Range<usize> = 17..23;

/// The Geneve option words (`tun_metadataN` values, see [`crate::tunmd`]).
pub const TUN_MD_WORDS: std::ops::Range<usize> = 23..27;

/// Every metadata word (conntrack and tunnel): recirculation carries them over.
pub const META_WORDS: std::ops::Range<usize> = 9..KEY_WORDS;

/// Words of the head (see the module documentation): headers, `recirc_id`, `ct_state`,
/// `ct_nw_proto`, `ct_zone`.
pub const HEAD_WORDS: usize = 10;

/// The tail's words: zero on every key that never went through `ct` or a tunnel.
pub const TAIL: std::ops::Range<usize> = HEAD_WORDS..KEY_WORDS;

/// A flow key, or a mask over one.
#[derive(Clone, Copy, Default, Eq, Debug)]
#[repr(C, align(8))]
pub struct FlowKey {
    /// The packed words (see the module documentation for the layout).
    pub w: [u64; KEY_WORDS],
}

/// Word-wise, branch-free comparison (the derived one calls `memcmp` for 72 bytes).
impl PartialEq for FlowKey {
    #[inline(always)]
    fn eq(&self, other: &FlowKey) -> bool {
        let mut d = 0u64;
        for i in 0..KEY_WORDS {
            d |= self.w[i] ^ other.w[i];
        }
        d == 0
    }
}

/// Hashes the words, agreeing with the word-wise equality above.
impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.w.hash(state);
    }
}

/// A matchable field: which word, first bit, width in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Field {
    InPort,
    EthType,
    VlanTci,
    EthDst,
    IpProto,
    IpTos,
    EthSrc,
    IpTtl,
    IpFrag,
    TpSrc,
    TpDst,
    TcpFlags,
    ArpOp,
    Ipv4Src,
    Ipv4Dst,
    ArpSha,
    ArpTha,
    Ipv6SrcHi,
    Ipv6SrcLo,
    Ipv6DstHi,
    Ipv6DstLo,
    RecircId,
    CtState,
    CtNwProto,
    CtZone,
    CtMark,
    CtTpSrc,
    CtTpDst,
    CtLabelHi,
    CtLabelLo,
    CtNwSrc,
    CtNwDst,
    CtIpv6SrcHi,
    CtIpv6SrcLo,
    CtIpv6DstHi,
    CtIpv6DstLo,
    TunId,
    TunSrc,
    TunDst,
    TunIpv6SrcHi,
    TunIpv6SrcLo,
    TunIpv6DstHi,
    TunIpv6DstLo,
}

impl Field {
    /// Every field, in layout order.
    pub const ALL: [Field; 43] = [
        Field::InPort,
        Field::EthType,
        Field::VlanTci,
        Field::EthDst,
        Field::IpProto,
        Field::IpTos,
        Field::EthSrc,
        Field::IpTtl,
        Field::IpFrag,
        Field::TpSrc,
        Field::TpDst,
        Field::TcpFlags,
        Field::ArpOp,
        Field::Ipv4Src,
        Field::Ipv4Dst,
        Field::ArpSha,
        Field::ArpTha,
        Field::Ipv6SrcHi,
        Field::Ipv6SrcLo,
        Field::Ipv6DstHi,
        Field::Ipv6DstLo,
        Field::RecircId,
        Field::CtState,
        Field::CtNwProto,
        Field::CtZone,
        Field::CtMark,
        Field::CtTpSrc,
        Field::CtTpDst,
        Field::CtLabelHi,
        Field::CtLabelLo,
        Field::CtNwSrc,
        Field::CtNwDst,
        Field::CtIpv6SrcHi,
        Field::CtIpv6SrcLo,
        Field::CtIpv6DstHi,
        Field::CtIpv6DstLo,
        Field::TunId,
        Field::TunSrc,
        Field::TunDst,
        Field::TunIpv6SrcHi,
        Field::TunIpv6SrcLo,
        Field::TunIpv6DstHi,
        Field::TunIpv6DstLo,
    ];

    /// (word, first bit, width).
    #[inline]
    pub const fn layout(self) -> (usize, u32, u32) {
        match self {
            Field::InPort => (0, 0, 32),
            Field::EthType => (0, 32, 16),
            Field::VlanTci => (0, 48, 16),
            Field::EthDst => (1, 0, 48),
            Field::IpProto => (1, 48, 8),
            Field::IpTos => (1, 56, 8),
            Field::EthSrc => (2, 0, 48),
            Field::IpTtl => (2, 48, 8),
            Field::IpFrag => (2, 56, 8),
            Field::TpSrc => (3, 0, 16),
            Field::TpDst => (3, 16, 16),
            Field::TcpFlags => (3, 32, 16),
            Field::ArpOp => (3, 48, 16),
            Field::Ipv4Src => (4, 0, 32),
            Field::Ipv4Dst => (4, 32, 32),
            Field::ArpSha => (5, 0, 48),
            Field::ArpTha => (6, 0, 48),
            Field::Ipv6SrcHi => (5, 0, 64),
            Field::Ipv6SrcLo => (6, 0, 64),
            Field::Ipv6DstHi => (7, 0, 64),
            Field::Ipv6DstLo => (8, 0, 64),
            Field::RecircId => (9, 0, 32),
            Field::CtState => (9, 32, 8),
            Field::CtNwProto => (9, 40, 8),
            Field::CtZone => (9, 48, 16),
            Field::CtMark => (10, 0, 32),
            Field::CtTpSrc => (10, 32, 16),
            Field::CtTpDst => (10, 48, 16),
            Field::CtLabelHi => (11, 0, 64),
            Field::CtLabelLo => (12, 0, 64),
            Field::CtNwSrc => (13, 0, 32),
            Field::CtNwDst => (13, 32, 32),
            Field::CtIpv6SrcHi => (13, 0, 64),
            Field::CtIpv6SrcLo => (14, 0, 64),
            Field::CtIpv6DstHi => (15, 0, 64),
            Field::CtIpv6DstLo => (16, 0, 64),
            Field::TunId => (17, 0, 64),
            Field::TunSrc => (18, 0, 32),
            Field::TunDst => (18, 32, 32),
            Field::TunIpv6SrcHi => (19, 0, 64),
            Field::TunIpv6SrcLo => (20, 0, 64),
            Field::TunIpv6DstHi => (21, 0, 64),
            Field::TunIpv6DstLo => (22, 0, 64),
        }
    }

    /// All-ones value of the field's width.
    #[inline]
    pub const fn full(self) -> u64 {
        let (_, _, bits) = self.layout();
        if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }
}

impl FlowKey {
    /// The all-zero key (also the empty mask).
    pub const ZERO: FlowKey = FlowKey { w: [0; KEY_WORDS] };

    /// Reads a field.
    #[inline]
    pub fn get(&self, f: Field) -> u64 {
        let (w, shift, _) = f.layout();
        (self.w[w] >> shift) & f.full()
    }

    /// Writes a field (the value is truncated to the field's width).
    #[inline]
    pub fn set(&mut self, f: Field, v: u64) {
        let (w, shift, _) = f.layout();
        let m = f.full() << shift;
        self.w[w] = (self.w[w] & !m) | ((v << shift) & m);
    }

    /// Sets every bit of a field (for masks).
    #[inline]
    pub fn set_exact(&mut self, f: Field) {
        self.set(f, f.full());
    }

    /// `self & mask`, word by word.
    #[inline]
    pub fn masked(&self, mask: &FlowKey) -> FlowKey {
        let mut out = FlowKey::ZERO;
        for i in 0..KEY_WORDS {
            out.w[i] = self.w[i] & mask.w[i];
        }
        out
    }

    /// Union of two masks.
    #[inline]
    pub fn union(&self, other: &FlowKey) -> FlowKey {
        let mut out = FlowKey::ZERO;
        for i in 0..KEY_WORDS {
            out.w[i] = self.w[i] | other.w[i];
        }
        out
    }

    /// True if `self` and `other` agree on every bit of `mask` (branch-free over the words).
    #[inline]
    pub fn matches(&self, other: &FlowKey, mask: &FlowKey) -> bool {
        let mut d = 0u64;
        for i in 0..KEY_WORDS {
            d |= (self.w[i] ^ other.w[i]) & mask.w[i];
        }
        d == 0
    }

    /// True if `self` and `other` agree on every bit of `mask` in the head words; the whole
    /// answer when `mask`'s tail is zero.
    #[inline]
    pub fn matches_head(&self, other: &FlowKey, mask: &FlowKey) -> bool {
        let mut d = 0u64;
        for i in 0..HEAD_WORDS {
            d |= (self.w[i] ^ other.w[i]) & mask.w[i];
        }
        d == 0
    }

    /// True if any tail word is non-zero (the key went through `ct`, or a mask matches a tail
    /// field).
    #[inline(always)]
    pub fn has_tail(&self) -> bool {
        let mut t = 0u64;
        for i in TAIL {
            t |= self.w[i];
        }
        t != 0
    }

    /// The head words.
    #[inline(always)]
    pub fn head(&self) -> &[u64; HEAD_WORDS] {
        let (h, _) = self
            .w
            .split_first_chunk::<HEAD_WORDS>()
            .expect("HEAD_WORDS <= KEY_WORDS");
        h
    }

    /// A MAC address as stored in the key.
    #[inline]
    pub fn mac_to_u64(mac: [u8; 6]) -> u64 {
        u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]])
    }

    /// 32-bit hash of the whole key, for the exact-match and signature caches. Keyed with a
    /// per-process random seed so a hostile sender cannot aim for collisions.
    #[inline]
    pub fn hash(&self) -> u32 {
        if self.has_tail() {
            hash_with_tail(&self.w)
        } else {
            hash_head(self.head())
        }
    }

    /// [`FlowKey::hash`] of a key whose tail is zero (a key fresh from extraction), without
    /// looking at the tail.
    #[inline(always)]
    pub fn hash_head(&self) -> u32 {
        debug_assert!(!self.has_tail(), "hash_head on a key with a tail");
        hash_head(self.head())
    }

    /// [`FlowKey::hash`] of a key whose head words are `w` and whose tail is zero.
    #[inline(always)]
    pub fn hash_head_words(w: &[u64; HEAD_WORDS]) -> u32 {
        hash_head(w)
    }

    /// Hash of `self & mask` (what a megaflow subtable is keyed by), without building it.
    #[inline]
    pub fn hash_masked(&self, mask: &FlowKey) -> u32 {
        self.masked(mask).hash()
    }

    /// The fields `mask` matches, as `name=value[/mask]` joined by commas (`*` if none), the
    /// way `dump-megaflows` shows a megaflow. `self` is the (masked) key.
    pub fn match_string(&self, mask: &FlowKey) -> String {
        crate::format::format_match(self, mask)
    }

    /// The MAC address for a stored value.
    #[inline]
    pub fn u64_to_mac(v: u64) -> [u8; 6] {
        let b = v.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    }
}

/// 128-bit multiply folded to 64 bits: the mixing step of the key hash.
#[inline(always)]
fn fmul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Hash constants: fixed odd constants mixed once with a per-process random seed.
fn hash_keys() -> &'static [u64; HASH_KEYS] {
    static KEYS: std::sync::OnceLock<[u64; HASH_KEYS]> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        let seed = h.finish();
        let mut k = [0u64; HASH_KEYS];
        let mut x = seed | 1;
        for (i, o) in k.iter_mut().enumerate() {
            x = fmul(x ^ 0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9 + i as u64);
            *o = x | 1;
        }
        k
    })
}

/// Number of hash constants: one per word, one to pad the tail's odd word, two to combine.
const HASH_KEYS: usize = KEY_WORDS + 3;

/// The head's hash: independent folded multiplies over pairs of words (they run in parallel)
/// and one to combine them. Five multiplies for ten words, as the nine-word key took.
#[inline(always)]
fn hash_head(w: &[u64; HEAD_WORDS]) -> u32 {
    let k = hash_keys();
    let e = fmul(w[8] ^ k[8], w[9] ^ k[9]);
    combine(w, e, k)
}

#[inline(always)]
fn combine(w: &[u64; HEAD_WORDS], e: u64, k: &[u64; HASH_KEYS]) -> u32 {
    let a = fmul(w[0] ^ k[0], w[1] ^ k[1]);
    let b = fmul(w[2] ^ k[2], w[3] ^ k[3]);
    let c = fmul(w[4] ^ k[4], w[5] ^ k[5]);
    let d = fmul(w[6] ^ k[6], w[7] ^ k[7]);
    let h = fmul(a ^ c ^ e ^ k[KEY_WORDS + 2], b.wrapping_add(d));
    (h ^ (h >> 32)) as u32
}

/// The hash of a key with a tail: the head's, with the tail's folded into its last pair.
/// Out of line: only keys that went through `ct` or a tunnel come here.
#[inline(never)]
fn hash_with_tail(w: &[u64; KEY_WORDS]) -> u32 {
    let k = hash_keys();
    let t1 = fmul(w[10] ^ k[10], w[11] ^ k[11]);
    let t2 = fmul(w[12] ^ k[12], w[13] ^ k[13]);
    let t3 = fmul(w[14] ^ k[14], w[15] ^ k[15]);
    let t4 = fmul(w[16] ^ k[16], w[17] ^ k[17]);
    let t5 = fmul(w[18] ^ k[18], w[19] ^ k[19]);
    let t6 = fmul(w[20] ^ k[20], w[21] ^ k[21]);
    let t7 = fmul(w[22] ^ k[22], w[23] ^ k[23]);
    let t8 = fmul(w[24] ^ k[24], w[25] ^ k[25]);
    let t9 = fmul(w[26] ^ k[26], k[KEY_WORDS]);
    let tail = fmul(
        t1 ^ t3 ^ t5 ^ t7 ^ t9 ^ k[KEY_WORDS + 1],
        t2.wrapping_add(t4).wrapping_add(t6).wrapping_add(t8),
    );
    let e = fmul(w[8] ^ k[8], w[9] ^ k[9]) ^ tail;
    let (head, _) = w
        .split_first_chunk::<HEAD_WORDS>()
        .expect("HEAD_WORDS <= KEY_WORDS");
    combine(head, e, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_overlap_within_a_word_except_arp_ipv6() {
        let overlap_ok = |a: Field, b: Field| {
            matches!(
                (a, b),
                (Field::ArpSha, Field::Ipv6SrcHi)
                    | (Field::Ipv6SrcHi, Field::ArpSha)
                    | (Field::ArpTha, Field::Ipv6SrcLo)
                    | (Field::Ipv6SrcLo, Field::ArpTha)
                    | (Field::CtNwSrc | Field::CtNwDst, Field::CtIpv6SrcHi)
                    | (Field::CtIpv6SrcHi, Field::CtNwSrc | Field::CtNwDst)
            )
        };
        for a in Field::ALL {
            for b in Field::ALL {
                if a == b || overlap_ok(a, b) {
                    continue;
                }
                let mut ka = FlowKey::ZERO;
                ka.set_exact(a);
                let mut kb = FlowKey::ZERO;
                kb.set_exact(b);
                assert!(
                    (0..KEY_WORDS).all(|i| ka.w[i] & kb.w[i] == 0),
                    "{a:?} overlaps {b:?}"
                );
            }
        }
    }

    #[test]
    fn set_get_round_trip_and_truncation() {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthDst, FlowKey::mac_to_u64([1, 2, 3, 4, 5, 6]));
        k.set(Field::IpProto, 0x1_06); // truncated to 8 bits
        k.set(Field::InPort, 7);
        assert_eq!(
            FlowKey::u64_to_mac(k.get(Field::EthDst)),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(k.get(Field::IpProto), 6);
        assert_eq!(k.get(Field::InPort), 7);
        assert_eq!(k.get(Field::EthSrc), 0);
    }

    #[test]
    fn hash_depends_on_every_word_and_masked_hash_agrees() {
        let base = FlowKey { w: [3; KEY_WORDS] };
        for i in 0..KEY_WORDS {
            let mut k = base;
            k.w[i] ^= 1 << (i * 7 % 64);
            assert_ne!(k.hash(), base.hash(), "word {i} ignored");
        }
        let mut m = FlowKey::ZERO;
        m.set(Field::Ipv4Dst, 0xffff_ff00);
        assert_eq!(base.hash_masked(&m), base.masked(&m).hash());
    }

    #[test]
    fn head_hash_is_the_hash_of_a_key_without_tail_and_a_tail_changes_it() {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 3);
        k.set(Field::Ipv4Dst, 0x0a00_0001);
        k.set(Field::RecircId, 7);
        k.set(Field::CtState, 0x21);
        assert!(!k.has_tail());
        assert_eq!(k.hash(), k.hash_head());
        assert_eq!(k.hash(), FlowKey::hash_head_words(k.head()));
        for f in [
            Field::CtMark,
            Field::CtLabelLo,
            Field::CtNwSrc,
            Field::CtIpv6DstLo,
        ] {
            let mut t = k;
            t.set(f, 1);
            assert!(t.has_tail(), "{f:?} is in the tail");
            assert_ne!(t.hash(), k.hash(), "{f:?} ignored by the hash");
            let (w, _, _) = f.layout();
            assert!(TAIL.contains(&w));
        }
        for f in [
            Field::RecircId,
            Field::CtState,
            Field::CtZone,
            Field::CtNwProto,
        ] {
            let (w, _, _) = f.layout();
            assert!(w < HEAD_WORDS, "{f:?} is in the head");
        }
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::Ipv4Dst);
        let mut other = k;
        other.set(Field::CtMark, 5);
        assert!(k.matches_head(&other, &m) && k.matches(&other, &m));
        m.set_exact(Field::CtMark);
        assert!(!k.matches(&other, &m));
    }

    #[test]
    fn tunnel_fields_are_tail_metadata_and_shown() {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 2);
        let plain = k;
        k.set(Field::TunId, 5);
        assert!(k.has_tail(), "tun_id is in the tail");
        assert_ne!(k.hash(), plain.hash());
        let mut k6 = plain;
        k6.set(Field::TunId, 6);
        assert_ne!(k.hash(), k6.hash(), "two VNIs hash apart");
        k.set(Field::TunSrc, 0x0a00_0002);
        k.set(Field::TunDst, 0x0a00_0001);
        for f in [Field::TunId, Field::TunSrc, Field::TunDst] {
            let (w, _, _) = f.layout();
            assert!(TUN_WORDS.contains(&w) && !CT_WORDS.contains(&w));
        }
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        m.set_exact(Field::TunId);
        assert!(!k.matches(&k6, &m), "a mask on tun_id tells VNIs apart");
        m.set_exact(Field::TunSrc);
        assert_eq!(
            k.masked(&m).match_string(&m),
            "in_port=2,tun_id=0x5,tun_src=10.0.0.2"
        );
    }

    #[test]
    fn ipv6_tunnel_addresses_are_tail_metadata_hashed_and_shown() {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 2);
        let plain = k;
        let src: u128 = "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        let dst: u128 = "fd00:1::2".parse::<std::net::Ipv6Addr>().unwrap().into();
        k.set(Field::TunIpv6SrcHi, (src >> 64) as u64);
        k.set(Field::TunIpv6SrcLo, src as u64);
        k.set(Field::TunIpv6DstHi, (dst >> 64) as u64);
        k.set(Field::TunIpv6DstLo, dst as u64);
        assert!(k.has_tail());
        for f in [
            Field::TunIpv6SrcHi,
            Field::TunIpv6SrcLo,
            Field::TunIpv6DstHi,
            Field::TunIpv6DstLo,
        ] {
            let (w, _, _) = f.layout();
            assert!(TUN_WORDS.contains(&w) && TAIL.contains(&w) && (19..23).contains(&w));
            let mut t = plain;
            t.set(f, 1);
            assert_ne!(t.hash(), plain.hash(), "{f:?} ignored by the hash");
        }
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        m.set_exact(Field::TunIpv6SrcHi);
        m.set_exact(Field::TunIpv6SrcLo);
        m.set(Field::TunIpv6DstHi, u64::MAX);
        assert_eq!(
            k.masked(&m).match_string(&m),
            "in_port=2,tun_ipv6_src=fd00::1,tun_ipv6_dst=fd00:1::/64"
        );
        let mut other = k;
        other.set(Field::TunIpv6SrcLo, 2);
        assert!(!k.matches(&other, &m));
    }

    #[test]
    fn match_string_shows_only_masked_fields() {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 1);
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Dst, 0x0a00_0100);
        k.set(Field::EthSrc, FlowKey::mac_to_u64([0, 1, 2, 3, 4, 5]));
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        m.set_exact(Field::EthType);
        m.set(Field::Ipv4Dst, 0xffff_ff00);
        assert_eq!(
            k.masked(&m).match_string(&m),
            "in_port=1,eth_type=0x0800,ipv4_dst=10.0.1.0/255.255.255.0"
        );
        assert_eq!(k.match_string(&FlowKey::ZERO), "*");
        let mut m6 = FlowKey::ZERO;
        m6.set_exact(Field::Ipv6DstHi);
        m6.set_exact(Field::Ipv6DstLo);
        let mut k6 = FlowKey::ZERO;
        k6.set(Field::Ipv6DstHi, 0x2001_0db8_0000_0000);
        k6.set(Field::Ipv6DstLo, 1);
        assert_eq!(k6.match_string(&m6), "ipv6_dst=2001:db8::1");
    }

    #[test]
    fn masked_match() {
        let mut a = FlowKey::ZERO;
        a.set(Field::Ipv4Dst, 0x0a00_0001);
        a.set(Field::TpDst, 80);
        let mut b = a;
        b.set(Field::TpDst, 443);
        let mut m = FlowKey::ZERO;
        m.set(Field::Ipv4Dst, 0xffff_ff00);
        assert!(a.matches(&b, &m));
        m.set_exact(Field::TpDst);
        assert!(!a.matches(&b, &m));
        assert_eq!(a.masked(&m).get(Field::Ipv4Dst), 0x0a00_0000);
    }
}
