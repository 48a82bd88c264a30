//! Translation: walks a bridge's OpenFlow tables for one packet and produces datapath actions
//! plus the megaflow mask (every key bit the decision consulted).
//!
//! The walk keeps the packet's *current* key (modified by set-field / VLAN actions; in_port in
//! OpenFlow numbering) for lookups, and a separate wildcard mask `wc` over the *original* key.
//! Consulting a field that an earlier action rewrote still marks the original bits: more
//! specific than needed, never wrong. VLAN changes are committed lazily (pop/push emitted just
//! before an output), so `mod_vlan_vid` + `mod_vlan_pcp` cost one pop+push.
//!
//! Tunnel fields (`tun_id`, `tun_src`, `tun_dst`) are key bits like headers: rules match
//! them (a decapsulated packet carries them), and `set_field`/`load` change the key; the
//! change is committed lazily, as one `SetTunnel` datapath action just before the next output
//! (what a flow-based tunnel port encapsulates with). The action carries all three fields, so
//! committing marks all three exact in the mask.
//!
//! Nicira extensions: the register file ([`Regs`]) is translation state, not key bits: it
//! starts at zero, rules match it without widening the megaflow, and a `move:` from a packet
//! field marks the bits it copied in the mask (so two packets that differ there get different
//! megaflows). `resubmit` nests at most [`MAX_RESUBMIT_DEPTH`] deep and
//! [`MAX_RESUBMITS`] times per packet, and a translation may emit at most
//! [`MAX_DP_ACTIONS`] datapath actions; past a limit the packet is dropped (an empty action
//! list) and [`Xlate::limit_hit`] is set for the caller to count.
//!
//! Owns: [`Xlate`] (a per-upcall scratch context). Threads: runs on the PMD thread doing the
//! upcall, under the bridge's table read lock; NORMAL takes the MAC table mutex briefly.

mod ct;
mod group;

use crate::bridge::BridgeState;
use crate::classifier::Rule;
use crate::group::{Bucket, Group, GroupType, MAX_GROUP_DEPTH};
use crate::nx::{ones, Regs};
use crate::tables::FlowTables;
use crate::types::{ethertype, ofpp, Instruction, OfAction, OfPort, PacketInReason, SetField};
use crate::types::{VLAN_PRESENT, VLAN_VID_MASK};
use dpif::Action;
use std::sync::Arc;
use std::time::Instant;
use wire::{Field, FlowKey};

/// First key word of the tunnel fields.
const TUN0: usize = wire::flow::TUN_WORDS.start;

/// Every tunnel field a native encap may read (the port's options decide which).
const TUN_FIELDS: [Field; 7] = [
    Field::TunId,
    Field::TunSrc,
    Field::TunDst,
    Field::TunIpv6SrcHi,
    Field::TunIpv6SrcLo,
    Field::TunIpv6DstHi,
    Field::TunIpv6DstLo,
];

/// Datapath port number used for packets with no ingress port (PACKET_OUT from CONTROLLER).
pub const NO_DP_PORT: u32 = u32::MAX;

/// Deepest `resubmit` nesting (as OVS).
pub const MAX_RESUBMIT_DEPTH: usize = 64;
/// Most `resubmit`s (and goto-table steps) one translation may take (as OVS's 4096).
pub const MAX_RESUBMITS: usize = 4096;
/// Most datapath actions one translation may emit.
pub const MAX_DP_ACTIONS: usize = 4096;

mod nx;
pub(crate) use nx::packet_set_field;

/// Packs what a packet-in needs into a datapath userspace cookie:
/// bits 0..32 rule serial, 32..40 table id, 40..48 reason, 48..64 bridge id.
pub fn encode_cookie(bridge: u16, reason: PacketInReason, table: u8, serial: u32) -> u64 {
    u64::from(serial) | u64::from(table) << 32 | (reason as u64) << 40 | u64::from(bridge) << 48
}

/// Inverse of [`encode_cookie`]: (bridge id, reason, table id, rule serial).
pub fn decode_cookie(c: u64) -> (u16, PacketInReason, u8, u32) {
    let reason = match (c >> 40) & 0xff {
        0 => PacketInReason::NoMatch,
        2 => PacketInReason::InvalidTtl,
        _ => PacketInReason::Action,
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
    group: Option<u32>,
}

impl ActionSet {
    /// Merges write-actions (the table layer refuses Nicira actions there, see
    /// `tables::normalize_instructions`; any that got here are ignored).
    fn write(&mut self, actions: &[OfAction]) {
        for a in actions {
            match a {
                OfAction::PopVlan => self.pop = true,
                OfAction::PushVlan(t) => self.push = Some(*t),
                OfAction::SetField(sf) => {
                    self.sets.retain(|s| s.kind() != sf.kind());
                    self.sets.push(*sf);
                }
                OfAction::Output { .. } => self.output = Some(a.clone()),
                OfAction::Group(g) => self.group = Some(*g),
                _ => {}
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
    /// Tunnel words (`wire::flow::TUN_WORDS`) the datapath packet carries at this point.
    committed_tun: [u64; 2],
    /// Bits of the original key consulted.
    pub(crate) wc: FlowKey,
    pub(crate) out: Vec<Action>,
    /// Rules that matched, in walk order (for counters).
    pub(crate) hits: Vec<&'a Rule>,
    /// MAC table entries that appeared, moved or went during this walk (their megaflows must
    /// be revalidated).
    pub(crate) mac_changes: crate::mac::MacChanges,
    /// Revalidation tags of what the walk looked at (MAC entries, port limits).
    pub(crate) tags: Vec<u64>,
    /// False for accounting walks and re-checks: NORMAL must not learn.
    pub(crate) learn: bool,
    /// Accounting walks: NORMAL refreshes the source's entry (it sent traffic).
    pub(crate) refresh: bool,
    /// Groups (bucket None) and buckets executed, for counters.
    pub(crate) group_hits: Vec<(&'a Group, Option<usize>)>,
    group_depth: usize,
    cur_table: u8,
    cur_rule: Option<&'a Rule>,
    /// The register file (reg0..15, metadata): zero for every packet.
    pub(crate) regs: Regs,
    /// The OpenFlow action set of the walk.
    aset: ActionSet,
    /// Current resubmit nesting.
    resubmit_depth: usize,
    /// Resubmits and table steps taken so far.
    work: usize,
    /// A limit (depth, work, action count) was exceeded: the packet is dropped.
    pub(crate) limit_hit: bool,
    /// `dec_ttl` expired: skip the rest of the current rule.
    stop: bool,
    /// The top-level walk missed a table: the action set is not executed.
    aset_dropped: bool,
    /// Positions in `out` of the `ct(table=N)` actions of this walk: each becomes a fork if
    /// actions follow it (see `xlate/ct.rs`).
    forks: Vec<usize>,
    /// The pipeline's recirculation ids (None: `ct(table=N)` drops).
    pub(crate) recirc: Option<&'a crate::recirc::RecircTable>,
    /// Native tunneling's hook (None: tunnel ports are plain outputs).
    pub(crate) native: Option<&'a dyn crate::native::NativeTunnels>,
    /// Bridges by datapath port (for the underlay walk of a native encap).
    pub(crate) by_dp: Option<&'a crate::pipeline::ByDp>,
    /// Set when the answer must not be cached (a native encap's neighbour miss).
    pub(crate) no_install: bool,
    /// An action may have changed the packet or the registers: later lookups no longer see
    /// the packet as it arrived.
    modified: bool,
    /// The tables looked up, and whether before `modified` (rule-change revalidation).
    pub(crate) seen: dpif::TablesSeen,
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
            committed_tun: [key.w[TUN0], key.w[TUN0 + 1]],
            key,
            wc,
            out: Vec::new(),
            hits: Vec::new(),
            mac_changes: Default::default(),
            tags: Vec::new(),
            learn: true,
            refresh: false,
            group_hits: Vec::new(),
            group_depth: 0,
            cur_table: 0,
            cur_rule: None,
            regs: Regs::ZERO,
            aset: ActionSet::default(),
            resubmit_depth: 0,
            work: 0,
            limit_hit: false,
            stop: false,
            aset_dropped: false,
            forks: Vec::new(),
            recirc: None,
            native: None,
            by_dp: None,
            no_install: false,
            modified: false,
            seen: dpif::TablesSeen::NONE,
        }
    }

    /// Runs the pipeline from table 0 (or NORMAL alone while the bridge is failed open).
    pub(crate) fn run(&mut self) {
        use crate::bridge::port_config::{NO_RECV, PORT_DOWN};
        // PORT_MOD no-recv / port-down: everything received on the port is dropped (the
        // megaflow matches in_port exactly, so only this port's traffic is affected).
        if self.br.of_config(self.in_of) & (NO_RECV | PORT_DOWN) != 0 {
            return;
        }
        if self
            .br
            .shared
            .fail_open
            .load(std::sync::atomic::Ordering::Acquire)
        {
            crate::normal::xlate_normal(self);
            return;
        }
        let Some(table) = self.resume() else {
            return;
        };
        self.run_from(table);
        let set = std::mem::take(&mut self.aset);
        if !self.aset_dropped {
            self.exec_set(set);
        }
        self.mark_forks();
        if self.limit_hit || self.out.len() > MAX_DP_ACTIONS {
            // Too much work for one packet: drop it (the caller counts it).
            self.limit_hit = true;
            self.out.clear();
        }
    }

    /// Looks the packet up in `table` and runs the rule found, following goto-table.
    fn run_from(&mut self, mut table: u8) {
        loop {
            self.work += 1;
            if self.work > MAX_RESUBMITS {
                self.limit_hit = true;
                return;
            }
            let tables = self.tables;
            self.seen.note(table, !self.modified);
            let Some(rule) = tables
                .table(table)
                .lookup_regs(&self.key, &self.regs, &mut self.wc)
            else {
                // Table miss without a table-miss rule: drop (OF1.3), the action set too;
                // with a 1.0 controller connected, a no_match packet-in first (OF1.0). A
                // miss inside a resubmit just returns to the resubmitting rule (as OVS).
                if self.resubmit_depth == 0 {
                    self.aset_dropped = true;
                    let shared = &self.br.shared;
                    if shared
                        .miss_to_controller
                        .load(std::sync::atomic::Ordering::Acquire)
                        && self.br.of_config(self.in_of) & crate::bridge::port_config::NO_PACKET_IN
                            == 0
                    {
                        let cookie = encode_cookie(self.br.id, PacketInReason::NoMatch, table, 0);
                        self.out.push(Action::Userspace(cookie));
                    }
                }
                return;
            };
            let rule: &'a Rule = rule;
            self.hits.push(rule);
            self.cur_table = table;
            self.cur_rule = Some(rule);
            let mut next = None;
            for inst in &rule.instructions {
                if self.stop || self.limit_hit {
                    break;
                }
                match inst {
                    Instruction::ApplyActions(acts) => {
                        for a in acts {
                            if self.stop || self.limit_hit {
                                break;
                            }
                            self.exec(a);
                        }
                    }
                    Instruction::ClearActions => self.aset = ActionSet::default(),
                    Instruction::WriteActions(acts) => self.aset.write(acts),
                    Instruction::GotoTable(t) => next = Some(*t),
                    Instruction::Meter(m) => {
                        if let Some(e) = self.tables.meters.get(*m) {
                            self.out
                                .push(Action::Meter(dpif::MeterRef(std::sync::Arc::clone(
                                    &e.meter,
                                ))));
                        }
                    }
                }
            }
            if std::mem::take(&mut self.stop) {
                return;
            }
            match next {
                Some(t) if t > table && !self.limit_hit => table = t,
                _ => return,
            }
        }
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
        // OF1.3 §5.10: a group in the action set takes precedence over an output.
        if let Some(g) = set.group {
            self.xlate_group(g);
        } else if let Some(o) = set.output {
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
        // Only outputs, notes and a resubmit that keeps in_port leave the packet and the
        // registers as they are; anything else may change what a later lookup sees.
        if !matches!(
            a,
            OfAction::Output { .. } | OfAction::Note(_) | OfAction::Resubmit { port: None, .. }
        ) {
            self.modified = true;
        }
        match *a {
            OfAction::Resubmit { port, table } => self.resubmit(port, table),
            OfAction::RegLoad {
                dst,
                ofs,
                nbits,
                value,
            } => {
                let mask = ones(u32::from(nbits)) << ofs;
                self.write_field(dst, value << ofs, mask);
            }
            OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                nbits,
            } => {
                let m = ones(u32::from(nbits));
                let v = (self.read_field(src, m << src_ofs) >> src_ofs) & m;
                self.write_field(dst, v << dst_ofs, m << dst_ofs);
            }
            OfAction::DecTtl => self.dec_ttl(),
            OfAction::Note(_) => {}
            OfAction::Ct(ref ct) => self.xlate_ct(ct),
            OfAction::CtClear => self.xlate_ct_clear(),
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
            OfAction::Group(g) => self.xlate_group(g),
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
            SetField::Nx(f, v) => {
                if f.is_register() {
                    f.set_reg(&mut self.regs, v, ones(f.width()));
                } else if let crate::nx::NxField::TunMetadata { off, len, .. } = f {
                    wire::tunmd::set(&mut self.key, usize::from(off), usize::from(len), v);
                } else {
                    f.set_tunnel(&mut self.key, v, ones(f.width()));
                }
                return;
            }
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

    /// Emits the `SetTunnel` that brings the datapath packet's tunnel metadata to the key's.
    pub(crate) fn commit_tun(&mut self) {
        let want = [self.key.w[TUN0], self.key.w[TUN0 + 1]];
        if want == self.committed_tun {
            return;
        }
        for f in [Field::TunId, Field::TunSrc, Field::TunDst] {
            self.wc.set_exact(f);
        }
        self.out.push(Action::SetTunnel {
            id: self.key.get(Field::TunId),
            src: self.key.get(Field::TunSrc) as u32,
            dst: self.key.get(Field::TunDst) as u32,
        });
        self.committed_tun = want;
    }

    /// Outputs to a datapath port with the key's current VLAN.
    pub(crate) fn emit_output(&mut self, dp_port: u32) {
        use crate::bridge::port_config::{NO_FWD, PORT_DOWN};
        // PORT_MOD no-fwd / port-down: output to the port becomes no output (NORMAL, FLOOD,
        // ALL, IN_PORT, groups and plain output all come through here).
        if !self.br.port_of_config.is_empty() {
            let blocked = self
                .br
                .ports
                .iter()
                .find(|p| p.dp_port == dp_port)
                .is_some_and(|p| self.br.of_config(p.ofport) & (NO_FWD | PORT_DOWN) != 0);
            if blocked {
                return;
            }
        }
        self.commit_vlan();
        self.commit_tun();
        if let Some(n) = self.native {
            let tlv = self
                .br
                .shared
                .tlv
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            match n.encap(dp_port, &self.key, &tlv) {
                None => {}
                Some(crate::native::Encap::Drop) => {
                    for f in TUN_FIELDS {
                        self.wc.set_exact(f);
                    }
                    self.no_install = true;
                    return;
                }
                Some(crate::native::Encap::Push { push, local_dp }) => {
                    if push.template.params().kind == wire::tunnel::TunnelKind::Geneve {
                        wire::tunmd::unwildcard(&mut self.wc, &tlv);
                    }
                    self.native_push(*push, local_dp);
                    return;
                }
            }
            if let Some(pop) = n.pop_before(dp_port) {
                self.out.push(Action::TnlPop(self.with_tlvs(pop)));
            }
        }
        self.out.push(Action::Output(dp_port));
    }

    /// `pop` with the TLV map of each endpoint's bridge (what its decapsulation understands).
    fn with_tlvs(&self, pop: Arc<dpif::action::TnlPop>) -> Arc<dpif::action::TnlPop> {
        let Some(by_dp) = self.by_dp else {
            return pop;
        };
        let tlvs: Vec<_> = pop
            .ports
            .iter()
            .map(|p| {
                by_dp.get(&p.port).map_or_else(Default::default, |(b, _)| {
                    Arc::new(
                        b.shared
                            .tlv
                            .read()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone(),
                    )
                })
            })
            .collect();
        if tlvs.iter().all(|t| t.iter().next().is_none()) {
            return pop;
        }
        let mut p = (*pop).clone();
        p.tlvs = tlvs;
        Arc::new(p)
    }

    /// Emits `TnlPush` with the translation of the outer packet through the bridge of
    /// `local_dp` (as if it came in on that internal port). An underlay in this same bridge,
    /// or one that is gone, drops the packet.
    fn native_push(&mut self, mut push: dpif::action::TnlPush, local_dp: u32) {
        for f in TUN_FIELDS {
            self.wc.set_exact(f);
        }
        let Some((ubr, u_of)) = self.by_dp.and_then(|m| m.get(&local_dp)) else {
            self.no_install = true;
            return;
        };
        if std::ptr::eq(&**ubr, self.br) {
            // Tunnel and underlay on one bridge: the walk would need the same tables again.
            return;
        }
        let outer = {
            let mut f = push.template.push_vec(&[0u8; 14], 0);
            f.truncate(push.template.len());
            wire::extract(&f, local_dp)
        };
        let tables = crate::pipeline::read(&ubr.shared.tables);
        // Another bridge's tables: this megaflow's table record no longer covers them.
        self.seen.any = true;
        let mut u = Xlate::new(ubr, &tables, &outer, *u_of, self.now);
        u.learn = false;
        u.run();
        self.tags.extend_from_slice(&u.tags);
        if u.limit_hit {
            self.limit_hit = true;
        }
        push.actions = u
            .out
            .into_iter()
            .filter(|a| !matches!(a, Action::TnlPush(_) | Action::TnlPop(_)))
            .collect();
        if push.actions.is_empty() {
            return;
        }
        self.out.push(Action::TnlPush(std::sync::Arc::new(push)));
    }

    /// The TCI the datapath packet carries now (NORMAL orders its outputs by it).
    pub(crate) fn committed_tci(&self) -> u16 {
        self.committed_tci
    }

    fn output(&mut self, port: OfPort) {
        match port {
            ofpp::IN_PORT if self.in_dp == NO_DP_PORT => {}
            ofpp::IN_PORT => self.emit_output(self.in_dp),
            ofpp::NORMAL => crate::normal::xlate_normal(self),
            ofpp::FLOOD | ofpp::ALL => {
                let (br, in_of) = (self.br, self.in_of);
                for p in br.ports.iter().filter(|p| p.ofport != in_of) {
                    self.emit_output(p.dp_port);
                }
            }
            ofpp::CONTROLLER
                if self.br.of_config(self.in_of) & crate::bridge::port_config::NO_PACKET_IN
                    != 0 => {} // PORT_MOD no-packet-in on the ingress port
            ofpp::CONTROLLER => {
                self.commit_vlan();
                let rule = self.cur_rule;
                let table_miss = rule.is_some_and(|r| r.priority == 0 && r.match_.is_catchall());
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

fn u64_to_mac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
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
