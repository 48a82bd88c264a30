//! Child processes of vireo-bench: spawning with output to a log file, stopping by pid
//! (SIGINT, then SIGKILL), running short commands, waiting for sockets, and checking that
//! the measurement cores are quiet.
//!
//! Threads: vireo-bench's main thread.
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

static REALTIME: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`command`] start the switches and generators with SCHED_RR priority 1 (`chrt`),
/// so that other work on a shared machine cannot preempt them (RT throttling still leaves
/// it 5% of each core).
pub fn set_realtime(on: bool) {
    REALTIME.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`set_realtime`] is on.
pub fn realtime() -> bool {
    REALTIME.load(std::sync::atomic::Ordering::Relaxed)
}

/// A command for a switch or generator process, under `chrt -r 1` when realtime is set.
pub fn command(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    if REALTIME.load(std::sync::atomic::Ordering::Relaxed) {
        let mut c = Command::new("chrt");
        c.args(["-r", "1"]).arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

/// A child we started; stopped when dropped.
pub struct Proc {
    child: Child,
    name: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with stdin from /dev/null and stdout+stderr appended to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Result<Proc, String> {
        Proc::spawn_stdin(name, cmd, log, Stdio::null())
    }

    /// [`Proc::spawn`] with its standard input piped: the pipe's write end is returned.
    pub fn spawn_piped(
        name: &str,
        cmd: &mut Command,
        log: &Path,
    ) -> Result<(Proc, std::process::ChildStdin), String> {
        let mut p = Proc::spawn_stdin(name, cmd, log, Stdio::piped())?;
        let stdin = p
            .child
            .stdin
            .take()
            .ok_or_else(|| format!("{name}: no stdin"))?;
        Ok((p, stdin))
    }

    fn spawn_stdin(
        name: &str,
        cmd: &mut Command,
        log: &Path,
        stdin: Stdio,
    ) -> Result<Proc, String> {
        let f = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let f2 = f.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(stdin)
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| format!("start {name}: {e}"))?;
        Ok(Proc {
            child,
            name: name.to_string(),
            log: log.to_path_buf(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Bytes logged so far.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// The last `n` lines of the log (for error messages).
    pub fn log_tail(&self, n: usize) -> String {
        let t = self.log_text();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Sends SIGINT, waits up to `grace`, then SIGKILL; returns whether it exited cleanly.
    pub fn stop(&mut self, grace: Duration) -> bool {
        if !self.running() {
            return true;
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGINT);
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("vireo-bench: {} did not stop; killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }

    /// Waits for it to exit by itself, up to `timeout`; kills it after that.
    pub fn wait(&mut self, timeout: Duration) -> Result<(), String> {
        let end = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => {
                    return Err(format!("{} failed ({st}): {}", self.name, self.log_tail(5)))
                }
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    self.stop(Duration::from_secs(2));
                    return Err(format!("{} timed out after {timeout:?}", self.name));
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Runs a short command; its stdout on success, else an error with its stderr.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{:?} {:?}: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether `bin` is on PATH (or is an executable path).
pub fn which(bin: &str) -> Option<PathBuf> {
    if bin.contains('/') {
        return Path::new(bin).is_file().then(|| PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Waits until `p` exists.
pub fn wait_for_path(p: &Path, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    p.exists()
}

/// Stops the process whose pid is in `pidfile` (SIGTERM, then SIGKILL after `grace`).
pub fn kill_pidfile(pidfile: &Path, grace: Duration) {
    let Some(pid) = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return;
    };
    let pid = Pid::from_raw(pid);
    let _ = kill(pid, Signal::SIGTERM);
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if kill(pid, None).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill(pid, Signal::SIGKILL);
}

/// CPU seconds (user + system) process `pid` has used so far, from /proc/PID/stat.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_seconds(&s, 100.0)
}

fn parse_cpu_seconds(stat: &str, hz: f64) -> Option<f64> {
    // The command name (field 2) may hold spaces; fields after its ')' are fixed.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / hz)
}

/// Measures the share of one core a process got over a window (1.0 = never preempted, for
/// a busy-polling process).
pub struct CpuShare {
    pid: u32,
    cpu0: f64,
    t0: Instant,
}

impl CpuShare {
    /// Starts the window.
    pub fn start(pid: u32) -> Option<CpuShare> {
        Some(CpuShare {
            pid,
            cpu0: cpu_seconds(pid)?,
            t0: Instant::now(),
        })
    }

    /// Ends it: CPU seconds used / wall seconds.
    pub fn end(&self) -> Option<f64> {
        let used = cpu_seconds(self.pid)? - self.cpu0;
        Some(used / self.t0.elapsed().as_secs_f64().max(1e-6))
    }
}

/// Gives SCHED_RR priority 1 to the threads of `pid` that busy-poll: over 300 ms, the
/// busiest thread and any using at least half as much (PMD threads, not the control threads
/// that share their core; on a loaded machine a poller may get only a third of its core
/// before this), and every thread named `pmd*` (Vireo's `pmd-N`, OVS's `pmd-cNN/id:N`),
/// which on a machine loaded to 9 runnable threads a core gets too little to be seen as busy.
/// Returns the thread ids changed.
pub fn realtime_pollers(pid: u32) -> Vec<u32> {
    let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let cpu = |tid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|s| parse_cpu_seconds(&s, 100.0))
    };
    let before: Vec<(u32, f64)> = tids.iter().filter_map(|&t| Some((t, cpu(t)?))).collect();
    std::thread::sleep(Duration::from_millis(300));
    let used: Vec<(u32, f64)> = before
        .into_iter()
        .filter_map(|(t, c0)| Some((t, cpu(t)? - c0)))
        .collect();
    let mut tids = pollers(&used);
    for (t, _) in &used {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"));
        if comm.is_ok_and(|c| c.starts_with("pmd")) && !tids.contains(t) {
            tids.push(*t);
        }
    }
    tids.into_iter()
        .filter(|tid| run(Command::new("chrt").args(["-r", "-p", "1", &tid.to_string()])).is_ok())
        .collect()
}

/// The busy pollers among `(thread, CPU seconds over 300 ms)`: the busiest if it used at
/// least 10% of a core, and every thread using at least half as much.
fn pollers(used: &[(u32, f64)]) -> Vec<u32> {
    let max = used.iter().map(|u| u.1).fold(0.0, f64::max);
    if max < 0.03 {
        return Vec::new();
    }
    used.iter()
        .filter(|u| u.1 >= max / 2.0)
        .map(|u| u.0)
        .collect()
}

fn cpu_times(stat: &str, core: usize) -> Option<(u64, u64)> {
    let line = stat
        .lines()
        .find(|l| l.starts_with(&format!("cpu{core} ")))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((v.iter().sum(), idle))
}

/// Busy share (0..1) of each of `cores` over `window`, from /proc/stat.
pub fn core_busy(cores: &[usize], window: Duration) -> Vec<f64> {
    let a = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    std::thread::sleep(window);
    let b = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    cores
        .iter()
        .map(|&c| match (cpu_times(&a, c), cpu_times(&b, c)) {
            (Some((t0, i0)), Some((t1, i1))) if t1 > t0 => {
                1.0 - (i1.saturating_sub(i0)) as f64 / (t1 - t0) as f64
            }
            _ => 0.0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_cpu_seconds() {
        let s = "1234 (my (odd) name) R 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_seconds(s, 100.0), Some(3.0));
        assert!(cpu_seconds(std::process::id()).is_some());
        assert!(parse_cpu_seconds("garbage", 100.0).is_none());
    }

    #[test]
    fn pollers_are_the_busiest_threads() {
        assert_eq!(pollers(&[(1, 0.01), (2, 0.12), (3, 0.0)]), vec![2]);
        assert_eq!(pollers(&[(1, 0.25), (2, 0.29), (3, 0.02)]), vec![1, 2]);
        assert!(pollers(&[(1, 0.01), (2, 0.02)]).is_empty());
        assert!(pollers(&[]).is_empty());
    }

    #[test]
    fn cpu_times_parse() {
        let s = "cpu  10 0 10 80 0 0 0\ncpu0 5 0 5 40 2 0 0 0 0 0\ncpu1 1 0 1 1 0\n";
        assert_eq!(cpu_times(s, 0), Some((52, 42)));
        assert_eq!(cpu_times(s, 1), Some((3, 1)));
        assert_eq!(cpu_times(s, 2), None);
    }

    #[test]
    fn spawn_log_and_stop() {
        let d = tempfile::tempdir().unwrap();
        let mut p = Proc::spawn(
            "sh",
            Command::new("sh").args(["-c", "echo hello; exec sleep 30"]),
            &d.path().join("log"),
        )
        .unwrap();
        assert!(wait_for_path(&d.path().join("log"), Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(200));
        assert!(p.running());
        assert_eq!(p.log_tail(1), "hello");
        assert!(p.stop(Duration::from_secs(2)));
        assert!(!p.running());
        assert!(run(Command::new("sh").args(["-c", "exit 3"])).is_err());
        assert_eq!(run(Command::new("echo").arg("x")).unwrap(), "x\n");
    }
}
