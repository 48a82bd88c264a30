//! Runs vireo-gen (the binary next to vireo-bench) as a child pinned to the generator core
//! and reads its JSON report.
//!
//! Threads: vireo-bench's main thread.
use crate::contender::{Contender, Ports};
use crate::gen::{GenReport, SAT_ACK, SAT_DONE, SAT_GO, SAT_READY, WARMING};
use crate::parse::PmdCycles;
use crate::proc::{command, CpuShare, Proc};
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The generators vireo-bench knows.
pub const GENERATORS: [&str; 3] = ["testpmd", "vireo-gen", BARE];
/// vireo-gen with `--no-stamp`, the instrument of the cross-check against testpmd.
pub const BARE: &str = "vireo-gen-bare";

/// How vireo-gen is asked to measure.
#[derive(Clone, Debug)]
pub struct GenPlan {
    /// Seconds per trial.
    pub trial_secs: f64,
    /// Loss thresholds (ppm) for the RFC 2544 search; empty = saturation trial only.
    pub loss_ppm: Vec<f64>,
    /// Most trials per threshold.
    pub max_trials: usize,
    /// Warm-up seconds.
    pub warmup_secs: f64,
    /// Generator core.
    pub core: usize,
    /// Frames without sequence numbers and timestamps, returns only counted (`--no-stamp`).
    pub bare: bool,
}

/// The vireo-gen binary: `VIREO_GEN` if set, else next to the running executable.
pub fn vireo_gen_path() -> PathBuf {
    if let Some(p) = std::env::var_os("VIREO_GEN") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("vireo-gen")))
        .unwrap_or_else(|| PathBuf::from("vireo-gen"))
}

/// vireo-gen's arguments for one scenario.
pub fn args(ports: &Ports, sc: &Scenario, plan: &GenPlan, json: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--port0".into(),
        ports.socks[0].display().to_string(),
        "--port1".into(),
        ports.socks[1].display().to_string(),
        format!("--queues={}", sc.queues),
        format!("--size={}", sc.size),
        format!("--flows={}", sc.flows()),
        format!("--rules={}", sc.rule_count()),
        format!("--trial-secs={}", plan.trial_secs),
        format!("--warmup-secs={}", plan.warmup_secs.max(sc.warmup_secs())),
        // Connection setup: one trial at the saturation rate after the saturation trial, no
        // search (each trial adds millions of connections towards the limit).
        format!(
            "--max-trials={}",
            if sc.kind == crate::scenario::Kind::CtNew {
                0
            } else {
                plan.max_trials
            }
        ),
        format!("--core={}", plan.core),
        format!("--json={}", json.display()),
        format!(
            "--sync-dir={}",
            json.parent().unwrap_or(Path::new(".")).display()
        ),
    ];
    if ports.gen_server {
        a.push("--server".into());
    }
    if plan.bare {
        a.push("--no-stamp".into());
    }
    if !plan.loss_ppm.is_empty() {
        a.push("--search".into());
        let l: Vec<String> = plan.loss_ppm.iter().map(|x| x.to_string()).collect();
        a.push(format!("--loss-ppm={}", l.join(",")));
    }
    a
}

/// What one vireo-gen run gave.
pub struct GenRun {
    /// Its report.
    pub report: GenReport,
    /// The switch's PMD figures over the saturation trial.
    pub pmd: Option<PmdCycles>,
    /// Share of a core the switch got over the saturation trial.
    pub switch_cpu: Option<f64>,
    /// Share of a core vireo-gen got over it.
    pub gen_cpu: Option<f64>,
}

fn wait_for_file(p: &mut Proc, f: &Path, until: Instant) -> bool {
    while p.running() && Instant::now() < until {
        if f.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f.exists()
}

/// Runs vireo-gen and returns its report, with the switch's PMD statistics and both CPU
/// shares taken over the saturation trial (cleared when vireo-gen says it starts, read when
/// it says it ended: a few ms late at either end).
pub fn run(
    ports: &Ports,
    sc: &Scenario,
    plan: &GenPlan,
    dir: &Path,
    sw: &mut dyn Contender,
) -> Result<GenRun, String> {
    let json = dir.join("vireo-gen.json");
    let _ = std::fs::remove_file(&json);
    let a = args(ports, sc, plan, &json);
    let log = dir.join("vireo-gen.log");
    let mut p = Proc::spawn("vireo-gen", command(vireo_gen_path()).args(&a), &log)?;
    let trials = 1 + plan.loss_ppm.len() * plan.max_trials.max(1) * 3;
    let limit =
        60.0 + plan.warmup_secs.max(sc.warmup_secs()) + trials as f64 * (plan.trial_secs + 0.6);
    let end = Instant::now() + Duration::from_secs_f64(limit);
    let (mut pmd, mut switch_cpu, mut gen_cpu) = (None, None, None);
    // Some switches spin only while traffic flows: pick their polling threads during the
    // warm-up.
    if wait_for_file(&mut p, &dir.join(WARMING), end) {
        crate::testpmd::realtime_switch(sw);
    }
    if wait_for_file(&mut p, &dir.join(SAT_READY), end) {
        sw.clear_stats();
        let sw_share = sw.pid().and_then(CpuShare::start);
        let gen_share = CpuShare::start(p.pid());
        let _ = std::fs::write(dir.join(SAT_GO), b"");
        if wait_for_file(&mut p, &dir.join(SAT_DONE), end) {
            switch_cpu = sw_share.and_then(|s| s.end());
            gen_cpu = gen_share.and_then(|s| s.end());
            pmd = sw.pmd_cycles();
            let _ = std::fs::write(dir.join(SAT_ACK), b"");
        }
    }
    p.wait(end.saturating_duration_since(Instant::now()))?;
    let s = std::fs::read_to_string(&json).map_err(|e| format!("vireo-gen report: {e}"))?;
    let report = serde_json::from_str(&s).map_err(|e| format!("vireo-gen report: {e}"))?;
    Ok(GenRun {
        report,
        pmd,
        switch_cpu,
        gen_cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_follow_scenario_and_ports() {
        let ports = Ports {
            socks: [PathBuf::from("/r/vu0.sock"), PathBuf::from("/r/vu1.sock")],
            gen_server: true,
        };
        let plan = GenPlan {
            trial_secs: 2.0,
            loss_ppm: vec![0.0, 20.0],
            max_trials: 6,
            warmup_secs: 1.0,
            core: 1,
            bare: false,
        };
        let sc = Scenario::parse("flows1m:256:2q").unwrap();
        let a = args(&ports, &sc, &plan, Path::new("/d/vireo-gen.json")).join(" ");
        for want in [
            "--port0 /r/vu0.sock",
            "--queues=2",
            "--size=256",
            "--flows=1000000",
            "--server",
            "--search",
            "--loss-ppm=0,20",
            "--sync-dir=/d",
            "--core=1",
        ] {
            assert!(a.contains(want), "{want} missing in {a}");
        }
        let client = Ports {
            gen_server: false,
            ..ports
        };
        let plan = GenPlan {
            loss_ppm: vec![],
            bare: true,
            ..plan
        };
        let a = args(&client, &Scenario::p2p(64), &plan, Path::new("/d/g.json")).join(" ");
        assert!(!a.contains("--server") && !a.contains("--search"), "{a}");
        assert!(a.contains("--no-stamp"), "{a}");
        // A conntrack scenario with 1M connections: half a million flows per direction, and a
        // warm-up long enough to set them all up.
        let ct = Scenario::parse("ct1m:64").unwrap();
        let a = args(&client, &ct, &plan, Path::new("/d/g.json")).join(" ");
        assert!(a.contains("--flows=500000"), "{a}");
        assert!(a.contains("--warmup-secs=5"), "{a}");
        let a = args(&client, &Scenario::p2p(64), &plan, Path::new("/d/g.json")).join(" ");
        assert!(a.contains("--warmup-secs=1 "), "{a}");
    }

    #[test]
    fn saturation_handshake_files() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let t = std::thread::spawn(move || {
            crate::gen::handshake(&dir, SAT_READY, SAT_GO);
            std::fs::metadata(dir.join(SAT_GO)).is_ok()
        });
        let ready = d.path().join(SAT_READY);
        let end = Instant::now() + Duration::from_secs(5);
        while !ready.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ready.exists());
        std::fs::write(d.path().join(SAT_GO), b"").unwrap();
        assert!(t.join().unwrap(), "handshake returned before go");
    }
}
