//! Integration smoke test: `vireo-bench --quick` against the raw-DPDK contender (testpmd's
//! vhost PMD as the switch) with both generators, a few seconds long. Skips, saying why,
//! where dpdk-testpmd is missing. Numbers are not judged (CI machines are noisy); that the
//! run produced a throughput figure from each generator is.
//!
//! Threads: the test's own; the harness runs as a child process.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn quick_mode_against_raw_dpdk() {
    if !have("dpdk-testpmd") {
        testkit::missing_peer("dpdk-testpmd", "dpdk");
        return;
    }
    if Path::new("/proc/cpuinfo").exists()
        && std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .matches("processor")
            .count()
            < 2
    {
        eprintln!("SKIPPED: needs two cores (switch on core 0, generator on core 1)");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let st = Command::new(env!("CARGO_BIN_EXE_vireo-bench"))
        .args([
            "--quick",
            "--no-setup",
            "--contenders",
            "dpdk",
            "--trial-secs",
            "1",
            "--max-trials",
            "3",
        ])
        .arg("--out")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(st.success(), "vireo-bench failed: {st}");
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "quick smoke took {:?}",
        t0.elapsed()
    );
    let json = std::fs::read_to_string(out.path().join("results.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 3, "one record per generator: {json}");
    for r in recs {
        assert_eq!(r["contender"], "dpdk");
        assert!(r["error"].is_null(), "measurement failed: {}", r["error"]);
        assert!(r["mpps"].as_f64().unwrap() > 0.0, "no throughput: {r}");
    }
    let gen = recs.iter().find(|r| r["generator"] == "vireo-gen").unwrap();
    assert_eq!(gen["rfc2544"][0]["loss_ppm_allowed"], 0.0);
    let bare = recs
        .iter()
        .find(|r| r["generator"] == "vireo-gen-bare")
        .unwrap();
    assert!(bare["rfc2544"].as_array().unwrap().is_empty(), "{bare}");
    assert!(bare["latency"].is_null(), "{bare}");
    let md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(md.contains("Generator cross-check"), "{md}");
    assert!(md.contains("| p2p:64 | dpdk |"), "{md}");
    // The report can be made again from results.json alone, identical.
    std::fs::remove_file(out.path().join("results.md")).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_vireo-bench"))
        .args(["--from-results", "--no-setup", "--out"])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(st.success(), "--from-results failed: {st}");
    let again = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert_eq!(again, md);
}
