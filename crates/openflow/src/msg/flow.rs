//! Flow and packet messages: FLOW_MOD, FLOW_REMOVED, PACKET_IN, PACKET_OUT, PORT_STATUS and
//! the `ofp_port` description they share with PORT_DESC. Pure codec; runs on the decoding
//! thread.

use super::finish;
use crate::action::{decode_actions, decode_instructions, encode_actions, encode_instructions};
use crate::action::{Action, Instruction};
use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::{Mac, Match};

/// Reserved port numbers (`ofp_port_no`).
pub mod port_no {
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// `OFPG_ANY`: any group (filters); `OFPG_ALL` for group deletes.
pub const GROUP_ANY: u32 = 0xffff_ffff;
pub const GROUP_ALL: u32 = 0xffff_fffc;
/// `OFP_NO_BUFFER`.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// `OFPTT_ALL`.
pub const TABLE_ALL: u8 = 0xff;

/// `ofp_flow_mod_flags`.
pub mod flow_mod_flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
    pub const ALL: u16 = 0x1f;
}

/// `ofp_flow_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

impl FlowModCommand {
    /// The command of a wire value (any version): BAD_COMMAND for anything else.
    pub(crate) fn from_wire(v: u16) -> Result<Self, OfError> {
        u8::try_from(v)
            .map_err(|_| errors::FLOW_MOD_FAILED_BAD_COMMAND)
            .and_then(Self::from_u8)
    }

    fn from_u8(v: u8) -> Result<Self, OfError> {
        Ok(match v {
            0 => Self::Add,
            1 => Self::Modify,
            2 => Self::ModifyStrict,
            3 => Self::Delete,
            4 => Self::DeleteStrict,
            _ => return Err(errors::FLOW_MOD_FAILED_BAD_COMMAND),
        })
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Self::Add => 0,
            Self::Modify => 1,
            Self::ModifyStrict => 2,
            Self::Delete => 3,
            Self::DeleteStrict => 4,
        }
    }

    /// Whether this is a delete command (which may name `OFPTT_ALL`).
    pub fn is_delete(self) -> bool {
        matches!(self, Self::Delete | Self::DeleteStrict)
    }
}

/// FLOW_MOD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowMod {
    pub cookie: u64,
    pub cookie_mask: u64,
    pub table_id: u8,
    pub command: FlowModCommand,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub matches: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// An ADD into table 0 with default fields.
    pub fn add(priority: u16, matches: Match, instructions: Vec<Instruction>) -> Self {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: 0,
            command: FlowModCommand::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority,
            buffer_id: NO_BUFFER,
            out_port: port_no::ANY,
            out_group: GROUP_ANY,
            flags: 0,
            matches,
            instructions,
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let table_id = r.u8()?;
        let command = FlowModCommand::from_u8(r.u8()?)?;
        let idle_timeout = r.u16()?;
        let hard_timeout = r.u16()?;
        let priority = r.u16()?;
        let buffer_id = r.u32()?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        let flags = r.u16()?;
        r.skip(2)?;
        if flags & !flow_mod_flags::ALL != 0 {
            return Err(errors::FLOW_MOD_FAILED_BAD_FLAGS);
        }
        if table_id == TABLE_ALL && !command.is_delete() {
            return Err(errors::FLOW_MOD_FAILED_BAD_TABLE_ID);
        }
        let matches = Match::decode(r)?;
        matches.check_prereqs()?;
        let instructions = decode_instructions(r)?;
        Ok(FlowMod {
            cookie,
            cookie_mask,
            table_id,
            command,
            idle_timeout,
            hard_timeout,
            priority,
            buffer_id,
            out_port,
            out_group,
            flags,
            matches,
            instructions,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.cookie);
        out.put_u64(self.cookie_mask);
        out.put_u8(self.table_id);
        out.put_u8(self.command.to_u8());
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u16(self.priority);
        out.put_u32(self.buffer_id);
        out.put_u32(self.out_port);
        out.put_u32(self.out_group);
        out.put_u16(self.flags);
        out.pad(2);
        self.matches.encode(out);
        encode_instructions(&self.instructions, out);
    }
}

/// FLOW_REMOVED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRemoved {
    pub cookie: u64,
    pub priority: u16,
    /// `ofp_flow_removed_reason`: 0 idle timeout, 1 hard timeout, 2 delete, 3 group delete.
    pub reason: u8,
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub packet_count: u64,
    pub byte_count: u64,
    pub matches: Match,
}

impl FlowRemoved {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let f = FlowRemoved {
            cookie: r.u64()?,
            priority: r.u16()?,
            reason: r.u8()?,
            table_id: r.u8()?,
            duration_sec: r.u32()?,
            duration_nsec: r.u32()?,
            idle_timeout: r.u16()?,
            hard_timeout: r.u16()?,
            packet_count: r.u64()?,
            byte_count: r.u64()?,
            matches: Match::decode(r)?,
        };
        finish(r, f)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.cookie);
        out.put_u16(self.priority);
        out.put_u8(self.reason);
        out.put_u8(self.table_id);
        out.put_u32(self.duration_sec);
        out.put_u32(self.duration_nsec);
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u64(self.packet_count);
        out.put_u64(self.byte_count);
        self.matches.encode(out);
    }
}

/// PACKET_IN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketIn {
    pub buffer_id: u32,
    pub total_len: u16,
    /// `ofp_packet_in_reason`: 0 no match, 1 action, 2 invalid ttl.
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    /// Pipeline fields (at least `in_port`).
    pub matches: Match,
    pub data: Vec<u8>,
}

impl PacketIn {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let buffer_id = r.u32()?;
        let total_len = r.u16()?;
        let reason = r.u8()?;
        let table_id = r.u8()?;
        let cookie = r.u64()?;
        let matches = Match::decode(r)?;
        r.skip(2)?;
        let data = r.rest().to_vec();
        Ok(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id,
            cookie,
            matches,
            data,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.buffer_id);
        out.put_u16(self.total_len);
        out.put_u8(self.reason);
        out.put_u8(self.table_id);
        out.put_u64(self.cookie);
        self.matches.encode(out);
        out.pad(2);
        out.extend_from_slice(&self.data);
    }
}

/// PACKET_OUT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u32,
    pub actions: Vec<Action>,
    /// The frame (empty when `buffer_id` names a buffered packet).
    pub data: Vec<u8>,
}

impl PacketOut {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let buffer_id = r.u32()?;
        let in_port = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.skip(6)?;
        let mut ar = r.sub(actions_len, errors::BAD_REQUEST_BAD_LEN)?;
        let actions = decode_actions(&mut ar)?;
        let data = r.rest().to_vec();
        if in_port > port_no::MAX && in_port != port_no::CONTROLLER && in_port != port_no::LOCAL {
            return Err(errors::BAD_REQUEST_BAD_PORT);
        }
        Ok(PacketOut {
            buffer_id,
            in_port,
            actions,
            data,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.buffer_id);
        out.put_u32(self.in_port);
        let len_at = out.len();
        out.put_u16(0);
        out.pad(6);
        let start = out.len();
        encode_actions(&self.actions, out);
        let alen = crate::buf::len_u16(out, start);
        out.set_u16(len_at, alen);
        out.extend_from_slice(&self.data);
    }
}

/// `ofp_port`: a port description (PORT_STATUS, PORT_DESC reply).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Port {
    pub port_no: u32,
    pub hw_addr: Mac,
    /// Up to 15 bytes on the wire.
    pub name: String,
    /// `ofp_port_config` bits (1 = PORT_DOWN).
    pub config: u32,
    /// `ofp_port_state` bits (1 = LINK_DOWN, 4 = LIVE).
    pub state: u32,
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    /// kbps.
    pub curr_speed: u32,
    pub max_speed: u32,
}

/// Size of `ofp_port`.
pub const PORT_LEN: usize = 64;

impl Port {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let port_no = r.u32()?;
        r.skip(4)?;
        let hw_addr = r.array()?;
        r.skip(2)?;
        Ok(Port {
            port_no,
            hw_addr,
            name: r.string(16)?,
            config: r.u32()?,
            state: r.u32()?,
            curr: r.u32()?,
            advertised: r.u32()?,
            supported: r.u32()?,
            peer: r.u32()?,
            curr_speed: r.u32()?,
            max_speed: r.u32()?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.port_no);
        out.pad(4);
        out.extend_from_slice(&self.hw_addr);
        out.pad(2);
        out.put_string(&self.name, 16);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            out.put_u32(v);
        }
    }
}

/// PORT_STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStatus {
    /// `ofp_port_reason`: 0 add, 1 delete, 2 modify.
    pub reason: u8,
    pub desc: Port,
}

impl PortStatus {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let reason = r.u8()?;
        r.skip(7)?;
        let desc = Port::decode(r)?;
        finish(r, PortStatus { reason, desc })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.reason);
        out.pad(7);
        self.desc.encode(out);
    }
}
