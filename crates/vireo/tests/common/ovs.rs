//! Open vSwitch 3.1 as a peer for the tests: its own `ovsdb-server` and `ovs-vswitchd`
//! (userspace datapath) inside a test's network namespace, with a private database, sockets
//! and log in a directory of the test. Used by the tunnel interop test and the OpenFlow
//! capture comparison.
use super::host::{must, Bg, Ns};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Open vSwitch 3.1 with its userspace (netdev) datapath, run inside `ns`: `ovsdb-server` and
/// `ovs-vswitchd` with a private database and sockets in `dir`, killed on drop.
pub struct Ovs {
    _db: Bg,
    _vswitchd: Bg,
    ns: String,
    dir: std::path::PathBuf,
}

impl Ovs {
    pub fn start(ns: &Ns, dir: &std::path::Path) -> Ovs {
        let d = dir.display().to_string();
        must(&[
            "ovsdb-tool",
            "create",
            &format!("{d}/conf.db"),
            "/usr/share/openvswitch/vswitch.ovsschema",
        ]);
        let spawn = |args: Vec<String>| {
            let v = ns.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>());
            Bg(Command::new(&v[0])
                .args(&v[1..])
                .env("OVS_RUNDIR", &d)
                .env("OVS_LOGDIR", &d)
                .env("OVS_DBDIR", &d)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap())
        };
        let db = spawn(
            [
                "ovsdb-server".to_string(),
                format!("{d}/conf.db"),
                format!("--remote=punix:{d}/db.sock"),
                format!("--unixctl={d}/ovsdb.ctl"),
                format!("--pidfile={d}/ovsdb.pid"),
            ]
            .to_vec(),
        );
        let end = Instant::now() + Duration::from_secs(10);
        while !dir.join("db.sock").exists() {
            assert!(Instant::now() < end, "ovsdb-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let vswitchd = spawn(
            [
                "ovs-vswitchd".to_string(),
                format!("unix:{d}/db.sock"),
                format!("--unixctl={d}/vs.ctl"),
                format!("--pidfile={d}/vs.pid"),
                format!("--log-file={d}/vs.log"),
            ]
            .to_vec(),
        );
        Ovs {
            _db: db,
            _vswitchd: vswitchd,
            ns: ns.name.clone(),
            dir: dir.to_path_buf(),
        }
    }

    /// Adds bridge `br` on OVS's userspace datapath (`datapath_type=netdev`).
    pub fn add_netdev_br(&self, br: &str) {
        self.vsctl(&[
            "add-br",
            br,
            "--",
            "set",
            "bridge",
            br,
            "datapath_type=netdev",
        ]);
    }

    pub fn vsctl(&self, args: &[&str]) {
        let db = format!("--db=unix:{}/db.sock", self.dir.display());
        let mut a = vec![
            "ip",
            "netns",
            "exec",
            &self.ns,
            "ovs-vsctl",
            &db,
            "--timeout=10",
        ];
        a.extend_from_slice(args);
        must(&a);
    }

    /// `ovs-appctl ARGS` against this `ovs-vswitchd`: its output, or what went wrong (for
    /// assertion messages as much as for checks).
    pub fn appctl(&self, args: &[&str]) -> String {
        let target = format!("--target={}/vs.ctl", self.dir.display());
        let mut a = vec!["ip", "netns", "exec", &self.ns, "ovs-appctl", &target];
        a.extend_from_slice(args);
        match Command::new(a[0]).args(&a[1..]).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("ovs-appctl: {e}"),
        }
    }

    /// The last `lines` lines of `ovs-vswitchd`'s log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("vs.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}
