//! Connection tracking through a running vireod with real parts: network namespaces on
//! `af-packet` ports, rules written with real `ovs-ofctl -O OpenFlow13`, and the kernel's own
//! TCP and ICMP. OVS's conntrack tutorial firewall (new connections from A only, established
//! both ways, the rest dropped) checked with `ping`, `iperf3` and TCP connects; SNAT of a
//! namespace to one address and DNAT of a service address to two backends, seen from both
//! sides; two tenants with the same addresses kept apart by zones; `dump-conntrack`,
//! `ct-stats` and `flush-conntrack` show and change what happened.
//!
//! Names: namespaces `ct2-T-X-PID`, interfaces `ct2TXPID` (T = the test's letter, X = side),
//! removed by Drop guards, also when a test fails.
mod common;

use common::host::{kernel_ok, Bg, Ns};
use common::Daemon;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

impl Ns {
    fn new(test: char, side: char, addr: &str) -> Ns {
        let ns = Ns::create("ct2", test, side);
        ns.exec(&["ip", "addr", "add", addr, "dev", &ns.ns_if]);
        ns
    }

    fn mac(&self) -> String {
        self.exec(&["cat", &format!("/sys/class/net/{}/address", self.ns_if)])
            .trim()
            .to_string()
    }

    fn ping_once(&self, ip: &str) -> bool {
        self.try_exec(&["ping", "-c", "1", "-W", "1", ip])
            .status
            .success()
    }

    /// A kernel TCP connect from inside (bash's /dev/tcp), within `secs`.
    fn connects(&self, ip: &str, port: u16, secs: u32) -> bool {
        let script = format!("exec 3<>/dev/tcp/{ip}/{port}");
        self.try_exec(&["timeout", &secs.to_string(), "bash", "-c", &script])
            .status
            .success()
    }

    /// Connects to `ip:port` and returns the first line the server sends.
    fn fetch(&self, ip: &str, port: u16) -> String {
        let script = format!("exec 3<>/dev/tcp/{ip}/{port}; head -n1 <&3");
        let o = self.try_exec(&["timeout", "5", "bash", "-c", &script]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// A TCP server on `port` that answers every connection with the peer's address (or
    /// `tag` when given) and closes it.
    fn server(&self, port: u16, tag: Option<&str>) -> Bg {
        let reply = match tag {
            Some(t) => format!("b'{t}\\n'"),
            None => "(a[0]+'\\n').encode()".to_string(),
        };
        let py = format!(
            "import socket\ns=socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('0.0.0.0',{port}))\ns.listen(64)\n\
             while True:\n c,a=s.accept()\n c.sendall({reply})\n c.close()\n"
        );
        let v = self.cmd(&["python3", "-c", &py]);
        let bg = Bg(Command::new(&v[0])
            .args(&v[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap());
        let filter = format!("sport = :{port}");
        let listening = until(10, || {
            let o = self.try_exec(&["ss", "-Hltn", &filter]);
            !o.stdout.is_empty()
        });
        assert!(listening, "server on port {port} did not start");
        bg
    }
}

fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ct2-{tag}-"))
        .tempdir()
        .unwrap()
}

fn until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// vireod with bridge br0 and one af-packet port per namespace (OpenFlow ports 1, 2, ...),
/// every rule removed, then `flows` added with real ovs-ofctl.
fn bridge(dir: &tempfile::TempDir, ns: &[&Ns], flows: &[String]) -> (Daemon, PathBuf) {
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    for (i, n) in ns.iter().enumerate() {
        d.ok(&[
            "add-port",
            "br0",
            &format!("p{}", i + 1),
            "type=af-packet",
            &format!("ifname={}", n.host_if),
        ]);
    }
    let sock = d.run_dir.join("br0.mgmt");
    testkit::ofctl_must(&sock, "del-flows", &[]);
    for f in flows {
        testkit::ofctl_must(&sock, "add-flow", &[f]);
    }
    (d, sock)
}

fn pmd_totals(d: &Daemon) -> (u64, u64, u64) {
    let s = d.json(&["pmd-stats-show"]);
    let sum = |k: &str| {
        s.as_array()
            .unwrap()
            .iter()
            .map(|p| p[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    (sum("packets"), sum("misses"), sum("recirculations"))
}

/// OVS's conntrack tutorial, unchanged: table 0 sends untracked IP to conntrack and on to
/// table 1; table 1 lets port 1 open connections, lets established traffic through both
/// ways, and drops new connections from port 2.
fn tutorial() -> Vec<String> {
    [
        "table=0,priority=1,actions=drop",
        "table=0,priority=10,arp,actions=NORMAL",
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
        "table=1,in_port=1,ip,ct_state=+trk+new,actions=ct(commit),output:2",
        "table=1,in_port=1,ip,ct_state=+trk+est,actions=output:2",
        "table=1,in_port=2,ip,ct_state=+trk+new,actions=drop",
        "table=1,in_port=2,ip,ct_state=+trk+est,actions=output:1",
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn stateful_firewall_from_the_ovs_tutorial_with_kernel_tcp_and_icmp() {
    if !kernel_ok()
        || !testkit::have_ofctl()
        || !testkit::require_peer("iperf3", "iperf3")
        || !testkit::require_peer("python3", "python3")
    {
        return;
    }
    let dir = tmp("f");
    let a = Ns::new('f', 'a', "10.231.0.1/24");
    let b = Ns::new('f', 'b', "10.231.0.2/24");
    let (d, _sock) = bridge(&dir, &[&a, &b], &tutorial());

    // ICMP: A → B works (the echo reply is established); B → A is a new connection: dropped.
    assert!(until(10, || a.ping_once("10.231.0.2")), "A cannot ping B");
    assert!(
        !b.ping_once("10.231.0.1"),
        "B pinged A through the firewall"
    );
    assert!(
        !b.ping_once("10.231.0.1"),
        "B pinged A through the firewall"
    );

    // TCP: a listener on each side; A connects to B, B cannot connect to A.
    let _sa = a.server(7001, None);
    let _sb = b.server(7002, None);
    assert!(a.connects("10.231.0.2", 7002, 5), "A cannot open TCP to B");
    assert_eq!(a.fetch("10.231.0.2", 7002), "10.231.0.1");
    assert!(
        !b.connects("10.231.0.1", 7001, 3),
        "B opened TCP to A through the firewall"
    );

    // Bulk TCP A → B: established traffic stays in the caches (no upcall per packet).
    let (p0, m0, r0) = pmd_totals(&d);
    let bytes = a.iperf_tcp_to(&b, "10.231.0.2");
    let (p1, m1, r1) = pmd_totals(&d);
    let (pkts, misses, recircs) = (p1 - p0, m1 - m0, r1 - r0);
    eprintln!("iperf3 through ct: {bytes} bytes, {pkts} packets, {misses} upcalls, {recircs} recirculations");
    assert!(
        bytes > 5_000_000,
        "TCP through the firewall moved {bytes} bytes"
    );
    assert!(
        recircs >= pkts / 2,
        "packets went through ct(table=1): {recircs}/{pkts}"
    );
    assert!(misses < 100, "{misses} upcalls for {pkts} packets");

    // dump-conntrack shows the connections A opened (ICMP, the TCP ones).
    let dump = d.ok(&["dump-conntrack"]);
    eprintln!("{dump}");
    assert!(
        dump.contains("icmp,orig=(src=10.231.0.1,dst=10.231.0.2,"),
        "{dump}"
    );
    assert!(
        dump.contains("tcp,orig=(src=10.231.0.1,dst=10.231.0.2,") && dump.contains("dport=7002)"),
        "{dump}"
    );
    assert!(dump.contains("dport=5201)"), "iperf3's connection: {dump}");
    assert!(
        !dump.contains("orig=(src=10.231.0.2,dst=10.231.0.1"),
        "B's attempts were never committed: {dump}"
    );
    let st = d.json(&["ct-stats"]);
    assert!(st["connections"].as_u64().unwrap() >= 3, "{st}");
    // Flushing forgets them: the next packet of an old TCP connection is new again.
    let n = d.json(&["flush-conntrack"]);
    assert!(n["flushed"].as_u64().unwrap() >= 3, "{n}");
    assert_eq!(d.json(&["ct-stats"])["connections"], 0);
}

#[test]
fn snat_to_one_address_and_dnat_of_a_service_to_two_backends() {
    if !kernel_ok() || !testkit::have_ofctl() || !testkit::require_peer("python3", "python3") {
        return;
    }
    let dir = tmp("n");
    let a = Ns::new('n', 'a', "10.232.0.1/24");
    let b = Ns::new('n', 'b', "10.232.0.2/24");
    let c = Ns::new('n', 'c', "10.232.0.3/24");
    let (ma, mb, mc) = (a.mac(), b.mac(), c.mac());
    // B and C answer the NAT'ed addresses at A's MAC (nobody owns them on the wire).
    for ns in [&b, &c] {
        ns.exec(&[
            "ip",
            "neigh",
            "replace",
            "10.232.0.100",
            "lladdr",
            &ma,
            "dev",
            &ns.ns_if,
        ]);
    }
    // A reaches the service address 10.232.0.200 at B's MAC; the switch rewrites it.
    a.exec(&[
        "ip",
        "neigh",
        "replace",
        "10.232.0.200",
        "lladdr",
        &mb,
        "dev",
        &a.ns_if,
    ]);
    let flows: Vec<String> = vec![
        "table=0,priority=10,arp,actions=NORMAL".into(),
        // SNAT: A's connections to port 7100 leave as 10.232.0.100.
        "table=0,priority=100,tcp,in_port=1,tp_dst=7100,actions=ct(commit,zone=5,nat(src=10.232.0.100)),output:2".into(),
        // DNAT: the service 10.232.0.200:80 is B or C.
        "table=0,priority=100,tcp,in_port=1,nw_dst=10.232.0.200,tp_dst=80,actions=ct(commit,zone=6,nat(dst=10.232.0.2-10.232.0.3),table=1)".into(),
        format!("table=1,priority=10,ip,nw_dst=10.232.0.2,actions=mod_dl_dst:{mb},output:2"),
        format!("table=1,priority=10,ip,nw_dst=10.232.0.3,actions=mod_dl_dst:{mc},output:3"),
        // Replies: un-NAT in the connection's zone, then back to A.
        "table=0,priority=100,tcp,in_port=2,tp_src=7100,actions=ct(zone=5,nat),output:1".into(),
        "table=0,priority=100,tcp,in_port=2,tp_src=80,actions=ct(zone=6,nat,table=2)".into(),
        "table=0,priority=100,tcp,in_port=3,tp_src=80,actions=ct(zone=6,nat,table=2)".into(),
        format!("table=2,priority=10,ip,ct_state=+trk+est+dnat,actions=mod_dl_dst:{ma},output:1"),
    ];
    let (d, _sock) = bridge(&dir, &[&a, &b, &c], &flows);

    // SNAT: B's server sees the connection coming from 10.232.0.100; A gets the answer.
    let _s = b.server(7100, None);
    assert_eq!(
        a.fetch("10.232.0.2", 7100),
        "10.232.0.100",
        "B saw the translated source"
    );
    let dump = d.ok(&["dump-conntrack", "zone=5"]);
    assert!(
        dump.contains("orig=(src=10.232.0.1,dst=10.232.0.2,")
            && dump.contains("reply=(src=10.232.0.2,dst=10.232.0.100,"),
        "{dump}"
    );

    // DNAT: 16 connections to the service reach both backends; A only ever talks to .200.
    let _b = b.server(80, Some("B"));
    let _c = c.server(80, Some("C"));
    let mut seen = (0, 0);
    for _ in 0..16 {
        match a.fetch("10.232.0.200", 80).as_str() {
            "B" => seen.0 += 1,
            "C" => seen.1 += 1,
            other => panic!("service answered {other:?}"),
        }
    }
    eprintln!("DNAT spread: B {} C {}", seen.0, seen.1);
    assert!(seen.0 > 0 && seen.1 > 0, "both backends serve: {seen:?}");
    let dump = d.ok(&["dump-conntrack", "zone=6"]);
    assert!(dump.contains("dst=10.232.0.200,"), "{dump}");
    assert!(
        dump.contains("reply=(src=10.232.0.2,") && dump.contains("reply=(src=10.232.0.3,"),
        "{dump}"
    );
    assert!(!d.ok(&["dump-conntrack", "zone=6"]).contains("dport=7100"));
}

#[test]
fn zones_keep_two_tenants_with_the_same_addresses_apart() {
    if !kernel_ok() || !testkit::have_ofctl() || !testkit::require_peer("python3", "python3") {
        return;
    }
    let dir = tmp("z");
    // Tenant 1 on ports 1-2, tenant 2 on ports 3-4: the same addresses in both.
    let a1 = Ns::new('z', 'a', "10.233.0.1/24");
    let b1 = Ns::new('z', 'b', "10.233.0.2/24");
    let a2 = Ns::new('z', 'c', "10.233.0.1/24");
    let b2 = Ns::new('z', 'd', "10.233.0.2/24");
    let mut flows = Vec::new();
    for (zone, pa, pb) in [(1, 1, 2), (2, 3, 4)] {
        flows.push(format!(
            "table=0,priority=10,arp,in_port={pa},actions=output:{pb}"
        ));
        flows.push(format!(
            "table=0,priority=10,arp,in_port={pb},actions=output:{pa}"
        ));
        for p in [pa, pb] {
            flows.push(format!(
                "table=0,priority=100,ip,in_port={p},ct_state=-trk,actions=ct(zone={zone},table=1)"
            ));
        }
        flows.push(format!(
            "table=1,in_port={pa},ip,ct_state=+trk+new,ct_zone={zone},actions=ct(commit,zone={zone}),output:{pb}"
        ));
        flows.push(format!(
            "table=1,in_port={pa},ip,ct_state=+trk+est,ct_zone={zone},actions=output:{pb}"
        ));
        flows.push(format!(
            "table=1,in_port={pb},ip,ct_state=+trk+est,ct_zone={zone},actions=output:{pa}"
        ));
    }
    let (d, _sock) = bridge(&dir, &[&a1, &b1, &a2, &b2], &flows);
    let _s1 = b1.server(7200, Some("tenant1"));
    let _s2 = b2.server(7200, Some("tenant2"));
    assert!(
        until(10, || a1.ping_once("10.233.0.2")),
        "tenant 1 has no path"
    );
    assert!(
        until(10, || a2.ping_once("10.233.0.2")),
        "tenant 2 has no path"
    );
    assert_eq!(a1.fetch("10.233.0.2", 7200), "tenant1");
    assert_eq!(a2.fetch("10.233.0.2", 7200), "tenant2");
    // Each zone holds its own connections with the same addresses.
    let z1 = d.ok(&["dump-conntrack", "zone=1"]);
    let z2 = d.ok(&["dump-conntrack", "zone=2"]);
    for z in [&z1, &z2] {
        assert!(
            z.contains("tcp,orig=(src=10.233.0.1,dst=10.233.0.2,") && z.contains("dport=7200)"),
            "{z}"
        );
        assert!(
            z.contains("icmp,orig=(src=10.233.0.1,dst=10.233.0.2,"),
            "{z}"
        );
    }
    assert!(z1.lines().all(|l| l.contains("zone=1")), "{z1}");
    assert!(z2.lines().all(|l| l.contains("zone=2")), "{z2}");
    // New connections from B are refused in both tenants.
    let _t = a2.server(7201, None);
    assert!(!b2.connects("10.233.0.1", 7201, 3));
    // Flushing zone 1 leaves zone 2's connections; a zone limit refuses commits in that
    // zone only.
    let n = d.json(&["flush-conntrack", "zone=1"]);
    assert!(n["flushed"].as_u64().unwrap() >= 2, "{n}");
    assert!(d.ok(&["dump-conntrack", "zone=1"]).is_empty());
    assert!(!d.ok(&["dump-conntrack", "zone=2"]).is_empty());
    d.ok(&["set-ct-limit", "zone=1", "1"]);
    assert_eq!(
        a1.fetch("10.233.0.2", 7200),
        "tenant1",
        "first connection fits the limit"
    );
    // The second commit in zone 1 is refused (+inv): the SYN still goes out with ct(commit)'s
    // output, but the SYN-ACK finds no connection (+trk+new from port 2) and is dropped.
    assert!(
        !a1.connects("10.233.0.2", 7200, 3),
        "zone 1's limit refused the second"
    );
    assert_eq!(
        a2.fetch("10.233.0.2", 7200),
        "tenant2",
        "zone 2 is unaffected"
    );
    let st = d.json(&["ct-stats"]);
    assert!(st["limit_zone_hits"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["zones"]["1"]["limit"], 1, "{st}");
}

/// The tutorial typed as in OVS's conntrack tutorial, with plain `ovs-ofctl` (no `-O`:
/// OpenFlow 1.0; the `ct_state` matches make it switch the session to Nicira's NXM format and
/// send NXT_FLOW_MOD), plus a register carried through `resubmit`: the same firewall, and
/// `dump-flows` (NXST_FLOW) shows the rules with their counters.
#[test]
fn the_tutorial_typed_with_plain_ovs_ofctl() {
    if !kernel_ok() || !testkit::have_ofctl() {
        return;
    }
    let dir = tmp("p");
    let ns = |side, addr: &str| {
        let n = Ns::create("ofc", 'p', side);
        n.exec(&["ip", "addr", "add", addr, "dev", &n.ns_if]);
        n
    };
    let a = ns('a', "10.234.0.1/24");
    let b = ns('b', "10.234.0.2/24");
    let (_d, sock) = bridge(&dir, &[&a, &b], &[]);
    let plain = |cmd: &str, args: &[&str]| {
        let o = testkit::ofctl_version(&sock, None, &[], cmd, args);
        assert!(o.ok, "ovs-ofctl {cmd} {args:?}: {}", o.stderr);
        o.stdout
    };
    plain("del-flows", &[]);
    let mut flows = tutorial();
    // Port 2's established traffic goes through a register: load, resubmit, match.
    flows.retain(|f| !f.starts_with("table=1,in_port=2,ip,ct_state=+trk+est"));
    flows.push(
        "table=1,in_port=2,ip,ct_state=+trk+est,actions=load:0x7->NXM_NX_REG3[],resubmit(,2)"
            .into(),
    );
    flows.push("table=2,reg3=0x7,ip,actions=output:1".into());
    for f in &flows {
        plain("add-flow", &[f]);
    }
    assert!(until(10, || a.ping_once("10.234.0.2")), "A cannot ping B");
    assert!(
        !b.ping_once("10.234.0.1"),
        "B pinged A through the firewall"
    );
    let dump = plain("dump-flows", &[]);
    assert!(dump.starts_with("NXST_FLOW reply"), "{dump}");
    let reg = dump
        .lines()
        .find(|l| l.contains("reg3=0x7"))
        .unwrap_or_else(|| panic!("{dump}"));
    assert!(
        reg.contains("table=2") && !reg.contains("n_packets=0,"),
        "the echo replies went through the register rule: {reg}"
    );
    assert!(dump.contains("ct_state=+new+trk"), "{dump}");
}
