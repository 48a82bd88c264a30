//! The kernel-port benchmark's `:vu:N` rows (`kp:af-xdp:SIZE[:mark]:vu:N`): namespace →
//! af-xdp port → switch → vhost-user port, N flows from vireo-kgen's sender in the namespace,
//! counted by vireo-kgen's sink on the vhost-user socket. Topology, switches and records are
//! [`crate::kernel`]'s and [`crate::kswitch`]'s.
//!
//! Threads: vireo-bench's main thread; the switch and vireo-kgen are child processes.
use crate::kernel::{median, pinned, rates, KPlan, KScenario, KSwitch, Topo, VU_RULES};
use crate::proc::{wait_for_path, CpuShare, Proc};
use crate::report::Record;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The vireo-kgen binary: `VIREO_KGEN` if set, else next to the running executable.
pub fn vireo_kgen_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("VIREO_KGEN") {
        return p.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("vireo-kgen")))
        .unwrap_or_else(|| "vireo-kgen".into())
}

/// `:vu:N`: vireo-kgen's sink listens on `DIR/vu1.sock` (on the generator core: it sleeps
/// 200 µs between polls that find little), the switch takes namespace a's host veth end as
/// an af-xdp port and the socket as a vhost-user client port (namespace b's pair is made
/// but unused), vireo-kgen `tx` sends N 5-tuples from namespace a.
/// The rate is the sink's, per second; the offered rate the sender's. Warm-up is at least
/// 3 s from 100K flows up (each flow is sent once per N / rate seconds).
pub fn measure(
    sw: &mut dyn KSwitch,
    sc: &KScenario,
    flows: u32,
    p: &KPlan,
    dir: &Path,
    rec: &mut Record,
) -> Result<(), String> {
    let topo = Topo::new("")?;
    topo.veths()?;
    topo.csum_off()?;
    let kgen = vireo_kgen_path();
    let sock = dir.join("vu1.sock");
    let _ = std::fs::remove_file(&sock);
    let core = p.gen_core.to_string();
    // Under `--rt` the sender is SCHED_RR 1 on the same core: the sink runs one priority
    // above it, or each of its wake-ups would wait out the sender's time slice (100 ms).
    let mut c = Command::new(if crate::proc::realtime() {
        "chrt"
    } else {
        "env"
    });
    if crate::proc::realtime() {
        c.args(["-r", "2"]);
    }
    c.args(["taskset", "-c", &core])
        .arg(&kgen)
        .args(["--core", &core, "sink", "--sock"])
        .arg(&sock);
    let mut sink = Proc::spawn("vireo-kgen sink", &mut c, &dir.join("sink.log"))?;
    let r = (|| {
        if !wait_for_path(&sock, Duration::from_secs(10)) {
            return Err(format!(
                "vireo-kgen sink did not listen: {}",
                sink.log_tail(4)
            ));
        }
        sw.start(dir, sc, &[topo.host[0].clone(), sock.display().to_string()])?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while sink.running() && !sink.log_text().contains("connected") {
            if Instant::now() > deadline {
                return Err("the switch did not connect to the sink".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut c = pinned(p.gen_core, &topo.ns[0], &kgen.display().to_string());
        c.args(["--core", &core, "tx", "--iface", &topo.inner[0]])
            .args([
                format!("--len={}", sc.size() - 4),
                format!("--flows={flows}"),
                format!("--rules={VU_RULES}"),
            ]);
        let mut g = Proc::spawn("vireo-kgen tx", &mut c, &dir.join("gen.log"))?;
        let warm = if flows >= 100_000 {
            p.warmup.max(Duration::from_secs(3))
        } else {
            p.warmup
        };
        std::thread::sleep(warm);
        if !g.running() || !sink.running() {
            return Err(format!(
                "vireo-kgen exited: {} / {}",
                g.log_tail(4),
                sink.log_tail(4)
            ));
        }
        sw.clear_stats();
        let sw_share = sw.pid().and_then(CpuShare::start);
        let gen_share = CpuShare::start(g.pid());
        let (from_g, from_s) = (g.log_len() as usize, sink.log_len() as usize);
        std::thread::sleep(Duration::from_secs_f64(p.secs.max(2.0) + 0.2));
        rec.switch_cpu = sw_share.and_then(|s| s.end());
        rec.gen_cpu = gen_share.and_then(|s| s.end());
        rec.pmd = sw.pmd_cycles();
        let (glog, slog) = (g.log_text(), sink.log_text());
        g.stop(Duration::from_secs(5));
        rec.offered_mpps = median(&rates(&glog, from_g, "Tx-pps:")).map(|x| x / 1e6);
        rec.mpps = median(&rates(&slog, from_s, "Rx-pps:")).map(|x| x / 1e6);
        rec.gbps = rec.mpps.map(|m| m * sc.size() as f64 * 8.0 / 1e3);
        if rec.mpps.unwrap_or(0.0) <= 0.0 {
            return Err(format!(
                "nothing reached the sink (generator offered {:?} Mpps)",
                rec.offered_mpps
            ));
        }
        Ok(())
    })();
    sw.stop();
    sink.stop(Duration::from_secs(5));
    drop(topo);
    r
}
