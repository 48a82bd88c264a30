//! The harness of the upgrade tests (`upgrade.rs`, `upgrade_ports.rs`): vireod started and
//! upgraded from the test, a testpmd io loop through a server-mode and a client-mode port, and
//! the checks of connections, sockets and packets lost.
#![allow(dead_code)]

use crate::common::peers::{missing, Testpmd, VirtioUser};
use crate::common::wait_until;
use crate::common::VIREOD;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// testpmd busy-polls core 1 and vireod's PMD core 0: one test at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub const MAC0: &str = "00:00:00:00:00:01";
pub const MAC1: &str = "00:00:00:00:00:02";

pub fn alive(pid: i32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

/// vireod as the test started it, and whichever vireod replaced it since (killed on drop, by
/// the pid in its run directory).
pub struct Vireod {
    pub first: Child,
    pub run: PathBuf,
    pub log: PathBuf,
}

impl Vireod {
    pub fn start(dir: &Path) -> Vireod {
        Self::start_env(dir, &[])
    }

    /// [`Vireod::start`] with environment variables (inherited by every upgrade).
    pub fn start_env(dir: &Path, env: &[(&str, &str)]) -> Vireod {
        let run = dir.join("run");
        let log_path = dir.join("vireod.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let first = Command::new(VIREOD)
            .arg("--run-dir")
            .arg(&run)
            .args(["--pmd-cores", "0"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vireod");
        let d = Vireod {
            first,
            run,
            log: log_path,
        };
        assert!(
            wait_until(Duration::from_secs(10), || d.ctl(&["version"]).code == 0),
            "vireod did not start"
        );
        d
    }

    /// The end of the log every vireod of the test wrote.
    pub fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn ctl(&self, args: &[&str]) -> crate::common::Out {
        crate::common::ctl(&self.run, args)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert_eq!(o.code, 0, "vireoctl {args:?}: {}", o.stderr);
        o.stdout
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    /// The pid in the run directory's lock file.
    pub fn pid(&self) -> i32 {
        std::fs::read_to_string(self.run.join("vireod.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Upgrades to the same binary; checks the pids and returns the new one.
    pub fn upgrade(&mut self) -> i32 {
        self.upgrade_with(&[])
    }

    /// [`Vireod::upgrade`] with more arguments (`--state-version N`).
    pub fn upgrade_with(&mut self, extra: &[&str]) -> i32 {
        let old = self.pid();
        let mut args = vec!["upgrade"];
        args.extend_from_slice(extra);
        let v = self.json(&args);
        let new = v["pid"].as_i64().unwrap() as i32;
        // vireod's own measure of the switch-over: from the old PMDs' stop to the new ones'
        // start (CLOCK_MONOTONIC in both).
        let gap = v["switch_over_us"].as_u64();
        assert!(
            gap.is_some_and(|g| g < 30_000_000),
            "no switch-over gap: {v}"
        );
        eprintln!("upgrade {extra:?}: switch-over gap {} us", gap.unwrap_or(0));
        assert_eq!(v["old_pid"].as_i64().unwrap() as i32, old, "{v}");
        assert_ne!(new, old);
        assert_eq!(self.pid(), new, "the run directory names the new vireod");
        if old == self.first.id() as i32 {
            let st = self.first.wait().unwrap();
            assert_eq!(st.code(), Some(0), "the old vireod exits cleanly");
        }
        assert!(
            wait_until(Duration::from_secs(5), || !alive(old)),
            "old vireod {old} still running"
        );
        new
    }

    pub fn port(&self, name: &str) -> Value {
        let show = self.json(&["show"]);
        for b in show["bridges"].as_array().unwrap() {
            for p in b["ports"].as_array().unwrap() {
                if p["name"] == name {
                    return p.clone();
                }
            }
        }
        panic!("no port {name} in {show}");
    }

    pub fn rx(&self, port: &str) -> u64 {
        self.json(&["port-stats", port])[0]["rx_packets"]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Vireod {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.run.join("vireod.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                if pid != self.first.id() as i32 && alive(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = self.first.kill();
        let _ = self.first.wait();
    }
}

/// The number after `key` in a dump-flows line.
pub fn field(line: &str, key: &str) -> u64 {
    let rest = &line[line.find(key).unwrap() + key.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The bridge's rules without their statistics.
pub fn rules(d: &Vireod) -> BTreeSet<String> {
    d.json(&["dump-flows", "br0"])
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f.as_str()
                .unwrap()
                .split(", ")
                .filter(|p| {
                    !p.starts_with("duration=")
                        && !p.starts_with("n_packets=")
                        && !p.starts_with("n_bytes=")
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

pub fn skip() -> bool {
    if let Some(m) = missing("dpdk-testpmd") {
        eprintln!("{m}");
        return true;
    }
    false
}

/// vireod with bridge br0: `vm1` a server-mode port (RUN/vm1.sock), `vm2` a client-mode port
/// (testpmd listens on DIR/c2.sock), port-to-port rules between them (live state: the store
/// does not hold rules); testpmd in io mode with 4 bursts of 32 packets per port circulating.
pub struct Loop {
    pub tp: Testpmd,
    pub d: Vireod,
    pub _dir: tempfile::TempDir,
}

pub const PORTS: [&str; 2] = ["vm1", "vm2"];
pub const METER: &str = "meter=1,pktps,bands=type=drop,rate=100000000";
pub const RULES: [&str; 2] = [
    "priority=100,in_port=vm1 actions=meter:1,output:vm2",
    "priority=100,in_port=vm2 actions=output:vm1",
];

pub fn io_loop(name: &str) -> Loop {
    io_loop_with(name, false, "")
}

/// [`io_loop`]; `both_client`: vm1 is a client-mode port too (testpmd listens on DIR/c1.sock);
/// `vdev` is added to both virtio-user devices (e.g. `,packed_vq=1`).
pub fn io_loop_with(name: &str, both_client: bool, vdev: &str) -> Loop {
    let dir = tempfile::tempdir().unwrap();
    let d = Vireod::start(dir.path());
    let (c1, c2) = (dir.path().join("c1.sock"), dir.path().join("c2.sock"));
    d.ok(&["add-br", "br0", "internal=false"]);
    if both_client {
        d.ok(&[
            "add-port",
            "br0",
            "vm1",
            "type=vhost-user-client",
            &format!("path={}", c1.display()),
            "reconnect-ms=100",
        ]);
    } else {
        d.ok(&["add-port", "br0", "vm1", "type=vhost-user"]);
    }
    d.ok(&[
        "add-port",
        "br0",
        "vm2",
        "type=vhost-user-client",
        &format!("path={}", c2.display()),
        "reconnect-ms=100",
    ]);
    d.ok(&["add-meter", "br0", METER]);
    for r in RULES {
        d.ok(&["add-flow", "br0", r]);
    }
    let ports = [
        if both_client {
            VirtioUser {
                path: c1,
                mac: MAC0.into(),
                extra: format!("server=1{vdev}"),
            }
        } else {
            VirtioUser {
                path: d.run.join("vm1.sock"),
                mac: MAC0.into(),
                extra: vdev.trim_start_matches(',').to_string(),
            }
        },
        VirtioUser {
            path: c2,
            mac: MAC1.into(),
            extra: format!("server=1{vdev}"),
        },
    ];
    let prefix = format!("vireo-upg-{name}-{}", std::process::id());
    let mut tp = Testpmd::start(&prefix, &ports, &["--forward-mode=io"]);
    tp.cmd("show config fwd");
    assert!(
        tp.out
            .wait_for("packet forwarding - ports=", Duration::from_secs(60)),
        "testpmd did not start:\n{}",
        tp.out.text()
    );
    assert!(
        wait_until(Duration::from_secs(30), || PORTS
            .iter()
            .all(|p| d.port(p)["link"] == "up")),
        "links never came up: {}",
        d.ok(&["show"])
    );
    tp.cmd("start tx_first 4");
    let l = Loop { tp, d, _dir: dir };
    assert!(
        wait_until(Duration::from_secs(20), || l.d.rx("vm1") > 20_000
            && l.d.rx("vm2") > 20_000),
        "no traffic: {}",
        l.d.ok(&["port-stats"])
    );
    l
}

impl Loop {
    /// The socket inodes testpmd holds (a reconnect would make new ones).
    pub fn sockets(&self) -> BTreeSet<String> {
        std::fs::read_dir(format!("/proc/{}/fd", self.tp.pid()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|l| l.to_string_lossy().into_owned())
            .filter(|l| l.starts_with("socket:"))
            .collect()
    }

    /// What `show` says of each port's connection, which an upgrade must not change.
    pub fn conn_view(&self) -> Vec<Value> {
        PORTS
            .iter()
            .map(|p| {
                let v = self.d.port(p);
                let st = &v["status"];
                serde_json::json!({
                    "link": v["link"], "features": st["features"],
                    "protocol_features": st["protocol_features"],
                    "connections": st["connections"], "mode": st["mode"],
                    "broken_queues": st["broken_queues"],
                })
            })
            .collect()
    }

    /// Packets flow through both ports (1,000 more each; within 20 s, for a machine whose
    /// core 0 another session's real-time poller may be taking).
    pub fn assert_flowing(&self, what: &str) {
        let (a, b) = (self.d.rx("vm1"), self.d.rx("vm2"));
        assert!(
            wait_until(Duration::from_secs(20), || self.d.rx("vm1") > a + 1_000
                && self.d.rx("vm2") > b + 1_000),
            "traffic stopped {what}: {}\n{}\n{}",
            self.d.ok(&["port-stats"]),
            self.d.ok(&["show"]),
            self.d.log_tail()
        );
    }

    /// Stops the loop, lets testpmd read whatever is still in its rx rings, and returns the
    /// packets lost: testpmd sent them and never got them back.
    pub fn drain_and_count_lost(&mut self) -> (u64, Vec<(u64, u64)>) {
        drain_and_count_lost(&mut self.tp)
    }
}

/// Stops testpmd's io loop, lets it read whatever is still in its rx rings, and returns the
/// packets lost (sent and never received back) with each port's (rx, tx) totals.
pub fn drain_and_count_lost(tp: &mut Testpmd) -> (u64, Vec<(u64, u64)>) {
    tp.cmd("stop");
    std::thread::sleep(Duration::from_millis(500));
    tp.cmd("set fwd rxonly");
    tp.cmd("start");
    std::thread::sleep(Duration::from_millis(700));
    tp.cmd("stop");
    std::thread::sleep(Duration::from_millis(300));
    let mut st = tp.port_stats();
    for _ in 0..3 {
        if st.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        st = tp.port_stats();
    }
    assert_eq!(st.len(), 2, "{}", tp.out.text());
    let tx: u64 = st.iter().map(|s| s.1).sum();
    let rx: u64 = st.iter().map(|s| s.0).sum();
    (tx.saturating_sub(rx), st)
}

/// The bound on packets lost, whatever the number of upgrades. Each switch-over holds the PMDs
/// off the guests' tx rings, waits for every PMD to send what it had taken, and only then
/// stops the rings; the new process installs every ring before it lets PMDs take packets. So
/// nothing should be lost (measured: 0); one burst is the margin.
pub const LOST_BOUND: u64 = 32;
