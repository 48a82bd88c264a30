//! Translation of the conntrack actions and of a recirculated packet: `ct(...)` becomes the
//! datapath's `Action::Ct` (zone from an immediate or a register, commit, force, NAT,
//! `exec(set_field:..->ct_mark/ct_label)`), `ct(table=N)` freezes the walk into a
//! recirculation id ([`crate::recirc`]), and a packet arriving with that id resumes the walk at
//! table N with the registers it had.
//!
//! Actions after `ct(table=N)` in the same walk fork the packet, as in OVS: a copy goes
//! through conntrack and recirculates, and the walk goes on for the packet itself with its
//! conntrack fields cleared (untracked); the `Ct` action is marked `fork` when translation
//! ends with actions after it. Departure from OVS: the OpenFlow 1.3 action set of a walk
//! that met `ct(table=N)` is not executed (OVS carries it into the recirculation).
//!
//! Threads: like [`super::Xlate`], the PMD thread doing the upcall (or the control thread
//! re-checking a megaflow).

use super::Xlate;
use crate::nx::{ones, CtAction, CtZone, NatKind, NatSpec, NxField};
use crate::recirc::Frozen;
use crate::types::{OfAction, SetField};
use dpif::conntrack;
use dpif::{Action, CtSpec};
use std::net::IpAddr;
use wire::Field;

/// The conntrack core's NAT request for a rule's `nat(...)`.
pub fn nat_of(n: Option<&NatSpec>) -> conntrack::Nat {
    use conntrack::{Nat, NatDir, PortSel};
    let Some(n) = n else { return Nat::Off };
    let (Some(kind), Some(lo)) = (n.kind, n.addr_min) else {
        return Nat::Existing;
    };
    let hi = n.addr_max.unwrap_or(lo);
    let (v6, lo, hi) = match (lo, hi) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (false, u128::from(u32::from(a)), u128::from(u32::from(b)))
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (true, u128::from(a), u128::from(b)),
        // Refused when the rule is added (see `tables::check_action`).
        _ => return Nat::Existing,
    };
    let port_lo = n.port_min.unwrap_or(0);
    Nat::Set(conntrack::NatSpec {
        dir: match kind {
            NatKind::Src => NatDir::Src,
            NatKind::Dst => NatDir::Dst,
        },
        v6,
        addr_lo: lo,
        addr_hi: hi,
        port_lo,
        port_hi: n.port_max.unwrap_or(port_lo),
        persistent: n.persistent,
        sel: if n.random {
            PortSel::Random
        } else {
            PortSel::Hash
        },
    })
}

/// Folds `value/mask` into an optional (value, mask) pair (later writes win their bits).
fn merge<T>(cur: &mut Option<(T, T)>, value: T, mask: T)
where
    T: Copy
        + std::ops::BitAnd<Output = T>
        + std::ops::BitOr<Output = T>
        + std::ops::Not<Output = T>
        + Default,
{
    let (v0, m0) = cur.unwrap_or((T::default(), T::default()));
    *cur = Some(((v0 & !mask) | (value & mask), m0 | mask));
}

impl<'a> Xlate<'a> {
    /// Where the walk starts: table 0 for a packet from a port; for a recirculated packet
    /// (`recirc_id` set), the table and registers frozen by its `ct(table=N)`. `None`: an id
    /// this bridge never handed out (the packet is dropped). The datapath matches every
    /// megaflow's `recirc_id` exactly, so the walk does not add it to the mask.
    pub(super) fn resume(&mut self) -> Option<u8> {
        let id = self.key.get(Field::RecircId) as u32;
        if id == 0 {
            return Some(0);
        }
        let st = self.recirc.and_then(|t| t.state(id))?;
        if st.bridge != self.br.id {
            return None;
        }
        self.regs = st.regs;
        // Registers restored from before the recirculation: not the packet as it arrived.
        self.modified = true;
        Some(st.table)
    }

    /// `ct(...)`.
    pub(super) fn xlate_ct(&mut self, ct: &CtAction) {
        // The datapath packet must carry every change made so far before conntrack sees it.
        self.commit_vlan();
        self.commit_tun();
        let zone = match ct.zone {
            CtZone::Imm(z) => z,
            CtZone::Field { field, ofs, nbits } => {
                let m = ones(u32::from(nbits)) << ofs;
                ((self.read_field(field, m) & m) >> ofs) as u16
            }
        };
        let mut a = conntrack::CtAction {
            zone,
            commit: ct.commit,
            force: ct.force,
            nat: nat_of(ct.nat.as_ref()),
            mark: None,
            label: None,
        };
        for e in &ct.exec {
            match *e {
                OfAction::SetField(SetField::Nx(NxField::CtMark, v)) => {
                    merge(&mut a.mark, v as u32, u32::MAX)
                }
                OfAction::SetField(SetField::Nx(NxField::CtLabel, v)) => {
                    merge(&mut a.label, v, u128::MAX)
                }
                OfAction::RegLoad {
                    dst: NxField::CtMark,
                    ofs,
                    nbits,
                    value,
                } => {
                    let m = ones(u32::from(nbits)) << ofs;
                    merge(&mut a.mark, (value << ofs) as u32, m as u32)
                }
                OfAction::RegLoad {
                    dst: NxField::CtLabel,
                    ofs,
                    nbits,
                    value,
                } => {
                    let m = ones(u32::from(nbits)) << ofs;
                    merge(&mut a.label, value << ofs, m)
                }
                // The codec and the parser admit nothing else in exec().
                _ => {}
            }
        }
        let recirc = match ct.table {
            None => None,
            Some(table) => {
                let st = Frozen {
                    bridge: self.br.id,
                    table,
                    regs: self.regs,
                };
                match self.recirc.and_then(|r| r.id_of(st)) {
                    Some(id) => Some(id),
                    None => {
                        // No recirculation table, or it is full: drop (counted).
                        self.limit_hit = true;
                        return;
                    }
                }
            }
        };
        self.out.push(Action::Ct(Box::new(CtSpec {
            ct: a,
            recirc,
            fork: false,
        })));
        if recirc.is_some() {
            // The copy resumes in table N after recirculation; whatever follows here runs on
            // the packet itself, untracked (a fork once something does follow).
            self.forks.push(self.out.len() - 1);
            self.aset_dropped = true;
            dpif_clear(&mut self.key);
        }
    }

    /// At the end of the walk: each `ct(table=N)` that actions follow becomes a fork.
    pub(super) fn mark_forks(&mut self) {
        let n = self.out.len();
        for i in std::mem::take(&mut self.forks) {
            if i + 1 < n {
                if let Some(Action::Ct(spec)) = self.out.get_mut(i) {
                    spec.fork = spec.recirc.is_some();
                }
            }
        }
    }

    /// `ct_clear`: the datapath forgets the packet's conntrack fields; later lookups of this
    /// walk see them cleared.
    pub(super) fn xlate_ct_clear(&mut self) {
        self.out.push(Action::CtClear);
        dpif_clear(&mut self.key);
    }
}

/// Zeroes the conntrack fields of a key (not `recirc_id`).
fn dpif_clear(key: &mut wire::FlowKey) {
    for f in [
        Field::CtState,
        Field::CtNwProto,
        Field::CtZone,
        Field::CtMark,
        Field::CtTpSrc,
        Field::CtTpDst,
        Field::CtLabelHi,
        Field::CtLabelLo,
        Field::CtIpv6SrcHi,
        Field::CtIpv6SrcLo,
        Field::CtIpv6DstHi,
        Field::CtIpv6DstLo,
    ] {
        key.set(f, 0);
    }
}
