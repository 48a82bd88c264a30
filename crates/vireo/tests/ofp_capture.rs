//! Every OpenFlow version's session, as Wireshark reads it: `tshark` captures the TCP
//! session of the same `ovs-ofctl` commands (no `-O`, then `-O OpenFlow13`, `14`, `15`)
//! against vireod's `ptcp:` listener and against Open vSwitch 3.1 (`ovs-vswitchd`, userspace
//! datapath, in a namespace of its own), and decodes both captures. Every message Vireo sends
//! must decode; where Wireshark 4.0's dissectors flag a message as malformed, OVS's message
//! of the same version and type must be flagged too (a dissector limitation, not Vireo's
//! encoding: Wireshark 4.0 flags 1.5 FLOW_DESC and TABLE_FEATURES replies from both
//! switches, and 1.4 PORT_STATS replies from OVS; after such a message it may decode the rest of
//! the connection as garbage, so only each connection's first flagged frame is compared). Fails under VIREO_REQUIRE_PEERS=1 without
//! tshark, ovs-ofctl or openvswitch-switch.
mod common;

use common::host::{kernel_ok, must, Bg, Ns};
use common::ovs::Ovs;
use common::Daemon;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COMMANDS: [&[&str]; 9] = [
    &["show"],
    &["add-flow", "priority=5,ip,actions=drop"],
    &["add-flow", "priority=6,in_port=1,actions=output:2"],
    &["dump-flows"],
    &["dump-aggregate"],
    &["dump-ports"],
    &["dump-tables"],
    &["dump-ports-desc"],
    &["del-flows"],
];

/// `tshark` capturing `tcp port PORT` on `lo`, in namespace `ns` if given, into `file`;
/// returns once it is capturing.
fn capture(ns: Option<&Ns>, port: u16, file: &Path) -> Bg {
    let filter = format!("tcp port {port}");
    let f = file.display().to_string();
    let args = ["tshark", "-q", "-i", "lo", "-f", &filter, "-w", &f];
    let argv: Vec<String> = match ns {
        Some(n) => n.cmd(&args),
        None => args.iter().map(|s| s.to_string()).collect(),
    };
    let log = file.with_extension("log");
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("tshark");
    let end = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Capturing on")
    {
        assert!(Instant::now() < end, "tshark did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Bg(child)
}

/// Stops a capture so that it writes its file out.
fn stop(mut bg: Bg) {
    std::thread::sleep(Duration::from_millis(500));
    let pid = nix::unistd::Pid::from_raw(bg.0.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let _ = bg.0.wait();
}

/// Runs the command script with every version against `target`, in `ns` if given.
fn script(ns: Option<&Ns>, target: &str) {
    for v in [
        None,
        Some("OpenFlow13"),
        Some("OpenFlow14"),
        Some("OpenFlow15"),
    ] {
        for c in COMMANDS {
            let mut args = vec!["ovs-ofctl"];
            if let Some(v) = v {
                args.extend(["-O", v]);
            }
            args.extend([c[0], target]);
            args.extend(&c[1..]);
            let argv: Vec<String> = match ns {
                Some(n) => n.cmd(&args),
                None => args.iter().map(|s| s.to_string()).collect(),
            };
            let r: Vec<&str> = argv.iter().map(String::as_str).collect();
            must(&r);
        }
    }
}

/// The messages Wireshark decoded from the switch's side (`tcp.srcport == port`) that match
/// `filter`, each named by version, type and multipart/stats type (`1.3 type:19 mp:12`).
///
/// With `first_per_stream`, only the first matching frame of each TCP connection counts:
/// once Wireshark 4.0 flags a message it can lose the message boundaries of the rest of that
/// connection ("BoundErrorUnreassembled") and decode what follows as messages of random
/// versions and types — seen for both switches after the 1.5 TABLE_FEATURES replies, and
/// which frames it hits depends on how TCP segmented the stream.
fn messages(file: &Path, port: u16, filter: &str, first_per_stream: bool) -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args(["-d", &format!("tcp.port=={port},openflow")])
        .args([
            "-Y",
            &format!(
                "tcp.srcport == {port} && (openflow_v1 || openflow_v4 || openflow_v5 \
                 || openflow_v6) && ({filter})"
            ),
        ])
        .args(["-T", "fields", "-E", "separator=;"])
        .args(["-e", "tcp.stream"])
        .args(["-e", "openflow_1_0.type", "-e", "openflow.stats.type"])
        .args([
            "-e",
            "openflow_v4.type",
            "-e",
            "openflow_v4.multipart_reply.type",
        ])
        .args([
            "-e",
            "openflow_v5.type",
            "-e",
            "openflow_v5.multipart_reply.type",
        ])
        .args([
            "-e",
            "openflow_v6.type",
            "-e",
            "openflow_v6.multipart_reply.type",
        ])
        .output()
        .expect("tshark -r");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = ["1.0", "1.0", "1.3", "1.3", "1.4", "1.4", "1.5", "1.5"];
    // A frame may hold several messages: each field then lists one value per message.
    let mut ids = Vec::new();
    let mut streams = BTreeSet::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((stream, rest)) = l.split_once(';') else {
            continue;
        };
        if first_per_stream && !streams.insert(stream.to_string()) {
            continue;
        }
        let f: Vec<&str> = rest.split(';').collect();
        for (i, types) in f.iter().enumerate().step_by(2).take(4) {
            let mps: Vec<&str> = f.get(i + 1).map_or(vec![], |m| m.split(',').collect());
            for (k, t) in types.split(',').filter(|t| !t.is_empty()).enumerate() {
                let mut id = format!("{} type:{t}", version[i]);
                if let Some(mp) = mps.get(k).filter(|m| !m.is_empty()) {
                    id.push_str(&format!(" mp:{mp}"));
                }
                ids.push(id);
            }
        }
    }
    ids
}

#[test]
fn every_version_decodes_in_wireshark_as_well_as_open_vswitch() {
    if !kernel_ok()
        || !testkit::require_peer("tshark", "tshark")
        || !testkit::have_ofctl()
        || !testkit::require_peer("ovs-vswitchd", "openvswitch-switch")
        || !testkit::require_peer("ovsdb-server", "openvswitch-switch")
    {
        return;
    }
    let dir = tempfile::Builder::new().prefix("vcap-").tempdir().unwrap();

    // Vireo, listening on 127.0.0.1 in this namespace.
    let port = testkit::free_port();
    let d = Daemon::start(&dir.path().join("run"));
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "p1", "type=dummy"]);
    d.ok(&["add-port", "br0", "p2", "type=dummy"]);
    d.ok(&["set-controller", "br0", &format!("ptcp:{port}:127.0.0.1")]);
    let vcap = dir.path().join("vireo.pcap");
    let t = capture(None, port, &vcap);
    script(None, &format!("tcp:127.0.0.1:{port}"));
    stop(t);

    // Open vSwitch, in a namespace of its own, with the same ports and listener.
    let ns = Ns::create("vcap", 'c', 'o');
    let odir = dir.path().join("ovs");
    std::fs::create_dir_all(&odir).unwrap();
    let ovs = Ovs::start(&ns, &odir);
    ovs.vsctl(&[
        "add-br",
        "br0",
        "--",
        "set",
        "bridge",
        "br0",
        "datapath_type=netdev",
        "protocols=OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15",
        "--",
        "set-controller",
        "br0",
        "ptcp:6653:127.0.0.1",
    ]);
    for p in ["p1", "p2"] {
        ovs.vsctl(&[
            "add-port",
            "br0",
            p,
            "--",
            "set",
            "interface",
            p,
            "type=internal",
        ]);
    }
    let target = "tcp:127.0.0.1:6653";
    let end = Instant::now() + Duration::from_secs(20);
    while !ns.try_exec(&["ovs-ofctl", "show", target]).status.success() {
        assert!(Instant::now() < end, "ovs-vswitchd does not listen");
        std::thread::sleep(Duration::from_millis(200));
    }
    let ocap = dir.path().join("ovs.pcap");
    let t = capture(Some(&ns), 6653, &ocap);
    script(Some(&ns), target);
    stop(t);

    let all = messages(&vcap, port, "frame", false);
    for v in ["1.0", "1.3", "1.4", "1.5"] {
        let n = all.iter().filter(|id| id.starts_with(v)).count();
        assert!(
            n >= 10,
            "only {n} OpenFlow {v} messages from vireod decoded: {all:?}"
        );
    }
    let bad = "_ws.malformed || _ws.expert.severity >= error";
    let fv: BTreeSet<String> = messages(&vcap, port, bad, true).into_iter().collect();
    let fo: BTreeSet<String> = messages(&ocap, 6653, bad, true).into_iter().collect();
    let worse: Vec<&String> = fv.difference(&fo).collect();
    assert!(
        worse.is_empty(),
        "Wireshark flags messages of vireod that it does not flag for OVS: {worse:?} \
         (vireod flagged {fv:?}; OVS flagged {fo:?})"
    );
    eprintln!("flagged by Wireshark 4.0 — vireod: {fv:?}; OVS: {fo:?}");
}
