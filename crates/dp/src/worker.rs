//! The per-PMD packet pipeline: rx burst → extract → EMC → SMC → dpcls → upcall → execute → tx.
//!
//! Recirculation: a packet whose actions end in `ct(table=N)` (`Action::Ct` with `recirc`)
//! comes back from `execute` as `RECIRC` with its key's conntrack words and `recirc_id` set;
//! after the pass, those packets are classified and executed again as a burst of their own
//! (re-extracted, since NAT may have rewritten them, with the conntrack words carried over),
//! so an established connection hits the caches on its recirculated key too and never
//! upcalls per packet. A packet recirculating more than [`MAX_RECIRC_DEPTH`] times is dropped
//! and counted (`recirc_drops`).
//!
//! XDP metadata (`af-xdp` ports with `xdp-mark=on`): a packet that arrives with the XDP
//! program's flow hash keeps it as its cache hash instead of hashing its key (the EMC compares
//! the whole key and the hash, and an SMC candidate is checked with `covers`, so the hash only
//! places the flow: a key hashed both ways takes at most two entries, never a wrong one). A
//! packet with a mark naming one of this worker's megaflows ([`crate::flow::mark_id`]) whose
//! match covers its key goes straight to that megaflow's actions, with no EMC, SMC or dpcls
//! lookup (`mark_hits`); any other mark is ignored and the packet takes the normal path.
//! Where the named megaflow allows it ([`crate::flow::SkipCheck`]: its match is decided by the
//! bytes the XDP program keyed the mark on, its actions never read the key) and the frame
//! shows the megaflow's tuple at fixed offsets, the packet is not even extracted
//! (`mark_skips`, counted in `mark_hits` too): its key slot keeps whatever it held, which
//! nothing reads (not the actions, and no cache: a mark hit is never inserted in the EMC or
//! SMC). A
//! megaflow created by a packet without a 5-tuple (IPv6, ARP) takes the tuple of the first
//! XDP-hashed packet that hits it past the EMC, so vireod has something to mark it by.
//!
//! Owns: [`Worker`], everything one PMD thread needs to move packets: its caches, flow table,
//! buffer pool, scratch arrays for a burst, and transmit batches. A burst is processed in
//! stages (all keys, then all lookups, then all actions, then one `tx_burst` per output port),
//! with no allocation, no lock and no reference-count change per packet. A large frame a
//! vhost-user port dequeued with one copy keeps its tail in the sender's memory
//! (`packet::Tail`, a packed address and length); the rx batch holds that memory table once
//! per burst, and the worker moves it to its `TxTable` for the burst (lent to each tail-taking
//! port's `tx_burst`, let go at the flush). Such a packet is seen whole by the pipeline on a
//! miss and by every action but an output (`TxTable::materialise`; see `execute`), and no
//! packet with a tail outlives the burst's flush.
//!
//! The worker does not know about threads: the PMD loop (`pmd.rs`) drives it, and tests and
//! benchmarks drive it directly.
//! Classification (the cache tiers and the upcall) is in `worker/classify.rs`.
//! Threads: owned by one PMD thread.
use crate::action::{Actions, Upcall};
use crate::dpcls::{Dpcls, NO_FLOW};
use crate::emc::{Emc, EmcGate};
use crate::execute::{execute, finish, ExecCtx, TxTable, NO_PORT, RECIRC};
pub use crate::flow::Deps;
use crate::flow::{mark_id, mark_tag, steal_index, FlowTable, Megaflow, Registry, Tuple5};
use crate::simd::Isa;
use crate::smc::Smc;
use crate::stats::Tally;
use packet::{Batch, Pool, BATCH_SIZE};
use ports::Port;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use wire::flow::META_WORDS;
use wire::{Field, FlowKey};

mod classify;

/// Copies a packet's tunnel metadata into its key's tunnel words.
#[inline]
fn set_tun_words(k: &mut FlowKey, t: &packet::TunMeta) {
    k.set(Field::TunId, u64::from(t.id));
    k.set(Field::TunSrc, u64::from(t.src));
    k.set(Field::TunDst, u64::from(t.dst));
}

/// Decision for a packet whose upcall result was not installed (see `Worker::adhoc`).
const ADHOC: u32 = u32::MAX - 1;

/// Passes through the classifier one packet may make after its first (as OVS's datapath).
pub const MAX_RECIRC_DEPTH: usize = 6;

/// Flows installed since the last revalidation that a worker remembers by id; past this it
/// checks every flow at the next revalidation instead.
const FRESH_CAP: usize = 4096;

/// Megaflows the control thread found stale, for one worker to remove (see
/// [`Worker::revalidate`]).
#[derive(Debug, Default)]
pub struct Revalidation {
    /// (id, flow) pairs from a registry snapshot; removed only if the id still holds that flow.
    pub kills: Vec<(u32, Arc<Megaflow>)>,
    /// Epoch of the snapshot: flows installed at or after it were not seen by the scan...
    pub since_epoch: u64,
    /// ...and are removed if they were translated before this pipeline version.
    pub version: u64,
}

impl Revalidation {
    /// Folds a later request into this one (a worker that has not yet taken the first).
    pub fn merge(&mut self, later: Revalidation) {
        self.kills.extend(later.kills);
        self.since_epoch = self.since_epoch.min(later.since_epoch);
        self.version = self.version.max(later.version);
    }
}

/// Tunables of a worker.
#[derive(Clone, Copy, Debug)]
pub struct WorkerConfig {
    /// Insert into the EMC with probability 1/N (1 = always, 0 = never).
    pub emc_insert_inv_prob: u32,
    /// Most megaflows this worker installs.
    pub flow_limit: usize,
    /// NUMA node of the buffer pool.
    pub numa: usize,
    /// Buffers allocated up front.
    pub pool_prefill: usize,
    /// Tx queue used on every port.
    pub txq: usize,
    /// Housekeeping sweeps without a hit before a megaflow expires (0 = never).
    pub idle_sweeps: u32,
    /// The SMC is used only while the classifier has at least this many subtables (0 or 1:
    /// always).
    pub smc_min_subtables: usize,
    /// The kernels the cache lookups use ([`crate::simd`]).
    pub isa: Isa,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            emc_insert_inv_prob: 100,
            flow_limit: 200_000,
            numa: 0,
            pool_prefill: 256,
            txq: 0,
            idle_sweeps: 10,
            smc_min_subtables: 2,
            isa: Isa::detect(),
        }
    }
}

/// One PMD's packet pipeline.
pub struct Worker {
    emc: Emc,
    /// Whether this burst probes the EMC (its hit rate decides, see `emc`).
    gate: EmcGate,
    smc: Smc,
    cls: Dpcls,
    flows: FlowTable,
    pool: Pool,
    rx: Batch,
    keys: [FlowKey; BATCH_SIZE],
    ids: [u32; BATCH_SIZE],
    dest: [u32; BATCH_SIZE],
    /// Action lists of packets whose upcall result was not installed, by packet index.
    adhoc: Vec<(usize, Actions)>,
    tx: TxTable,
    upcall: Arc<dyn Upcall>,
    cfg: WorkerConfig,
    rng: u32,
    tally: Tally,
    expired: Vec<u32>,
    activity: Arc<Activity>,
    /// Ids installed since the last revalidation (see [`Worker::revalidate`]).
    fresh: Vec<u32>,
    /// More than [`FRESH_CAP`] installed: the next revalidation checks every flow.
    fresh_overflow: bool,
    /// Per-port policing (ingress here, egress in the tx table).
    policers: Option<Arc<crate::police::Policers>>,
    /// The datapath's connection tracker, shared by every PMD.
    ct: Option<Arc<conntrack::Conntrack>>,
    /// Packets to classify again after this pass, and their keys.
    recirc: Batch,
    recirc_keys: Vec<FlowKey>,
    /// Conntrack hints of the packets in `rx`, by index (all empty between bursts), and of
    /// those in `recirc`: a packet's second `ct` pass starts from the connection its first
    /// pass found ([`conntrack::Hint`]).
    hints: Vec<conntrack::Hint>,
    recirc_hints: Vec<conntrack::Hint>,
    /// This worker's tag in XDP flow marks (`flow::mark_tag` of its core).
    tag: u32,
    /// Packets of the current burst whose hash came from the port (the XDP program), by bit.
    from_xdp: u32,
    /// Packets of the current burst classified by their mark without extraction, by bit.
    skipped: u32,
    /// Whether this burst uses the SMC (`WorkerConfig::smc_min_subtables`).
    smc_on: bool,
}

/// What the control thread may read about a worker without waiting for it, so revalidation can
/// skip a PMD that holds no decision to drop. Write order on the PMD: `in_upcall` set, upcall,
/// install (`holds_flows` set), `in_upcall` cleared; the control thread reads `in_upcall`
/// first, then `holds_flows` (all `SeqCst`). A PMD seen outside an upcall and holding no
/// megaflow has nothing cached from before the change, and any upcall it starts later sees the
/// changed pipeline.
#[derive(Debug, Default)]
pub struct Activity {
    /// Inside `Upcall::upcall` or installing its answer.
    pub in_upcall: AtomicBool,
    /// Holds at least one megaflow (cleared by `flush`).
    pub holds_flows: AtomicBool,
}

impl Activity {
    /// True if the worker may hold decisions taken before now (revalidation must wait for it).
    pub fn may_hold_decisions(&self) -> bool {
        self.in_upcall.load(SeqCst) || self.holds_flows.load(SeqCst)
    }
}

impl Worker {
    /// A worker that asks `upcall` on misses and mirrors its flows into `registry`.
    pub fn new(upcall: Arc<dyn Upcall>, cfg: WorkerConfig, registry: Registry) -> Worker {
        Worker {
            emc: Emc::new(),
            gate: EmcGate::default(),
            smc: Smc::new(),
            cls: Dpcls::with_isa(cfg.isa),
            flows: FlowTable::new(registry),
            pool: Pool::new(cfg.numa, cfg.pool_prefill),
            rx: Batch::taking_tails(),
            keys: [FlowKey::ZERO; BATCH_SIZE],
            ids: [NO_FLOW; BATCH_SIZE],
            dest: [NO_PORT; BATCH_SIZE],
            adhoc: Vec::with_capacity(BATCH_SIZE),
            tx: TxTable::new(cfg.txq),
            upcall,
            cfg,
            rng: 0x9e37_79b9 ^ cfg.txq as u32,
            tally: Tally::default(),
            expired: Vec::new(),
            activity: Arc::default(),
            fresh: Vec::new(),
            fresh_overflow: false,
            policers: None,
            ct: None,
            recirc: Batch::taking_tails(),
            recirc_keys: Vec::with_capacity(BATCH_SIZE),
            hints: (0..BATCH_SIZE)
                .map(|_| conntrack::Hint::default())
                .collect(),
            recirc_hints: Vec::with_capacity(BATCH_SIZE),
            tag: mark_tag(0),
            from_xdp: 0,
            skipped: 0,
            smc_on: true,
        }
    }

    /// Shares the datapath's connection tracker with this worker (`ct` actions).
    pub fn set_conntrack(&mut self, ct: Arc<conntrack::Conntrack>) {
        self.ct = Some(ct);
    }

    /// Sets the tag this worker's XDP flow marks carry (`flow::mark_tag` of its PMD's core;
    /// 0 until set). Marks with another tag are ignored.
    pub fn set_mark_tag(&mut self, tag: u32) {
        self.tag = tag & 0xff;
    }

    /// Shares this worker's [`Activity`] with the control thread.
    pub fn set_activity(&mut self, activity: Arc<Activity>) {
        self.activity = activity;
    }

    /// Sets the ports packets may be sent to (control change, between bursts).
    pub fn set_ports(&mut self, ports: &[(u32, Arc<dyn Port>)]) {
        self.tx.set_ports(ports, &mut self.pool);
    }

    /// Sets the tx queue this worker sends on (control change, between bursts).
    pub fn set_txq(&mut self, txq: usize) {
        self.tx.set_txq(txq);
    }

    /// Receives one burst from `port`'s queue `qid` and processes it. Returns the packet count.
    #[inline]
    pub fn poll(&mut self, port_no: u32, port: &dyn Port, qid: usize) -> usize {
        let n = port.rx_burst(qid, &mut self.pool, &mut self.rx);
        // One copy: the table this burst's deferred tails lie in (if any), held (moved, not
        // counted) until the burst's flush.
        self.tx.hold_tails(self.rx.take_tails());
        if n > 0 {
            if let Some(pp) = self.policers.as_ref().and_then(|p| p.get(port_no)) {
                if let Some(m) = &pp.ingress {
                    let now = crate::meter::now_ns();
                    crate::police::police(m, &mut self.rx, &mut self.pool, now);
                }
            }
            if !self.rx.is_empty() {
                self.process(port_no);
            }
        }
        n
    }

    /// Shares the datapath's per-port policers with this worker (ingress and egress).
    pub fn set_policers(&mut self, p: Arc<crate::police::Policers>) {
        self.tx.policers = Some(p.clone());
        self.policers = Some(p);
    }

    /// Processes every packet in the rx batch as received on `in_port`.
    fn process(&mut self, in_port: u32) {
        let n = self.rx.len().min(BATCH_SIZE);
        self.tally.packets += n as u64;
        let mut from_xdp = 0u32;
        let mut skipped = 0u32;
        let probe_emc = self.gate.start_burst();
        let min = self.cfg.smc_min_subtables;
        self.smc_on = min <= 1 || self.cls.subtables().len() >= min;
        let smc_on = self.smc_on;
        let Worker {
            rx,
            keys,
            ids,
            flows,
            emc,
            smc,
            tag,
            ..
        } = self;
        for (i, (p, k)) in rx
            .as_mut_slice()
            .iter_mut()
            .zip(keys.iter_mut())
            .enumerate()
        {
            // A mark with the XDP hash, naming a flow whose skip check the frame passes: no
            // extraction (see the module comment). Not for a decapsulated packet (its key
            // would have tunnel words).
            if p.meta.mark != 0 && p.meta.hash != 0 && !p.meta.tun.is_set() {
                if let Some(id) = mark_id(p.meta.mark, *tag) {
                    let ok = flows
                        .get(id)
                        .and_then(|f| f.skip_check())
                        .is_some_and(|c| c.admits(p.data(), in_port));
                    if ok {
                        p.meta.in_port = in_port;
                        ids[i] = id;
                        skipped |= 1 << i;
                        continue;
                    }
                }
            }
            // In place, and hashed without a look at the tail: a key fresh from a port has
            // none (`wire::flow`, *Head and tail*), unless a tunnel port decapsulated it.
            // A hash from the port (the XDP program's) is kept, see the module comment.
            wire::extract_into(p.data(), in_port, k);
            p.meta.in_port = in_port;
            p.meta.hash = if p.meta.tun.is_set() {
                set_tun_words(k, &p.meta.tun);
                k.hash()
            } else if p.meta.hash != 0 {
                from_xdp |= 1 << i;
                p.meta.hash
            } else if probe_emc || smc_on {
                k.hash_head()
            } else {
                // Neither cache is probed in this burst: hashed only if needed (`cache`,
                // `tnl::push`); zero means "not hashed".
                0
            };
            // Requested now, compared in `classify`: the rest of the burst's extraction
            // overlaps these misses.
            if probe_emc {
                emc.prefetch(p.meta.hash);
            }
            if smc_on {
                smc.prefetch(p.meta.hash);
            }
        }
        self.from_xdp = from_xdp;
        self.skipped = skipped;
        self.classify(n);
        self.from_xdp = 0;
        self.skipped = 0;
        self.execute_all();
        if !self.recirc.is_empty() {
            self.recirculate();
        }
        self.tx.flush(&mut self.pool, &mut self.tally);
    }

    /// Classifies and executes again the packets the last pass sent back (`ct(table=N)`), up
    /// to [`MAX_RECIRC_DEPTH`] passes; what would go round once more is dropped and counted.
    #[cold]
    fn recirculate(&mut self) {
        for _ in 0..MAX_RECIRC_DEPTH {
            if self.recirc.is_empty() {
                return;
            }
            std::mem::swap(&mut self.rx, &mut self.recirc);
            let n = self.rx.len().min(BATCH_SIZE);
            self.tally.recirculations += n as u64;
            for (i, p) in self.rx.as_mut_slice().iter_mut().enumerate() {
                let k = &mut self.keys[i];
                p.meta.mark = 0;
                wire::extract_into(p.data(), p.meta.in_port, k);
                k.w[META_WORDS].copy_from_slice(&self.recirc_keys[i].w[META_WORDS]);
                p.meta.hash = k.hash();
                if self.gate.probing() {
                    self.emc.prefetch(p.meta.hash);
                }
                if self.smc_on {
                    self.smc.prefetch(p.meta.hash);
                }
            }
            self.recirc_keys.clear();
            for (slot, h) in self.hints.iter_mut().zip(self.recirc_hints.drain(..)) {
                *slot = h;
            }
            self.classify(n);
            self.execute_all();
        }
        self.tally.recirc_drops += self.recirc.len() as u64;
        self.pool.put_batch(&mut self.recirc);
        self.recirc_keys.clear();
        self.recirc_hints.clear();
    }

    /// Runs each packet's actions in place, in arrival order, counting megaflow hits run by
    /// run; then moves every packet to its final output (or back to the pool).
    fn execute_all(&mut self) {
        let Worker {
            rx,
            flows,
            tx,
            pool,
            keys,
            ids,
            dest,
            adhoc,
            upcall,
            tally,
            ct,
            recirc,
            recirc_keys,
            hints,
            recirc_hints,
            ..
        } = self;
        let mut cx = ExecCtx {
            tx,
            pool,
            upcall: &**upcall,
            tally,
            now_ns: 0,
            ct: ct.as_deref(),
            now_ms: 0,
            recirc,
            recirc_keys,
            hints,
            cur: 0,
            recirc_hints,
        };
        let (mut run_id, mut run_pkts, mut run_bytes) = (NO_FLOW, 0u64, 0u64);
        let pkts = rx.as_mut_slice();
        let n = pkts.len().min(BATCH_SIZE);
        for i in 0..n {
            let (pkt, id, key) = (&mut pkts[i], ids[i], &mut keys[i]);
            cx.cur = i;
            dest[i] = if id == ADHOC {
                let acts = adhoc.iter().find(|(j, _)| *j == i).map(|(_, a)| &a[..]);
                let acts = acts.unwrap_or(&[]);
                execute(pkt, acts, steal_index(acts), key, &mut cx)
            } else if let Some(f) = flows.get(id) {
                if id != run_id {
                    if let Some(prev) = flows.get(run_id) {
                        prev.hit(run_pkts, run_bytes);
                    }
                    (run_id, run_pkts, run_bytes) = (id, 0, 0);
                }
                run_pkts += 1;
                run_bytes += pkt.frame_len() as u64;
                execute(pkt, &f.actions, f.steal, key, &mut cx)
            } else {
                NO_PORT
            };
        }
        if let Some(prev) = flows.get(run_id) {
            prev.hit(run_pkts, run_bytes);
        }
        for (i, (pkt, &to)) in rx.drain().zip(dest.iter()).enumerate() {
            if to == RECIRC {
                if cx.recirc.is_full() {
                    cx.tally.recirc_drops += 1;
                    cx.pool.put(pkt);
                } else {
                    cx.recirc_keys.push(keys[i]);
                    cx.recirc_hints.push(std::mem::take(&mut cx.hints[i]));
                    let _ = cx.recirc.push(pkt);
                    continue;
                }
            } else {
                finish(pkt, to, &mut cx);
            }
            if cx.hints[i].is_set() {
                cx.hints[i].clear();
            }
        }
        adhoc.clear();
    }

    /// Drops every cached decision (revalidation): megaflows and classifier. The EMC is
    /// invalidated by flow generations and the SMC re-checks matches, so neither is walked.
    pub fn flush(&mut self) {
        self.cls.clear();
        self.flows.clear();
        self.fresh.clear();
        self.fresh_overflow = false;
        self.activity.holds_flows.store(false, SeqCst);
    }

    /// Removes a megaflow from the classifier and the flow table. EMC entries pointing to it
    /// die with the id's generation; SMC entries fail their match check.
    fn remove_flow(&mut self, id: u32) {
        if let Some(f) = self.flows.get(id) {
            let (k, m) = (f.key, f.mask);
            self.cls.remove(&k, &m);
        }
        self.flows.remove(id);
    }

    /// Per-flow revalidation: removes the megaflows the control thread found stale (if their
    /// id still holds the flow it judged), and the flows its scan could not see — installed
    /// after its snapshot — that were translated before the change. Returns how many went.
    /// Runs between bursts; the fast path is untouched.
    pub fn revalidate(&mut self, req: Revalidation) -> usize {
        let mut gone = 0;
        for (id, f) in &req.kills {
            if self.flows.get(*id).is_some_and(|g| Arc::ptr_eq(g, f)) {
                self.remove_flow(*id);
                gone += 1;
            }
        }
        let unseen = |f: &Megaflow| f.epoch >= req.since_epoch && f.deps.version < req.version;
        let candidates: Vec<u32> = if self.fresh_overflow {
            self.flows.live().map(|(id, _)| id).collect()
        } else {
            std::mem::take(&mut self.fresh)
        };
        let mut keep = Vec::new();
        for id in candidates {
            match self.flows.get(id) {
                Some(f) if unseen(f) => {
                    self.remove_flow(id);
                    gone += 1;
                }
                Some(_) => keep.push(id),
                None => {}
            }
        }
        // Flows installed before the newest snapshot were seen by it; keep the others in case
        // the request of that snapshot is still to come.
        let epoch = self.flows.epoch();
        keep.retain(|&id| self.flows.get(id).is_some_and(|f| f.epoch >= epoch));
        self.fresh_overflow = keep.len() > FRESH_CAP;
        self.fresh = if self.fresh_overflow {
            Vec::new()
        } else {
            keep
        };
        if self.flows.is_empty() {
            self.activity.holds_flows.store(false, SeqCst);
        }
        gone
    }

    /// Periodic upkeep (about once a second): re-rank subtables, expire idle megaflows.
    pub fn housekeep(&mut self) {
        self.cls.rerank();
        if self.cfg.idle_sweeps == 0 {
            return;
        }
        self.expired.clear();
        self.flows
            .sweep_idle(self.cfg.idle_sweeps, &mut self.expired);
        for i in 0..self.expired.len() {
            self.remove_flow(self.expired[i]);
        }
    }

    /// Takes the counts gathered since the last call.
    #[inline]
    pub fn take_tally(&mut self) -> Tally {
        std::mem::take(&mut self.tally)
    }

    /// Megaflows installed.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// Subtables in the classifier.
    pub fn subtable_count(&self) -> usize {
        self.cls.subtables().len()
    }

    /// The buffer pool (tests check it does not grow in steady state).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}
