//! Parsers for what the contenders and the testpmd generator print: testpmd's periodic port
//! statistics, OVS's `dpif-netdev/pmd-stats-show`, and `vireoctl --json pmd-stats-show`
//! (read tolerantly: field names may still change).
//!
//! Threads: the caller's.
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One port's block in testpmd's periodic statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PortSample {
    /// testpmd port id.
    pub port: u32,
    /// Cumulative RX-packets.
    pub rx_packets: u64,
    /// Cumulative TX-packets.
    pub tx_packets: u64,
    /// Rx-pps since the last report.
    pub rx_pps: u64,
    /// Tx-pps since the last report.
    pub tx_pps: u64,
}

fn number_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Every complete port block in testpmd output, in order. ANSI escapes are ignored.
pub fn testpmd_port_samples(out: &str) -> Vec<PortSample> {
    let mut v = Vec::new();
    let mut cur: Option<PortSample> = None;
    for line in out.lines() {
        if let Some(p) = line.find("NIC statistics for port") {
            let port = line[p + 23..]
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok());
            cur = port.map(|port| PortSample {
                port,
                ..PortSample::default()
            });
            continue;
        }
        let Some(s) = cur.as_mut() else { continue };
        if let Some(n) = number_after(line, "RX-packets:") {
            s.rx_packets = n;
        }
        if let Some(n) = number_after(line, "TX-packets:") {
            s.tx_packets = n;
        }
        if let Some(n) = number_after(line, "Rx-pps:") {
            s.rx_pps = n;
        }
        if let Some(n) = number_after(line, "Tx-pps:") {
            s.tx_pps = n;
            v.push(*s);
            cur = None;
        }
    }
    v
}

/// Aggregate Rx-pps per reporting period (sum over ports; a period starts at the lowest
/// port id seen). The first period (which includes start-up) is dropped when there are more.
pub fn testpmd_aggregate_rx_pps(out: &str) -> Vec<f64> {
    aggregate(out, |s| s.rx_pps)
}

/// Aggregate Tx-pps per reporting period, as [`testpmd_aggregate_rx_pps`] does for Rx.
pub fn testpmd_aggregate_tx_pps(out: &str) -> Vec<f64> {
    aggregate(out, |s| s.tx_pps)
}

fn aggregate(out: &str, pps: impl Fn(&PortSample) -> u64) -> Vec<f64> {
    let samples = testpmd_port_samples(out);
    let Some(first) = samples.iter().map(|s| s.port).min() else {
        return Vec::new();
    };
    let mut periods: Vec<f64> = Vec::new();
    for s in &samples {
        if s.port == first || periods.is_empty() {
            periods.push(0.0);
        }
        if let Some(last) = periods.last_mut() {
            *last += pps(s) as f64;
        }
    }
    if periods.len() > 1 {
        periods.remove(0);
    }
    periods
}

/// A switch's own PMD figures over a measurement window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PmdCycles {
    /// Packets the PMD threads received.
    pub packets: u64,
    /// TSC cycles spent processing packets.
    pub busy_cycles: u64,
    /// TSC cycles spent polling with nothing to do.
    pub idle_cycles: u64,
    /// busy_cycles / packets (as the switch reports it when it does).
    pub busy_cycles_per_packet: f64,
}

impl PmdCycles {
    /// Idle share in percent.
    pub fn idle_pct(&self) -> f64 {
        let t = self.busy_cycles + self.idle_cycles;
        if t == 0 {
            0.0
        } else {
            self.idle_cycles as f64 * 100.0 / t as f64
        }
    }
}

fn leading_f64(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// Sums the PMD threads of OVS `dpif-netdev/pmd-stats-show` (the main thread is ignored).
pub fn ovs_pmd_stats(out: &str) -> Option<PmdCycles> {
    ovs_thread_stats(out, false)
}

/// Sums the PMD threads and, with `main`, the main thread (which polls the ports that are
/// not PMD ports: `system` and `tap` in a netdev bridge).
pub fn ovs_thread_stats(out: &str, main: bool) -> Option<PmdCycles> {
    let mut c = PmdCycles::default();
    let mut in_pmd = false;
    let mut any = false;
    for line in out.lines() {
        if !line.starts_with(' ') && !line.starts_with('\t') {
            in_pmd = line.starts_with("pmd thread") || (main && line.starts_with("main thread"));
            any |= in_pmd;
            continue;
        }
        if !in_pmd {
            continue;
        }
        let l = line.trim();
        let Some((key, val)) = l.split_once(':') else {
            continue;
        };
        let n = leading_f64(val);
        match (key, n) {
            ("packets received", Some(n)) => c.packets += n as u64,
            ("idle cycles", Some(n)) => c.idle_cycles += n as u64,
            ("processing cycles", Some(n)) => c.busy_cycles += n as u64,
            _ => {}
        }
    }
    if !any {
        return None;
    }
    if c.packets > 0 {
        c.busy_cycles_per_packet = c.busy_cycles as f64 / c.packets as f64;
    }
    Some(c)
}

fn get_u64(v: &Value, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| {
        let x = v.get(*k)?;
        x.as_u64().or_else(|| x.as_f64().map(|f| f as u64))
    })
}

fn pmd_list(v: &Value) -> Vec<&Value> {
    if let Some(a) = v.as_array() {
        return a.iter().collect();
    }
    for k in ["pmds", "pmd", "threads", "pmd_threads"] {
        if let Some(a) = v.get(k).and_then(Value::as_array) {
            return a.iter().collect();
        }
    }
    vec![v]
}

/// Reads `vireoctl --json pmd-stats-show`: an array of PMDs, or an object with a `pmds`
/// array, or one PMD object. Accepts `busy_cycles`/`processing_cycles`,
/// `packets`/`packets_received`/`rx_packets`, `idle_cycles`; computes cycles per packet from
/// the sums, or averages `busy_cycles_per_packet` when only that is given.
pub fn vireo_pmd_stats(json: &str) -> Option<PmdCycles> {
    let v: Value = serde_json::from_str(json).ok()?;
    let mut c = PmdCycles::default();
    let (mut cpp_sum, mut cpp_n, mut any) = (0.0, 0u32, false);
    for p in pmd_list(&v) {
        let busy = get_u64(p, &["busy_cycles", "processing_cycles", "busy"]);
        let pk = get_u64(p, &["packets", "packets_received", "rx_packets"]);
        let idle = get_u64(p, &["idle_cycles", "idle"]);
        let cpp = ["busy_cycles_per_packet", "cycles_per_packet"]
            .iter()
            .find_map(|k| p.get(*k).and_then(Value::as_f64));
        any |= busy.is_some() || pk.is_some() || cpp.is_some();
        c.busy_cycles += busy.unwrap_or(0);
        c.packets += pk.unwrap_or(0);
        c.idle_cycles += idle.unwrap_or(0);
        if let Some(x) = cpp {
            cpp_sum += x;
            cpp_n += 1;
        }
    }
    if !any {
        return None;
    }
    c.busy_cycles_per_packet = if c.packets > 0 && c.busy_cycles > 0 {
        c.busy_cycles as f64 / c.packets as f64
    } else if cpp_n > 0 {
        cpp_sum / f64::from(cpp_n)
    } else {
        0.0
    };
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TESTPMD: &str = "\x1b[2J\x1b[1;1H
  ######################## NIC statistics for port 0  ########################
  RX-packets: 100        RX-missed: 0          RX-bytes:  6400
  RX-errors: 0
  RX-nombuf:  0
  TX-packets: 90         TX-errors: 0          TX-bytes:  5760

  Throughput (since last show)
  Rx-pps:           50          Rx-bps:        25600
  Tx-pps:           45          Tx-bps:        23040
  ############################################################################

  ######################## NIC statistics for port 1  ########################
  RX-packets: 90         RX-missed: 0          RX-bytes:  5760
  TX-packets: 100        TX-errors: 0          TX-bytes:  6400

  Throughput (since last show)
  Rx-pps:           40          Rx-bps:        20480
  Tx-pps:           50          Tx-bps:        25600
  ############################################################################
  ######################## NIC statistics for port 0  ########################
  RX-packets: 4100100    RX-missed: 0          RX-bytes:  262406400
  TX-packets: 4100090    TX-errors: 0          TX-bytes:  262405760
  Throughput (since last show)
  Rx-pps:      2050000          Rx-bps:   1049600000
  Tx-pps:      2050000          Tx-bps:   1049600000
  ######################## NIC statistics for port 1  ########################
  RX-packets: 4100090    RX-missed: 0          RX-bytes:  262405760
  TX-packets: 4100100    TX-errors: 0          TX-bytes:  262406400
  Throughput (since last show)
  Rx-pps:      2040000          Rx-bps:   1044480000
  Tx-pps:      2050000          Tx-bps:   1049600000
";

    #[test]
    fn testpmd_blocks_and_periods() {
        let s = testpmd_port_samples(TESTPMD);
        assert_eq!(s.len(), 4);
        assert_eq!(
            s[0],
            PortSample {
                port: 0,
                rx_packets: 100,
                tx_packets: 90,
                rx_pps: 50,
                tx_pps: 45
            }
        );
        assert_eq!(
            (s[3].port, s[3].rx_pps, s[3].rx_packets),
            (1, 2_040_000, 4_100_090)
        );
        // The first period (start-up) is dropped.
        assert_eq!(testpmd_aggregate_rx_pps(TESTPMD), vec![4_090_000.0]);
        assert_eq!(testpmd_aggregate_tx_pps(TESTPMD), vec![4_100_000.0]);
        assert!(testpmd_aggregate_rx_pps("no stats here").is_empty());
    }

    const OVS: &str = "pmd thread numa_id 0 core_id 0:
  packets received: 8200000
  packet recirculations: 0
  avg. datapath passes per packet: 1.00
  emc hits: 8199990
  smc hits: 0
  megaflow hits: 8
  miss with success upcall: 2
  idle cycles: 1435280000 (27.70%)
  processing cycles: 3735264000 (72.30%)
  avg cycles per packet: 630.54 (5170544000/8200000)
  avg processing cycles per packet: 455.52 (3735264000/8200000)
main thread:
  packets received: 0
  idle cycles: 999 (100.00%)
";

    #[test]
    fn ovs_pmd_stats_sums_pmd_threads_only() {
        let c = ovs_pmd_stats(OVS).unwrap();
        assert_eq!(c.packets, 8_200_000);
        assert_eq!(c.idle_cycles, 1_435_280_000);
        assert_eq!(c.busy_cycles, 3_735_264_000);
        assert!((c.busy_cycles_per_packet - 455.52).abs() < 0.01);
        assert!((c.idle_pct() - 27.77).abs() < 0.1);
        assert!(ovs_pmd_stats("ovs-appctl: cannot connect").is_none());
    }

    #[test]
    fn vireo_json_shapes() {
        let a = r#"[{"core":0,"packets":1000,"busy_cycles":250000,"idle_cycles":750000}]"#;
        let c = vireo_pmd_stats(a).unwrap();
        assert_eq!((c.packets, c.busy_cycles), (1000, 250_000));
        assert_eq!(c.busy_cycles_per_packet, 250.0);
        assert_eq!(c.idle_pct(), 75.0);
        let o = r#"{"pmds":[{"packets_received":10,"processing_cycles":1000},
                             {"packets_received":30,"processing_cycles":1000}]}"#;
        assert_eq!(vireo_pmd_stats(o).unwrap().busy_cycles_per_packet, 50.0);
        let only_cpp = r#"{"pmds":[{"busy_cycles_per_packet":120.5}]}"#;
        assert_eq!(
            vireo_pmd_stats(only_cpp).unwrap().busy_cycles_per_packet,
            120.5
        );
        assert!(vireo_pmd_stats(r#"{"error":"unknown command"}"#).is_none());
        assert!(vireo_pmd_stats("not json").is_none());
    }
}
