//! A vhost-user port against a real VM: QEMU (TCG) boots Debian's kernel with a busybox
//! initramfs; the guest's virtio-net driver (Linux) pings an address the test answers from
//! behind the port (ARP and ICMP echo), with a normal MTU and with 9000-byte frames, which
//! need mergeable rx buffers. Linux negotiates event-idx and wants interrupts, so this checks
//! notification (call eventfd) handling too. Skipped, with the reason printed, when QEMU,
//! the kernel, busybox or cpio are missing.
use packet::{Batch, Pool};
use ports::vhost_user::VhostUserPort;
use ports::Port;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const OUR_IP: [u8; 4] = [10, 0, 0, 2];
const MODULES: [&str; 8] = [
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
];

fn kernel() -> Option<(PathBuf, PathBuf)> {
    let boot = std::fs::read_dir("/boot").ok()?;
    for e in boot.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(ver) = name.strip_prefix("vmlinuz-") {
            let m = Path::new("/lib/modules").join(ver).join("kernel");
            if m.join("drivers/net/virtio_net.ko").exists() {
                return Some((e.path(), m));
            }
        }
    }
    None
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists())
}

/// Builds the initramfs: busybox, the virtio-net modules and an init that pings.
fn initramfs(dir: &Path, modules: &Path, busybox: &Path) -> PathBuf {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let mut insmods = String::new();
    for m in MODULES {
        let name = Path::new(m)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::copy(
            modules.join(format!("{m}.ko")),
            root.join(format!("lib/{name}.ko")),
        )
        .unwrap();
        insmods.push_str(&format!("insmod /lib/{name}.ko\n"));
    }
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nmount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n{insmods}sleep 1\nip link set eth0 up\n\
         ip addr add 10.0.0.1/24 dev eth0\necho GUEST-UP\n\
         ping -c 10 -i 0.2 -W 5 10.0.0.2\nip link set eth0 mtu 9000\n\
         ping -c 5 -i 0.2 -W 5 -s 8000 10.0.0.2\necho GUEST-DONE\npoweroff -f\n"
    );
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::create_dir_all(root.join("sys")).unwrap();
    std::fs::write(root.join("init"), init).unwrap();
    let st = Command::new("chmod")
        .arg("755")
        .arg(root.join("init"))
        .status()
        .unwrap();
    assert!(st.success());
    let out = dir.join("initrd.gz");
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && find . | cpio -o -H newc 2>/dev/null | gzip -1 > {}",
            root.display(),
            out.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    out
}

fn csum(b: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Answers ARP requests and ICMP echo requests for 10.0.0.2, in place. False if not one.
fn answer(f: &mut [u8]) -> bool {
    if f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 1] && f[38..42] == OUR_IP {
        let (sha, spa) = (
            <[u8; 6]>::try_from(&f[22..28]).unwrap(),
            <[u8; 4]>::try_from(&f[28..32]).unwrap(),
        );
        f[0..6].copy_from_slice(&sha);
        f[6..12].copy_from_slice(&OUR_MAC);
        f[21] = 2;
        f[22..28].copy_from_slice(&OUR_MAC);
        f[28..32].copy_from_slice(&OUR_IP);
        f[32..38].copy_from_slice(&sha);
        f[38..42].copy_from_slice(&spa);
        return true;
    }
    let ihl = usize::from(f.get(14).copied().unwrap_or(0) & 0xf) * 4;
    if f.len() >= 14 + ihl + 8
        && f[12..14] == [0x08, 0x00]
        && f[23] == 1
        && f[30..34] == OUR_IP
        && f[14 + ihl] == 8
    {
        let src_mac = <[u8; 6]>::try_from(&f[6..12]).unwrap();
        f[0..6].copy_from_slice(&src_mac);
        f[6..12].copy_from_slice(&OUR_MAC);
        let src_ip = <[u8; 4]>::try_from(&f[26..30]).unwrap();
        f[26..30].copy_from_slice(&OUR_IP);
        f[30..34].copy_from_slice(&src_ip);
        let icmp = &mut f[14 + ihl..];
        icmp[0] = 0;
        icmp[2..4].copy_from_slice(&[0, 0]);
        let c = csum(icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        return true;
    }
    false
}

fn responder(
    port: Arc<VhostUserPort>,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    biggest: Arc<AtomicU64>,
) {
    let mut pool = Pool::new(0, 64);
    let mut b = Batch::new();
    while !stop.load(Relaxed) {
        if port.rx_burst(0, &mut pool, &mut b) == 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let mut n = 0;
        for p in b.as_mut_slice() {
            biggest.fetch_max(p.len() as u64, Relaxed);
            if answer(p.data_mut()) {
                n += 1;
            }
        }
        // Requests are answered in place; anything else (IPv6 noise) goes back too, harmlessly.
        port.tx_burst(0, &mut b);
        answered.fetch_add(n, Relaxed);
        pool.put_batch(&mut b);
    }
}

#[test]
fn linux_guest_in_qemu_pings_through_the_port() {
    qemu_ping(false);
}

/// The same guest on packed virtqueues (`packed=on`): Linux's virtio_net drives the packed
/// ring with interrupts, so event suppression and the used-flag handover are exercised too.
#[test]
fn linux_guest_in_qemu_pings_through_the_port_packed_ring() {
    qemu_ping(true);
}

fn qemu_ping(packed: bool) {
    let (Some(qemu), Some(busybox), Some(_cpio), Some((vmlinuz, modules))) = (
        which("qemu-system-x86_64"),
        which("busybox"),
        which("cpio"),
        kernel(),
    ) else {
        testkit::missing_peer(
            "qemu-system-x86_64, busybox, cpio or a kernel with virtio_net.ko",
            "qemu-system-x86 busybox-static cpio linux-image-amd64",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let initrd = initramfs(dir.path(), &modules, &busybox);
    let sock = dir.path().join("vm.sock");
    let port = VhostUserPort::server(&sock, 1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, biggest) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let t = {
        let (p, s, a, b) = (
            Arc::clone(&port),
            Arc::clone(&stop),
            Arc::clone(&answered),
            Arc::clone(&biggest),
        );
        std::thread::spawn(move || responder(p, s, a, b))
    };
    let mut child = Command::new(qemu)
        .args([
            "-accel",
            "tcg",
            "-cpu",
            "max",
            "-m",
            "256",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 panic=-1 rdinit=/init loglevel=4"])
        .args([
            "-object",
            "memory-backend-memfd,id=mem,size=256M,share=on",
            "-numa",
            "node,memdev=mem",
        ])
        .arg("-chardev")
        .arg(format!("socket,id=c0,path={}", sock.display()))
        .args(["-netdev", "vhost-user,id=n0,chardev=c0"])
        .args([
            "-device",
            &format!(
                "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,vectors=0{}",
                if packed { ",packed=on" } else { "" }
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut log = Vec::new();
    let end = Instant::now() + Duration::from_secs(240);
    while Instant::now() < end {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(l) => {
                let done = l.contains("GUEST-DONE");
                log.push(l);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    let status = port.status();
    let _ = child.kill();
    let _ = child.wait();
    stop.store(true, Relaxed);
    t.join().unwrap();
    let log = log.join("\n");
    eprintln!("{log}\nport: {status}\n{:?}", port.stats());
    assert!(log.contains("GUEST-DONE"), "guest did not finish");
    let losses: Vec<&str> = log.lines().filter(|l| l.contains("packet loss")).collect();
    assert_eq!(losses.len(), 2, "{losses:?}");
    assert!(
        losses.iter().all(|l| l.contains(" 0% packet loss")),
        "{losses:?}"
    );
    assert!(answered.load(Relaxed) >= 15);
    assert!(biggest.load(Relaxed) >= 8000, "no jumbo frame seen");
    let feats: Vec<String> = serde_json::from_value(status["features"].clone()).unwrap();
    assert_eq!(
        feats.iter().any(|x| x == "ring_packed"),
        packed,
        "packed ring negotiation: {feats:?}"
    );
    for f in ["version_1", "mrg_rxbuf", "event_idx"] {
        assert!(
            feats.iter().any(|x| x == f),
            "{f} not negotiated: {feats:?}"
        );
    }
    assert_eq!(status["broken_queues"], 0);
    assert_eq!(
        status["protocol_errors"], 0,
        "QEMU sent something we refused"
    );
}
