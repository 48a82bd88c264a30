//! Translation of OpenFlow groups: `all`, `indirect`, `select` (a bucket chosen by a hash of
//! the packet's fields, weighted) and `fast_failover` (the first bucket whose watched port is
//! live); each bucket runs on a copy of the packet whose rewrites are undone afterwards.
//!
//! Threads: like [`super::Xlate`], the PMD thread doing the upcall (or the control thread
//! re-checking a megaflow).
use super::*;

impl<'a> Xlate<'a> {
    /// Executes group `id` (a missing group drops, as a deleted group's rules are gone too).
    /// Every bucket runs on a copy of the packet: what a bucket rewrites is undone afterwards.
    pub(super) fn xlate_group(&mut self, id: u32) {
        let tables = self.tables;
        let Some(g) = tables.groups.get(id) else {
            return;
        };
        if self.group_depth >= MAX_GROUP_DEPTH {
            return;
        }
        let g: &'a Group = g;
        self.group_depth += 1;
        self.group_hits.push((g, None));
        let chosen: Vec<usize> = match g.group_type {
            GroupType::All => (0..g.buckets.len()).collect(),
            GroupType::Indirect => (0..g.buckets.len().min(1)).collect(),
            GroupType::Select => self.select_bucket(g).into_iter().collect(),
            GroupType::FastFailover => self.first_live(g).into_iter().collect(),
        };
        for i in chosen {
            self.group_hits.push((g, Some(i)));
            self.run_bucket(&g.buckets[i]);
        }
        self.group_depth -= 1;
    }

    pub(super) fn run_bucket(&mut self, b: &Bucket) {
        let saved = self.key;
        for a in &b.actions {
            if self.limit_hit {
                break;
            }
            self.exec(a);
        }
        self.restore(&saved);
    }

    /// Undoes in the datapath packet what a bucket's set-fields changed (VLAN changes are
    /// committed lazily and need nothing here).
    pub(super) fn restore(&mut self, saved: &FlowKey) {
        for f in [Field::EthSrc, Field::EthDst, Field::Ipv4Src, Field::Ipv4Dst] {
            let v = saved.get(f);
            if self.key.get(f) == v {
                continue;
            }
            self.out.push(match f {
                Field::EthSrc => Action::SetEthSrc(u64_to_mac(v)),
                Field::EthDst => Action::SetEthDst(u64_to_mac(v)),
                Field::Ipv4Src => Action::SetIpv4Src(v as u32),
                _ => Action::SetIpv4Dst(v as u32),
            });
        }
        if self.key.get(Field::IpTos) != saved.get(Field::IpTos) {
            self.out
                .push(Action::SetIpDscp((saved.get(Field::IpTos) >> 2) as u8));
        }
        if self.key.get(Field::TpSrc) != saved.get(Field::TpSrc) {
            self.out
                .push(Action::SetTpSrc(saved.get(Field::TpSrc) as u16));
        }
        if self.key.get(Field::TpDst) != saved.get(Field::TpDst) {
            self.out
                .push(Action::SetTpDst(saved.get(Field::TpDst) as u16));
        }
        self.key = *saved;
    }

    pub(super) fn down_ports(&self) -> std::collections::HashSet<OfPort> {
        match self.br.shared.down.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub(super) fn first_live(&mut self, g: &Group) -> Option<usize> {
        let down = self.down_ports();
        let tables = self.tables;
        g.buckets
            .iter()
            .position(|b| tables.groups.bucket_live(b, &down, 0))
    }

    /// A live bucket picked by a hash of the flow's addresses, by weight.
    pub(super) fn select_bucket(&mut self, g: &Group) -> Option<usize> {
        let down = self.down_ports();
        let tables = self.tables;
        let live: Vec<(usize, u64)> = g
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| tables.groups.bucket_live(b, &down, 0))
            .map(|(i, b)| (i, u64::from(b.weight)))
            .collect();
        let unweighted = live.iter().all(|(_, w)| *w == 0);
        let total: u64 = live
            .iter()
            .map(|(_, w)| if unweighted { 1 } else { *w })
            .sum();
        if total == 0 {
            return None;
        }
        let mut pick = self.flow_hash() % total;
        for (i, w) in live {
            let w = if unweighted { 1 } else { w };
            if pick < w {
                return Some(i);
            }
            pick -= w;
        }
        None
    }

    /// Hash of the L2 addresses, and of the L3 addresses and L4 ports when present; every
    /// field hashed is added to the megaflow mask.
    pub(super) fn flow_hash(&mut self) -> u64 {
        let mut fields = vec![Field::EthSrc, Field::EthDst, Field::EthType, Field::VlanTci];
        match self.key.get(Field::EthType) as u16 {
            ethertype::IPV4 => fields.extend([Field::Ipv4Src, Field::Ipv4Dst, Field::IpProto]),
            ethertype::IPV6 => fields.extend([
                Field::Ipv6SrcHi,
                Field::Ipv6SrcLo,
                Field::Ipv6DstHi,
                Field::Ipv6DstLo,
                Field::IpProto,
            ]),
            _ => {}
        }
        let ip = fields.contains(&Field::IpProto);
        if ip && matches!(self.key.get(Field::IpProto), 6 | 17 | 132) {
            fields.extend([Field::TpSrc, Field::TpDst]);
        }
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for f in fields {
            self.wc.set_exact(f);
            h = (h ^ self.key.get(f))
                .wrapping_mul(0x0000_0100_0000_01b3)
                .rotate_left(29);
        }
        h ^ (h >> 31)
    }
}
