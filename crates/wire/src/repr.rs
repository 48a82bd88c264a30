//! High-level representations of headers (`parse` from a checked view, `emit` into a buffer),
//! smoltcp style, for code that builds packets: the pipeline's ARP/ICMP responders, packet-out,
//! tests. The datapath's hot path uses the views directly.
//!
//! Owns: [`EthernetRepr`], [`ArpRepr`], [`Ipv4Repr`], [`UdpRepr`]. Every `emit` checks the
//! buffer length first and returns [`Error::Truncated`] instead of panicking.
//! Threads: any; plain data.
use crate::arp::{self, ArpPacket};
use crate::bytes::{put16, put32};
use crate::ethernet::{self, EthernetFrame};
use crate::ipv4::{self, Ipv4Packet};
use crate::udp::{self, UdpPacket};
use crate::{checksum, Error, Result};

/// An Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
    /// EtherType.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<EthernetRepr> {
        f.check_len()?;
        Ok(EthernetRepr {
            src: f.src(),
            dst: f.dst(),
            ethertype: f.ethertype(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        ethernet::HEADER_LEN
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut f = EthernetFrame::new_checked(buf)?;
        f.set_dst(self.dst);
        f.set_src(self.src);
        f.set_ethertype(self.ethertype);
        Ok(())
    }
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// 1 request, 2 reply.
    pub oper: u16,
    /// Sender MAC.
    pub sha: [u8; 6],
    /// Sender IPv4 address.
    pub spa: u32,
    /// Target MAC.
    pub tha: [u8; 6],
    /// Target IPv4 address.
    pub tpa: u32,
}

impl ArpRepr {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(a: &ArpPacket<T>) -> Result<ArpRepr> {
        a.check_len()?;
        Ok(ArpRepr {
            oper: a.oper(),
            sha: a.sha(),
            spa: a.spa(),
            tha: a.tha(),
            tpa: a.tpa(),
        })
    }

    /// Packet length.
    pub const fn buffer_len(&self) -> usize {
        arp::PACKET_LEN
    }

    /// Writes the packet at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let b = buf.get_mut(..arp::PACKET_LEN).ok_or(Error::Truncated)?;
        b[..6].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
        put16(b, arp::field::OPER.start, self.oper);
        b[arp::field::SHA].copy_from_slice(&self.sha);
        put32(b, arp::field::SPA.start, self.spa);
        b[arp::field::THA].copy_from_slice(&self.tha);
        put32(b, arp::field::TPA.start, self.tpa);
        Ok(())
    }
}

/// An IPv4 header without options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN.
    pub tos: u8,
}

impl Ipv4Repr {
    /// Reads a checked packet; a wrong header checksum is [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
            ttl: p.ttl(),
            tos: p.tos(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        ipv4::MIN_HEADER_LEN
    }

    /// Writes the header (with its checksum) at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let total =
            u16::try_from(ipv4::MIN_HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        let b = buf
            .get_mut(..ipv4::MIN_HEADER_LEN)
            .ok_or(Error::Truncated)?;
        b.fill(0);
        b[ipv4::field::VER_IHL] = 0x45;
        b[ipv4::field::TOS] = self.tos;
        put16(b, ipv4::field::LENGTH.start, total);
        b[ipv4::field::TTL] = self.ttl;
        b[ipv4::field::PROTOCOL] = self.protocol;
        put32(b, ipv4::field::SRC.start, self.src);
        put32(b, ipv4::field::DST.start, self.dst);
        Ipv4Packet::new_unchecked(b).fill_checksum();
        Ok(())
    }
}

/// A UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads a checked datagram.
    pub fn parse<T: AsRef<[u8]>>(u: &UdpPacket<T>) -> Result<UdpRepr> {
        u.check_len()?;
        Ok(UdpRepr {
            src_port: u.src_port(),
            dst_port: u.dst_port(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        udp::HEADER_LEN
    }

    /// Writes the header into `datagram` (header and payload, payload already in place), with
    /// the length and the checksum over the IPv4 pseudo-header and payload.
    pub fn emit(&self, datagram: &mut [u8], src: u32, dst: u32) -> Result<()> {
        let len = u16::try_from(datagram.len()).map_err(|_| Error::Malformed)?;
        let mut u = UdpPacket::new_checked(&mut *datagram)?;
        u.set_src_port(self.src_port);
        u.set_dst_port(self.dst_port);
        u.set_checksum(0);
        put16(datagram, udp::field::LENGTH.start, len);
        let ps = checksum::pseudo_v4(src, dst, ipv4::proto::UDP, len);
        let c = match !checksum::fold(checksum::sum(datagram, ps)) {
            0 => 0xffff,
            c => c,
        };
        put16(datagram, udp::field::CHECKSUM.start, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{extract, Field, FlowKey};

    #[test]
    fn built_udp_frame_parses_back_and_extracts() {
        let eth = EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            ethertype: ethernet::ethertype::IPV4,
        };
        let ip = Ipv4Repr {
            src: 0x0a00_0001,
            dst: 0x0a00_0002,
            protocol: ipv4::proto::UDP,
            payload_len: 12,
            ttl: 64,
            tos: 0,
        };
        let udp = UdpRepr {
            src_port: 1234,
            dst_port: 53,
        };
        let mut f = vec![0u8; 14 + 20 + 12];
        f[42..].copy_from_slice(b"ping");
        eth.emit(&mut f).unwrap();
        ip.emit(&mut f[14..]).unwrap();
        udp.emit(&mut f[34..], ip.src, ip.dst).unwrap();
        let k = extract(&f, 3);
        assert_eq!(k.get(Field::TpDst), 53);
        assert_eq!(k.get(Field::EthSrc), FlowKey::mac_to_u64(eth.src));
        let p = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), ip);
        let u = UdpPacket::new_checked(p.payload()).unwrap();
        assert_eq!(UdpRepr::parse(&u).unwrap(), udp);
        let ps = checksum::pseudo_v4(ip.src, ip.dst, 17, 12);
        assert_eq!(checksum::fold(checksum::sum(p.payload(), ps)), 0xffff);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&e).unwrap(), eth);
    }

    #[test]
    fn arp_round_trip_and_short_buffers_are_errors() {
        let a = ArpRepr {
            oper: 2,
            sha: [1; 6],
            spa: 7,
            tha: [2; 6],
            tpa: 8,
        };
        let mut b = [0u8; 28];
        a.emit(&mut b).unwrap();
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(),
            a
        );
        assert_eq!(a.emit(&mut [0u8; 27]), Err(Error::Truncated));
        let ip = Ipv4Repr {
            src: 1,
            dst: 2,
            protocol: 6,
            payload_len: 70_000,
            ttl: 1,
            tos: 0,
        };
        assert_eq!(ip.emit(&mut [0u8; 20]), Err(Error::Malformed));
        assert!(UdpRepr {
            src_port: 1,
            dst_port: 2
        }
        .emit(&mut [0u8; 7], 1, 2)
        .is_err());
        let mut bad = [0u8; 20];
        Ipv4Repr {
            payload_len: 0,
            ..ip
        }
        .emit(&mut bad)
        .unwrap();
        bad[8] ^= 1; // corrupt the TTL: checksum no longer matches
        let p = Ipv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed));
    }
}
