//! One bridge's OpenFlow endpoint (versions 1.0, 1.3, 1.4, 1.5; see [`BridgeOf::set_protocols`]): [`BridgeOf`] listens on the bridge's management socket
//! (`unix:RUN_DIR/BR.mgmt`, for `ovs-ofctl`) and its snoop socket (`unix:RUN_DIR/BR.snoop`, for
//! `ovs-ofctl snoop`: copies of the controller sessions), keeps the configured controller connections, and
//! maps OpenFlow messages onto the bridge's [`ofproto::Pipeline`] (the only flow table: nothing
//! is duplicated here) and onto the datapath through [`DatapathHooks`].
//!
//! Fail modes. `standalone` (the default, as in Open vSwitch): while controllers are
//! configured and none is connected — the first connection attempt has not succeeded within
//! the fail-open delay, or every controller connection dropped — the bridge is *failed open*:
//! [`ofproto::Pipeline::set_fail_open`] makes every packet take NORMAL (MAC learning) and the
//! flow tables are ignored but kept intact, so a controller that reconnects finds its rules as
//! it left them and the bridge follows them again at once (like OVS's hidden fail-open rule,
//! without a rule a controller could see or delete). With no controller configured the tables
//! apply as they are (a new bridge has `priority=0 actions=NORMAL`). `secure`: never fails
//! open; without a controller the rules stay in force.
//!
//! Threads: connection threads of the `openflow` crate call the handler ([`handler`]); one
//! `of-fail` monitor thread per bridge evaluates the fail mode every 100 ms; the daemon calls
//! the `BridgeOf` methods from its control and housekeeping threads.
//! Lock order: `targets` → `Inner` locks (see [`handler`]).
#![deny(unsafe_code)]

pub mod buffers;
pub mod convert;
pub mod convert_ct;
pub mod convert_nx;
mod features;
pub mod group_handover;
mod handler;
mod meters;
mod stats;
mod tlv;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ofproto::Pipeline;
use openflow::conn::{ConnConfig, Connector, Listener, OfSwitch, Target};
use openflow::msg::{Message, PortStatus, Role};
pub use openflow::Protocols;
use tracing::info;

use handler::{lock, Endpoint, Inner};

/// What the daemon provides to a bridge's OpenFlow endpoint.
pub trait DatapathHooks: Send + Sync + 'static {
    /// Execute datapath actions on one frame (PACKET_OUT). `in_port` = datapath port number,
    /// if any. The actions may contain `Userspace` (output:CONTROLLER); execute them as the
    /// datapath does (hand the packet to `Upcall::userspace`).
    fn packet_out(
        &self,
        in_port: Option<u32>,
        actions: &[dpif::Action],
        frame: &[u8],
    ) -> Result<(), String>;
    /// Live counters and link state of the bridge's ports (for PORT_STATS / PORT_DESC).
    fn port_stats(&self, bridge: &str) -> Vec<PortReport>;
    /// Called after every change to the flow tables; returns once no packet follows an old
    /// decision.
    fn revalidate(&self);
    /// Like [`DatapathHooks::revalidate`], for changes the pipeline recorded itself (flow, group
    /// and meter mods: `ofproto::Pipeline::take_changes`), so that only what they may affect
    /// is re-checked. The default re-checks everything.
    fn revalidate_changes(&self) {
        self.revalidate();
    }
    /// Takes the interface behind OpenFlow port `ofport` of `bridge` administratively down or
    /// back up (PORT_MOD with PORT_DOWN). The default does nothing (no interfaces: tests).
    fn set_port_admin(&self, bridge: &str, ofport: u32, up: bool) -> Result<(), String> {
        let _ = (bridge, ofport, up);
        Ok(())
    }
}

/// A port's identity, link state and counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortReport {
    /// OpenFlow port number.
    pub ofport: u32,
    /// Port name.
    pub name: String,
    /// Datapath port number.
    pub dp_port: u32,
    /// Link (carrier) up.
    pub link_up: bool,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Receive drops.
    pub rx_dropped: u64,
    /// Transmit drops.
    pub tx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// MAC address, if the port has one.
    pub hw_addr: Option<[u8; 6]>,
}

impl PortReport {
    /// A port that is up with zero counters.
    pub fn new(ofport: u32, name: &str, dp_port: u32) -> PortReport {
        PortReport {
            ofport,
            name: name.to_string(),
            dp_port,
            link_up: true,
            ..Default::default()
        }
    }
}

/// Behaviour without a controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailMode {
    /// Switch with NORMAL while no controller is connected (the default).
    #[default]
    Standalone,
    /// Keep following the flow tables.
    Secure,
}

/// PORT_STATUS reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortReason {
    /// Port added.
    Add = 0,
    /// Port removed.
    Delete = 1,
    /// Port changed (link state, config).
    Modify = 2,
}

/// One configured controller, for `vireoctl show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerStatus {
    /// The target as configured.
    pub target: String,
    /// An OpenFlow session with it is up (for `ptcp:`, at least one peer connected).
    pub connected: bool,
    /// Role of the (first) session: "equal", "master", "slave"; "" when not connected.
    pub role: String,
    /// The session's negotiated version (`OpenFlow13`); "" when not connected.
    pub version: String,
}

enum Handle {
    Active(#[allow(dead_code)] Connector),
    Passive(#[allow(dead_code)] Listener),
}

struct Controller {
    target: String,
    _handle: Handle,
}

/// Tunables of a [`BridgeOf`].
#[derive(Clone, Debug)]
pub struct BridgeOfConfig {
    /// Connection settings (keepalive, backoff, queue sizes).
    pub conn: ConnConfig,
    /// Standalone: how long without any controller connection before failing open.
    pub fail_open_delay: Duration,
}

impl Default for BridgeOfConfig {
    fn default() -> Self {
        BridgeOfConfig {
            conn: ConnConfig::default(),
            fail_open_delay: Duration::from_secs(1),
        }
    }
}

/// One bridge's OpenFlow endpoint.
pub struct BridgeOf {
    inner: Arc<Inner>,
    ctrl: OfSwitch,
    mgmt: OfSwitch,
    /// The management socket and the snoop socket beside it (`BR.snoop`).
    _mgmt_listener: Mutex<Option<(Listener, Listener)>>,
    targets: Arc<Mutex<Vec<Controller>>>,
    stop: Arc<AtomicBool>,
    monitor: Mutex<Option<JoinHandle<()>>>,
}

/// A datapath id derived from the bridge name (stable across restarts), in the 48-bit range
/// OVS uses for its own.
pub fn default_datapath_id(bridge: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bridge.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h & 0x0000_ffff_ffff_ffff).max(1)
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Master => "master",
        Role::Slave => "slave",
        _ => "equal",
    }
}

impl BridgeOf {
    /// Starts the endpoint of `bridge`, listening on `unix:mgmt_socket`.
    pub fn new(
        bridge: &str,
        pipeline: Arc<Pipeline>,
        hooks: Arc<dyn DatapathHooks>,
        mgmt_socket: &Path,
    ) -> Result<BridgeOf, String> {
        Self::with_config(
            bridge,
            pipeline,
            hooks,
            mgmt_socket,
            BridgeOfConfig::default(),
        )
    }

    /// [`BridgeOf::new`] with explicit tunables.
    pub fn with_config(
        bridge: &str,
        pipeline: Arc<Pipeline>,
        hooks: Arc<dyn DatapathHooks>,
        mgmt_socket: &Path,
        config: BridgeOfConfig,
    ) -> Result<BridgeOf, String> {
        Self::build(bridge, pipeline, hooks, mgmt_socket, None, config)
    }

    /// [`BridgeOf::new`] serving `mgmt`, the bridge's management socket handed over by the
    /// vireod this one replaces (`vireoctl upgrade`), instead of binding `mgmt_socket`.
    pub fn with_mgmt_listener(
        bridge: &str,
        pipeline: Arc<Pipeline>,
        hooks: Arc<dyn DatapathHooks>,
        mgmt_socket: &Path,
        mgmt: std::os::unix::net::UnixListener,
    ) -> Result<BridgeOf, String> {
        Self::build(
            bridge,
            pipeline,
            hooks,
            mgmt_socket,
            Some(mgmt),
            BridgeOfConfig::default(),
        )
    }

    /// A duplicate of the management socket, to hand it to the next vireod (the file stays
    /// where it is: the process handing it over exits without removing it).
    pub fn mgmt_socket(&self) -> Option<std::os::fd::OwnedFd> {
        let l = lock(&self._mgmt_listener);
        l.as_ref()?
            .0
            .socket()
            .and_then(|fd| fd.try_clone_to_owned().ok())
    }

    fn build(
        bridge: &str,
        pipeline: Arc<Pipeline>,
        hooks: Arc<dyn DatapathHooks>,
        mgmt_socket: &Path,
        handed: Option<std::os::unix::net::UnixListener>,
        config: BridgeOfConfig,
    ) -> Result<BridgeOf, String> {
        let takeover = handed.is_some();
        pipeline
            .ports(bridge)
            .map_err(|e| format!("bridge {bridge}: {e}"))?;
        let inner = Arc::new(Inner {
            bridge: bridge.to_string(),
            pipeline,
            hooks,
            dpid: AtomicU64::new(default_datapath_id(bridge)),
            config: Mutex::new(Default::default()),
            async_mgmt: Mutex::new(Default::default()),
            buffers: Mutex::new(Default::default()),
            fail_mode: Mutex::new(FailMode::Standalone),
            ctrl: Mutex::new(None),
            mgmt: Mutex::new(None),
            tables_dirty: std::sync::atomic::AtomicBool::new(false),
            tlv_guard: Mutex::new(()),
        });
        let endpoint = |controller| {
            Arc::new(Endpoint {
                inner: Arc::clone(&inner),
                controller,
            })
        };
        let ctrl = OfSwitch::new(endpoint(true), config.conn.clone());
        let mgmt = OfSwitch::new(endpoint(false), config.conn.clone());
        *lock(&inner.ctrl) = Some(ctrl.clone());
        *lock(&inner.mgmt) = Some(mgmt.clone());
        let target = format!("unix:{}", mgmt_socket.display());
        let listener = match handed {
            Some(l) => mgmt.listen_on(l, mgmt_socket),
            None => mgmt.listen(&target),
        }
        .map_err(|e| format!("cannot listen on {target}: {e}"))?;
        // `ovs-ofctl snoop` sees the controllers' sessions (as with OVS's BR.snoop).
        let snoop_path = mgmt_socket.with_extension("snoop");
        if takeover {
            // The vireod this one replaces still listens there until it exits (without
            // removing the file): its snoop clients stay with it, new ones come here.
            if std::fs::symlink_metadata(&snoop_path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            {
                let _ = std::fs::remove_file(&snoop_path);
            }
        }
        let snoop_target = format!("unix:{}", snoop_path.display());
        let snoop = ctrl
            .snoop_listen(&snoop_target)
            .map_err(|e| format!("cannot listen on {snoop_target}: {e}"))?;
        let targets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let monitor = spawn_monitor(
            Arc::clone(&inner),
            ctrl.clone(),
            Arc::clone(&targets),
            Arc::clone(&stop),
            config.fail_open_delay,
        )?;
        Ok(BridgeOf {
            inner,
            ctrl,
            mgmt,
            _mgmt_listener: Mutex::new(Some((listener, snoop))),
            targets,
            stop,
            monitor: Mutex::new(Some(monitor)),
        })
    }

    /// The bridge's name.
    pub fn bridge(&self) -> &str {
        &self.inner.bridge
    }

    /// The datapath id FEATURES_REPLY reports.
    pub fn datapath_id(&self) -> u64 {
        self.inner.dpid.load(Ordering::Relaxed)
    }

    /// Sets the datapath id (e.g. from configuration); new connections see it.
    pub fn set_datapath_id(&self, dpid: u64) {
        self.inner.dpid.store(dpid, Ordering::Relaxed);
    }

    /// Sets the OpenFlow versions new connections may negotiate, on the management socket
    /// and with controllers alike (like OVS's `protocols` column); live sessions keep theirs.
    pub fn set_protocols(&self, p: Protocols) {
        self.ctrl.set_protocols(p);
        self.mgmt.set_protocols(p);
        info!(bridge = %self.inner.bridge, protocols = %p, "OpenFlow versions set");
    }

    /// The OpenFlow versions new connections may negotiate.
    pub fn protocols(&self) -> Protocols {
        self.mgmt.protocols()
    }

    /// Replaces the controller set: `tcp:IP[:PORT]`, `unix:PATH` (active, reconnecting with
    /// backoff), `ptcp:PORT[:IP]` (listen). Every target is validated before any is applied;
    /// targets already configured keep their connection.
    pub fn set_controllers(&self, targets: &[String]) -> Result<(), String> {
        for t in targets {
            parse_target(t)?;
        }
        let mut cur = lock(&self.targets);
        let mut old: Vec<Controller> = std::mem::take(&mut *cur);
        let mut next = Vec::new();
        for t in targets {
            if next.iter().any(|c: &Controller| &c.target == t) {
                continue;
            }
            if let Some(i) = old.iter().position(|c| &c.target == t) {
                next.push(old.swap_remove(i));
                continue;
            }
            let handle = match parse_target(t)? {
                true => Handle::Passive(self.ctrl.listen(t).map_err(|e| format!("{t}: {e}"))?),
                false => Handle::Active(self.ctrl.connect(t).map_err(|e| format!("{t}: {e}"))?),
            };
            next.push(Controller {
                target: t.clone(),
                _handle: handle,
            });
        }
        *cur = next;
        drop(old); // closes removed connectors and listeners
        if targets.is_empty() {
            self.ctrl.disconnect_all();
        }
        info!(bridge = %self.inner.bridge, ?targets, "controllers set");
        Ok(())
    }

    /// Sets the fail mode (takes effect within 100 ms).
    pub fn set_fail_mode(&self, mode: FailMode) {
        *lock(&self.inner.fail_mode) = mode;
        if mode == FailMode::Secure {
            self.inner.controller_up();
        }
    }

    /// The fail mode.
    pub fn fail_mode(&self) -> FailMode {
        *lock(&self.inner.fail_mode)
    }

    /// True while the bridge is failed open (standalone, controllers configured, none up).
    pub fn failed_open(&self) -> bool {
        self.inner.pipeline.fail_open(&self.inner.bridge)
    }

    /// Sends FLOW_REMOVED for the rules of this bridge that have SEND_FLOW_REM.
    pub fn flow_removed(&self, removed: &[ofproto::RemovedFlow]) {
        self.inner.flow_removed(removed);
    }

    /// Sends PORT_STATUS, and records the port's link state in the pipeline (group liveness).
    pub fn port_status(&self, reason: PortReason, port: &PortReport) {
        if reason != PortReason::Delete {
            let _ =
                self.inner
                    .pipeline
                    .set_port_live(&self.inner.bridge, port.ofport, port.link_up);
        }
        let msg = Message::PortStatus(PortStatus {
            reason: reason as u8,
            desc: stats::port_desc(&self.inner, port),
        });
        self.inner.send_async(&msg);
    }

    /// Sends this bridge's packet-ins (others are ignored) to the controllers.
    pub fn deliver_packet_ins(&self, pins: Vec<ofproto::PacketIn>) {
        self.inner.packet_ins(pins);
    }

    /// The configured controllers and their sessions.
    pub fn controllers(&self) -> Vec<ControllerStatus> {
        let conns = self.ctrl.connections();
        let targets: Vec<String> = lock(&self.targets)
            .iter()
            .map(|c| c.target.clone())
            .collect();
        targets
            .into_iter()
            .map(|target| {
                let c = conns
                    .iter()
                    .find(|c| c.ready && peer_matches(&target, &c.peer));
                ControllerStatus {
                    connected: c.is_some(),
                    role: c.map_or(String::new(), |c| role_name(c.role).to_string()),
                    version: c.map_or(String::new(), |c| {
                        openflow::version::version_name(c.version)
                    }),
                    target,
                }
            })
            .collect()
    }

    /// Ready controller sessions (management connections not counted).
    pub fn connected_controllers(&self) -> usize {
        self.ctrl.connections().iter().filter(|c| c.ready).count()
    }

    /// Clients of the snoop socket connected now, and the copies dropped because one of
    /// them could not keep up.
    pub fn snoop_clients(&self) -> (usize, u64) {
        (self.ctrl.snoop().clients(), self.ctrl.snoop().dropped())
    }

    /// Stops listening and connecting, closes every connection and the monitor thread, and
    /// leaves fail-open. Call on bridge deletion (dropping the `BridgeOf` does it too;
    /// calling it twice is harmless).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        lock(&self.targets).clear();
        lock(&self._mgmt_listener).take();
        self.ctrl.disconnect_all();
        self.mgmt.disconnect_all();
        if let Some(h) = lock(&self.monitor).take() {
            let _ = h.join();
        }
        *lock(&self.inner.ctrl) = None;
        *lock(&self.inner.mgmt) = None;
        let _ = self.inner.pipeline.set_fail_open(&self.inner.bridge, false);
    }
}

impl Drop for BridgeOf {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Validates a controller target; true for passive (`ptcp:`) ones.
fn parse_target(t: &str) -> Result<bool, String> {
    if t.starts_with("ptcp:") {
        Target::parse_passive(t).map_err(|e| format!("bad controller target {t}: {e}"))?;
        Ok(true)
    } else if t.starts_with("tcp:") || t.starts_with("unix:") {
        Target::parse_active(t).map_err(|e| format!("bad controller target {t}: {e}"))?;
        Ok(false)
    } else {
        Err(format!(
            "bad controller target {t}: expected tcp:IP:PORT, unix:PATH or ptcp:PORT[:IP]"
        ))
    }
}

/// Whether a connection's peer name belongs to a configured target (best effort: active
/// targets name their peer; passive ones accept any).
fn peer_matches(target: &str, peer: &str) -> bool {
    if target.starts_with("ptcp:") {
        return true;
    }
    let t = target
        .trim_start_matches("tcp:")
        .trim_start_matches("unix:");
    peer.contains(t) || t.contains(peer.trim_start_matches("tcp:").trim_start_matches("unix:"))
}

/// The fail-mode monitor: fails the bridge open after `delay` without a controller session
/// (standalone, controllers configured), and back as soon as one is up.
fn spawn_monitor(
    inner: Arc<Inner>,
    ctrl: OfSwitch,
    targets: Arc<Mutex<Vec<Controller>>>,
    stop: Arc<AtomicBool>,
    delay: Duration,
) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("of-fail".into())
        .spawn(move || {
            let mut last_up = Instant::now();
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(100));
                let configured = !lock(&targets).is_empty();
                let up = ctrl.connections().iter().any(|c| c.ready);
                let now = Instant::now();
                if up || !configured {
                    last_up = now;
                }
                let want = *lock(&inner.fail_mode) == FailMode::Standalone
                    && configured
                    && !up
                    && now.duration_since(last_up) >= delay;
                if let Ok(true) = inner.pipeline.set_fail_open(&inner.bridge, want) {
                    info!(bridge = %inner.bridge, fail_open = want, "fail mode standalone");
                    inner.hooks.revalidate();
                }
            }
        })
        .map_err(|e| format!("cannot spawn fail-mode monitor: {e}"))
}
