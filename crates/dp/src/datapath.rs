//! The datapath as the daemon sees it: ports, PMD threads, rx queue assignment, revalidation,
//! statistics.
//!
//! Owns: [`Datapath`] and its control state (ports, PMD handles, rx queue measurements), all
//! behind one control mutex, plus a housekeeping thread (every 100 ms) that restarts PMD threads
//! that died, notices ports whose rx queue count changed, measures rx queue loads, and runs auto
//! load-balance.
//!
//! Publication protocol: a change builds new per-PMD [`PmdConfig`]s, stores them with
//! `ArcSwap`, bumps the generation in [`DpSync`] and waits until every PMD has acknowledged it
//! (see `pmd.rs`). A queue that moves between PMDs is first removed from its old PMD (wait),
//! then added to the new one (wait), so no queue is ever polled by two PMDs at once. After a
//! call returns, no PMD uses the old configuration.
//! Revalidation is per flow: a control thread snapshots each PMD's flow registry, picks the
//! stale megaflows (by dependency tag, or by re-translating each one), and posts them to the
//! PMD, which removes them at its next reload; nothing else is dropped.
//! Threads: control threads call the public methods (serialized by the control mutex); the
//! housekeeping thread takes the same mutex. Lock order: control mutex, then a PMD's flow
//! registry or revalidation mailbox (never both). PMDs never take the control mutex.
use crate::action::Upcall;
use crate::config::{AutoLb, DpConfig, DpError, DpTuning};
use crate::pmd::{self, DpSync, PmdConfig, PmdOptions, PmdShared, RxqPoll, RxqStats};
use crate::sched::{self, AssignMode, PmdDesc, RxqDesc};
use crate::stats::RawPmdStats;
use crate::worker::WorkerConfig;
use ports::Port;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod report;
pub use report::MarkCandidate;
mod revalidate;

type RxqKey = (u32, usize);

struct PortEntry {
    name: String,
    port: Arc<dyn Port>,
    n_rxq: usize,
    affinity: Vec<(usize, usize)>,
}

struct PmdHandle {
    shared: Arc<PmdShared>,
    thread: Option<JoinHandle<()>>,
    base: RawPmdStats,
    load_base: (u64, u64),
}

impl PmdHandle {
    fn gone(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// A snapshot of the megaflows this PMD has installed.
    fn registered_flows(&self) -> Vec<Arc<crate::flow::Megaflow>> {
        let r = self.shared.registry.lock();
        let r = r.unwrap_or_else(|e| e.into_inner());
        r.iter().flatten().cloned().collect()
    }
}

#[derive(Clone, Copy)]
struct AssignedAt {
    rxq_cycles: u64,
    pmd_busy: u64,
}

struct Control {
    ports: BTreeMap<u32, PortEntry>,
    pmds: Vec<PmdHandle>,
    assign: AssignMode,
    auto_lb: Option<AutoLb>,
    rxq_stats: HashMap<RxqKey, Arc<RxqStats>>,
    loads: HashMap<RxqKey, u64>,
    load_base: HashMap<RxqKey, u64>,
    assigned_at: HashMap<RxqKey, AssignedAt>,
    max_busy_pct: f64,
    last_measure: Instant,
    stopped: bool,
}

struct Inner {
    upcall: Arc<dyn Upcall>,
    conntrack: Arc<conntrack::Conntrack>,
    policers: Arc<crate::police::Policers>,
    sync: Arc<DpSync>,
    ctl: Mutex<Control>,
    cfg: DpConfig,
    tuning: DpTuning,
    stop: AtomicBool,
}

/// The userspace datapath.
pub struct Datapath {
    inner: Arc<Inner>,
    housekeeper: Mutex<Option<JoinHandle<()>>>,
}

fn check_cores(cores: &[usize]) -> Result<(), DpError> {
    if cores.is_empty() {
        return Err(DpError::NoPmdCores);
    }
    for (i, c) in cores.iter().enumerate() {
        if cores[..i].contains(c) {
            return Err(DpError::DuplicateCore(*c));
        }
    }
    Ok(())
}

impl Datapath {
    /// Starts one PMD thread per configured core (no ports yet), with default tunables.
    pub fn new(cfg: DpConfig, upcall: Arc<dyn Upcall>) -> Result<Datapath, DpError> {
        Datapath::with_tuning(cfg, DpTuning::default(), upcall)
    }

    /// [`Datapath::new`] with explicit tunables.
    pub fn with_tuning(
        cfg: DpConfig,
        tuning: DpTuning,
        upcall: Arc<dyn Upcall>,
    ) -> Result<Datapath, DpError> {
        check_cores(&cfg.pmd_cores)?;
        let ctl = Control {
            ports: BTreeMap::new(),
            pmds: Vec::new(),
            assign: cfg.assign,
            auto_lb: cfg.auto_lb,
            rxq_stats: HashMap::new(),
            loads: HashMap::new(),
            load_base: HashMap::new(),
            assigned_at: HashMap::new(),
            max_busy_pct: 0.0,
            last_measure: Instant::now(),
            stopped: false,
        };
        let inner = Arc::new(Inner {
            upcall,
            conntrack: Arc::new(conntrack::Conntrack::new()),
            policers: Arc::default(),
            sync: Arc::new(DpSync::default()),
            ctl: Mutex::new(ctl),
            cfg,
            tuning,
            stop: AtomicBool::new(false),
        });
        let dp = Datapath {
            inner: inner.clone(),
            housekeeper: Mutex::new(None),
        };
        {
            let mut ctl = inner.lock();
            let mut cores = inner.cfg.pmd_cores.clone();
            cores.sort_unstable();
            for (txq, &core) in cores.iter().enumerate() {
                let h = inner.spawn_pmd(&ctl, core, txq)?;
                ctl.pmds.push(h);
            }
            // A starting PMD allocates its caches and pool first: allow it more time.
            let start = inner.tuning.ack_timeout.max(Duration::from_secs(10));
            inner.bump_and_wait_filtered(&ctl.pmds, start, false)?;
        }
        let weak = Arc::downgrade(&inner);
        let hk = std::thread::Builder::new()
            .name("dp-housekeeper".into())
            .spawn(move || housekeeper(weak))
            .map_err(|e| DpError::Spawn(e.to_string()))?;
        *dp.housekeeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(hk);
        Ok(dp)
    }

    /// The connection tracker of this datapath, shared by every PMD (`ct` actions) and by the
    /// operations (`dump-conntrack`, `flush-conntrack`, `ct-stats`, `set-ct-limit`). One per
    /// datapath, as OVS: every bridge's connections, told apart by zone.
    pub fn conntrack(&self) -> &Arc<conntrack::Conntrack> {
        &self.inner.conntrack
    }

    /// Per-port ingress/egress policing (set by the control thread, applied by PMDs).
    pub fn policers(&self) -> &crate::police::Policers {
        &self.inner.policers
    }

    /// Adds a port. `affinity` pins rx queues to cores (`pmd-rxq-affinity`).
    pub fn add_port(
        &self,
        port_no: u32,
        name: &str,
        port: Arc<dyn Port>,
        affinity: &[(usize, usize)],
    ) -> Result<(), DpError> {
        let mut ctl = self.inner.control()?;
        if ctl.ports.contains_key(&port_no) {
            return Err(DpError::PortExists(port_no));
        }
        let n_rxq = port.n_rxq();
        ctl.ports.insert(
            port_no,
            PortEntry {
                name: name.to_string(),
                port,
                n_rxq,
                affinity: affinity.to_vec(),
            },
        );
        self.inner.reassign(&mut ctl)
    }

    /// Removes a port; returns once no PMD polls it or sends to it (errors are logged).
    pub fn del_port(&self, port_no: u32) {
        if let Err(e) = self.try_del_port(port_no) {
            tracing::error!(port_no, %e, "del_port");
        }
    }

    /// [`Datapath::del_port`] with the error returned.
    pub fn try_del_port(&self, port_no: u32) -> Result<(), DpError> {
        let mut ctl = self.inner.control()?;
        if ctl.ports.remove(&port_no).is_none() {
            return Err(DpError::NoSuchPort(port_no));
        }
        ctl.rxq_stats.retain(|k, _| k.0 != port_no);
        ctl.loads.retain(|k, _| k.0 != port_no);
        ctl.load_base.retain(|k, _| k.0 != port_no);
        self.inner.reassign(&mut ctl)
    }

    /// Changes a port's rx queue pinning and reassigns queues.
    pub fn set_port_affinity(
        &self,
        port_no: u32,
        affinity: &[(usize, usize)],
    ) -> Result<(), DpError> {
        let mut ctl = self.inner.control()?;
        let e = ctl
            .ports
            .get_mut(&port_no)
            .ok_or(DpError::NoSuchPort(port_no))?;
        e.affinity = affinity.to_vec();
        self.inner.reassign(&mut ctl)
    }

    /// Changes the PMD cores, live: PMDs on removed cores stop, new ones start, queues move.
    pub fn set_pmd_cores(&self, cores: &[usize]) -> Result<(), DpError> {
        check_cores(cores)?;
        let mut ctl = self.inner.control()?;
        let (keep, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut ctl.pmds)
            .into_iter()
            .partition(|h| cores.contains(&h.shared.core));
        ctl.pmds = keep;
        let stopped = self.inner.stop_pmds(gone);
        for &core in cores {
            if !ctl.pmds.iter().any(|h| h.shared.core == core) {
                // Its dense tx queue comes with the reassignment below.
                let h = self.inner.spawn_pmd(&ctl, core, ctl.pmds.len())?;
                ctl.pmds.push(h);
            }
        }
        ctl.pmds.sort_by_key(|h| h.shared.core);
        self.inner.reassign(&mut ctl)?;
        stopped
    }

    /// Changes the assignment algorithm and reassigns.
    pub fn set_assign_mode(&self, mode: AssignMode) -> Result<(), DpError> {
        let mut ctl = self.inner.control()?;
        ctl.assign = mode;
        self.inner.reassign(&mut ctl)
    }

    /// Turns auto load-balance on or off.
    pub fn set_auto_lb(&self, auto_lb: Option<AutoLb>) -> Result<(), DpError> {
        self.inner.control()?.auto_lb = auto_lb;
        Ok(())
    }

    /// Measures rx queue loads now and runs the auto load-balance check once (with the
    /// configured thresholds, or the defaults if auto load-balance is off). True if queues
    /// moved.
    pub fn rebalance(&self) -> Result<bool, DpError> {
        let mut ctl = self.inner.control()?;
        self.inner.measure(&mut ctl);
        let lb = ctl.auto_lb.unwrap_or_default();
        self.inner.auto_lb_check(&mut ctl, &lb)
    }

    /// Runs `actions` on one frame from the control thread (OpenFlow PACKET_OUT). `in_port` is
    /// the datapath port the frame counts as arriving on (for `Userspace` and the flow key).
    /// Outputs use tx queue 0 of each port; ports serialize tx per queue, so this is safe next
    /// to the PMDs. Output to an unknown port fails before anything is sent.
    pub fn execute(
        &self,
        in_port: Option<u32>,
        actions: &[crate::Action],
        frame: &[u8],
    ) -> Result<(), DpError> {
        use crate::Action;
        let ports: Vec<(u32, Arc<dyn Port>)> = {
            let ctl = self.inner.lock();
            let mut out = Vec::new();
            for a in actions {
                if let Action::Output(p) = a {
                    let e = ctl.ports.get(p).ok_or(DpError::NoSuchPort(*p))?;
                    out.push((*p, e.port.clone()));
                }
            }
            out
        };
        let in_no = in_port.unwrap_or(0);
        let key = wire::extract(frame, in_no);
        let mut pkt = packet::Packet::from_slice(frame);
        pkt.meta.in_port = in_no;
        for a in actions {
            match a {
                Action::Output(p) => {
                    let Some((_, port)) = ports.iter().find(|(n, _)| n == p) else {
                        continue;
                    };
                    let mut b = packet::Batch::new();
                    let mut q = packet::Packet::from_slice(pkt.data());
                    q.meta = pkt.meta; // tunnel metadata a set_tunnel gave it
                    let _ = b.push(q);
                    port.tx_burst(0, &mut b);
                }
                Action::Userspace(cookie) => self.inner.upcall.userspace(*cookie, &key, &pkt),
                Action::Meter(m) if m.0.apply(pkt.len(), crate::meter::now_ns()).dropped() => break,
                other => crate::execute::modify(&mut pkt, other),
            }
        }
        Ok(())
    }

    /// Stops every PMD and the housekeeping thread. Idempotent; also run on drop.
    /// Returns once every PMD has finished the iteration it was in (and so sent every packet
    /// it had received before the call): the barrier of `vireoctl upgrade` between stopping
    /// the guest tx rings and the guest rx rings.
    pub fn quiesce(&self) -> Result<(), DpError> {
        let ctl = self.inner.control()?;
        self.inner.bump_and_wait(&ctl.pmds)
    }

    pub fn shutdown(&self) {
        self.inner.stop.store(true, SeqCst);
        let hk = self
            .housekeeper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = hk {
            let _ = t.join();
        }
        let mut ctl = self.inner.lock();
        if ctl.stopped {
            return;
        }
        ctl.stopped = true;
        let pmds = std::mem::take(&mut ctl.pmds);
        if let Err(e) = self.inner.stop_pmds(pmds) {
            tracing::error!(%e, "shutdown");
        }
        ctl.ports.clear();
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Control> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The control state for a call that changes it.
    fn control(&self) -> Result<MutexGuard<'_, Control>, DpError> {
        if pmd::on_pmd_thread() {
            return Err(DpError::CalledFromPmd);
        }
        let ctl = self.lock();
        if ctl.stopped {
            return Err(DpError::ShutDown);
        }
        Ok(ctl)
    }

    /// Starts the PMD for `core`, sending on tx queue `txq` until the next assignment gives it
    /// its dense id.
    fn spawn_pmd(&self, ctl: &Control, core: usize, txq: usize) -> Result<PmdHandle, DpError> {
        let numa = self.cfg.topology.numa_of(core).unwrap_or_else(|| {
            tracing::warn!(core, "core not in the NUMA topology; assuming node 0");
            0
        });
        let cfg = PmdConfig {
            rxqs: Vec::new(),
            ports: port_list(ctl),
            txq,
        };
        let shared = Arc::new(PmdShared::new(core, numa, cfg));
        let opts = PmdOptions {
            worker: WorkerConfig {
                emc_insert_inv_prob: self.tuning.emc_insert_inv_prob,
                flow_limit: self.tuning.flow_limit,
                numa,
                pool_prefill: self.tuning.pool_prefill,
                txq,
                idle_sweeps: self.tuning.idle_flow_timeout.as_secs() as u32,
                smc_min_subtables: self.tuning.smc_min_subtables,
                isa: self.tuning.lookup_isa,
            },
            idle_sleep: self.tuning.idle_sleep,
            policers: self.policers.clone(),
            conntrack: self.conntrack.clone(),
        };
        let t = pmd::spawn(shared.clone(), self.sync.clone(), self.upcall.clone(), opts)
            .map_err(|e| DpError::Spawn(e.to_string()))?;
        Ok(PmdHandle {
            shared,
            thread: Some(t),
            base: RawPmdStats::default(),
            load_base: (0, 0),
        })
    }

    /// Asks `pmds` to exit and joins those that acknowledged.
    fn stop_pmds(&self, mut pmds: Vec<PmdHandle>) -> Result<(), DpError> {
        for h in &pmds {
            h.shared.exit.store(true, SeqCst);
        }
        let res = self.bump_and_wait(&pmds);
        for h in &mut pmds {
            if h.gone() || h.shared.ack.load(Acquire) >= self.sync.gen.load(Acquire) {
                if let Some(t) = h.thread.take() {
                    let _ = t.join();
                }
            }
        }
        res
    }

    /// Bumps the generation and waits until every live PMD in `pmds` acknowledged it.
    fn bump_and_wait(&self, pmds: &[PmdHandle]) -> Result<(), DpError> {
        self.bump_and_wait_filtered(pmds, self.tuning.ack_timeout, false)
    }

    /// Bumps the generation and waits for the PMDs to acknowledge it. With `decisions_only`
    /// (pure revalidation) a PMD that holds no decision from before the bump is not waited
    /// for (see `worker::Activity`); port and configuration changes always wait for every PMD,
    /// since a PMD may still hold the old port list.
    fn bump_and_wait_filtered(
        &self,
        pmds: &[PmdHandle],
        timeout: Duration,
        decisions_only: bool,
    ) -> Result<(), DpError> {
        self.bump_and_wait_for(pmds, timeout, |h| {
            !decisions_only || h.shared.activity.may_hold_decisions()
        })
    }

    /// Bumps the generation and waits for the PMDs `wait_for` names (asked again on every
    /// check) to acknowledge it.
    pub(crate) fn bump_and_wait_for(
        &self,
        pmds: &[PmdHandle],
        timeout: Duration,
        wait_for: impl Fn(&PmdHandle) -> bool,
    ) -> Result<(), DpError> {
        let g = self.sync.gen.fetch_add(1, SeqCst) + 1;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let late: Vec<usize> = pmds
                .iter()
                .filter(|h| h.shared.ack.load(Acquire) < g && !h.gone())
                .filter(|h| wait_for(h))
                .map(|h| h.shared.core)
                .collect();
            if late.is_empty() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(DpError::PmdStuck {
                    cores: late,
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Describes PMDs and rx queues for the scheduler.
    fn describe(&self, ctl: &Control) -> (Vec<PmdDesc>, Vec<RxqDesc>) {
        let pmds = ctl
            .pmds
            .iter()
            .map(|h| PmdDesc {
                core: h.shared.core,
                numa: h.shared.numa,
            })
            .collect();
        let mut rxqs = Vec::new();
        for (&port_no, e) in &ctl.ports {
            for qid in 0..e.n_rxq {
                let key = (port_no, qid);
                let load = ctl.loads.get(&key).copied().unwrap_or_else(|| {
                    ctl.rxq_stats
                        .get(&key)
                        .map_or(0, |s| s.cycles.load(Relaxed))
                });
                rxqs.push(RxqDesc {
                    port: e.name.clone(),
                    port_no,
                    qid,
                    numa: e.port.rxq_numa(qid),
                    load,
                    pinned: e.affinity.iter().find(|a| a.0 == qid).map(|a| a.1),
                });
            }
        }
        (pmds, rxqs)
    }

    fn reassign(&self, ctl: &mut Control) -> Result<(), DpError> {
        let (pmds, rxqs) = self.describe(ctl);
        let a = sched::assign(&pmds, &rxqs, ctl.assign);
        self.apply(ctl, &rxqs, &a)
    }

    /// Publishes an assignment in two phases (removals, then additions).
    fn apply(
        &self,
        ctl: &mut Control,
        rxqs: &[RxqDesc],
        a: &[Option<usize>],
    ) -> Result<(), DpError> {
        let mut lists: Vec<Vec<RxqPoll>> = vec![Vec::new(); ctl.pmds.len()];
        for (q, p) in rxqs.iter().zip(a) {
            let (Some(p), Some(e)) = (*p, ctl.ports.get(&q.port_no)) else {
                continue;
            };
            let stats = ctl.rxq_stats.entry((q.port_no, q.qid)).or_default().clone();
            lists[p].push(RxqPoll {
                port_no: q.port_no,
                port: e.port.clone(),
                qid: q.qid,
                stats,
            });
        }
        let ports = port_list(ctl);
        let same = |x: &RxqPoll, y: &RxqPoll| {
            x.port_no == y.port_no && x.qid == y.qid && Arc::ptr_eq(&x.port, &y.port)
        };
        let mut grows = false;
        for (txq, (h, list)) in ctl.pmds.iter().zip(&lists).enumerate() {
            let old = h.shared.cfg.load();
            let keep: Vec<RxqPoll> = list
                .iter()
                .filter(|x| old.rxqs.iter().any(|y| same(x, y)))
                .cloned()
                .collect();
            grows |= keep.len() != list.len();
            let ports = ports.clone();
            h.shared.cfg.store(Arc::new(PmdConfig {
                rxqs: keep,
                ports,
                txq,
            }));
        }
        self.bump_and_wait(&ctl.pmds)?;
        if grows {
            for (txq, (h, list)) in ctl.pmds.iter().zip(&lists).enumerate() {
                let cfg = PmdConfig {
                    rxqs: list.clone(),
                    ports: ports.clone(),
                    txq,
                };
                h.shared.cfg.store(Arc::new(cfg));
            }
            self.bump_and_wait(&ctl.pmds)?;
        }
        ctl.assigned_at.clear();
        for (h, list) in ctl.pmds.iter().zip(&lists) {
            let busy = h.shared.counters.snapshot().busy_cycles;
            for r in list {
                let at = AssignedAt {
                    rxq_cycles: r.stats.cycles.load(Relaxed),
                    pmd_busy: busy,
                };
                ctl.assigned_at.insert((r.port_no, r.qid), at);
            }
        }
        Ok(())
    }

    /// Records each rx queue's cycles since the last measurement, and the busiest PMD's load.
    fn measure(&self, ctl: &mut Control) {
        let Control {
            rxq_stats,
            loads,
            load_base,
            pmds,
            ..
        } = ctl;
        for (k, s) in rxq_stats.iter() {
            let cur = s.cycles.load(Relaxed);
            let base = load_base.insert(*k, cur).unwrap_or(0);
            loads.insert(*k, cur.saturating_sub(base));
        }
        let mut max_pct: f64 = 0.0;
        for h in pmds.iter_mut() {
            let s = h.shared.counters.snapshot();
            let (b0, i0) = std::mem::replace(&mut h.load_base, (s.busy_cycles, s.idle_cycles));
            let (b, i) = (
                s.busy_cycles.saturating_sub(b0),
                s.idle_cycles.saturating_sub(i0),
            );
            if b + i > 0 {
                max_pct = max_pct.max(b as f64 * 100.0 / (b + i) as f64);
            }
        }
        ctl.max_busy_pct = max_pct;
        ctl.last_measure = Instant::now();
    }

    /// Reassigns if the cycles-based assignment would lower the load variance by more than
    /// the threshold (and some PMD is loaded enough). Round-robin mode never rebalances.
    fn auto_lb_check(&self, ctl: &mut Control, lb: &AutoLb) -> Result<bool, DpError> {
        if ctl.pmds.len() < 2 || ctl.assign == AssignMode::RoundRobin {
            return Ok(false);
        }
        if ctl.max_busy_pct < f64::from(lb.min_load_pct) {
            return Ok(false);
        }
        let (pmds, rxqs) = self.describe(ctl);
        let current: Vec<Option<usize>> = rxqs
            .iter()
            .map(|q| {
                ctl.pmds.iter().position(|h| {
                    let cfg = h.shared.cfg.load();
                    cfg.rxqs
                        .iter()
                        .any(|r| r.port_no == q.port_no && r.qid == q.qid)
                })
            })
            .collect();
        let proposed = sched::assign(&pmds, &rxqs, ctl.assign);
        if proposed == current {
            return Ok(false);
        }
        let gain = sched::improvement_pct(pmds.len(), &rxqs, &current, &proposed);
        if gain <= f64::from(lb.threshold_pct) {
            return Ok(false);
        }
        tracing::info!(gain_pct = gain, "auto load-balance: reassigning rx queues");
        self.apply(ctl, &rxqs, &proposed)?;
        Ok(true)
    }

    /// Restarts PMD threads that died (a port or the pipeline panicked on them). True if any.
    fn restart_dead_pmds(&self, ctl: &mut Control) -> bool {
        let mut any = false;
        for i in 0..ctl.pmds.len() {
            let h = &ctl.pmds[i];
            if !h.gone() || h.shared.exit.load(SeqCst) {
                continue;
            }
            let core = h.shared.core;
            tracing::error!(core, "PMD thread died; restarting it");
            match self.spawn_pmd(ctl, core, i) {
                Ok(h) => {
                    ctl.pmds[i] = h;
                    any = true;
                }
                Err(e) => tracing::error!(core, %e, "cannot restart PMD thread"),
            }
        }
        any
    }

    /// One housekeeping pass: rx queue count changes, load measurement, auto load-balance.
    fn housekeep(&self) {
        let mut ctl = self.lock();
        if ctl.stopped {
            return;
        }
        let mut changed = self.restart_dead_pmds(&mut ctl);
        for e in ctl.ports.values_mut() {
            let n = e.port.n_rxq();
            if n != e.n_rxq {
                e.n_rxq = n;
                changed = true;
            }
        }
        if changed {
            if let Err(e) = self.reassign(&mut ctl) {
                tracing::error!(%e, "reassigning after an rx queue count change");
            }
        }
        let interval = ctl
            .auto_lb
            .map_or(self.tuning.measure_interval, |l| l.interval);
        if ctl.last_measure.elapsed() < interval {
            return;
        }
        self.measure(&mut ctl);
        if let Some(lb) = ctl.auto_lb {
            if let Err(e) = self.auto_lb_check(&mut ctl, &lb) {
                tracing::error!(%e, "auto load-balance");
            }
        }
    }
}

fn port_list(ctl: &Control) -> Vec<(u32, Arc<dyn Port>)> {
    ctl.ports
        .iter()
        .map(|(n, e)| (*n, e.port.clone()))
        .collect()
}

fn housekeeper(inner: Weak<Inner>) {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let Some(inner) = inner.upgrade() else { return };
        if inner.stop.load(SeqCst) {
            return;
        }
        // Conntrack expiry: a sixteenth of the shards per 100 ms (every connection looked at
        // within 1.6 s), each under its own read lock for one scan; no datapath lock held.
        let now = conntrack::clock_ms();
        inner
            .conntrack
            .sweep(now, conntrack::table::SHARDS.div_ceil(16));
        // Fragments of datagrams that timed out are dropped (counted by conntrack).
        drop(inner.conntrack.expire_frags(now));
        inner.housekeep();
    }
}
