//! Real peers for integration tests: DPDK testpmd (virtio-user frontends, driven interactively
//! through a pipe) and QEMU guests booted from a busybox initramfs.
#![allow(dead_code)]
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a peer cannot run here, if it cannot. Tests print it and return (CI installs the peers,
/// so there they always run).
pub fn missing(tool: &str) -> Option<String> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if found {
        return None;
    }
    let package = match tool {
        "dpdk-testpmd" => "dpdk",
        "qemu-system-x86_64" => "qemu-system-x86",
        "ovs-ofctl" => "openvswitch-common",
        other => other,
    };
    testkit::missing_peer(tool, package);
    Some(format!(
        "SKIPPED: {tool} is not installed (scripts/setup.sh installs it)"
    ))
}

/// Collects a child's output lines in the background.
#[derive(Clone, Default)]
pub struct Output(Arc<Mutex<String>>);

impl Output {
    fn follow(&self, r: impl std::io::Read + Send + 'static) {
        let buf = self.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let mut b = buf.lock().unwrap();
                b.push_str(&line);
                b.push('\n');
            }
        });
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits until the output contains `needle`; returns whether it did in time.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.0.lock().unwrap().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// One virtio-user port of a testpmd.
pub struct VirtioUser {
    pub path: PathBuf,
    pub mac: String,
    /// Extra vdev arguments such as `server=1`, `mrg_rxbuf=0`, `queues=2`.
    pub extra: String,
}

/// A running testpmd in interactive mode; killed on drop.
pub struct Testpmd {
    child: Child,
    stdin: ChildStdin,
    pub out: Output,
    /// Ports it was started with (what `show port stats all` reports on).
    ports: usize,
}

impl Testpmd {
    /// Starts testpmd on core 1 with the given ports and extra testpmd arguments (after `--`).
    pub fn start(prefix: &str, ports: &[VirtioUser], args: &[&str]) -> Testpmd {
        // testpmd's stdout is a pipe here: unbuffer it, or its prompt and replies (port
        // stats) stay in the stdio buffer and never arrive.
        let mut cmd = Command::new("stdbuf");
        cmd.args(["-o0", "-e0", "dpdk-testpmd"]);
        cmd.args([
            "--lcores",
            "0@1,1@1",
            "-n",
            "1",
            "--no-pci",
            "--no-huge",
            "-m",
            "1024",
        ])
        .arg(format!("--file-prefix={prefix}"));
        for (i, p) in ports.iter().enumerate() {
            let mut vdev = format!("net_virtio_user{i},mac={},path={}", p.mac, p.path.display());
            if !p.extra.is_empty() {
                vdev.push(',');
                vdev.push_str(&p.extra);
            }
            cmd.arg("--vdev").arg(vdev);
        }
        cmd.args(["--", "-i", "--nb-cores=1", "--total-num-mbufs=16384"]);
        cmd.args(args);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dpdk-testpmd");
        let out = Output::default();
        out.follow(child.stdout.take().unwrap());
        out.follow(child.stderr.take().unwrap());
        let stdin = child.stdin.take().unwrap();
        Testpmd {
            child,
            stdin,
            out,
            ports: ports.len(),
        }
    }

    /// Waits (up to 60 s) until testpmd has set up its ports and answers commands; panics
    /// with its output if it does not.
    pub fn wait_ready(&mut self) {
        self.cmd("show config fwd");
        assert!(
            self.out
                .wait_for("packet forwarding - ports=", Duration::from_secs(60)),
            "testpmd did not start:\n{}",
            self.out.text()
        );
    }

    /// Sends one interactive command.
    pub fn cmd(&mut self, line: &str) {
        let _ = writeln!(self.stdin, "{line}");
        let _ = self.stdin.flush();
    }

    /// Waits for the `testpmd>` prompt to appear `n` times in total.
    pub fn wait_prompts(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.out.text().matches("testpmd>").count() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// RX and TX packet counters of every port, from `show port stats all`.
    pub fn port_stats(&mut self) -> Vec<(u64, u64)> {
        let before = self.out.text().len();
        self.cmd("show port stats all");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = self.out.text();
            let fresh = &text[before.min(text.len())..];
            let stats = parse_port_stats(fresh);
            // Every port's block, each to its last line (testpmd prints them one by one: a
            // reader that stops after the first port's block sees one port).
            if stats.len() >= self.ports.max(1) && fresh.matches("Tx-pps").count() >= stats.len() {
                return stats;
            }
            if Instant::now() > deadline {
                return stats;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Quits and waits.
    pub fn quit(mut self) -> String {
        self.cmd("stop");
        self.cmd("quit");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.out.text()
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `RX-packets: N ... TX-packets: M` pairs from `show port stats` output, in port order.
pub fn parse_port_stats(text: &str) -> Vec<(u64, u64)> {
    let num_after = |line: &str, key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    let mut out = Vec::new();
    let mut rx = None;
    // Only `show port stats` blocks: the forward statistics a late `stop` prints (per port and
    // accumulated) have the same RX/TX lines and would be taken for ports.
    let mut nic = false;
    for line in text.lines() {
        if line.contains("statistics for port")
            || line.contains("Accumulated forward")
            || line.contains("Forward Stats")
        {
            nic = line.contains("NIC statistics for port");
            rx = None;
        }
        if !nic {
            continue;
        }
        if let Some(n) = num_after(line, "RX-packets:") {
            rx = Some(n);
        }
        if let Some(n) = num_after(line, "TX-packets:") {
            if let Some(r) = rx.take() {
                out.push((r, n));
            }
        }
    }
    out
}

/// The guest kernel, if QEMU, every tool in `tools` and a kernel image are there; otherwise
/// says what is missing (a failure under `VIREO_REQUIRE_PEERS=1`) and gives `None`.
pub fn guest_peers(tools: &[&str]) -> Option<PathBuf> {
    for tool in std::iter::once(&"qemu-system-x86_64").chain(tools) {
        if let Some(m) = missing(tool) {
            eprintln!("{m}");
            return None;
        }
    }
    let kernel = guest_kernel();
    if kernel.is_none() {
        testkit::missing_peer(
            "a /boot/vmlinuz-* kernel for the guest",
            "linux-image-amd64",
        );
    }
    kernel
}

/// Builds the test guest's initramfs (scripts/vm/mkinitramfs.sh) into `dir`.
pub fn build_initramfs(dir: &Path) -> PathBuf {
    let out = dir.join("initrd.gz");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vm/mkinitramfs.sh");
    let st = Command::new("bash")
        .arg(script)
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("run mkinitramfs.sh");
    assert!(st.success(), "mkinitramfs.sh failed");
    out
}

/// The newest Debian kernel image on this machine, if any.
pub fn guest_kernel() -> Option<PathBuf> {
    let mut k: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    k.sort();
    k.pop()
}

/// A QEMU guest (software emulation) with one virtio-net NIC on a vhost-user socket; killed on
/// drop. `server` makes QEMU the socket server (for Vireo's client-mode ports).
pub struct Guest {
    child: Child,
    pub out: Output,
}

impl Guest {
    pub fn boot(
        kernel: &Path,
        initrd: &Path,
        sock: &Path,
        server: bool,
        mac: &str,
        cmdline: &str,
    ) -> Guest {
        Guest::boot_with("tcg", None, kernel, initrd, sock, server, mac, cmdline)
    }

    /// As [`Guest::boot`], with the accelerator (`tcg`, or `kvm` for benchmarks where the
    /// machine has it) and, if given, QEMU pinned to one core.
    #[allow(clippy::too_many_arguments)]
    pub fn boot_with(
        accel: &str,
        core: Option<usize>,
        kernel: &Path,
        initrd: &Path,
        sock: &Path,
        server: bool,
        mac: &str,
        cmdline: &str,
    ) -> Guest {
        let cpu = if accel == "kvm" { "host" } else { "max" };
        let mut cmd = match core {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string(), "qemu-system-x86_64"]);
                t
            }
            None => Command::new("qemu-system-x86_64"),
        };
        let chardev = if server {
            format!("socket,id=c0,path={},server=on,wait=off", sock.display())
        } else {
            format!("socket,id=c0,path={},reconnect=1", sock.display())
        };
        let mut child = cmd
            .args(["-accel", accel, "-cpu", cpu, "-smp", "1", "-m", "256"])
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "stdio",
            ])
            .arg("-kernel")
            .arg(kernel)
            .arg("-initrd")
            .arg(initrd)
            .arg("-append")
            .arg(format!("console=ttyS0 quiet panic=-1 {cmdline}"))
            .args(["-object", "memory-backend-memfd,id=mem,size=256M,share=on"])
            .args(["-numa", "node,memdev=mem"])
            .arg("-chardev")
            .arg(chardev)
            .args(["-netdev", "vhost-user,id=n0,chardev=c0"])
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={mac},vectors=0"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn qemu-system-x86_64");
        let out = Output::default();
        out.follow(child.stdout.take().unwrap());
        out.follow(child.stderr.take().unwrap());
        Guest { child, out }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn testpmd_stats_parser_reads_every_port() {
    let text = "  ######################## NIC statistics for port 0  ########################
  RX-packets: 12         RX-missed: 0          RX-bytes:  768
  RX-errors: 0
  RX-nombuf:  0
  TX-packets: 34         TX-errors: 0          TX-bytes:  2176
  ######################## NIC statistics for port 1  ########################
  RX-packets: 5          RX-missed: 0          RX-bytes:  320
  TX-packets: 6          TX-errors: 0          TX-bytes:  384
";
    assert_eq!(parse_port_stats(text), vec![(12, 34), (5, 6)]);
    // A `stop`'s forward statistics arriving late, before the answer, are not ports.
    let late = "  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 1600           RX-dropped: 0             RX-total: 1600
  TX-packets: 1600           TX-dropped: 0             TX-total: 1600
  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 3168           RX-dropped: 0             RX-total: 3168
  TX-packets: 3232           TX-dropped: 0             TX-total: 3232
";
    assert_eq!(
        parse_port_stats(&format!("{late}{text}")),
        vec![(12, 34), (5, 6)]
    );
}
