//! The packet-moving side of the daemon: one datapath (PMD threads and caches) shared by every
//! bridge, the OpenFlow pipeline of every bridge, and the numbering that ties them together
//! (port name → datapath port number → OpenFlow port number in its bridge).
//!
//! Threads: methods run on the control thread with the `Switch` mutex held. The datapath's PMD
//! threads call into the pipeline on misses; neither ever waits for the control thread. After
//! any change that can alter a forwarding decision, `revalidate` returns only once every PMD has
//! dropped the old decisions, so no packet follows them after the command returns.
use dp::{AssignMode, Datapath, DpConfig, Topology, Upcall};
use ofproto::{Pipeline, PipelineConfig, PortSpec};
use ports::Port;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Datapath + pipeline + numbering.
pub struct Runtime {
    /// The datapath.
    pub dp: Datapath,
    /// Every bridge's pipeline.
    pub pipeline: Arc<Pipeline>,
    /// Port name → datapath port number.
    dp_ports: BTreeMap<String, u32>,
    /// Pipeline generation at the last revalidation.
    seen_generation: AtomicU64,
}

/// How a port takes part in switching.
pub struct Attach<'a> {
    /// Bridge name.
    pub bridge: &'a str,
    /// Port name.
    pub name: &'a str,
    /// OpenFlow port number (from the store).
    pub ofport: u32,
    /// The port.
    pub port: Arc<dyn Port>,
    /// Access VLAN.
    pub tag: Option<u16>,
    /// Trunk VLANs (empty = all).
    pub trunks: Vec<u16>,
    /// `pmd-rxq-affinity` pins.
    pub affinity: Vec<(usize, usize)>,
}

impl Runtime {
    /// Starts the datapath with PMD threads on `pmd_cores`.
    pub fn new(pmd_cores: Vec<usize>) -> Result<Runtime, String> {
        let pipeline = Arc::new(Pipeline::new(PipelineConfig::default()));
        let upcall: Arc<dyn Upcall> = pipeline.clone();
        let cfg = DpConfig {
            topology: Topology::detect(),
            pmd_cores,
            assign: AssignMode::Cycles,
            auto_lb: None,
        };
        let dp = Datapath::new(cfg, upcall).map_err(|e| format!("datapath: {e}"))?;
        let generation = AtomicU64::new(pipeline.generation());
        Ok(Runtime {
            dp,
            pipeline,
            dp_ports: BTreeMap::new(),
            seen_generation: generation,
        })
    }

    /// Adds a bridge (with its default NORMAL rule).
    pub fn add_bridge(&mut self, name: &str) -> Result<(), String> {
        self.pipeline.add_bridge(name).map_err(|e| e.to_string())?;
        self.revalidate();
        Ok(())
    }

    /// Removes a bridge; its ports must be detached first.
    pub fn del_bridge(&mut self, name: &str) {
        let _ = self.pipeline.del_bridge(name);
        self.revalidate();
    }

    fn free_dp_port(&self) -> u32 {
        let used: std::collections::BTreeSet<u32> = self.dp_ports.values().copied().collect();
        (1..).find(|n| !used.contains(n)).unwrap_or(u32::MAX)
    }

    /// Puts a port into its bridge and the datapath.
    pub fn attach(&mut self, a: Attach<'_>) -> Result<u32, String> {
        let no = self.free_dp_port();
        self.pipeline
            .add_port(
                a.bridge,
                PortSpec {
                    name: a.name.to_string(),
                    dp_port: no,
                    ofport: Some(a.ofport),
                    tag: a.tag,
                    trunks: a.trunks,
                },
            )
            .map_err(|e| e.to_string())?;
        if let Err(e) = self.dp.add_port(no, a.name, a.port, &a.affinity) {
            let _ = self.pipeline.del_port(a.bridge, a.name);
            return Err(format!("datapath: {e}"));
        }
        self.dp_ports.insert(a.name.to_string(), no);
        self.revalidate();
        Ok(no)
    }

    /// Takes a port out of the datapath and its bridge. Returns once no PMD uses it.
    pub fn detach(&mut self, bridge: &str, name: &str) {
        if let Some(no) = self.dp_ports.remove(name) {
            self.dp.del_port(no);
        }
        let _ = self.pipeline.del_port(bridge, name);
        self.revalidate();
    }

    /// Changes a port's VLAN configuration.
    pub fn set_vlans(&mut self, bridge: &str, name: &str, tag: Option<u16>, trunks: Vec<u16>) -> Result<(), String> {
        self.pipeline
            .set_port_vlans(bridge, name, tag, trunks)
            .map_err(|e| e.to_string())?;
        self.revalidate();
        Ok(())
    }

    /// Changes a port's rxq pins.
    pub fn set_affinity(&mut self, name: &str, affinity: &[(usize, usize)]) -> Result<(), String> {
        let no = *self
            .dp_ports
            .get(name)
            .ok_or_else(|| format!("port {name} is not in the datapath"))?;
        self.dp
            .set_port_affinity(no, affinity)
            .map_err(|e| format!("datapath: {e}"))
    }

    /// Makes every PMD drop decisions taken before now.
    pub fn revalidate(&self) {
        self.seen_generation
            .store(self.pipeline.generation(), Ordering::SeqCst);
        self.dp.revalidate();
    }

    /// Revalidates if the pipeline changed by itself (MAC learning, timeouts) since last time.
    pub fn revalidate_if_changed(&self) {
        if self.pipeline.generation() != self.seen_generation.load(Ordering::SeqCst) {
            self.revalidate();
        }
    }
}
