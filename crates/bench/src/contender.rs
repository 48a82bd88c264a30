//! The switches under test: Vireo (vireod + vireoctl), OVS-DPDK 3.1 (Debian's
//! ovs-vswitchd-dpdk in a private run directory) and DPDK testpmd's vhost PMD in io mode
//! (the raw upper bound). Each starts with its PMD on the switch core, wires two vhost-user
//! ports and the scenario's meter and rules, reports its own busy cycles per packet where it
//! has them, and stops completely (nothing left spinning).
//!
//! Threads: vireo-bench's main thread.
use crate::parse::{ovs_pmd_stats, vireo_pmd_stats, PmdCycles};
use crate::proc::{command, kill_pidfile, run, wait_for_path, which, Proc};
use crate::scenario::Scenario;
use crate::testpmd::{switch_args, TESTPMD};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the generator finds the switch.
#[derive(Clone, Debug)]
pub struct Ports {
    /// The two vhost-user sockets.
    pub socks: [PathBuf; 2],
    /// The generator must listen (the switch is a vhost-user client).
    pub gen_server: bool,
}

/// One switch under test.
pub trait Contender {
    /// Short name: `vireo`, `ovs`, `dpdk`.
    fn name(&self) -> &'static str;
    /// Why it cannot run here, if it cannot.
    fn check(&self) -> Result<(), String>;
    /// Starts it in `dir` with the scenario's ports and rules.
    fn start(&mut self, dir: &Path, sc: &Scenario) -> Result<Ports, String>;
    /// Zeroes its PMD statistics (start of the measurement window).
    fn clear_stats(&mut self) {}
    /// Its PMD statistics since `clear_stats`, if it keeps them.
    fn pmd_cycles(&mut self) -> Option<PmdCycles> {
        None
    }
    /// The process whose CPU share tells whether the switch was preempted.
    fn pid(&self) -> Option<u32> {
        None
    }
    /// Whether both of its generator-facing ports (`vu0`, `vu1`) have their link up; `None`
    /// if it cannot tell (the generator then starts traffic at once).
    fn links_up(&mut self) -> Option<bool> {
        None
    }
    /// Stops everything it started.
    fn stop(&mut self);
}

/// Whether `vireoctl --json show` lists ports `vu0` and `vu1` with `link: up`.
pub fn vireo_links_up(show_json: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(show_json) else {
        return false;
    };
    let ports: Vec<&serde_json::Value> = v["bridges"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["ports"].as_array().into_iter().flatten())
        .collect();
    ["vu0", "vu1"].iter().all(|n| {
        ports
            .iter()
            .any(|p| p["name"] == *n && p["link"].as_str() == Some("up"))
    })
}

fn socks(dir: &Path) -> [PathBuf; 2] {
    [dir.join("vu0.sock"), dir.join("vu1.sock")]
}

/// DPDK testpmd with two vhost PMD ports, io forwarding.
pub struct Dpdk {
    core: usize,
    proc: Option<Proc>,
}

impl Dpdk {
    /// Its forwarding lcore goes on `core`.
    pub fn new(core: usize) -> Dpdk {
        Dpdk { core, proc: None }
    }
}

impl Contender for Dpdk {
    fn name(&self) -> &'static str {
        "dpdk"
    }
    fn check(&self) -> Result<(), String> {
        which(TESTPMD)
            .map(|_| ())
            .ok_or_else(|| format!("{TESTPMD} not found (Debian dpdk-dev)"))
    }
    fn start(&mut self, dir: &Path, sc: &Scenario) -> Result<Ports, String> {
        if sc.meter().is_some()
            || matches!(
                sc.kind,
                crate::scenario::Kind::Ct(_)
                    | crate::scenario::Kind::CtNew
                    | crate::scenario::Kind::Tunnel(_)
                    | crate::scenario::Kind::NativeTunnel(_)
            )
        {
            return Err("testpmd io forwarding has no meters, conntrack or tunnels".into());
        }
        let s = socks(dir);
        let args = switch_args(&s, sc.queues, self.core);
        let mut p = Proc::spawn(
            "testpmd switch",
            command(TESTPMD).args(&args),
            &dir.join("switch.log"),
        )?;
        for sock in &s {
            if !wait_for_path(sock, Duration::from_secs(15)) || !p.running() {
                return Err(format!(
                    "testpmd switch did not create {}: {}",
                    sock.display(),
                    p.log_tail(8)
                ));
            }
        }
        self.proc = Some(p);
        Ok(Ports {
            socks: s,
            gen_server: false,
        })
    }
    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }
    fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop(Duration::from_secs(5));
        }
    }
}

/// The OVS-DPDK vswitchd from Debian's openvswitch-switch-dpdk.
pub const OVS_VSWITCHD: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";

/// OVS-DPDK in a private directory, vhost-user client ports.
pub struct Ovs {
    core: usize,
    dir: Option<PathBuf>,
    /// More `other_config:KEY=VALUE` settings of the Open_vSwitch table, set before
    /// ovs-vswitchd starts (e.g. `userspace-tso-enable=true`, read only at start-up).
    pub other_config: Vec<String>,
}

impl Ovs {
    /// Its PMD (and DPDK lcore) goes on `core`.
    pub fn new(core: usize) -> Ovs {
        Ovs {
            core,
            dir: None,
            other_config: Vec::new(),
        }
    }

    fn cmd(&self, dir: &Path, bin: &str) -> Command {
        let mut c = Command::new(bin);
        for k in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            c.env(k, dir);
        }
        c
    }

    fn vsctl(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        let db = format!("--db=unix:{}", dir.join("db.sock").display());
        run(self
            .cmd(dir, "ovs-vsctl")
            .arg(db)
            .arg("--timeout=20")
            .args(args))
    }

    fn appctl(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        let pid = std::fs::read_to_string(dir.join("vswitchd.pid")).map_err(|e| e.to_string())?;
        let ctl = dir.join(format!("ovs-vswitchd-dpdk.{}.ctl", pid.trim()));
        run(self.cmd(dir, "ovs-appctl").arg("-t").arg(ctl).args(args))
    }

    fn start_daemons(&self, dir: &Path) -> Result<(), String> {
        let d = dir.display();
        let db = dir.join("conf.db");
        run(self
            .cmd(dir, "ovsdb-tool")
            .arg("create")
            .arg(&db)
            .arg("/usr/share/openvswitch/vswitch.ovsschema"))?;
        run(self
            .cmd(dir, "ovsdb-server")
            .arg(format!("--remote=punix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/ovsdb.pid"))
            .arg("--detach")
            .arg(format!("--log-file={d}/ovsdb.log"))
            .arg(&db))?;
        self.vsctl(dir, &["--no-wait", "init"])?;
        let mask = format!("0x{:x}", 1u64 << self.core);
        let lcore = format!("other_config:dpdk-lcore-mask={mask}");
        let pmd = format!("other_config:pmd-cpu-mask={mask}");
        let extra: Vec<String> = self
            .other_config
            .iter()
            .map(|kv| format!("other_config:{kv}"))
            .collect();
        let mut args = vec![
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            "other_config:dpdk-init=true",
            &lcore,
            &pmd,
            "other_config:dpdk-socket-mem=1024",
            "other_config:dpdk-extra=--no-pci --file-prefix=vbovs",
        ];
        args.extend(extra.iter().map(String::as_str));
        self.vsctl(dir, &args)?;
        self.start_vswitchd(dir)
    }

    fn start_vswitchd(&self, dir: &Path) -> Result<(), String> {
        let d = dir.display();
        run(Command::new("taskset")
            .env("OVS_RUNDIR", dir)
            .env("OVS_LOGDIR", dir)
            .env("OVS_DBDIR", dir)
            .args(["-c", &self.core.to_string(), OVS_VSWITCHD])
            .arg(format!("unix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/vswitchd.pid"))
            .arg("--detach")
            .arg(format!("--log-file={d}/vswitchd.log")))?;
        Ok(())
    }

    /// Restarts ovs-vswitchd as an operator's upgrade does (`ovs-appctl exit`, start it
    /// again; the database keeps the bridge and ports, the rules are added again, as a
    /// controller or script would). For the upgrade-versus-restart measurement.
    pub fn restart_vswitchd(&mut self, sc: &Scenario) -> Result<(), String> {
        let dir = self.dir.clone().ok_or("OVS-DPDK is not running")?;
        let _ = self.appctl(&dir, &["exit"]);
        kill_pidfile(&dir.join("vswitchd.pid"), Duration::from_secs(10));
        self.start_vswitchd(&dir)?;
        self.add_rules_when_ready(&dir, sc)
    }

    /// [`Ovs::add_rules`], retried for up to 20 s: the bridge's OpenFlow socket comes once
    /// vswitchd has read the database (on a loaded machine, after `add-br` has returned).
    fn add_rules_when_ready(&self, dir: &Path, sc: &Scenario) -> Result<(), String> {
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match self.add_rules(dir, sc) {
                Ok(()) => return Ok(()),
                Err(_) if std::time::Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn add_rules(&self, dir: &Path, sc: &Scenario) -> Result<(), String> {
        self.ofctl(dir, &["del-flows", "br0"])?;
        if sc.kind == crate::scenario::Kind::CtNew {
            let n = crate::scenario::CT_NEW_LIMIT.to_string();
            self.appctl(dir, &["dpctl/ct-set-maxconns", &n])?;
            let _ = self.appctl(dir, &["dpctl/flush-conntrack"]);
        }
        let rules = dir.join("rules.txt");
        // Tunnel scenarios: `tb`'s underlay address here is 10.99.0.2 (`add_tunnels`).
        let text = sc.rules_to("1", "2", "10.99.0.2").join("\n") + "\n";
        std::fs::write(&rules, text).map_err(|e| e.to_string())?;
        let rules = rules.display().to_string();
        if let Some(m) = sc.meter() {
            // Meters and the meter instruction are OpenFlow 1.3; the meter first, or the
            // flows naming it are refused.
            self.ofctl(dir, &["-O", "OpenFlow13", "add-meter", "br0", &m])?;
            self.ofctl(dir, &["-O", "OpenFlow13", "add-flows", "br0", &rules])?;
            let shown = self.ofctl(dir, &["-O", "OpenFlow13", "dump-meters", "br0"])?;
            std::fs::write(dir.join("meters.txt"), &shown).map_err(|e| e.to_string())?;
        } else {
            self.ofctl(dir, &["add-flows", "br0", &rules])?;
        }
        Ok(())
    }

    fn ofctl(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        run(self.cmd(dir, "ovs-ofctl").args(args))
    }

    /// `ovs-vsctl ARGS` against the running instance (for callers that add ports of their own).
    pub fn vsctl_running(&self, args: &[&str]) -> Result<String, String> {
        let dir = self.dir.clone().ok_or("OVS-DPDK is not running")?;
        self.vsctl(&dir, args)
    }

    /// `ovs-ofctl ARGS` against the running instance.
    pub fn ofctl_running(&self, args: &[&str]) -> Result<String, String> {
        let dir = self.dir.clone().ok_or("OVS-DPDK is not running")?;
        self.ofctl(&dir, args)
    }

    /// The tunnel scenario in OVS-DPDK's own terms (native tunneling): `ta` (flow-based,
    /// local 10.99.0.1) and `tb` (remote 10.99.0.1, VNI 5, local 10.99.0.2) on br0; one
    /// underlay bridge `tunp` holding both addresses, with neighbour entries set by hand and
    /// a patch pair on itself: an encapsulated packet leaves `tunp`'s local port through the
    /// patch (`in_port=LOCAL,udp,tp_dst=PORT`) and comes back to the local port, where it is
    /// popped. The same encap + decap per packet as Vireo's loopback pair, without a kernel.
    /// (Two underlay bridges do not work: OVS routes to its own local address through the
    /// bridge holding it, whatever `ovs/route/add` says.)
    fn add_tunnels(&self, dir: &Path, t: crate::scenario::Tun) -> Result<(), String> {
        let (ty, udp) = match t {
            crate::scenario::Tun::Vxlan => ("type=vxlan", "4789"),
            crate::scenario::Tun::Geneve => ("type=geneve", "6081"),
        };
        let (a, b) = (
            crate::scenario::TunnelPorts::A,
            crate::scenario::TunnelPorts::B,
        );
        for (name, opts) in [
            (
                a,
                [
                    "options:remote_ip=flow",
                    "options:key=flow",
                    "options:local_ip=10.99.0.1",
                ],
            ),
            (
                b,
                [
                    "options:remote_ip=10.99.0.1",
                    "options:key=5",
                    "options:local_ip=10.99.0.2",
                ],
            ),
        ] {
            let mut args = vec!["add-port", "br0", name, "--", "set", "Interface", name, ty];
            args.extend(opts);
            self.vsctl(dir, &args)?;
        }
        let br = "tunp";
        self.vsctl(
            dir,
            &[
                "add-br",
                br,
                "--",
                "set",
                "bridge",
                br,
                "datapath_type=netdev",
            ],
        )?;
        for (p, peer, no) in [("tunp1", "tunp2", "1"), ("tunp2", "tunp1", "2")] {
            let peer = format!("options:peer={peer}");
            let no = format!("ofport_request={no}");
            self.vsctl(
                dir,
                &[
                    "add-port",
                    br,
                    p,
                    "--",
                    "set",
                    "Interface",
                    p,
                    "type=patch",
                    &peer,
                    &no,
                ],
            )?;
        }
        // OVS leaves the bridge's tap behind when it exits (persistent): start clean.
        run(Command::new("ip").args(["addr", "flush", "dev", br]))?;
        for ip in ["10.99.0.1/24", "10.99.0.2/24"] {
            run(Command::new("ip").args(["addr", "add", ip, "dev", br]))?;
        }
        run(Command::new("ip").args(["link", "set", br, "up"]))?;
        let mac = std::fs::read_to_string(format!("/sys/class/net/{br}/address"))
            .map_err(|e| format!("{br}: {e}"))?;
        for ip in ["10.99.0.1", "10.99.0.2"] {
            self.appctl(dir, &["tnl/arp/set", br, ip, mac.trim()])?;
        }
        self.ofctl(dir, &["del-flows", br])?;
        let out = format!("in_port=LOCAL,udp,tp_dst={udp},actions=output:1");
        self.ofctl(dir, &["add-flow", br, &out])?;
        self.ofctl(dir, &["add-flow", br, "in_port=2,actions=LOCAL"])?;
        Ok(())
    }
}

fn hugepages_free() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    m.lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

impl Contender for Ovs {
    fn name(&self) -> &'static str {
        "ovs"
    }
    fn check(&self) -> Result<(), String> {
        if !Path::new(OVS_VSWITCHD).is_file() {
            return Err(format!(
                "{OVS_VSWITCHD} not found (Debian openvswitch-switch-dpdk)"
            ));
        }
        if hugepages_free() < 512 {
            return Err(
                "OVS-DPDK needs 1 GB of free 2 MB hugepages (scripts/setup.sh --bench)".into(),
            );
        }
        Ok(())
    }
    fn start(&mut self, dir: &Path, sc: &Scenario) -> Result<Ports, String> {
        self.dir = Some(dir.to_path_buf());
        self.start_daemons(dir)?;
        self.vsctl(
            dir,
            &[
                "add-br",
                "br0",
                "--",
                "set",
                "bridge",
                "br0",
                "datapath_type=netdev",
            ],
        )?;
        let s = socks(dir);
        for (i, sock) in s.iter().enumerate() {
            let (name, path, ofp) = (
                format!("vhu{i}"),
                format!("options:vhost-server-path={}", sock.display()),
                format!("ofport_request={}", i + 1),
            );
            self.vsctl(
                dir,
                &[
                    "add-port",
                    "br0",
                    &name,
                    "--",
                    "set",
                    "Interface",
                    &name,
                    "type=dpdkvhostuserclient",
                    &path,
                    &ofp,
                ],
            )?;
        }
        if let crate::scenario::Kind::Tunnel(t) | crate::scenario::Kind::NativeTunnel(t) = sc.kind {
            self.add_tunnels(dir, t)?;
        }
        self.add_rules_when_ready(dir, sc)?;
        Ok(Ports {
            socks: s,
            gen_server: true,
        })
    }
    fn clear_stats(&mut self) {
        if let Some(d) = self.dir.clone() {
            let _ = self.appctl(&d, &["dpif-netdev/pmd-stats-clear"]);
        }
    }
    fn pmd_cycles(&mut self) -> Option<PmdCycles> {
        let d = self.dir.clone()?;
        let out = self.appctl(&d, &["dpif-netdev/pmd-stats-show"]).ok()?;
        let _ = std::fs::write(d.join("pmd-stats.txt"), &out);
        // What the ports negotiated (virtio features, ring layout), kept beside the figures.
        if let Ok(st) = self.vsctl(&d, &["--columns=name,status", "list", "Interface"]) {
            let _ = std::fs::write(d.join("interfaces.txt"), st);
        }
        // How many connections the run left in the tracker (conntrack scenarios).
        if let Ok(n) = self.appctl(&d, &["dpctl/ct-get-nconns"]) {
            let _ = std::fs::write(d.join("ct-nconns.txt"), n);
        }
        ovs_pmd_stats(&out)
    }
    fn pid(&self) -> Option<u32> {
        let d = self.dir.as_ref()?;
        std::fs::read_to_string(d.join("vswitchd.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    fn stop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = self.appctl(&d, &["exit"]);
            kill_pidfile(&d.join("vswitchd.pid"), Duration::from_secs(10));
            kill_pidfile(&d.join("ovsdb.pid"), Duration::from_secs(5));
            // The tunnel scenarios' underlay bridge (a persistent tap holding 10.99.0.1-2).
            let _ = run(Command::new("ip").args(["link", "del", "tunp"]));
        }
    }
}

/// Vireo: vireod with its PMD on the switch core, configured with vireoctl.
pub struct Vireo {
    /// `vireo`, or `vireo@DIR` for another build (A/B in the same rounds).
    pub label: &'static str,
    core: usize,
    bin_dir: PathBuf,
    /// Use `vhost-user` server ports instead of `vhost-user-client`.
    pub server_ports: bool,
    /// More `KEY=VALUE` options for both vhost-user ports (e.g. `offloads=false`).
    pub port_options: Vec<String>,
    proc: Option<Proc>,
    dir: Option<PathBuf>,
}

impl Vireo {
    /// vireod and vireoctl are taken from `bin_dir`.
    pub fn new(core: usize, bin_dir: PathBuf) -> Vireo {
        Vireo {
            label: "vireo",
            core,
            bin_dir,
            server_ports: false,
            port_options: Vec::new(),
            proc: None,
            dir: None,
        }
    }

    fn ctl(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        run(Command::new(self.bin_dir.join("vireoctl"))
            .arg("--run-dir")
            .arg(dir)
            .args(args))
    }

    /// `vireoctl ARGS` against the running vireod (for callers that add ports of their own).
    pub fn ctl_running(&self, args: &[&str]) -> Result<String, String> {
        let dir = self.dir.clone().ok_or("vireod is not running")?;
        self.ctl(&dir, args)
    }
}

/// `add-br br0 internal=false` (no host interface on the bridge, nothing for the kernel to
/// send into it); a vireod from before the internal port rejects the option and never makes
/// one, so there the bridge is added again without it. Returns whether the option was taken.
pub fn add_bridge(ctl: impl Fn(&[&str]) -> Result<String, String>) -> Result<bool, String> {
    match ctl(&["add-br", "br0", "internal=false"]) {
        Ok(_) => Ok(true),
        Err(new) => match ctl(&["add-br", "br0"]) {
            Ok(_) => {
                eprintln!(
                    "vireo-bench: this vireod refused internal=false ({}); bridge added without it (an older build)",
                    new.trim()
                );
                Ok(false)
            }
            Err(old) => Err(format!(
                "add-br failed: {} (and without internal=false: {})",
                new.trim(),
                old.trim()
            )),
        },
    }
}

impl Contender for Vireo {
    fn name(&self) -> &'static str {
        self.label
    }
    fn check(&self) -> Result<(), String> {
        for b in ["vireod", "vireoctl"] {
            if !self.bin_dir.join(b).is_file() {
                return Err(format!(
                    "{b} not found in {} (cargo build --release -p vireo, or --vireo-bin DIR)",
                    self.bin_dir.display()
                ));
            }
        }
        Ok(())
    }
    fn start(&mut self, dir: &Path, sc: &Scenario) -> Result<Ports, String> {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &self.core.to_string()])
            .arg(self.bin_dir.join("vireod"))
            .arg("--run-dir")
            .arg(dir)
            .args(["--pmd-cores", &self.core.to_string()]);
        let p = Proc::spawn("vireod", &mut cmd, &dir.join("vireod.log"))?;
        self.proc = Some(p);
        self.dir = Some(dir.to_path_buf());
        if !wait_for_path(&dir.join("vireod.ctl"), Duration::from_secs(10)) {
            let tail = self
                .proc
                .as_ref()
                .map(|p| p.log_tail(8))
                .unwrap_or_default();
            return Err(format!("vireod did not start: {tail}"));
        }
        add_bridge(|a| self.ctl(dir, a))?;
        let s = socks(dir);
        let ty = if self.server_ports {
            "type=vhost-user"
        } else {
            "type=vhost-user-client"
        };
        for (i, sock) in s.iter().enumerate() {
            let path = format!("path={}", sock.display());
            let q = format!("queues={}", sc.queues);
            let mut args = vec![
                "add-port",
                "br0",
                if i == 0 { "vu0" } else { "vu1" },
                ty,
                &path,
            ];
            if sc.queues > 1 {
                args.push(&q);
            }
            args.extend(self.port_options.iter().map(String::as_str));
            self.ctl(dir, &args).map_err(|e| {
                format!("vireod cannot carry vhost-user yet (add-port failed: {e})")
            })?;
        }
        // The tunnel ports; on the native path behind the underlay bridge of `crate::native`.
        let (tunnels, tun_dst) = match sc.kind {
            crate::scenario::Kind::Tunnel(t) => (
                Some(crate::scenario::TunnelPorts::add_port_args(t)),
                "127.0.0.102",
            ),
            crate::scenario::Kind::NativeTunnel(t) => {
                crate::native::setup(|a| self.ctl(dir, a))?;
                let (a, b) = (crate::native::ADDR_A, crate::native::ADDR_B);
                (
                    Some(crate::scenario::TunnelPorts::add_port_args_at(t, a, b)),
                    b,
                )
            }
            _ => (None, "127.0.0.102"),
        };
        for args in tunnels.iter().flatten() {
            let mut a = vec!["add-port", "br0"];
            a.extend(args.iter().map(String::as_str));
            self.ctl(dir, &a)?;
        }
        let _ = self.ctl(dir, &["del-flows", "br0"]);
        if sc.kind == crate::scenario::Kind::CtNew {
            self.ctl(
                dir,
                &["set-ct-limit", &crate::scenario::CT_NEW_LIMIT.to_string()],
            )?;
        }
        if let Some(m) = sc.meter() {
            self.ctl(dir, &["add-meter", "br0", &m])?;
        }
        let rules = dir.join("rules.txt");
        let text = sc.rules_to("vu0", "vu1", tun_dst);
        std::fs::write(&rules, text.join("\n") + "\n").map_err(|e| e.to_string())?;
        if self
            .ctl(dir, &["add-flows", "br0", &rules.display().to_string()])
            .is_err()
        {
            // An older vireoctl without add-flows: one rule at a time.
            for r in text {
                self.ctl(dir, &["add-flow", "br0", &r])?;
            }
        }
        Ok(Ports {
            socks: s,
            gen_server: !self.server_ports,
        })
    }
    fn clear_stats(&mut self) {
        if let Some(d) = self.dir.clone() {
            let _ = self.ctl(&d, &["pmd-stats-clear"]);
        }
    }
    fn pmd_cycles(&mut self) -> Option<PmdCycles> {
        let d = self.dir.clone()?;
        let out = self.ctl(&d, &["--json", "pmd-stats-show"]).ok()?;
        let _ = std::fs::write(d.join("pmd-stats.json"), &out);
        // What the ports negotiated (virtio features, ring layout), kept beside the figures.
        if let Ok(show) = self.ctl(&d, &["show"]) {
            let _ = std::fs::write(d.join("show.txt"), show);
        }
        if let Ok(ct) = self.ctl(&d, &["ct-stats"]) {
            let _ = std::fs::write(d.join("ct-stats.txt"), ct);
        }
        // Which path the tunnel scenarios took (`tnl_push`/`tnl_pop` on the native one).
        if let Ok(m) = self.ctl(&d, &["dump-megaflows"]) {
            let _ = std::fs::write(d.join("megaflows.txt"), m);
        }
        if let Ok(p) = self.ctl(&d, &["port-stats"]) {
            let _ = std::fs::write(d.join("port-stats.txt"), p);
        }
        vireo_pmd_stats(&out)
    }
    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }
    fn links_up(&mut self) -> Option<bool> {
        let d = self.dir.clone()?;
        Some(
            self.ctl(&d, &["--json", "show"])
                .is_ok_and(|s| vireo_links_up(&s)),
        )
    }
    fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop(Duration::from_secs(10));
        }
        if self.dir.take().is_some() {
            crate::native::teardown();
        }
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn add_bridge_falls_back_for_an_older_vireod() {
        // A vireoctl from before the internal port: the option is an error, the plain form works.
        let calls = RefCell::new(Vec::new());
        let old = |a: &[&str]| {
            calls.borrow_mut().push(a.join(" "));
            if a.len() > 2 {
                Err("vireoctl: unknown option internal=false".to_string())
            } else {
                Ok(String::new())
            }
        };
        assert_eq!(add_bridge(old), Ok(false));
        assert_eq!(*calls.borrow(), ["add-br br0 internal=false", "add-br br0"]);
        // A current one takes it the first time.
        calls.borrow_mut().clear();
        let new = |a: &[&str]| {
            calls.borrow_mut().push(a.join(" "));
            Ok(String::new())
        };
        assert_eq!(add_bridge(new), Ok(true));
        assert_eq!(calls.borrow().len(), 1);
        // Both refused: one error naming both answers.
        let e = add_bridge(|_| Err("no daemon".to_string())).unwrap_err();
        assert!(e.contains("add-br failed: no daemon (and without"), "{e}");
    }
}
