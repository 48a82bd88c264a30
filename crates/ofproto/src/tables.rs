//! The flow tables of one bridge (0..=254) and the OpenFlow 1.3 flow-mod semantics over them:
//! add (replace, CHECK_OVERLAP, RESET_COUNTS), modify and delete (strict / non-strict, cookie
//! masks, out_port filters), and idle/hard timeout expiry.
//!
//! Owns: [`FlowTables`]. Threads: the control thread mutates it under the bridge's table write
//! lock (`RwLock<FlowTables>`); PMD threads read it under the read lock during upcalls.

use crate::classifier::{Rule, RuleStats, Table};
use crate::group::{GroupCommand, GroupMod, GroupTable, GROUP_MAX};
use crate::meter::{MeterCommand, MeterMod, MeterTable};
use crate::types::{
    flags, ofpp, FlowMod, FlowModCommand, Instruction, NxField, OfAction, OfError, RemovedFlow,
    RemovedReason, SetField, SubField, TABLE_ALL, TABLE_MAX,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest number of rules one table accepts.
pub const MAX_RULES_PER_TABLE: usize = 1_000_000;

/// Rule changes [`FlowTables`] keeps for [`FlowTables::take_touched`] before it only says
/// "many" (revalidation then re-checks every megaflow).
pub const TOUCHED_MAX: usize = 256;

/// The rules added, modified or removed since [`FlowTables::take_touched`]: (table, match).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Touched {
    /// The changed rules, in order.
    pub rules: Vec<(u8, crate::types::Match)>,
    /// More than [`TOUCHED_MAX`] changed: `rules` is incomplete.
    pub overflow: bool,
}

/// All tables of a bridge.
pub struct FlowTables {
    tables: Vec<Table>,
    next_serial: u32,
    /// Rules with an idle or hard timeout (expiry scans only when non-zero).
    n_timed: usize,
    /// serial -> (cookie, max_len) of rules that output to CONTROLLER (packet-in lookups).
    controller: HashMap<u32, (u64, u16)>,
    /// The bridge's groups (same lock as the rules that use them).
    pub(crate) groups: GroupTable,
    /// The bridge's meters (same lock as the rules that use them).
    pub(crate) meters: MeterTable,
    /// Rules changed since the pipeline last took them (revalidation narrows by them).
    touched: Touched,
}

impl Default for FlowTables {
    fn default() -> Self {
        FlowTables {
            tables: (0..=TABLE_MAX).map(|_| Table::default()).collect(),
            next_serial: 1,
            n_timed: 0,
            controller: HashMap::new(),
            groups: GroupTable::default(),
            meters: MeterTable::default(),
            touched: Touched::default(),
        }
    }
}

fn cookie_ok(fm: &FlowMod, rule: &Rule) -> bool {
    (rule.cookie ^ fm.cookie) & fm.cookie_mask == 0
}

/// Checks one action's arguments (ports, push ethertypes, group numbers).
pub(crate) fn check_action(a: &OfAction) -> Result<(), OfError> {
    match *a {
        OfAction::Output { port, .. } => {
            let reserved_ok = matches!(
                port,
                ofpp::IN_PORT
                    | ofpp::NORMAL
                    | ofpp::FLOOD
                    | ofpp::ALL
                    | ofpp::CONTROLLER
                    | ofpp::LOCAL
            );
            if port == 0 || (port > ofpp::MAX && !reserved_ok) {
                return Err(OfError::BadOutPort(port));
            }
            Ok(())
        }
        OfAction::PushVlan(tpid) if tpid != 0x8100 && tpid != 0x88a8 => Err(OfError::BadArgument(
            "push_vlan ethertype must be 0x8100 or 0x88a8",
        )),
        OfAction::Group(g) if g > GROUP_MAX => Err(OfError::BadOutGroup(g)),
        OfAction::Ct(ref ct) => check_ct(ct),
        OfAction::CtClear => Ok(()),
        // The wire form (NXAST_RESUBMIT_TABLE) holds a 16-bit port: 1..0xfeff or LOCAL.
        OfAction::Resubmit { port, .. } => match port {
            Some(p) if p == 0 || (p > 0xfeff && p != ofpp::IN_PORT && p != ofpp::LOCAL) => {
                Err(OfError::BadOutPort(p))
            }
            _ => Ok(()),
        },
        OfAction::RegLoad {
            dst,
            ofs,
            nbits,
            value,
        } => {
            let sub = SubField {
                field: dst,
                ofs,
                nbits,
            };
            check_dst(&sub)?;
            if nbits < 128 && value >> nbits != 0 {
                return Err(OfError::BadArgument(
                    "load: value wider than the destination",
                ));
            }
            Ok(())
        }
        OfAction::RegMove {
            src,
            src_ofs,
            dst,
            dst_ofs,
            nbits,
        } => {
            let s = SubField {
                field: src,
                ofs: src_ofs,
                nbits,
            };
            if !s.is_valid() {
                return Err(OfError::BadArgument("move: source bits outside the field"));
            }
            if !readable(src) {
                return Err(OfError::BadSetType("move: source field cannot be read"));
            }
            check_dst(&SubField {
                field: dst,
                ofs: dst_ofs,
                nbits,
            })
        }
        OfAction::SetField(SetField::Nx(f, _))
            if !f.is_register() && !f.is_tunnel() =>
        {
            Err(OfError::BadSetType(
                "set_field: only registers, metadata and tunnel fields (ct_mark/ct_label inside ct exec)",
            ))
        }
        _ => Ok(()),
    }
}

/// True if the pipeline can read the field (registers and packet header fields).
fn readable(f: NxField) -> bool {
    f.is_register() || matches!(f, NxField::Packet(_)) || f.is_tunnel()
}

/// A `load`/`move` destination: in range, and a register or a packet field the datapath can
/// rewrite.
fn check_dst(sub: &SubField) -> Result<(), OfError> {
    if !sub.is_valid() {
        return Err(OfError::BadArgument("destination bits outside the field"));
    }
    match sub.field {
        f if f.is_register() || f.is_tunnel() => Ok(()),
        NxField::Packet(p) if crate::xlate::packet_set_field(p, 0).is_some() => Ok(()),
        _ => Err(OfError::BadSetType(
            "load/move may write registers, metadata, tunnel fields, eth_src/dst, ip_src/dst, tcp/udp ports",
        )),
    }
}

/// The packet fields an action reads or writes must have their prerequisites in the match
/// (OFPBAC_MATCH_INCONSISTENT otherwise, as OVS).
fn check_action_prereqs(a: &OfAction, m: &crate::types::Match) -> Result<(), OfError> {
    let fields: Vec<NxField> = match a {
        OfAction::RegLoad { dst, .. } => vec![*dst],
        OfAction::RegMove { src, dst, .. } => vec![*src, *dst],
        _ => return Ok(()),
    };
    for f in fields {
        let NxField::Packet(p) = f else { continue };
        let (types, proto) = p.prerequisite();
        let et = m.exact(wire::Field::EthType).map(|v| v as u16);
        if !types.is_empty() && !et.is_some_and(|t| types.contains(&t)) {
            return Err(OfError::MatchInconsistent(
                "the field's eth_type is not in the match",
            ));
        }
        if let Some(pr) = proto {
            if m.exact(wire::Field::IpProto) != Some(u64::from(pr)) {
                return Err(OfError::MatchInconsistent(
                    "the field's ip_proto is not in the match",
                ));
            }
        }
    }
    Ok(())
}

/// Checks the actions of a rule against its match.
pub(crate) fn check_prereqs(insts: &[Instruction], m: &crate::types::Match) -> Result<(), OfError> {
    insts
        .iter()
        .flat_map(|i| i.actions())
        .try_for_each(|a| check_action_prereqs(a, m))
}

/// Validates instructions and returns them sorted in execution order.
pub(crate) fn normalize_instructions(
    table_id: u8,
    mut insts: Vec<Instruction>,
) -> Result<Vec<Instruction>, OfError> {
    insts.sort_by_key(|i| i.order());
    if insts.windows(2).any(|w| w[0].order() == w[1].order()) {
        return Err(OfError::BadInstruction("an instruction type appears twice"));
    }
    for inst in &insts {
        if let Instruction::GotoTable(t) = *inst {
            if t <= table_id || t > TABLE_MAX {
                return Err(OfError::BadGotoTable(t));
            }
        }
        if let Instruction::WriteActions(acts) = inst {
            let nx = acts.iter().any(|a| {
                matches!(
                    a,
                    OfAction::Ct(_)
                        | OfAction::CtClear
                        | OfAction::Resubmit { .. }
                        | OfAction::RegLoad { .. }
                        | OfAction::RegMove { .. }
                        | OfAction::DecTtl
                        | OfAction::Note(_)
                        | OfAction::SetField(SetField::Nx(..))
                )
            });
            if nx {
                return Err(OfError::Unsupported(
                    "Nicira extension actions are supported in apply-actions only",
                ));
            }
        }
        inst.actions().iter().try_for_each(check_action)?;
    }
    Ok(insts)
}

/// `ct(...)`: a table that exists, NAT addresses of one family (low ≤ high), ports
/// low ≤ high, `exec` only with `commit` (as OVS).
fn check_ct(ct: &crate::nx::CtAction) -> Result<(), OfError> {
    use std::net::IpAddr;
    if ct.table.is_some_and(|t| t > TABLE_MAX) {
        return Err(OfError::BadArgument("ct: table out of range"));
    }
    if !ct.exec.is_empty() && !ct.commit {
        return Err(OfError::BadArgument("ct: exec() needs commit"));
    }
    if let Some(n) = &ct.nat {
        let order = match (n.addr_min, n.addr_max) {
            (Some(IpAddr::V4(a)), Some(IpAddr::V4(b))) => a <= b,
            (Some(IpAddr::V6(a)), Some(IpAddr::V6(b))) => a <= b,
            (Some(_), Some(_)) => false,
            (None, Some(_)) => false,
            _ => true,
        };
        let ports = match (n.port_min, n.port_max) {
            (Some(a), Some(b)) => a <= b,
            (None, Some(_)) => false,
            _ => true,
        };
        if !order || !ports {
            return Err(OfError::BadArgument("nat: bad address or port range"));
        }
    }
    Ok(())
}

impl FlowTables {
    /// Total rules over all tables.
    pub fn len(&self) -> usize {
        self.tables.iter().map(Table::len).sum()
    }

    /// True if no table holds a rule.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Table `id` (0..=254).
    pub fn table(&self, id: u8) -> &Table {
        &self.tables[usize::from(id.min(TABLE_MAX))]
    }

    /// Every rule, table by table.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.tables.iter().flat_map(Table::iter)
    }

    /// (cookie, controller max_len) of the rule with this serial, if it outputs to CONTROLLER.
    pub fn controller_info(&self, serial: u32) -> Option<(u64, u16)> {
        self.controller.get(&serial).copied()
    }

    /// The bridge's groups.
    pub fn groups(&self) -> &GroupTable {
        &self.groups
    }

    /// Rules that use group `g`.
    pub fn group_refs(&self, g: u32) -> usize {
        self.iter().filter(|r| r.uses_group(g)).count()
    }

    /// The bridge's meters.
    pub fn meters(&self) -> &MeterTable {
        &self.meters
    }

    /// Rules whose meter instruction names meter `m`.
    pub fn meter_refs(&self, m: u32) -> usize {
        self.iter().filter(|r| r.meter() == Some(m)).count()
    }

    /// Applies a METER_MOD. Deleting a meter deletes the rules that use it (returned), as
    /// OpenFlow 1.3 §6.6 asks.
    pub fn meter_mod(
        &mut self,
        mm: MeterMod,
        now: Instant,
        bridge: &str,
    ) -> Result<Vec<RemovedFlow>, OfError> {
        if mm.command != MeterCommand::Delete {
            return self.meters.apply(mm, now).map(|()| Vec::new());
        }
        let gone = self.meters.remove(mm.meter_id)?;
        let mut removed = Vec::new();
        if gone.is_empty() {
            return Ok(removed);
        }
        let users: Vec<Arc<Rule>> = self
            .iter()
            .filter(|r| r.meter().is_some_and(|m| gone.binary_search(&m).is_ok()))
            .cloned()
            .collect();
        for r in users {
            removed.extend(self.remove_rule(&r, RemovedReason::Delete, now, bridge));
        }
        Ok(removed)
    }

    fn check_groups(&self, insts: &[Instruction]) -> Result<(), OfError> {
        for i in insts {
            if let Instruction::Meter(m) = *i {
                if self.meters.get(m).is_none() {
                    return Err(OfError::InvalidMeter(m));
                }
            }
        }
        for a in insts.iter().flat_map(|i| i.actions()) {
            if let OfAction::Group(g) = *a {
                if self.groups.get(g).is_none() {
                    return Err(OfError::BadOutGroup(g));
                }
            }
        }
        Ok(())
    }

    /// Applies a GROUP_MOD. Deleting a group deletes the rules that use it (returned, as
    /// OpenFlow 1.3 §6.5 asks).
    pub fn group_mod(
        &mut self,
        gm: GroupMod,
        now: Instant,
        bridge: &str,
    ) -> Result<Vec<RemovedFlow>, OfError> {
        if gm.command != GroupCommand::Delete {
            return self.groups.apply(gm, now).map(|()| Vec::new());
        }
        let gone = self.groups.remove(gm.group_id)?;
        let mut removed = Vec::new();
        for g in gone {
            let users: Vec<Arc<Rule>> = self.iter().filter(|r| r.uses_group(g)).cloned().collect();
            for r in users {
                removed.extend(self.remove_rule(&r, RemovedReason::Delete, now, bridge));
            }
        }
        Ok(removed)
    }

    /// Logs a changed rule for [`FlowTables::take_touched`].
    fn touch(&mut self, table: u8, m: &crate::types::Match) {
        let t = &mut self.touched;
        if t.rules.len() < TOUCHED_MAX {
            t.rules.push((table, *m));
        } else {
            t.overflow = true;
        }
    }

    /// The rules added, modified or removed since the last call.
    pub fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    fn index(&mut self, rule: &Rule) {
        let dec_ttl = rule.all_actions().any(|a| *a == OfAction::DecTtl);
        let info = rule
            .controller_max_len()
            .or_else(|| dec_ttl.then_some(u16::MAX));
        if let Some(len) = info {
            self.controller.insert(rule.serial, (rule.cookie, len));
        } else {
            self.controller.remove(&rule.serial);
        }
    }

    fn table_range(table_id: u8) -> std::ops::RangeInclusive<u8> {
        if table_id == TABLE_ALL {
            0..=TABLE_MAX
        } else {
            table_id..=table_id
        }
    }

    /// Applies a flow-mod. Returns the removed rules (deletes, and the rule an add replaced is
    /// not reported, as OpenFlow does not send FLOW_REMOVED for it).
    pub fn apply(
        &mut self,
        fm: FlowMod,
        now: Instant,
        bridge: &str,
    ) -> Result<Vec<RemovedFlow>, OfError> {
        if fm.table_id > TABLE_MAX
            && !(fm.table_id == TABLE_ALL
                && matches!(
                    fm.command,
                    FlowModCommand::Delete | FlowModCommand::DeleteStrict
                ))
        {
            return Err(OfError::BadTableId(fm.table_id));
        }
        match fm.command {
            FlowModCommand::Add => self.add(fm, now).map(|()| Vec::new()),
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => {
                self.modify(fm).map(|_| Vec::new())
            }
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => {
                Ok(self.delete(&fm, now, bridge))
            }
        }
    }

    fn add(&mut self, fm: FlowMod, now: Instant) -> Result<(), OfError> {
        fm.match_.check_prerequisites()?;
        let instructions = normalize_instructions(fm.table_id, fm.instructions)?;
        check_prereqs(&instructions, &fm.match_)?;
        self.check_groups(&instructions)?;
        let table = &mut self.tables[usize::from(fm.table_id)];
        if fm.flags & flags::CHECK_OVERLAP != 0
            && table.iter().any(|r| {
                r.priority == fm.priority && r.match_ != fm.match_ && r.match_.overlaps(&fm.match_)
            })
        {
            return Err(OfError::Overlap);
        }
        let existing = table.find_strict(&fm.match_, fm.priority);
        if existing.is_none() && table.len() >= MAX_RULES_PER_TABLE {
            return Err(OfError::TableFull);
        }
        let (p, b) = match existing {
            Some(old) if fm.flags & flags::RESET_COUNTS == 0 => {
                (old.packet_count(), old.byte_count())
            }
            _ => (0, 0),
        };
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1).max(1);
        let rule = Rule {
            table_id: fm.table_id,
            priority: fm.priority,
            match_: fm.match_,
            cookie: fm.cookie,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            flags: fm.flags,
            instructions,
            serial,
            stats: RuleStats::new(now, p, b),
        };
        let timed = rule.idle_timeout != 0 || rule.hard_timeout != 0;
        let rule = Arc::new(rule);
        if let Some(old) = table.insert(Arc::clone(&rule)) {
            if old.idle_timeout != 0 || old.hard_timeout != 0 {
                self.n_timed -= 1;
            }
            self.controller.remove(&old.serial);
        }
        self.index(&rule);
        self.touch(rule.table_id, &rule.match_);
        if timed {
            self.n_timed += 1;
        }
        Ok(())
    }

    fn selected(&self, fm: &FlowMod, strict: bool, out_filter: bool) -> Vec<Arc<Rule>> {
        let mut out = Vec::new();
        for t in Self::table_range(fm.table_id) {
            let table = &self.tables[usize::from(t)];
            let keep = |r: &&Arc<Rule>| {
                cookie_ok(fm, r)
                    && (!out_filter || fm.out_port == ofpp::ANY || r.outputs_to(fm.out_port))
                    && (!out_filter || fm.out_group == ofpp::ANY || r.uses_group(fm.out_group))
            };
            if strict {
                out.extend(
                    table
                        .find_strict(&fm.match_, fm.priority)
                        .filter(keep)
                        .cloned(),
                );
            } else {
                out.extend(table.covered_by(&fm.match_).filter(keep).cloned());
            }
        }
        out
    }

    /// Modify: replaces the instructions of the selected rules; returns how many changed.
    fn modify(&mut self, fm: FlowMod) -> Result<usize, OfError> {
        let strict = fm.command == FlowModCommand::ModifyStrict;
        let instructions = normalize_instructions(fm.table_id, fm.instructions.clone())?;
        self.check_groups(&instructions)?;
        let chosen = self.selected(&fm, strict, false);
        for old in &chosen {
            check_prereqs(&instructions, &old.match_)?;
        }
        for old in &chosen {
            let stats = if fm.flags & flags::RESET_COUNTS != 0 {
                RuleStats::new(old.stats.created, 0, 0)
            } else {
                Arc::clone(&old.stats)
            };
            let rule = Rule {
                table_id: old.table_id,
                priority: old.priority,
                match_: old.match_,
                cookie: old.cookie,
                idle_timeout: old.idle_timeout,
                hard_timeout: old.hard_timeout,
                flags: old.flags,
                instructions: instructions.clone(),
                serial: old.serial,
                stats,
            };
            self.index(&rule);
            self.touch(old.table_id, &old.match_);
            self.tables[usize::from(old.table_id)].insert(Arc::new(rule));
        }
        Ok(chosen.len())
    }

    fn delete(&mut self, fm: &FlowMod, now: Instant, bridge: &str) -> Vec<RemovedFlow> {
        let strict = fm.command == FlowModCommand::DeleteStrict;
        let chosen = self.selected(fm, strict, true);
        chosen
            .iter()
            .filter_map(|r| self.remove_rule(r, RemovedReason::Delete, now, bridge))
            .collect()
    }

    fn remove_rule(
        &mut self,
        r: &Rule,
        reason: RemovedReason,
        now: Instant,
        bridge: &str,
    ) -> Option<RemovedFlow> {
        let removed = self.tables[usize::from(r.table_id)].remove(&r.match_, r.priority)?;
        self.touch(removed.table_id, &removed.match_);
        if removed.idle_timeout != 0 || removed.hard_timeout != 0 {
            self.n_timed -= 1;
        }
        self.controller.remove(&removed.serial);
        Some(RemovedFlow {
            bridge: bridge.to_string(),
            reason,
            table_id: removed.table_id,
            priority: removed.priority,
            cookie: removed.cookie,
            match_: removed.match_,
            idle_timeout: removed.idle_timeout,
            hard_timeout: removed.hard_timeout,
            flags: removed.flags,
            duration: removed.duration(now),
            packet_count: removed.packet_count(),
            byte_count: removed.byte_count(),
        })
    }

    /// True if some rule has a timeout (so [`FlowTables::expire`] has work to do).
    pub fn has_timeouts(&self) -> bool {
        self.n_timed != 0
    }

    /// Removes rules whose hard or idle timeout has passed at `now`.
    pub fn expire(&mut self, now: Instant, bridge: &str) -> Vec<RemovedFlow> {
        if self.n_timed == 0 {
            return Vec::new();
        }
        let secs = |s: u16| Duration::from_secs(u64::from(s));
        let due: Vec<(Arc<Rule>, RemovedReason)> = self
            .iter()
            .filter_map(|r| {
                if r.hard_timeout != 0 && r.duration(now) >= secs(r.hard_timeout) {
                    Some((Arc::clone(r), RemovedReason::HardTimeout))
                } else if r.idle_timeout != 0 && r.idle_for(now) >= secs(r.idle_timeout) {
                    Some((Arc::clone(r), RemovedReason::IdleTimeout))
                } else {
                    None
                }
            })
            .collect();
        due.iter()
            .filter_map(|(r, why)| self.remove_rule(r, *why, now, bridge))
            .collect()
    }
}
