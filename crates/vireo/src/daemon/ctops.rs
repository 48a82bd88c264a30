//! Conntrack operations: `dump-conntrack [zone=N]`, `flush-conntrack [zone=N] [TUPLE]`,
//! `ct-stats` and `set-ct-limit [zone=N] N`, on the datapath's one connection tracker (every
//! bridge's connections, told apart by zone, as OVS's per-datapath conntrack). Control
//! thread, with the `Switch` mutex held; the tracker's walks take one shard lock at a time.
//!
//! Limits are kept in the config store (`ct_limit`, `ct_zone_limits`) and applied again when
//! vireod starts ([`apply_stored_limits`]); connections themselves are not (a restart starts
//! with an empty table; an upgrade carries it).
use super::switch::{CmdError, CmdResult, Switch};
use crate::proto::Response;
use conntrack::{ConnDump, Tuple};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn addr(a: &[u8; 16], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(*a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

fn proto_name(p: u8, v6: bool) -> String {
    match (p, v6) {
        (6, _) => "tcp".into(),
        (17, _) => "udp".into(),
        (1, false) => "icmp".into(),
        (58, true) => "icmpv6".into(),
        (132, _) => "sctp".into(),
        _ => format!("proto={p}"),
    }
}

fn tuple_text(t: &Tuple) -> String {
    let (s, d) = (addr(&t.src, t.v6), addr(&t.dst, t.v6));
    match t.proto {
        6 | 17 | 132 => format!("src={s},dst={d},sport={},dport={}", t.sport, t.dport),
        1 | 58 => format!("src={s},dst={d},id={}", t.sport),
        _ => format!("src={s},dst={d}"),
    }
}

fn tuple_json(t: &Tuple) -> serde_json::Value {
    json!({
        "src": addr(&t.src, t.v6).to_string(),
        "dst": addr(&t.dst, t.v6).to_string(),
        "sport": t.sport,
        "dport": t.dport,
        "proto": t.proto,
    })
}

/// One connection as `ovs-appctl dpctl/dump-conntrack` writes it.
fn conn_text(c: &ConnDump) -> String {
    let mut s = format!(
        "{},orig=({}),reply=({})",
        proto_name(c.orig.proto, c.orig.v6),
        tuple_text(&c.orig),
        tuple_text(&c.reply)
    );
    if c.zone != 0 {
        s.push_str(&format!(",zone={}", c.zone));
    }
    if c.mark != 0 {
        s.push_str(&format!(",mark={}", c.mark));
    }
    if c.label != 0 {
        s.push_str(&format!(",labels=0x{:x}", c.label));
    }
    if c.orig.proto == 6 {
        s.push_str(&format!(",protoinfo=(state={})", c.state));
    }
    s
}

fn conn_json(c: &ConnDump) -> serde_json::Value {
    json!({
        "zone": c.zone,
        "orig": tuple_json(&c.orig),
        "reply": tuple_json(&c.reply),
        "state": c.state,
        "expires_in_ms": c.expires_in_ms,
        "mark": c.mark,
        "label": format!("0x{:x}", c.label),
        "snat": c.snat,
        "dnat": c.dnat,
    })
}

fn zone_arg(a: &str) -> Result<Option<u16>, CmdError> {
    match a.strip_prefix("zone=") {
        Some(z) => z
            .parse::<u16>()
            .map(Some)
            .map_err(|_| CmdError(format!("bad zone {z:?} (0..65535)"))),
        None => Ok(None),
    }
}

/// Applies the limits the config store holds to the tracker (at start-up).
pub fn apply_stored_limits(c: &crate::store::Config, ct: &conntrack::Conntrack) {
    if let Some(n) = c.ct_limit {
        ct.set_limit(n);
    }
    for (z, n) in &c.ct_zone_limits {
        ct.set_zone_limit(*z, *n);
    }
}

/// Parses a flush tuple: `ct_nw_src=IP,ct_nw_dst=IP,ct_nw_proto=N[,ct_tp_src=P,ct_tp_dst=P]`
/// (`ct_ipv6_src`/`ct_ipv6_dst` for IPv6; `icmp_id=N` for ICMP echo), the original direction.
pub fn parse_tuple(s: &str) -> Result<Tuple, CmdError> {
    let bad = |m: &str| CmdError(format!("bad conntrack tuple {s:?}: {m}"));
    let mut t = Tuple::default();
    let (mut src, mut dst, mut proto) = (None, None, None);
    for kv in s.split(',').filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| bad("expected key=value"))?;
        let ip = |v: &str| v.parse::<IpAddr>().map_err(|_| bad("bad address"));
        let port = |v: &str| v.parse::<u16>().map_err(|_| bad("bad port"));
        match k {
            "ct_nw_src" | "ct_ipv6_src" => src = Some(ip(v)?),
            "ct_nw_dst" | "ct_ipv6_dst" => dst = Some(ip(v)?),
            "ct_nw_proto" => proto = Some(v.parse::<u8>().map_err(|_| bad("bad protocol"))?),
            "ct_tp_src" => t.sport = port(v)?,
            "ct_tp_dst" => t.dport = port(v)?,
            "icmp_id" => {
                t.sport = port(v)?;
                t.dport = t.sport;
            }
            _ => return Err(bad(&format!("unknown key {k:?}"))),
        }
    }
    let (Some(src), Some(dst), Some(proto)) = (src, dst, proto) else {
        return Err(bad("needs source, destination and ct_nw_proto"));
    };
    let put = |a: IpAddr, out: &mut [u8; 16]| match a {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => *out = a.octets(),
    };
    if src.is_ipv6() != dst.is_ipv6() {
        return Err(bad("mixed IPv4 and IPv6"));
    }
    t.v6 = src.is_ipv6();
    put(src, &mut t.src);
    put(dst, &mut t.dst);
    t.proto = proto;
    Ok(t)
}

impl Switch {
    pub(super) fn dispatch_ct(&mut self, command: &str, args: &[String]) -> CmdResult {
        let usage = |u: &str| CmdError(format!("usage: {command} {u}"));
        let ct = self.rt.dp.conntrack().clone();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match (command, args.as_slice()) {
            ("dump-conntrack", rest) if rest.len() <= 1 => {
                let zone = match rest.first() {
                    Some(a) => Some(zone_arg(a)?.ok_or_else(|| usage("[zone=N]"))?),
                    None => None,
                };
                let mut conns = ct.dump(zone, conntrack::clock_ms());
                conns.sort_by_key(|c| (c.zone, c.orig));
                let text: String = conns.iter().map(|c| conn_text(c) + "\n").collect();
                let data: Vec<_> = conns.iter().map(conn_json).collect();
                Ok(Response::ok(text, json!(data)))
            }
            ("dump-conntrack", _) => Err(usage("[zone=N]")),
            ("flush-conntrack", rest) if rest.len() <= 2 => {
                let mut zone = None;
                let mut tuple = None;
                for a in rest {
                    match zone_arg(a)? {
                        Some(z) if zone.is_none() => zone = Some(z),
                        Some(_) => return Err(usage("[zone=N] [TUPLE]")),
                        None if tuple.is_none() => tuple = Some(parse_tuple(a)?),
                        None => return Err(usage("[zone=N] [TUPLE]")),
                    }
                }
                let flushed = match tuple {
                    Some(t) => usize::from(ct.flush_tuple(zone.unwrap_or(0), &t)),
                    None => ct.flush(zone),
                };
                Ok(Response::ok(
                    format!("flushed {flushed}\n"),
                    json!({ "flushed": flushed }),
                ))
            }
            ("flush-conntrack", _) => Err(usage("[zone=N] [TUPLE]")),
            ("ct-stats", []) => {
                let s = ct.stats();
                let mut text = format!(
                    "connections: {} (limit {})\ncreated: {}\nexpired: {}\n\
                     refused by the global limit: {}\nrefused by a zone limit: {}\n\
                     NAT exhausted: {}\nfragments held: {} datagrams, {} bytes\n",
                    s.total,
                    s.limit,
                    s.created,
                    s.expired,
                    s.limit_global_hits,
                    s.limit_zone_hits,
                    s.nat_exhausted,
                    s.frag_held.0,
                    s.frag_held.1
                );
                for (z, n) in &s.per_zone {
                    let lim = ct.zone_limit(*z);
                    text.push_str(&format!("zone {z}: {n} (limit {lim})\n"));
                }
                for (st, n) in &s.per_tcp_state {
                    text.push_str(&format!("tcp {st}: {n}\n"));
                }
                for (why, n) in s.invalid.iter().filter(|(_, n)| **n > 0) {
                    text.push_str(&format!("invalid {why}: {n}\n"));
                }
                // Zones with connections, and zones with a limit but none yet.
                let mut per_zone: std::collections::BTreeMap<u16, u64> =
                    s.per_zone.iter().map(|(z, n)| (*z, *n as u64)).collect();
                for z in self.store.config().ct_zone_limits.keys() {
                    per_zone.entry(*z).or_insert(0);
                }
                let zones: serde_json::Map<String, serde_json::Value> = per_zone
                    .iter()
                    .map(|(z, n)| {
                        let v = json!({ "connections": n, "limit": ct.zone_limit(*z) });
                        (z.to_string(), v)
                    })
                    .collect();
                let data = json!({
                    "connections": s.total,
                    "limit": s.limit,
                    "created": s.created,
                    "expired": s.expired,
                    "limit_global_hits": s.limit_global_hits,
                    "limit_zone_hits": s.limit_zone_hits,
                    "nat_exhausted": s.nat_exhausted,
                    "zones": zones,
                    "per_proto": s.per_proto.iter().map(|(p, n)| (p.to_string(), *n))
                        .collect::<std::collections::BTreeMap<_, _>>(),
                    "per_tcp_state": s.per_tcp_state,
                    "invalid": s.invalid,
                    "frag_held_datagrams": s.frag_held.0,
                    "frag_held_bytes": s.frag_held.1,
                    "sweep_max_hold_ns": s.sweep_max_hold_ns,
                });
                Ok(Response::ok(text, data))
            }
            ("ct-stats", _) => Err(usage("")),
            ("set-ct-limit", [rest @ .., n]) if rest.len() <= 1 => {
                let n: u32 = n
                    .parse()
                    .map_err(|_| CmdError(format!("bad limit {n:?}")))?;
                let zone = match rest.first() {
                    Some(z) => Some(zone_arg(z)?.ok_or_else(|| usage("[zone=N] LIMIT"))?),
                    None => None,
                };
                // Stored first: a limit the store could not keep is not applied either.
                self.store.update(|c| {
                    match zone {
                        Some(z) if n == 0 => c.ct_zone_limits.remove(&z),
                        Some(z) => c.ct_zone_limits.insert(z, n),
                        None => c.ct_limit.replace(n),
                    };
                    Ok::<_, CmdError>(())
                })?;
                match zone {
                    Some(z) => ct.set_zone_limit(z, n),
                    None => ct.set_limit(n),
                }
                Ok(Response::ok("", json!(null)))
            }
            _ => Err(usage("[zone=N] LIMIT (0 in a zone: no zone limit)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_tuples_parse_and_bad_ones_are_errors() {
        let t = parse_tuple(
            "ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,ct_nw_proto=6,ct_tp_src=1234,ct_tp_dst=80",
        )
        .unwrap();
        assert_eq!(&t.src[..4], &[10, 0, 0, 1]);
        assert_eq!((t.sport, t.dport, t.proto, t.v6), (1234, 80, 6, false));
        let t = parse_tuple("ct_ipv6_src=fd00::1,ct_ipv6_dst=fd00::2,ct_nw_proto=58,icmp_id=7")
            .unwrap();
        assert!(t.v6 && t.sport == 7 && t.dport == 7);
        assert!(parse_tuple("ct_nw_src=10.0.0.1").is_err());
        assert!(parse_tuple("ct_nw_src=10.0.0.1,ct_nw_dst=fd00::1,ct_nw_proto=6").is_err());
        assert!(parse_tuple("bogus=1").is_err());
    }
}
