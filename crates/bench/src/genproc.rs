//! Runs vireo-gen (the binary next to vireo-bench) as a child pinned to the generator core
//! and reads its JSON report.
//!
//! Threads: vireo-bench's main thread.
use crate::contender::{Contender, Ports};
use crate::gen::GenReport;
use crate::proc::{command, CpuShare, Proc};
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        format!("--trial-secs={}", plan.trial_secs),
        format!("--warmup-secs={}", plan.warmup_secs),
        format!("--max-trials={}", plan.max_trials),
        format!("--core={}", plan.core),
        format!("--json={}", json.display()),
    ];
    if ports.gen_server {
        a.push("--server".into());
    }
    if !plan.loss_ppm.is_empty() {
        a.push("--search".into());
        let l: Vec<String> = plan.loss_ppm.iter().map(|x| x.to_string()).collect();
        a.push(format!("--loss-ppm={}", l.join(",")));
    }
    a
}

/// Runs vireo-gen and returns its report and the CPU shares (switch, generator) over the
/// measurement; the switch's statistics are cleared once vireo-gen is connected and warm
/// (approximately: after the warm-up time).
pub fn run(
    ports: &Ports,
    sc: &Scenario,
    plan: &GenPlan,
    dir: &Path,
    sw: &mut dyn Contender,
) -> Result<(GenReport, Option<f64>, Option<f64>), String> {
    let json = dir.join("vireo-gen.json");
    let _ = std::fs::remove_file(&json);
    let a = args(ports, sc, plan, &json);
    let mut p = Proc::spawn(
        "vireo-gen",
        command(vireo_gen_path()).args(&a),
        &dir.join("vireo-gen.log"),
    )?;
    std::thread::sleep(Duration::from_secs_f64(plan.warmup_secs + 1.0));
    sw.clear_stats();
    let sw_share = sw.pid().and_then(CpuShare::start);
    let gen_share = CpuShare::start(p.pid());
    let trials = 1 + plan.loss_ppm.len() * plan.max_trials.max(1);
    let limit = 60.0 + plan.warmup_secs + trials as f64 * (plan.trial_secs + 0.6);
    let mut gen_cpu = None;
    let end = std::time::Instant::now() + Duration::from_secs_f64(limit);
    while p.running() && std::time::Instant::now() < end {
        // Sample just before it exits (trials, then a drain of at most 0.5 s).
        gen_cpu = gen_share.as_ref().and_then(CpuShare::end).or(gen_cpu);
        std::thread::sleep(Duration::from_millis(50));
    }
    let switch_cpu = sw_share.and_then(|s| s.end());
    p.wait(Duration::from_secs(1))?;
    let s = std::fs::read_to_string(&json).map_err(|e| format!("vireo-gen report: {e}"))?;
    let r = serde_json::from_str(&s).map_err(|e| format!("vireo-gen report: {e}"))?;
    Ok((r, switch_cpu, gen_cpu))
}
