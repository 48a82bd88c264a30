//! The OpenFlow message handler of one bridge: applies FLOW_MOD / GROUP_MOD / METER_MOD / PACKET_OUT /
//! PORT_MOD / TABLE_MOD / SET_CONFIG to the pipeline and the datapath hooks, answers
//! GET_CONFIG and multipart requests (see [`crate::stats`]), and pushes asynchronous messages
//! (PACKET_IN, FLOW_REMOVED, PORT_STATUS) to controllers and to management connections that
//! asked for them with SET_CONFIG.
//!
//! Owns: [`Inner`] (shared by the two [`Endpoint`]s: controllers and the management socket).
//! Threads: `handle` runs on each connection's reader thread (several at once); async pushes
//! come from the daemon's housekeeping thread. Lock order: `ctrl`/`mgmt` → `async_mgmt`; the
//! `config`, `buffers`, `fail` mutexes are leaves, and no lock is held while calling the
//! pipeline or the hooks.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use ofproto::Pipeline;
use openflow::conn::{ConnId, OfSwitch, SwitchHandler};
use openflow::msg::*;
use openflow::{errors, OfError};
use tracing::{debug, warn};

use crate::buffers::{BufferError, Buffers};
use crate::convert::{self, of_error};
use crate::{stats, DatapathHooks, FailMode};

/// Tables the switch reports (ids 0..=254).
pub const N_TABLES: u8 = 255;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// State shared by a bridge's endpoints.
pub(crate) struct Inner {
    pub bridge: String,
    pub pipeline: Arc<Pipeline>,
    pub hooks: Arc<dyn DatapathHooks>,
    pub dpid: AtomicU64,
    pub config: Mutex<SwitchConfig>,
    /// Management connections that enabled async messages (SET_CONFIG).
    pub async_mgmt: Mutex<HashSet<ConnId>>,
    pub buffers: Mutex<Buffers>,
    pub fail_mode: Mutex<FailMode>,
    /// Controller side (active targets and ptcp listeners); None after shutdown.
    pub ctrl: Mutex<Option<OfSwitch>>,
    /// Management socket side; None after shutdown.
    pub mgmt: Mutex<Option<OfSwitch>>,
    /// Flow or group tables changed since the datapath was last revalidated. Revalidation
    /// (every PMD acknowledging) waits for the next BARRIER, so a batch of flow-mods pays it
    /// once; the daemon's housekeeping also revalidates within 50 ms of any change.
    pub tables_dirty: std::sync::atomic::AtomicBool,
    /// Held by a FLOW_MOD from reading the TLV map to installing, and by a TLV table mod: a
    /// mapping is never deleted between a flow's resolving `tun_metadataN` and its install.
    pub tlv_guard: Mutex<()>,
}

/// One side of a bridge's OpenFlow endpoint, as the connection layer sees it.
pub(crate) struct Endpoint {
    pub inner: Arc<Inner>,
    pub controller: bool,
}

impl SwitchHandler for Endpoint {
    fn features(&self) -> FeaturesReply {
        use openflow::msg::capabilities as c;
        FeaturesReply {
            datapath_id: self.inner.dpid.load(Ordering::Relaxed),
            n_buffers: crate::buffers::N_BUFFERS as u32,
            n_tables: N_TABLES,
            auxiliary_id: 0,
            capabilities: c::FLOW_STATS | c::TABLE_STATS | c::PORT_STATS | c::GROUP_STATS,
        }
    }

    fn ports(&self) -> Vec<Port> {
        crate::stats::ports(&self.inner)
            .map(|v| {
                v.iter()
                    .map(|p| crate::stats::port_desc(&self.inner, p))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn handle(&self, conn: ConnId, _xid: u32, msg: Message) -> Result<Vec<Message>, OfError> {
        self.inner.handle(conn, self.controller, msg)
    }

    fn barrier(&self, _conn: ConnId) {
        self.inner.sync_datapath();
    }

    fn connected(&self, _conn: ConnId, peer: &str) {
        if self.controller {
            debug!(bridge = %self.inner.bridge, %peer, "controller connected");
            self.inner.controller_up();
            self.inner.follow_controller_versions(None);
        }
    }

    fn disconnected(&self, conn: ConnId) {
        if self.controller {
            self.inner.follow_controller_versions(Some(conn));
        } else {
            lock(&self.inner.async_mgmt).remove(&conn);
        }
    }
}

fn tlv_now(inner: &Inner) -> wire::tunmd::TlvTable {
    inner.pipeline.tlv(&inner.bridge).unwrap_or_default()
}

impl Inner {
    fn handle(
        &self,
        conn: ConnId,
        controller: bool,
        msg: Message,
    ) -> Result<Vec<Message>, OfError> {
        // Conversions resolve `tun_metadataN` against the bridge's map as it is now.
        let _g = matches!(msg, Message::FlowMod(_) | Message::TlvTableMod(_))
            .then(|| lock(&self.tlv_guard));
        let tlv = self.pipeline.tlv(&self.bridge).unwrap_or_default();
        crate::convert_nx::with_tlv(&tlv, || self.handle_msg(conn, controller, msg))
    }

    fn handle_msg(
        &self,
        conn: ConnId,
        controller: bool,
        msg: Message,
    ) -> Result<Vec<Message>, OfError> {
        match msg {
            Message::TlvTableMod(m) => crate::tlv::table_mod(self, &m).map(|()| vec![]),
            Message::TlvTableRequest => Ok(vec![crate::tlv::reply(&tlv_now(self))]),
            Message::GetConfigRequest => Ok(vec![Message::GetConfigReply(*lock(&self.config))]),
            Message::SetConfig(c) => {
                *lock(&self.config) = c;
                if !controller {
                    let mut a = lock(&self.async_mgmt);
                    if c.miss_send_len > 0 {
                        a.insert(conn);
                    } else {
                        a.remove(&conn);
                    }
                }
                Ok(vec![])
            }
            Message::FlowMod(fm) => self.flow_mod(&fm).map(|()| vec![]),
            Message::GroupMod(gm) => self.group_mod(&gm).map(|()| vec![]),
            Message::MeterMod(mm) => self.meter_mod(&mm).map(|()| vec![]),
            Message::PacketOut(po) => self.packet_out(&po).map(|()| vec![]),
            Message::PortMod(pm) => self.port_mod(&pm).map(|()| vec![]),
            // Tables 0..=254 and OFPTT_ALL: every id is valid; table config is deprecated in
            // OpenFlow 1.3 and accepted as a no-op.
            Message::TableMod(_) => Ok(vec![]),
            Message::MultipartRequest(r) => crate::stats::reply_to(self, &r),
            Message::QueueGetConfigRequest(port) => {
                crate::stats::check_queue_port(self, port)?;
                Ok(vec![Message::QueueGetConfigReply(port)])
            }
            _ => Err(errors::BAD_REQUEST_BAD_TYPE),
        }
    }

    fn flow_mod(&self, fm: &FlowMod) -> Result<(), OfError> {
        let pfm = convert::flow_mod_to_pipeline(fm)?;
        let result = self.pipeline.flow_mod(&self.bridge, pfm);
        // Even a refused flow-mod may have bumped the generation: mark it either way, so a
        // BARRIER that follows means the datapath follows the tables.
        self.tables_dirty.store(true, Ordering::Release);
        let removed = result.map_err(|e| of_error(&e))?;
        self.flow_removed(&removed);
        if fm.buffer_id != NO_BUFFER && !fm.command.is_delete() {
            let to_table = [openflow::Action::Output {
                port: port_no::TABLE,
                max_len: 0,
            }];
            self.send_buffered(fm.buffer_id, None, &to_table)?;
        }
        Ok(())
    }

    fn group_mod(&self, gm: &GroupMod) -> Result<(), OfError> {
        if gm.command == GroupModCommand::InsertBucket {
            // Weights are for select groups (as for an add); the group's own type decides.
            let select = self
                .pipeline
                .group_descs(&self.bridge)
                .ok()
                .and_then(|d| d.into_iter().find(|d| d.group_id == gm.group_id))
                .is_some_and(|d| d.group_type == ofproto::GroupType::Select);
            if !select && gm.buckets.iter().any(|b| b.weight != 0) {
                return Err(errors::GROUP_MOD_FAILED_BAD_BUCKET);
            }
        }
        let pgm = convert::group_mod_to_pipeline(gm)?;
        let result = self.pipeline.group_mod(&self.bridge, pgm);
        self.tables_dirty.store(true, Ordering::Release);
        let removed = result.map_err(|e| of_error(&e))?;
        self.flow_removed(&removed);
        Ok(())
    }

    fn meter_mod(&self, mm: &MeterMod) -> Result<(), OfError> {
        let pmm = crate::meters::meter_mod_to_pipeline(mm);
        let result = self.pipeline.meter_mod(&self.bridge, pmm);
        self.tables_dirty.store(true, Ordering::Release);
        let removed = result.map_err(|e| of_error(&e))?;
        self.flow_removed(&removed);
        Ok(())
    }

    fn packet_out(&self, po: &PacketOut) -> Result<(), OfError> {
        if po.buffer_id != NO_BUFFER {
            return self.send_buffered(po.buffer_id, Some(po.in_port), &po.actions);
        }
        if po.data.is_empty() {
            return Err(errors::BAD_REQUEST_BAD_PACKET);
        }
        self.execute(po.in_port, &po.actions, &po.data)
    }

    /// Runs a buffered packet-in frame through `actions`; `in_port` None = the packet-in's.
    fn send_buffered(
        &self,
        id: u32,
        in_port: Option<u32>,
        actions: &[openflow::Action],
    ) -> Result<(), OfError> {
        let b = lock(&self.buffers)
            .take(id, Instant::now())
            .map_err(|e| match e {
                BufferError::Unknown => errors::BAD_REQUEST_BUFFER_UNKNOWN,
                BufferError::Empty => errors::BAD_REQUEST_BUFFER_EMPTY,
            })?;
        self.execute(in_port.unwrap_or(b.in_port), actions, &b.frame)
    }

    fn execute(
        &self,
        in_port: u32,
        actions: &[openflow::Action],
        frame: &[u8],
    ) -> Result<(), OfError> {
        let acts = convert::actions_to_pipeline(actions)?;
        let plan = self
            .pipeline
            .packet_out(&self.bridge, in_port, &acts, frame)
            .map_err(|e| of_error(&e))?;
        if plan.actions.is_empty() {
            return Ok(());
        }
        self.hooks
            .packet_out(plan.in_dp, &plan.actions, frame)
            .map_err(|e| {
                warn!(bridge = %self.bridge, error = %e, "packet-out refused by the datapath");
                errors::BAD_REQUEST_EPERM
            })
    }

    fn port_mod(&self, pm: &PortMod) -> Result<(), OfError> {
        let ports = self
            .pipeline
            .ports(&self.bridge)
            .map_err(|e| of_error(&e))?;
        if !ports.iter().any(|p| p.ofport == pm.port_no) {
            return Err(errors::PORT_MOD_FAILED_BAD_PORT);
        }
        // PORT_DOWN, NO_RECV, NO_FWD, NO_PACKET_IN are applied at translation; other bits
        // (1.0's NO_STP, NO_FLOOD) are refused rather than silently ignored.
        if pm.config & pm.mask & !ofproto::bridge::port_config::ALL != 0 {
            return Err(errors::PORT_MOD_FAILED_BAD_CONFIG);
        }
        let down = ofproto::bridge::port_config::PORT_DOWN;
        if pm.mask & down != 0 {
            // The interface itself goes down too (a kernel port), as with OVS.
            self.hooks
                .set_port_admin(&self.bridge, pm.port_no, pm.config & down == 0)
                .map_err(|e| {
                    warn!(bridge = %self.bridge, port = pm.port_no, error = %e, "PORT_MOD");
                    errors::PORT_MOD_FAILED_EPERM
                })?;
        }
        self.pipeline
            .set_port_of_config(&self.bridge, pm.port_no, pm.config, pm.mask)
            .map_err(|e| of_error(&e))?;
        self.hooks.revalidate();
        // Every controller hears of the change (OpenFlow 1.3 §7.4.3: PORT_STATUS on a change
        // of config); the link state follows in another PORT_STATUS when the kernel reports it.
        if let Some(report) = stats::ports(self)?
            .into_iter()
            .find(|r| r.ofport == pm.port_no)
        {
            let msg = Message::PortStatus(PortStatus {
                reason: crate::PortReason::Modify as u8,
                desc: stats::port_desc(self, &report),
            });
            self.send_async(&msg);
        }
        Ok(())
    }

    /// Pushes an async message to controllers and to management connections that asked.
    pub fn send_async(&self, msg: &Message) {
        if let Some(c) = lock(&self.ctrl).clone() {
            c.broadcast(msg);
        }
        let Some(m) = lock(&self.mgmt).clone() else {
            return;
        };
        let ids: Vec<ConnId> = lock(&self.async_mgmt).iter().copied().collect();
        for id in ids {
            if !m.send_async_to(id, msg) {
                lock(&self.async_mgmt).remove(&id);
            }
        }
    }

    /// FLOW_REMOVED for every removed rule of this bridge that asked for it.
    pub fn flow_removed(&self, removed: &[ofproto::RemovedFlow]) {
        for r in removed {
            if r.bridge != self.bridge || r.flags & ofproto::flags::SEND_FLOW_REM == 0 {
                continue;
            }
            let msg = Message::FlowRemoved(FlowRemoved {
                cookie: r.cookie,
                priority: r.priority,
                reason: r.reason as u8,
                table_id: r.table_id,
                duration_sec: r.duration.as_secs().min(u64::from(u32::MAX)) as u32,
                duration_nsec: r.duration.subsec_nanos(),
                idle_timeout: r.idle_timeout,
                hard_timeout: r.hard_timeout,
                packet_count: r.packet_count,
                byte_count: r.byte_count,
                // `tun_metadataN` named by the bridge's map (this may run outside `handle`).
                matches: crate::convert_nx::with_tlv(&tlv_now(self), || {
                    convert::match_to_wire(&r.match_)
                }),
            });
            self.send_async(&msg);
        }
    }

    /// Sends packet-ins: cut to the rule's `max_len` with the whole frame buffered, or whole
    /// with `OFP_NO_BUFFER` when `max_len` is `OFPCML_NO_BUFFER`. (OpenFlow 1.3: `miss_send_len`
    /// applies only to packets not sent by an output:CONTROLLER action; every packet-in here
    /// comes from one, table-miss included.)
    pub fn packet_ins(&self, pins: Vec<ofproto::PacketIn>) {
        let now = Instant::now();
        for p in pins.into_iter().filter(|p| p.bridge == self.bridge) {
            let total_len = p.frame.len().min(usize::from(u16::MAX)) as u16;
            let whole = p.max_len == u16::MAX || p.data.len() >= p.frame.len();
            let (buffer_id, data) = if whole {
                (NO_BUFFER, p.frame)
            } else {
                let id = lock(&self.buffers).put(p.in_port, p.frame, now);
                (id, p.data)
            };
            let msg = Message::PacketIn(PacketIn {
                buffer_id,
                total_len,
                reason: p.reason as u8,
                table_id: p.table_id,
                cookie: p.cookie,
                matches: convert::packet_in_match(p.in_port),
                data,
            });
            self.send_async(&msg);
        }
    }

    /// Pushes table changes into the datapath (see `tables_dirty`).
    pub fn sync_datapath(&self) {
        if self.tables_dirty.swap(false, Ordering::AcqRel) {
            self.hooks.revalidate_changes();
        }
    }

    /// A controller connection is up: leave fail-open.
    /// OpenFlow 1.0's table-miss behaviour (a packet-in, reason no_match) is on while a
    /// controller speaking 1.0 is connected, as in Open vSwitch; 1.3+ controllers install a
    /// table-miss rule instead. `leaving`: a connection going away (still listed).
    pub fn follow_controller_versions(&self, leaving: Option<ConnId>) {
        let any10 = lock(&self.ctrl).as_ref().is_some_and(|c| {
            c.connections()
                .iter()
                .any(|c| c.ready && c.version == openflow::version::OFP10 && Some(c.id) != leaving)
        });
        if matches!(
            self.pipeline.set_miss_to_controller(&self.bridge, any10),
            Ok(true)
        ) {
            self.tables_dirty.store(true, Ordering::Release);
            self.hooks.revalidate();
        }
    }

    pub fn controller_up(&self) {
        if matches!(self.pipeline.set_fail_open(&self.bridge, false), Ok(true)) {
            self.hooks.revalidate();
        }
    }
}
