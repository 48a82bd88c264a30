//! Test harness: runs the real `vireod` in a temporary run directory and the real `vireoctl`
//! against it.
#![allow(dead_code)]
pub mod host;
pub mod ovs;
pub mod tunnels;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const VIREOD: &str = env!("CARGO_BIN_EXE_vireod");
pub const VIREOCTL: &str = env!("CARGO_BIN_EXE_vireoctl");

/// A running daemon; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub run_dir: PathBuf,
}

/// What a `vireoctl` run printed.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn spawn_daemon(run_dir: &Path, extra: &[&str]) -> Child {
    Command::new(VIREOD)
        .arg("--run-dir")
        .arg(run_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vireod")
}

impl Daemon {
    /// Starts vireod and waits until its control socket answers.
    pub fn start(run_dir: &Path) -> Daemon {
        Daemon::start_with(run_dir, &[])
    }

    pub fn start_with(run_dir: &Path, extra: &[&str]) -> Daemon {
        let child = spawn_daemon(run_dir, extra);
        let d = Daemon {
            child,
            run_dir: run_dir.to_path_buf(),
        };
        d.wait_ready();
        d
    }

    /// Starts vireod (PMD on core 0) with its log in the file `log` instead of a pipe nobody
    /// reads (a chatty daemon would fill the pipe and block).
    pub fn start_logged(run_dir: &Path, log: &Path) -> Daemon {
        let child = Command::new(VIREOD)
            .arg("--run-dir")
            .arg(run_dir)
            .args(["--pmd-cores", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("create the daemon's log"))
            .spawn()
            .expect("spawn vireod");
        let d = Daemon {
            child,
            run_dir: run_dir.to_path_buf(),
        };
        d.wait_ready();
        d
    }

    /// vireod inside network namespace `ns` (`ip netns exec`, which execs it: killing the
    /// child kills vireod), with its run directory and store in `dir` and its log in
    /// `dir/vireod.log`: one "host" of a multi-host test.
    pub fn start_in_netns(ns: &str, dir: &Path) -> Daemon {
        let log = std::fs::File::create(dir.join("vireod.log")).expect("create the daemon's log");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, VIREOD, "--run-dir"])
            .arg(dir)
            .arg("--db")
            .arg(dir.join("conf.db"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vireod in its namespace");
        let d = Daemon {
            child,
            run_dir: dir.to_path_buf(),
        };
        d.wait_ready();
        d
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ctl(&self.run_dir, &["version"]).code == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("vireod did not become ready in {}", self.run_dir.display());
    }

    pub fn ctl(&self, args: &[&str]) -> Out {
        ctl(&self.run_dir, args)
    }

    /// Runs vireoctl and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert_eq!(o.code, 0, "vireoctl {args:?} failed: {}", o.stderr);
        o.stdout
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).expect("vireoctl --json prints JSON")
    }

    /// SIGTERM and wait; returns the exit status code.
    pub fn stop(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let st = self.child.wait().ok()?;
        st.code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn ctl(run_dir: &Path, args: &[&str]) -> Out {
    let o = Command::new(VIREOCTL)
        .arg("--run-dir")
        .arg(run_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run vireoctl");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

pub mod peers;

/// Polls `f` every 50 ms until it returns true or `timeout` passes; one last try at the end.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Whether `xdp-mark=on` can work on this kernel (`xsk::kernel_allows_meta`: its verifier lets
/// XDP programs call `bpf_xdp_adjust_meta`). Where it cannot, checks that vireod refuses the
/// port `add` (an `add-port` with `xdp-mark=on`, run through `ctl`) with the verifier's
/// reason, and says on stderr that the marks go untested here; the caller then runs its other
/// checks without `xdp-mark`.
pub fn xdp_mark_usable(ctl: impl Fn(&[&str]) -> Out, add: &[&str]) -> bool {
    if xsk::kernel_allows_meta() {
        return true;
    }
    let o = ctl(add);
    assert_ne!(
        o.code, 0,
        "{add:?} succeeded on a kernel that refuses the helper"
    );
    assert!(
        o.stderr.contains("bpf_xdp_adjust_meta"),
        "{add:?} was refused without the reason: {}",
        o.stderr
    );
    eprintln!(
        "NOT TESTED HERE: this kernel's verifier refuses bpf_xdp_adjust_meta, so xdp-mark=on \
         cannot run (vireod refused {add:?} with the verifier's reason, as it should)"
    );
    false
}

/// A port's entry in `vireoctl show` (its kind's status included).
pub fn port_status(d: &Daemon, port: &str) -> serde_json::Value {
    let show = d.json(&["show"]);
    for b in show["bridges"].as_array().unwrap() {
        for p in b["ports"].as_array().unwrap() {
            if p["name"] == port {
                return p.clone();
            }
        }
    }
    panic!("no port {port} in show: {show}");
}

/// A port's counters (`vireoctl port-stats PORT`).
pub fn stats(d: &Daemon, port: &str) -> serde_json::Value {
    d.json(&["port-stats", port])[0].clone()
}
