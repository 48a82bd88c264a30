//! The switch as the control plane sees it: the config store plus the live objects built from
//! it (ports today; datapath and pipeline as they land). Every command runs here, serialized by
//! the mutex the control server holds around the `Switch`.
//!
//! Rule for every mutating command: validate everything first, then make the change durable in
//! the store, then apply it to the live objects. A command that fails changes nothing.
//!
//! Threads: control connection threads, one at a time (the caller holds the `Switch` mutex).
//! A port that is stopped under the mutex is only asked to stop (it removes its socket file at
//! once); its thread is joined by the caller after the mutex is released
//! ([`Switch::take_retired`]), so no command waits on a port's thread with the lock held.
use super::format;
use super::live::LivePort;
use super::options::{self, KindSpec};
use super::runtime::{Attach, Runtime};
use super::steering;
use crate::proto::Response;
use crate::store::{BridgeConfig, Config, PortConfig, Store, StoreError};
use ports::dummy::DummyPort;
use ports::Link;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A command's failure: the one line the user sees.
#[derive(Debug)]
pub struct CmdError(pub String);

impl From<StoreError> for CmdError {
    fn from(e: StoreError) -> Self {
        CmdError(e.to_string())
    }
}

impl From<String> for CmdError {
    fn from(s: String) -> Self {
        CmdError(s)
    }
}

pub(super) type CmdResult = Result<Response, CmdError>;

/// The control plane's state.
pub struct Switch {
    pub(super) store: Store,
    run_dir: PathBuf,
    pub(super) live: BTreeMap<String, LivePort>,
    /// Ports whose creation failed at startup, with the reason (shown by `show`).
    pub(super) failed: BTreeMap<String, String>,
    pub(super) rt: Runtime,
    /// Ports stopped but not yet joined: the caller joins them after releasing the mutex.
    retired: Vec<LivePort>,
    /// What `upgrade` needs (binary, arguments, sockets, locks); set by the daemon's start.
    pub(super) upgrade_ctx: Option<super::upgrade::Ctx>,
    /// Kernel ports a takeover opens once the old process has exited.
    pub(super) deferred: Vec<(String, String, PortConfig)>,
    /// Taps and packet sockets a takeover adopts (with their handed-over fds) once the old
    /// process has exited.
    pub(super) deferred_fds: Vec<(String, String, PortConfig, std::os::fd::OwnedFd)>,
    /// `af-xdp` ports a takeover adopts (mode and fds handed over) once the old process has
    /// exited, with the frame books its final message carried.
    pub(super) deferred_xsk: Vec<super::takeover::DeferredXsk>,
    pub(super) xsk_books: BTreeMap<String, Vec<super::handover::XskBooks>>,
    /// `af-xdp` ports whose hand-over failed, with why (noted on the port once reopened).
    pub(super) xsk_reopened: BTreeMap<String, String>,
    /// A takeover's switch-over instants (CLOCK_MONOTONIC ns) and gaps, for `show`.
    pub(super) switch_over: Option<serde_json::Value>,
}

impl Switch {
    /// Starts the datapath and builds the live objects for everything in `store`. A port that
    /// cannot be created is logged and shown with its error; the others still come up.
    pub fn new(
        store: Store,
        run_dir: PathBuf,
        mgmt_access: vhost::sockfile::Access,
    ) -> Result<Switch, String> {
        Self::build(store, run_dir, mgmt_access, None)
    }

    /// [`Switch::new`], or during a takeover (`taken`) with the sockets and vhost-user
    /// connections the old process handed over.
    pub(super) fn build(
        store: Store,
        run_dir: PathBuf,
        mgmt_access: vhost::sockfile::Access,
        mut taken: Option<&mut super::takeover::Taken>,
    ) -> Result<Switch, String> {
        let cores = match &store.config().pmd_cores {
            Some(list) => options::parse_cpu_list(list)?,
            None => vec![0],
        };
        let assign = match &store.config().pmd_rxq_assign {
            Some(m) => options::parse_assign(m)?,
            None => dp::AssignMode::Cycles,
        };
        let auto_lb = options::auto_lb(store.config().pmd_auto_lb);
        let rt = Runtime::new(cores, assign, auto_lb, &run_dir, mgmt_access)?;
        let mut sw = Switch {
            store,
            run_dir,
            live: BTreeMap::new(),
            failed: BTreeMap::new(),
            rt,
            retired: Vec::new(),
            upgrade_ctx: None,
            deferred: Vec::new(),
            deferred_fds: Vec::new(),
            deferred_xsk: Vec::new(),
            xsk_books: BTreeMap::new(),
            xsk_reopened: BTreeMap::new(),
            switch_over: None,
        };
        let config = sw.store.config().clone();
        sw.rt.steering.set_manual(mac_numa(&config));
        super::ctops::apply_stored_limits(&config, sw.rt.dp.conntrack());
        for (br, b) in &config.bridges {
            tracing::info!(bridge = %br, ports = b.ports.len(), "restoring bridge");
            let mgmt = taken.as_deref_mut().and_then(|t| t.mgmt(br));
            sw.rt.add_bridge_with(br, b, mgmt)?;
            for (name, pc) in &b.ports {
                let r = match taken.as_deref_mut() {
                    Some(t) => sw.take_port(t, br, name, pc),
                    None => sw.start_port(br, name, pc).map_err(|e| e.0),
                };
                if let Err(e) = r {
                    tracing::error!(port = %name, error = %e, "cannot restore port");
                    sw.failed.insert(name.clone(), e);
                }
            }
        }
        Ok(sw)
    }

    /// The run directory.
    pub(super) fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.store.config()
    }

    /// Runs one command.
    pub fn execute(&mut self, command: &str, args: &[String]) -> Response {
        match self.dispatch(command, args) {
            Ok(r) => r,
            Err(CmdError(e)) => Response::err(e),
        }
    }

    fn dispatch(&mut self, command: &str, args: &[String]) -> CmdResult {
        let arity = |min: usize, max: usize, usage: &str| -> Result<(), CmdError> {
            if args.len() < min || args.len() > max {
                Err(CmdError(format!("usage: {command} {usage}")))
            } else {
                Ok(())
            }
        };
        match command {
            "add-br" => {
                arity(1, 2, "BR [internal=false]").and_then(|_| self.add_br(&args[0], &args[1..]))
            }
            "del-br" => arity(1, 1, "BR").and_then(|_| self.del_br(&args[0])),
            "list-br" => arity(0, 0, "").map(|_| self.list_br()),
            "add-port" => arity(2, usize::MAX, "BR PORT [type=T] [key=value...]")
                .and_then(|_| self.add_port(&args[0], &args[1], &args[2..])),
            "del-port" => arity(2, 2, "BR PORT").and_then(|_| self.del_port(&args[0], &args[1])),
            "list-ports" => arity(1, 1, "BR").and_then(|_| self.list_ports(&args[0])),
            "set-port" => arity(2, usize::MAX, "PORT key=value...")
                .and_then(|_| self.set_port(&args[0], &args[1..])),
            "show" => arity(0, 0, "").map(|_| self.show()),
            "port-stats" => arity(0, 1, "[PORT]").and_then(|_| self.port_stats(args.first())),
            "set-pmd-cores" => arity(1, 1, "LIST").and_then(|_| self.set_pmd_cores(&args[0])),
            "set-pmd-rxq-assign" => arity(1, 1, "roundrobin|cycles|group")
                .and_then(|_| self.set_pmd_rxq_assign(&args[0])),
            "set-pmd-auto-lb" => {
                arity(1, 1, "off|THRESHOLD%").and_then(|_| self.set_pmd_auto_lb(&args[0]))
            }
            "upgrade" => self.upgrade(args),
            "set-mac-numa" => {
                arity(2, 2, "MAC NODE").and_then(|_| self.set_mac_numa(&args[0], Some(&args[1])))
            }
            "del-mac-numa" => arity(1, 1, "MAC").and_then(|_| self.set_mac_numa(&args[0], None)),
            "dump-mac-numa" => arity(0, 0, "").map(|_| self.dump_mac_numa()),
            "inject" => arity(2, 2, "PORT HEX").and_then(|_| self.inject(&args[0], &args[1])),
            "capture" => arity(1, 1, "PORT").and_then(|_| self.capture(&args[0])),
            "add-flow" | "add-flows" | "mod-flows" | "del-flows" | "dump-flows"
            | "dump-megaflows" | "pmd-stats-show" | "pmd-stats-clear" | "pmd-rxq-show"
            | "set-controller" | "del-controller" | "set-fail-mode" | "set-bridge"
            | "dump-macs" | "add-meter" | "mod-meter" | "del-meter" | "del-meters"
            | "dump-meters" => self.dispatch_dp(command, args),
            "dump-conntrack" | "flush-conntrack" | "ct-stats" | "set-ct-limit" => {
                self.dispatch_ct(command, args)
            }
            "route/add" | "route/del" | "route/show" | "tnl/neigh/show" | "tnl/neigh/flush" => {
                super::underlay::command(&self.rt, command, args)
            }
            "version" => arity(0, 0, "").map(|_| {
                let v = env!("CARGO_PKG_VERSION");
                Response::ok(format!("vireod {v}"), json!({ "vireod": v }))
            }),
            _ => Err(CmdError(format!(
                "unknown command {command:?} (see vireoctl --help)"
            ))),
        }
    }

    fn bridge(&self, br: &str) -> Result<&BridgeConfig, CmdError> {
        self.config()
            .bridges
            .get(br)
            .ok_or_else(|| CmdError(format!("no bridge named {br}")))
    }

    fn name_in_use(&self, name: &str) -> bool {
        self.config().bridges.contains_key(name) || self.config().bridge_of_port(name).is_some()
    }

    /// The port (of any bridge) whose `ifname` option is `ifname`.
    fn port_using_ifname(&self, ifname: &str) -> Option<String> {
        self.config().bridges.values().find_map(|b| {
            b.ports
                .iter()
                .find(|(_, pc)| pc.options.get("ifname").map(String::as_str) == Some(ifname))
                .map(|(n, _)| n.clone())
        })
    }

    fn add_br(&mut self, br: &str, args: &[String]) -> CmdResult {
        options::check_name("bridge", br)?;
        if self.name_in_use(br) {
            return Err(CmdError(format!(
                "a bridge or port named {br} already exists"
            )));
        }
        let opts = options::parse_kv(args)?;
        let internal = match opts.get("internal").map(String::as_str) {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => {
                return Err(CmdError(format!(
                    "bad value for internal: {v:?} is not true or false"
                )))
            }
        };
        if let Some(k) = opts.keys().find(|k| *k != "internal") {
            return Err(CmdError(format!(
                "unknown option {k:?} for add-br (options: internal)"
            )));
        }
        let mut cfg = BridgeConfig::default();
        self.rt.add_bridge(br, &cfg)?;
        if internal {
            // The bridge's own host interface: a tap named BR, OpenFlow port LOCAL.
            let pc = PortConfig {
                kind: "internal".into(),
                ofport: ofproto::ofpp::LOCAL,
                options: BTreeMap::new(),
            };
            if let Err(e) = self.start_port(br, br, &pc) {
                self.rt.del_bridge(br);
                return Err(CmdError(format!(
                    "{} (add-br {br} internal=false makes a bridge without one)",
                    e.0
                )));
            }
            cfg.ports.insert(br.to_string(), pc);
        }
        let r = self.store.update(|c| {
            c.bridges.insert(br.to_string(), cfg.clone());
            Ok::<_, CmdError>(())
        });
        if let Err(e) = r {
            if internal {
                self.stop_port(br, br);
            }
            self.rt.del_bridge(br);
            return Err(e);
        }
        tracing::info!(bridge = %br, internal, "bridge added");
        Ok(Response::ok("", json!(null)))
    }

    fn del_br(&mut self, br: &str) -> CmdResult {
        let ports: Vec<String> = self.bridge(br)?.ports.keys().cloned().collect();
        self.store.update(|c| {
            c.bridges.remove(br);
            Ok::<_, CmdError>(())
        })?;
        for p in ports {
            self.stop_port(br, &p);
        }
        self.rt.del_bridge(br);
        tracing::info!(bridge = %br, "bridge deleted");
        Ok(Response::ok("", json!(null)))
    }

    fn list_br(&self) -> Response {
        let names: Vec<&String> = self.config().bridges.keys().collect();
        Response::ok(format::lines(&names), json!(names))
    }

    fn list_ports(&self, br: &str) -> CmdResult {
        // As in OVS, the bridge's internal port is not listed.
        let names: Vec<&String> = self.bridge(br)?.ports.keys().filter(|p| *p != br).collect();
        Ok(Response::ok(format::lines(&names), json!(names)))
    }

    fn add_port(&mut self, br: &str, name: &str, args: &[String]) -> CmdResult {
        self.bridge(br)?;
        options::check_name("port", name)?;
        if self.name_in_use(name) {
            return Err(CmdError(format!(
                "a bridge or port named {name} already exists"
            )));
        }
        let mut opts = options::parse_kv(args)?;
        let kind = opts
            .remove("type")
            .unwrap_or_else(|| options::DEFAULT_KIND.to_string());
        let spec = options::kind(&kind)?;
        options::validate(spec, &opts)?;
        opts.retain(|_, v| !v.is_empty());
        if let Some(ifname) = opts.get("ifname") {
            if let Some(other) = self.port_using_ifname(ifname) {
                return Err(CmdError(format!(
                    "interface {ifname} is already used by port {other}"
                )));
            }
        }
        let ofport = next_ofport(self.bridge(br)?);
        let pc = PortConfig {
            kind,
            ofport,
            options: opts,
        };
        // Create the live port before committing, so a port that cannot start is never stored.
        self.start_port(br, name, &pc)?;
        let r = self.store.update(|c| {
            let b = c.bridges.get_mut(br).expect("checked above");
            b.ports.insert(name.to_string(), pc.clone());
            Ok::<_, CmdError>(())
        });
        if let Err(e) = r {
            self.stop_port(br, name);
            return Err(e);
        }
        tracing::info!(bridge = %br, port = %name, kind = %pc.kind, ofport, "port added");
        Ok(Response::ok("", json!({ "ofport": ofport })))
    }

    fn del_port(&mut self, br: &str, name: &str) -> CmdResult {
        if !self.bridge(br)?.ports.contains_key(name) {
            return Err(CmdError(format!("bridge {br} has no port named {name}")));
        }
        if name == br {
            return Err(CmdError(format!(
                "port {name} is the bridge's internal port: del-br removes it"
            )));
        }
        self.store.update(|c| {
            c.bridges.get_mut(br).expect("checked").ports.remove(name);
            Ok::<_, CmdError>(())
        })?;
        self.stop_port(br, name);
        tracing::info!(bridge = %br, port = %name, "port deleted");
        Ok(Response::ok("", json!(null)))
    }

    fn set_port(&mut self, name: &str, args: &[String]) -> CmdResult {
        let br = self
            .config()
            .bridge_of_port(name)
            .ok_or_else(|| CmdError(format!("no port named {name}")))?
            .to_string();
        let old = self.config().bridges[&br].ports[name].clone();
        let changes = options::parse_kv(args)?;
        if changes.contains_key("type") {
            return Err(CmdError(format!(
                "the type of port {name} cannot be changed: del-port and add-port it"
            )));
        }
        let spec = options::kind(&old.kind)?;
        options::validate(spec, &changes)?;
        let mut new = old.clone();
        for (k, v) in changes {
            if v.is_empty() {
                new.options.remove(&k);
            } else {
                new.options.insert(k, v);
            }
        }
        if new == old {
            return Ok(Response::ok("", json!(null)));
        }
        let restart = needs_restart(spec, &old, &new);
        if restart {
            self.stop_port(&br, name);
            if let Err(e) = self.start_port(&br, name, &new) {
                // Put the old port back; the command fails and nothing changed.
                let _ = self.start_port(&br, name, &old);
                return Err(e);
            }
        } else {
            self.apply_live_options(&br, name, &old, &new)?;
        }
        self.store.update(|c| {
            c.bridges
                .get_mut(&br)
                .expect("checked")
                .ports
                .insert(name.to_string(), new.clone());
            Ok::<_, CmdError>(())
        })?;
        tracing::info!(port = %name, restarted = restart, "port options changed");
        Ok(Response::ok("", json!(null)))
    }

    fn set_pmd_cores(&mut self, list: &str) -> CmdResult {
        let cores = options::parse_cpu_list(list)?;
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(c) = cores.iter().find(|c| **c >= online.max(1024)) {
            return Err(CmdError(format!("core {c} does not exist")));
        }
        self.rt.set_pmd_cores(&cores)?;
        self.store.update(|c| {
            c.pmd_cores = Some(list.to_string());
            Ok::<_, CmdError>(())
        })?;
        Ok(Response::ok("", json!({ "pmd_cores": cores })))
    }

    fn set_pmd_rxq_assign(&mut self, mode: &str) -> CmdResult {
        let m = options::parse_assign(mode)?;
        self.rt.set_assign(m)?;
        self.store.update(|c| {
            c.pmd_rxq_assign = Some(mode.to_string());
            Ok::<_, CmdError>(())
        })?;
        Ok(Response::ok("", json!(null)))
    }

    fn set_pmd_auto_lb(&mut self, v: &str) -> CmdResult {
        let t = options::parse_auto_lb(v)?;
        self.rt.set_auto_lb(options::auto_lb(t))?;
        self.store.update(|c| {
            c.pmd_auto_lb = t;
            Ok::<_, CmdError>(())
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `set-mac-numa MAC NODE` (`node` given) or `del-mac-numa MAC`: stored, then applied to
    /// every steering port at once.
    fn set_mac_numa(&mut self, mac: &str, node: Option<&String>) -> CmdResult {
        let m = steering::parse_mac(mac).map_err(CmdError)?;
        let key = steering::mac_text(&m);
        let node = match node {
            Some(n) => Some(
                n.parse::<usize>()
                    .ok()
                    .filter(|&n| n < 1024)
                    .ok_or_else(|| CmdError(format!("{n:?} is not a NUMA node number")))?,
            ),
            None => None,
        };
        if node.is_none() && !self.config().mac_numa.contains_key(&key) {
            return Err(CmdError(format!("no set-mac-numa entry for {key}")));
        }
        self.store.update(|c| {
            match node {
                Some(n) => c.mac_numa.insert(key.clone(), n),
                None => c.mac_numa.remove(&key),
            };
            Ok::<_, CmdError>(())
        })?;
        self.rt.steering.set_manual(mac_numa(self.config()));
        self.rt.steering.sync(&self.rt);
        Ok(Response::ok("", json!(null)))
    }

    fn dump_mac_numa(&self) -> Response {
        let rows = self.rt.steering.dump(&self.rt);
        let text: String = rows
            .iter()
            .map(|r| {
                format!(
                    " {} node={} {} ports={}\n",
                    steering::mac_text(&r.mac),
                    r.node,
                    r.source,
                    r.ports.join(",")
                )
            })
            .collect();
        let data: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"mac": steering::mac_text(&r.mac), "node": r.node,
                       "source": r.source, "ports": r.ports})
            })
            .collect();
        Response::ok(
            text,
            json!({"entries": data, "skipped": self.rt.steering.skipped()}),
        )
    }

    fn show(&self) -> Response {
        let mut data = format::show_data(self.config(), &self.live, &self.failed);
        for b in data["bridges"].as_array_mut().into_iter().flatten() {
            let name = b["name"].as_str().unwrap_or_default().to_string();
            b["controllers"] = self.rt.controller_status(&name);
        }
        data["control"] = super::control::COUNTERS.json();
        if let Some(so) = &self.switch_over {
            data["switch_over"] = so.clone();
        }
        // Translations cut by a resubmit / work limit (their packets dropped), packet-ins
        // dropped on a full queue.
        data["pipeline"] = json!({
            "xlate_limit_drops": self.rt.pipeline.xlate_limit_drops(),
            "packet_in_drops": self.rt.pipeline.packet_in_drops(),
        });
        Response::ok(format::show_text(&data), data)
    }

    fn port_stats(&self, port: Option<&String>) -> CmdResult {
        let mut rows = Vec::new();
        if let Some(p) = port {
            if self.config().bridge_of_port(p).is_none() {
                return Err(CmdError(format!("no port named {p}")));
            }
        }
        for (name, lp) in &self.live {
            if port.is_some_and(|p| p != name) {
                continue;
            }
            let mut st = lp.port().stats();
            st.add_drops(ports::DropReason::Policed, self.rt.policed(name));
            rows.push((name.clone(), st));
        }
        let mut macs = BTreeMap::new();
        for br in self.config().bridges.keys() {
            if let Ok(per_port) = self.rt.pipeline.mac_port_stats(br) {
                macs.extend(per_port);
            }
        }
        let data = format::stats_data(&rows, &macs);
        Ok(Response::ok(format::stats_text(&rows, &macs), data))
    }

    fn dummy(&self, name: &str) -> Result<&Arc<DummyPort>, CmdError> {
        let lp = self
            .live
            .get(name)
            .ok_or_else(|| CmdError(format!("no port named {name}")))?;
        lp.dummy()
            .ok_or_else(|| CmdError(format!("port {name} is not a dummy port")))
    }

    fn inject(&self, name: &str, hex: &str) -> CmdResult {
        let frame = format::parse_hex(hex)?;
        if frame.len() < 14 || frame.len() > packet::MAX_FRAME {
            return Err(CmdError(format!(
                "frame of {} bytes: must be 14 to {} bytes",
                frame.len(),
                packet::MAX_FRAME
            )));
        }
        self.dummy(name)?
            .inject(frame)
            .map_err(|e| CmdError(e.to_string()))?;
        Ok(Response::ok("", json!(null)))
    }

    fn capture(&self, name: &str) -> CmdResult {
        let frames: Vec<String> = self
            .dummy(name)?
            .take_captured()
            .iter()
            .map(|f| format::to_hex(f))
            .collect();
        Ok(Response::ok(format::lines(&frames), json!(frames)))
    }

    pub(super) fn start_port(
        &mut self,
        br: &str,
        name: &str,
        pc: &PortConfig,
    ) -> Result<(), CmdError> {
        let lp = LivePort::create(name, pc, &self.run_dir)?;
        self.attach_live(br, name, pc, lp)
    }

    /// Puts a live port into its bridge and the datapath (stopping it if that fails).
    pub(super) fn attach_live(
        &mut self,
        br: &str,
        name: &str,
        pc: &PortConfig,
        lp: LivePort,
    ) -> Result<(), CmdError> {
        let place = options::Placement::of(&pc.options)?;
        let mut port = lp.port();
        let mut snoop = None;
        if pc.kind == "internal" {
            // The neighbour cache of native tunneling snoops ARP on internal ports.
            let s = Arc::new(super::underlay::SnoopPort::new(
                port,
                name,
                self.rt.underlay.clone(),
            ));
            port = s.clone();
            snoop = Some(s);
        }
        let attach = Attach {
            bridge: br,
            name,
            ofport: pc.ofport,
            port,
            tag: place.tag,
            trunks: place.trunks,
            mac_limit: place.mac_limit,
            affinity: place.affinity,
        };
        let dp_no = match self.rt.attach(attach) {
            Ok(no) => no,
            Err(e) => {
                lp.stop();
                self.retired.push(lp);
                return Err(CmdError(e));
            }
        };
        if let Some(s) = snoop {
            self.rt.native.add_internal(dp_no, name, s);
        }
        if let LivePort::Tunnel(t) = &lp {
            self.rt.native.add_tunnel(dp_no, name, t.config().clone());
        }
        if let Err(e) = self.rt.set_policing(name, place.policing) {
            self.rt.detach(br, name);
            lp.stop();
            self.retired.push(lp);
            return Err(CmdError(e));
        }
        self.failed.remove(name);
        if let Some(x) = lp.af_xdp().filter(|x| x.steer_nodes() > 0) {
            self.rt.steering.add_port(name, x.clone());
            self.rt.steering.sync(&self.rt);
        }
        if let Some(x) = lp.af_xdp().filter(|x| x.marks()) {
            self.rt.marks.add_port(name, x.clone());
        }
        if pc.kind == "internal" {
            super::underlay::upkeep(&self.rt);
        }
        self.live.insert(name.to_string(), lp);
        Ok(())
    }

    fn stop_port(&mut self, br: &str, name: &str) {
        self.failed.remove(name);
        if let Some(lp) = self.live.remove(name) {
            self.rt.native.remove(name);
            self.rt.steering.remove_port(name);
            self.rt.marks.remove_port(name);
            self.rt.detach(br, name);
            lp.stop();
            self.retired.push(lp);
        }
    }

    /// Ports stopped since the last call, for the caller to [`LivePort::join`] once it has
    /// released the `Switch` mutex.
    pub fn take_retired(&mut self) -> Vec<LivePort> {
        std::mem::take(&mut self.retired)
    }

    /// Applies options that need no restart: VLANs, rxq pinning and the MAC limit.
    fn apply_live_options(
        &mut self,
        br: &str,
        name: &str,
        old: &PortConfig,
        new: &PortConfig,
    ) -> Result<(), CmdError> {
        let (was, now) = (
            options::Placement::of(&old.options)?,
            options::Placement::of(&new.options)?,
        );
        if (&was.tag, &was.trunks) != (&now.tag, &now.trunks) {
            self.rt.set_vlans(br, name, now.tag, now.trunks.clone())?;
        }
        if was.affinity != now.affinity {
            self.rt.set_affinity(name, &now.affinity)?;
        }
        if was.mac_limit != now.mac_limit {
            self.rt.set_mac_limit(br, name, now.mac_limit)?;
        }
        if was.policing != now.policing {
            self.rt.set_policing(name, now.policing)?;
        }
        Ok(())
    }

    /// Stops every live port (daemon shutdown; join them with [`Switch::take_retired`]). The
    /// store is untouched.
    pub fn shutdown(&mut self) {
        let config = self.store.config().clone();
        for (br, b) in &config.bridges {
            for p in b.ports.keys() {
                self.stop_port(br, p);
            }
        }
        self.rt.shutdown();
    }
}

/// Lowest OpenFlow port number not used in the bridge.
fn next_ofport(b: &BridgeConfig) -> u32 {
    options::lowest_free(b.ports.values().map(|p| p.ofport))
}

/// Whether changing options from `old` to `new` needs the port re-created (device options), or
/// can be applied live (VLAN and PMD placement options).
fn needs_restart(spec: &KindSpec, old: &PortConfig, new: &PortConfig) -> bool {
    spec.options
        .iter()
        .any(|k| old.options.get(*k) != new.options.get(*k))
}

/// Link state as text.
pub fn link_name(l: Link) -> &'static str {
    match l {
        Link::Up => "up",
        Link::Down => "down",
    }
}

/// The stored `set-mac-numa` entries (each checked when it was set).
fn mac_numa(c: &Config) -> BTreeMap<steering::Mac, usize> {
    c.mac_numa
        .iter()
        .filter_map(|(m, &n)| steering::parse_mac(m).ok().map(|m| (m, n)))
        .collect()
}
