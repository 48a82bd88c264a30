//! Rx queue to PMD assignment: round-robin, cycles, group; NUMA-aware; `pmd-rxq-affinity`
//! pinning with isolation; the imbalance estimate auto load-balance uses.
//!
//! Owns: pure functions over descriptions of PMDs and rx queues; no state. The datapath
//! control code measures loads and applies the result.
//!
//! Rules (as OVS):
//! - A pinned queue goes to the PMD on its core, and that PMD is isolated: it gets no other
//!   (unpinned) queue. A pin to a core without a PMD is ignored with a warning.
//! - An unpinned queue goes to a non-isolated PMD on its port's NUMA node; only when that node
//!   has none does it cross nodes (warning). If every PMD is isolated it still gets polled by
//!   some PMD (warning) rather than silently never polled.
//! - `RoundRobin`: queues in (port, queue) order, PMDs of the node in turn.
//! - `Cycles`: queues sorted by measured load, each to the least-loaded candidate PMD.
//! - `Group`: like `Cycles`, but a queue with no measurement is counted at the average
//!   measured load, so new queues spread instead of piling onto one PMD.
//!
//! Threads: control thread.
use serde::Serialize;

/// How unpinned rx queues are spread over PMDs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AssignMode {
    /// In turn.
    RoundRobin,
    /// By measured busy cycles, heaviest queue first, to the least-loaded PMD.
    #[default]
    Cycles,
    /// Like `Cycles`, with unmeasured queues counted at the average load.
    Group,
}

/// A PMD as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmdDesc {
    /// Core.
    pub core: usize,
    /// NUMA node.
    pub numa: usize,
}

/// An rx queue as the scheduler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxqDesc {
    /// Port name (for logs).
    pub port: String,
    /// Datapath port number.
    pub port_no: u32,
    /// Queue id.
    pub qid: usize,
    /// NUMA node of the port, if known (unknown: any node).
    pub numa: Option<usize>,
    /// Measured busy cycles (0 if not measured).
    pub load: u64,
    /// Core this queue is pinned to.
    pub pinned: Option<usize>,
}

struct State {
    load: Vec<u64>,
    queues: Vec<usize>,
    isolated: Vec<bool>,
}

/// Assigns every queue to a PMD: the result holds, per queue, an index into `pmds` (`None`
/// only when `pmds` is empty).
pub fn assign(pmds: &[PmdDesc], rxqs: &[RxqDesc], mode: AssignMode) -> Vec<Option<usize>> {
    let mut out = vec![None; rxqs.len()];
    if pmds.is_empty() {
        return out;
    }
    let mut st = State {
        load: vec![0; pmds.len()],
        queues: vec![0; pmds.len()],
        isolated: vec![false; pmds.len()],
    };
    let mut unpinned = place_pinned(pmds, rxqs, &mut st, &mut out);
    let measured: Vec<u64> = rxqs.iter().map(|q| q.load).filter(|&l| l > 0).collect();
    let avg = if measured.is_empty() {
        1
    } else {
        (measured.iter().sum::<u64>() / measured.len() as u64).max(1)
    };
    let eff = |q: &RxqDesc| match (mode, q.load) {
        (AssignMode::Group, 0) => avg,
        _ => q.load,
    };
    if mode != AssignMode::RoundRobin {
        unpinned.sort_by(|&a, &b| eff(&rxqs[b]).cmp(&eff(&rxqs[a])).then(a.cmp(&b)));
    }
    let mut rr: Vec<(Vec<usize>, usize)> = Vec::new();
    for i in unpinned {
        let q = &rxqs[i];
        let cands = candidates(pmds, &st, q);
        let p = match mode {
            AssignMode::RoundRobin => {
                let slot = match rr.iter().position(|(c, _)| *c == cands) {
                    Some(s) => s,
                    None => {
                        rr.push((cands.clone(), 0));
                        rr.len() - 1
                    }
                };
                let (c, n) = &mut rr[slot];
                let p = c[*n % c.len()];
                *n += 1;
                p
            }
            _ => *cands
                .iter()
                .min_by_key(|&&p| (st.load[p], st.queues[p], p))
                .unwrap_or(&cands[0]),
        };
        out[i] = Some(p);
        st.load[p] += eff(q);
        st.queues[p] += 1;
    }
    out
}

/// Puts pinned queues on their cores' PMDs (isolating those); returns the other queues.
fn place_pinned(
    pmds: &[PmdDesc],
    rxqs: &[RxqDesc],
    st: &mut State,
    out: &mut [Option<usize>],
) -> Vec<usize> {
    let mut unpinned = Vec::new();
    for (i, q) in rxqs.iter().enumerate() {
        let target = q.pinned.and_then(|c| pmds.iter().position(|p| p.core == c));
        match (q.pinned, target) {
            (Some(_), Some(p)) => {
                out[i] = Some(p);
                st.isolated[p] = true;
                st.load[p] += q.load;
                st.queues[p] += 1;
            }
            (Some(c), None) => {
                tracing::warn!(port = %q.port, rxq = q.qid, core = c,
                    "rxq pinned to a core without a PMD; assigning it normally");
                unpinned.push(i);
            }
            _ => unpinned.push(i),
        }
    }
    unpinned
}

/// Candidate PMDs for an unpinned queue (never empty when `pmds` is not).
fn candidates(pmds: &[PmdDesc], st: &State, q: &RxqDesc) -> Vec<usize> {
    let free: Vec<usize> = (0..pmds.len()).filter(|&p| !st.isolated[p]).collect();
    let local: Vec<usize> = match q.numa {
        Some(n) => free
            .iter()
            .copied()
            .filter(|&p| pmds[p].numa == n)
            .collect(),
        None => free.clone(),
    };
    if !local.is_empty() {
        return local;
    }
    if !free.is_empty() {
        tracing::warn!(port = %q.port, rxq = q.qid, numa = ?q.numa,
            "no non-isolated PMD on the port's NUMA node; polling the rxq from another node");
        return free;
    }
    tracing::warn!(port = %q.port, rxq = q.qid,
        "every PMD is isolated by rxq affinity; polling the rxq from an isolated PMD");
    (0..pmds.len()).collect()
}

/// Sum of queue loads per PMD under an assignment.
pub fn pmd_loads(n_pmds: usize, rxqs: &[RxqDesc], assignment: &[Option<usize>]) -> Vec<u64> {
    let mut l = vec![0u64; n_pmds];
    for (q, a) in rxqs.iter().zip(assignment) {
        if let Some(p) = a {
            if let Some(x) = l.get_mut(*p) {
                *x += q.load;
            }
        }
    }
    l
}

/// Variance of PMD loads.
pub fn variance(loads: &[u64]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    let n = loads.len() as f64;
    let mean = loads.iter().map(|&x| x as f64).sum::<f64>() / n;
    loads
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / n
}

/// How much (percent) `new` lowers the load variance compared with `current`.
pub fn improvement_pct(
    n_pmds: usize,
    rxqs: &[RxqDesc],
    current: &[Option<usize>],
    new: &[Option<usize>],
) -> f64 {
    let cur = variance(&pmd_loads(n_pmds, rxqs, current));
    if cur <= 0.0 {
        return 0.0;
    }
    let nv = variance(&pmd_loads(n_pmds, rxqs, new));
    (cur - nv) / cur * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(port_no: u32, qid: usize, numa: Option<usize>, load: u64) -> RxqDesc {
        RxqDesc {
            port: format!("p{port_no}"),
            port_no,
            qid,
            numa,
            load,
            pinned: None,
        }
    }

    fn two_node_pmds() -> Vec<PmdDesc> {
        vec![
            PmdDesc { core: 0, numa: 0 },
            PmdDesc { core: 1, numa: 0 },
            PmdDesc { core: 2, numa: 1 },
            PmdDesc { core: 3, numa: 1 },
        ]
    }

    #[test]
    fn round_robin_stays_on_the_ports_node() {
        let pmds = two_node_pmds();
        let rxqs: Vec<_> = (0..4).map(|i| q(1, i, Some(1), 0)).collect();
        let a = assign(&pmds, &rxqs, AssignMode::RoundRobin);
        assert_eq!(a, vec![Some(2), Some(3), Some(2), Some(3)]);
    }

    #[test]
    fn crosses_nodes_only_when_its_node_has_no_pmd() {
        let pmds = vec![PmdDesc { core: 0, numa: 0 }, PmdDesc { core: 1, numa: 0 }];
        let rxqs = vec![q(1, 0, Some(1), 0), q(2, 0, Some(0), 0)];
        let a = assign(&pmds, &rxqs, AssignMode::Cycles);
        assert!(a.iter().all(|x| x.is_some()));
        // Node 1 has no PMD: its queue lands on node 0 instead of being dropped.
        let pmds = two_node_pmds();
        let a = assign(
            &pmds,
            &[q(1, 0, Some(0), 5), q(1, 1, Some(0), 5)],
            AssignMode::Cycles,
        );
        assert!(a.iter().all(|p| pmds[p.unwrap()].numa == 0));
    }

    #[test]
    fn cycles_balances_by_load_heaviest_first() {
        let pmds = vec![PmdDesc { core: 0, numa: 0 }, PmdDesc { core: 1, numa: 0 }];
        let rxqs = vec![
            q(1, 0, Some(0), 100),
            q(1, 1, Some(0), 60),
            q(1, 2, Some(0), 50),
            q(1, 3, Some(0), 10),
        ];
        let a = assign(&pmds, &rxqs, AssignMode::Cycles);
        let loads = pmd_loads(2, &rxqs, &a);
        assert_eq!(loads.iter().sum::<u64>(), 220);
        assert_eq!(*loads.iter().max().unwrap(), 110);
        let rr = assign(&pmds, &rxqs, AssignMode::RoundRobin);
        assert_eq!(pmd_loads(2, &rxqs, &rr), vec![150, 70]);
        assert!(improvement_pct(2, &rxqs, &rr, &a) > 90.0);
    }

    #[test]
    fn group_spreads_unmeasured_queues() {
        let pmds = vec![PmdDesc { core: 0, numa: 0 }, PmdDesc { core: 1, numa: 0 }];
        let rxqs = vec![
            q(1, 0, None, 100),
            q(2, 0, None, 0),
            q(3, 0, None, 0),
            q(4, 0, None, 0),
        ];
        // Cycles counts unmeasured queues as free: they all pile onto the other PMD.
        let a = assign(&pmds, &rxqs, AssignMode::Cycles);
        assert_eq!(a.iter().filter(|&&p| p == a[0]).count(), 1, "{a:?}");
        // Group counts them at the average measured load: two queues per PMD.
        let a = assign(&pmds, &rxqs, AssignMode::Group);
        assert_eq!(a.iter().filter(|&&p| p == a[0]).count(), 2, "{a:?}");
    }

    #[test]
    fn pinned_queue_isolates_its_pmd() {
        let pmds = vec![PmdDesc { core: 0, numa: 0 }, PmdDesc { core: 1, numa: 0 }];
        let mut rxqs: Vec<_> = (0..4).map(|i| q(1, i, Some(0), 0)).collect();
        rxqs[2].pinned = Some(1);
        let a = assign(&pmds, &rxqs, AssignMode::RoundRobin);
        assert_eq!(a[2], Some(1));
        for (i, p) in a.iter().enumerate() {
            if i != 2 {
                assert_eq!(*p, Some(0), "queue {i} must avoid the isolated PMD");
            }
        }
        // A pin to a core without a PMD is ignored, not fatal.
        rxqs[2].pinned = Some(7);
        assert!(assign(&pmds, &rxqs, AssignMode::Cycles)[2].is_some());
        // Every PMD isolated: an unpinned queue is still polled.
        rxqs[0].pinned = Some(0);
        rxqs[2].pinned = Some(1);
        assert!(assign(&pmds, &rxqs, AssignMode::Cycles)[1].is_some());
        assert_eq!(assign(&[], &rxqs, AssignMode::Cycles)[0], None);
    }
}
