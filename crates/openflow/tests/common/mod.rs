//! A small in-memory switch built on the connection layer, for integration tests: a flow
//! list (one table), groups, two ports, and a log of every message the handler received.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use openflow::conn::{ConnConfig, ConnId, OfSwitch, SwitchHandler};
use openflow::msg::*;
use openflow::oxm::Match;
use openflow::{errors, Action, Instruction, OfError};

#[derive(Debug, Clone)]
pub struct Flow {
    pub table_id: u8,
    pub priority: u16,
    pub cookie: u64,
    pub flags: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub matches: Match,
    pub instructions: Vec<Instruction>,
}

#[derive(Default)]
pub struct TestSwitch {
    pub flows: Mutex<Vec<Flow>>,
    pub groups: Mutex<Vec<GroupMod>>,
    pub received: Mutex<Vec<Message>>,
    pub config: Mutex<SwitchConfig>,
}

pub fn ports() -> Vec<Port> {
    (1..=2)
        .map(|n| Port {
            port_no: n,
            hw_addr: [0x02, 0, 0, 0, 0, n as u8],
            name: format!("vport{n}"),
            state: 4,
            curr: 0x2000 | 0x40,
            curr_speed: 10_000_000,
            max_speed: 10_000_000,
            ..Default::default()
        })
        .collect()
}

/// Every field of `sub` is in `m` with the same value and mask.
fn covers(sub: &Match, m: &Match) -> bool {
    sub.fields.iter().all(|f| m.fields.contains(f))
}

fn cookie_ok(flow: &Flow, cookie: u64, mask: u64) -> bool {
    flow.cookie & mask == cookie & mask
}

fn outputs_to(flow: &Flow, port: u32) -> bool {
    port == port_no::ANY
        || flow.instructions.iter().any(|i| match i {
            Instruction::ApplyActions(a) | Instruction::WriteActions(a) => a
                .iter()
                .any(|a| matches!(a, Action::Output { port: p, .. } if *p == port)),
            _ => false,
        })
}

impl TestSwitch {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn flow_mods(&self) -> Vec<FlowMod> {
        let rx = self.received.lock().unwrap();
        rx.iter()
            .filter_map(|m| {
                if let Message::FlowMod(f) = m {
                    Some(f.clone())
                } else {
                    None
                }
            })
            .collect()
    }

    fn selects(fm: &FlowMod, f: &Flow, strict: bool) -> bool {
        (fm.table_id == TABLE_ALL || fm.table_id == f.table_id)
            && cookie_ok(f, fm.cookie, fm.cookie_mask)
            && outputs_to(f, fm.out_port)
            && if strict {
                f.priority == fm.priority && f.matches == fm.matches
            } else {
                covers(&fm.matches, &f.matches)
            }
    }

    fn flow_mod(&self, fm: FlowMod) -> Result<(), OfError> {
        let mut flows = self.flows.lock().unwrap();
        let strict = matches!(
            fm.command,
            FlowModCommand::ModifyStrict | FlowModCommand::DeleteStrict
        );
        match fm.command {
            FlowModCommand::Add => {
                if fm.flags & flow_mod_flags::CHECK_OVERLAP != 0
                    && flows
                        .iter()
                        .any(|f| f.priority == fm.priority && f.matches == fm.matches)
                {
                    return Err(errors::FLOW_MOD_FAILED_OVERLAP);
                }
                flows.retain(|f| {
                    !(f.priority == fm.priority
                        && f.matches == fm.matches
                        && f.table_id == fm.table_id)
                });
                flows.push(Flow {
                    table_id: fm.table_id,
                    priority: fm.priority,
                    cookie: fm.cookie,
                    flags: fm.flags,
                    idle_timeout: fm.idle_timeout,
                    hard_timeout: fm.hard_timeout,
                    matches: fm.matches,
                    instructions: fm.instructions,
                });
            }
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => {
                for f in flows.iter_mut().filter(|f| Self::selects(&fm, f, strict)) {
                    f.instructions = fm.instructions.clone();
                }
            }
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => {
                flows.retain(|f| !Self::selects(&fm, f, strict));
            }
        }
        Ok(())
    }

    fn flow_stats(&self, req: &FlowStatsRequest) -> Vec<FlowStats> {
        let flows = self.flows.lock().unwrap();
        flows
            .iter()
            .filter(|f| req.table_id == TABLE_ALL || req.table_id == f.table_id)
            .filter(|f| cookie_ok(f, req.cookie, req.cookie_mask) && outputs_to(f, req.out_port))
            .filter(|f| covers(&req.matches, &f.matches))
            .map(|f| FlowStats {
                table_id: f.table_id,
                duration_sec: 1,
                duration_nsec: 0,
                priority: f.priority,
                idle_timeout: f.idle_timeout,
                hard_timeout: f.hard_timeout,
                flags: f.flags,
                cookie: f.cookie,
                packet_count: 3,
                byte_count: 180,
                matches: f.matches.clone(),
                instructions: f.instructions.clone(),
            })
            .collect()
    }

    fn multipart(&self, req: MultipartRequest) -> Result<MultipartReplyBody, OfError> {
        use MultipartReplyBody as R;
        use MultipartRequestBody as Q;
        Ok(match req.body {
            Q::Desc => R::Desc(Desc {
                mfr_desc: "Vireo".into(),
                hw_desc: "test switch".into(),
                sw_desc: "0.1.0".into(),
                serial_num: "None".into(),
                dp_desc: "br0".into(),
            }),
            Q::PortDesc => R::PortDesc(ports()),
            Q::PortStats(p) => R::PortStats(
                ports()
                    .iter()
                    .filter(|x| p == port_no::ANY || x.port_no == p)
                    .map(|x| PortStats {
                        port_no: x.port_no,
                        rx_packets: 10 * u64::from(x.port_no),
                        tx_packets: 7,
                        rx_bytes: 640,
                        tx_bytes: 448,
                        ..Default::default()
                    })
                    .collect(),
            ),
            Q::Flow(r) => R::Flow(self.flow_stats(&r)),
            Q::Aggregate(r) => {
                let v = self.flow_stats(&r);
                R::Aggregate(AggregateStats {
                    packet_count: v.iter().map(|f| f.packet_count).sum(),
                    byte_count: v.iter().map(|f| f.byte_count).sum(),
                    flow_count: v.len() as u32,
                })
            }
            Q::Table => R::Table(vec![TableStats {
                table_id: 0,
                active_count: self.flows.lock().unwrap().len() as u32,
                lookup_count: 10,
                matched_count: 8,
            }]),
            Q::Group(_) => R::Group(
                self.groups
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|g| GroupStats {
                        group_id: g.group_id,
                        bucket_stats: vec![(0, 0); g.buckets.len()],
                        ..Default::default()
                    })
                    .collect(),
            ),
            Q::TableFeatures(set) if !set.is_empty() => return Err(errors::BAD_REQUEST_EPERM),
            Q::Meter(_)
            | Q::MeterConfig(_)
            | Q::MeterFeatures
            | Q::GroupFeatures
            | Q::Queue { .. } => return Err(errors::BAD_REQUEST_BAD_MULTIPART),
            Q::TableFeatures(_) => R::TableFeatures(
                (0..254)
                    .map(|t| TableFeatures::standard(t, 254, 100_000))
                    .collect(),
            ),
            Q::GroupDesc => R::GroupDesc(
                self.groups
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|g| GroupDesc {
                        group_type: g.group_type,
                        group_id: g.group_id,
                        buckets: g.buckets.clone(),
                    })
                    .collect(),
            ),
        })
    }
}

impl SwitchHandler for TestSwitch {
    fn features(&self) -> FeaturesReply {
        FeaturesReply {
            datapath_id: 0x0000_0000_0000_00ab,
            n_buffers: 0,
            n_tables: 254,
            auxiliary_id: 0,
            capabilities: 0x4f,
        }
    }

    fn handle(&self, _conn: ConnId, _xid: u32, msg: Message) -> Result<Vec<Message>, OfError> {
        self.received.lock().unwrap().push(msg.clone());
        match msg {
            Message::FlowMod(fm) => self.flow_mod(fm).map(|_| Vec::new()),
            Message::GroupMod(gm) => {
                let mut groups = self.groups.lock().unwrap();
                match gm.command {
                    GroupModCommand::Add if groups.iter().any(|g| g.group_id == gm.group_id) => {
                        return Err(errors::GROUP_MOD_FAILED_GROUP_EXISTS)
                    }
                    GroupModCommand::Add => groups.push(gm),
                    GroupModCommand::Modify => {
                        groups.retain(|g| g.group_id != gm.group_id);
                        groups.push(gm);
                    }
                    GroupModCommand::Delete => {
                        groups.retain(|g| gm.group_id != GROUP_ALL && g.group_id != gm.group_id)
                    }
                    // This codec-level test switch does not edit buckets.
                    GroupModCommand::InsertBucket | GroupModCommand::RemoveBucket => {
                        return Err(errors::GROUP_MOD_FAILED_BAD_COMMAND)
                    }
                }
                Ok(Vec::new())
            }
            Message::PacketOut(_) | Message::PortMod(_) | Message::TableMod(_) => Ok(Vec::new()),
            Message::GetConfigRequest => {
                Ok(vec![Message::GetConfigReply(*self.config.lock().unwrap())])
            }
            Message::SetConfig(c) => {
                *self.config.lock().unwrap() = c;
                Ok(Vec::new())
            }
            Message::MultipartRequest(r) => Ok(vec![Message::MultipartReply(MultipartReply::new(
                self.multipart(r)?,
            ))]),
            Message::Error(_) => Ok(Vec::new()),
            _ => Err(errors::BAD_REQUEST_BAD_TYPE),
        }
    }
}

pub mod client;

/// A switch listening on a unix socket in a fresh temp dir.
pub struct Harness {
    // Field order is drop order: stop listening before the directory goes.
    pub listener: openflow::conn::Listener,
    pub of: OfSwitch,
    pub sw: Arc<TestSwitch>,
    pub sock: std::path::PathBuf,
    pub dir: tempfile::TempDir,
}

pub fn start() -> Harness {
    start_with(ConnConfig::default())
}

pub fn start_with(cfg: ConnConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("br0.mgmt");
    let sw = TestSwitch::new();
    let of = OfSwitch::new(sw.clone(), cfg);
    let listener = of.listen(&format!("unix:{}", sock.display())).unwrap();
    Harness {
        dir,
        sock,
        sw,
        of,
        listener,
    }
}
