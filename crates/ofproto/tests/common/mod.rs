//! Shared test helpers: a pipeline with bridge `br0` and ports p1..p4 (OpenFlow 1..4,
//! datapath 11..14), and flow-key builders.
#![allow(dead_code)]

use ofproto::{Pipeline, PipelineConfig, PortSpec, Translation};
use std::time::Instant;
use wire::{Field, FlowKey};

pub const MAC_A: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0a];
pub const MAC_B: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0b];
pub const MAC_C: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0c];
pub const BCAST: [u8; 6] = [0xff; 6];

/// Datapath port of OpenFlow port `n` (p1..p4 → 11..14).
pub fn dp(n: u32) -> u32 {
    10 + n
}

pub fn port(name: &str, n: u32, tag: Option<u16>, trunks: &[u16]) -> PortSpec {
    PortSpec {
        name: name.into(),
        dp_port: dp(n),
        ofport: Some(n),
        tag,
        trunks: trunks.to_vec(),
        mac_limit: None,
    }
}

/// br0 with p1..p4, all trunks of every VLAN.
pub fn pipeline() -> Pipeline {
    pipeline_with(PipelineConfig::default(), &[None, None, None, None])
}

pub fn pipeline_with(cfg: PipelineConfig, tags: &[Option<u16>]) -> Pipeline {
    let pl = Pipeline::new(cfg);
    pl.add_bridge("br0").unwrap();
    for (i, tag) in tags.iter().enumerate() {
        let n = i as u32 + 1;
        pl.add_port("br0", port(&format!("p{n}"), n, *tag, &[]))
            .unwrap();
    }
    pl
}

/// An Ethernet frame key arriving on OpenFlow port `in_of`.
pub fn eth(in_of: u32, src: [u8; 6], dst: [u8; 6], eth_type: u16) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::InPort, dp(in_of).into());
    k.set(Field::EthSrc, FlowKey::mac_to_u64(src));
    k.set(Field::EthDst, FlowKey::mac_to_u64(dst));
    k.set(Field::EthType, eth_type.into());
    k
}

/// A TCP/IPv4 key.
pub fn tcp(in_of: u32, src: [u8; 6], dst: [u8; 6], ips: (u32, u32), ports: (u16, u16)) -> FlowKey {
    let mut k = eth(in_of, src, dst, 0x0800);
    k.set(Field::IpProto, 6);
    k.set(Field::IpTtl, 64);
    k.set(Field::Ipv4Src, ips.0.into());
    k.set(Field::Ipv4Dst, ips.1.into());
    k.set(Field::TpSrc, ports.0.into());
    k.set(Field::TpDst, ports.1.into());
    k
}

pub fn with(mut k: FlowKey, f: Field, v: u64) -> FlowKey {
    k.set(f, v);
    k
}

pub fn xlate(pl: &Pipeline, k: &FlowKey) -> Translation {
    pl.translate(k, 60, Instant::now())
}

pub fn xlate_at(pl: &Pipeline, k: &FlowKey, now: Instant) -> Translation {
    pl.translate(k, 60, now)
}

/// Replaces every rule of br0 with `flows`.
pub fn flows(pl: &Pipeline, flows: &[&str]) {
    pl.del_flows("br0", None, false).unwrap();
    for f in flows {
        pl.add_flow("br0", f).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}
