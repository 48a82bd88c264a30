//! PMD (poll-mode driver) threads: one per configured core, pinned, polling its rx queues.
//!
//! Owns: [`PmdShared`] (what the control thread and one PMD share: the published
//! configuration, the acknowledged generation, counters, the flow registry) and the thread
//! loop. The control thread publishes a new [`PmdConfig`] with an atomic swap (`ArcSwap`) and
//! bumps the datapath-wide generation; the PMD picks it up at the top of its next iteration,
//! flushes its caches if a full revalidation was requested or removes the megaflows a per-flow
//! revalidation named, and stores the generation as its acknowledgment. The control thread waits for acknowledgments (with a timeout); it never
//! takes a lock the PMD needs on its hot path.
//!
//! Idle policy: after about 1 ms without packets the PMD sleeps ~50 µs per empty iteration so
//! many datapaths on a small machine do not starve each other; under load it never sleeps.
//! Threads: the PMD thread runs `run`; the control thread reads the atomics. Lock order: the
//! PMD takes only its flow registry lock (miss path) and its revalidation mailbox (at a
//! reload), never both at once and never per packet.
use crate::action::Upcall;
use crate::cycles;
use crate::flow::Registry;
use crate::stats::PmdCounters;
use crate::worker::{Revalidation, Worker, WorkerConfig};
use arc_swap::ArcSwap;
use ports::Port;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// One rx queue as a PMD polls it.
#[derive(Clone)]
pub(crate) struct RxqPoll {
    pub port_no: u32,
    pub port: Arc<dyn Port>,
    pub qid: usize,
    pub stats: Arc<RxqStats>,
}

/// Per-rx-queue measurements; the `Arc` follows the queue across reassignments.
#[derive(Debug, Default)]
pub(crate) struct RxqStats {
    /// Busy cycles spent receiving and processing this queue's bursts.
    pub cycles: AtomicU64,
}

/// What a PMD polls and may send to.
#[derive(Clone, Default)]
pub(crate) struct PmdConfig {
    pub rxqs: Vec<RxqPoll>,
    pub ports: Vec<(u32, Arc<dyn Port>)>,
    /// The tx queue this PMD sends on: its position among the PMDs (dense, 0..n), so n PMDs
    /// use n different queues of a port that has them (a port with fewer maps it onto its own
    /// queues and serializes the sharers).
    pub txq: usize,
}

/// Datapath-wide generation counters.
#[derive(Debug, Default)]
pub(crate) struct DpSync {
    /// Bumped after every publication; PMDs acknowledge it.
    pub gen: AtomicU64,
    /// Bumped (before `gen`) to ask every PMD to drop its cached decisions.
    pub reval: AtomicU64,
}

/// State shared by the control thread and one PMD.
pub(crate) struct PmdShared {
    pub core: usize,
    pub numa: usize,
    pub cfg: ArcSwap<PmdConfig>,
    pub ack: AtomicU64,
    pub exit: AtomicBool,
    pub counters: PmdCounters,
    pub registry: Registry,
    pub activity: Arc<crate::worker::Activity>,
    /// Per-flow revalidation waiting for this PMD (taken at its next reload).
    pub reval: std::sync::Mutex<Option<Revalidation>>,
}

impl PmdShared {
    pub fn new(core: usize, numa: usize, cfg: PmdConfig) -> PmdShared {
        PmdShared {
            core,
            numa,
            cfg: ArcSwap::from_pointee(cfg),
            ack: AtomicU64::new(0),
            exit: AtomicBool::new(false),
            counters: PmdCounters::default(),
            registry: Registry::default(),
            activity: Arc::default(),
            reval: std::sync::Mutex::new(None),
        }
    }
}

thread_local! {
    static IS_PMD: Cell<bool> = const { Cell::new(false) };
}

/// True on a PMD thread (control calls that wait for PMDs must not run there).
pub(crate) fn on_pmd_thread() -> bool {
    IS_PMD.with(|c| c.get())
}

/// PMD tunables.
#[derive(Clone)]
pub(crate) struct PmdOptions {
    pub worker: WorkerConfig,
    pub idle_sleep: Duration,
    pub policers: Arc<crate::police::Policers>,
    pub conntrack: Arc<conntrack::Conntrack>,
}

/// Starts the PMD thread for `shared`.
pub(crate) fn spawn(
    shared: Arc<PmdShared>,
    sync: Arc<DpSync>,
    upcall: Arc<dyn Upcall>,
    opts: PmdOptions,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("pmd-c{}", shared.core))
        .spawn(move || run(shared, sync, upcall, opts))
}

fn pin(core: usize) {
    use nix::sched::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    let res = set
        .set(core)
        .and_then(|_| sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = res {
        tracing::warn!(core, %e, "cannot pin PMD thread to its core; running unpinned");
    }
}

impl PmdShared {
    /// Queues a per-flow revalidation (merged with one not yet taken).
    pub fn post_revalidation(&self, req: Revalidation) {
        let mut r = self.reval.lock().unwrap_or_else(|e| e.into_inner());
        match r.as_mut() {
            Some(old) => old.merge(req),
            None => *r = Some(req),
        }
    }

    fn take_revalidation(&self) -> Option<Revalidation> {
        self.reval.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Picks up the published configuration and a revalidation request (a full flush, or the
/// per-flow removals queued in [`PmdShared::reval`]), then acknowledges. The previous
/// configuration is dropped before the acknowledgment: once the control thread sees it, this
/// PMD holds no port the new configuration left out.
fn reload(
    shared: &PmdShared,
    sync: &DpSync,
    worker: &mut Worker,
    seen_reval: &mut u64,
    cfg_slot: &mut Arc<PmdConfig>,
    g: u64,
) {
    *cfg_slot = shared.cfg.load_full();
    let cfg = &**cfg_slot;
    worker.set_ports(&cfg.ports);
    worker.set_txq(cfg.txq);
    ports::set_thread_shard(cfg.txq + 1);
    let r = sync.reval.load(Acquire);
    if r != *seen_reval {
        worker.flush();
        *seen_reval = r;
        shared.take_revalidation();
    } else if let Some(req) = shared.take_revalidation() {
        worker.revalidate(req);
    }
    shared.ack.store(g, Release);
}

/// Polls every rx queue once; returns the packets received.
#[inline]
fn poll_all(cfg: &PmdConfig, worker: &mut Worker) -> usize {
    let mut got = 0;
    for q in cfg.rxqs.iter() {
        let t0 = cycles::now();
        let n = worker.poll(q.port_no, &*q.port, q.qid);
        if n > 0 {
            let spent = cycles::now().wrapping_sub(t0);
            q.stats.cycles.fetch_add(spent, Relaxed);
            got += n;
        }
    }
    got
}

fn run(shared: Arc<PmdShared>, sync: Arc<DpSync>, upcall: Arc<dyn Upcall>, opts: PmdOptions) {
    pin(shared.core);
    IS_PMD.with(|c| c.set(true));
    // Built on this thread so its buffers and caches are first touched on the PMD's node.
    let wcfg = WorkerConfig {
        numa: shared.numa,
        txq: shared.cfg.load().txq,
        ..opts.worker
    };
    let mut worker = Worker::new(upcall, wcfg, shared.registry.clone());
    worker.set_activity(shared.activity.clone());
    // The tag `Datapath::mark_candidates` puts in this PMD's marks.
    worker.set_mark_tag(crate::flow::mark_tag(shared.core));
    worker.set_policers(opts.policers.clone());
    worker.set_conntrack(opts.conntrack.clone());
    let hz = cycles::hz();
    let (idle_after, hk_every) = (hz / 1000, hz);
    let mut cfg = shared.cfg.load_full();
    let mut seen_gen = u64::MAX;
    let mut seen_reval = sync.reval.load(Acquire);
    let mut last = cycles::now();
    let (mut last_work, mut next_hk) = (last, last + hk_every);
    loop {
        let g = sync.gen.load(Acquire);
        if g != seen_gen {
            if shared.exit.load(Acquire) {
                shared.ack.store(g, Release);
                break;
            }
            reload(&shared, &sync, &mut worker, &mut seen_reval, &mut cfg, g);
            seen_gen = g;
        }
        let got = poll_all(&cfg, &mut worker);
        let now = cycles::now();
        let dt = now.wrapping_sub(last);
        last = now;
        if got > 0 {
            shared.counters.cycles(dt, 0);
            shared.counters.publish(&worker.take_tally());
            last_work = now;
        } else {
            shared.counters.cycles(0, dt);
            if !opts.idle_sleep.is_zero() && now.wrapping_sub(last_work) > idle_after {
                std::thread::sleep(opts.idle_sleep);
                last = cycles::now();
                shared.counters.cycles(0, last.wrapping_sub(now));
            }
        }
        if now >= next_hk {
            worker.housekeep();
            next_hk = now + hk_every;
        }
    }
}
