//! The switches of the kernel-port benchmark: Vireo (vireod with `af-packet`, `af-xdp` or
//! `tap` ports; `vireo-busy` is the same with `VIREO_PMD_IDLE_SLEEP_US=0`: a PMD that never
//! sleeps when idle, as OVS's do), OVS 3.1's userspace datapath (Debian's plain `ovs-vswitchd`, bridge
//! `datapath_type=netdev`, interfaces `system`, `afxdp`, `tap`; for the `:vu:` rows, whose
//! second port is vhost-user, Debian's `ovs-vswitchd-dpdk` with `afxdp` and
//! `dpdkvhostuserclient`), the Linux bridge, and `none`
//! (the generator alone over one veth pair: its ceiling). Each is pinned to the switch core
//! and stops completely.
//!
//! Threads: vireo-bench's main thread.
use crate::contender::add_bridge;
use crate::kernel::{ip, KScenario, KSwitch, PortKind};
use crate::parse::{ovs_thread_stats, vireo_pmd_stats, PmdCycles};
use crate::proc::{command, kill_pidfile, run, wait_for_path, which, Proc};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn p2p(a: &str, b: &str) -> String {
    format!("in_port={a},actions=output:{b}\nin_port={b},actions=output:{a}\n")
}

/// The rules of a scenario: p2p, and for `flows` scenarios a higher-priority drop rule on
/// one IPv4 source no frame has, so every megaflow matches the source address exactly (one
/// megaflow per generator flow, as a real rule set with per-address rules gives).
/// `:vu:N` rows do the same (their flows differ in the IPv4 source only); OVS's address
/// prefix tracking, which would match only the source's first bit, is turned off for them
/// ([`OvsNetdev`]).
fn rules(sc: &KScenario, a: &str, b: &str) -> String {
    let mut r = p2p(a, b);
    if sc.flows || sc.vu.is_some() {
        r.push_str("priority=40000,ip,nw_src=192.0.2.1,actions=drop\n");
    }
    r
}

/// vireod on the switch core, two kernel ports and two p2p rules.
pub struct VireoK {
    core: usize,
    /// `vireo-busy`: the PMD never sleeps.
    busy: bool,
    /// The name in results: `vireo`, `vireo-busy`, or `vireo@DIR` for another build.
    pub label: &'static str,
    bin_dir: PathBuf,
    proc: Option<Proc>,
    dir: Option<PathBuf>,
}

impl VireoK {
    /// vireod and vireoctl from `bin_dir`.
    pub fn new(core: usize, bin_dir: PathBuf) -> VireoK {
        VireoK {
            core,
            busy: false,
            label: "vireo",
            bin_dir,
            proc: None,
            dir: None,
        }
    }

    /// [`VireoK::new`] whose PMD never sleeps when idle (`vireo-busy`).
    pub fn busy(core: usize, bin_dir: PathBuf) -> VireoK {
        VireoK {
            busy: true,
            label: "vireo-busy",
            ..VireoK::new(core, bin_dir)
        }
    }

    fn ctl(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        run(Command::new(self.bin_dir.join("vireoctl"))
            .arg("--run-dir")
            .arg(dir)
            .args(args))
    }
}

impl KSwitch for VireoK {
    fn name(&self) -> &'static str {
        self.label
    }
    fn check(&self, _: &KScenario) -> Result<(), String> {
        for b in ["vireod", "vireoctl"] {
            if !self.bin_dir.join(b).is_file() {
                return Err(format!("{b} not found in {}", self.bin_dir.display()));
            }
        }
        Ok(())
    }
    fn start(&mut self, dir: &Path, sc: &KScenario, host: &[String; 2]) -> Result<(), String> {
        let kind = sc.kind;
        let mut cmd = command("taskset");
        cmd.args(["-c", &self.core.to_string()])
            .arg(self.bin_dir.join("vireod"))
            .arg("--run-dir")
            .arg(dir)
            .args(["--pmd-cores", &self.core.to_string()]);
        if self.busy {
            cmd.env("VIREO_PMD_IDLE_SLEEP_US", "0");
        }
        self.proc = Some(Proc::spawn("vireod", &mut cmd, &dir.join("vireod.log"))?);
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
        let ty = format!("type={}", kind.name());
        let mut names = Vec::new();
        for (i, h) in host.iter().enumerate() {
            if i == 1 && sc.vu.is_some() {
                // `:vu:`: the second port is a vhost-user client of the sink at `h`.
                let path = format!("path={h}");
                self.ctl(
                    dir,
                    &["add-port", "br0", "vu1", "type=vhost-user-client", &path],
                )?;
                names.push("vu1".to_string());
                continue;
            }
            let ifname = format!("ifname={h}");
            let name = match kind {
                PortKind::Tap => h.clone(),
                _ => format!("p{i}"),
            };
            let mut a = vec!["add-port", "br0", name.as_str(), ty.as_str()];
            if kind != PortKind::Tap {
                a.push(&ifname);
            }
            if sc.marks {
                a.push("xdp-mark=on");
            }
            self.ctl(dir, &a)?;
            names.push(name);
        }
        let _ = self.ctl(dir, &["del-flows", "br0"]);
        let rules = dir.join("rules.txt");
        std::fs::write(&rules, self::rules(sc, &names[0], &names[1])).map_err(|e| e.to_string())?;
        self.ctl(dir, &["add-flows", "br0", &rules.display().to_string()])?;
        Ok(())
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
        vireo_pmd_stats(&out)
    }
    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }
    fn stop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::write(
                d.join("port-stats.json"),
                self.ctl(d, &["--json", "port-stats"]).unwrap_or_default(),
            );
        }
        if let Some(mut p) = self.proc.take() {
            p.stop(Duration::from_secs(10));
        }
        self.dir = None;
    }
}

/// Debian's plain (non-DPDK) ovs-vswitchd: the userspace datapath with kernel ports.
pub const OVS_NETDEV: &str = "/usr/sbin/ovs-vswitchd";

/// OVS's userspace datapath in a private run directory, everything on the switch core.
pub struct OvsNetdev {
    core: usize,
    dir: Option<PathBuf>,
    /// Running `ovs-vswitchd-dpdk` (`:vu:` rows).
    dpdk: bool,
}

impl OvsNetdev {
    /// PMD mask and the whole process on `core`.
    pub fn new(core: usize) -> OvsNetdev {
        OvsNetdev {
            core,
            dir: None,
            dpdk: false,
        }
    }

    fn cmd(dir: &Path, bin: &str) -> Command {
        let mut c = Command::new(bin);
        for k in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            c.env(k, dir);
        }
        c
    }

    fn vsctl(dir: &Path, args: &[&str]) -> Result<String, String> {
        let db = format!("--db=unix:{}", dir.join("db.sock").display());
        run(Self::cmd(dir, "ovs-vsctl")
            .arg(db)
            .arg("--timeout=20")
            .args(args))
    }

    fn appctl(dir: &Path, args: &[&str]) -> Result<String, String> {
        let pid = std::fs::read_to_string(dir.join("vswitchd.pid")).map_err(|e| e.to_string())?;
        let mut ctl = dir.join(format!("ovs-vswitchd.{}.ctl", pid.trim()));
        if !ctl.exists() {
            ctl = dir.join(format!("ovs-vswitchd-dpdk.{}.ctl", pid.trim()));
        }
        run(Self::cmd(dir, "ovs-appctl").arg("-t").arg(ctl).args(args))
    }

    /// OVS's name of the kind.
    pub fn iface_type(kind: PortKind) -> &'static str {
        match kind {
            PortKind::AfPacket => "system",
            PortKind::AfXdp => "afxdp",
            PortKind::Tap => "tap",
        }
    }
}

impl KSwitch for OvsNetdev {
    fn name(&self) -> &'static str {
        "ovs-netdev"
    }
    fn check(&self, sc: &KScenario) -> Result<(), String> {
        if sc.marks {
            return Err("OVS has no XDP flow marks".into());
        }
        if !Path::new(OVS_NETDEV).is_file() {
            return Err(format!(
                "{OVS_NETDEV} not found (Debian openvswitch-switch)"
            ));
        }
        if sc.vu.is_some() && !Path::new(crate::contender::OVS_VSWITCHD).is_file() {
            return Err(format!(
                "{} not found (Debian openvswitch-switch-dpdk)",
                crate::contender::OVS_VSWITCHD
            ));
        }
        Ok(())
    }
    fn start(&mut self, dir: &Path, sc: &KScenario, host: &[String; 2]) -> Result<(), String> {
        let kind = sc.kind;
        self.dir = Some(dir.to_path_buf());
        let d = dir.display();
        let db = dir.join("conf.db");
        run(Self::cmd(dir, "ovsdb-tool")
            .arg("create")
            .arg(&db)
            .arg("/usr/share/openvswitch/vswitch.ovsschema"))?;
        run(Self::cmd(dir, "ovsdb-server")
            .arg(format!("--remote=punix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/ovsdb.pid"))
            .arg("--detach")
            .arg(format!("--log-file={d}/ovsdb.log"))
            .arg(&db))?;
        Self::vsctl(dir, &["--no-wait", "init"])?;
        let mask = format!("0x{:x}", 1u64 << self.core);
        let pmd = format!("other_config:pmd-cpu-mask={mask}");
        Self::vsctl(dir, &["--no-wait", "set", "Open_vSwitch", ".", &pmd])?;
        self.dpdk = sc.vu.is_some();
        if self.dpdk {
            let lcore = format!("other_config:dpdk-lcore-mask={mask}");
            Self::vsctl(
                dir,
                &[
                    "--no-wait",
                    "set",
                    "Open_vSwitch",
                    ".",
                    "other_config:dpdk-init=true",
                    &lcore,
                    "other_config:dpdk-socket-mem=1024",
                    "other_config:dpdk-extra=--no-pci --file-prefix=vbovsk",
                ],
            )?;
        }
        let bin = if self.dpdk {
            crate::contender::OVS_VSWITCHD
        } else {
            OVS_NETDEV
        };
        let mut c = command("taskset");
        c.args(["-c", &self.core.to_string(), bin])
            .arg(format!("unix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/vswitchd.pid"))
            .arg("--detach")
            .arg(format!("--log-file={d}/vswitchd.log"));
        for k in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            c.env(k, dir);
        }
        run(&mut c)?;
        Self::vsctl(
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
        if sc.vu.is_some() {
            // One megaflow per source, as Vireo makes: no address prefix tracking (`none`;
            // an empty set means the default, nw_src and nw_dst). With it OVS un-wildcards
            // only nw_src's first bit (`src=10.0.0.0/128.0.0.0`: one megaflow for all flows).
            Self::vsctl(
                dir,
                &[
                    "--",
                    "--id=@ft",
                    "create",
                    "Flow_Table",
                    "prefixes=none",
                    "--",
                    "set",
                    "Bridge",
                    "br0",
                    "flow_tables:0=@ft",
                ],
            )?;
        }
        for (i, h) in host.iter().enumerate() {
            let ofp = format!("ofport_request={}", i + 1);
            if i == 1 && sc.vu.is_some() {
                let path = format!("options:vhost-server-path={h}");
                Self::vsctl(
                    dir,
                    &[
                        "add-port",
                        "br0",
                        "vu1",
                        "--",
                        "set",
                        "Interface",
                        "vu1",
                        "type=dpdkvhostuserclient",
                        &path,
                        &ofp,
                    ],
                )?;
                continue;
            }
            let ty = format!("type={}", Self::iface_type(kind));
            Self::vsctl(
                dir,
                &["add-port", "br0", h, "--", "set", "Interface", h, &ty, &ofp],
            )?;
            let st = Self::vsctl(dir, &["get", "Interface", h, "error"]).unwrap_or_default();
            if st.trim() != "[]" && !st.trim().is_empty() {
                return Err(format!("OVS refused {h} ({ty}): {}", st.trim()));
            }
        }
        // The bridge's OpenFlow socket comes once vswitchd has read the database (later with
        // DPDK initialising).
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while let Err(e) = run(Self::cmd(dir, "ovs-ofctl").args(["del-flows", "br0"])) {
            if std::time::Instant::now() > end {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let rules = dir.join("rules.txt");
        std::fs::write(&rules, self::rules(sc, "1", "2")).map_err(|e| e.to_string())?;
        run(Self::cmd(dir, "ovs-ofctl")
            .args(["add-flows", "br0"])
            .arg(&rules))?;
        Ok(())
    }
    fn clear_stats(&mut self) {
        if let Some(d) = &self.dir {
            let _ = Self::appctl(d, &["dpif-netdev/pmd-stats-clear"]);
        }
    }
    fn pmd_cycles(&mut self) -> Option<PmdCycles> {
        let d = self.dir.as_ref()?;
        let out = Self::appctl(d, &["dpif-netdev/pmd-stats-show"]).ok()?;
        let _ = std::fs::write(d.join("pmd-stats.txt"), &out);
        ovs_thread_stats(&out, true)
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
            let _ = Self::appctl(&d, &["exit", "--cleanup"]);
            kill_pidfile(&d.join("vswitchd.pid"), Duration::from_secs(10));
            kill_pidfile(&d.join("ovsdb.pid"), Duration::from_secs(5));
        }
    }
}

impl Drop for OvsNetdev {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The Linux bridge on the two host veth ends (it forwards in softirq on whichever core
/// sent the frame: here the generator's).
pub struct LinuxBridge {
    name: Option<String>,
}

impl LinuxBridge {
    /// Not started.
    pub fn new() -> LinuxBridge {
        LinuxBridge { name: None }
    }
}

impl Default for LinuxBridge {
    fn default() -> Self {
        Self::new()
    }
}

impl KSwitch for LinuxBridge {
    fn name(&self) -> &'static str {
        "linux-bridge"
    }
    fn check(&self, sc: &KScenario) -> Result<(), String> {
        match sc.kind {
            PortKind::AfPacket if !sc.marks && !sc.flows => Ok(()),
            _ => Err("the Linux bridge has no port kinds: it runs in the af-packet rows".into()),
        }
    }
    fn start(&mut self, _: &Path, _: &KScenario, host: &[String; 2]) -> Result<(), String> {
        let br = format!("kb{}br", std::process::id());
        let _ = ip(&["link", "del", &br]);
        ip(&["link", "add", &br, "type", "bridge", "stp_state", "0"])?;
        self.name = Some(br.clone());
        for h in host {
            ip(&["link", "set", h, "master", &br])?;
        }
        ip(&["link", "set", &br, "up"])?;
        Ok(())
    }
    fn stop(&mut self) {
        if let Some(b) = self.name.take() {
            let _ = ip(&["link", "del", &b]);
        }
    }
}

impl Drop for LinuxBridge {
    fn drop(&mut self) {
        self.stop();
    }
}

/// No switch: the generator over one veth pair from namespace to namespace.
pub struct NoSwitch;

impl KSwitch for NoSwitch {
    fn name(&self) -> &'static str {
        "none"
    }
    fn check(&self, sc: &KScenario) -> Result<(), String> {
        match sc.kind {
            PortKind::AfPacket if !sc.marks && !sc.flows => Ok(()),
            _ => Err("the generator's ceiling is measured once, in the af-packet rows".into()),
        }
    }
    fn direct(&self) -> bool {
        true
    }
    fn start(&mut self, _: &Path, _: &KScenario, _: &[String; 2]) -> Result<(), String> {
        Ok(())
    }
    fn stop(&mut self) {}
}

/// Whether the tools the generators need are here.
pub fn generators_ok() -> Result<(), String> {
    for (b, pkg) in [
        (crate::testpmd::TESTPMD, "dpdk"),
        ("iperf3", "iperf3"),
        ("ethtool", "ethtool"),
        ("ip", "iproute2"),
    ] {
        if which(b).is_none() {
            return Err(format!("{b} not found (Debian {pkg})"));
        }
    }
    Ok(())
}
