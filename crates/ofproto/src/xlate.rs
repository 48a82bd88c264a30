//! Translation: walks a bridge's OpenFlow tables for one packet and produces datapath actions
//! plus the megaflow mask (every key bit the decision consulted).
//!
//! The walk keeps the packet's *current* key (modified by set-field / VLAN actions; in_port in
//! OpenFlow numbering) for lookups, and a separate wildcard mask `wc` over the *original* key.
//! Consulting a field that an earlier action rewrote still marks the original bits: more
//! specific than needed, never wrong. VLAN changes are committed lazily (pop/push emitted just
//! before an output), so `mod_vlan_vid` + `mod_vlan_pcp` cost one pop+push.
//!
//! Owns: [`Xlate`] (a per-upcall scratch context). Threads: runs on the PMD thread doing the
//! upcall, under the bridge's table read lock; NORMAL takes the MAC table mutex briefly.

use crate::bridge::BridgeState;
use crate::classifier::Rule;
use crate::tables::FlowTables;
use crate::types::{ethertype, ofpp, Instruction, OfAction, OfPort, PacketInReason, SetField};
use crate::types::{VLAN_PRESENT, VLAN_VID_MASK};
use dp::Action;
use std::time::Instant;
use wire::{Field, FlowKey};

/// Packs what a packet-in needs into a datapath userspace cookie:
/// bits 0..32 rule serial, 32..40 table id, 40..48 reason, 48..64 bridge id.
pub fn encode_cookie(bridge: u16, reason: PacketInReason, table: u8, serial: u32) -> u64 {
    u64::from(serial) | u64::from(table) << 32 | (reason as u64) << 40 | u64::from(bridge) << 48
}

/// Inverse of [`encode_cookie`]: (bridge id, reason, table id, rule serial).
pub fn decode_cookie(c: u64) -> (u16, PacketInReason, u8, u32) {
    let reason = if (c >> 40) & 0xff == 0 {
        PacketInReason::NoMatch
    } else {
        PacketInReason::Action
    };
    ((c >> 48) as u16, reason, (c >> 32) as u8, c as u32)
}

/// OpenFlow action set (OF1.3 5.10): at most one action of each kind, run in a fixed order when
/// the pipeline ends.
#[derive(Default)]
struct ActionSet {
    pop: bool,
    push: Option<u16>,
    sets: Vec<SetField>,
    output: Option<OfAction>,
}

impl ActionSet {
    fn write(&mut self, actions: &[OfAction]) {
        for a in actions {
            match *a {
                OfAction::PopVlan => self.pop = true,
                OfAction::PushVlan(t) => self.push = Some(t),
                OfAction::SetField(sf) => {
                    self.sets.retain(|s| s.kind() != sf.kind());
                    self.sets.push(sf);
                }
                OfAction::Output { .. } => self.output = Some(*a),
            }
        }
    }
}

/// Scratch state of one translation.
pub struct Xlate<'a> {
    pub(crate) br: &'a BridgeState,
    tables: &'a FlowTables,
    pub(crate) now: Instant,
    pub(crate) in_dp: u32,
    pub(crate) in_of: OfPort,
    /// Current packet state (in_port = OpenFlow port).
    pub(crate) key: FlowKey,
    /// VLAN TCI the datapath packet carries at this point of the action list.
    committed_tci: u16,
    /// Bits of the original key consulted.
    pub(crate) wc: FlowKey,
    pub(crate) out: Vec<Action>,
    /// Rules that matched, in walk order (for counters).
    pub(crate) hits: Vec<&'a Rule>,
    /// NORMAL learned a new MAC or saw a move (stale megaflows must be revalidated).
    pub(crate) mac_changed: bool,
    /// False for accounting walks: NORMAL must not learn.
    pub(crate) learn: bool,
    cur_table: u8,
    cur_rule: Option<&'a Rule>,
}

impl<'a> Xlate<'a> {
    /// A context for a packet with datapath key `dp_key` entering on OpenFlow port `in_of`.
    pub(crate) fn new(
        br: &'a BridgeState,
        tables: &'a FlowTables,
        dp_key: &FlowKey,
        in_of: OfPort,
        now: Instant,
    ) -> Xlate<'a> {
        let mut key = *dp_key;
        let in_dp = dp_key.get(Field::InPort) as u32;
        key.set(Field::InPort, u64::from(in_of));
        let mut wc = FlowKey::ZERO;
        wc.set_exact(Field::InPort);
        Xlate {
            br,
            tables,
            now,
            in_dp,
            in_of,
            committed_tci: key.get(Field::VlanTci) as u16,
            key,
            wc,
            out: Vec::new(),
            hits: Vec::new(),
            mac_changed: false,
            learn: true,
            cur_table: 0,
            cur_rule: None,
        }
    }

    /// Runs the pipeline from table 0.
    pub(crate) fn run(&mut self) {
        let mut table = 0u8;
        let mut aset = ActionSet::default();
        loop {
            let Some(rule) = self.tables.table(table).lookup(&self.key, &mut self.wc) else {
                return; // table miss without a table-miss rule: drop (OF1.3)
            };
            let rule: &'a Rule = rule;
            self.hits.push(rule);
            self.cur_table = table;
            self.cur_rule = Some(rule);
            let mut next = None;
            for inst in &rule.instructions {
                match inst {
                    Instruction::ApplyActions(acts) => acts.iter().for_each(|a| self.exec(a)),
                    Instruction::ClearActions => aset = ActionSet::default(),
                    Instruction::WriteActions(acts) => aset.write(acts),
                    Instruction::GotoTable(t) => next = Some(*t),
                }
            }
            match next {
                Some(t) if t > table => table = t,
                _ => break,
            }
        }
        self.exec_set(aset);
    }

    fn exec_set(&mut self, set: ActionSet) {
        if set.pop {
            self.exec(&OfAction::PopVlan);
        }
        if let Some(t) = set.push {
            self.exec(&OfAction::PushVlan(t));
        }
        for sf in &set.sets {
            self.exec(&OfAction::SetField(*sf));
        }
        if let Some(o) = set.output {
            self.exec(&o);
        }
    }

    fn tci(&self) -> u16 {
        self.key.get(Field::VlanTci) as u16
    }

    fn set_tci(&mut self, tci: u16) {
        self.key.set(Field::VlanTci, u64::from(tci));
    }

    /// Executes one OpenFlow action.
    pub(crate) fn exec(&mut self, a: &OfAction) {
        match *a {
            OfAction::Output { port, .. } => self.output(port),
            OfAction::PushVlan(tpid) => {
                self.wc.set_exact(Field::VlanTci);
                if tpid != ethertype::VLAN {
                    return; // 802.1ad is not executed by the datapath
                }
                let tci = self.tci();
                if tci & VLAN_PRESENT == 0 {
                    self.set_tci(VLAN_PRESENT);
                } else {
                    // Q-in-Q: a second tag copying the outer one; the key keeps tracking the
                    // outer tag, which is unchanged.
                    self.commit_vlan();
                    self.out.push(Action::PushVlan(tci));
                }
            }
            OfAction::PopVlan => {
                self.wc.set_exact(Field::VlanTci);
                self.set_tci(0);
            }
            OfAction::SetField(sf) => self.set_field(sf),
        }
    }

    fn eth_type_is(&mut self, types: &[u16]) -> bool {
        self.wc.set_exact(Field::EthType);
        types.contains(&(self.key.get(Field::EthType) as u16))
    }

    fn l4_is(&mut self, proto: u8) -> bool {
        if !self.eth_type_is(&[ethertype::IPV4, ethertype::IPV6]) {
            return false;
        }
        self.wc.set_exact(Field::IpProto);
        if self.key.get(Field::IpProto) != u64::from(proto) {
            return false;
        }
        // A later fragment has no L4 header to rewrite.
        self.wc.set(Field::IpFrag, self.wc.get(Field::IpFrag) | 2);
        self.key.get(Field::IpFrag) & 2 == 0
    }

    fn set_field(&mut self, sf: SetField) {
        use crate::types::ipproto::{TCP, UDP};
        let (field, value, action) = match sf {
            SetField::EthSrc(m) => (Field::EthSrc, FlowKey::mac_to_u64(m), Action::SetEthSrc(m)),
            SetField::EthDst(m) => (Field::EthDst, FlowKey::mac_to_u64(m), Action::SetEthDst(m)),
            SetField::VlanVid(vid) => {
                self.wc.set_exact(Field::VlanTci);
                let tci = self.tci() | VLAN_PRESENT;
                self.set_tci((tci & !VLAN_VID_MASK) | (vid & VLAN_VID_MASK));
                return;
            }
            SetField::VlanPcp(pcp) => {
                self.wc.set_exact(Field::VlanTci);
                let tci = self.tci() | VLAN_PRESENT;
                self.set_tci((tci & 0x1fff) | (u16::from(pcp & 7) << 13));
                return;
            }
            SetField::Ipv4Src(a) if self.eth_type_is(&[ethertype::IPV4]) => {
                (Field::Ipv4Src, u64::from(a), Action::SetIpv4Src(a))
            }
            SetField::Ipv4Dst(a) if self.eth_type_is(&[ethertype::IPV4]) => {
                (Field::Ipv4Dst, u64::from(a), Action::SetIpv4Dst(a))
            }
            SetField::IpDscp(d) if self.eth_type_is(&[ethertype::IPV4]) => {
                let tos = (self.key.get(Field::IpTos) & 3) | (u64::from(d & 0x3f) << 2);
                (Field::IpTos, tos, Action::SetIpDscp(d & 0x3f))
            }
            SetField::TcpSrc(p) if self.l4_is(TCP) => (Field::TpSrc, p.into(), Action::SetTpSrc(p)),
            SetField::TcpDst(p) if self.l4_is(TCP) => (Field::TpDst, p.into(), Action::SetTpDst(p)),
            SetField::UdpSrc(p) if self.l4_is(UDP) => (Field::TpSrc, p.into(), Action::SetTpSrc(p)),
            SetField::UdpDst(p) if self.l4_is(UDP) => (Field::TpDst, p.into(), Action::SetTpDst(p)),
            _ => return, // prerequisite not met for this packet: skip the action
        };
        self.key.set(field, value);
        self.out.push(action);
    }

    /// Emits the pop/push that brings the datapath packet's VLAN to the key's.
    fn commit_vlan(&mut self) {
        let want = self.tci();
        if want == self.committed_tci {
            return;
        }
        self.wc.set_exact(Field::VlanTci);
        if self.committed_tci & VLAN_PRESENT != 0 {
            self.out.push(Action::PopVlan);
        }
        if want & VLAN_PRESENT != 0 {
            self.out.push(Action::PushVlan(want));
        }
        self.committed_tci = want;
    }

    /// Outputs to a datapath port with the key's current VLAN.
    pub(crate) fn emit_output(&mut self, dp_port: u32) {
        self.commit_vlan();
        self.out.push(Action::Output(dp_port));
    }

    /// The TCI the datapath packet carries now (NORMAL orders its outputs by it).
    pub(crate) fn committed_tci(&self) -> u16 {
        self.committed_tci
    }

    fn output(&mut self, port: OfPort) {
        match port {
            ofpp::IN_PORT => self.emit_output(self.in_dp),
            ofpp::NORMAL => crate::normal::xlate_normal(self),
            ofpp::FLOOD | ofpp::ALL => {
                let (br, in_of) = (self.br, self.in_of);
                for p in br.ports.iter().filter(|p| p.ofport != in_of) {
                    self.emit_output(p.dp_port);
                }
            }
            ofpp::CONTROLLER => {
                self.commit_vlan();
                let rule = self.cur_rule;
                let table_miss = rule.is_some_and(|r| r.priority == 0 && r.match_.mask.w == [0; 9]);
                let reason = if table_miss {
                    PacketInReason::NoMatch
                } else {
                    PacketInReason::Action
                };
                let serial = rule.map_or(0, |r| r.serial);
                let cookie = encode_cookie(self.br.id, reason, self.cur_table, serial);
                self.out.push(Action::Userspace(cookie));
            }
            p if p == self.in_of => {} // OpenFlow: output to the ingress port needs IN_PORT
            p => {
                if let Some(dp_port) = self.br.ports.get(p).map(|c| c.dp_port) {
                    self.emit_output(dp_port);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trip() {
        let c = encode_cookie(7, PacketInReason::Action, 3, 0xdead_beef);
        assert_eq!(
            decode_cookie(c),
            (7, PacketInReason::Action, 3, 0xdead_beef)
        );
        let c = encode_cookie(0, PacketInReason::NoMatch, 254, 1);
        assert_eq!(decode_cookie(c), (0, PacketInReason::NoMatch, 254, 1));
    }
}
