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
