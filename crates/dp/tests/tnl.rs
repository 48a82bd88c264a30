//! Native tunneling through a running datapath (dummy ports, a scripted pipeline): encap with
//! `TnlPush` and decap with `TnlPop` cost one upcall per megaflow, never one per packet, and
//! what leaves is a valid outer packet / the original inner frame with its tunnel metadata.
mod common;

use common::*;
use dp::action::{PopPort, TnlPop, TnlPush};
use dp::{Action, AssignMode, Datapath, DpConfig, DpTuning, Topology, Upcall, UpcallResult};
use packet::Packet;
use ports::dummy::DummyPort;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use tnl::header::{Params, Template, HEADER_LEN};
use wire::tunnel::TunnelKind;
use wire::{Field, FlowKey};

const PHY: u32 = 1;
const LOCAL: u32 = 2;
const TUN: u32 = 3;
const VM: u32 = 4;
const LOCAL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x20];

fn template(src: Ipv4Addr, dst: Ipv4Addr, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Template {
    Template::build(&Params {
        kind: TunnelKind::Vxlan,
        vni: 42,
        src_mac,
        dst_mac,
        src_ip: src.into(),
        dst_ip: dst.into(),
        dst_port: 4789,
        tos: 0,
        ttl: 64,
        df: true,
        csum: false,
        options: Vec::new(),
    })
}

/// The underlay bridge and the overlay bridge as a pipeline would translate them natively:
/// from the physical port, `tnl_pop` then output to LOCAL; from the tunnel port (after pop),
/// to the VM; from the VM, `tnl_push` then out of the physical port. Masks: `in_port` only.
struct Native {
    upcalls: AtomicU64,
    by_port: [AtomicU64; 5],
}

impl Upcall for Native {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        self.upcalls.fetch_add(1, SeqCst);
        let in_port = key.get(Field::InPort) as u32;
        self.by_port[in_port as usize].fetch_add(1, SeqCst);
        let actions: Vec<Action> = match in_port {
            PHY => vec![
                Action::TnlPop(Arc::new(TnlPop {
                    local_mac: LOCAL_MAC,
                    ports: vec![PopPort {
                        ip: Ipv4Addr::new(10, 0, 0, 1).into(),
                        udp_port: 4789,
                        geneve: false,
                        vni: Some(42),
                        remote: Some(Ipv4Addr::new(10, 0, 0, 2).into()),
                        port: TUN,
                    }],
                    tlvs: Vec::new(),
                })),
                Action::Output(LOCAL),
            ],
            TUN => {
                assert_eq!(key.get(Field::TunId), 42);
                assert_eq!(key.get(Field::TunSrc), 0x0a00_0002);
                vec![Action::Output(VM)]
            }
            VM => vec![Action::TnlPush(Arc::new(TnlPush {
                template: template(
                    Ipv4Addr::new(10, 0, 0, 1),
                    Ipv4Addr::new(10, 0, 0, 2),
                    LOCAL_MAC,
                    PEER_MAC,
                ),
                mtu: 1500,
                actions: vec![Action::Output(PHY)],
            }))],
            _ => vec![],
        };
        UpcallResult {
            actions: actions.into(),
            mask: FlowKey::ZERO,
            install: true,
            deps: dp::Deps::new(0, vec![]),
        }
    }
}

fn start() -> (Datapath, Arc<Native>, [Arc<DummyPort>; 4]) {
    let pipe = Arc::new(Native {
        upcalls: AtomicU64::new(0),
        by_port: Default::default(),
    });
    let dp = Datapath::with_tuning(
        DpConfig {
            topology: Topology::single(0..2),
            pmd_cores: vec![0],
            assign: AssignMode::Cycles,
            auto_lb: None,
        },
        DpTuning {
            emc_insert_inv_prob: 1,
            ..DpTuning::default()
        },
        pipe.clone(),
    )
    .unwrap();
    let ports: [Arc<DummyPort>; 4] = Default::default();
    for (i, p) in ports.iter().enumerate() {
        dp.add_port(i as u32 + 1, &format!("p{}", i + 1), p.clone(), &[])
            .unwrap();
    }
    (dp, pipe, ports)
}

#[test]
fn decap_and_encap_take_one_upcall_per_megaflow_not_per_packet() {
    let (_dp, pipe, [phy, local, _tun, vm]) = start();
    let n = 200u16;
    // Decap: the peer's VXLAN packets to 10.0.0.1 come in on the physical port.
    let peer = template(
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        PEER_MAC,
        LOCAL_MAC,
    );
    let inner: Vec<Vec<u8>> = (0..n).map(|i| udp_frame(0xc0a8_0002, 1000 + i)).collect();
    for (i, f) in inner.iter().enumerate() {
        phy.inject(peer.push_vec(f, i as u32 * 7919)).unwrap();
    }
    let got = collect(&vm, usize::from(n));
    assert_eq!(
        got, inner,
        "the VM gets every inner frame, unchanged and in order"
    );
    // One upcall for the outer megaflow, one for the inner: none per packet.
    assert_eq!(pipe.by_port[PHY as usize].load(SeqCst), 1);
    assert_eq!(pipe.by_port[TUN as usize].load(SeqCst), 1);
    assert!(
        local.take_captured().is_empty(),
        "nothing decapsulated reached LOCAL"
    );

    // Other traffic to the physical port goes on to LOCAL untouched (same megaflow).
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&[8, 6]);
        f.resize(60, 0);
        f
    };
    phy.inject(arp.clone()).unwrap();
    assert_eq!(collect(&local, 1), vec![arp]);

    // Encap: the VM's frames leave the physical port as VXLAN to the peer.
    for f in &inner {
        vm.inject(f.clone()).unwrap();
    }
    let out = collect(&phy, usize::from(n));
    assert_eq!(out.len(), usize::from(n));
    for (o, i) in out.iter().zip(&inner) {
        assert_eq!(&o[..6], &PEER_MAC);
        assert_eq!(&o[HEADER_LEN..], &i[..]);
        let ip = wire::ipv4::Ipv4Packet::new_checked(&o[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst(), 0x0a00_0002);
        let sport = u16::from_be_bytes([o[34], o[35]]);
        assert!((32768..=61000).contains(&sport));
    }
    assert_eq!(pipe.by_port[VM as usize].load(SeqCst), 1);
    assert_eq!(pipe.upcalls.load(SeqCst), 3);
}

#[test]
fn a_push_before_other_outputs_sends_a_copy_and_the_inner_frame_goes_on() {
    let pipe = TestPipeline::new(vec![
        Action::TnlPush(Arc::new(TnlPush {
            template: template(
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::new(10, 0, 0, 2),
                LOCAL_MAC,
                PEER_MAC,
            ),
            mtu: 1500,
            actions: vec![Action::Output(2)],
        })),
        Action::Output(3),
    ]);
    let dp = Datapath::with_tuning(
        DpConfig {
            topology: Topology::single(0..2),
            pmd_cores: vec![0],
            assign: AssignMode::Cycles,
            auto_lb: None,
        },
        DpTuning::default(),
        pipe.clone(),
    )
    .unwrap();
    let ports: [Arc<DummyPort>; 3] = Default::default();
    for (i, p) in ports.iter().enumerate() {
        dp.add_port(i as u32 + 1, &format!("p{}", i + 1), p.clone(), &[])
            .unwrap();
    }
    let f = udp_frame(0x0a00_0002, 9);
    for _ in 0..10 {
        ports[0].inject(f.clone()).unwrap();
    }
    let outer = collect(&ports[1], 10);
    let plain = collect(&ports[2], 10);
    assert!(outer
        .iter()
        .all(|o| o.len() == f.len() + HEADER_LEN && o[HEADER_LEN..] == f[..]));
    assert!(
        plain.iter().all(|p| *p == f),
        "the inner frame is not changed by the push"
    );
    assert_eq!(pipe.upcalls.load(SeqCst), 1);
}
