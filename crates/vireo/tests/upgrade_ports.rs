//! `vireoctl upgrade` with other kinds of port: a QEMU guest pinging through upgrades, kernel
//! (`tap`, `internal`) and idle vhost-user ports coming back, `af-packet` and Geneve tunnel
//! sockets handed over under a ping flood, `af-xdp` sockets and UMEMs handed over under a ping
//! flood, packed rings surviving upgrades.
//! The harness is shared with `upgrade.rs`.
mod common;
mod upgrade_harness;

use common::peers::{Testpmd, VirtioUser};
use common::wait_until;
use std::time::Duration;
use upgrade_harness::*;

/// A real VM: QEMU (its vhost-user socket as client, Vireo listening) boots Linux and pings a
/// testpmd ICMP echo endpoint once a second through Vireo while vireod is upgraded three
/// times: every echo is answered, QEMU never reconnects (it would log about the vhost-user
/// socket and Vireo would count a second connection).
#[test]
fn qemu_guest_pings_through_upgrades() {
    use common::peers::{build_initramfs, guest_peers, Guest};
    let _g = serial();
    let Some(kernel) = guest_peers(&["dpdk-testpmd"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut d = Vireod::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    d.ok(&["add-port", "br0", "tp", "type=vhost-user"]);
    let initrd = build_initramfs(dir.path());
    let mut tp = Testpmd::start(
        &format!("vireo-upg-vm-{}", std::process::id()),
        &[VirtioUser {
            path: d.run.join("tp.sock"),
            mac: "00:00:00:00:00:0a".into(),
            extra: String::new(),
        }],
        &["--forward-mode=icmpecho"],
    );
    tp.wait_ready();
    tp.cmd("start");
    assert!(wait_until(Duration::from_secs(30), || d.port("tp")["link"] == "up"));
    let count = 20;
    let guest = Guest::boot(
        &kernel,
        &initrd,
        &d.run.join("vm.sock"),
        false,
        "52:54:00:12:34:56",
        // It stays up after the pings (vireo.wait) so that the connection can be checked.
        &format!("vireo.ip=10.0.0.1/24 vireo.ping=10.0.0.2 vireo.count={count} vireo.wait=120"),
    );
    // Wait for the first echo to come back, then upgrade during the pings.
    assert!(
        wait_until(Duration::from_secs(200), || d.port("vm")["link"] == "up"
            && tp.port_stats().first().is_some_and(|s| s.1 > 0)),
        "the guest never pinged:\n{}",
        guest.out.text()
    );
    let view = d.port("vm")["status"]["features"].clone();
    for i in 0..3 {
        std::thread::sleep(Duration::from_secs(3));
        let pid = d.upgrade();
        eprintln!("upgrade {i} during the pings: new vireod {pid}");
        let st = d.port("vm")["status"].clone();
        assert_eq!(st["connections"], 1, "QEMU reconnected: {st}");
        assert_eq!(st["features"], view, "{st}");
    }
    let done = wait_until(Duration::from_secs(120), || {
        let o = guest.out.text();
        o.contains("VIREO-PING-OK") || o.contains("VIREO-PING-FAIL")
    });
    let console = guest.out.text();
    assert!(done, "guest did not finish:\n{console}");
    assert!(console.contains("VIREO-PING-OK"), "{console}");
    let summary = format!("{count} packets transmitted, {count} packets received");
    assert!(
        console.contains(&summary),
        "echoes lost across the upgrades (want {summary:?}):\n{console}\n{}",
        d.log_tail()
    );
    let st = d.port("vm")["status"].clone();
    assert_eq!(st["connections"], 1, "QEMU reconnected: {st}");
    assert_eq!(st["features"], view, "{st}");
    assert_eq!(st["state"], "connected", "{st}");
    assert!(
        !console.to_lowercase().contains("vhost"),
        "QEMU said something about vhost-user:\n{console}"
    );
    drop(guest);
    tp.quit();
}

/// A bridge's internal port (a tap named after the bridge, unique to this test) is handed over
/// by its fd: the same interface (same ifindex) is up in the new process; a dummy port
/// survives, and so do vhost-user ports with no frontend: the server port still listens on the
/// same socket (a frontend can connect), the client port still tries to connect; a rule added
/// over OpenFlow on the handed-over management socket is still there.
#[test]
fn kernel_ports_and_idle_vhost_ports_come_back_after_an_upgrade() {
    let _g = serial();
    if !std::path::Path::new("/dev/net/tun").exists() {
        testkit::missing_peer("/dev/net/tun (tap ports)", "the kernel's tun module");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut d = Vireod::start(dir.path());
    let br = format!("vupg{}", std::process::id() % 100_000);
    let o = d.ctl(&["add-br", &br]);
    if o.code != 0 {
        // No CAP_NET_ADMIN here: the internal port cannot be made at all.
        testkit::missing_peer("CAP_NET_ADMIN for tap ports", "root");
        eprintln!("SKIPPED: {}", o.stderr);
        return;
    }
    d.ok(&["add-port", &br, "d0", "type=dummy"]);
    d.ok(&["add-port", &br, "idle1", "type=vhost-user"]);
    let nowhere = dir.path().join("nobody-listens.sock");
    d.ok(&[
        "add-port",
        &br,
        "idle2",
        "type=vhost-user-client",
        &format!("path={}", nowhere.display()),
    ]);
    let before = d.port(&br);
    assert_eq!(before["link"], "up", "{before}");
    // A rule added over OpenFlow, on the bridge's management socket.
    let mgmt = d.run.join(format!("{br}.mgmt"));
    let ofctl = testkit::have_ofctl();
    if ofctl {
        testkit::ofctl_must(&mgmt, "add-flow", &["priority=7,in_port=1,actions=drop"]);
    }
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{br}/ifindex")).unwrap();
    d.upgrade();
    assert!(
        wait_until(Duration::from_secs(10), || d.port(&br)["link"] == "up"),
        "internal port not back: {}\n{}",
        d.ok(&["show"]),
        d.log_tail()
    );
    for p in [br.as_str(), "d0", "idle1", "idle2"] {
        let v = d.port(p);
        assert!(v["error"].is_null(), "port {p} failed to come back: {v}");
    }
    assert_eq!(d.port("d0")["type"], "dummy");
    assert_eq!(d.port("idle1")["status"]["state"], "listening");
    assert_eq!(d.port("idle2")["status"]["state"], "connecting");
    // The server port's socket is the one handed over, and it accepts a frontend.
    let s = std::os::unix::net::UnixStream::connect(d.run.join("idle1.sock"))
        .expect("connect to the handed-over vhost-user socket");
    assert!(
        wait_until(Duration::from_secs(5), || d.port("idle1")["status"]
            ["state"]
            == "connected"),
        "{}",
        d.port("idle1")
    );
    drop(s);
    // The same tap (handed over, never re-created: its addresses would survive too).
    let now = std::fs::read_to_string(format!("/sys/class/net/{br}/ifindex")).unwrap();
    assert_eq!(now, ifindex, "the internal port's interface was re-created");
    assert!(mgmt.exists());
    if ofctl {
        // The same socket, served by the new process, and the rule came along.
        let flows = testkit::ofctl_must(&mgmt, "dump-flows", &[]);
        assert!(
            flows
                .lines()
                .any(|l| l.contains("priority=7") && l.contains("actions=drop")),
            "{flows}"
        );
    }
    d.ok(&["del-br", &br]);
}

/// Packed rings (virtio 1.1): the ring positions and their wrap counters move to the new
/// process; 10 upgrades under the io loop lose nothing and break no ring.
#[test]
fn packed_rings_survive_upgrades() {
    let _g = serial();
    if skip() {
        return;
    }
    let mut l = io_loop_with("packed", false, ",packed_vq=1");
    let rings = l.d.port("vm1")["status"]["rings"].clone();
    assert!(
        rings
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["layout"] == "packed"),
        "{rings}"
    );
    let sockets = l.sockets();
    let view = l.conn_view();
    for i in 0..10 {
        l.d.upgrade();
        l.assert_flowing(&format!("after packed upgrade {i}"));
    }
    assert_eq!(l.conn_view(), view);
    assert_eq!(l.sockets(), sockets);
    for p in PORTS {
        let st = l.d.port(p)["status"].clone();
        assert_eq!(st["broken_queues"], 0, "{st}");
        assert!(
            st["rings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["layout"] == "packed"),
            "{st}"
        );
    }
    let (lost, st) = l.drain_and_count_lost();
    eprintln!("packed: testpmd totals {st:?}: lost {lost} over 10 upgrades");
    assert!(lost <= LOST_BOUND, "{lost} lost; {st:?}");
}

/// The inodes of the packet sockets process `pid` holds (its fds ∩ `/proc/net/packet`).
fn packet_sockets(pid: i32) -> std::collections::BTreeSet<String> {
    sockets_of(pid, "packet", 8)
}

/// The inodes of the sockets of `pid` listed in `/proc/net/TABLE` (inode in column `col`).
fn sockets_of(pid: i32, table: &str, col: usize) -> std::collections::BTreeSet<String> {
    let list = std::fs::read_to_string(format!("/proc/net/{table}")).unwrap();
    let inodes: std::collections::BTreeSet<String> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(col).map(str::to_string))
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            let ino = l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string();
            inodes.contains(&ino).then_some(ino)
        })
        .collect()
}

/// Pings `to` from `ns` 400 times at 100 a second and upgrades `d` one second in: the new
/// process must hold the very sockets `sockets(pid)` the old one had (`before`), and at most 1%
/// of the pings may be lost (in this debug build 0-2 of 400 in the runs made: a frame in the
/// old process's hands when it stops reading may go; a reopened socket loses everything that
/// arrives until the new process has bound it).
fn ping_flood_across_an_upgrade(
    d: &mut Vireod,
    ns: &common::host::Ns,
    to: &str,
    before: &std::collections::BTreeSet<String>,
    sockets: impl Fn(i32) -> std::collections::BTreeSet<String>,
) {
    let (new, received, text) = flood_across(d, ns, to, &[]);
    // Kernel ports are taken once the old process has gone (just after `upgrade` returns).
    assert!(
        wait_until(Duration::from_secs(5), || sockets(new) == *before),
        "not the same sockets: {:?} then {before:?}\n{}",
        sockets(new),
        d.log_tail()
    );
    assert!(
        received >= 396,
        "more than 1% of the pings lost across the upgrade: {text}\n{}",
        d.log_tail()
    );
}

/// Pings `to` from `ns` 400 times at 100 a second and upgrades `d` (with `extra` arguments)
/// one second in: the new pid, the pings answered, ping's summary.
fn flood_across(
    d: &mut Vireod,
    ns: &common::host::Ns,
    to: &str,
    extra: &[&str],
) -> (i32, u32, String) {
    let flood = ns.cmd(&["ping", "-q", "-c", "400", "-i", "0.01", "-W", "2", to]);
    let pinger = std::process::Command::new(&flood[0])
        .args(&flood[1..])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let new = d.upgrade_with(extra);
    let out = pinger.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let received = text
        .split(", ")
        .find_map(|w| w.strip_suffix(" received")?.parse::<u32>().ok())
        .unwrap_or(0);
    eprintln!("ping flood across the upgrade {extra:?}: {received} of 400 answered");
    (new, received, text)
}

/// The inodes of the AF_XDP sockets process `pid` holds: its socket fds whose rings it has
/// mapped (`/proc/PID/maps` names a socket mapping by its inode; no `/proc/net` table lists
/// AF_XDP sockets, and `ss --xdp` needs a kernel with xsk_diag).
/// Namespaces `a` (10.79.NET.1) and `b` (10.79.NET.2) on veths tagged `tag`, and a vireod in
/// `dir` whose bridge br0 holds their host ends as ports `pa` and `pb` of type `ty`.
fn two_namespaces_on_a_bridge(
    dir: &std::path::Path,
    tag: char,
    net: u8,
    ty: &str,
) -> (common::host::Ns, common::host::Ns, Vireod) {
    two_namespaces_on_a_bridge_with(dir, tag, net, [ty, ty], &[], &[])
}

/// [`two_namespaces_on_a_bridge`] with port `pa` of type `types[0]`, `pb` of `types[1]`, the
/// options `extra` on both, and vireod started with the environment `env`.
fn two_namespaces_on_a_bridge_with(
    dir: &std::path::Path,
    tag: char,
    net: u8,
    types: [&str; 2],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (common::host::Ns, common::host::Ns, Vireod) {
    use common::host::Ns;
    let (a, b) = (Ns::create("vup", tag, 'a'), Ns::create("vup", tag, 'b'));
    a.exec(&[
        "ip",
        "addr",
        "add",
        &format!("10.79.{net}.1/24"),
        "dev",
        &a.ns_if,
    ]);
    b.exec(&[
        "ip",
        "addr",
        "add",
        &format!("10.79.{net}.2/24"),
        "dev",
        &b.ns_if,
    ]);
    let d = Vireod::start_env(dir, env);
    d.ok(&["add-br", "br0", "internal=false"]);
    for ((p, ns), ty) in [("pa", &a), ("pb", &b)].into_iter().zip(types) {
        let (t, i) = (format!("type={ty}"), format!("ifname={}", ns.host_if));
        let mut args = vec!["add-port", "br0", p, &t, &i];
        args.extend_from_slice(extra);
        d.ok(&args);
    }
    (a, b, d)
}

/// After an upgrade that should have adopted the af-xdp ports `pa` and `pb`: the new process
/// `new` holds the very AF_XDP sockets (`before`) and UMEM memfds (`umems`) the old one had,
/// both ports say `adopted`, and at most one of the flood's 400 pings was lost.
fn assert_xsk_handed_over(
    d: &Vireod,
    new: i32,
    before: &std::collections::BTreeSet<String>,
    umems: &std::collections::BTreeSet<u64>,
    received: u32,
    text: &str,
) {
    assert!(
        wait_until(Duration::from_secs(5), || xsk_sockets(new) == *before),
        "not the same AF_XDP sockets: {:?} then {before:?}\n{}",
        xsk_sockets(new),
        d.log_tail()
    );
    assert_eq!(umem_memfds(new), *umems, "not the same UMEMs");
    for p in ["pa", "pb"] {
        let st = d.port(p);
        assert!(st["error"].is_null(), "{st}");
        assert_eq!(st["status"]["upgrade"], "adopted", "{st}\n{}", d.log_tail());
    }
    assert!(
        received >= 399,
        "more than one ping lost across the upgrade: {text}\n{}",
        d.log_tail()
    );
}

fn xsk_sockets(pid: i32) -> std::collections::BTreeSet<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let fds: std::collections::BTreeSet<String> = fd_links(pid)
        .into_iter()
        .filter_map(|l| Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|ino| fds.contains(ino))
        .collect()
}

/// The inodes of the UMEM memfds process `pid` holds.
fn umem_memfds(pid: i32) -> std::collections::BTreeSet<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|r| {
            r.filter_map(|e| {
                let p = e.ok()?.path();
                let l = std::fs::read_link(&p).ok()?;
                l.to_string_lossy()
                    .starts_with("/memfd:vireo-umem")
                    .then(|| std::fs::metadata(&p).ok().map(|m| m.ino()))?
            })
            .collect()
        })
        .unwrap_or_default()
}

/// Where process `pid`'s fds point.
fn fd_links(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|r| {
            r.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|l| l.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `af-xdp` ports keep their AF_XDP sockets, UMEMs and XDP program across an upgrade: the
/// new vireod holds the very sockets and UMEM memfds the old one had and carries on in the
/// same rings, and a ping flood between two namespaces through them (100 a second, an upgrade
/// in the middle) loses at most one ping. Then a hand-over the new process cannot adopt (no
/// frame books): it reopens the ports cleanly and says why. Then an upgrade offering state
/// version 2 (a build without the hand-over): the ports are opened anew (other sockets), and
/// the flood's loss is printed for comparison.
#[test]
fn af_xdp_sockets_are_handed_over_under_a_ping_flood() {
    use common::host::kernel_ok;
    let _g = serial();
    if !kernel_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, _b, mut d) = two_namespaces_on_a_bridge(dir.path(), 'x', 3, "af-xdp");
    assert!(
        a.ping_until("10.79.3.2", &[], 20),
        "no ping before the upgrade: {}",
        d.port("pa")
    );
    let before = xsk_sockets(d.pid());
    let umems = umem_memfds(d.pid());
    assert_eq!(before.len(), 2, "{before:?}");
    assert_eq!(umems.len(), 2, "{umems:?}");
    let (new, received, text) = flood_across(&mut d, &a, "10.79.3.2", &[]);
    assert_xsk_handed_over(&d, new, &before, &umems, received, &text);
    // A hand-over that cannot be adopted (here: no frame books came): the new process closes
    // what it was handed (the program goes with it) and opens the ports anew, says why, and
    // they forward again.
    let adopted = xsk_sockets(d.pid());
    let new = d.upgrade_with(&["--no-xsk-books"]);
    assert!(
        wait_until(Duration::from_secs(5), || xsk_sockets(new).len() == 2),
        "ports not reopened: {}",
        d.log_tail()
    );
    assert!(xsk_sockets(new).is_disjoint(&adopted), "not reopened");
    for p in ["pa", "pb"] {
        let st = d.port(p);
        let note = st["status"]["upgrade"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(note.starts_with("reopened: no frame books"), "{st}");
        assert!(st["error"].is_null(), "{st}");
    }
    assert!(
        a.ping_until("10.79.3.2", &[], 5),
        "no ping after a reopening upgrade: {}",
        d.log_tail()
    );
    // A build without the hand-over (state version 2): opened anew, new sockets.
    let before = xsk_sockets(d.pid());
    let (new, received, _) = flood_across(&mut d, &a, "10.79.3.2", &["--state-version", "2"]);
    assert!(
        wait_until(Duration::from_secs(5), || xsk_sockets(new).len() == 2),
        "ports not reopened: {}",
        d.log_tail()
    );
    assert!(
        xsk_sockets(new).is_disjoint(&before),
        "version 2 reopens the ports"
    );
    eprintln!(
        "af-xdp without the hand-over: {} of 400 pings lost",
        400 - received
    );
    assert!(
        a.ping_until("10.79.3.2", &[], 5),
        "no ping after the second upgrade"
    );
}

/// The ids of the BPF maps process `pid` holds (`map_id:` in its fds' fdinfo).
fn bpf_map_ids(pid: i32) -> std::collections::BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .map(|r| {
            r.filter_map(|e| {
                let t = std::fs::read_to_string(e.ok()?.path()).ok()?;
                t.lines()
                    .find_map(|l| l.strip_prefix("map_id:")?.trim().parse().ok())
            })
            .collect()
        })
        .unwrap_or_default()
}

/// Frames the steering program of `port` steered (all queues, all nodes).
fn steered(d: &Vireod, port: &str) -> u64 {
    let st = d.port(port);
    st["status"]["steering"]
        .as_array()
        .unwrap_or_else(|| panic!("no steering counters: {st}"))
        .iter()
        .flat_map(|q| q["steered_to_node"].as_array().unwrap().clone())
        .map(|n| n.as_u64().unwrap())
        .sum()
}

/// The ports `dump-mac-numa` says hold `mac`'s entry.
fn mac_numa_ports(d: &Vireod, mac: &str) -> Vec<String> {
    let v = d.json(&["dump-mac-numa"]);
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == mac)
        .map(|e| {
            e["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_else(|| panic!("no entry for {mac}: {v}"))
}

/// `af-xdp` ports with `xdp-steering=on` and `xdp-mark=on` keep their sockets (steering ones
/// too), UMEMs and BPF maps (XSKMAP, steering map and counters, mark map) across an upgrade
/// under a ping flood (at most one ping lost of 400); the steering entry set with
/// `set-mac-numa` is still in the map (`dump-mac-numa` names the port) and still steers (the
/// counters, handed over too, go on growing), and frames still carry the program's marks.
/// Then an upgrade offering state version 3 (a build without this hand-over): the ports are
/// opened anew (other sockets and maps) and steer again.
#[test]
fn af_xdp_steering_and_mark_maps_are_handed_over_under_a_ping_flood() {
    use common::host::kernel_ok;
    let _g = serial();
    if !kernel_ok() {
        return;
    }
    // Marks only where the kernel lets XDP programs call `bpf_xdp_adjust_meta` (the refusal
    // itself is checked in af_xdp_marks.rs and af_xdp_steer.rs).
    let mark = xsk::kernel_allows_meta();
    if !mark {
        eprintln!("NOT TESTED HERE: this kernel refuses bpf_xdp_adjust_meta; no xdp-mark=on");
    }
    let flags: &[&str] = if mark {
        &["xdp-steering=on", "xdp-mark=on"]
    } else {
        &["xdp-steering=on"]
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, mut d) =
        two_namespaces_on_a_bridge_with(dir.path(), 's', 4, ["af-xdp", "af-xdp"], flags, &[]);
    let b_mac = b.exec(&["cat", &format!("/sys/class/net/{}/address", b.ns_if)]);
    let b_mac = b_mac.trim();
    d.ok(&["set-mac-numa", b_mac, "0"]);
    assert!(
        a.ping_until("10.79.4.2", &[], 20),
        "no ping before the upgrade: {}",
        d.port("pa")
    );
    assert!(
        wait_until(Duration::from_secs(5), || steered(&d, "pa") > 0),
        "nothing steered before the upgrade: {}",
        d.port("pa")
    );
    assert_eq!(mac_numa_ports(&d, b_mac), ["pa", "pb"]);
    let before = xsk_sockets(d.pid());
    let umems = umem_memfds(d.pid());
    let maps = bpf_map_ids(d.pid());
    let nodes = d.port("pa")["status"]["steering"][0]["steered_to_node"]
        .as_array()
        .unwrap()
        .len();
    // Per port: the queue's socket and one steering socket per node; four maps each (XSKMAP,
    // steering map and counters, mark map), three without marks.
    assert_eq!(before.len(), 2 * (1 + nodes), "{before:?}");
    assert_eq!(umems.len(), 2, "{umems:?}");
    assert_eq!(maps.len(), if mark { 8 } else { 6 }, "{maps:?}");
    let steered_before = steered(&d, "pa");
    let (new, received, text) = flood_across(&mut d, &a, "10.79.4.2", &[]);
    assert_xsk_handed_over(&d, new, &before, &umems, received, &text);
    assert_eq!(bpf_map_ids(new), maps, "not the same BPF maps");
    // vireod timed its switch-over: the rings' gap, then the kernel ports' (adopted once the
    // old process has exited).
    let so = d.json(&["show"])["switch_over"].clone();
    let (rings, kernel) = (
        so["rings_gap_us"].as_u64(),
        so["kernel_ports_gap_us"].as_u64(),
    );
    assert!(
        rings
            .zip(kernel)
            .is_some_and(|(r, k)| r <= k && k < 30_000_000),
        "switch-over times: {so}"
    );
    // The entry is still in the map and still steers; the counters went on from the old ones.
    assert_eq!(mac_numa_ports(&d, b_mac), ["pa", "pb"]);
    let s1 = steered(&d, "pa");
    assert!(
        s1 >= steered_before + 300,
        "the flood was not steered: {steered_before} then {s1}"
    );
    assert!(
        a.ping_until("10.79.4.2", &[], 5),
        "no ping after the upgrade"
    );
    assert!(
        wait_until(Duration::from_secs(5), || steered(&d, "pa") > s1),
        "nothing steered after the upgrade: {}",
        d.port("pa")
    );
    let marked = d.port("pa")["status"]["rx_marked"].as_u64().unwrap();
    assert!(
        marked > 0 || !mark,
        "no frame with the program's metadata after the upgrade"
    );
    // A build without this hand-over (state version 3): the ports are opened anew.
    let before = xsk_sockets(d.pid());
    let new = d.upgrade_with(&["--state-version", "3"]);
    assert!(
        wait_until(Duration::from_secs(5), || xsk_sockets(new).len()
            == before.len()),
        "ports not reopened: {}",
        d.log_tail()
    );
    assert!(
        xsk_sockets(new).is_disjoint(&before),
        "version 3 reopens them"
    );
    assert!(
        bpf_map_ids(new).is_disjoint(&maps),
        "version 3 makes new maps"
    );
    assert!(
        a.ping_until("10.79.4.2", &[], 10),
        "no ping after the version-3 upgrade"
    );
    assert!(
        wait_until(Duration::from_secs(5), || steered(&d, "pa") > 0
            && mac_numa_ports(&d, b_mac) == ["pa", "pb"]),
        "the reopened port does not steer: {}",
        d.port("pa")
    );
}

/// A bridge of one `af-packet` port (`pa`, the pinging side) and one `af-xdp` port: both are
/// handed over under a ping flood (at most one ping lost of 400). The new vireod holds every
/// adopted port (attached, not read) until all of them are attached, so a frame read from the
/// packet socket never meets the af-xdp port not attached yet. The new vireod waits 1 s after
/// attaching each adopted kernel port (`VIREO_TAKEOVER_ATTACH_DELAY_MS`, the packet socket
/// comes first): read at once, the packet socket would hand the echo requests of that second
/// to a bridge without `pb` (64 of 400 pings lost in the one run made so; 3 with 300 ms).
#[test]
fn mixed_af_xdp_and_af_packet_ports_are_handed_over_under_a_ping_flood() {
    use common::host::kernel_ok;
    let _g = serial();
    if !kernel_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, _b, mut d) = two_namespaces_on_a_bridge_with(
        dir.path(),
        'm',
        5,
        ["af-packet", "af-xdp"],
        &[],
        &[("VIREO_TAKEOVER_ATTACH_DELAY_MS", "1000")],
    );
    assert!(
        a.ping_until("10.79.5.2", &[], 20),
        "no ping before the upgrade"
    );
    // (The packet socket's ring is mapped too: it is among the "AF_XDP" sockets.)
    let (xsks, packets) = (xsk_sockets(d.pid()), packet_sockets(d.pid()));
    assert_eq!((xsks.len(), packets.len()), (2, 1), "{xsks:?} {packets:?}");
    let (new, received, text) = flood_across(&mut d, &a, "10.79.5.2", &[]);
    assert!(
        wait_until(Duration::from_secs(5), || xsk_sockets(new) == xsks
            && packet_sockets(new) == packets),
        "not the same sockets: {:?} {:?}\n{}",
        xsk_sockets(new),
        packet_sockets(new),
        d.log_tail()
    );
    assert_eq!(d.port("pb")["status"]["upgrade"], "adopted");
    assert!(d.port("pa")["error"].is_null(), "{}", d.port("pa"));
    assert!(
        received >= 399,
        "more than one ping lost across the upgrade: {text}\n{}",
        d.log_tail()
    );
}

/// `af-packet` ports keep their packet sockets across an upgrade: the new vireod holds the very
/// sockets the old one had (bound, promiscuous, with what queued on them meanwhile), and a ping
/// flood between two namespaces through them (100 a second, an upgrade in the middle) goes on.
#[test]
fn af_packet_sockets_are_handed_over_under_a_ping_flood() {
    use common::host::kernel_ok;
    let _g = serial();
    if !kernel_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, _b, mut d) = two_namespaces_on_a_bridge(dir.path(), 'p', 1, "af-packet");
    assert!(
        a.ping_until("10.79.1.2", &[], 20),
        "no ping before the upgrade"
    );
    let before = packet_sockets(d.pid());
    assert_eq!(before.len(), 2, "{before:?}");
    ping_flood_across_an_upgrade(&mut d, &a, "10.79.1.2", &before, packet_sockets);
    for p in ["pa", "pb"] {
        assert!(d.port(p)["error"].is_null(), "{}", d.port(p));
    }
}

/// `geneve` (and `vxlan`) ports keep their underlay UDP socket across an upgrade: two vireods
/// joined by Geneve on 127.0.0.12 and 127.0.0.13 (VNI 7), a namespace behind each (af-packet);
/// the first vireod is upgraded under a ping flood: the new process holds the very UDP socket
/// the old one had, and the flood goes on.
#[test]
fn tunnel_sockets_are_handed_over_under_a_ping_flood() {
    use common::host::{kernel_ok, Ns};
    let _g = serial();
    if !kernel_ok() {
        return;
    }
    let (a, b) = (Ns::create("vup", 't', 'a'), Ns::create("vup", 't', 'b'));
    a.exec(&["ip", "addr", "add", "10.79.2.1/24", "dev", &a.ns_if]);
    b.exec(&["ip", "addr", "add", "10.79.2.2/24", "dev", &b.ns_if]);
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut d = Vireod::start(da.path());
    let e = Vireod::start(db.path());
    for (v, ns, local, remote) in [
        (&d, &a, "127.0.0.12", "127.0.0.13"),
        (&e, &b, "127.0.0.13", "127.0.0.12"),
    ] {
        v.ok(&["add-br", "br0", "internal=false"]);
        v.ok(&[
            "add-port",
            "br0",
            "vm",
            "type=af-packet",
            &format!("ifname={}", ns.host_if),
        ]);
        v.ok(&[
            "add-port",
            "br0",
            "gn",
            "type=geneve",
            &format!("local_ip={local}"),
            &format!("remote_ip={remote}"),
            "key=7",
        ]);
    }
    assert!(
        a.ping_until("10.79.2.2", &[], 20),
        "no ping through Geneve before the upgrade: {}",
        d.port("gn")
    );
    // The UDP socket (inodes in column 9 of /proc/net/udp).
    let udp = |pid| sockets_of(pid, "udp", 9);
    let before = udp(d.pid());
    assert_eq!(before.len(), 1, "{before:?}");
    ping_flood_across_an_upgrade(&mut d, &a, "10.79.2.2", &before, udp);
    assert!(d.port("gn")["error"].is_null(), "{}", d.port("gn"));
    assert!(
        a.ping_until("10.79.2.2", &[], 5),
        "no ping after the upgrade: {}",
        d.port("gn")
    );
}
