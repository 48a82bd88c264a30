//! OpenFlow 1.5 groups: GROUP_MOD and the GROUP_DESC entry with 1.5's bucket layout (a
//! bucket id and an action-array length, then weight / watch-port / watch-group as
//! properties), translated to and from the model's 1.3-shaped [`GroupMod`] / [`GroupDesc`]
//! (bucket ids kept), and the bucket-editing commands 1.5 added (INSERT_BUCKET,
//! REMOVE_BUCKET, with their command bucket id: `FIRST`, `LAST`, `ALL` (remove only) or a
//! bucket id; anything else `OFPGMFC_BAD_COMMAND`). Group properties are ignored. Pure codec;
//! runs on the decoding thread.

use super::{bucket_id, Bucket, GroupDesc, GroupMod, GroupModCommand, GroupType};
use crate::action::{decode_actions, encode_actions};
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};

const PROP_WEIGHT: u16 = 0;
const PROP_WATCH_PORT: u16 = 1;
const PROP_WATCH_GROUP: u16 = 2;
const ANY: u32 = 0xffff_ffff;

fn decode_bucket(r: &mut Reader<'_>) -> Result<Bucket, OfError> {
    let bad = errors::GROUP_MOD_FAILED_BAD_BUCKET;
    let len = usize::from(r.peek_u16().map_err(|_| bad)?);
    if len < 8 || len % 8 != 0 {
        return Err(bad);
    }
    let mut b = r.sub(len, bad)?;
    b.skip(2)?;
    let alen = usize::from(b.u16()?);
    let id = b.u32()?;
    if id > bucket_id::MAX {
        return Err(bad);
    }
    let mut ar = b.sub(alen, bad)?;
    let actions = decode_actions(&mut ar)?;
    let mut bucket = Bucket::new(actions);
    bucket.bucket_id = Some(id);
    while !b.is_empty() {
        let ptype = b.u16()?;
        let plen = usize::from(b.u16()?);
        if plen != 8 {
            return Err(bad);
        }
        match ptype {
            PROP_WEIGHT => {
                bucket.weight = b.u16()?;
                b.skip(2)?;
            }
            PROP_WATCH_PORT => bucket.watch_port = b.u32()?,
            PROP_WATCH_GROUP => bucket.watch_group = b.u32()?,
            _ => return Err(bad),
        }
    }
    Ok(bucket)
}

fn encode_bucket(b: &Bucket, id: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.put_u16(0);
    out.put_u32(id);
    let astart = out.len();
    encode_actions(&b.actions, out);
    let alen = len_u16(out, astart);
    out.set_u16(start + 2, alen);
    if b.weight != 0 {
        out.put_u16(PROP_WEIGHT);
        out.put_u16(8);
        out.put_u16(b.weight);
        out.pad(2);
    }
    for (t, w) in [
        (PROP_WATCH_PORT, b.watch_port),
        (PROP_WATCH_GROUP, b.watch_group),
    ] {
        if w != ANY {
            out.put_u16(t);
            out.put_u16(8);
            out.put_u32(w);
        }
    }
    let len = len_u16(out, start);
    out.set_u16(start, len);
}

fn decode_buckets(r: &mut Reader<'_>, len: usize) -> Result<Vec<Bucket>, OfError> {
    let mut br = r.sub(len, errors::GROUP_MOD_FAILED_BAD_BUCKET)?;
    let mut v = Vec::new();
    while !br.is_empty() {
        v.push(decode_bucket(&mut br)?);
    }
    Ok(v)
}

fn encode_buckets(buckets: &[Bucket], out: &mut Vec<u8>) -> usize {
    let start = out.len();
    for (i, b) in buckets.iter().enumerate() {
        encode_bucket(b, b.bucket_id.unwrap_or(i as u32), out);
    }
    out.len() - start
}

pub(crate) fn decode_group_mod(r: &mut Reader<'_>) -> Result<GroupMod, OfError> {
    let command = match r.u16()? {
        0 => GroupModCommand::Add,
        1 => GroupModCommand::Modify,
        2 => GroupModCommand::Delete,
        3 => GroupModCommand::InsertBucket,
        5 => GroupModCommand::RemoveBucket,
        _ => return Err(errors::GROUP_MOD_FAILED_BAD_COMMAND),
    };
    let group_type = GroupType::from_u8(r.u8()?)?;
    r.skip(1)?;
    let group_id = r.u32()?;
    let blen = usize::from(r.u16()?);
    r.skip(2)?;
    let command_bucket_id = r.u32()?;
    if command != GroupModCommand::Delete && group_id > 0xffff_ff00 {
        return Err(errors::GROUP_MOD_FAILED_INVALID_GROUP);
    }
    // INSERT_BUCKET: first, last or a bucket id; REMOVE_BUCKET: also all. Other commands
    // name no bucket (ovs-ofctl sends ALL; other values are ignored there, as OVS does).
    let named = command_bucket_id <= bucket_id::MAX
        || matches!(command_bucket_id, bucket_id::FIRST | bucket_id::LAST);
    let ok = match command {
        GroupModCommand::InsertBucket => named,
        GroupModCommand::RemoveBucket => named || command_bucket_id == bucket_id::ALL,
        _ => true,
    };
    if !ok {
        return Err(errors::GROUP_MOD_FAILED_BAD_COMMAND);
    }
    let buckets = decode_buckets(r, blen)?;
    // What follows are group properties (selection method, ...): ignored.
    r.rest();
    // The type of an edited group is the group's own: the pipeline checks the result.
    if !command.edits_buckets() {
        super::group::check_group_mod(command, group_type, &buckets)?;
    }
    Ok(GroupMod {
        command,
        group_type,
        group_id,
        buckets,
        command_bucket_id: if command.edits_buckets() {
            command_bucket_id
        } else {
            bucket_id::ALL
        },
    })
}

pub(crate) fn encode_group_mod(g: &GroupMod, out: &mut Vec<u8>) {
    out.put_u16(match g.command {
        GroupModCommand::Add => 0,
        GroupModCommand::Modify => 1,
        GroupModCommand::Delete => 2,
        GroupModCommand::InsertBucket => 3,
        GroupModCommand::RemoveBucket => 5,
    });
    out.put_u8(g.group_type.to_u8());
    out.pad(1);
    out.put_u32(g.group_id);
    let len_at = out.len();
    out.put_u16(0);
    out.pad(2);
    out.put_u32(g.command_bucket_id);
    let blen = encode_buckets(&g.buckets, out);
    out.set_u16(len_at, blen.min(0xffff) as u16);
}

pub(crate) fn decode_group_desc(r: &mut Reader<'_>) -> Result<GroupDesc, OfError> {
    let len = usize::from(r.peek_u16()?);
    if len < 16 {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
    e.skip(2)?;
    let group_type = GroupType::from_u8(e.u8()?)?;
    e.skip(1)?;
    let group_id = e.u32()?;
    let blen = usize::from(e.u16()?);
    e.skip(6)?;
    let buckets = decode_buckets(&mut e, blen)?;
    Ok(GroupDesc {
        group_type,
        group_id,
        buckets,
    })
}

pub(crate) fn encode_group_desc(g: &GroupDesc, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.put_u8(g.group_type.to_u8());
    out.pad(1);
    out.put_u32(g.group_id);
    let len_at = out.len();
    out.put_u16(0);
    out.pad(6);
    let blen = encode_buckets(&g.buckets, out);
    out.set_u16(len_at, blen.min(0xffff) as u16);
    let len = len_u16(out, start);
    out.set_u16(start, len);
}
