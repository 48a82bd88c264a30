//! The benchmark scenarios (rule set x traffic x packet size x queues x generator mode), their
//! names on the command line, and the OpenFlow rules and meters each one installs.
//!
//! Threads: the caller's (vireo-bench's main thread).
use crate::gen::RULES;
use serde::{Deserialize, Serialize};

/// What the switch is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// One rule per direction: in_port=A -> output B.
    P2p,
    /// One rule: NORMAL (MAC learning).
    Normal,
    /// `RULES` rules per direction on UDP dst port; this many distinct flows per direction.
    Flows(u32),
    /// As [`Kind::Flows`] with this many rules per direction instead of `RULES`: (flows,
    /// rules), the seeds' harder lookups (`flows10m-1k:64`: 10 M flows over 1K rules,
    /// `flows1m-10k:64`: 1 M flows over 10K rules).
    FlowsRules(u32, u32),
    /// As `P2p`, but both rules send through OpenFlow meter 1 first (`meter:1`): a PKTPS meter
    /// with one drop band of this many packets/s, shared by both directions.
    Meter(u32),
    /// As `P2p`, but every IP packet goes through connection tracking first: `ct(table=1)`,
    /// then in table 1 `ct(commit)` and the output (the firewall pattern's datapath work: a
    /// lookup, a recirculation, a commit of an existing connection), with this many
    /// connections: 1 is testpmd's single flow bouncing both ways (`ct:64`); N > 1 is N/2
    /// distinct UDP flows per direction from vireo-gen (`ct1k:64`, `ct1m:64`), each its own
    /// connection (none is replied to).
    Ct(u32),
    /// The connection-setup rate: the rules of [`Kind::Ct`], but no packet repeats a 5-tuple
    /// (vireo-gen walks [`CT_NEW_FLOWS`] flows per direction), so every packet the switch
    /// forwards has set up and committed a new connection (`ctnew:64`).
    CtNew,
    /// Each direction crosses a tunnel: encapsulated on one tunnel port, sent over loopback
    /// UDP, decapsulated on the other (see [`TunnelPorts`]); one flow-based port (the rules
    /// set `tun_id` and `tun_dst`) and one fixed.
    Tunnel(Tun),
    /// [`Kind::Tunnel`] on Vireo's native tunneling (`nvxlan:SIZE`, `ngeneve:SIZE`): the same
    /// ports and rules, but the tunnel addresses are on the internal port of an underlay
    /// bridge whose two `af-packet` ports are the ends of one veth pair, so each packet is
    /// `tnl_push`ed, crosses the veth and is `tnl_pop`ped without a socket (see
    /// `crate::native`). OVS-DPDK runs exactly what it runs for [`Kind::Tunnel`] (it is
    /// native there too).
    NativeTunnel(Tun),
}

/// The tunnel type of a [`Kind::Tunnel`] scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tun {
    /// VXLAN (`vxlan:SIZE`).
    Vxlan,
    /// Geneve (`geneve:SIZE`).
    Geneve,
}

/// Flows per direction in [`Kind::CtNew`]: more than a switch sets up in a run here (at 1 M
/// connections/s, 60 s), and each a distinct 5-tuple ([`crate::gen::flow_fields`] is unique
/// below 65.5 M).
pub const CT_NEW_FLOWS: u32 = 60_000_000;

/// The connection limit both switches get in [`Kind::CtNew`] (each's default is 3 M), so the
/// warm-up and the saturation trial stay below it.
pub const CT_NEW_LIMIT: u32 = 10_000_000;

/// The two tunnel ports of a tunnel scenario, as `vireoctl add-port` arguments after the
/// bridge: `ta` is flow-based on 127.0.0.101, `tb` has a fixed remote (`ta`) and VNI 5 on
/// 127.0.0.102; both on UDP port 14789 (not a well-known one, so a test's tunnel elsewhere
/// does not collide).
pub struct TunnelPorts;

impl TunnelPorts {
    /// Name of the flow-based port.
    pub const A: &'static str = "ta";
    /// Name of the fixed port.
    pub const B: &'static str = "tb";

    /// `add-port br0 ...` argument lists for both ports.
    pub fn add_port_args(t: Tun) -> [Vec<String>; 2] {
        Self::add_port_args_at(t, "127.0.0.101", "127.0.0.102")
    }

    /// [`TunnelPorts::add_port_args`] with `ta` on `a` and `tb` on `b`.
    pub fn add_port_args_at(t: Tun, a: &str, b: &str) -> [Vec<String>; 2] {
        let ty = match t {
            Tun::Vxlan => "type=vxlan",
            Tun::Geneve => "type=geneve",
        };
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        [
            v(&[
                Self::A,
                ty,
                "remote_ip=flow",
                "key=flow",
                &format!("local_ip={a}"),
                "dst_port=14789",
            ]),
            v(&[
                Self::B,
                ty,
                &format!("remote_ip={a}"),
                "key=5",
                &format!("local_ip={b}"),
                "dst_port=14789",
            ]),
        ]
    }
}

/// The rate of `meter:SIZE`: far above what any contender forwards on one core, so the meter
/// drops nothing and the scenario measures what metering costs.
pub const METER_NO_DROP_PPS: u32 = 100_000_000;

/// One scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    /// Rules and traffic.
    pub kind: Kind,
    /// Frame size in bytes (without FCS).
    pub size: usize,
    /// Queue pairs per port.
    pub queues: u16,
    /// Open loop: the testpmd generator sends continuously (`--forward-mode=flowgen`) instead
    /// of circulating what `--tx-first` injected. A switch that drops (a meter below the
    /// offered rate) would drain a closed loop.
    #[serde(default)]
    pub open: bool,
    /// The generator's virtio-user ports ask for the packed virtqueue layout (`packed_vq=1`,
    /// virtio 1.1) instead of the split one; the switch must offer `ring_packed`.
    #[serde(default)]
    pub packed: bool,
}

/// Packet sizes the full run sweeps.
pub const SIZES: [usize; 5] = [64, 256, 512, 1024, 1518];
/// Flow counts the full run sweeps.
pub const FLOWS: [u32; 4] = [1, 1_000, 100_000, 1_000_000];

/// `1`, `100k`, `1m`: a count as scenario names write it.
pub fn flow_label(n: u32) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Reads a count written by [`flow_label`] (`k` and `m` suffixes).
pub fn parse_count(s: &str) -> Option<u32> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1_000),
        b'm' | b'M' => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    num.parse::<u32>().ok()?.checked_mul(mul)
}

impl Scenario {
    /// Port-to-port with one queue.
    pub fn p2p(size: usize) -> Scenario {
        Scenario {
            kind: Kind::P2p,
            size,
            queues: 1,
            open: false,
            packed: false,
        }
    }

    /// The name used on the command line and in reports: `p2p:64`, `normal:64`,
    /// `flows1m:64`, `p2p:64:2q`, `meter:64` (a meter that drops nothing), `meter5m:64` (a
    /// 5 Mpps meter), then `:packed` for packed virtqueues and `:open` at the end for the
    /// open-loop generator.
    pub fn name(&self) -> String {
        let k = match self.kind {
            Kind::P2p => "p2p".to_string(),
            Kind::Normal => "normal".to_string(),
            Kind::Flows(n) => format!("flows{}", flow_label(n)),
            Kind::FlowsRules(n, r) => format!("flows{}-{}", flow_label(n), flow_label(r)),
            Kind::Meter(METER_NO_DROP_PPS) => "meter".to_string(),
            Kind::Meter(r) => format!("meter{}", flow_label(r)),
            Kind::Ct(1) => "ct".to_string(),
            Kind::Ct(n) => format!("ct{}", flow_label(n)),
            Kind::CtNew => "ctnew".to_string(),
            Kind::Tunnel(Tun::Vxlan) => "vxlan".to_string(),
            Kind::Tunnel(Tun::Geneve) => "geneve".to_string(),
            Kind::NativeTunnel(Tun::Vxlan) => "nvxlan".to_string(),
            Kind::NativeTunnel(Tun::Geneve) => "ngeneve".to_string(),
        };
        let q = if self.queues > 1 {
            format!(":{}q", self.queues)
        } else {
            String::new()
        };
        let p = if self.packed { ":packed" } else { "" };
        let o = if self.open { ":open" } else { "" };
        format!("{k}:{}{q}{p}{o}", self.size)
    }

    /// Parses a name as written by [`Scenario::name`].
    pub fn parse(s: &str) -> Result<Scenario, String> {
        let bad = || {
            format!(
                "bad scenario {s:?} (e.g. p2p:64, normal:1518, flows100k:64, p2p:64:2q, \
                 meter:64, meter5m:64:open, p2p:1518:packed)"
            )
        };
        let mut it = s.split(':');
        let kind = match it.next().ok_or_else(bad)? {
            "p2p" => Kind::P2p,
            "normal" => Kind::Normal,
            "meter" => Kind::Meter(METER_NO_DROP_PPS),
            "ct" => Kind::Ct(1),
            "ctnew" => Kind::CtNew,
            "vxlan" => Kind::Tunnel(Tun::Vxlan),
            "geneve" => Kind::Tunnel(Tun::Geneve),
            "nvxlan" => Kind::NativeTunnel(Tun::Vxlan),
            "ngeneve" => Kind::NativeTunnel(Tun::Geneve),
            f if f.starts_with("ct") => Kind::Ct(
                parse_count(&f["ct".len()..])
                    .filter(|&n| n > 0)
                    .ok_or_else(bad)?,
            ),
            f if f.starts_with("meter") => Kind::Meter(
                parse_count(&f["meter".len()..])
                    .filter(|&r| r > 0)
                    .ok_or_else(bad)?,
            ),
            f => {
                let f = f.strip_prefix("flows").ok_or_else(bad)?;
                match f.split_once('-') {
                    Some((n, r)) => Kind::FlowsRules(
                        parse_count(n).filter(|&n| n > 0).ok_or_else(bad)?,
                        parse_count(r)
                            .filter(|&r| (1..=u32::from(u16::MAX) + 1).contains(&r))
                            .ok_or_else(bad)?,
                    ),
                    None => Kind::Flows(parse_count(f).ok_or_else(bad)?),
                }
            }
        };
        let size: usize = it.next().unwrap_or("64").parse().map_err(|_| bad())?;
        let mut rest: Vec<&str> = it.collect();
        let open = rest.last() == Some(&"open");
        if open {
            rest.pop();
        }
        let packed = rest.last() == Some(&"packed");
        if packed {
            rest.pop();
        }
        let queues = match rest[..] {
            [] => 1,
            [q] => q
                .strip_suffix('q')
                .ok_or_else(bad)?
                .parse()
                .map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        if !(64..=1518).contains(&size) || queues == 0 {
            return Err(bad());
        }
        Ok(Scenario {
            kind,
            size,
            queues,
            open,
            packed,
        })
    }

    /// The meter the rules use, as `ovs-ofctl add-meter` and `vireoctl add-meter` write it.
    pub fn meter(&self) -> Option<String> {
        match self.kind {
            Kind::Meter(r) => Some(format!("meter=1,pktps,bands=type=drop,rate={r}")),
            _ => None,
        }
    }

    /// Rules per direction the flow scenarios install (UDP destination ports 0..rules); the
    /// generator spreads its flows over them.
    pub fn rule_count(&self) -> u32 {
        match self.kind {
            Kind::FlowsRules(_, r) => r,
            _ => RULES,
        }
    }

    /// Distinct flows per direction the generator sends.
    pub fn flows(&self) -> u32 {
        match self.kind {
            Kind::Flows(n) | Kind::FlowsRules(n, _) => n.max(1),
            Kind::Ct(n) => n.div_ceil(2).max(1),
            Kind::CtNew => CT_NEW_FLOWS,
            _ => 1,
        }
    }

    /// Seconds of warm-up vireo-gen needs before measuring: enough for every flow to have
    /// been sent at least once (every connection set up) even at a few hundred thousand new
    /// connections per second.
    pub fn warmup_secs(&self) -> f64 {
        match self.kind {
            Kind::Ct(n) if n > 1 => 2.0 + 3.0 * f64::from(n) / 1e6,
            _ => 0.0,
        }
    }

    /// Whether the testpmd generator can drive it (it sends one flow; see `flows`).
    pub fn testpmd_can_drive(&self) -> bool {
        !matches!(self.kind, Kind::Flows(n) | Kind::FlowsRules(n, _) | Kind::Ct(n) if n > 1)
            && self.kind != Kind::CtNew
    }

    /// OpenFlow rules (ovs-ofctl syntax), with the two ports written as `p0` and `p1`
    /// (tunnel scenarios: towards Vireo's `tb`, 127.0.0.102; see [`Scenario::rules_to`]).
    pub fn rules(&self, p0: &str, p1: &str) -> Vec<String> {
        self.rules_to(p0, p1, "127.0.0.102")
    }

    /// [`Scenario::rules`] with the tunnel scenarios' `tun_dst` (the fixed tunnel port's
    /// underlay address in that switch).
    pub fn rules_to(&self, p0: &str, p1: &str, tun_dst: &str) -> Vec<String> {
        match self.kind {
            Kind::P2p => vec![
                format!("in_port={p0},actions=output:{p1}"),
                format!("in_port={p1},actions=output:{p0}"),
            ],
            Kind::Meter(_) => vec![
                format!("in_port={p0},actions=meter:1,output:{p1}"),
                format!("in_port={p1},actions=meter:1,output:{p0}"),
            ],
            Kind::Normal => vec!["actions=NORMAL".to_string()],
            Kind::Ct(_) | Kind::CtNew => vec![
                "table=0,priority=10,ip,ct_state=-trk,actions=ct(table=1)".to_string(),
                format!("table=0,priority=0,in_port={p0},actions=output:{p1}"),
                format!("table=0,priority=0,in_port={p1},actions=output:{p0}"),
                format!("table=1,priority=10,ip,ct_state=+trk,in_port={p0},actions=ct(commit),output:{p1}"),
                format!("table=1,priority=10,ip,ct_state=+trk,in_port={p1},actions=ct(commit),output:{p0}"),
            ],
            // p0 -> encap on ta (VNI 5 to tb) -> decap on tb -> p1, and back the other way.
            Kind::Tunnel(_) | Kind::NativeTunnel(_) => {
                let (a, b) = (TunnelPorts::A, TunnelPorts::B);
                vec![
                    format!("in_port={p0},actions=set_field:5->tun_id,set_field:{tun_dst}->tun_dst,output:{a}"),
                    format!("in_port={b},actions=output:{p1}"),
                    format!("in_port={p1},actions=output:{b}"),
                    format!("tun_id=5,in_port={a},actions=output:{p0}"),
                ]
            }
            Kind::Flows(_) | Kind::FlowsRules(..) => {
                let rules = self.rule_count();
                let mut v = Vec::with_capacity(2 * rules as usize);
                for (a, b) in [(p0, p1), (p1, p0)] {
                    for k in 0..rules {
                        v.push(format!(
                            "priority=100,udp,in_port={a},tp_dst={k},actions=output:{b}"
                        ));
                    }
                }
                v
            }
        }
    }
}

/// The full matrix: every size port-to-port, NORMAL at 64 B, every flow count at 64 B, 10 M
/// flows over 1K rules and 1 M flows over 10K rules at 64 B, and two queues per port at 64 B.
pub fn full() -> Vec<Scenario> {
    let mut v: Vec<Scenario> = SIZES.iter().map(|&s| Scenario::p2p(s)).collect();
    v.push(Scenario {
        kind: Kind::Normal,
        ..Scenario::p2p(64)
    });
    for f in FLOWS {
        v.push(Scenario {
            kind: Kind::Flows(f),
            ..Scenario::p2p(64)
        });
    }
    // The seeds' harder lookups: many flows over many rules.
    for (f, r) in [(10_000_000, 1000), (1_000_000, 10_000)] {
        v.push(Scenario {
            kind: Kind::FlowsRules(f, r),
            ..Scenario::p2p(64)
        });
    }
    v.push(Scenario {
        queues: 2,
        ..Scenario::p2p(64)
    });
    v
}

/// The `--quick` subset.
pub fn quick() -> Vec<Scenario> {
    vec![Scenario::p2p(64)]
}

/// Parses a comma-separated list; `full`, `quick` and `sizes` expand to their sets.
pub fn parse_list(s: &str) -> Result<Vec<Scenario>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "full" | "all" => v.extend(full()),
            "quick" => v.extend(quick()),
            "sizes" => v.extend(SIZES.iter().map(|&s| Scenario::p2p(s))),
            p => v.push(Scenario::parse(p)?),
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for sc in full() {
            assert_eq!(Scenario::parse(&sc.name()).unwrap(), sc, "{}", sc.name());
        }
        assert_eq!(full().len(), 13);
        let s = Scenario::parse("flows1m:64:2q").unwrap();
        assert_eq!((s.kind, s.size, s.queues), (Kind::Flows(1_000_000), 64, 2));
        assert_eq!(Scenario::parse("normal").unwrap().size, 64);
        for bad in [
            "p2p:63",
            "p2p:64:0q",
            "flowsx:64",
            "tcp:64",
            "p2p:64:2q:1",
            "meter0:64",
            "meterx:64",
            "p2p:64:2",
            "p2p:64:open:2q",
        ] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_list("quick, sizes").unwrap().len(), 6);
        let ct = Scenario::parse("ct:64").unwrap();
        assert_eq!((ct.kind, ct.name()), (Kind::Ct(1), "ct:64".to_string()));
        assert_eq!((ct.flows(), ct.testpmd_can_drive()), (1, true));
        let many = Scenario::parse("ct1m:64").unwrap();
        assert_eq!(
            (many.kind, many.name()),
            (Kind::Ct(1_000_000), "ct1m:64".to_string())
        );
        assert_eq!((many.flows(), many.testpmd_can_drive()), (500_000, false));
        assert!(many.warmup_secs() >= 5.0);
        assert_eq!(many.rules("1", "2"), ct.rules("1", "2"));
        assert_eq!(Scenario::parse("ct1k:64").unwrap().flows(), 500);
        assert!(Scenario::parse("ct0:64").is_err() && Scenario::parse("ctx:64").is_err());
        assert!(ct.rules("1", "2").iter().any(|r| r.contains("ct(commit)")));
        let hard = Scenario::parse("flows10m-1k:64").unwrap();
        assert_eq!(
            (hard.kind, hard.name(), hard.flows(), hard.rule_count()),
            (
                Kind::FlowsRules(10_000_000, 1000),
                "flows10m-1k:64".into(),
                10_000_000,
                1000
            )
        );
        assert!(!hard.testpmd_can_drive());
        let r = Scenario::parse("flows1m-10k:64").unwrap().rules("1", "2");
        assert_eq!(r.len(), 20_000);
        assert!(r[9_999].ends_with("tp_dst=9999,actions=output:2"));
        assert!(Scenario::parse("flows1m-0:64").is_err());
        assert!(
            Scenario::parse("flows1m-100k:64").is_err(),
            "ports are 16 bits"
        );
        let new = Scenario::parse("ctnew:64").unwrap();
        assert_eq!(
            (new.kind, new.name()),
            (Kind::CtNew, "ctnew:64".to_string())
        );
        assert_eq!(
            (new.flows(), new.testpmd_can_drive()),
            (CT_NEW_FLOWS, false)
        );
        assert_eq!(new.rules("1", "2"), ct.rules("1", "2"));
        // Every packet of the run is a new 5-tuple.
        let first = crate::gen::flow_fields(0, 0, RULES);
        let last = crate::gen::flow_fields(0, CT_NEW_FLOWS - 1, RULES);
        assert_ne!(first, last);
        assert_ne!(
            crate::gen::flow_fields(0, 65_535 * RULES, RULES),
            first,
            "unique up to the flow count"
        );
        let g = Scenario::parse("geneve:128").unwrap();
        assert_eq!(
            (g.kind, g.name()),
            (Kind::Tunnel(Tun::Geneve), "geneve:128".into())
        );
        let r = Scenario::parse("vxlan:64").unwrap().rules("vu0", "vu1");
        assert_eq!(r.len(), 4);
        assert!(r[0].contains("->tun_dst,output:ta") && r[3].starts_with("tun_id=5,in_port=ta"));
        assert!(TunnelPorts::add_port_args(Tun::Vxlan)[0].contains(&"key=flow".to_string()));
        let o = Scenario::parse("vxlan:64")
            .unwrap()
            .rules_to("1", "2", "10.99.0.2");
        assert!(o[0].contains("set_field:10.99.0.2->tun_dst"), "{o:?}");
        let n = Scenario::parse("ngeneve:64").unwrap();
        assert_eq!(
            (n.kind, n.name()),
            (Kind::NativeTunnel(Tun::Geneve), "ngeneve:64".into())
        );
        assert_eq!(
            Scenario::parse("nvxlan:64").unwrap().rules("1", "2"),
            Scenario::parse("vxlan:64").unwrap().rules("1", "2")
        );
        let [a, b] = TunnelPorts::add_port_args_at(Tun::Vxlan, "10.98.0.1", "10.98.0.2");
        assert!(a.contains(&"local_ip=10.98.0.1".to_string()), "{a:?}");
        assert!(b.contains(&"remote_ip=10.98.0.1".to_string()), "{b:?}");
        assert!(b.contains(&"local_ip=10.98.0.2".to_string()), "{b:?}");
    }

    #[test]
    fn rules_per_scenario() {
        assert_eq!(
            Scenario::p2p(64).rules("1", "2"),
            vec!["in_port=1,actions=output:2", "in_port=2,actions=output:1"]
        );
        let f = Scenario::parse("flows1k:64").unwrap();
        let r = f.rules("vu0", "vu1");
        assert_eq!(r.len(), 2000);
        assert_eq!(
            r[1999],
            "priority=100,udp,in_port=vu1,tp_dst=999,actions=output:vu0"
        );
        assert!(!f.testpmd_can_drive());
        assert!(Scenario::parse("flows1:64").unwrap().testpmd_can_drive());
    }

    #[test]
    fn meter_scenarios() {
        let m = Scenario::parse("meter:64").unwrap();
        assert_eq!((m.kind, m.open), (Kind::Meter(METER_NO_DROP_PPS), false));
        assert_eq!(m.name(), "meter:64");
        assert_eq!(
            m.meter().unwrap(),
            "meter=1,pktps,bands=type=drop,rate=100000000"
        );
        assert_eq!(
            m.rules("1", "2"),
            vec![
                "in_port=1,actions=meter:1,output:2",
                "in_port=2,actions=meter:1,output:1"
            ]
        );
        let d = Scenario::parse("meter5m:64:open").unwrap();
        assert_eq!(
            (d.kind, d.open, d.queues),
            (Kind::Meter(5_000_000), true, 1)
        );
        assert_eq!(d.name(), "meter5m:64:open");
        assert!(d.meter().unwrap().ends_with("rate=5000000"));
        let o = Scenario::parse("p2p:64:2q:open").unwrap();
        assert_eq!((o.queues, o.open), (2, true));
        assert_eq!(Scenario::parse(&o.name()).unwrap(), o);
        assert_eq!(Scenario::p2p(64).meter(), None);
        assert!(d.testpmd_can_drive());
    }

    #[test]
    fn packed_scenarios() {
        let p = Scenario::parse("p2p:1518:packed").unwrap();
        assert_eq!(
            (p.kind, p.size, p.packed, p.open),
            (Kind::P2p, 1518, true, false)
        );
        assert_eq!(p.name(), "p2p:1518:packed");
        let q = Scenario::parse("p2p:64:2q:packed:open").unwrap();
        assert_eq!((q.queues, q.packed, q.open), (2, true, true));
        assert_eq!(Scenario::parse(&q.name()).unwrap(), q);
        assert!(!Scenario::p2p(64).packed);
        for bad in [
            "p2p:64:open:packed",
            "p2p:64:packed:2q",
            "p2p:64:packed:packed",
        ] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }
}
