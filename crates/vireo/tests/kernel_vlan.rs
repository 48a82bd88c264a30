//! VLAN access and trunk ports on kernel-facing ports (`af-packet`, `af-xdp`) against the real
//! kernel: three network namespaces on one NORMAL bridge, two access ports (VLAN 100 and
//! 200) and a trunk (100, 200). This kernel has no 8021q module (`ip link add ... type vlan`
//! fails), so frames are sent and captured with Python's packet sockets: tagged frames on the
//! trunk's veth are read back with `PACKET_AUXDATA`, where the receiving veth puts the tag it
//! strips.
//!
//! Names: namespaces `vkv-T-X-PID`, interfaces `vkvTXPID` (T = test letter, X = side), all
//! removed by Drop guards, also when a test fails.
mod common;

use common::host::{kernel_ok, must, Ns};
use common::Daemon;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The daemons' PMDs poll the same cores: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Prints `SRC-MAC VLAN` (VLAN `-` for untagged) for every frame of EtherType 0x88b5 that
/// arrives on the interface in the next `secs` seconds; the tag comes from the auxdata the
/// kernel attaches when the veth stripped it, or from the frame itself.
const CAPTURE: &str = r#"
import socket, struct, sys, time
ifname, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((ifname, 0))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
s.settimeout(0.1)
print("READY", flush=True)
end = time.time() + secs
while time.time() < end:
    try:
        d, anc, _, addr = s.recvmsg(65535, socket.CMSG_SPACE(32))
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    vlan = None
    for lvl, typ, data in anc:
        if lvl == 263 and typ == 8 and len(data) >= 20:
            status, _, _, _, _, tci, _ = struct.unpack("IIIHHHH", data[:20])
            if status & 0x10:  # TP_STATUS_VLAN_VALID
                vlan = tci & 0xfff
    etype = d[12:14]
    if d[12:14] == b"\x81\x00":
        vlan, etype = struct.unpack("!H", d[14:16])[0] & 0xfff, d[16:18]
    if etype == b"\x88\xb5":
        print(d[6:12].hex(), "-" if vlan is None else vlan, flush=True)
"#;

fn capture(ns: &Ns, secs: u32) -> Child {
    let v = ns.cmd(&["python3", "-c", CAPTURE, &ns.ns_if, &secs.to_string()]);
    let mut c = Command::new(&v[0])
        .args(&v[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Wait for READY so that no frame is sent before the socket is bound.
    use std::io::BufRead;
    let out = c.stdout.take().unwrap();
    let mut r = std::io::BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY", "capture in {} did not start", ns.name);
    c.stdout = Some(r.into_inner());
    c
}

fn collect(c: Child) -> Vec<(String, String)> {
    let out = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (m, v) = l.split_once(' ')?;
            Some((m.to_string(), v.to_string()))
        })
        .collect()
}

/// A broadcast frame of EtherType 0x88b5 from MAC 02:00:00:00:d5:`id`, tagged with `vlan`.
fn frame(id: u8, vlan: Option<u16>) -> String {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0xd5, id]);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&[id; 46]);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac(id: u8) -> String {
    format!("02000000d5{id:02x}")
}

fn send(ns: &Ns, hex: &str) {
    let py = format!(
        "import socket; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
         s.bind(('{}', 0)); s.send(bytes.fromhex('{hex}'))",
        ns.ns_if
    );
    ns.exec(&["python3", "-c", &py]);
}

fn access_and_trunk(kind: &str, test: char) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_ok() || !testkit::require_peer("python3", "python3") {
        return;
    }
    let a = Ns::create("vkv", test, 'a');
    let c = Ns::create("vkv", test, 'c');
    let t = Ns::create("vkv", test, 't');
    for ns in [&a, &c, &t] {
        must(&["ip", "link", "set", &ns.host_if, "up"]);
    }
    let dir = tempfile::Builder::new()
        .prefix(&format!("vkv-{test}-"))
        .tempdir()
        .unwrap();
    let d = Daemon::start_with(&dir.path().join("run"), &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    for (name, ns, vlan) in [
        ("a", &a, "tag=100"),
        ("c", &c, "tag=200"),
        ("t", &t, "trunks=100,200"),
    ] {
        d.ok(&[
            "add-port",
            "br0",
            name,
            &format!("type={kind}"),
            &format!("ifname={}", ns.host_if),
            vlan,
        ]);
    }
    d.ok(&["add-flow", "br0", "actions=NORMAL"]);
    std::thread::sleep(Duration::from_millis(300));
    let caps = [capture(&a, 4), capture(&c, 4), capture(&t, 4)];
    // Access ports: untagged in, tagged with their VLAN on the trunk.
    send(&a, &frame(0x0a, None));
    send(&c, &frame(0x0c, None));
    // Trunk: each allowed VLAN reaches its access port untagged; VLAN 300 is not carried.
    send(&t, &frame(0x1a, Some(100)));
    send(&t, &frame(0x2c, Some(200)));
    send(&t, &frame(0x3f, Some(300)));
    // An access port ignores a frame that arrives already tagged with another VLAN.
    send(&a, &frame(0x4a, Some(200)));
    let [ca, cc, ct] = caps;
    let (ga, gc, gt) = (collect(ca), collect(cc), collect(ct));
    let stats = d.ok(&["port-stats"]);
    let ctx = format!("{kind}: a={ga:?} c={gc:?} t={gt:?}\n{stats}");
    let has = |v: &[(String, String)], id: u8, vlan: &str| {
        v.iter().any(|(m, t)| *m == mac(id) && t == vlan)
    };
    let seen = |v: &[(String, String)], id: u8| v.iter().any(|(m, _)| *m == mac(id));
    assert!(
        has(&gt, 0x0a, "100"),
        "a's frame not on the trunk as VLAN 100: {ctx}"
    );
    assert!(
        has(&gt, 0x0c, "200"),
        "c's frame not on the trunk as VLAN 200: {ctx}"
    );
    assert!(
        has(&ga, 0x1a, "-"),
        "trunk VLAN 100 not at access a untagged: {ctx}"
    );
    assert!(
        has(&gc, 0x2c, "-"),
        "trunk VLAN 200 not at access c untagged: {ctx}"
    );
    for (id, who, v) in [
        (0x0a, "c", &gc),
        (0x0c, "a", &ga),
        (0x1a, "c", &gc),
        (0x2c, "a", &ga),
        (0x3f, "a", &ga),
        (0x3f, "c", &gc),
    ] {
        assert!(!seen(v, id), "frame {id:#x} leaked to {who}: {ctx}");
    }
    assert!(
        !seen(&gt, 0x4a) && !seen(&gc, 0x4a),
        "a tagged frame on access port a was forwarded: {ctx}"
    );
}

#[test]
fn af_packet_access_and_trunk_ports() {
    access_and_trunk("af-packet", 'p');
}

#[test]
fn af_xdp_access_and_trunk_ports() {
    access_and_trunk("af-xdp", 'x');
}
