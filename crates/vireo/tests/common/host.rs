//! Commands on the host for the kernel-port and tunnel tests: run a program, insist it
//! succeeds, and check that this host can make namespaces and veths.
use std::process::{Command, Output, Stdio};

/// Runs `args` (program first) and returns what it printed.
pub fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e}"))
}

/// Runs `args` and returns its stdout; fails the test if it did not succeed.
pub fn must(args: &[&str]) -> String {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// True if this host can make namespaces and veths (root, iproute2); otherwise a skip that
/// fails under `VIREO_REQUIRE_PEERS=1`.
pub fn kernel_ok() -> bool {
    if !nix::unistd::geteuid().is_root() {
        return testkit::missing_peer("root (network namespaces, veth, tun)", "sudo");
    }
    testkit::require_peer("ip", "iproute2")
}

/// A network namespace with one veth pair: `host_if` stays in the root namespace for Vireo,
/// `ns_if` is inside. Deleted on drop. Each test file names its own (`Ns::new` there).
pub struct Ns {
    pub name: String,
    pub host_if: String,
    pub ns_if: String,
}

impl Ns {
    /// Namespace `PREFIX-TEST-SIDE-PID` with veth `PREFIXTESTSIDEPID` (the namespace end with
    /// SIDE in upper case), the namespace end and `lo` up; anything left by an earlier run
    /// of the same name is removed first.
    pub fn create(prefix: &str, test: char, side: char) -> Ns {
        let pid = std::process::id();
        let ns = Ns {
            name: format!("{prefix}-{test}-{side}-{pid}"),
            host_if: format!("{prefix}{test}{side}{pid}"),
            ns_if: format!("{prefix}{test}{}{pid}", side.to_ascii_uppercase()),
        };
        let _ = sh(&["ip", "netns", "del", &ns.name]);
        let _ = sh(&["ip", "link", "del", &ns.host_if]);
        must(&["ip", "netns", "add", &ns.name]);
        ns.add_veth();
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// (Re)creates the veth pair, the namespace end up (no address).
    pub fn add_veth(&self) {
        must(&[
            "ip",
            "link",
            "add",
            &self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &self.ns_if,
            "netns",
            &self.name,
        ]);
        self.exec(&["ip", "link", "set", &self.ns_if, "up"]);
    }

    /// `args` run inside the namespace (`ip netns exec`).
    pub fn cmd(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = ["ip", "netns", "exec", &self.name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }

    /// Runs `args` inside; fails the test if it did not succeed.
    pub fn exec(&self, args: &[&str]) -> String {
        let v = self.cmd(args);
        let r: Vec<&str> = v.iter().map(String::as_str).collect();
        must(&r)
    }

    /// Pings `ip` from inside (one echo at a time, `extra` options added) until one is
    /// answered (MAC learning, ARP) or `secs` pass.
    pub fn ping_until(&self, ip: &str, extra: &[&str], secs: u64) -> bool {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < end {
            let mut a = vec!["ping", "-c", "1", "-W", "1"];
            a.extend_from_slice(extra);
            a.push(ip);
            if self.try_exec(&a).status.success() {
                return true;
            }
        }
        false
    }

    /// Runs `args` inside and returns what happened.
    pub fn try_exec(&self, args: &[&str]) -> Output {
        let v = self.cmd(args);
        let r: Vec<&str> = v.iter().map(String::as_str).collect();
        sh(&r)
    }

    /// Starts a one-test `iperf3` server inside (killed on drop) and gives it 500 ms to listen.
    pub fn iperf3_server(&self) -> Bg {
        let v = self.cmd(&["iperf3", "-s", "-1"]);
        let srv = Bg(Command::new(&v[0])
            .args(&v[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s"));
        std::thread::sleep(std::time::Duration::from_millis(500));
        srv
    }

    /// A 2 s iperf3 TCP test from here to `server_ip`, served from `server`: the bytes the
    /// server received (0 if the test failed).
    pub fn iperf_tcp_to(&self, server: &Ns, server_ip: &str) -> u64 {
        self.iperf_tcp(server, server_ip, false).0
    }

    /// A 2 s iperf3 TCP test between here (the client) and `server_ip`, served from `server`;
    /// `reverse`: the server sends (`-R`). The bytes received and the client's JSON report.
    pub fn iperf_tcp(&self, server: &Ns, server_ip: &str, reverse: bool) -> (u64, String) {
        let srv = server.iperf3_server();
        let mut a = vec!["timeout", "30", "iperf3", "-c", server_ip, "-t", "2", "-J"];
        if reverse {
            a.push("-R");
        }
        let out = self.try_exec(&a);
        drop(srv);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        (bytes, String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.name]);
        let _ = sh(&["ip", "link", "del", &self.host_if]);
    }
}

/// A background process, killed on drop.
pub struct Bg(pub std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (shared mappings — packet and AF_XDP rings are mapped shared from their sockets; private
/// writable bytes — buffers and UMEMs) of process `pid`, from /proc/PID/maps.
pub fn mappings(pid: u32) -> (usize, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let (mut shared, mut private) = (0, 0);
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let size =
            u64::from_str_radix(b, 16).unwrap_or(0) - u64::from_str_radix(a, 16).unwrap_or(0);
        if perms.ends_with('s') {
            shared += 1;
        } else if perms.starts_with("rw") {
            private += size;
        }
    }
    (shared, private)
}

/// Packets received of `n` sent by `ping -c n` from `ns` (parsed from ping's summary).
pub fn ping_count(ns: &Ns, ip: &str, n: u32, extra: &[&str]) -> u32 {
    let c = n.to_string();
    let mut a = vec!["ping", "-c", &c, "-i", "0.2", "-W", "2"];
    a.extend_from_slice(extra);
    a.push(ip);
    let out = String::from_utf8_lossy(&ns.try_exec(&a).stdout).into_owned();
    out.split(',')
        .find(|s| s.contains("received"))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
