//! Datapath configuration and errors.
//!
//! Owns: [`DpConfig`], [`DpTuning`], [`AutoLb`], [`DpError`]. Threads: control thread.
use crate::sched::AssignMode;
use crate::topology::Topology;
use std::time::Duration;

/// Automatic rx queue load balancing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoLb {
    /// Reassign when the variance of PMD loads would drop by more than this many percent.
    pub threshold_pct: u32,
    /// How often loads are measured and the check runs.
    pub interval: Duration,
    /// Only rebalance when some PMD was at least this busy (percent of its cycles) during the
    /// last interval; 0 = regardless of load.
    pub min_load_pct: u32,
}

impl Default for AutoLb {
    fn default() -> Self {
        AutoLb {
            threshold_pct: 25,
            interval: Duration::from_secs(60),
            min_load_pct: 95,
        }
    }
}

/// How to build a datapath (the four settings the daemon owns; tunables are in [`DpTuning`]).
#[derive(Clone, Debug)]
pub struct DpConfig {
    /// NUMA layout ([`Topology::detect`] by default).
    pub topology: Topology,
    /// One PMD thread per core, pinned.
    pub pmd_cores: Vec<usize>,
    /// Rx queue assignment algorithm.
    pub assign: AssignMode,
    /// Automatic rebalancing (off if `None`).
    pub auto_lb: Option<AutoLb>,
}

impl Default for DpConfig {
    fn default() -> Self {
        DpConfig {
            topology: Topology::detect(),
            pmd_cores: vec![0],
            assign: AssignMode::Cycles,
            auto_lb: None,
        }
    }
}

/// Datapath tunables, with OVS-like defaults. Build with `..DpTuning::default()`.
#[derive(Clone, Copy, Debug)]
pub struct DpTuning {
    /// Insert an EMC entry with probability 1/N (OVS `emc-insert-inv-prob`; 1 = always,
    /// 0 = never). Default 100.
    pub emc_insert_inv_prob: u32,
    /// Most megaflows per PMD; beyond it decisions are executed but not cached.
    pub flow_limit: usize,
    /// A megaflow with no hit for this long is removed (zero: never).
    pub idle_flow_timeout: Duration,
    /// How long control calls wait for every PMD to acknowledge a change.
    pub ack_timeout: Duration,
    /// Packet buffers each PMD allocates at start.
    pub pool_prefill: usize,
    /// Sleep per empty iteration once a PMD has been idle ~1 ms (at most 100 µs is sensible;
    /// zero: never sleep, busy-poll like OVS's PMDs).
    pub idle_sleep: Duration,
    /// How often rx queue loads are measured when auto load-balance is off.
    pub measure_interval: Duration,
    /// The signature-match cache is probed and filled only while the megaflow classifier has
    /// at least this many subtables (0 or 1: always). Default 2: with one subtable the classifier
    /// finds a flow with one hash probe, which an SMC hit would only replace by its own probe
    /// and a check of the candidate (BENCHMARKS.md, *The SMC with one subtable*).
    pub smc_min_subtables: usize,
    /// The kernels the PMDs' cache lookups use (default: the best this CPU has).
    pub lookup_isa: crate::simd::Isa,
}

impl Default for DpTuning {
    fn default() -> Self {
        DpTuning {
            emc_insert_inv_prob: 100,
            flow_limit: 200_000,
            idle_flow_timeout: Duration::from_secs(10),
            ack_timeout: Duration::from_secs(5),
            pool_prefill: 256,
            idle_sleep: Duration::from_micros(50),
            measure_interval: Duration::from_secs(10),
            smc_min_subtables: 2,
            lookup_isa: crate::simd::Isa::detect(),
        }
    }
}

/// Why a datapath call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpError {
    /// No port with this number.
    NoSuchPort(u32),
    /// A port with this number exists.
    PortExists(u32),
    /// The PMD core list is empty.
    NoPmdCores,
    /// A core appears twice in the PMD core list.
    DuplicateCore(usize),
    /// These PMDs did not acknowledge a change in time (stuck in an upcall?). The change is
    /// published and takes effect when they come back.
    PmdStuck {
        /// Cores of the PMDs that did not answer.
        cores: Vec<usize>,
        /// How long the call waited.
        waited_ms: u64,
    },
    /// A call that waits for PMDs was made on a PMD thread (e.g. from inside an upcall).
    CalledFromPmd,
    /// A PMD thread could not be started.
    Spawn(String),
    /// Bad configuration.
    Config(String),
    /// The datapath is shut down.
    ShutDown,
}

impl std::fmt::Display for DpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpError::NoSuchPort(p) => write!(f, "no datapath port {p}"),
            DpError::PortExists(p) => write!(f, "datapath port {p} already exists"),
            DpError::NoPmdCores => f.write_str("no PMD cores configured"),
            DpError::DuplicateCore(c) => write!(f, "core {c} listed twice in PMD cores"),
            DpError::PmdStuck { cores, waited_ms } => write!(
                f,
                "PMD thread(s) on core(s) {cores:?} did not acknowledge a change within {waited_ms} ms"
            ),
            DpError::CalledFromPmd => {
                f.write_str("datapath control call made from a PMD thread (inside an upcall?)")
            }
            DpError::Spawn(e) => write!(f, "cannot start PMD thread: {e}"),
            DpError::Config(e) => write!(f, "bad datapath configuration: {e}"),
            DpError::ShutDown => f.write_str("datapath is shut down"),
        }
    }
}

impl std::error::Error for DpError {}
