//! XDP steering through the real vireod (namespaces and veths prefixed `vst-`): an `af-xdp`
//! port with `xdp-steering=on` on a two-queue veth, `VIREO_NUMA_TOPOLOGY` with two fake nodes
//! and a PMD on each, testpmd (the VM stand-in) behind a vhost-user port. Frames to the
//! testpmd MAC land on the steering socket of the node its memory is on (learned by NORMAL),
//! then on node 1's after `set-mac-numa`, back after `del-mac-numa`; frames to an unknown MAC
//! stay on their queue's own socket; the port's counters prove each step (and, with
//! `xdp-mark=on` as well, that every frame came with the program's metadata). 50 add/del cycles
//! of a steering port leak no fd, BPF program or map.
mod common;

use common::Daemon;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::veth::{have_ip, NsVeth};

const VM_MAC: &str = "02:5e:00:00:01:0b";

/// The daemons' PMDs busy-poll both cores: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn have_peers() -> bool {
    have_ip()
        && testkit::require_peer("taskset", "util-linux")
        && testkit::require_peer("python3", "python3")
        && testkit::require_peer("ping", "iputils-ping")
        && testkit::require_peer("dpdk-testpmd", "dpdk")
}

/// Namespace `vst-dN` (10.80.N.1) with a 2-queue veth; XPS sends from CPU c on tx queue c.
fn net(n: u32) -> NsVeth {
    let net = NsVeth::new(
        &format!("vst-d{n}"),
        &format!("vstd{n}h"),
        &format!("vstd{n}n"),
        &format!("10.80.{n}.1/24"),
        2,
    );
    for (q, mask) in [(0, "1"), (1, "2")] {
        let path = format!("/sys/class/net/{}/queues/tx-{q}/xps_cpus", net.ns_if);
        net.exec_must(&["sh", "-c", &format!("echo {mask} > {path}")]);
    }
    net.exec_must(&[
        "ip",
        "neigh",
        "add",
        &format!("10.80.{n}.12"),
        "lladdr",
        "02:5e:00:00:01:0c",
        "dev",
        &net.ns_if,
    ]);
    net
}

/// vireod with two fake NUMA nodes (core 0 on node 0, core 1 on node 1) and a PMD on each.
fn start(dir: &std::path::Path) -> Daemon {
    let run = dir.join("run");
    let child = Command::new(common::VIREOD)
        .arg("--run-dir")
        .arg(&run)
        .args(["--pmd-cores", "0,1"])
        .env("VIREO_NUMA_TOPOLOGY", "0:0;1:1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn vireod");
    let d = Daemon {
        child,
        run_dir: run,
    };
    d.wait_ready();
    d
}

/// Per interface queue: (arrived, steered to node 0, steered to node 1).
fn counters(d: &Daemon) -> Vec<(u64, u64, u64)> {
    let st = common::port_status(d, "pa");
    st["status"]["steering"]
        .as_array()
        .unwrap_or_else(|| panic!("no steering counters: {st}"))
        .iter()
        .map(|q| {
            let s = &q["steered_to_node"];
            (
                q["arrived"].as_u64().unwrap(),
                s[0].as_u64().unwrap(),
                s[1].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Sends `count` UDP datagrams to `ip` from CPU `cpu` (tx queue `cpu` of the namespace side).
fn send_from_cpu(net: &NsVeth, cpu: u32, ip: &str, count: u32) {
    let script = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range({count}):\n s.sendto(b'x'*64,('{ip}',9))\n time.sleep(0.002)"
    );
    net.exec_must(&["taskset", "-c", &cpu.to_string(), "python3", "-c", &script]);
}

/// Waits until `f` holds for the counters (the port's counters are read from BPF maps).
fn wait_counters(d: &Daemon, what: &str, f: impl Fn(&[(u64, u64, u64)]) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let c = counters(d);
        if f(&c) {
            eprintln!("{what}: {c:?}");
            return;
        }
        assert!(Instant::now() < end, "{what}: counters {c:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mac_numa(d: &Daemon) -> serde_json::Value {
    d.json(&["dump-mac-numa"])
}

fn entry_for(d: &Daemon, mac: &str) -> Option<serde_json::Value> {
    mac_numa(d)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == mac)
        .cloned()
}

#[test]
fn frames_to_a_vm_land_on_the_queue_of_its_node() {
    if !have_peers() {
        return;
    }
    let _s = serial();
    let n = 1;
    let a = net(n);
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    let ifname = format!("ifname={}", a.host_if);
    let mut add = vec![
        "add-port",
        "br0",
        "pa",
        "type=af-xdp",
        &ifname,
        "queues=2",
        "xdp-mode=native",
        "xdp-steering=on",
        "xdp-mark=on",
    ];
    let mark = common::xdp_mark_usable(|args| d.ctl(args), &add);
    if !mark {
        add.pop();
    }
    d.ok(&add);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    let st = common::port_status(&d, "pa");
    assert_eq!(st["status"]["xdp_steering"], "on", "{st}");
    if mark {
        assert_eq!(st["status"]["xdp_mark"], "on", "{st}");
    }
    // Each interface queue is 3 rx queues of the port: its own socket (any PMD) and one
    // steering socket per node, polled by that node's PMD (core 0: node 0, core 1: node 1).
    let rxqs = d.ok(&["pmd-rxq-show"]);
    eprintln!("{rxqs}");
    let mut core_of = std::collections::BTreeMap::new();
    let mut core = String::new();
    for l in rxqs.lines() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if l.starts_with("pmd thread core") {
            core = t[3].to_string();
        } else if t.len() >= 4 && t[1] == "pa" && t[2] == "queue-id:" {
            core_of.insert(t[3].parse::<usize>().unwrap(), core.clone());
        }
    }
    assert_eq!(core_of.len(), 6, "{rxqs}");
    for q in [1, 4] {
        assert_eq!(core_of[&q], "0", "node 0's steering queue {q}: {rxqs}");
    }
    for q in [2, 5] {
        assert_eq!(core_of[&q], "1", "node 1's steering queue {q}: {rxqs}");
    }
    // testpmd answers ARP and ICMP echo; its replies teach NORMAL its MAC on port vm.
    let vu = common::peers::VirtioUser {
        path: dir.path().join("run").join("vm.sock"),
        mac: VM_MAC.into(),
        extra: String::new(),
    };
    let prefix = format!("vst-tp-{}", std::process::id());
    let mut tp = common::peers::Testpmd::start(&prefix, &[vu], &["--forward-mode=icmpecho"]);
    tp.cmd("start");
    assert!(
        tp.out.wait_for("icmpecho", Duration::from_secs(60)),
        "testpmd did not start:\n{}",
        tp.out.text()
    );
    let vm_ip = format!("10.80.{n}.99");
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let o = a.exec(&["ping", "-c", "1", "-W", "1", &vm_ip]);
        if o.status.success() {
            break;
        }
        assert!(
            Instant::now() < end,
            "no answer from testpmd through the steering port\n{}",
            tp.out.text()
        );
    }
    // Housekeeping installs the learned MAC with its memory's node (every 500 ms).
    let end = Instant::now() + Duration::from_secs(5);
    let learned = loop {
        if let Some(e) = entry_for(&d, VM_MAC) {
            if e["ports"].as_array().is_some_and(|p| !p.is_empty()) {
                break e;
            }
        }
        assert!(Instant::now() < end, "not learned: {}", mac_numa(&d));
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("learned entry: {learned}");
    assert_eq!(learned["source"], "learned");
    let home = learned["node"].as_u64().unwrap() as usize;
    assert!(home <= 1, "{learned}");
    let steered = |c: &[(u64, u64, u64)], q: usize, node: usize| {
        if node == 0 {
            c[q].1
        } else {
            c[q].2
        }
    };

    // Frames to the VM from queue 0 and from queue 1: steered to the home node's sockets.
    let c0 = counters(&d);
    send_from_cpu(&a, 0, &vm_ip, 40);
    send_from_cpu(&a, 1, &vm_ip, 30);
    wait_counters(&d, "to the VM, learned node", |c| {
        steered(c, 0, home) >= steered(&c0, 0, home) + 40
            && steered(c, 1, home) >= steered(&c0, 1, home) + 30
    });
    let c1 = counters(&d);
    assert_eq!(steered(&c1, 0, 1 - home), steered(&c0, 0, 1 - home));

    // The operator moves the VM to node 1 (or 0): set-mac-numa wins over what was learned.
    let other = 1 - home;
    d.ok(&["set-mac-numa", VM_MAC, &other.to_string()]);
    let e = entry_for(&d, VM_MAC).unwrap();
    assert_eq!(e["source"], "manual", "{e}");
    assert_eq!(e["node"], other, "{e}");
    assert_eq!(e["ports"], serde_json::json!(["pa"]), "{e}");
    let stored = std::fs::read_to_string(dir.path().join("run").join("conf.db")).unwrap();
    assert!(stored.contains(VM_MAC), "set-mac-numa not stored: {stored}");
    send_from_cpu(&a, 0, &vm_ip, 40);
    wait_counters(&d, "to the VM, set-mac-numa", |c| {
        steered(c, 0, other) >= steered(&c1, 0, other) + 40
    });
    let c2 = counters(&d);
    assert_eq!(steered(&c2, 0, home), steered(&c1, 0, home));

    // An unknown MAC stays on its queue's own socket: arrived grows, steered does not.
    send_from_cpu(&a, 0, &format!("10.80.{n}.12"), 25);
    wait_counters(&d, "unknown MAC", |c| c[0].0 >= c2[0].0 + 25);
    let c3 = counters(&d);
    assert_eq!((c3[0].1, c3[0].2), (c2[0].1, c2[0].2));

    // del-mac-numa: back to the learned node.
    d.ok(&["del-mac-numa", VM_MAC]);
    assert_eq!(entry_for(&d, VM_MAC).unwrap()["source"], "learned");
    send_from_cpu(&a, 0, &vm_ip, 20);
    wait_counters(&d, "to the VM after del-mac-numa", |c| {
        steered(c, 0, home) >= steered(&c3, 0, home) + 20
    });
    // Bad input: clear errors, nothing changed.
    for (args, want) in [
        (vec!["set-mac-numa", "02:5e:00:00:01", "1"], "not a MAC"),
        (vec!["set-mac-numa", "01:00:5e:00:00:01", "1"], "multicast"),
        (vec!["set-mac-numa", VM_MAC, "x"], "not a NUMA node"),
        (
            vec!["del-mac-numa", "02:5e:00:00:01:77"],
            "no set-mac-numa entry",
        ),
    ] {
        let o = d.ctl(&args);
        assert_ne!(o.code, 0, "{args:?}");
        assert!(o.stderr.contains(want), "{args:?}: {}", o.stderr);
    }
    // Every frame sent to the VM reached it (testpmd's rx counter), whichever PMD took it.
    let stats = tp.port_stats();
    eprintln!("testpmd port stats (rx, tx): {stats:?}");
    assert!(stats[0].0 >= 150, "testpmd got {stats:?}");
    // With xdp-mark=on every frame the port received carried the program's metadata.
    if !mark {
        let _ = tp.quit();
        return;
    }
    let st = common::port_status(&d, "pa");
    let rx = d.json(&["port-stats", "pa"]);
    eprintln!("pa rx_marked {} port-stats {rx}", st["status"]["rx_marked"]);
    let marked = st["status"]["rx_marked"].as_u64().unwrap();
    assert!(marked >= 155, "{st}");
    assert_eq!(Some(marked), rx[0]["rx_packets"].as_u64(), "{st} {rx}");
    let _ = tp.quit();
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// (BPF programs, BPF maps) a process holds (from `/proc/PID/fdinfo`).
fn bpf_objects(pid: u32) -> (usize, usize) {
    let (mut progs, mut maps) = (0, 0);
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(t) = std::fs::read_to_string(e.unwrap().path()) else {
            continue;
        };
        if t.contains("prog_type:") {
            progs += 1;
        }
        if t.contains("map_type:") {
            maps += 1;
        }
    }
    (progs, maps)
}

#[test]
fn fifty_steering_port_cycles_leak_nothing() {
    if !have_peers() {
        return;
    }
    let _s = serial();
    let a = net(2);
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let pid = d.child.id();
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["set-mac-numa", VM_MAC, "1"]);
    let ifname = format!("ifname={}", a.host_if);
    let mut add = vec![
        "add-port",
        "br0",
        "pa",
        "type=af-xdp",
        &ifname,
        "queues=2",
        "xdp-steering=on",
        "xdp-mark=on",
    ];
    let mark = common::xdp_mark_usable(|args| d.ctl(args), &add);
    if !mark {
        add.pop();
    }
    d.ok(&add);
    d.ok(&["del-port", "br0", "pa"]);
    let (fds, objs) = (fd_count(pid), bpf_objects(pid));
    let mut busy = 0;
    for i in 0..50 {
        let mut tries = 0;
        loop {
            let o = d.ctl(&add);
            if o.code == 0 {
                break;
            }
            tries += 1;
            assert!(o.stderr.contains("busy") && tries < 5, "{}", o.stderr);
            busy += 1;
        }
        if i == 0 {
            // What one steering port holds, so the checks below can fail: the program, the
            // XSKMAP, the steering map, the counters and the mark map (without xdp-mark, not
            // that one); 2 queues × 3 sockets.
            let o = bpf_objects(pid);
            let maps = if mark { 4 } else { 3 };
            assert!(o.0 > objs.0 && o.1 >= objs.1 + maps, "{objs:?} -> {o:?}");
            assert!(fd_count(pid) >= fds + 10, "the port opened no sockets?");
            assert!(a.host_link().contains("prog/xdp"), "{}", a.host_link());
            let e = entry_for(&d, VM_MAC).unwrap();
            assert_eq!(e["ports"], serde_json::json!(["pa"]), "{e}");
        }
        d.ok(&["del-port", "br0", "pa"]);
    }
    let (fds2, objs2) = (fd_count(pid), bpf_objects(pid));
    eprintln!(
        "vireod after 50 steering add/del cycles: fds {fds} -> {fds2}, (progs, maps) {objs:?} -> {objs2:?}, busy binds retried {busy}"
    );
    assert_eq!(fds2, fds, "fds leaked");
    assert_eq!(objs2, objs, "BPF programs or maps leaked");
    assert!(!a.host_link().contains("prog/xdp"), "{}", a.host_link());
    // set-mac-numa survives a restart.
    d.stop();
    let d = start(dir.path());
    let e = entry_for(&d, VM_MAC).expect("entry lost over a restart");
    assert_eq!(
        (e["node"].as_u64(), e["source"].as_str()),
        (Some(1), Some("manual"))
    );
}
