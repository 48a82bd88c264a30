//! Translation of the Nicira extensions: `resubmit` (nested lookups within the depth and
//! work limits), reads and writes of registers and packet fields for `load` / `move` (a
//! packet field read enters the megaflow mask), and `dec_ttl`.
//!
//! Owns: methods of [`Xlate`] and [`packet_set_field`]. Threads: the PMD thread doing the
//! upcall (as the rest of `xlate`).

use super::{encode_cookie, Xlate, MAX_RESUBMIT_DEPTH};
use crate::nx::{ones, NxField};
use crate::types::{ethertype, ofpp, OfPort, PacketInReason, SetField};
use dpif::Action;
use wire::Field;

impl<'a> Xlate<'a> {
    /// `resubmit(port,table)`: a nested lookup; the ingress port is restored afterwards.
    pub(super) fn resubmit(&mut self, port: Option<OfPort>, table: Option<u8>) {
        if self.resubmit_depth >= MAX_RESUBMIT_DEPTH {
            self.limit_hit = true;
            return;
        }
        let table = table.unwrap_or(self.cur_table);
        let (saved_in, saved_table, saved_rule) = (self.in_of, self.cur_table, self.cur_rule);
        if let Some(p) = port {
            let p = if p == ofpp::IN_PORT { self.in_of } else { p };
            self.key.set(Field::InPort, u64::from(p));
        }
        self.resubmit_depth += 1;
        self.run_from(table);
        self.resubmit_depth -= 1;
        self.key.set(Field::InPort, u64::from(saved_in));
        self.cur_table = saved_table;
        self.cur_rule = saved_rule;
    }

    /// Reads a field (register file or packet key); packet bits read enter the megaflow mask.
    pub(super) fn read_field(&mut self, f: NxField, mask: u128) -> u128 {
        match f {
            NxField::Packet(p) => {
                p.unwildcard(&mut self.wc, mask);
                p.get(&self.key)
            }
            f if f.is_register() => f.get_reg(&self.regs),
            NxField::TunMetadata { off, len, .. } => {
                let (o, l) = (usize::from(off), usize::from(len));
                let seen = wire::tunmd::get(&self.wc, o, l) | mask;
                wire::tunmd::set(&mut self.wc, o, l, seen);
                wire::tunmd::get(&self.key, o, l)
            }
            f => {
                // Tunnel fields (others read 0): the bits read enter the mask.
                let old = f.get_tunnel(&self.wc);
                f.set_tunnel(&mut self.wc, old | mask, u128::MAX);
                f.get_tunnel(&self.key)
            }
        }
    }

    /// Writes bits `mask` of `value` into a field. Packet fields go through set-field (the
    /// field's other bits are read, so they enter the mask when the write is partial).
    pub(super) fn write_field(&mut self, f: NxField, value: u128, mask: u128) {
        match f {
            NxField::Packet(p) => {
                let width = p.info().2;
                let full = ones(width);
                let old = if mask & full == full {
                    0
                } else {
                    self.read_field(f, full & !mask)
                };
                let new = (old & !mask) | (value & mask);
                if let Some(sf) = packet_set_field(p, new) {
                    self.set_field(sf);
                }
            }
            f if f.is_register() => f.set_reg(&mut self.regs, value, mask),
            NxField::TunMetadata { off, len, .. } => {
                let full = ones(f.width());
                let old = if mask & full == full {
                    0
                } else {
                    self.read_field(f, full & !mask)
                };
                let new = (old & !mask) | (value & mask);
                wire::tunmd::set(&mut self.key, usize::from(off), usize::from(len), new);
            }
            f => {
                // Tunnel fields: the key changes now, the datapath at the next output. The
                // bits kept are read, so they enter the mask. (ct_mark/ct_label outside ct()
                // are refused at FLOW_MOD time.)
                if f.is_tunnel() {
                    let full = ones(f.width());
                    if mask & full != full {
                        self.read_field(f, full & !mask);
                    }
                    f.set_tunnel(&mut self.key, value, mask);
                }
            }
        }
    }

    /// `dec_ttl`: decrements the TTL; 0 or 1 sends a packet-in (reason invalid_ttl) and stops
    /// the rule. A non-IP packet is left alone.
    pub(super) fn dec_ttl(&mut self) {
        if !self.eth_type_is(&[ethertype::IPV4, ethertype::IPV6]) {
            return;
        }
        self.wc.set_exact(Field::IpTtl);
        let ttl = self.key.get(Field::IpTtl) as u8;
        if ttl <= 1 {
            if self.br.of_config(self.in_of) & crate::bridge::port_config::NO_PACKET_IN == 0 {
                self.commit_vlan();
                let serial = self.cur_rule.map_or(0, |r| r.serial);
                let cookie = encode_cookie(
                    self.br.id,
                    PacketInReason::InvalidTtl,
                    self.cur_table,
                    serial,
                );
                self.out.push(Action::Userspace(cookie));
            }
            self.stop = true;
            return;
        }
        self.key.set(Field::IpTtl, u64::from(ttl - 1));
        self.out.push(Action::SetIpTtl(ttl - 1));
    }
}

/// The set-field that writes `v` into a packet field, if the datapath can write it.
pub(crate) fn packet_set_field(p: crate::nx::PktField, v: u128) -> Option<SetField> {
    use crate::nx::PktField as P;
    Some(match p {
        P::EthSrc => SetField::EthSrc(super::u64_to_mac(v as u64)),
        P::EthDst => SetField::EthDst(super::u64_to_mac(v as u64)),
        P::Ipv4Src => SetField::Ipv4Src(v as u32),
        P::Ipv4Dst => SetField::Ipv4Dst(v as u32),
        P::TcpSrc => SetField::TcpSrc(v as u16),
        P::TcpDst => SetField::TcpDst(v as u16),
        P::UdpSrc => SetField::UdpSrc(v as u16),
        P::UdpDst => SetField::UdpDst(v as u16),
        _ => return None,
    })
}
