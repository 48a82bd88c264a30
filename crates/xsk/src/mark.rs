//! XDP metadata marks (`xdp-mark`): the section of Vireo's XDP program that puts a flow hash
//! and, when the mark map has an entry for the frame's IPv4 5-tuple, a 32-bit mark into the
//! metadata area in front of the frame (`bpf_xdp_adjust_meta`), the mark map, and the reading
//! of that area on the rx side.
//!
//! The metadata is [`META_LEN`] bytes right before the frame: `mark` (u32, 0 = none), `hash`
//! (u32, 0 = none: not IPv4 without options), `magic` (u32, [`META_MAGIC`]), all in host
//! order. The rx side reads it only when the magic is there and then clears the magic (the
//! frame is ours at that moment), so a frame the program did not mark (no room for metadata,
//! or a driver without metadata support) never shows an older frame's metadata.
//!
//! The hash is Vireo's own mix of the IPv4 source and destination addresses, the TCP/UDP port
//! word (0 for other protocols) and the protocol number, with 32-bit multiplies
//! ([`flow_hash`] is the same function in Rust); it is a hint for software that wants a
//! per-flow hash without parsing, never trusted for correctness.
//!
//! Threads: program building and map updates on the control thread; [`read_meta`] on the PMD
//! that receives the frame.
use crate::bpf::MapShape;
use crate::steer::{create_map, map_entries, Asm};
use crate::sys::{bpf, Attr};
use crate::Error;
use std::os::fd::{AsRawFd, OwnedFd};

const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_XDP_ADJUST_META: i32 = 54;

/// Bytes of metadata in front of a marked frame.
pub const META_LEN: usize = 12;
/// The last 4 bytes of Vireo's metadata ("VRM1" as a little-endian word).
pub const META_MAGIC: u32 = u32::from_le_bytes(*b"VRM1");
/// Most 5-tuples the mark map holds (as OVS bounds its marks).
pub const MARK_MAP_ENTRIES: u32 = 8192;

/// EtherType 0x0800 as a 16-bit load of its two wire bytes gives it in host order.
const ETH_P_IP_LOADED: i32 = u16::from_ne_bytes([0x08, 0x00]) as i32;
const M1: u32 = 0x9e37_79b1;
const M2: u32 = 0x85eb_ca6b;
const M3: u32 = 0xc2b2_ae35;

/// What the program put in front of a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpMeta {
    /// The flow hash (0: none).
    pub hash: u32,
    /// The mark (0: none).
    pub mark: u32,
}

/// An IPv4 5-tuple as the mark map keys it: addresses and ports as they are on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address (network order bytes).
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Source port (host order).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol (6 TCP, 17 UDP).
    pub proto: u8,
}

impl FiveTuple {
    /// The 16-byte key: src, dst, the two ports as on the wire, proto, three zero bytes.
    fn key(&self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[0..4].copy_from_slice(&self.src);
        k[4..8].copy_from_slice(&self.dst);
        k[8..10].copy_from_slice(&self.sport.to_be_bytes());
        k[10..12].copy_from_slice(&self.dport.to_be_bytes());
        k[12] = self.proto;
        k
    }

    /// The tuple a 16-byte key ([`FiveTuple::key`]) names.
    fn from_key(k: &[u8]) -> FiveTuple {
        FiveTuple {
            src: [k[0], k[1], k[2], k[3]],
            dst: [k[4], k[5], k[6], k[7]],
            sport: u16::from_be_bytes([k[8], k[9]]),
            dport: u16::from_be_bytes([k[10], k[11]]),
            proto: k[12],
        }
    }
}

/// The hash the program computes, from the frame's bytes: `None` when it computes none
/// (shorter than 38 bytes, not IPv4, or IPv4 with options).
pub fn flow_hash(frame: &[u8]) -> Option<u32> {
    if frame.len() < 38 || frame[12..14] != [8, 0] || frame[14] != 0x45 {
        return None;
    }
    // Host order, as the program's loads read them.
    let w = |o: usize| u32::from_ne_bytes([frame[o], frame[o + 1], frame[o + 2], frame[o + 3]]);
    let proto = u32::from(frame[23]);
    let ports = if proto == 6 || proto == 17 { w(34) } else { 0 };
    let mut h = w(26).wrapping_mul(M1) ^ w(30);
    h = h.wrapping_mul(M2) ^ ports;
    h = h.wrapping_mul(M3) ^ proto;
    h ^= h >> 16;
    Some(if h == 0 { 1 } else { h })
}

/// Whether this kernel's verifier lets an XDP program call `bpf_xdp_adjust_meta`, which
/// `xdp-mark=on` needs: loads (and drops) a four-instruction program that calls it. Some
/// kernels refuse the helper to every XDP program ("program of this type cannot use helper
/// bpf_xdp_adjust_meta#54", seen on 6.18.44-fc-v1300, which allows `bpf_xdp_adjust_head`);
/// there a port with `xdp-mark=on` is refused with the verifier's words.
pub fn kernel_allows_meta() -> bool {
    let mut a = Asm::default();
    a.movi(2, -(META_LEN as i32))
        .call(BPF_FUNC_XDP_ADJUST_META)
        .movi(0, 2) // XDP_PASS
        .exit();
    crate::bpf::load(&a.finish()).is_ok()
}

/// Emits the metadata section (registers: r6 = ctx kept, r7 kept; r8, r9 and r0-r5 used).
/// Every way out of it goes to the instruction after it.
pub(crate) fn emit(a: &mut Asm, marks: i32) {
    // bpf_xdp_adjust_meta(ctx, -META_LEN); no room (or no support): no metadata.
    a.mov(1, 6)
        .movi(2, -(META_LEN as i32))
        .call(BPF_FUNC_XDP_ADJUST_META)
        .jump(0x55, 0, 0, 0, "mark_done"); // if r0 != 0 goto mark_done

    // r9 = data_meta, r8 = data (struct xdp_md: data 0, data_end 4, data_meta 8); the
    // verifier allows the metadata writes only after data_meta + META_LEN <= data.
    a.op(0x61, 9, 6, 8, 0)
        .op(0x61, 8, 6, 0, 0)
        .mov(4, 9)
        .addi(4, META_LEN as i32)
        .jump(0x2d, 4, 8, 0, "mark_done"); // if r4 > r8 goto mark_done

    // mark = 0, hash = 0, magic.
    a.op(0x62, 9, 0, 0, 0) // *(u32 *)(r9 + 0) = 0
        .op(0x62, 9, 0, 4, 0) // *(u32 *)(r9 + 4) = 0
        .op(0x62, 9, 0, 8, META_MAGIC as i32); // *(u32 *)(r9 + 8) = magic

    // The IPv4 header with its 4 port bytes must be there: data + 38 <= data_end, EtherType
    // 0x0800 (loaded in host order), version 4 with a 20-byte header.
    a.op(0x61, 5, 6, 4, 0) // r5 = data_end
        .mov(4, 8)
        .addi(4, 38)
        .jump(0x2d, 4, 5, 0, "mark_done") // if r4 > r5 goto mark_done
        .op(0x69, 4, 8, 12, 0) // r4 = *(u16 *)(data + 12)
        .jump(0x55, 4, 0, ETH_P_IP_LOADED, "mark_done")
        .op(0x71, 4, 8, 14, 0) // r4 = *(u8 *)(data + 14)
        .jump(0x55, 4, 0, 0x45, "mark_done");

    // r1 = src, r2 = dst, r3 = ports (0 unless TCP or UDP), r4 = proto.
    a.op(0x61, 1, 8, 26, 0)
        .op(0x61, 2, 8, 30, 0)
        .op(0x61, 3, 8, 34, 0)
        .op(0x71, 4, 8, 23, 0)
        .jump(0x15, 4, 0, 6, "mark_ports") // TCP
        .jump(0x15, 4, 0, 17, "mark_ports") // UDP
        .movi(3, 0)
        .label("mark_ports");

    // The mark map key on the stack at r10 - 32: src, dst, ports, proto, three zero bytes.
    a.op(0x63, 10, 1, -32, 0)
        .op(0x63, 10, 2, -28, 0)
        .op(0x63, 10, 3, -24, 0)
        .op(0x63, 10, 4, -20, 0); // proto as a u32: its three high bytes are zero

    // The hash, in 32-bit arithmetic: h = ((src·M1 ^ dst)·M2 ^ ports)·M3 ^ proto;
    // h ^= h >> 16; 0 becomes 1 (0 means "no hash").
    a.op(0x24, 1, 0, 0, M1 as i32) // w1 *= M1
        .op(0xac, 1, 2, 0, 0) // w1 ^= w2
        .op(0x24, 1, 0, 0, M2 as i32)
        .op(0xac, 1, 3, 0, 0)
        .op(0x24, 1, 0, 0, M3 as i32)
        .op(0xac, 1, 4, 0, 0)
        .op(0xbc, 5, 1, 0, 0) // w5 = w1
        .op(0x74, 5, 0, 0, 16) // w5 >>= 16
        .op(0xac, 1, 5, 0, 0) // w1 ^= w5
        .jump(0x55, 1, 0, 0, "mark_hash_ok")
        .movi(1, 1)
        .label("mark_hash_ok")
        .op(0x63, 9, 1, 4, 0); // *(u32 *)(meta + 4) = hash

    // r0 = marks[key]; an entry: *(u32 *)(meta + 0) = its mark.
    a.mov(2, 10)
        .addi(2, -32)
        .ld_map(1, marks)
        .call(BPF_FUNC_MAP_LOOKUP_ELEM)
        .jump(0x15, 0, 0, 0, "mark_done")
        .op(0x61, 1, 0, 0, 0)
        .op(0x63, 9, 1, 0, 0);
    a.label("mark_done");
}

/// The mark map: 5-tuple → mark.
#[derive(Debug)]
pub(crate) struct MarkMap {
    pub(crate) fd: OwnedFd,
}

impl MarkMap {
    /// The mark map's shape.
    pub(crate) const SHAPE: MapShape = MapShape {
        what: "mark map",
        kind: BPF_MAP_TYPE_HASH,
        key: 16,
        value: 4,
        entries: MARK_MAP_ENTRIES,
    };

    /// Every entry of the map: 5-tuple → mark.
    pub(crate) fn entries(&self) -> Result<Vec<(FiveTuple, u32)>, Error> {
        Ok(map_entries(&self.fd, 16, 4, MARK_MAP_ENTRIES as usize)?
            .into_iter()
            .map(|(k, v)| {
                (
                    FiveTuple::from_key(&k),
                    u32::from_ne_bytes([v[0], v[1], v[2], v[3]]),
                )
            })
            .collect())
    }

    pub(crate) fn create() -> Result<MarkMap, Error> {
        Ok(MarkMap {
            fd: create_map(BPF_MAP_TYPE_HASH, 16, 4, MARK_MAP_ENTRIES, "vireo_marks")?,
        })
    }

    /// Marks frames of `t` with `mark` (not 0).
    pub(crate) fn set(&self, t: &FiveTuple, mark: u32) -> Result<(), Error> {
        if mark == 0 {
            return Err(Error("mark 0 means no mark".into()));
        }
        let key = t.key();
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, &mark as *const u32 as u64)
            .u64(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(|_| ())
            .map_err(|e| Error::os("update the mark map", e))
    }

    /// Removes `t`'s mark; true if it had one.
    pub(crate) fn del(&self, t: &FiveTuple) -> bool {
        let key = t.key();
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64);
        bpf(BPF_MAP_DELETE_ELEM, &mut a).is_ok()
    }
}

/// The metadata in `before` (the [`META_LEN`] bytes in front of a frame, inside its UMEM
/// frame), if the program wrote it.
pub(crate) fn read_meta(before: &[u8]) -> Option<XdpMeta> {
    let w = |o: usize| u32::from_ne_bytes([before[o], before[o + 1], before[o + 2], before[o + 3]]);
    (before.len() == META_LEN && w(8) == META_MAGIC).then(|| XdpMeta {
        mark: w(0),
        hash: w(4),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[8, 0]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn hash_sees_the_five_tuple_and_only_ipv4_without_options() {
        let a = udp([10, 0, 0, 1], [10, 0, 0, 2], 1000, 9);
        let h = flow_hash(&a).unwrap();
        assert_ne!(h, 0);
        for b in [
            udp([10, 0, 0, 3], [10, 0, 0, 2], 1000, 9),
            udp([10, 0, 0, 1], [10, 0, 0, 4], 1000, 9),
            udp([10, 0, 0, 1], [10, 0, 0, 2], 1001, 9),
            udp([10, 0, 0, 1], [10, 0, 0, 2], 1000, 10),
        ] {
            assert_ne!(flow_hash(&b), Some(h));
        }
        let mut opts = a.clone();
        opts[14] = 0x46;
        assert_eq!(flow_hash(&opts), None);
        let mut v6 = a.clone();
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(flow_hash(&v6), None);
        assert_eq!(flow_hash(&a[..37]), None);
    }

    #[test]
    fn meta_needs_the_magic() {
        let mut m = [0u8; META_LEN];
        m[0..4].copy_from_slice(&7u32.to_ne_bytes());
        m[4..8].copy_from_slice(&99u32.to_ne_bytes());
        assert_eq!(read_meta(&m), None);
        m[8..12].copy_from_slice(&META_MAGIC.to_ne_bytes());
        assert_eq!(read_meta(&m), Some(XdpMeta { hash: 99, mark: 7 }));
        assert_eq!(read_meta(&m[1..]), None);
    }
}
