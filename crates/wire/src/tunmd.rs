//! Geneve options as flow-key metadata (`tun_metadataN`, issue 12): a bridge's TLV map
//! ([`TlvTable`]: option class, type and length → field index `N`, as `ovs-ofctl
//! add-tlv-map` sets it) and where each mapped option's value lives in the key.
//!
//! Option values share [`SPACE`] bytes of the key (words [`crate::flow::TUN_MD_WORDS`],
//! byte `i` of the space in word `23 + i / 8`, big-endian within the word); the table hands
//! each mapping a contiguous run of its length when it is added (first fit) and takes it back
//! when it is deleted. A value is right-aligned big-endian in a `u128`: options of up to 16
//! bytes (a Vireo limit; OVS allows 124), at most [`SPACE`] bytes in all (OVS: 256). An
//! option absent from a packet reads as zero (OVS keeps a presence bit per option; Vireo's
//! key has no room left for them, so a match on `tun_metadataN=0` also matches a packet
//! without the option, and encapsulation sends the options whose value is not zero).
//!
//! Threads: plain data; the OpenFlow handler of a bridge owns its table (mutex) and
//! publishes copies for translation and decapsulation.
use crate::flow::{FlowKey, TUN_MD_WORDS};

/// Bytes of option values the key holds.
pub const SPACE: usize = 8 * (TUN_MD_WORDS.end - TUN_MD_WORDS.start);
/// `tun_metadataN` indexes (0..64).
pub const FIELDS: usize = 64;
/// Longest option value Vireo maps (bytes).
pub const MAX_OPT_LEN: usize = 16;

/// One mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Geneve option class.
    pub class: u16,
    /// Option type (the critical bit is bit 7).
    pub otype: u8,
    /// Value length in bytes (a multiple of 4, 4..=16).
    pub len: u8,
    /// Offset of the value in the key's option space.
    pub offset: u8,
}

/// Why a table change was refused (each is one of OVS's `NXTTMFC_*` errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlvError {
    /// Length not a multiple of 4, 0, or over 124 (`NXTTMFC_BAD_OPT_LEN`).
    BadOptLen,
    /// Index 64 or more (`NXTTMFC_BAD_FIELD_IDX`).
    BadFieldIdx,
    /// No room for the option's value (`NXTTMFC_TABLE_FULL`); includes options of 20..=124
    /// bytes, which OVS would take and Vireo's key cannot hold.
    TableFull,
    /// The index is mapped already (`NXTTMFC_ALREADY_MAPPED`).
    AlreadyMapped,
    /// The option (class, type) is mapped already (`NXTTMFC_DUP_ENTRY`).
    DupEntry,
}

/// A bridge's TLV map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlvTable {
    entries: Vec<Option<Entry>>,
}

impl TlvTable {
    /// An empty table.
    pub fn new() -> TlvTable {
        TlvTable {
            entries: vec![None; FIELDS],
        }
    }

    /// The mapping of `tun_metadata<index>`.
    pub fn get(&self, index: usize) -> Option<Entry> {
        self.entries.get(index).copied().flatten()
    }

    /// Every mapping as (index, entry), by index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Entry)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|e| (i, e)))
    }

    /// The index an option (class, type) is mapped to.
    pub fn find(&self, class: u16, otype: u8) -> Option<(usize, Entry)> {
        self.iter()
            .find(|(_, e)| e.class == class && e.otype == otype)
    }

    /// Option bytes in use.
    pub fn used(&self) -> usize {
        self.iter().map(|(_, e)| usize::from(e.len)).sum()
    }

    fn free_run(&self, len: usize) -> Option<usize> {
        let mut used = [false; SPACE];
        for (_, e) in self.iter() {
            for u in &mut used[usize::from(e.offset)..usize::from(e.offset) + usize::from(e.len)] {
                *u = true;
            }
        }
        (0..=SPACE.checked_sub(len)?).find(|&o| used[o..o + len].iter().all(|u| !u))
    }

    /// Adds mappings, all or none (as OVS: the first refusal leaves the table as it was).
    pub fn add(&mut self, maps: &[(u16, u8, u8, u16)]) -> Result<(), TlvError> {
        let mut next = self.clone();
        for &(class, otype, len, index) in maps {
            if len == 0 || !len.is_multiple_of(4) || len > 124 {
                return Err(TlvError::BadOptLen);
            }
            let index = usize::from(index);
            if index >= FIELDS {
                return Err(TlvError::BadFieldIdx);
            }
            if next.entries[index].is_some() {
                return Err(TlvError::AlreadyMapped);
            }
            if next.find(class, otype).is_some() {
                return Err(TlvError::DupEntry);
            }
            if usize::from(len) > MAX_OPT_LEN {
                return Err(TlvError::TableFull);
            }
            let offset = next.free_run(usize::from(len)).ok_or(TlvError::TableFull)?;
            next.entries[index] = Some(Entry {
                class,
                otype,
                len,
                offset: offset as u8,
            });
        }
        *self = next;
        Ok(())
    }

    /// Removes the mappings of `indexes` (unmapped ones are ignored, as OVS does).
    pub fn delete(&mut self, indexes: &[u16]) -> Result<(), TlvError> {
        if indexes.iter().any(|&i| usize::from(i) >= FIELDS) {
            return Err(TlvError::BadFieldIdx);
        }
        for &i in indexes {
            self.entries[usize::from(i)] = None;
        }
        Ok(())
    }

    /// Removes every mapping.
    pub fn clear(&mut self) {
        *self = TlvTable::new();
    }
}

fn byte_pos(i: usize) -> (usize, u32) {
    (TUN_MD_WORDS.start + i / 8, (7 - (i % 8) as u32) * 8)
}

/// Reads `len` bytes at `offset` of the option space as a right-aligned number.
pub fn get(k: &FlowKey, offset: usize, len: usize) -> u128 {
    (offset..offset + len).fold(0u128, |acc, i| {
        let (w, sh) = byte_pos(i);
        acc << 8 | u128::from((k.w[w] >> sh) as u8)
    })
}

/// Writes `len` bytes at `offset` of the option space from a right-aligned number.
pub fn set(k: &mut FlowKey, offset: usize, len: usize, v: u128) {
    for (n, i) in (offset..offset + len).enumerate() {
        let (w, sh) = byte_pos(i);
        let b = (v >> (8 * (len - 1 - n))) as u8;
        k.w[w] = (k.w[w] & !(0xffu64 << sh)) | u64::from(b) << sh;
    }
}

/// Whether `len` bytes at `offset` of the option space are all zero.
pub fn is_zero(k: &FlowKey, offset: usize, len: usize) -> bool {
    get(k, offset, len) == 0
}

/// Whether `t` maps option (class, type) with a value of `len` bytes (what decapsulation
/// understands; a mapped option of another length is treated as unknown).
pub fn knows(t: &TlvTable, class: u16, otype: u8, len: usize) -> bool {
    t.find(class, otype)
        .is_some_and(|(_, e)| usize::from(e.len) == len)
}

/// Copies the values of the Geneve options `t` knows (see [`knows`]) from a tunnel header
/// that `crate::tunnel::decap_any_with` accepted into `key`'s option space; other options
/// are skipped.
pub fn read_geneve(udp_payload: &[u8], t: &TlvTable, key: &mut FlowKey) {
    for (class, otype, v) in crate::tunnel::geneve_options(udp_payload) {
        if let Some((_, e)) = t.find(class, otype) {
            if usize::from(e.len) == v.len() {
                let n = v.iter().fold(0u128, |a, &b| a << 8 | u128::from(b));
                set(key, usize::from(e.offset), v.len(), n);
            }
        }
    }
}

/// The Geneve options to send for `key`'s option values under `t`: (class, type, value
/// bytes) per mapping, by index (the template leaves out those whose value is zero).
pub fn options_of(key: &FlowKey, t: &TlvTable) -> Vec<(u16, u8, Vec<u8>)> {
    t.iter()
        .map(|(_, e)| {
            let v = get(key, usize::from(e.offset), usize::from(e.len));
            let b = v.to_be_bytes()[16 - usize::from(e.len)..].to_vec();
            (e.class, e.otype, b)
        })
        .collect()
}

/// Sets every byte of every mapped option in `mask` (the megaflow depends on the values
/// encapsulation sends).
pub fn unwildcard(mask: &mut FlowKey, t: &TlvTable) {
    for (_, e) in t.iter() {
        let l = usize::from(e.len);
        set(mask, usize::from(e.offset), l, u128::MAX >> (128 - 8 * l));
    }
}

/// `tun_metadataN` fields of a key under `mask` as `name=value[/mask]` (ovs-ofctl's form:
/// hexadecimal without leading zeros), for the mappings of `t`.
pub fn format(k: &FlowKey, mask: &FlowKey, t: &TlvTable) -> Vec<String> {
    t.iter()
        .filter_map(|(i, e)| {
            let (o, l) = (usize::from(e.offset), usize::from(e.len));
            let m = get(mask, o, l);
            if m == 0 {
                return None;
            }
            let v = get(k, o, l) & m;
            let full = if l == 16 {
                u128::MAX
            } else {
                (1u128 << (8 * l)) - 1
            };
            Some(if m == full {
                format!("tun_metadata{i}={v:#x}")
            } else {
                format!("tun_metadata{i}={v:#x}/{m:#x}")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_take_space_first_fit_and_refuse_as_ovs() {
        let mut t = TlvTable::new();
        t.add(&[(0x102, 0x80, 4, 0), (0xffff, 1, 8, 1)]).unwrap();
        assert_eq!(t.get(0).unwrap().offset, 0);
        assert_eq!(t.get(1).unwrap().offset, 4);
        assert_eq!(t.add(&[(0x103, 0x80, 4, 0)]), Err(TlvError::AlreadyMapped));
        assert_eq!(t.add(&[(0x102, 0x80, 4, 5)]), Err(TlvError::DupEntry));
        assert_eq!(t.add(&[(0x102, 0x81, 6, 6)]), Err(TlvError::BadOptLen));
        assert_eq!(t.add(&[(0x102, 0x81, 128, 6)]), Err(TlvError::BadOptLen));
        assert_eq!(t.add(&[(0x102, 0x81, 4, 64)]), Err(TlvError::BadFieldIdx));
        assert_eq!(t.add(&[(0x102, 0x81, 124, 6)]), Err(TlvError::TableFull));
        // 12 + 16 fits the 32 bytes; another 8 does not, and the refusal adds nothing.
        t.add(&[(0x102, 0x82, 16, 2)]).unwrap();
        let before = t.clone();
        assert_eq!(
            t.add(&[(0x102, 0x83, 4, 3), (0x102, 0x84, 8, 4)]),
            Err(TlvError::TableFull)
        );
        assert_eq!(t, before);
        assert_eq!(t.used(), 28);
        // Freed space is reused.
        t.delete(&[1, 9]).unwrap();
        t.add(&[(0x102, 0x84, 8, 4)]).unwrap();
        assert_eq!(t.get(4).unwrap().offset, 4);
        t.clear();
        assert_eq!(t.iter().count(), 0);
    }

    #[test]
    fn geneve_options_are_read_into_the_key_by_the_map_and_written_back() {
        let mut t = TlvTable::new();
        t.add(&[(0x102, 0x80, 4, 0), (0x103, 0x01, 8, 2)]).unwrap();
        // Geneve header with options: mapped critical (0x102,0x80,4), unknown (0x999,1,4),
        // mapped (0x103,1) but 4 bytes long (treated as unknown).
        let mut p = vec![0u8; 8];
        p[0] = 6; // 6 words of options
        p[2..4].copy_from_slice(&0x6558u16.to_be_bytes());
        p.extend_from_slice(&[0x01, 0x02, 0x80, 1, 0, 0, 0x12, 0x34]);
        p.extend_from_slice(&[0x09, 0x99, 0x01, 1, 9, 9, 9, 9]);
        p.extend_from_slice(&[0x01, 0x03, 0x01, 1, 7, 7, 7, 7]);
        p.extend_from_slice(&[0u8; 14]);
        let known = |c, ty, l| knows(&t, c, ty, l);
        assert_eq!(
            crate::tunnel::decap_any_with(crate::tunnel::TunnelKind::Geneve, &p, known),
            Ok((32, 0))
        );
        // Without the map the critical option refuses the packet.
        assert_eq!(
            crate::tunnel::decap_any(crate::tunnel::TunnelKind::Geneve, &p),
            Err(crate::tunnel::DecapError::CriticalOption)
        );
        let mut k = FlowKey::ZERO;
        read_geneve(&p, &t, &mut k);
        assert_eq!(get(&k, 0, 4), 0x1234);
        assert_eq!(
            get(&k, 4, 8),
            0,
            "a length other than the map's is not read"
        );
        let opts = options_of(&k, &t);
        assert_eq!(opts[0], (0x102, 0x80, vec![0, 0, 0x12, 0x34]));
        let mut m = FlowKey::ZERO;
        unwildcard(&mut m, &t);
        assert_eq!(get(&m, 0, 4), 0xffff_ffff);
        assert_eq!(get(&m, 4, 8), u128::from(u64::MAX));
        assert_eq!(get(&m, 12, 4), 0);
    }

    #[test]
    fn values_go_to_their_bytes_and_show_as_ovs_ofctl_writes_them() {
        let mut t = TlvTable::new();
        t.add(&[(0x102, 0x80, 4, 0), (0x102, 0x81, 16, 3)]).unwrap();
        let mut k = FlowKey::ZERO;
        let mut m = FlowKey::ZERO;
        set(&mut k, 0, 4, 0x1234);
        set(&mut m, 0, 4, 0xffff_ffff);
        set(&mut k, 4, 16, 0xabcdef);
        set(&mut m, 4, 16, u128::MAX);
        assert_eq!(get(&k, 0, 4), 0x1234);
        assert_eq!(get(&k, 4, 16), 0xabcdef);
        assert_eq!(k.w[TUN_MD_WORDS.start], 0x0000_1234_0000_0000);
        assert!(k.has_tail());
        assert_eq!(
            format(&k, &m, &t),
            ["tun_metadata0=0x1234", "tun_metadata3=0xabcdef"]
        );
        set(&mut m, 0, 4, 0xff00);
        assert_eq!(format(&k, &m, &t)[0], "tun_metadata0=0x1200/0xff00");
    }
}
