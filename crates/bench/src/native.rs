//! The underlay of the native-tunnel scenarios (`nvxlan:SIZE`, `ngeneve:SIZE`) for Vireo:
//! the bridge `tunv` whose internal port (a kernel tap) holds both tunnel addresses,
//! 10.98.0.1 (`ta`) and 10.98.0.2 (`tb`), and whose two `af-packet` ports are the ends of one
//! veth pair (`vbtunA`, `vbtunB`). Its flows send what its internal port sends (the
//! `tnl_push`ed packets) into `vbtunA` and what comes out of `vbtunB` to the internal port,
//! where it is `tnl_pop`ped: each packet is encapsulated once and decapsulated once in vireod,
//! with a veth crossing (kernel work on the PMD's core) in between where OVS-DPDK has a patch
//! port. The neighbour entries (both addresses at the tap's own MAC) are learned before the
//! traffic starts, from ARP requests the kernel sends from each address through the bridge:
//! a closed-loop generator's first burst would otherwise be dropped on the neighbour miss.
//!
//! Threads: vireo-bench's main thread.
use crate::proc::run;
use std::process::Command;
use std::time::{Duration, Instant};

/// The underlay bridge (and its internal port).
pub const BRIDGE: &str = "tunv";
/// `ta`'s address.
pub const ADDR_A: &str = "10.98.0.1";
/// `tb`'s address.
pub const ADDR_B: &str = "10.98.0.2";
/// The veth pair's ends.
const VETH: [&str; 2] = ["vbtunA", "vbtunB"];

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

/// Makes the veth pair and the underlay bridge with `ctl` (vireoctl against the daemon),
/// then waits until vireod has both addresses as connected routes and both neighbours.
pub fn setup(ctl: impl Fn(&[&str]) -> Result<String, String>) -> Result<(), String> {
    teardown();
    ip(&[
        "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1],
    ])?;
    for v in VETH {
        // Vireo's ports, not host interfaces: the host must not answer ARP on them.
        ip(&["link", "set", "dev", v, "arp", "off", "up"])?;
    }
    ctl(&["add-br", BRIDGE])?;
    for (name, v) in [("la", VETH[0]), ("lb", VETH[1])] {
        let ifname = format!("ifname={v}");
        ctl(&[
            "add-port",
            BRIDGE,
            name,
            "type=af-packet",
            &ifname,
            "offloads=false",
        ])?;
    }
    for a in [ADDR_A, ADDR_B] {
        ip(&["addr", "add", &format!("{a}/24"), "dev", BRIDGE])?;
    }
    ctl(&["del-flows", BRIDGE])?;
    ctl(&["add-flow", BRIDGE, "in_port=LOCAL,actions=output:la"])?;
    ctl(&["add-flow", BRIDGE, "in_port=lb,actions=output:LOCAL"])?;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        // ARP requests from each address (for addresses nobody has): vireod learns the
        // sender, the tap's own MAC, from the frames its internal port sends.
        for (src, dst) in [(ADDR_A, "10.98.0.201"), (ADDR_B, "10.98.0.202")] {
            let _ = run(Command::new("ping").args(["-c", "1", "-W", "1", "-I", src, dst]));
        }
        let neigh = ctl(&["tnl/neigh/show"])?;
        let routes = ctl(&["route/show"])?;
        let have = |s: &str, what: &str| s.lines().any(|l| l.starts_with(&format!("{what} ")));
        if have(&neigh, ADDR_A) && have(&neigh, ADDR_B) && routes.contains(BRIDGE) {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!(
                "native underlay not ready: routes {routes:?}, neighbours {neigh:?}"
            ));
        }
    }
}

/// Removes the veth pair (the tap goes with vireod).
pub fn teardown() {
    let _ = ip(&["link", "del", VETH[0]]);
}
