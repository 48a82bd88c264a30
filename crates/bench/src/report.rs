//! vireo-bench's results: the JSON document (every measurement plus median and spread per
//! contender, scenario, generator and metric), the markdown table, the PNG plots (drawn by
//! gnuplot) and the marked section of BENCHMARKS.md.
//!
//! Threads: vireo-bench's main thread.
use crate::parse::PmdCycles;
use crate::rfc2544::SearchResult;
use crate::stats::{summarize, LatencySummary, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// Where and how the run happened.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    /// The exact command line.
    pub command: String,
    /// UTC date and time of the start.
    pub date: String,
    /// CPU model, core count, memory, kernel.
    pub machine: String,
    /// Versions of the contenders (testpmd, OVS, Vireo).
    pub versions: BTreeMap<String, String>,
    /// Switch core and generator core.
    pub cores: (usize, usize),
    /// Rounds.
    pub rounds: usize,
    /// Seconds per trial.
    pub trial_secs: f64,
    /// Contenders skipped, with the reason.
    pub skipped: BTreeMap<String, String>,
    /// /proc/loadavg at the start (the machine may be shared).
    #[serde(default)]
    pub load: Option<String>,
}

/// One measurement: a contender, a scenario, a generator, a round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// Round number (from 0).
    pub round: usize,
    /// `vireo`, `ovs`, `dpdk`.
    pub contender: String,
    /// Scenario name.
    pub scenario: String,
    /// `testpmd` or `vireo-gen`.
    pub generator: String,
    /// Frame size.
    pub size: usize,
    /// Aggregate throughput at saturation, Mpps.
    pub mpps: Option<f64>,
    /// The same in Gbit/s (frame bytes without FCS).
    pub gbps: Option<f64>,
    /// The switch's own PMD figures.
    pub pmd: Option<PmdCycles>,
    /// RFC 2544 results (vireo-gen).
    pub rfc2544: Vec<SearchResult>,
    /// Latency at the highest zero-loss rate (vireo-gen).
    pub latency: Option<LatencySummary>,
    /// Loss at saturation, ppm (vireo-gen).
    pub saturation_loss_ppm: Option<f64>,
    /// Why this measurement failed.
    pub error: Option<String>,
    /// Busy share of the switch and generator cores just before the run (0..1).
    pub core_busy_before: Vec<f64>,
    /// Share of a core the switch process got while measuring (below ~0.95: preempted).
    pub switch_cpu: Option<f64>,
    /// Share of a core the generator got while measuring.
    pub gen_cpu: Option<f64>,
    /// What the generator sent, Mpps (kernel-port scenarios, where it is open-loop).
    #[serde(default)]
    pub offered_mpps: Option<f64>,
}

/// Median and spread of one metric.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Contender.
    pub contender: String,
    /// Scenario.
    pub scenario: String,
    /// Generator.
    pub generator: String,
    /// Metric name.
    pub metric: String,
    /// Over the rounds.
    pub summary: Summary,
}

/// Everything a run produced.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    /// Context.
    pub meta: Meta,
    /// Every measurement.
    pub records: Vec<Record>,
    /// Median and spread per contender/scenario/generator/metric.
    pub summary: Vec<Row>,
}

/// The metrics a record carries, by name.
pub fn metrics(r: &Record) -> Vec<(&'static str, f64)> {
    let mut v = Vec::new();
    if let Some(x) = r.mpps {
        v.push(("mpps", x));
    }
    if let Some(x) = r.gbps {
        v.push(("gbps", x));
    }
    if let Some(p) = r.pmd.filter(|p| p.busy_cycles_per_packet > 0.0) {
        v.push(("cycles_per_packet", p.busy_cycles_per_packet));
    }
    for s in &r.rfc2544 {
        let name = match s.loss_ppm_allowed as u64 {
            0 => "rfc2544_0ppm_mpps",
            1 => "rfc2544_1ppm_mpps",
            5 => "rfc2544_5ppm_mpps",
            20 => "rfc2544_20ppm_mpps",
            _ => continue,
        };
        v.push((name, s.rate_pps / 1e6));
    }
    if let Some(x) = r.offered_mpps {
        v.push(("offered_mpps", x));
    }
    if let Some(x) = r.switch_cpu {
        v.push(("switch_cpu", x));
    }
    if let Some(x) = r.gen_cpu {
        v.push(("gen_cpu", x));
    }
    if let Some(l) = r.latency.as_ref().filter(|l| l.count > 0) {
        v.push(("latency_avg_us", l.avg_ns / 1e3));
        v.push(("latency_p99_us", l.p99_ns as f64 / 1e3));
    }
    v
}

impl Results {
    /// Recomputes `summary` from `records`.
    pub fn summarize(&mut self) {
        let mut groups: BTreeMap<(String, String, String, &'static str), Vec<f64>> =
            BTreeMap::new();
        for r in &self.records {
            for (m, x) in metrics(r) {
                let k = (
                    r.contender.clone(),
                    r.scenario.clone(),
                    r.generator.clone(),
                    m,
                );
                groups.entry(k).or_default().push(x);
            }
        }
        self.summary = groups
            .into_iter()
            .filter_map(|((contender, scenario, generator, metric), xs)| {
                Some(Row {
                    contender,
                    scenario,
                    generator,
                    metric: metric.to_string(),
                    summary: summarize(&xs)?,
                })
            })
            .collect();
    }

    /// The summary of one metric.
    pub fn get(
        &self,
        contender: &str,
        scenario: &str,
        generator: &str,
        metric: &str,
    ) -> Option<Summary> {
        self.summary
            .iter()
            .find(|r| {
                r.contender == contender
                    && r.scenario == scenario
                    && r.generator == generator
                    && r.metric == metric
            })
            .map(|r| r.summary)
    }

    fn cell(&self, c: &str, s: &str, g: &str, m: &str, prec: usize) -> String {
        match self.get(c, s, g, m) {
            Some(x) if x.n > 1 => format!("{:.prec$} ±{:.0}%", x.median, x.spread_pct / 2.0),
            Some(x) => format!("{:.prec$}", x.median),
            None => "–".into(),
        }
    }

    /// The results table in markdown: one row per scenario, contender and generator.
    pub fn markdown(&self) -> String {
        let mut keys: Vec<(String, String, String)> = Vec::new();
        for r in &self.records {
            let k = (r.scenario.clone(), r.contender.clone(), r.generator.clone());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let mut t = String::from(
            "| scenario | switch | generator | Mpps | Gbit/s | cycles/pkt | 0-loss Mpps | ≤1 ppm | ≤5 ppm | ≤20 ppm | lat avg µs | lat p99 µs | CPU sw/gen |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (s, c, g) in &keys {
            let f = |m: &str, p: usize| self.cell(c, s, g, m, p);
            let _ = writeln!(
                t,
                "| {s} | {c} | {g} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
                f("mpps", 2),
                f("gbps", 2),
                f("cycles_per_packet", 0),
                f("rfc2544_0ppm_mpps", 2),
                f("rfc2544_1ppm_mpps", 2),
                f("rfc2544_5ppm_mpps", 2),
                f("rfc2544_20ppm_mpps", 2),
                f("latency_avg_us", 1),
                f("latency_p99_us", 1),
                self.cell(c, s, g, "switch_cpu", 2)
                    .split(' ')
                    .next()
                    .unwrap_or("–"),
                self.cell(c, s, g, "gen_cpu", 2)
                    .split(' ')
                    .next()
                    .unwrap_or("–")
            );
        }
        let errors: Vec<String> = self
            .records
            .iter()
            .filter_map(|r| {
                Some(format!(
                    "- {} {} {} round {}: {}",
                    r.contender,
                    r.scenario,
                    r.generator,
                    r.round,
                    r.error.as_ref()?
                ))
            })
            .collect();
        if !errors.is_empty() {
            t.push_str("\nFailed measurements:\n\n");
            t.push_str(&errors.join("\n"));
            t.push('\n');
        }
        for (c, why) in &self.meta.skipped {
            let _ = writeln!(t, "\nSkipped {c}: {why}");
        }
        t
    }

    /// The generator cross-check: where testpmd and the bare vireo-gen (both leave the
    /// frames untouched) drove the same switch through the same scenario, their saturation
    /// rates side by side. Empty when no pair was measured.
    pub fn cross_check(&self) -> String {
        let mut rows = String::new();
        let (mut pairs, mut within) = (0, 0);
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for r in &self.records {
            let k = (r.scenario.as_str(), r.contender.as_str());
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            let mpps = |g: &str| self.get(k.1, k.0, g, "mpps").map(|x| x.median);
            let (Some(t), Some(b)) = (mpps("testpmd"), mpps(crate::genproc::BARE)) else {
                continue;
            };
            let diff = (b / t - 1.0) * 100.0;
            let ok = diff.abs() <= 10.0;
            pairs += 1;
            within += usize::from(ok);
            let stamped = mpps("vireo-gen").map_or("–".into(), |x| format!("{x:.2}"));
            let _ = writeln!(
                rows,
                "| {} | {} | {t:.2} | {b:.2} | {diff:+.1}% | {} | {stamped} |",
                k.0,
                k.1,
                if ok { "yes" } else { "no" }
            );
        }
        if pairs == 0 {
            return String::new();
        }
        format!(
            "Generator cross-check, saturation Mpps (medians): testpmd vs vireo-gen with frames \
             left untouched (`vireo-gen-bare`); {within} of {pairs} pairs within 10%. The last \
             column is vireo-gen as measured above (it writes a sequence number and timestamp \
             into every frame and reads every frame that returns).\n\n\
             | scenario | switch | testpmd | vireo-gen-bare | difference | within 10% | vireo-gen |\n\
             |---|---|---:|---:|---:|---|---:|\n{rows}"
        )
    }

    /// The marked section for BENCHMARKS.md.
    pub fn benchmarks_section(&self) -> String {
        let m = &self.meta;
        format!(
            "Run {} on {}; {}.\n\nCommand: `{}`\n\nPinning: switch PMD on core {}, generator on core {}; {} round(s), \
             {} s trials; median ±half the spread (max−min) over rounds.\n\n{}\n{}\n\
             CPU sw/gen: share of a core the switch and the generator got while measuring \
             (below ~0.9: preempted, the row measures the host).\n\n\
             Plots: `throughput-vs-size.png`, `throughput-vs-flows.png`, `latency.png` in the output directory.\n",
            m.date,
            m.machine,
            m.versions
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            m.command,
            m.cores.0,
            m.cores.1,
            m.rounds,
            m.trial_secs,
            self.markdown(),
            self.cross_check()
        )
    }
}

/// Begin marker of the generated section of BENCHMARKS.md.
pub const BEGIN: &str = "<!-- BEGIN vireo-bench results -->";
/// End marker.
pub const END: &str = "<!-- END vireo-bench results -->";

/// Replaces the text between the markers (appends the markers if missing).
pub fn replace_section(doc: &str, body: &str) -> String {
    replace_marked(doc, BEGIN, END, body)
}

/// Replaces the text between `begin` and `end` (appends both if missing).
pub fn replace_marked(doc: &str, begin: &str, end: &str, body: &str) -> String {
    match (doc.find(begin), doc.find(end)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{begin}\n{body}{end}{}", &doc[..b], &doc[e + end.len()..])
        }
        _ => format!("{doc}\n{begin}\n{body}{end}\n"),
    }
}

fn series(
    res: &Results,
    metric: &str,
    filter: impl Fn(&str) -> Option<f64>,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    // The bare generator is an instrument for the cross-check table, not a curve to read.
    for r in res
        .summary
        .iter()
        .filter(|r| r.metric == metric && r.generator != crate::genproc::BARE)
    {
        if let Some(x) = filter(&r.scenario) {
            out.entry(format!("{} ({})", r.contender, r.generator))
                .or_default()
                .push((x, r.summary.median));
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn line_plot(
    dir: &Path,
    name: &str,
    title: &str,
    xlabel: &str,
    logx: bool,
    data: &BTreeMap<String, Vec<(f64, f64)>>,
) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    let mut script = format!(
        "set terminal pngcairo size 900,560\nset output '{}/{name}.png'\nset title '{title}'\nset xlabel '{xlabel}'\n\
         set ylabel 'Mpps (aggregate)'\nset grid\nset key outside right\nset yrange [0:*]\n{}plot ",
        dir.display(),
        if logx { "set logscale x\n" } else { "" }
    );
    let mut parts = Vec::new();
    for (i, (label, pts)) in data.iter().enumerate() {
        let f = dir.join(format!("{name}.{i}.dat"));
        let body: String = pts.iter().map(|(x, y)| format!("{x} {y}\n")).collect();
        std::fs::write(&f, body).map_err(|e| e.to_string())?;
        parts.push(format!(
            "'{}' using 1:2 with linespoints lw 2 title '{label}'",
            f.display()
        ));
    }
    script.push_str(&parts.join(", "));
    script.push('\n');
    gnuplot(dir, name, &script)
}

fn gnuplot(dir: &Path, name: &str, script: &str) -> Result<(), String> {
    let gp = dir.join(format!("{name}.gp"));
    std::fs::write(&gp, script).map_err(|e| e.to_string())?;
    crate::proc::run(Command::new("gnuplot").arg(&gp)).map(|_| ())
}

/// Scenarios whose latency CDFs `latency.png` shows, one panel each (those measured).
const LATENCY_PANELS: [&str; 3] = ["p2p:64", "normal:64", "flows1m:64"];

fn contender_color(c: &str) -> &'static str {
    match c {
        "vireo" => "#1f77b4",
        "ovs" => "#e6550d",
        "dpdk" => "#31a354",
        _ => "#636363",
    }
}

/// Latency CDFs at the zero-loss rate (round 0): one panel per scenario of
/// [`LATENCY_PANELS`] that was measured (else the first scenario that was), one line per
/// contender, so each panel stays readable at a glance.
fn latency_plot(dir: &Path, res: &Results) -> Result<(), String> {
    let with_latency: Vec<&Record> = res
        .records
        .iter()
        .filter(|r| r.round == 0 && r.latency.as_ref().is_some_and(|l| l.count > 0))
        .collect();
    let mut panels: Vec<&str> = LATENCY_PANELS
        .iter()
        .copied()
        .filter(|s| with_latency.iter().any(|r| r.scenario == *s))
        .collect();
    if panels.is_empty() {
        panels.extend(with_latency.first().map(|r| r.scenario.as_str()));
    }
    if panels.is_empty() {
        return Ok(());
    }
    let mut script = format!(
        "set terminal pngcairo size {},480\nset output '{}/latency.png'\n\
         set multiplot layout 1,{} title 'Latency CDF at the highest zero-loss rate (vireo-gen, round 1)'\n\
         set xlabel 'latency (µs, log)'\nset ylabel 'share of packets'\nset logscale x\nset grid\n\
         set xtics ('1' 1, '10' 10, '100' 100, '1k' 1000, '10k' 10000, '100k' 100000)\n\
         set key bottom right\nset yrange [0:1]\n",
        420 * panels.len() + 60,
        dir.display(),
        panels.len()
    );
    for (pi, sc) in panels.iter().enumerate() {
        let mut parts = Vec::new();
        for (i, r) in with_latency
            .iter()
            .filter(|r| r.scenario == *sc)
            .enumerate()
        {
            let Some(l) = r.latency.as_ref() else {
                continue;
            };
            let total = l.count as f64;
            let mut acc = 0u64;
            let body: String = l
                .buckets
                .iter()
                .map(|(ns, c)| {
                    acc += c;
                    format!("{} {}\n", *ns as f64 / 1e3, acc as f64 / total)
                })
                .collect();
            let f = dir.join(format!("latency.{pi}.{i}.dat"));
            std::fs::write(&f, body).map_err(|e| e.to_string())?;
            parts.push(format!(
                "'{}' using 1:2 with steps lw 2 lc rgb '{}' title '{}'",
                f.display(),
                contender_color(&r.contender),
                r.contender
            ));
        }
        let _ = writeln!(script, "set title '{sc}'\nplot {}", parts.join(", "));
    }
    script.push_str("unset multiplot\n");
    gnuplot(dir, "latency", &script)
}

/// Draws the PNG plots into `dir` (needs gnuplot; returns why not when it fails).
pub fn plots(dir: &Path, res: &Results) -> Result<(), String> {
    crate::proc::which("gnuplot").ok_or("gnuplot not installed (Debian gnuplot-nox)")?;
    let by_size = series(res, "mpps", |s| {
        let sc = crate::scenario::Scenario::parse(s).ok()?;
        (sc.kind == crate::scenario::Kind::P2p && sc.queues == 1).then_some(sc.size as f64)
    });
    line_plot(
        dir,
        "throughput-vs-size",
        "Port-to-port throughput vs frame size",
        "frame size (bytes)",
        false,
        &by_size,
    )?;
    let by_flows = series(res, "mpps", |s| {
        let sc = crate::scenario::Scenario::parse(s).ok()?;
        matches!(sc.kind, crate::scenario::Kind::Flows(_)).then_some(f64::from(sc.flows()))
    });
    line_plot(
        dir,
        "throughput-vs-flows",
        "Throughput vs flows through 1K rules (64 B)",
        "flows per direction (log)",
        true,
        &by_flows,
    )?;
    latency_plot(dir, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(round: usize, c: &str, mpps: f64) -> Record {
        Record {
            round,
            contender: c.into(),
            scenario: "p2p:64".into(),
            generator: "testpmd".into(),
            size: 64,
            mpps: Some(mpps),
            gbps: Some(mpps * 64.0 * 8.0 / 1e3),
            pmd: Some(PmdCycles {
                packets: 100,
                busy_cycles: 45_500,
                idle_cycles: 0,
                busy_cycles_per_packet: 455.0,
            }),
            ..Record::default()
        }
    }

    #[test]
    fn summary_table_and_json_roundtrip() {
        let mut r = Results {
            records: vec![
                rec(0, "ovs", 4.0),
                rec(1, "ovs", 4.2),
                rec(2, "ovs", 3.8),
                rec(0, "dpdk", 9.0),
            ],
            ..Results::default()
        };
        r.records.push(Record {
            error: Some("vireod cannot carry vhost-user yet".into()),
            contender: "vireo".into(),
            scenario: "p2p:64".into(),
            generator: "testpmd".into(),
            ..Record::default()
        });
        r.summarize();
        let s = r.get("ovs", "p2p:64", "testpmd", "mpps").unwrap();
        assert_eq!((s.n, s.median), (3, 4.0));
        assert!((s.spread_pct - 10.0).abs() < 1e-9);
        assert_eq!(
            r.get("ovs", "p2p:64", "testpmd", "cycles_per_packet")
                .unwrap()
                .median,
            455.0
        );
        let md = r.markdown();
        assert!(
            md.contains("| p2p:64 | ovs | testpmd | 4.00 ±5% | 2.05 ±5% | 455 ±0% |"),
            "{md}"
        );
        assert!(md.contains("| p2p:64 | dpdk | testpmd | 9.00 |"), "{md}");
        assert!(md.contains("vireod cannot carry vhost-user yet"), "{md}");
        let json = serde_json::to_string(&r).unwrap();
        let back: Results = serde_json::from_str(&json).unwrap();
        assert_eq!(back.records.len(), 5);
        assert_eq!(back.summary.len(), r.summary.len());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["records"][0]["pmd"]["busy_cycles_per_packet"], 455.0);
        assert_eq!(v["summary"][0]["summary"]["n"], 1);
    }

    #[test]
    fn cross_check_pairs_testpmd_with_the_bare_generator() {
        let with_gen = |c: &str, g: &str, mpps: f64| Record {
            generator: g.into(),
            ..rec(0, c, mpps)
        };
        let mut r = Results {
            records: vec![
                with_gen("ovs", "testpmd", 10.0),
                with_gen("ovs", "vireo-gen-bare", 9.5),
                with_gen("ovs", "vireo-gen", 8.0),
                with_gen("dpdk", "testpmd", 12.0),
                with_gen("dpdk", "vireo-gen-bare", 10.0),
                // No bare run: no pair.
                with_gen("vireo", "testpmd", 13.0),
            ],
            ..Results::default()
        };
        assert_eq!(r.cross_check(), "", "nothing before summarize");
        r.summarize();
        let t = r.cross_check();
        assert!(t.contains("1 of 2 pairs within 10%"), "{t}");
        assert!(
            t.contains("| p2p:64 | ovs | 10.00 | 9.50 | -5.0% | yes | 8.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| p2p:64 | dpdk | 12.00 | 10.00 | -16.7% | no | – |"),
            "{t}"
        );
        assert!(!t.contains("| vireo |"), "{t}");
        assert!(r.benchmarks_section().contains(&t));
    }

    #[test]
    fn section_replacement() {
        let doc = format!("# B\n\nintro\n{BEGIN}\nold\n{END}\ntail\n");
        let new = replace_section(&doc, "new\n");
        assert_eq!(new, format!("# B\n\nintro\n{BEGIN}\nnew\n{END}\ntail\n"));
        let appended = replace_section("# B\n", "x\n");
        assert!(appended.ends_with(&format!("{BEGIN}\nx\n{END}\n")));
    }
}
