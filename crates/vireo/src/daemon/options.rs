//! Port types and their options: which types exist, which are built, which `key=value`
//! options each accepts, and the checks on their values. Pure functions, control thread only.
use std::collections::BTreeMap;

/// What the daemon knows about one port type.
#[derive(Debug)]
pub struct KindSpec {
    /// Type name as typed by the user.
    pub name: &'static str,
    /// Options specific to this type.
    pub options: &'static [&'static str],
    /// False for types named in INTERFACE.md that this build cannot create yet.
    pub built: bool,
}

/// Options every port type accepts.
pub const COMMON_OPTIONS: &[&str] = &[
    "tag",
    "trunks",
    "pmd-rxq-affinity",
    "mac-limit",
    "ingress-policing-rate",
    "ingress-policing-burst",
    "ingress-policing-kpkts-rate",
    "ingress-policing-kpkts-burst",
    "egress-policer-cir",
    "egress-policer-cbs",
];

/// Most learned MACs a port may be allowed (`mac-limit`); 0 = no per-port limit.
pub const MAX_MAC_LIMIT: usize = 1_000_000;

/// Every port type, built or not.
pub const KINDS: &[KindSpec] = &[
    KindSpec {
        name: "dummy",
        options: &[],
        built: true,
    },
    KindSpec {
        name: "vhost-user",
        options: &["path", "queues", "socket-mode", "socket-group", "offloads"],
        built: true,
    },
    KindSpec {
        name: "vhost-user-client",
        options: &["path", "queues", "reconnect-ms", "offloads"],
        built: true,
    },
    KindSpec {
        name: "af-xdp",
        options: &["ifname", "queues", "xdp-mode", "xdp-steering", "xdp-mark"],
        built: true,
    },
    KindSpec {
        name: "af-packet",
        options: &["ifname", "offloads"],
        built: true,
    },
    KindSpec {
        name: "tap",
        options: &["mtu", "offloads"],
        built: true,
    },
    KindSpec {
        name: "internal",
        options: &["mtu", "offloads"],
        built: true,
    },
    KindSpec {
        name: "vxlan",
        options: ports::tunnel::OPTIONS,
        built: true,
    },
    KindSpec {
        name: "geneve",
        options: ports::tunnel::OPTIONS,
        built: true,
    },
];

/// The default type of `add-port` without `type=`.
pub const DEFAULT_KIND: &str = "vhost-user";

/// Looks up a type, failing with a message naming it.
pub fn kind(name: &str) -> Result<&'static KindSpec, String> {
    let spec = KINDS.iter().find(|k| k.name == name).ok_or_else(|| {
        let names: Vec<_> = KINDS.iter().map(|k| k.name).collect();
        format!("unknown port type {name:?} (types: {})", names.join(", "))
    })?;
    if !spec.built {
        return Err(format!(
            "port type {name:?} is not implemented yet in this build of vireod"
        ));
    }
    Ok(spec)
}

/// Splits `key=value` arguments, rejecting malformed and repeated keys.
pub fn parse_kv(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            return Err(format!("malformed option {a:?}: expected key=value"));
        };
        if k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!("malformed option {a:?}: bad key {k:?}"));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("option {k:?} given twice"));
        }
    }
    Ok(out)
}

/// Checks that every option is known for `spec` and that its value makes sense. An empty value
/// is allowed (it clears the option in `set-port`).
pub fn validate(spec: &KindSpec, opts: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in opts {
        if !COMMON_OPTIONS.contains(&k.as_str()) && !spec.options.contains(&k.as_str()) {
            let mut known: Vec<&str> = COMMON_OPTIONS.to_vec();
            known.extend_from_slice(spec.options);
            return Err(format!(
                "unknown option {k:?} for port type {} (options: {})",
                spec.name,
                known.join(", ")
            ));
        }
        if v.is_empty() {
            continue;
        }
        check_value(k, v).map_err(|e| format!("bad value for {k}: {e}"))?;
    }
    parse_policing(opts).map(|_| ())
}

fn check_value(key: &str, v: &str) -> Result<(), String> {
    match key {
        "tag" => parse_vlan(v).map(|_| ()),
        "trunks" => parse_vlan_list(v).map(|_| ()),
        "pmd-rxq-affinity" => parse_affinity(v).map(|_| ()),
        "mac-limit" => parse_mac_limit(v).map(|_| ()),
        k if k.starts_with("ingress-policing-") || k.starts_with("egress-policer-") => {
            parse_u32(v).map(|_| ())
        }
        "queues" => match v.parse::<usize>() {
            Ok(n) if (1..=16).contains(&n) => Ok(()),
            _ => Err(format!("{v:?} is not a queue count from 1 to 16")),
        },
        "reconnect-ms" => match v.parse::<u64>() {
            Ok(n) if (1..=3_600_000).contains(&n) => Ok(()),
            _ => Err(format!(
                "{v:?} is not a number of milliseconds (1..3600000)"
            )),
        },
        "xdp-steering" | "xdp-mark" => match v {
            "on" | "off" => Ok(()),
            _ => Err(format!("{v:?} is not on or off")),
        },
        "offloads" => parse_offloads(Some(v)).map(|_| ()),
        "xdp-mode" => match v {
            "best-effort" | "native" | "generic" => Ok(()),
            _ => Err(format!("{v:?} is not one of best-effort, native, generic")),
        },
        "path" => {
            if v.len() > 107 {
                Err("longer than a unix socket path can be (107 bytes)".into())
            } else if v.contains('\0') {
                Err("contains a NUL byte".into())
            } else {
                Ok(())
            }
        }
        "socket-mode" => parse_mode(v).map(|_| ()),
        "socket-group" => parse_group(v).map(|_| ()),
        "mtu" => match v.parse::<u32>() {
            Ok(m) => ports::tap::check_mtu(m).map_err(|e| e.0),
            Err(_) => Err(format!("{v:?} is not a number")),
        },
        "ifname" => {
            if v.len() > 15 || v.contains('/') || v.contains(char::is_whitespace) {
                Err(format!("{v:?} is not an interface name"))
            } else {
                Ok(())
            }
        }
        "remote_ip" | "local_ip" | "key" | "dst_port" | "tos" | "ttl" | "csum" => {
            ports::tunnel::check_option(key, v)
        }
        _ => Ok(()),
    }
}

/// The `offloads` option (vhost-user, tap, internal): `true` (the default: checksum and TSO
/// offloads negotiated with the guest or declared to the kernel) or `false` (none; the
/// datapath finishes them in software, for debugging and for the benchmark's off case).
pub fn parse_offloads(v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("") | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(format!("{v:?} is not true or false")),
    }
}

/// A socket file mode in octal, such as `0660` (permission bits only, at most 0777).
pub fn parse_mode(v: &str) -> Result<u32, String> {
    let ok = (1..=4).contains(&v.len()) && v.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(v, 8) {
        Ok(m) if ok && m <= 0o777 => Ok(m),
        _ => Err(format!("{v:?} is not an octal mode from 0000 to 0777")),
    }
}

/// A group, by name or number; it must exist.
pub fn parse_group(v: &str) -> Result<u32, String> {
    let found = match v.parse::<u32>() {
        Ok(gid) => nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)),
        Err(_) => nix::unistd::Group::from_name(v),
    };
    match found {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(format!("no group named {v:?}")),
        Err(e) => Err(format!("cannot look up group {v:?}: {e}")),
    }
}

/// Who may connect to a socket: `mode` (default 0660) and `group` (default: unchanged).
pub fn socket_access(
    mode: Option<&str>,
    group: Option<&str>,
) -> Result<vhost::sockfile::Access, String> {
    Ok(vhost::sockfile::Access {
        mode: mode
            .map(parse_mode)
            .transpose()
            .map_err(|e| format!("socket-mode: {e}"))?
            .unwrap_or(0o660),
        gid: group
            .map(parse_group)
            .transpose()
            .map_err(|e| format!("socket-group: {e}"))?,
    })
}

/// A VLAN id, 1..=4094.
pub fn parse_vlan(v: &str) -> Result<u16, String> {
    match v.parse::<u16>() {
        Ok(n) if (1..=4094).contains(&n) => Ok(n),
        _ => Err(format!("{v:?} is not a VLAN id from 1 to 4094")),
    }
}

/// A comma-separated list of VLAN ids.
pub fn parse_vlan_list(v: &str) -> Result<Vec<u16>, String> {
    v.split(',').map(|s| parse_vlan(s.trim())).collect()
}

/// A learned-MAC limit: 0 (no per-port limit, only the bridge's) to [`MAX_MAC_LIMIT`].
pub fn parse_mac_limit(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n <= MAX_MAC_LIMIT => Ok(n),
        _ => Err(format!(
            "{v:?} is not a number of MACs from 0 (no limit) to {MAX_MAC_LIMIT}"
        )),
    }
}

/// `RXQ:CORE[,RXQ:CORE...]`.
pub fn parse_affinity(v: &str) -> Result<Vec<(usize, usize)>, String> {
    v.split(',')
        .map(|pair| {
            let (q, c) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not RXQ:CORE"))?;
            let q = q
                .trim()
                .parse()
                .map_err(|_| format!("bad rx queue {q:?}"))?;
            let c = c.trim().parse().map_err(|_| format!("bad core {c:?}"))?;
            Ok((q, c))
        })
        .collect()
}

/// The options that place a port in the switch without re-creating it: VLANs, rxq pins and
/// the learned-MAC limit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Access VLAN (`tag`).
    pub tag: Option<u16>,
    /// Trunk VLANs (`trunks`; empty = all).
    pub trunks: Vec<u16>,
    /// `pmd-rxq-affinity` pins.
    pub affinity: Vec<(usize, usize)>,
    /// `mac-limit` (`None`: the pipeline's default).
    pub mac_limit: Option<usize>,
    /// Ingress policing and egress policer (see [`parse_policing`]).
    pub policing: (Option<dp::police::Limit>, Option<dp::police::Limit>),
}

impl Placement {
    /// Parses the placement options of a port (already validated when they were set).
    pub fn of(opts: &BTreeMap<String, String>) -> Result<Placement, String> {
        let opt = |k: &str| opts.get(k).map(String::as_str);
        Ok(Placement {
            tag: opt("tag").map(parse_vlan).transpose()?,
            trunks: opt("trunks")
                .map(parse_vlan_list)
                .transpose()?
                .unwrap_or_default(),
            affinity: opt("pmd-rxq-affinity")
                .map(parse_affinity)
                .transpose()?
                .unwrap_or_default(),
            mac_limit: opt("mac-limit").map(parse_mac_limit).transpose()?,
            policing: parse_policing(opts)?,
        })
    }
}

fn parse_u32(v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| format!("{v:?} is not a number from 0 to 4294967295"))
}

/// Port policing, with OVS's names and units: `ingress-policing-rate` (kbps, counting the
/// whole frame) with `ingress-policing-burst` (kilobits; 0 = 8000, as OVS), or
/// `ingress-policing-kpkts-rate` (thousands of packets/s) with `ingress-policing-kpkts-burst`
/// (thousands of packets; 0 = a tenth of a second at the rate); and the egress policer
/// `egress-policer-cir` (bytes/s) with `egress-policer-cbs` (bytes; 0 = a tenth of a second).
/// A rate of 0 (or none) turns a policer off. Returns (ingress, egress).
pub fn parse_policing(
    opts: &BTreeMap<String, String>,
) -> Result<(Option<dp::police::Limit>, Option<dp::police::Limit>), String> {
    use dp::police::Limit;
    let get = |k: &str| -> Result<u32, String> {
        opts.get(k).filter(|v| !v.is_empty()).map_or(Ok(0), |v| {
            parse_u32(v).map_err(|e| format!("bad value for {k}: {e}"))
        })
    };
    let (kbps, kb) = (
        get("ingress-policing-rate")?,
        get("ingress-policing-burst")?,
    );
    let (kpps, kpkts) = (
        get("ingress-policing-kpkts-rate")?,
        get("ingress-policing-kpkts-burst")?,
    );
    let (cir, cbs) = (get("egress-policer-cir")?, get("egress-policer-cbs")?);
    if kbps != 0 && kpps != 0 {
        return Err(
            "set ingress-policing-rate or ingress-policing-kpkts-rate, not both".to_string(),
        );
    }
    let too_big = |k: &str| format!("{k} is too large");
    let ingress = if kbps != 0 {
        Some(Limit {
            pktps: false,
            rate: kbps,
            burst: if kb == 0 { 8000 } else { kb },
        })
    } else if kpps != 0 {
        Some(Limit {
            pktps: true,
            rate: kpps
                .checked_mul(1000)
                .ok_or_else(|| too_big("ingress-policing-kpkts-rate"))?,
            burst: kpkts
                .checked_mul(1000)
                .ok_or_else(|| too_big("ingress-policing-kpkts-burst"))?,
        })
    } else {
        None
    };
    let egress = if cir == 0 {
        None
    } else {
        let kbps = u32::try_from(u64::from(cir) * 8 / 1000).unwrap_or(u32::MAX);
        if kbps == 0 {
            return Err("egress-policer-cir must be at least 125 bytes/s".to_string());
        }
        Some(Limit {
            pktps: false,
            rate: kbps,
            burst: u32::try_from(u64::from(cbs) * 8 / 1000).unwrap_or(u32::MAX),
        })
    };
    Ok((ingress, egress))
}

/// The lowest number from 1 up that `used` does not hold.
pub fn lowest_free(used: impl IntoIterator<Item = u32>) -> u32 {
    let used: std::collections::BTreeSet<u32> = used.into_iter().collect();
    (1..).find(|n| !used.contains(n)).unwrap_or(u32::MAX)
}

/// An rx queue assignment mode.
pub fn parse_assign(v: &str) -> Result<dp::AssignMode, String> {
    match v {
        "roundrobin" => Ok(dp::AssignMode::RoundRobin),
        "cycles" => Ok(dp::AssignMode::Cycles),
        "group" => Ok(dp::AssignMode::Group),
        _ => Err(format!("{v:?} is not roundrobin, cycles or group")),
    }
}

/// Auto load-balance: `off`, or an improvement threshold in percent (1 to 100).
pub fn parse_auto_lb(v: &str) -> Result<Option<u32>, String> {
    if v == "off" {
        return Ok(None);
    }
    match v.trim_end_matches('%').parse::<u32>() {
        Ok(n) if (1..=100).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{v:?} is not off or a threshold from 1 to 100 (percent)"
        )),
    }
}

/// The datapath's auto load-balance settings for a threshold.
pub fn auto_lb(threshold: Option<u32>) -> Option<dp::AutoLb> {
    threshold.map(|t| dp::AutoLb {
        threshold_pct: t,
        ..dp::AutoLb::default()
    })
}

/// A CPU list such as `0,2-3`: sorted, without duplicates, each below 1024.
pub fn parse_cpu_list(v: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let (a, b): (usize, usize) = match (a.parse(), b.parse()) {
            (Ok(a), Ok(b)) if a <= b && b < 1024 => (a, b),
            _ => return Err(format!("{part:?} is not a core or core range (like 0,2-3)")),
        };
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Bridge and port names: 1 to 64 characters of letters, digits, `_`, `-`, `.`, not starting
/// with `-` or `.` (they name files in the run directory).
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['-', '.'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid {what} name {name:?}: use 1-64 letters, digits, '_', '-', '.'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_parsing_rejects_malformed_and_repeated() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_kv(&a(&["tag=5"])).unwrap()["tag"], "5");
        assert!(parse_kv(&a(&["tag"]))
            .unwrap_err()
            .contains("expected key=value"));
        assert!(parse_kv(&a(&["=5"])).unwrap_err().contains("bad key"));
        assert!(parse_kv(&a(&["tag=1", "tag=2"]))
            .unwrap_err()
            .contains("given twice"));
    }

    #[test]
    fn policing_options_follow_ovs_units() {
        let o = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let (i, e) = parse_policing(&o(&[("ingress-policing-rate", "10000")])).unwrap();
        let i = i.unwrap();
        assert_eq!(
            (i.pktps, i.rate, i.burst),
            (false, 10_000, 8000),
            "burst 0 = 8000 kb"
        );
        assert!(e.is_none());
        let (i, _) = parse_policing(&o(&[
            ("ingress-policing-kpkts-rate", "50"),
            ("ingress-policing-kpkts-burst", "2"),
        ]))
        .unwrap();
        let i = i.unwrap();
        assert_eq!((i.pktps, i.rate, i.burst), (true, 50_000, 2000));
        let (_, e) = parse_policing(&o(&[
            ("egress-policer-cir", "1250000"),
            ("egress-policer-cbs", "12500"),
        ]))
        .unwrap();
        let e = e.unwrap();
        assert_eq!((e.pktps, e.rate, e.burst), (false, 10_000, 100));
        assert_eq!(
            parse_policing(&o(&[("ingress-policing-rate", "0")])).unwrap(),
            (None, None),
            "rate 0 is off"
        );
        let both = o(&[
            ("ingress-policing-rate", "1"),
            ("ingress-policing-kpkts-rate", "1"),
        ]);
        assert!(parse_policing(&both).unwrap_err().contains("not both"));
        assert!(validate(kind("dummy").unwrap(), &both).is_err());
        assert!(parse_policing(&o(&[("egress-policer-cir", "100")])).is_err());
        assert!(parse_policing(&o(&[("ingress-policing-kpkts-rate", "5000000")])).is_err());
    }

    #[test]
    fn option_values_are_checked() {
        let spec = kind("dummy").unwrap();
        let o = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(validate(spec, &o("tag", "100")).is_ok());
        assert!(validate(spec, &o("tag", "4095")).is_err());
        assert!(validate(spec, &o("trunks", "1,2,x")).is_err());
        assert!(validate(spec, &o("pmd-rxq-affinity", "0:1,1:0")).is_ok());
        assert!(validate(spec, &o("pmd-rxq-affinity", "0-1")).is_err());
        assert!(validate(spec, &o("mac-limit", "0")).is_ok());
        assert!(validate(spec, &o("mac-limit", "64")).is_ok());
        assert!(validate(spec, &o("mac-limit", "-1")).is_err());
        assert!(validate(spec, &o("mac-limit", "1000001")).is_err());
        assert!(validate(spec, &o("ingress-policing-rate", "10000")).is_ok());
        assert!(validate(spec, &o("ingress-policing-rate", "-1")).is_err());
        assert!(validate(spec, &o("egress-policer-cir", "fast")).is_err());
        assert!(validate(spec, &o("path", "/x"))
            .unwrap_err()
            .contains("unknown option \"path\""));
    }

    #[test]
    fn offloads_option_is_a_boolean_on_the_kinds_that_have_offloads() {
        let o = |v: &str| BTreeMap::from([("offloads".to_string(), v.to_string())]);
        for k in [
            "vhost-user",
            "vhost-user-client",
            "af-packet",
            "tap",
            "internal",
        ] {
            let spec = kind(k).unwrap();
            assert!(validate(spec, &o("true")).is_ok(), "{k}");
            assert!(validate(spec, &o("false")).is_ok(), "{k}");
            let e = validate(spec, &o("off")).unwrap_err();
            assert!(e.contains("not true or false"), "{k}: {e}");
        }
        for k in ["af-xdp", "vxlan", "dummy"] {
            let e = validate(kind(k).unwrap(), &o("false")).unwrap_err();
            assert!(e.contains("unknown option \"offloads\""), "{k}: {e}");
        }
        assert_eq!(parse_offloads(None), Ok(true));
        assert_eq!(parse_offloads(Some("false")), Ok(false));
    }

    #[test]
    fn socket_options_are_checked() {
        let spec = kind("vhost-user").unwrap();
        let o = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(validate(spec, &o("socket-mode", "0660")).is_ok());
        assert!(validate(spec, &o("socket-mode", "600")).is_ok());
        for bad in ["0999", "1777", "rw", "-1", "06600"] {
            let e = validate(spec, &o("socket-mode", bad)).unwrap_err();
            assert!(e.contains("octal mode") && !e.contains('\n'), "{bad}: {e}");
        }
        assert_eq!(parse_group("root").unwrap(), 0);
        assert_eq!(parse_group("0").unwrap(), 0);
        let e = validate(spec, &o("socket-group", "no-such-group-xyz")).unwrap_err();
        assert!(e.contains("no group named"), "{e}");
        // Client-mode ports do not own their socket: the options are refused there.
        let client = kind("vhost-user-client").unwrap();
        assert!(validate(client, &o("socket-mode", "0660")).is_err());
    }

    #[test]
    fn unbuilt_and_unknown_types_say_so() {
        assert!(kind("nope").unwrap_err().contains("unknown port type"));
        let xdp = kind("af-xdp").unwrap();
        let o = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(validate(xdp, &o("xdp-mode", "generic")).is_ok());
        assert!(validate(xdp, &o("xdp-mode", "skb"))
            .unwrap_err()
            .contains("best-effort, native, generic"));
        assert!(kind("af-packet").is_ok());
        let spec = kind("tap").unwrap();
        let o = |v: &str| BTreeMap::from([("mtu".to_string(), v.to_string())]);
        assert!(validate(spec, &o("9000")).is_ok());
        assert!(validate(spec, &o("9500"))
            .unwrap_err()
            .contains("outside 68.."));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0,2-3,2").unwrap(), vec![0, 2, 3]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
    }

    #[test]
    fn names() {
        assert!(check_name("bridge", "br0").is_ok());
        assert!(check_name("bridge", "../x").is_err());
        assert!(check_name("bridge", "").is_err());
        assert!(check_name("port", "-p").is_err());
    }
}
