//! The packet-moving side of the daemon: one datapath (PMD threads and caches) shared by every
//! bridge, the OpenFlow pipeline of every bridge, each bridge's OpenFlow endpoint
//! (`BR.mgmt` socket and controllers), and the numbering that ties them together (port name →
//! datapath port number → OpenFlow port number in its bridge).
//!
//! Threads: methods run on the control thread with the `Switch` mutex held. PMD threads call
//! the pipeline on misses; OpenFlow connection threads call the pipeline and the datapath
//! through [`Hooks`]; the housekeeping thread ([`super::housekeeping`]) revalidates after
//! MAC learning, expires flows and delivers packet-ins. None of them takes the `Switch` mutex.
//! After any change that can alter a forwarding decision, `revalidate` returns only once every
//! PMD has dropped the decisions it changed, so no packet follows them after the command
//! returns. Revalidation is per megaflow: rule, group and port changes re-check each megaflow
//! by re-translating it (off the PMDs, on the calling thread); MAC learning changes remove only
//! the megaflows tagged with the entries that changed. One guest's MAC churn therefore costs
//! no other guest its megaflows.
use super::hooks::Hooks;
use crate::store::BridgeConfig;
use dp::{AssignMode, AutoLb, Datapath, DpConfig, DpTuning, Topology, Upcall};
use ofproto::{Pipeline, PipelineConfig, PortSpec, RemovedFlow};
use ofswitch::{BridgeOf, FailMode, PortReason};
use ports::Port;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A port as the datapath knows it.
pub struct DpPort {
    /// Datapath port number.
    pub no: u32,
    /// The port.
    pub port: Arc<dyn Port>,
}

/// State shared with the housekeeping and OpenFlow threads.
pub struct Shared {
    /// The datapath.
    pub dp: Datapath,
    /// Every bridge's pipeline.
    pub pipeline: Arc<Pipeline>,
    /// Serializes revalidations (the housekeeping thread's and the commands').
    reval: Mutex<()>,
    /// Megaflows removed by revalidation (all PMDs, since start).
    pub revalidated: AtomicU64,
    /// Each bridge's OpenFlow endpoint.
    pub bridges: Mutex<BTreeMap<String, Arc<BridgeOf>>>,
    /// Port name → its datapath entry.
    pub ports: Mutex<BTreeMap<String, DpPort>>,
    /// XDP steering maps of `af-xdp` ports (`xdp-steering=on`).
    pub steering: super::steering::Steering,
    /// XDP flow marks of `af-xdp` ports (`xdp-mark=on`).
    pub marks: super::marks::Marks,
    /// Native tunneling's route table and neighbour cache (`underlay.rs`).
    pub underlay: Arc<Mutex<tnl::Underlay>>,
    /// The host's routes through internal ports (`kroutes.rs`), housekeeping thread.
    pub kroutes: Mutex<super::kroutes::KernelRoutes>,
    /// Native tunneling's hook in translation (`native.rs`).
    pub native: Arc<super::native::NativeHook>,
}

impl Shared {
    /// After a rule, group, port or fail-mode change: re-checks every megaflow and makes every
    /// PMD drop those whose translation changed.
    pub fn revalidate(&self) {
        self.revalidate_changes(true);
    }

    /// Revalidates what the pipeline recorded since last time (MAC learning and aging: only
    /// the megaflows tagged with a changed entry; anything else: a re-check of every one).
    pub fn revalidate_if_changed(&self) {
        self.revalidate_changes(false);
    }

    fn revalidate_changes(&self, full: bool) {
        let _g = self.reval.lock().unwrap_or_else(|e| e.into_inner());
        match self.pipeline.revalidate_datapath(&self.dp, full) {
            Ok(n) => {
                self.revalidated.fetch_add(n as u64, Ordering::Relaxed);
                if n > 0 {
                    // Marks of the megaflows that went are dropped now, not at the next tick.
                    self.marks.sync(self);
                }
            }
            Err(e) => tracing::error!(%e, "revalidate"),
        }
    }

    /// Tells each bridge's controllers about removed flows.
    pub fn flows_removed(&self, removed: &[RemovedFlow]) {
        if removed.is_empty() {
            return;
        }
        let bridges = self.bridges.lock().unwrap_or_else(|e| e.into_inner());
        for (name, b) in bridges.iter() {
            let mine: Vec<RemovedFlow> = removed
                .iter()
                .filter(|r| &r.bridge == name)
                .cloned()
                .collect();
            if !mine.is_empty() {
                b.flow_removed(&mine);
            }
        }
    }
}

/// How a port takes part in switching.
pub struct Attach<'a> {
    /// Bridge name.
    pub bridge: &'a str,
    /// Port name.
    pub name: &'a str,
    /// OpenFlow port number (from the store).
    pub ofport: u32,
    /// The port.
    pub port: Arc<dyn Port>,
    /// Access VLAN.
    pub tag: Option<u16>,
    /// Trunk VLANs (empty = all).
    pub trunks: Vec<u16>,
    /// `mac-limit` (`None`: the default).
    pub mac_limit: Option<usize>,
    /// `pmd-rxq-affinity` pins.
    pub affinity: Vec<(usize, usize)>,
}

/// Datapath + pipeline + OpenFlow endpoints + numbering.
pub struct Runtime {
    shared: Arc<Shared>,
    run_dir: PathBuf,
    /// Mode and group of each bridge's `BR.mgmt` socket.
    mgmt_access: vhost::sockfile::Access,
    housekeeping: Option<super::housekeeping::Handle>,
}

impl std::ops::Deref for Runtime {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The datapath's tunables: the defaults, except the PMDs' idle sleep when
/// `VIREO_PMD_IDLE_SLEEP_US` is set (microseconds slept per empty iteration once a PMD has
/// been idle about 1 ms; `0`: never sleep, busy-poll as OVS's PMDs do) and the SMC's
/// subtable threshold when `VIREO_SMC_MIN_SUBTABLES` is set (`DpTuning::smc_min_subtables`;
/// `1`: always use the SMC), and the lookup kernels when `VIREO_LOOKUP_ISA` is set (`scalar`,
/// `avx512` or `auto`, `dp::simd`; default `auto`, the best this CPU has). Measurement knobs,
/// read once at start; an unreadable value (or a variant this CPU lacks) is ignored with a
/// warning.
fn tuning_from_env() -> DpTuning {
    let mut t = DpTuning::default();
    if let Ok(v) = std::env::var("VIREO_PMD_IDLE_SLEEP_US") {
        match v.trim().parse::<u64>() {
            Ok(us) if us <= 100_000 => t.idle_sleep = std::time::Duration::from_micros(us),
            _ => tracing::warn!(value = %v, "VIREO_PMD_IDLE_SLEEP_US is not 0-100000: ignored"),
        }
    }
    if let Ok(v) = std::env::var("VIREO_SMC_MIN_SUBTABLES") {
        match v.trim().parse::<usize>() {
            Ok(n) => t.smc_min_subtables = n,
            _ => tracing::warn!(value = %v, "VIREO_SMC_MIN_SUBTABLES is not a number: ignored"),
        }
    }
    if let Ok(v) = std::env::var("VIREO_LOOKUP_ISA") {
        match dp::simd::Isa::by_name(v.trim()) {
            Ok(isa) => t.lookup_isa = isa,
            Err(e) => tracing::warn!(value = %v, "VIREO_LOOKUP_ISA: {e}: ignored"),
        }
    }
    tracing::info!(lookup_isa = t.lookup_isa.name(), "PMD lookup kernels");
    t
}

impl Runtime {
    /// Starts the datapath with PMD threads on `pmd_cores`, and the housekeeping thread.
    pub fn new(
        pmd_cores: Vec<usize>,
        assign: AssignMode,
        auto_lb: Option<AutoLb>,
        run_dir: &Path,
        mgmt_access: vhost::sockfile::Access,
    ) -> Result<Runtime, String> {
        let pipeline = Arc::new(Pipeline::new(PipelineConfig::default()));
        let upcall: Arc<dyn Upcall> = pipeline.clone();
        let cfg = DpConfig {
            topology: Topology::detect(),
            pmd_cores,
            assign,
            auto_lb,
        };
        let dp = Datapath::with_tuning(cfg, tuning_from_env(), upcall)
            .map_err(|e| format!("datapath: {e}"))?;
        let underlay: Arc<Mutex<tnl::Underlay>> = Default::default();
        let native = Arc::new(super::native::NativeHook::new(underlay.clone()));
        let shared = Arc::new(Shared {
            dp,
            reval: Mutex::new(()),
            revalidated: AtomicU64::new(0),
            pipeline: pipeline.clone(),
            bridges: Mutex::new(BTreeMap::new()),
            ports: Mutex::new(BTreeMap::new()),
            steering: Default::default(),
            marks: Default::default(),
            underlay: underlay.clone(),
            kroutes: Mutex::new(super::kroutes::KernelRoutes::start()),
            native: native.clone(),
        });
        pipeline.set_native(Some(native as Arc<dyn ofproto::native::NativeTunnels>));
        let housekeeping = Some(super::housekeeping::start(shared.clone())?);
        Ok(Runtime {
            shared,
            run_dir: run_dir.to_path_buf(),
            mgmt_access,
            housekeeping,
        })
    }

    fn bridge_of(&self, br: &str) -> Result<Arc<BridgeOf>, String> {
        let bridges = self.bridges.lock().unwrap_or_else(|e| e.into_inner());
        bridges
            .get(br)
            .cloned()
            .ok_or_else(|| format!("no bridge named {br}"))
    }

    /// Adds a bridge (default NORMAL rule, `BR.mgmt` socket, saved controllers and fail mode).
    pub fn add_bridge(&mut self, name: &str, cfg: &BridgeConfig) -> Result<(), String> {
        self.add_bridge_with(name, cfg, None)
    }

    /// [`Runtime::add_bridge`]; `handed` is the `BR.mgmt` socket a previous vireod handed over
    /// (`vireoctl upgrade`): it is served as it is instead of a new one being bound.
    pub fn add_bridge_with(
        &mut self,
        name: &str,
        cfg: &BridgeConfig,
        handed: Option<std::os::unix::net::UnixListener>,
    ) -> Result<(), String> {
        self.pipeline.add_bridge(name).map_err(|e| e.to_string())?;
        let hooks = Arc::new(Hooks::new(Arc::downgrade(&self.shared)));
        let mgmt = self.run_dir.join(format!("{name}.mgmt"));
        // vireod runs under umask 077, so the sockets (BR.mgmt and BR.snoop beside it) are
        // created 0600 (no one else can connect) before they get their mode and group here;
        // a handed-over BR.mgmt keeps the mode it has, the new BR.snoop gets it.
        let fresh = handed.is_none();
        let made = match handed {
            Some(l) => BridgeOf::with_mgmt_listener(name, self.pipeline.clone(), hooks, &mgmt, l),
            None => BridgeOf::new(name, self.pipeline.clone(), hooks, &mgmt),
        }
        .and_then(|of| {
            let mut socks = vec![mgmt.with_extension("snoop")];
            if fresh {
                socks.push(mgmt.clone());
            }
            for sock in socks {
                vhost::sockfile::apply(&sock, self.mgmt_access).map_err(|e| {
                    of.shutdown();
                    e.to_string()
                })?;
            }
            Ok(of)
        });
        let of = match made {
            Ok(of) => Arc::new(of),
            Err(e) => {
                let _ = self.pipeline.del_bridge(name);
                return Err(format!("bridge {name}: {e}"));
            }
        };
        if let Some(mode) = &cfg.fail_mode {
            of.set_fail_mode(fail_mode(mode));
        }
        if let Some(p) = &cfg.protocols {
            match ofswitch::Protocols::parse(p) {
                Ok(p) => of.set_protocols(p),
                Err(e) => tracing::error!(bridge = %name, error = %e, "bad saved protocols"),
            }
        }
        if !cfg.controllers.is_empty() {
            if let Err(e) = of.set_controllers(&cfg.controllers) {
                tracing::error!(bridge = %name, error = %e, "cannot set controllers");
            }
        }
        self.bridges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), of);
        self.revalidate();
        Ok(())
    }

    /// Removes a bridge; its ports must be detached first.
    pub fn del_bridge(&mut self, name: &str) {
        let of = self
            .bridges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(of) = of {
            of.shutdown();
        }
        let _ = self.pipeline.del_bridge(name);
        self.revalidate();
    }

    fn free_dp_port(&self) -> u32 {
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        super::options::lowest_free(ports.values().map(|p| p.no))
    }

    /// Puts a port into its bridge and the datapath.
    pub fn attach(&mut self, a: Attach<'_>) -> Result<u32, String> {
        let no = self.free_dp_port();
        self.pipeline
            .add_port(
                a.bridge,
                PortSpec {
                    name: a.name.to_string(),
                    dp_port: no,
                    ofport: Some(a.ofport),
                    tag: a.tag,
                    trunks: a.trunks,
                    mac_limit: a.mac_limit,
                },
            )
            .map_err(|e| e.to_string())?;
        if let Err(e) = self.dp.add_port(no, a.name, a.port.clone(), &a.affinity) {
            let _ = self.pipeline.del_port(a.bridge, a.name);
            return Err(format!("datapath: {e}"));
        }
        let report = super::hooks::report(a.ofport, a.name, no, a.port.as_ref());
        self.ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(a.name.to_string(), DpPort { no, port: a.port });
        if let Ok(of) = self.bridge_of(a.bridge) {
            of.port_status(PortReason::Add, &report);
        }
        self.revalidate();
        Ok(no)
    }

    /// Takes a port out of the datapath and its bridge. Returns once no PMD uses it.
    pub fn detach(&mut self, bridge: &str, name: &str) {
        let entry = self
            .ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        let ofport = self
            .pipeline
            .ports(bridge)
            .ok()
            .and_then(|ps| ps.iter().find(|p| p.name == name).map(|p| p.ofport));
        if let Some(p) = entry {
            self.dp.policers().set(p.no, None, None);
            self.dp.del_port(p.no);
            if let (Some(ofport), Ok(of)) = (ofport, self.bridge_of(bridge)) {
                let report = super::hooks::report(ofport, name, p.no, p.port.as_ref());
                of.port_status(PortReason::Delete, &report);
            }
        }
        let _ = self.pipeline.del_port(bridge, name);
        self.revalidate();
    }

    /// Changes a port's VLAN configuration.
    pub fn set_vlans(
        &mut self,
        bridge: &str,
        name: &str,
        tag: Option<u16>,
        trunks: Vec<u16>,
    ) -> Result<(), String> {
        self.pipeline
            .set_port_vlans(bridge, name, tag, trunks)
            .map_err(|e| e.to_string())?;
        self.revalidate();
        Ok(())
    }

    /// Changes a port's learned-MAC limit (`None`: the default).
    pub fn set_mac_limit(
        &mut self,
        bridge: &str,
        name: &str,
        limit: Option<usize>,
    ) -> Result<(), String> {
        self.pipeline
            .set_port_mac_limit(bridge, name, limit)
            .map_err(|e| e.to_string())?;
        self.revalidate_if_changed();
        Ok(())
    }

    /// Changes a port's rxq pins.
    pub fn set_affinity(&mut self, name: &str, affinity: &[(usize, usize)]) -> Result<(), String> {
        let no = {
            let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
            ports
                .get(name)
                .map(|p| p.no)
                .ok_or_else(|| format!("port {name} is not in the datapath"))?
        };
        self.dp
            .set_port_affinity(no, affinity)
            .map_err(|e| format!("datapath: {e}"))
    }

    /// Sets a port's ingress and egress policers (none: off).
    pub fn set_policing(
        &mut self,
        name: &str,
        (ingress, egress): (Option<dp::police::Limit>, Option<dp::police::Limit>),
    ) -> Result<(), String> {
        let no = {
            let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
            ports
                .get(name)
                .map(|p| p.no)
                .ok_or_else(|| format!("port {name} is not in the datapath"))?
        };
        if self.dp.policers().set(no, ingress, egress) {
            Ok(())
        } else {
            Err(format!("port {name}: datapath port {no} cannot be policed"))
        }
    }

    /// Packets a port's policers dropped (ingress + egress).
    pub fn policed(&self, name: &str) -> u64 {
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports.get(name).map_or(0, |p| {
            let (i, e) = self.dp.policers().drops(p.no);
            i + e
        })
    }

    /// Moves PMD threads to `cores`, live.
    pub fn set_pmd_cores(&mut self, cores: &[usize]) -> Result<(), String> {
        self.dp
            .set_pmd_cores(cores)
            .map_err(|e| format!("datapath: {e}"))
    }

    /// Changes how rx queues are assigned to PMDs (reassigns now).
    pub fn set_assign(&mut self, mode: AssignMode) -> Result<(), String> {
        self.dp
            .set_assign_mode(mode)
            .map_err(|e| format!("datapath: {e}"))
    }

    /// Turns auto load-balance on (with settings) or off.
    pub fn set_auto_lb(&mut self, lb: Option<AutoLb>) -> Result<(), String> {
        self.dp
            .set_auto_lb(lb)
            .map_err(|e| format!("datapath: {e}"))
    }

    /// Replaces a bridge's controllers.
    pub fn set_controllers(&mut self, br: &str, targets: &[String]) -> Result<(), String> {
        self.bridge_of(br)?.set_controllers(targets)
    }

    /// Sets the OpenFlow versions a bridge negotiates.
    pub fn set_protocols(&mut self, br: &str, p: ofswitch::Protocols) -> Result<(), String> {
        self.bridge_of(br)?.set_protocols(p);
        Ok(())
    }

    /// Sets a bridge's fail mode.
    pub fn set_fail_mode(&mut self, br: &str, mode: &str) -> Result<(), String> {
        self.bridge_of(br)?.set_fail_mode(fail_mode(mode));
        Ok(())
    }

    /// Controllers of a bridge, for `show`.
    pub fn controller_status(&self, br: &str) -> serde_json::Value {
        match self.bridge_of(br) {
            Ok(of) => serde_json::Value::Array(
                of.controllers()
                    .iter()
                    .map(|c| serde_json::json!({ "target": c.target, "connected": c.connected, "role": c.role, "version": c.version }))
                    .collect(),
            ),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// Stops housekeeping, OpenFlow endpoints and PMD threads.
    pub fn shutdown(&mut self) {
        if let Some(h) = self.housekeeping.take() {
            h.stop();
        }
        let bridges: Vec<Arc<BridgeOf>> = self
            .bridges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for b in bridges {
            b.shutdown();
        }
        self.dp.shutdown();
    }
}

fn fail_mode(mode: &str) -> FailMode {
    if mode == "secure" {
        FailMode::Secure
    } else {
        FailMode::Standalone
    }
}
