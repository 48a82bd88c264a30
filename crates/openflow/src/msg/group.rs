//! Groups: GROUP_MOD with its buckets, and the group description / statistics entries of
//! the GROUP_DESC and GROUP multipart replies. Pure codec; runs on the decoding thread.

use crate::action::{decode_actions, encode_actions, Action};
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};

/// `ofp_group_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupModCommand {
    Add,
    Modify,
    Delete,
    /// OpenFlow 1.5 `OFPGC_INSERT_BUCKET` (3): only 1.5 can express it.
    InsertBucket,
    /// OpenFlow 1.5 `OFPGC_REMOVE_BUCKET` (5): only 1.5 can express it.
    RemoveBucket,
}

impl GroupModCommand {
    /// The 1.5 bucket-editing commands.
    pub fn edits_buckets(self) -> bool {
        matches!(self, Self::InsertBucket | Self::RemoveBucket)
    }
}

/// `OFPG_BUCKET_*`: OpenFlow 1.5's command bucket ids besides a bucket's own id
/// (`0..=MAX`).
pub mod bucket_id {
    pub const MAX: u32 = 0xffff_ff00;
    pub const FIRST: u32 = 0xffff_fffd;
    pub const LAST: u32 = 0xffff_fffe;
    pub const ALL: u32 = 0xffff_ffff;
}

/// `ofp_group_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupType {
    All,
    Select,
    Indirect,
    FastFailover,
}

impl GroupType {
    pub(crate) fn from_u8(v: u8) -> Result<Self, OfError> {
        Ok(match v {
            0 => Self::All,
            1 => Self::Select,
            2 => Self::Indirect,
            3 => Self::FastFailover,
            _ => return Err(errors::GROUP_MOD_FAILED_BAD_TYPE),
        })
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Self::All => 0,
            Self::Select => 1,
            Self::Indirect => 2,
            Self::FastFailover => 3,
        }
    }
}

/// `ofp_bucket`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Relative weight (select groups).
    pub weight: u16,
    /// Port whose liveness gates this bucket (fast failover), or `OFPP_ANY`.
    pub watch_port: u32,
    /// Group whose liveness gates this bucket, or `OFPG_ANY`.
    pub watch_group: u32,
    pub actions: Vec<Action>,
    /// The bucket's id (1.5; None when decoded from 1.3 / 1.4, which have none).
    pub bucket_id: Option<u32>,
}

impl Bucket {
    /// A bucket with only actions (no weight, watch or id).
    pub fn new(actions: Vec<Action>) -> Self {
        Bucket {
            weight: 0,
            watch_port: u32::MAX,
            watch_group: u32::MAX,
            actions,
            bucket_id: None,
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(
            r.peek_u16()
                .map_err(|_| errors::GROUP_MOD_FAILED_BAD_BUCKET)?,
        );
        if len < 16 || len % 8 != 0 {
            return Err(errors::GROUP_MOD_FAILED_BAD_BUCKET);
        }
        let mut b = r.sub(len, errors::GROUP_MOD_FAILED_BAD_BUCKET)?;
        b.skip(2)?;
        let weight = b.u16()?;
        let watch_port = b.u32()?;
        let watch_group = b.u32()?;
        b.skip(4)?;
        let actions = decode_actions(&mut b)?;
        Ok(Bucket {
            weight,
            watch_port,
            watch_group,
            actions,
            bucket_id: None,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u16(self.weight);
        out.put_u32(self.watch_port);
        out.put_u32(self.watch_group);
        out.pad(4);
        encode_actions(&self.actions, out);
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

pub(crate) fn decode_buckets(r: &mut Reader<'_>) -> Result<Vec<Bucket>, OfError> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(Bucket::decode(r)?);
    }
    Ok(v)
}

pub(crate) fn encode_buckets(buckets: &[Bucket], out: &mut Vec<u8>) {
    for b in buckets {
        b.encode(out);
    }
}

/// GROUP_MOD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMod {
    pub command: GroupModCommand,
    pub group_type: GroupType,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
    /// 1.5: where INSERT_BUCKET inserts / what REMOVE_BUCKET removes ([`bucket_id`]);
    /// `bucket_id::ALL` for other commands and in 1.3 / 1.4.
    pub command_bucket_id: u32,
}

impl GroupMod {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let command = match r.u16()? {
            0 => GroupModCommand::Add,
            1 => GroupModCommand::Modify,
            2 => GroupModCommand::Delete,
            _ => return Err(errors::GROUP_MOD_FAILED_BAD_COMMAND),
        };
        let group_type = GroupType::from_u8(r.u8()?)?;
        r.skip(1)?;
        let group_id = r.u32()?;
        if command != GroupModCommand::Delete && group_id > 0xffff_ff00 {
            return Err(errors::GROUP_MOD_FAILED_INVALID_GROUP);
        }
        let buckets = decode_buckets(r)?;
        check_group_mod(command, group_type, &buckets)?;
        Ok(GroupMod {
            command,
            group_type,
            group_id,
            buckets,
            command_bucket_id: bucket_id::ALL,
        })
    }

    /// 1.3 / 1.4 layout (bucket commands are refused before: see `Message::encode_version`).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(match self.command {
            GroupModCommand::Add => 0,
            GroupModCommand::Modify => 1,
            GroupModCommand::Delete => 2,
            GroupModCommand::InsertBucket => 3,
            GroupModCommand::RemoveBucket => 5,
        });
        out.put_u8(self.group_type.to_u8());
        out.pad(1);
        out.put_u32(self.group_id);
        encode_buckets(&self.buckets, out);
    }
}

/// `ofp_group_desc`: one entry of the GROUP_DESC reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesc {
    pub group_type: GroupType,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

impl GroupDesc {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(r.peek_u16()?);
        if len < 8 {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(2)?;
        let group_type = GroupType::from_u8(e.u8()?)?;
        e.skip(1)?;
        let group_id = e.u32()?;
        let buckets = decode_buckets(&mut e)?;
        Ok(GroupDesc {
            group_type,
            group_id,
            buckets,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u8(self.group_type.to_u8());
        out.pad(1);
        out.put_u32(self.group_id);
        encode_buckets(&self.buckets, out);
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

/// `ofp_group_stats`: one entry of the GROUP reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupStats {
    pub group_id: u32,
    pub ref_count: u32,
    pub packet_count: u64,
    pub byte_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    /// (packet_count, byte_count) per bucket.
    pub bucket_stats: Vec<(u64, u64)>,
}

impl GroupStats {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(r.peek_u16()?);
        if len < 40 || (len - 40) % 16 != 0 {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(4)?;
        let mut g = GroupStats {
            group_id: e.u32()?,
            ref_count: e.u32()?,
            ..Default::default()
        };
        e.skip(4)?;
        g.packet_count = e.u64()?;
        g.byte_count = e.u64()?;
        g.duration_sec = e.u32()?;
        g.duration_nsec = e.u32()?;
        while !e.is_empty() {
            g.bucket_stats.push((e.u64()?, e.u64()?));
        }
        Ok(g)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.pad(2);
        out.put_u32(self.group_id);
        out.put_u32(self.ref_count);
        out.pad(4);
        out.put_u64(self.packet_count);
        out.put_u64(self.byte_count);
        out.put_u32(self.duration_sec);
        out.put_u32(self.duration_nsec);
        for (p, b) in &self.bucket_stats {
            out.put_u64(*p);
            out.put_u64(*b);
        }
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

/// The checks OpenFlow 1.3.5 §6.5 / §7.3.4.2 make on a GROUP_MOD's shape, before the group
/// table sees it: a DELETE carries no bucket and an indirect group exactly one
/// (`OFPGMFC_INVALID_GROUP`); only select buckets carry a weight (`OFPGMFC_BAD_BUCKET`).
pub(crate) fn check_group_mod(
    command: GroupModCommand,
    group_type: GroupType,
    buckets: &[Bucket],
) -> Result<(), OfError> {
    if command == GroupModCommand::Delete {
        return if buckets.is_empty() {
            Ok(())
        } else {
            Err(errors::GROUP_MOD_FAILED_INVALID_GROUP)
        };
    }
    if group_type == GroupType::Indirect && buckets.len() != 1 {
        return Err(errors::GROUP_MOD_FAILED_INVALID_GROUP);
    }
    if group_type != GroupType::Select && buckets.iter().any(|b| b.weight != 0) {
        return Err(errors::GROUP_MOD_FAILED_BAD_BUCKET);
    }
    Ok(())
}

/// `ofp_group_features` (GROUP_FEATURES reply; the same 40 bytes in 1.3, 1.4 and 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupFeatures {
    /// Bitmap of `1 << ofp_group_type`.
    pub types: u32,
    /// Bitmap of [`group_capabilities`].
    pub capabilities: u32,
    /// Most groups of each type (all, select, indirect, fast-failover).
    pub max_groups: [u32; 4],
    /// Per type, bitmap of `1 << ofp_action_type` a bucket may hold.
    pub actions: [u32; 4],
}

/// `ofp_group_capabilities`.
pub mod group_capabilities {
    pub const SELECT_WEIGHT: u32 = 1;
    pub const SELECT_LIVENESS: u32 = 2;
    pub const CHAINING: u32 = 4;
    pub const CHAINING_CHECKS: u32 = 8;
}

impl GroupFeatures {
    /// Size on the wire.
    pub const LEN: usize = 40;

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let mut f = GroupFeatures {
            types: r.u32()?,
            capabilities: r.u32()?,
            ..Default::default()
        };
        for m in &mut f.max_groups {
            *m = r.u32()?;
        }
        for a in &mut f.actions {
            *a = r.u32()?;
        }
        Ok(f)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.types);
        out.put_u32(self.capabilities);
        for v in self.max_groups.iter().chain(&self.actions) {
            out.put_u32(*v);
        }
    }
}
