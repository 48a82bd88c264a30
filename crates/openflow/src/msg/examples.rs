//! One example of every message this crate encodes, for round-trip tests, the fuzz seed
//! corpus and other crates' tests. Pure data.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::action::{Action, Instruction};
use crate::oxm::{Match, OxmField};

fn tcp_match() -> Match {
    Match::new(vec![
        OxmField::InPort(1),
        OxmField::EthType(0x0800),
        OxmField::IpProto(6),
        OxmField::Ipv4Dst(
            Ipv4Addr::new(10, 0, 0, 0),
            Some(Ipv4Addr::new(255, 255, 255, 0)),
        ),
        OxmField::TcpDst(80),
    ])
}

fn port(n: u32) -> Port {
    Port {
        port_no: n,
        hw_addr: [2, 0, 0, 0, 0, n as u8],
        name: format!("p{n}"),
        state: 4,
        curr_speed: 10_000_000,
        max_speed: 10_000_000,
        ..Default::default()
    }
}

fn flow_mod() -> FlowMod {
    let mut fm = FlowMod::add(
        100,
        tcp_match(),
        vec![
            Instruction::ApplyActions(vec![
                Action::SetField(OxmField::EthDst([1, 2, 3, 4, 5, 6], None)),
                Action::PushVlan(0x8100),
                Action::SetField(OxmField::VlanVid(0x1000 | 10, None)),
                Action::Output {
                    port: 2,
                    max_len: 0,
                },
            ]),
            Instruction::WriteMetadata {
                metadata: 5,
                mask: 0xff,
            },
            Instruction::GotoTable(1),
        ],
    );
    fm.cookie = 0x1234;
    fm.flags = flow_mod_flags::SEND_FLOW_REM | flow_mod_flags::CHECK_OVERLAP;
    fm
}

fn group_mod() -> GroupMod {
    GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::Select,
        group_id: 7,
        buckets: vec![
            Bucket {
                weight: 1,
                ..Bucket::new(vec![Action::Output {
                    port: 1,
                    max_len: 0,
                }])
            },
            Bucket {
                weight: 2,
                ..Bucket::new(vec![Action::Output {
                    port: 2,
                    max_len: 0,
                }])
            },
        ],
        command_bucket_id: super::bucket_id::ALL,
    }
}

fn flow_stats() -> FlowStats {
    FlowStats {
        table_id: 0,
        duration_sec: 3,
        duration_nsec: 4,
        priority: 100,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: 9,
        packet_count: 10,
        byte_count: 1000,
        matches: tcp_match(),
        instructions: flow_mod().instructions,
    }
}

fn table_features(id: u8) -> TableFeatures {
    use crate::oxm::field;
    TableFeatures {
        table_id: id,
        name: format!("table{id}"),
        metadata_match: u64::MAX,
        metadata_write: u64::MAX,
        config: 0,
        max_entries: 1_000_000,
        properties: vec![
            TableFeatureProp::ids(table_prop::INSTRUCTIONS, &[1, 2, 3, 4, 5]),
            TableFeatureProp::next_tables(table_prop::NEXT_TABLES, id + 1..=id + 3),
            TableFeatureProp::ids(table_prop::APPLY_ACTIONS, &[0, 17, 18, 22, 25]),
            TableFeatureProp::oxm_ids(
                table_prop::MATCH,
                &[field::InPort, field::EthDst, field::Ipv6Src],
            ),
        ],
    }
}

fn replies() -> Vec<MultipartReplyBody> {
    use MultipartReplyBody as B;
    vec![
        B::Desc(Desc {
            mfr_desc: "Vireo".into(),
            hw_desc: "userspace".into(),
            sw_desc: "0.1".into(),
            serial_num: "none".into(),
            dp_desc: "br0".into(),
        }),
        B::Flow(vec![flow_stats(), flow_stats()]),
        B::Aggregate(AggregateStats {
            packet_count: 1,
            byte_count: 2,
            flow_count: 3,
        }),
        B::Table(vec![TableStats {
            table_id: 0,
            active_count: 1,
            lookup_count: 2,
            matched_count: 1,
        }]),
        B::PortStats(vec![PortStats {
            port_no: 1,
            rx_packets: 5,
            tx_bytes: 9,
            ..Default::default()
        }]),
        B::PortDesc(vec![port(1), port(2)]),
        B::Group(vec![GroupStats {
            group_id: 7,
            bucket_stats: vec![(1, 2), (3, 4)],
            ..Default::default()
        }]),
        B::TableFeatures(vec![table_features(0), table_features(1)]),
        B::GroupDesc(vec![GroupDesc {
            group_type: GroupType::Select,
            group_id: 7,
            buckets: group_mod().buckets,
        }]),
        B::Meter(vec![MeterStatsEntry {
            meter_id: 1,
            flow_count: 2,
            packet_in_count: 100,
            byte_in_count: 6400,
            duration_sec: 3,
            duration_nsec: 4,
            bands: vec![(10, 640), (20, 1280)],
        }]),
        B::MeterConfig(vec![MeterConfigEntry {
            flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
            meter_id: 1,
            bands: meter_bands(),
        }]),
        B::GroupFeatures(GroupFeatures {
            types: 0b1111,
            capabilities: 0b1111,
            max_groups: [65536, 65536, 65536, 65536],
            actions: [1, 1 << 17, 1 << 22, 1 << 25],
        }),
        B::Queue,
        B::MeterFeatures(MeterFeatures {
            max_meter: 65536,
            band_types: 0b110,
            capabilities: 0xf,
            max_bands: 8,
            max_color: 0,
        }),
    ]
}

fn meter_bands() -> Vec<MeterBand> {
    vec![
        MeterBand {
            action: BandAction::Drop,
            rate: 1000,
            burst_size: 100,
        },
        MeterBand {
            action: BandAction::DscpRemark(1),
            rate: 500,
            burst_size: 50,
        },
    ]
}

fn requests() -> Vec<MultipartRequestBody> {
    use MultipartRequestBody as B;
    let fsr = FlowStatsRequest {
        cookie: 1,
        cookie_mask: 0xff,
        matches: tcp_match(),
        ..Default::default()
    };
    vec![
        B::Desc,
        B::Flow(fsr.clone()),
        B::Aggregate(fsr),
        B::Table,
        B::PortStats(port_no::ANY),
        B::PortDesc,
        B::Group(GROUP_ALL),
        B::GroupDesc,
        B::TableFeatures(Vec::new()),
        B::TableFeatures(vec![table_features(3)]),
        B::Meter(METER_ALL),
        B::MeterConfig(5),
        B::MeterFeatures,
        B::GroupFeatures,
        B::Queue {
            port_no: port_no::ANY,
            queue_id: 0xffff_ffff,
        },
        B::Queue {
            port_no: 2,
            queue_id: 7,
        },
    ]
}

/// One example of every message kind (several for multipart).
pub fn examples() -> Vec<Message> {
    let v6: Ipv6Addr = "fe80::1".parse().unwrap_or(Ipv6Addr::LOCALHOST);
    let mut v = vec![
        Message::Hello(Hello::default()),
        Message::Hello(Hello {
            version: 4,
            bitmap: None,
        }),
        Message::Error(ErrorMsg {
            etype: 1,
            code: 6,
            data: vec![4, 14, 0, 8, 0, 0, 0, 1],
        }),
        Message::EchoRequest(b"ping".to_vec()),
        Message::EchoReply(Vec::new()),
        Message::FeaturesRequest,
        Message::FeaturesReply(FeaturesReply {
            datapath_id: 0xabc,
            n_buffers: 0,
            n_tables: 254,
            auxiliary_id: 0,
            capabilities: 0x4f,
        }),
        Message::GetConfigRequest,
        Message::GetConfigReply(SwitchConfig::default()),
        Message::SetConfig(SwitchConfig {
            flags: 0,
            miss_send_len: 0xffff,
        }),
        Message::PacketIn(PacketIn {
            buffer_id: NO_BUFFER,
            total_len: 4,
            reason: 1,
            table_id: 0,
            cookie: 3,
            matches: Match::new(vec![OxmField::InPort(3), OxmField::Ipv6NdTarget(v6)]),
            data: vec![1, 2, 3, 4],
        }),
        Message::FlowRemoved(FlowRemoved {
            cookie: 1,
            priority: 2,
            reason: 2,
            table_id: 0,
            duration_sec: 1,
            duration_nsec: 2,
            idle_timeout: 10,
            hard_timeout: 0,
            packet_count: 5,
            byte_count: 6,
            matches: tcp_match(),
        }),
        Message::PortStatus(PortStatus {
            reason: 0,
            desc: port(3),
        }),
        Message::PacketOut(PacketOut {
            buffer_id: NO_BUFFER,
            in_port: port_no::CONTROLLER,
            actions: vec![
                Action::Output {
                    port: 1,
                    max_len: 0,
                },
                Action::Group(7),
            ],
            data: vec![0xff; 60],
        }),
        Message::FlowMod(flow_mod()),
        Message::FlowMod(FlowMod {
            command: FlowModCommand::Delete,
            table_id: 0xff,
            cookie_mask: 0xffff,
            out_port: 2,
            instructions: Vec::new(),
            ..flow_mod()
        }),
        Message::GroupMod(group_mod()),
        Message::PortMod(PortMod {
            port_no: 1,
            hw_addr: [2, 0, 0, 0, 0, 1],
            config: 1,
            mask: 1,
            advertise: 0,
        }),
        Message::TableMod(TableMod {
            table_id: 0,
            config: 3,
        }),
        Message::BarrierRequest,
        Message::BarrierReply,
        Message::RoleRequest(RoleMsg {
            role: Role::Master,
            generation_id: 1,
        }),
        Message::RoleReply(RoleMsg {
            role: Role::Slave,
            generation_id: 2,
        }),
        Message::QueueGetConfigRequest(1),
        Message::QueueGetConfigReply(2),
        Message::GetAsyncRequest,
        Message::GetAsyncReply(AsyncConfig::default()),
        Message::SetAsync(AsyncConfig {
            packet_in: [0b111, 0b001],
            port_status: [0b001, 0],
            flow_removed: [0, 0b1000],
            ..AsyncConfig::default()
        }),
        Message::SetAsyncProps(vec![(1, 0b111), (4, 0b1000)]),
        Message::MeterMod(MeterMod {
            command: MeterModCommand::Add,
            flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
            meter_id: 1,
            bands: meter_bands(),
        }),
        Message::MeterMod(MeterMod {
            command: MeterModCommand::Delete,
            flags: 0,
            meter_id: METER_ALL,
            bands: Vec::new(),
        }),
    ];
    v.extend(
        requests()
            .into_iter()
            .map(|b| Message::MultipartRequest(MultipartRequest::new(b))),
    );
    v.extend(
        replies()
            .into_iter()
            .map(|b| Message::MultipartReply(MultipartReply::new(b))),
    );
    v
}
