//! Network namespaces joined to the host by veth pairs, for tests of kernel-facing ports
//! (AF_XDP). Each pair is removed on drop, also when the test fails. Test code only; runs on
//! the calling test's thread.
use std::process::{Command, Output};

/// True if `ip` (iproute2) runs here; else [`crate::missing_peer`].
pub fn have_ip() -> bool {
    let ok = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    ok || crate::missing_peer("ip", "iproute2")
}

/// Runs `cmd args...`, panicking with its output if it fails.
pub fn must(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .expect("start command");
    assert!(
        o.status.success(),
        "{cmd} {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A namespace `ns` holding `ns_if` (with `addr`, a CIDR), whose veth peer `host_if` stays
/// in the caller's namespace, up, without an address. Both removed on drop.
pub struct NsVeth {
    /// Namespace name.
    pub ns: String,
    /// The host side of the veth pair.
    pub host_if: String,
    /// The namespace side.
    pub ns_if: String,
}

impl NsVeth {
    /// Creates the namespace and the pair (removing leftovers of the same names first).
    /// `queues` sets the veth's rx/tx queue counts.
    pub fn new(ns: &str, host_if: &str, ns_if: &str, addr: &str, queues: u32) -> NsVeth {
        let _ = Command::new("ip").args(["netns", "del", ns]).output();
        let _ = Command::new("ip").args(["link", "del", host_if]).output();
        let me = NsVeth {
            ns: ns.into(),
            host_if: host_if.into(),
            ns_if: ns_if.into(),
        };
        let q = queues.to_string();
        must("ip", &["netns", "add", ns]);
        must(
            "ip",
            &[
                "link",
                "add",
                host_if,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                ns_if,
                "netns",
                ns,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
            ],
        );
        must("ip", &["link", "set", host_if, "up"]);
        me.exec_must(&["ip", "link", "set", "lo", "up"]);
        me.exec_must(&["ip", "link", "set", ns_if, "up"]);
        me.exec_must(&["ip", "addr", "add", addr, "dev", ns_if]);
        me
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// [`NsVeth::exec`] that must succeed; its standard output.
    pub fn exec_must(&self, args: &[&str]) -> String {
        let mut a = vec!["netns", "exec", &self.ns];
        a.extend_from_slice(args);
        must("ip", &a)
    }

    /// A `Command` running `program` inside the namespace (for background processes).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }

    /// `ip link show` of the host side (to look for an attached XDP program).
    pub fn host_link(&self) -> String {
        must("ip", &["link", "show", "dev", &self.host_if])
    }
}

impl Drop for NsVeth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}
