//! PMD counters and the serializable reports the control thread hands to the daemon.
//!
//! Owns: [`PmdCounters`] (atomics written by exactly one PMD with plain load/store pairs, read
//! by the control thread), [`Tally`] (a PMD's per-burst scratch counts, published once per
//! burst), the report types [`PmdStats`], [`RxqInfo`], [`MegaflowInfo`], and the text form of
//! action lists.
//! Threads: counters are written on PMD threads and read on the control thread; no locks.
use crate::action::Action;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Counts gathered during one burst (or one loop iteration) before publishing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Packets received.
    pub packets: u64,
    /// Packets classified by their XDP flow mark (verified against the megaflow it names),
    /// without a cache lookup.
    pub mark_hits: u64,
    /// Those of `mark_hits` whose flow key was not even extracted (the megaflow's skip check,
    /// `flow::SkipCheck`, passed on the frame's bytes).
    pub mark_skips: u64,
    /// Exact-match cache hits.
    pub emc_hits: u64,
    /// Packets that did not probe the EMC because its gate was closed (`emc::EmcGate`: too
    /// few hits lately).
    pub emc_bypassed: u64,
    /// Signature-match cache hits.
    pub smc_hits: u64,
    /// Packets past the EMC that did not probe the SMC because the classifier had fewer
    /// subtables than `DpTuning::smc_min_subtables` (its one probe is cheaper).
    pub smc_bypassed: u64,
    /// Megaflow classifier hits.
    pub megaflow_hits: u64,
    /// Upcalls (packets that missed every cache).
    pub misses: u64,
    /// Packets or copies that were not sent: tx refused them or the output port is gone.
    pub lost: u64,
    /// Packets re-classified after a `ct(table=N)` (each pass counts).
    pub recirculations: u64,
    /// Packets dropped because they recirculated more than `MAX_RECIRC_DEPTH` times (or
    /// released fragments found the recirculation batch full).
    pub recirc_drops: u64,
    /// Partial checksums completed in software (for an output port without checksum offload).
    pub sw_csum: u64,
    /// GSO frames cut into segments in software (for an output port without TSO).
    pub sw_segmented: u64,
    /// Segments those cuts produced.
    pub sw_segments: u64,
}

/// A PMD's live counters (single writer: the PMD).
#[derive(Debug, Default)]
pub struct PmdCounters {
    packets: AtomicU64,
    mark_hits: AtomicU64,
    mark_skips: AtomicU64,
    emc_hits: AtomicU64,
    emc_bypassed: AtomicU64,
    smc_hits: AtomicU64,
    smc_bypassed: AtomicU64,
    megaflow_hits: AtomicU64,
    misses: AtomicU64,
    lost: AtomicU64,
    recirculations: AtomicU64,
    recirc_drops: AtomicU64,
    sw_csum: AtomicU64,
    sw_segmented: AtomicU64,
    sw_segments: AtomicU64,
    busy_cycles: AtomicU64,
    idle_cycles: AtomicU64,
}

#[inline(always)]
fn bump(a: &AtomicU64, v: u64) {
    if v != 0 {
        a.store(a.load(Relaxed).wrapping_add(v), Relaxed);
    }
}

/// A raw copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawPmdStats {
    /// See [`Tally`].
    pub tally: Tally,
    /// Cycles spent in iterations that processed packets.
    pub busy_cycles: u64,
    /// Cycles spent in iterations that found nothing (sleeps included).
    pub idle_cycles: u64,
}

impl PmdCounters {
    /// Publishes a burst's counts (PMD thread only).
    #[inline]
    pub fn publish(&self, t: &Tally) {
        bump(&self.mark_hits, t.mark_hits);
        bump(&self.mark_skips, t.mark_skips);
        bump(&self.emc_hits, t.emc_hits);
        bump(&self.emc_bypassed, t.emc_bypassed);
        bump(&self.smc_hits, t.smc_hits);
        bump(&self.smc_bypassed, t.smc_bypassed);
        bump(&self.megaflow_hits, t.megaflow_hits);
        bump(&self.misses, t.misses);
        bump(&self.lost, t.lost);
        bump(&self.recirculations, t.recirculations);
        bump(&self.recirc_drops, t.recirc_drops);
        bump(&self.sw_csum, t.sw_csum);
        bump(&self.sw_segmented, t.sw_segmented);
        bump(&self.sw_segments, t.sw_segments);
        // Last, with release: a reader that sees these packets also sees their outcomes.
        self.packets
            .store(self.packets.load(Relaxed).wrapping_add(t.packets), Release);
    }

    /// Adds busy and idle cycles (PMD thread only).
    #[inline]
    pub fn cycles(&self, busy: u64, idle: u64) {
        bump(&self.busy_cycles, busy);
        bump(&self.idle_cycles, idle);
    }

    /// A copy.
    pub fn snapshot(&self) -> RawPmdStats {
        let packets = self.packets.load(Acquire);
        RawPmdStats {
            tally: Tally {
                packets,
                mark_hits: self.mark_hits.load(Relaxed),
                mark_skips: self.mark_skips.load(Relaxed),
                emc_hits: self.emc_hits.load(Relaxed),
                emc_bypassed: self.emc_bypassed.load(Relaxed),
                smc_hits: self.smc_hits.load(Relaxed),
                smc_bypassed: self.smc_bypassed.load(Relaxed),
                megaflow_hits: self.megaflow_hits.load(Relaxed),
                misses: self.misses.load(Relaxed),
                lost: self.lost.load(Relaxed),
                recirculations: self.recirculations.load(Relaxed),
                recirc_drops: self.recirc_drops.load(Relaxed),
                sw_csum: self.sw_csum.load(Relaxed),
                sw_segmented: self.sw_segmented.load(Relaxed),
                sw_segments: self.sw_segments.load(Relaxed),
            },
            busy_cycles: self.busy_cycles.load(Relaxed),
            idle_cycles: self.idle_cycles.load(Relaxed),
        }
    }
}

impl RawPmdStats {
    /// `self - base`, field by field (saturating).
    pub fn since(&self, base: &RawPmdStats) -> RawPmdStats {
        let (a, b) = (&self.tally, &base.tally);
        RawPmdStats {
            tally: Tally {
                packets: a.packets.saturating_sub(b.packets),
                mark_hits: a.mark_hits.saturating_sub(b.mark_hits),
                mark_skips: a.mark_skips.saturating_sub(b.mark_skips),
                emc_hits: a.emc_hits.saturating_sub(b.emc_hits),
                emc_bypassed: a.emc_bypassed.saturating_sub(b.emc_bypassed),
                smc_hits: a.smc_hits.saturating_sub(b.smc_hits),
                smc_bypassed: a.smc_bypassed.saturating_sub(b.smc_bypassed),
                megaflow_hits: a.megaflow_hits.saturating_sub(b.megaflow_hits),
                misses: a.misses.saturating_sub(b.misses),
                lost: a.lost.saturating_sub(b.lost),
                recirculations: a.recirculations.saturating_sub(b.recirculations),
                recirc_drops: a.recirc_drops.saturating_sub(b.recirc_drops),
                sw_csum: a.sw_csum.saturating_sub(b.sw_csum),
                sw_segmented: a.sw_segmented.saturating_sub(b.sw_segmented),
                sw_segments: a.sw_segments.saturating_sub(b.sw_segments),
            },
            busy_cycles: self.busy_cycles.saturating_sub(base.busy_cycles),
            idle_cycles: self.idle_cycles.saturating_sub(base.idle_cycles),
        }
    }
}

/// `pmd-stats-show` for one PMD.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PmdStats {
    /// CPU core the PMD is pinned to.
    pub core: usize,
    /// Its NUMA node.
    pub numa: usize,
    /// Packets received.
    pub packets: u64,
    /// Packets classified by a verified XDP flow mark (no cache lookup).
    pub mark_hits: u64,
    /// Those of `mark_hits` classified without extracting their flow key.
    pub mark_skips: u64,
    /// Exact-match cache hits.
    pub emc_hits: u64,
    /// Packets that skipped the EMC (its gate closed for a low hit rate).
    pub emc_bypassed: u64,
    /// Signature-match cache hits.
    pub smc_hits: u64,
    /// Packets that skipped the SMC (the classifier has too few subtables for it to pay).
    pub smc_bypassed: u64,
    /// Megaflow classifier hits.
    pub megaflow_hits: u64,
    /// Upcalls.
    pub misses: u64,
    /// Packets not sent (tx refused, or output port gone).
    pub lost: u64,
    /// Re-classifications after `ct(table=N)`.
    pub recirculations: u64,
    /// Packets dropped past the recirculation depth limit.
    pub recirc_drops: u64,
    /// Partial checksums completed in software for ports without checksum offload.
    pub sw_csum: u64,
    /// GSO frames segmented in software for ports without TSO.
    pub sw_segmented: u64,
    /// Segments produced by software segmentation.
    pub sw_segments: u64,
    /// Busy TSC cycles.
    pub busy_cycles: u64,
    /// Idle TSC cycles.
    pub idle_cycles: u64,
    /// Busy cycles per packet (0 if no packet).
    pub cycles_per_packet: f64,
    /// Megaflows installed in this PMD now.
    pub megaflows: usize,
    /// Rx queues this PMD polls.
    pub rxqs: usize,
    /// The tx queue it sends on (its dense position among the PMDs).
    pub txq: usize,
    /// The kernels its cache lookups run (`scalar`, `avx512`; `dp::simd`).
    pub lookup: &'static str,
}

impl PmdStats {
    /// Builds the report from counter deltas.
    pub fn new(core: usize, numa: usize, s: &RawPmdStats, megaflows: usize, rxqs: usize) -> Self {
        let t = &s.tally;
        PmdStats {
            core,
            numa,
            packets: t.packets,
            mark_hits: t.mark_hits,
            mark_skips: t.mark_skips,
            emc_hits: t.emc_hits,
            emc_bypassed: t.emc_bypassed,
            smc_hits: t.smc_hits,
            smc_bypassed: t.smc_bypassed,
            megaflow_hits: t.megaflow_hits,
            misses: t.misses,
            lost: t.lost,
            recirculations: t.recirculations,
            recirc_drops: t.recirc_drops,
            sw_csum: t.sw_csum,
            sw_segmented: t.sw_segmented,
            sw_segments: t.sw_segments,
            busy_cycles: s.busy_cycles,
            idle_cycles: s.idle_cycles,
            cycles_per_packet: if t.packets == 0 {
                0.0
            } else {
                s.busy_cycles as f64 / t.packets as f64
            },
            megaflows,
            rxqs,
            txq: 0,
            lookup: crate::simd::Isa::Scalar.name(),
        }
    }
}

/// `pmd-rxq-show` for one rx queue.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RxqInfo {
    /// Core of the PMD polling it.
    pub core: usize,
    /// NUMA node of that PMD.
    pub numa: usize,
    /// Port name.
    pub port: String,
    /// Datapath port number.
    pub port_no: u32,
    /// Rx queue id.
    pub rxq: usize,
    /// NUMA node of the port, if known.
    pub port_numa: Option<usize>,
    /// Pinned by `pmd-rxq-affinity`.
    pub pinned: bool,
    /// Share of the PMD's busy cycles spent on this queue since it was assigned, in percent.
    pub busy_pct: f64,
}

/// `dump-megaflows` for one megaflow.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MegaflowInfo {
    /// Core of the PMD that owns it.
    pub core: usize,
    /// Matched fields only.
    #[serde(rename = "match")]
    pub match_: String,
    /// Actions, `ovs-dpctl` style (`drop` if none).
    pub actions: String,
    /// Packets that hit it.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// The XDP flow mark installed for it (`xdp-mark=on` ports), in hex; absent if none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mark: Option<String>,
    /// A megaflow that matches Geneve option values (`tun_metadataN` words): its in_port,
    /// key and mask, for the caller to name the options by the bridge's TLV map (the
    /// datapath does not know the maps); `match` does not show them.
    #[serde(skip)]
    pub tun_md: Option<(u32, wire::FlowKey, wire::FlowKey)>,
}

fn mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Text form of an action list: `output:2,push_vlan(tci=0x64),...`, or `drop`.
pub fn actions_to_string(actions: &[Action]) -> String {
    if actions.is_empty() {
        return "drop".into();
    }
    let ip = |v: &u32| std::net::Ipv4Addr::from(*v).to_string();
    let parts: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::Output(p) => format!("output:{p}"),
            Action::PushVlan(t) => format!("push_vlan(tci=0x{t:04x})"),
            Action::PopVlan => "pop_vlan".into(),
            Action::SetEthSrc(m) => format!("set(eth_src={})", mac(m)),
            Action::SetEthDst(m) => format!("set(eth_dst={})", mac(m)),
            Action::SetIpv4Src(v) => format!("set(ipv4_src={})", ip(v)),
            Action::SetIpv4Dst(v) => format!("set(ipv4_dst={})", ip(v)),
            Action::SetIpDscp(v) => format!("set(ip_dscp={v})"),
            Action::SetIpTtl(v) => format!("set(ip_ttl={v})"),
            Action::SetTpSrc(v) => format!("set(tp_src={v})"),
            Action::SetTpDst(v) => format!("set(tp_dst={v})"),
            Action::Userspace(c) => format!("userspace(cookie=0x{c:x})"),
            Action::Meter(m) => format!("meter({})", m.0.id()),
            Action::Ct(c) => ct_string(c),
            Action::CtClear => "ct_clear".into(),
            Action::TnlPush(t) => {
                let p = t.template.params();
                // Geneve options as OVS shows them: {class=..,type=..,len=..,0xVALUE}.
                let geneve = p.kind == wire::tunnel::TunnelKind::Geneve;
                let opts: String = wire::tunnel::geneve_options(&t.template.bytes()[42..])
                    .filter(|_| geneve)
                    .map(|(c, ty, v)| {
                        let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                        format!("{{class={c:#x},type={ty:#x},len={},0x{hex}}}", v.len())
                    })
                    .collect();
                let opts = if opts.is_empty() {
                    opts
                } else {
                    format!(",geneve({opts})")
                };
                format!(
                    "tnl_push(header(src={},dst={},dst_port={},vni={}{opts}),mtu={},{})",
                    p.src_ip,
                    p.dst_ip,
                    p.dst_port,
                    p.vni,
                    t.mtu,
                    actions_to_string(&t.actions)
                )
            }
            Action::TnlPop(t) => format!("tnl_pop(endpoints={})", t.ports.len()),
            Action::SetTunnel { id, src, dst } => {
                format!(
                    "set(tunnel(tun_id=0x{id:x},src={},dst={}))",
                    ip(src),
                    ip(dst)
                )
            }
        })
        .collect();
    parts.join(",")
}

/// `ct(commit,zone=5,nat(src=...),mark=0x1/0xff,recirc(0x3))`, as `dump-megaflows` shows it
/// (a fork: `clone(ct(...),recirc(0x3))`).
fn ct_string(c: &crate::action::CtSpec) -> String {
    let a = &c.ct;
    let mut parts = Vec::new();
    if a.commit {
        parts.push("commit".to_string());
    }
    if a.force {
        parts.push("force".to_string());
    }
    if a.zone != 0 {
        parts.push(format!("zone={}", a.zone));
    }
    if let Some((v, m)) = a.mark {
        parts.push(format!("mark=0x{v:x}/0x{m:x}"));
    }
    if let Some((v, m)) = a.label {
        parts.push(format!("label=0x{v:x}/0x{m:x}"));
    }
    match a.nat {
        conntrack::Nat::Off => {}
        conntrack::Nat::Existing => parts.push("nat".into()),
        conntrack::Nat::Set(n) => parts.push(format!("nat({n:?})")),
    }
    let mut s = format!("ct({})", parts.join(","));
    if let Some(id) = c.recirc {
        // A fork recirculates a copy: OVS's datapath writes it as a clone.
        if c.fork {
            s = format!("clone({s},recirc(0x{id:x}))");
        } else {
            s.push_str(&format!(",recirc(0x{id:x})"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_writer_counters_and_deltas() {
        let c = PmdCounters::default();
        let t = Tally {
            packets: 10,
            mark_hits: 4,
            mark_skips: 3,
            emc_hits: 7,
            emc_bypassed: 5,
            smc_hits: 1,
            smc_bypassed: 6,
            megaflow_hits: 1,
            misses: 1,
            lost: 0,
            recirculations: 2,
            recirc_drops: 1,
            sw_csum: 3,
            sw_segmented: 2,
            sw_segments: 9,
        };
        c.publish(&t);
        c.cycles(1000, 50);
        let base = c.snapshot();
        c.publish(&t);
        let d = c.snapshot().since(&base);
        assert_eq!(d.tally, t);
        assert_eq!(d.busy_cycles, 0);
        let r = PmdStats::new(0, 0, &c.snapshot(), 3, 1);
        assert_eq!(r.packets, 20);
        assert_eq!(r.cycles_per_packet, 50.0);
    }

    #[test]
    fn action_text() {
        use Action::*;
        assert_eq!(actions_to_string(&[]), "drop");
        assert_eq!(
            actions_to_string(&[PushVlan(100), SetIpv4Dst(0x0a000001), Output(2)]),
            "push_vlan(tci=0x0064),set(ipv4_dst=10.0.0.1),output:2"
        );
    }
}
