//! OpenFlow 1.3 groups of one bridge: the group table, GROUP_MOD semantics (add, modify,
//! delete, with loop and reference checks; OpenFlow 1.5's bucket ids and its insert-bucket /
//! remove-bucket commands) and the per-group / per-bucket counters.
//!
//! Translation of `group:N` lives in [`crate::xlate`]: `all` runs every bucket on a copy of the
//! packet, `indirect` its one bucket, `select` one live bucket chosen by a hash of the flow's
//! L2/L3/L4 addresses (weighted; the hashed fields go into the megaflow mask), and
//! `fast-failover` the first bucket whose watch port (or watch group) is live.
//!
//! Owns: [`GroupTable`] (inside the bridge's `FlowTables`, so it shares their RwLock: the
//! control thread mutates it under the write lock, upcalls read it under the read lock) and the
//! plain-data [`GroupMod`] / [`GroupDesc`] / [`GroupStats`] types.

use crate::types::{OfAction, OfError, OfPort};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `OFPG_MAX`: largest group number.
pub const GROUP_MAX: u32 = 0xffff_ff00;
/// `OFPG_ALL` (delete every group).
pub const GROUP_ALL: u32 = 0xffff_fffc;
/// `OFPG_ANY` (wildcard in filters and watch_group).
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// Most buckets one group may hold.
pub const MAX_BUCKETS: usize = 256;
/// Most groups one bridge may hold.
pub const MAX_GROUPS: usize = 65_536;
/// Deepest group chain translation follows.
pub const MAX_GROUP_DEPTH: usize = 8;
/// `OFPG_BUCKET_MAX`: largest bucket id (OpenFlow 1.5).
pub const BUCKET_MAX: u32 = 0xffff_ff00;
/// `OFPG_BUCKET_FIRST`: insert before the first bucket / remove the first bucket.
pub const BUCKET_FIRST: u32 = 0xffff_fffd;
/// `OFPG_BUCKET_LAST`: insert after the last bucket / remove the last bucket.
pub const BUCKET_LAST: u32 = 0xffff_fffe;
/// `OFPG_BUCKET_ALL`: every bucket (remove), or "no bucket" (other commands).
pub const BUCKET_ALL: u32 = 0xffff_ffff;

/// `ofp_group_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupType {
    /// Every bucket (multicast / broadcast).
    All,
    /// One bucket chosen by hash (load balancing).
    Select,
    /// Exactly one bucket.
    Indirect,
    /// The first live bucket.
    FastFailover,
}

/// `ofp_group_mod_command`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupCommand {
    /// Add a new group.
    Add,
    /// Replace an existing group's type and buckets.
    Modify,
    /// Delete a group (or every group with [`GROUP_ALL`]) and the rules that use it.
    Delete,
    /// OpenFlow 1.5: insert the buckets into an existing group, where
    /// [`GroupMod::command_bucket_id`] says: [`BUCKET_FIRST`], [`BUCKET_LAST`], or right
    /// after the bucket with that id (what Open vSwitch 3.1 does; its manual says "before").
    InsertBucket,
    /// OpenFlow 1.5: remove the bucket [`GroupMod::command_bucket_id`] names (or the first,
    /// the last, or every bucket).
    RemoveBucket,
}

/// One bucket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Relative weight (select groups).
    pub weight: u16,
    /// Port whose liveness gates the bucket (fast-failover), [`crate::ofpp::ANY`] = none.
    pub watch_port: OfPort,
    /// Group whose liveness gates the bucket, [`GROUP_ANY`] = none.
    pub watch_group: u32,
    /// Actions run on the packet.
    pub actions: Vec<OfAction>,
    /// Bucket id (OpenFlow 1.5). None in a GROUP_MOD of an earlier version: the group's
    /// buckets are then numbered by position from 0, as Open vSwitch numbers them. An
    /// installed group's buckets all have one.
    pub bucket_id: Option<u32>,
}

impl Bucket {
    /// A bucket with weight 1, no watch and no id.
    pub fn new(actions: Vec<OfAction>) -> Bucket {
        Bucket {
            weight: 1,
            watch_port: crate::ofpp::ANY,
            watch_group: GROUP_ANY,
            actions,
            bucket_id: None,
        }
    }
}

/// A GROUP_MOD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMod {
    /// What to do.
    pub command: GroupCommand,
    /// Group type (add/modify).
    pub group_type: GroupType,
    /// Group number.
    pub group_id: u32,
    /// Buckets (add/modify/insert-bucket).
    pub buckets: Vec<Bucket>,
    /// Where insert-bucket inserts, what remove-bucket removes; [`BUCKET_ALL`] otherwise.
    pub command_bucket_id: u32,
}

/// Counters of a group and of each of its buckets.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) created: Instant,
    pub(crate) packets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) buckets: Vec<(AtomicU64, AtomicU64)>,
}

impl Counters {
    fn new(n: usize, created: Instant) -> Arc<Counters> {
        Arc::new(Counters {
            created,
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            buckets: (0..n)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        })
    }

    /// Adds traffic to the group (`bucket` None) or to one of its buckets.
    pub(crate) fn credit(&self, bucket: Option<usize>, packets: u64, bytes: u64) {
        let (p, by) = match bucket {
            None => (&self.packets, &self.bytes),
            Some(b) => match self.buckets.get(b) {
                Some((p, by)) => (p, by),
                None => return,
            },
        };
        p.fetch_add(packets, Ordering::Relaxed);
        by.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// One group as installed.
#[derive(Debug)]
pub struct Group {
    /// Number.
    pub id: u32,
    /// Type.
    pub group_type: GroupType,
    /// Buckets.
    pub buckets: Vec<Bucket>,
    pub(crate) counters: Arc<Counters>,
}

/// A group's description (GROUP_DESC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDesc {
    /// Number.
    pub group_id: u32,
    /// Type.
    pub group_type: GroupType,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

/// A group's counters (GROUP stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStats {
    /// Number.
    pub group_id: u32,
    /// Rules (and other groups' buckets) that use this group.
    pub ref_count: u32,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Age.
    pub duration: Duration,
    /// (packets, bytes) per bucket.
    pub bucket_stats: Vec<(u64, u64)>,
}

/// The groups of one bridge.
#[derive(Default)]
pub struct GroupTable {
    groups: BTreeMap<u32, Arc<Group>>,
}

fn bucket_groups(b: &Bucket) -> impl Iterator<Item = u32> + '_ {
    b.actions.iter().filter_map(|a| match a {
        OfAction::Group(g) => Some(*g),
        _ => None,
    })
}

/// Gives every bucket an id: those without one (a GROUP_MOD before 1.5) their position,
/// counted from 0 (as Open vSwitch numbers them). An id above [`BUCKET_MAX`] or given twice
/// in the message is a bad bucket; one of the group's `existing` buckets has,
/// `BUCKET_EXISTS` (Open vSwitch 3.1 answers the same).
fn number_buckets(buckets: &mut [Bucket], existing: &[Bucket]) -> Result<(), OfError> {
    let mut seen = HashSet::new();
    for (i, b) in buckets.iter_mut().enumerate() {
        let id = *b.bucket_id.get_or_insert(i as u32);
        if id > BUCKET_MAX {
            return Err(OfError::BadBucket("bucket id above OFPG_BUCKET_MAX"));
        }
        if !seen.insert(id) {
            return Err(OfError::BadBucket("bucket id given twice"));
        }
        if existing.iter().any(|e| e.bucket_id == Some(id)) {
            return Err(OfError::BucketExists(id));
        }
    }
    Ok(())
}

impl GroupTable {
    /// The group with this number.
    pub fn get(&self, id: u32) -> Option<&Arc<Group>> {
        self.groups.get(&id)
    }

    /// Every group, by number.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Group>> {
        self.groups.values()
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True if there is no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn check(&self, gm: &GroupMod) -> Result<(), OfError> {
        if gm.group_id > GROUP_MAX {
            return Err(OfError::InvalidGroup(gm.group_id));
        }
        if gm.buckets.len() > MAX_BUCKETS {
            return Err(OfError::OutOfBuckets);
        }
        if gm.group_type == GroupType::Indirect && gm.buckets.len() != 1 {
            return Err(OfError::BadBucket(
                "an indirect group has exactly one bucket",
            ));
        }
        for b in &gm.buckets {
            if gm.group_type == GroupType::FastFailover
                && b.watch_port == crate::ofpp::ANY
                && b.watch_group == GROUP_ANY
            {
                return Err(OfError::BadWatch);
            }
            if b.watch_group != GROUP_ANY && b.watch_group > GROUP_MAX {
                return Err(OfError::BadWatch);
            }
            // Liveness is known for real ports (and LOCAL) only.
            if b.watch_port > crate::ofpp::MAX
                && b.watch_port != crate::ofpp::ANY
                && b.watch_port != crate::ofpp::LOCAL
            {
                return Err(OfError::BadWatch);
            }
            for a in &b.actions {
                crate::tables::check_action(a)?;
            }
            for g in bucket_groups(b) {
                if g == gm.group_id || self.reaches(g, gm.group_id, 0) {
                    return Err(OfError::GroupLoop);
                }
                if !self.groups.contains_key(&g) {
                    return Err(OfError::UnknownGroup(g));
                }
            }
        }
        Ok(())
    }

    /// True if group `from` (transitively) outputs to group `to`.
    fn reaches(&self, from: u32, to: u32, depth: usize) -> bool {
        if from == to {
            return true;
        }
        if depth > MAX_GROUP_DEPTH {
            return true; // too deep counts as a loop
        }
        self.groups.get(&from).is_some_and(|g| {
            g.buckets
                .iter()
                .flat_map(bucket_groups)
                .any(|n| self.reaches(n, to, depth + 1))
        })
    }

    /// Groups whose buckets use group `id`.
    fn users(&self, id: u32) -> usize {
        self.groups
            .values()
            .flat_map(|g| g.buckets.iter())
            .flat_map(bucket_groups)
            .filter(|&g| g == id)
            .count()
    }

    /// Applies an add, modify, insert-bucket or remove-bucket. Delete is done by
    /// [`GroupTable::remove`].
    pub(crate) fn apply(&mut self, mut gm: GroupMod, now: Instant) -> Result<(), OfError> {
        if matches!(
            gm.command,
            GroupCommand::InsertBucket | GroupCommand::RemoveBucket
        ) {
            return self.edit_buckets(gm);
        }
        number_buckets(&mut gm.buckets, &[])?;
        self.check(&gm)?;
        let exists = self.groups.contains_key(&gm.group_id);
        match gm.command {
            GroupCommand::Add if exists => return Err(OfError::GroupExists(gm.group_id)),
            GroupCommand::Add if self.groups.len() >= MAX_GROUPS => {
                return Err(OfError::OutOfGroups)
            }
            GroupCommand::Modify if !exists => return Err(OfError::UnknownGroup(gm.group_id)),
            GroupCommand::Delete | GroupCommand::InsertBucket | GroupCommand::RemoveBucket => {
                return Err(OfError::BadArgument("delete is not an add"))
            }
            _ => {}
        }
        let g = Group {
            id: gm.group_id,
            group_type: gm.group_type,
            counters: Counters::new(gm.buckets.len(), now),
            buckets: gm.buckets,
        };
        self.groups.insert(g.id, Arc::new(g));
        Ok(())
    }

    /// OpenFlow 1.5's INSERT_BUCKET / REMOVE_BUCKET on an existing group: the result must
    /// pass the checks an add would (bucket count, indirect groups' single bucket, watches,
    /// chaining); per-bucket counters follow their buckets.
    fn edit_buckets(&mut self, gm: GroupMod) -> Result<(), OfError> {
        let old = self
            .groups
            .get(&gm.group_id)
            .ok_or(OfError::UnknownGroup(gm.group_id))?
            .clone();
        let at = |id: u32| {
            old.buckets
                .iter()
                .position(|b| b.bucket_id == Some(id))
                .ok_or(OfError::UnknownBucket(id))
        };
        let mut buckets = old.buckets.clone();
        if gm.command == GroupCommand::InsertBucket {
            let mut new = gm.buckets;
            number_buckets(&mut new, &old.buckets)?;
            let pos = match gm.command_bucket_id {
                BUCKET_FIRST => 0,
                BUCKET_LAST => buckets.len(),
                id if id <= BUCKET_MAX => at(id)? + 1,
                _ => {
                    return Err(OfError::BadArgument(
                        "insert-bucket needs first, last or a bucket id",
                    ))
                }
            };
            buckets.splice(pos..pos, new);
        } else {
            if !gm.buckets.is_empty() {
                return Err(OfError::BadBucket("remove-bucket carries no buckets"));
            }
            match gm.command_bucket_id {
                BUCKET_ALL => buckets.clear(),
                BUCKET_FIRST if !buckets.is_empty() => {
                    buckets.remove(0);
                }
                BUCKET_LAST => {
                    buckets.pop();
                }
                BUCKET_FIRST => {}
                id if id <= BUCKET_MAX => {
                    buckets.remove(at(id)?);
                }
                _ => {
                    return Err(OfError::BadArgument(
                        "remove-bucket needs first, last, all or a bucket id",
                    ))
                }
            }
        }
        let edited = GroupMod {
            command: GroupCommand::Modify,
            group_type: old.group_type,
            group_id: old.id,
            buckets,
            command_bucket_id: BUCKET_ALL,
        };
        self.check(&edited)?;
        let counters = Counters::new(edited.buckets.len(), old.counters.created);
        let c = &old.counters;
        counters.credit(
            None,
            c.packets.load(Ordering::Relaxed),
            c.bytes.load(Ordering::Relaxed),
        );
        for (i, b) in edited.buckets.iter().enumerate() {
            if let Some(j) = old.buckets.iter().position(|o| o.bucket_id == b.bucket_id) {
                let (p, by) = &c.buckets[j];
                counters.credit(
                    Some(i),
                    p.load(Ordering::Relaxed),
                    by.load(Ordering::Relaxed),
                );
            }
        }
        let g = Group {
            id: old.id,
            group_type: old.group_type,
            buckets: edited.buckets,
            counters,
        };
        self.groups.insert(g.id, Arc::new(g));
        Ok(())
    }

    /// Removes group `id` (or all with [`GROUP_ALL`]); returns the numbers removed. A group
    /// another group's bucket uses is refused (CHAINED_GROUP) unless every group goes.
    pub(crate) fn remove(&mut self, id: u32) -> Result<Vec<u32>, OfError> {
        if id == GROUP_ALL {
            let ids = self.groups.keys().copied().collect();
            self.groups.clear();
            return Ok(ids);
        }
        if self.groups.contains_key(&id) && self.users(id) > 0 {
            return Err(OfError::ChainedGroup(id));
        }
        Ok(self.groups.remove(&id).map(|g| g.id).into_iter().collect())
    }

    /// Descriptions of every group.
    pub fn descs(&self) -> Vec<GroupDesc> {
        self.groups
            .values()
            .map(|g| GroupDesc {
                group_id: g.id,
                group_type: g.group_type,
                buckets: g.buckets.clone(),
            })
            .collect()
    }

    /// Counters of group `id` (or all with [`GROUP_ALL`]); `rule_refs` counts rules per group.
    pub fn stats(
        &self,
        id: u32,
        rule_refs: &dyn Fn(u32) -> usize,
        now: Instant,
    ) -> Vec<GroupStats> {
        self.groups
            .values()
            .filter(|g| id == GROUP_ALL || g.id == id)
            .map(|g| {
                let c = &g.counters;
                GroupStats {
                    group_id: g.id,
                    ref_count: (rule_refs(g.id) + self.users(g.id)) as u32,
                    packet_count: c.packets.load(Ordering::Relaxed),
                    byte_count: c.bytes.load(Ordering::Relaxed),
                    duration: now.saturating_duration_since(c.created),
                    bucket_stats: c
                        .buckets
                        .iter()
                        .map(|(p, b)| (p.load(Ordering::Relaxed), b.load(Ordering::Relaxed)))
                        .collect(),
                }
            })
            .collect()
    }

    /// True if group `id` has a live bucket (fast-failover watch_group semantics).
    pub fn is_live(&self, id: u32, down: &HashSet<OfPort>, depth: usize) -> bool {
        self.groups.get(&id).is_some_and(|g| {
            g.buckets
                .iter()
                .any(|b| self.bucket_live(b, down, depth + 1))
        })
    }

    /// True if a bucket's watch port and watch group are live.
    pub fn bucket_live(&self, b: &Bucket, down: &HashSet<OfPort>, depth: usize) -> bool {
        let port_ok = b.watch_port == crate::ofpp::ANY || !down.contains(&b.watch_port);
        let group_ok = b.watch_group == GROUP_ANY
            || (depth <= MAX_GROUP_DEPTH && self.is_live(b.watch_group, down, depth));
        port_ok && group_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ofpp;

    fn gm(cmd: GroupCommand, t: GroupType, id: u32, buckets: Vec<Bucket>) -> GroupMod {
        GroupMod {
            command: cmd,
            group_type: t,
            group_id: id,
            buckets,
            command_bucket_id: BUCKET_ALL,
        }
    }

    fn ids(t: &GroupTable, id: u32) -> Vec<(u32, Vec<OfAction>)> {
        t.get(id)
            .unwrap()
            .buckets
            .iter()
            .map(|b| (b.bucket_id.unwrap(), b.actions.clone()))
            .collect()
    }

    fn b(port: u32) -> Bucket {
        Bucket::new(vec![OfAction::output(port)])
    }

    fn with_id(id: u32, port: u32) -> Bucket {
        Bucket {
            bucket_id: Some(id),
            ..Bucket::new(vec![OfAction::output(port)])
        }
    }

    /// OpenFlow 1.5 bucket editing, against what Open vSwitch 3.1 answers for the same
    /// `ovs-ofctl -O OpenFlow15 insert-buckets` / `remove-buckets` commands.
    #[test]
    fn insert_and_remove_buckets() {
        let now = Instant::now();
        let mut t = GroupTable::default();
        let edit = |cmd, at: u32, buckets: Vec<Bucket>| GroupMod {
            command_bucket_id: at,
            ..gm(cmd, GroupType::All, 1, buckets)
        };
        let ins = |at, b| edit(GroupCommand::InsertBucket, at, b);
        let rm = |at| edit(GroupCommand::RemoveBucket, at, vec![]);
        // Unknown group.
        assert_eq!(
            t.apply(ins(BUCKET_LAST, vec![with_id(9, 5)]), now),
            Err(OfError::UnknownGroup(1))
        );
        // 1.3-style buckets are numbered by position.
        t.apply(
            gm(GroupCommand::Add, GroupType::All, 2, vec![b(1), b(2)]),
            now,
        )
        .unwrap();
        assert_eq!(
            ids(&t, 2).iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![0, 1]
        );
        // Ids given twice in one message: a bad bucket.
        assert!(matches!(
            t.apply(
                gm(
                    GroupCommand::Add,
                    GroupType::All,
                    1,
                    vec![with_id(1, 1), with_id(1, 2)]
                ),
                now
            ),
            Err(OfError::BadBucket(_))
        ));
        t.apply(
            gm(
                GroupCommand::Add,
                GroupType::All,
                1,
                vec![with_id(5, 1), with_id(7, 2)],
            ),
            now,
        )
        .unwrap();
        // After bucket 5 (as OVS 3.1), then first and last.
        t.apply(ins(5, vec![with_id(6, 3)]), now).unwrap();
        t.apply(ins(BUCKET_FIRST, vec![with_id(1, 4)]), now)
            .unwrap();
        t.apply(ins(BUCKET_LAST, vec![with_id(9, 5)]), now).unwrap();
        let order: Vec<u32> = ids(&t, 1).iter().map(|x| x.0).collect();
        assert_eq!(order, vec![1, 5, 6, 7, 9]);
        assert_eq!(ids(&t, 1)[2].1, vec![OfAction::output(3)]);
        // Errors: a bucket id the group lacks, one it has, a command bucket id of ALL.
        assert_eq!(
            t.apply(ins(99, vec![with_id(10, 5)]), now),
            Err(OfError::UnknownBucket(99))
        );
        assert_eq!(
            t.apply(ins(BUCKET_LAST, vec![with_id(9, 5)]), now),
            Err(OfError::BucketExists(9))
        );
        assert!(matches!(
            t.apply(ins(BUCKET_ALL, vec![with_id(10, 5)]), now),
            Err(OfError::BadArgument(_))
        ));
        assert_eq!(t.apply(rm(99), now), Err(OfError::UnknownBucket(99)));
        assert!(matches!(
            t.apply(edit(GroupCommand::RemoveBucket, 6, vec![b(1)]), now),
            Err(OfError::BadBucket(_))
        ));
        // Remove by id, first, last; then all; first on an empty group does nothing.
        t.apply(rm(6), now).unwrap();
        t.apply(rm(BUCKET_FIRST), now).unwrap();
        t.apply(rm(BUCKET_LAST), now).unwrap();
        let order: Vec<u32> = ids(&t, 1).iter().map(|x| x.0).collect();
        assert_eq!(order, vec![5, 7]);
        t.apply(rm(BUCKET_ALL), now).unwrap();
        assert!(ids(&t, 1).is_empty());
        t.apply(rm(BUCKET_FIRST), now).unwrap();
        // The edited group passes an add's checks: an indirect group keeps one bucket.
        t.apply(
            gm(GroupCommand::Add, GroupType::Indirect, 3, vec![b(1)]),
            now,
        )
        .unwrap();
        let ind = GroupMod {
            command_bucket_id: BUCKET_LAST,
            ..gm(
                GroupCommand::InsertBucket,
                GroupType::All,
                3,
                vec![with_id(9, 2)],
            )
        };
        assert!(matches!(t.apply(ind, now), Err(OfError::BadBucket(_))));
        // Bucket counters follow their buckets.
        t.apply(ins(BUCKET_LAST, vec![with_id(1, 1), with_id(2, 2)]), now)
            .unwrap();
        t.get(1).unwrap().counters.credit(Some(1), 3, 300);
        t.apply(ins(BUCKET_FIRST, vec![with_id(0, 3)]), now)
            .unwrap();
        let st = t.stats(1, &|_| 0, now);
        assert_eq!(st[0].bucket_stats, vec![(0, 0), (0, 0), (3, 300)]);
    }

    #[test]
    fn add_modify_delete_and_errors() {
        let now = Instant::now();
        let mut t = GroupTable::default();
        t.apply(
            gm(GroupCommand::Add, GroupType::All, 1, vec![b(1), b(2)]),
            now,
        )
        .unwrap();
        assert_eq!(
            t.apply(gm(GroupCommand::Add, GroupType::All, 1, vec![]), now),
            Err(OfError::GroupExists(1))
        );
        assert_eq!(
            t.apply(gm(GroupCommand::Modify, GroupType::All, 9, vec![]), now),
            Err(OfError::UnknownGroup(9))
        );
        assert_eq!(
            t.apply(
                gm(GroupCommand::Add, GroupType::Indirect, 2, vec![b(1), b(2)]),
                now
            ),
            Err(OfError::BadBucket(
                "an indirect group has exactly one bucket"
            ))
        );
        assert_eq!(
            t.apply(
                gm(GroupCommand::Add, GroupType::FastFailover, 2, vec![b(1)]),
                now
            ),
            Err(OfError::BadWatch)
        );
        let chain = Bucket::new(vec![OfAction::Group(1)]);
        t.apply(
            gm(GroupCommand::Add, GroupType::Indirect, 2, vec![chain]),
            now,
        )
        .unwrap();
        let back = Bucket::new(vec![OfAction::Group(2)]);
        assert_eq!(
            t.apply(
                gm(GroupCommand::Modify, GroupType::Indirect, 1, vec![back]),
                now
            ),
            Err(OfError::GroupLoop)
        );
        assert_eq!(t.remove(1), Err(OfError::ChainedGroup(1)));
        assert_eq!(t.remove(2), Ok(vec![2]));
        assert_eq!(t.remove(1), Ok(vec![1]));
        assert!(t.is_empty());
        assert_eq!(
            t.apply(
                gm(GroupCommand::Add, GroupType::All, GROUP_ALL, vec![]),
                now
            ),
            Err(OfError::InvalidGroup(GROUP_ALL))
        );
        // More than MAX_BUCKETS: OUT_OF_BUCKETS.
        let many = vec![b(1); MAX_BUCKETS + 1];
        assert_eq!(
            t.apply(gm(GroupCommand::Add, GroupType::All, 5, many), now),
            Err(OfError::OutOfBuckets)
        );
        assert_eq!(OfError::OutOfBuckets.type_code(), (6, 4));
        let max = vec![b(1); MAX_BUCKETS];
        t.apply(gm(GroupCommand::Add, GroupType::All, 5, max), now)
            .unwrap();
        // A watch port that is a reserved port (not LOCAL): BAD_WATCH; LOCAL is watchable.
        let watch = |p| Bucket {
            watch_port: p,
            ..b(1)
        };
        for p in [
            ofpp::IN_PORT,
            ofpp::NORMAL,
            ofpp::FLOOD,
            ofpp::ALL,
            ofpp::CONTROLLER,
        ] {
            assert_eq!(
                t.apply(
                    gm(
                        GroupCommand::Add,
                        GroupType::FastFailover,
                        6,
                        vec![watch(p)]
                    ),
                    now
                ),
                Err(OfError::BadWatch),
                "{p:#x}"
            );
        }
        t.apply(
            gm(
                GroupCommand::Add,
                GroupType::FastFailover,
                6,
                vec![watch(ofpp::LOCAL), watch(3)],
            ),
            now,
        )
        .unwrap();
        // Chaining to a group that does not exist.
        assert_eq!(
            t.apply(
                gm(
                    GroupCommand::Add,
                    GroupType::All,
                    8,
                    vec![Bucket::new(vec![OfAction::Group(77)])]
                ),
                now
            ),
            Err(OfError::UnknownGroup(77))
        );
        // A longer loop: 10 -> 11 -> 12, then 12 -> 10.
        let to = |g| Bucket::new(vec![OfAction::Group(g)]);
        t.apply(
            gm(GroupCommand::Add, GroupType::Indirect, 12, vec![b(1)]),
            now,
        )
        .unwrap();
        t.apply(
            gm(GroupCommand::Add, GroupType::Indirect, 11, vec![to(12)]),
            now,
        )
        .unwrap();
        t.apply(gm(GroupCommand::Add, GroupType::All, 10, vec![to(11)]), now)
            .unwrap();
        assert_eq!(
            t.apply(
                gm(GroupCommand::Modify, GroupType::All, 12, vec![to(10)]),
                now
            ),
            Err(OfError::GroupLoop)
        );
        // A group naming itself.
        assert_eq!(
            t.apply(gm(GroupCommand::Add, GroupType::All, 13, vec![to(13)]), now),
            Err(OfError::GroupLoop)
        );
    }

    #[test]
    fn liveness_follows_watch_port_and_group() {
        let now = Instant::now();
        let mut t = GroupTable::default();
        let w = |p| Bucket {
            watch_port: p,
            ..Bucket::new(vec![OfAction::output(p)])
        };
        t.apply(
            gm(
                GroupCommand::Add,
                GroupType::FastFailover,
                5,
                vec![w(1), w(2)],
            ),
            now,
        )
        .unwrap();
        let mut down = HashSet::new();
        assert!(t.is_live(5, &down, 0));
        down.insert(1);
        assert!(t.is_live(5, &down, 0));
        down.insert(2);
        assert!(!t.is_live(5, &down, 0));
    }
}
