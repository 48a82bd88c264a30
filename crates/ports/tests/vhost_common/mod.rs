//! Shared helpers for the vhost-user integration tests: a dpdk-testpmd process driven over
//! stdin, and a port-to-port forwarding thread.
#![allow(dead_code)]

use packet::{Batch, Packet, Pool};
use ports::vhost_user::VhostUserPort;
use ports::Port;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One testpmd at a time: the machine has two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// Path of dpdk-testpmd, or None (with the reason printed) if it is not installed.
pub fn testpmd_bin() -> Option<PathBuf> {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join("dpdk-testpmd");
        if p.exists() {
            return Some(p);
        }
    }
    testkit::missing_peer("dpdk-testpmd", "dpdk");
    None
}

/// A running testpmd; killed on drop.
pub struct Testpmd {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    prefix: String,
    pub log: Vec<String>,
}

impl Testpmd {
    /// Starts testpmd with the given vdevs and application args (after `--`).
    pub fn start(bin: &Path, prefix: &str, vdevs: &[String], app: &[&str]) -> Testpmd {
        // testpmd's stdout is a pipe here: make it line-buffered so replies arrive promptly.
        let mut cmd = Command::new("stdbuf");
        cmd.arg("-oL").arg(bin);
        cmd.args([
            "--lcores",
            "0@0,1@1",
            "-n",
            "1",
            "--no-pci",
            "--no-huge",
            "-m",
            "1024",
        ])
        .arg(format!("--file-prefix={prefix}"))
        .args(["--log-level", "pmd.net.virtio.*:info"]);
        for v in vdevs {
            cmd.arg("--vdev").arg(v);
        }
        cmd.arg("--")
            .args([
                "--nb-cores=1",
                "--txd=1024",
                "--rxd=1024",
                "--total-num-mbufs=16384",
            ])
            .args(app)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn dpdk-testpmd");
        let (tx, rx) = channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx2.send(format!("E: {l}"));
            }
        });
        let stdin = child.stdin.take();
        Testpmd {
            child,
            stdin,
            lines: rx,
            prefix: prefix.to_string(),
            log: Vec::new(),
        }
    }

    /// Sends one interactive command.
    pub fn cmd(&mut self, c: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{c}");
            let _ = s.flush();
        }
    }

    /// Collects output until a line contains `pat`; returns the lines since the call.
    pub fn wait_for(&mut self, pat: &str, timeout: Duration) -> Result<Vec<String>, String> {
        let end = Instant::now() + timeout;
        let mut got = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.log.push(l.clone());
                    let hit = l.contains(pat);
                    got.push(l);
                    if hit {
                        return Ok(got);
                    }
                }
                Err(_) => {
                    return Err(format!(
                        "testpmd: no '{pat}' within {timeout:?}; threads: {}; output:\n{}",
                        self.threads(),
                        self.log.join("\n")
                    ))
                }
            }
        }
    }

    /// Name, state and wait channel of each testpmd thread (diagnostics).
    pub fn threads(&self) -> String {
        let dir = format!("/proc/{}/task", self.child.id());
        let mut v = Vec::new();
        for t in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let rd = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            let stat = rd("stat");
            let state = stat
                .split(") ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .unwrap_or("?")
                .to_string();
            v.push(format!(
                "{}:{}:{}",
                rd("comm").trim(),
                state,
                rd("wchan").trim()
            ));
        }
        v.join(", ")
    }

    /// Drains pending output for `d`.
    pub fn drain_for(&mut self, d: Duration) -> Vec<String> {
        let end = Instant::now() + d;
        let mut got = Vec::new();
        while let Ok(l) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.log.push(l.clone());
            got.push(l);
        }
        got
    }

    /// Per port `(rx_packets, tx_packets)` from `show port stats all`.
    pub fn port_stats(&mut self, ports: usize) -> Vec<(u64, u64)> {
        self.cmd("show port stats all");
        let mut v = Vec::new();
        for p in 0..ports {
            self.wait_for(
                &format!("NIC statistics for port {p}"),
                Duration::from_secs(10),
            )
            .expect("port stats header");
            let lines = self
                .wait_for("TX-packets", Duration::from_secs(10))
                .expect("port stats");
            let rx = lines
                .iter()
                .find_map(|l| field(l, "RX-packets:"))
                .unwrap_or(0);
            let tx = lines
                .iter()
                .find_map(|l| field(l, "TX-packets:"))
                .unwrap_or(0);
            v.push((rx, tx));
        }
        v
    }

    /// Waits until testpmd has finished starting and answers commands.
    pub fn sync(&mut self) {
        self.cmd("show config fwd");
        self.wait_for("packet forwarding - ports=", Duration::from_secs(60))
            .expect("testpmd ready");
    }

    /// Stops forwarding and waits until testpmd says so.
    pub fn stop_fwd(&mut self) {
        self.cmd("stop");
        self.wait_for("Accumulated forward statistics", Duration::from_secs(10))
            .expect("stop");
        self.wait_for("Done", Duration::from_secs(10))
            .expect("stop done");
    }

    /// Asks testpmd to quit and waits a little; kills it otherwise.
    pub fn quit(mut self) {
        self.cmd("quit");
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills testpmd now (SIGKILL), as a crashing VM would go.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // EAL's runtime directory for our --file-prefix (it stays after exit).
        let mut dirs = vec![PathBuf::from("/var/run/dpdk")];
        if let Ok(x) = std::env::var("XDG_RUNTIME_DIR") {
            dirs.push(Path::new(&x).join("dpdk"));
        }
        for d in dirs {
            let _ = std::fs::remove_dir_all(d.join(&self.prefix));
        }
    }
}

fn field(line: &str, key: &str) -> Option<u64> {
    let i = line.find(key)?;
    line[i + key.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the forwarding thread saw.
#[derive(Default)]
pub struct FwdStats {
    /// Packets moved A → B and B → A.
    pub a_to_b: AtomicU64,
    pub b_to_a: AtomicU64,
    /// Packets per queue pair index (A side rx), up to 4 pairs.
    pub per_queue: [AtomicU64; 4],
    /// Packets that failed the content check.
    pub bad: AtomicU64,
    /// Packets checked.
    pub checked: AtomicU64,
    /// Nanoseconds spent in loop iterations that moved packets (busy time).
    pub busy_ns: AtomicU64,
    /// Non-empty rx bursts.
    pub bursts: AtomicU64,
    /// Nanoseconds inside non-empty rx_burst calls and the tx_burst calls after them.
    pub rx_ns: AtomicU64,
    pub tx_ns: AtomicU64,
    /// Histograms of ns per packet (1 ns buckets) of each non-empty rx burst and the tx burst
    /// after it; medians are robust to the forwarder being preempted on a shared machine.
    pub rx_hist: Mutex<Vec<u64>>,
    pub tx_hist: Mutex<Vec<u64>>,
}

/// Checks a frame testpmd made with txonly and forwarded in `mac` mode: its source MAC is the
/// sending testpmd port's, it is IPv4/UDP 198.18.0.1 → 198.18.0.2 port 9 with a valid IP
/// header checksum.
pub fn frame_ok(f: &[u8], src_mac: [u8; 6]) -> bool {
    if f.len() < 42 || f[6..12] != src_mac || f[12..14] != [0x08, 0x00] {
        return false;
    }
    let ip = &f[14..34];
    let mut sum = 0u32;
    for c in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[0] == 0x45
        && ip[9] == 17
        && sum == 0xffff
        && ip[12..16] == [198, 18, 0, 1]
        && ip[16..20] == [198, 18, 0, 2]
        && f[34..38] == [0, 9, 0, 9]
}

/// MAC of testpmd's vdev `i` in these tests.
pub fn mac(i: u8) -> [u8; 6] {
    [0, 1, 2, 3, 4, 5 + i]
}

/// Port-to-port forwarding thread: A rx → B tx, B rx → A tx on every queue pair, optionally
/// checking content (source MACs 0 on A, 1 on B).
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<FwdStats>,
}

impl Forwarder {
    pub fn start(
        a: Arc<VhostUserPort>,
        b: Arc<VhostUserPort>,
        check: bool,
        pin: Option<usize>,
    ) -> Forwarder {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(FwdStats::default());
        let (s, st) = (Arc::clone(&stop), Arc::clone(&stats));
        let thread = std::thread::spawn(move || {
            if let Some(cpu) = pin {
                let mut set = rustix::thread::CpuSet::new();
                set.set(cpu);
                let _ = rustix::thread::sched_setaffinity(None, &set);
            }
            fwd_loop(&a, &b, check, &s, &st)
        });
        Forwarder {
            stop,
            thread: Some(thread),
            stats,
        }
    }

    pub fn stop(mut self) -> Arc<FwdStats> {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("forwarder panicked");
        }
        Arc::clone(&self.stats)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn check_batch(b: &Batch, src: [u8; 6], st: &FwdStats) {
    let bad = b
        .as_slice()
        .iter()
        .filter(|p: &&Packet| !frame_ok(p.data(), src))
        .count() as u64;
    st.bad.fetch_add(bad, Relaxed);
    st.checked.fetch_add(b.len() as u64, Relaxed);
}

/// Median of a 1-ns-bucket histogram.
pub fn median(h: &[u64]) -> usize {
    let total: u64 = h.iter().sum();
    let mut acc = 0;
    for (i, n) in h.iter().enumerate() {
        acc += n;
        if acc * 2 >= total {
            return i;
        }
    }
    0
}

const HIST: usize = 4096;

fn fwd_loop(a: &VhostUserPort, b: &VhostUserPort, check: bool, stop: &AtomicBool, st: &FwdStats) {
    let mut rx_hist = vec![0u64; HIST];
    let mut tx_hist = vec![0u64; HIST];
    fwd_run(a, b, check, stop, st, &mut rx_hist, &mut tx_hist);
    *st.rx_hist.lock().unwrap() = rx_hist;
    *st.tx_hist.lock().unwrap() = tx_hist;
}

fn fwd_run(
    a: &VhostUserPort,
    b: &VhostUserPort,
    check: bool,
    stop: &AtomicBool,
    st: &FwdStats,
    rx_hist: &mut [u64],
    tx_hist: &mut [u64],
) {
    let mut pool = Pool::new(0, 512);
    let mut batch = Batch::new();
    let queues = a.n_rxq().min(b.n_rxq());
    let mut idle = 0u32;
    while !stop.load(Relaxed) {
        let t0 = Instant::now();
        let mut moved = 0;
        for q in 0..queues {
            for (src, dst, src_mac, dir) in [(a, b, mac(0), &st.a_to_b), (b, a, mac(1), &st.b_to_a)]
            {
                let t1 = Instant::now();
                let n = src.rx_burst(q, &mut pool, &mut batch);
                if n == 0 {
                    continue;
                }
                let t2 = Instant::now();
                if check {
                    check_batch(&batch, src_mac, st);
                }
                let t3 = Instant::now();
                dst.tx_burst(q, &mut batch);
                let t4 = Instant::now();
                pool.put_batch(&mut batch);
                let (rx, tx) = ((t2 - t1).as_nanos() as u64, (t4 - t3).as_nanos() as u64);
                st.rx_ns.fetch_add(rx, Relaxed);
                st.tx_ns.fetch_add(tx, Relaxed);
                rx_hist[((rx / n as u64) as usize).min(HIST - 1)] += 1;
                tx_hist[((tx / n as u64) as usize).min(HIST - 1)] += 1;
                dir.fetch_add(n as u64, Relaxed);
                if std::ptr::eq(src, a) {
                    st.per_queue[q.min(3)].fetch_add(n as u64, Relaxed);
                }
                moved += n;
            }
        }
        if moved > 0 {
            st.bursts.fetch_add(1, Relaxed);
            st.busy_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        }
        if moved == 0 && check {
            idle += 1;
            if idle.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
    }
}

/// Waits until `f` holds or the timeout passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}
