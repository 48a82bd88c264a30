//! Turning switch state into answers: the JSON data of `show`/`port-stats` and the text
//! `vireoctl` prints from it, plus hex helpers for dummy-port frames. Control thread only.
use super::live::LivePort;
use super::switch::link_name;
use crate::store::Config;
use ports::PortStats;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One item a line.
pub fn lines<T: std::fmt::Display>(items: &[T]) -> String {
    items.iter().map(|i| format!("{i}\n")).collect()
}

/// The data of `show`.
pub fn show_data(
    config: &Config,
    live: &BTreeMap<String, LivePort>,
    failed: &BTreeMap<String, String>,
) -> Value {
    let bridges: Vec<Value> = config
        .bridges
        .iter()
        .map(|(br, b)| {
            let ports: Vec<Value> = b
                .ports
                .iter()
                .map(|(name, pc)| {
                    let (link, status) = match live.get(name) {
                        Some(lp) => (link_name(lp.port().link()), lp.port().status()),
                        None => ("down", Value::Null),
                    };
                    json!({
                        "name": name,
                        "type": pc.kind,
                        "ofport": pc.ofport,
                        "options": pc.options,
                        "link": link,
                        "status": status,
                        "error": failed.get(name),
                    })
                })
                .collect();
            json!({
                "name": br,
                "controllers": b.controllers,
                "fail_mode": b.fail_mode.as_deref().unwrap_or("standalone"),
                "protocols": b.protocols.clone().unwrap_or_else(|| ofswitch::Protocols::ALL.to_string()),
                "ports": ports,
            })
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pmd_cores": config.pmd_cores,
        "pmd_rxq_assign": config.pmd_rxq_assign.as_deref().unwrap_or("cycles"),
        "pmd_auto_lb": config.pmd_auto_lb,
        "bridges": bridges,
    })
}

/// The text of `show`, from its data.
pub fn show_text(d: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "vireod {}", d["version"].as_str().unwrap_or("?"));
    if let Some(c) = d["pmd_cores"].as_str() {
        let _ = writeln!(s, "    pmd-cores: {c}");
    }
    let _ = writeln!(
        s,
        "    pmd-rxq-assign: {}",
        d["pmd_rxq_assign"].as_str().unwrap_or("cycles")
    );
    if let Some(t) = d["pmd_auto_lb"].as_u64() {
        let _ = writeln!(s, "    pmd-auto-lb: on (threshold {t}%)");
    }
    for b in d["bridges"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "    Bridge {}", b["name"].as_str().unwrap_or("?"));
        let _ = writeln!(
            s,
            "        fail_mode: {}",
            b["fail_mode"].as_str().unwrap_or("?")
        );
        let _ = writeln!(
            s,
            "        protocols: {}",
            b["protocols"].as_str().unwrap_or("?")
        );
        for c in b["controllers"].as_array().into_iter().flatten() {
            let state = if c["connected"].as_bool() == Some(true) {
                "connected"
            } else {
                "not connected"
            };
            let _ = writeln!(
                s,
                "        Controller \"{}\" ({state})",
                c["target"].as_str().unwrap_or("?")
            );
        }
        for p in b["ports"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "        Port {}", p["name"].as_str().unwrap_or("?"));
            let _ = writeln!(s, "            type: {}", p["type"].as_str().unwrap_or("?"));
            if p["ofport"].as_u64() == Some(u64::from(ofproto::ofpp::LOCAL)) {
                let _ = writeln!(s, "            ofport: LOCAL");
            } else {
                let _ = writeln!(s, "            ofport: {}", p["ofport"]);
            }
            if let Some(o) = p["options"].as_object().filter(|o| !o.is_empty()) {
                let kv: Vec<String> = o
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect();
                let _ = writeln!(s, "            options: {{{}}}", kv.join(", "));
            }
            let _ = writeln!(s, "            link: {}", p["link"].as_str().unwrap_or("?"));
            if let Some(e) = p["error"].as_str() {
                let _ = writeln!(s, "            error: \"{e}\"");
            }
            if let Some(st) = p["status"].as_object() {
                for (k, v) in st {
                    let _ = writeln!(s, "            {k}: {v}");
                }
            }
        }
    }
    s
}

/// A drop reason as `port-stats` names it (its serialized, kebab-case form).
fn reason_name(r: ports::DropReason) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A port's learned-MAC counters: (entries, limit, refused).
pub type MacRow = ofproto::PortMacStats;

/// The data of `port-stats`: each port's counters, and its share of the MAC table (`mac`:
/// entries learned, limit — 0 is none — and MACs refused at the limit).
pub fn stats_data(rows: &[(String, PortStats)], macs: &BTreeMap<String, MacRow>) -> Value {
    Value::Array(
        rows.iter()
            .map(|(name, s)| {
                let m = macs.get(name).copied().unwrap_or_default();
                let drops: serde_json::Map<String, Value> = s
                    .drops
                    .iter()
                    .map(|(r, n)| (reason_name(*r), json!(n)))
                    .collect();
                json!({
                    "port": name,
                    "rx_packets": s.rx_packets, "rx_bytes": s.rx_bytes,
                    "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes,
                    "rx_errors": s.rx_errors, "tx_errors": s.tx_errors,
                    "drops": drops,
                    "memory_lost": s.memory_lost,
                    "budget_cuts": s.budget_cuts,
                    "one_copy": { "rx": s.rx_one_copy, "tx": s.tx_one_copy },
                    "mac": { "entries": m.entries, "limit": m.limit, "refused": m.refused },
                })
            })
            .collect(),
    )
}

/// The text of `port-stats`.
pub fn stats_text(rows: &[(String, PortStats)], macs: &BTreeMap<String, MacRow>) -> String {
    let mut s = String::new();
    for (name, st) in rows {
        let _ = writeln!(s, "port {name}:");
        let _ = writeln!(
            s,
            "  rx pkts={} bytes={} errors={}",
            st.rx_packets, st.rx_bytes, st.rx_errors
        );
        let _ = writeln!(
            s,
            "  tx pkts={} bytes={} errors={}",
            st.tx_packets, st.tx_bytes, st.tx_errors
        );
        let drops: Vec<String> = st
            .drops
            .iter()
            .map(|(r, n)| format!("{}={n}", reason_name(*r)))
            .collect();
        let _ = writeln!(s, "  drops={} {}", st.total_drops(), drops.join(" "));
        if st.memory_lost > 0 {
            let _ = writeln!(s, "  memory lost: {} connection(s)", st.memory_lost);
        }
        let _ = writeln!(s, "  budget-cuts={}", st.budget_cuts);
        if st.rx_one_copy + st.tx_one_copy > 0 {
            let _ = writeln!(s, "  one-copy rx={} tx={}", st.rx_one_copy, st.tx_one_copy);
        }
        let m = macs.get(name).copied().unwrap_or_default();
        let limit = if m.limit == 0 {
            "none".to_string()
        } else {
            m.limit.to_string()
        };
        let _ = writeln!(
            s,
            "  macs learned={} limit={limit} refused={}",
            m.entries, m.refused
        );
    }
    s
}

/// Parses hex bytes, ignoring spaces, colons and an optional `0x`.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let clean: String = s
        .trim_start_matches("0x")
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    if !clean.len().is_multiple_of(2) {
        return Err("hex frame has an odd number of digits".into());
    }
    (0..clean.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&clean[i..i + 2], 16)
                .map_err(|_| format!("bad hex digits {:?} in frame", &clean[i..i + 2]))
        })
        .collect()
}

/// Lower-case hex of bytes.
pub fn to_hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn rows<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
        .collect()
}

fn field(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.2}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `pmd-stats-show`: a block per PMD thread, headed by its core and node.
pub fn pmd_stats<T: serde::Serialize>(items: &[T]) -> crate::proto::Response {
    let r = rows(items);
    let mut s = String::new();
    for row in &r {
        let _ = writeln!(
            s,
            "pmd thread core {} (numa {}):",
            field(&row["core"]),
            field(&row["numa"])
        );
        for (k, v) in row.as_object().into_iter().flatten() {
            if k != "core" && k != "numa" {
                let _ = writeln!(s, "  {}: {}", k.replace('_', " "), field(v));
            }
        }
    }
    crate::proto::Response::ok(s, Value::Array(r))
}

/// `pmd-rxq-show`: one line per rx queue, grouped by PMD core.
pub fn rxq_show<T: serde::Serialize>(items: &[T]) -> crate::proto::Response {
    let r = rows(items);
    let mut s = String::new();
    let mut last_core = None;
    for row in &r {
        let core = field(&row["core"]);
        if last_core.as_ref() != Some(&core) {
            let _ = writeln!(s, "pmd thread core {core} (numa {}):", field(&row["numa"]));
            last_core = Some(core);
        }
        let _ = writeln!(
            s,
            "  port: {:<16} queue-id: {:>2}  pmd usage: {:>3} %{}",
            field(&row["port"]),
            field(&row["rxq"]),
            field(&row["busy_pct"]),
            if row["pinned"].as_bool() == Some(true) {
                "  (pinned)"
            } else {
                ""
            }
        );
    }
    crate::proto::Response::ok(s, Value::Array(r))
}

/// `dump-megaflows`: one line per megaflow.
pub fn megaflows<T: serde::Serialize>(items: &[T]) -> crate::proto::Response {
    let r = rows(items);
    let text = r
        .iter()
        .map(|row| {
            let fields: Vec<String> = row
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| match v {
                    Value::String(x) => format!("{k}={x}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            fields.join(", ") + "\n"
        })
        .collect::<String>();
    crate::proto::Response::ok(text, Value::Array(r))
}

/// `dump-macs`.
pub fn macs(entries: &[(u16, [u8; 6], u32, std::time::Duration)]) -> crate::proto::Response {
    let mut text = String::from(" port  VLAN  MAC                Age\n");
    let mut data = Vec::new();
    for (vlan, mac, port, age) in entries {
        let mac = mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        let _ = writeln!(text, "{port:>5}  {vlan:>4}  {mac}  {}", age.as_secs());
        data.push(json!({ "port": port, "vlan": vlan, "mac": mac, "age": age.as_secs() }));
    }
    crate::proto::Response::ok(text, Value::Array(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        assert_eq!(parse_hex("0x0a:ff 01").unwrap(), vec![10, 255, 1]);
        assert_eq!(to_hex(&[10, 255, 1]), "0aff01");
        assert!(parse_hex("abc").unwrap_err().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().contains("bad hex"));
    }
}
