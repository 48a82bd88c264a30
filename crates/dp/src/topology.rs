//! NUMA topology: which CPU cores belong to which node.
//!
//! Owns: [`Topology`], read from `/sys/devices/system/node/nodeN/cpulist`, or from the
//! `VIREO_NUMA_TOPOLOGY` environment variable (`"0:0-1;1:2-3"` = node 0 has cores 0-1, node 1
//! has cores 2-3), or built by [`Topology::parse`] in tests.
//! Threads: built on the control thread at datapath creation; read-only afterwards.
use crate::DpError;
use std::path::Path;

/// Environment variable that overrides the detected topology.
pub const TOPOLOGY_ENV: &str = "VIREO_NUMA_TOPOLOGY";

/// Cores per NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<(usize, Vec<usize>)>,
}

/// Parses a Linux cpulist (`"0-3,8,10-11"`).
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, DpError> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || DpError::Config(format!("bad cpu list {s:?}"));
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part.trim(), part.trim()),
        };
        let a: usize = a.parse().map_err(|_| bad())?;
        let b: usize = b.parse().map_err(|_| bad())?;
        if b < a || b - a > 4096 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

impl Topology {
    /// One node (0) holding `cores`.
    pub fn single(cores: impl IntoIterator<Item = usize>) -> Topology {
        Topology {
            nodes: vec![(0, cores.into_iter().collect())],
        }
    }

    /// Parses `"NODE:CPULIST;NODE:CPULIST"`.
    pub fn parse(spec: &str) -> Result<Topology, DpError> {
        let mut nodes = Vec::new();
        for part in spec.split(';').filter(|p| !p.trim().is_empty()) {
            let (n, list) = part
                .split_once(':')
                .ok_or_else(|| DpError::Config(format!("bad topology part {part:?}")))?;
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| DpError::Config(format!("bad node id in {part:?}")))?;
            nodes.push((n, parse_cpulist(list)?));
        }
        if nodes.is_empty() {
            return Err(DpError::Config(format!("empty topology {spec:?}")));
        }
        Ok(Topology { nodes })
    }

    /// Reads `ROOT/nodeN/cpulist` for every node directory under `root`.
    pub fn from_sysfs(root: &Path) -> Option<Topology> {
        let mut nodes = Vec::new();
        for e in std::fs::read_dir(root).ok()?.flatten() {
            let name = e.file_name();
            let Some(n) = name.to_str().and_then(|s| s.strip_prefix("node")) else {
                continue;
            };
            let Ok(n) = n.parse::<usize>() else { continue };
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            nodes.push((n, parse_cpulist(&list).ok()?));
        }
        nodes.sort();
        (!nodes.is_empty()).then_some(Topology { nodes })
    }

    /// The environment override, else sysfs, else one node with every available core.
    pub fn detect() -> Topology {
        if let Ok(spec) = std::env::var(TOPOLOGY_ENV) {
            match Topology::parse(&spec) {
                Ok(t) => return t,
                Err(e) => tracing::warn!(%e, "ignoring {TOPOLOGY_ENV}"),
            }
        }
        if let Some(t) = Topology::from_sysfs(Path::new("/sys/devices/system/node")) {
            return t;
        }
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        Topology::single(0..n)
    }

    /// The node of `core`, if the topology knows it.
    pub fn numa_of(&self, core: usize) -> Option<usize> {
        self.nodes
            .iter()
            .find(|(_, cores)| cores.contains(&core))
            .map(|(n, _)| *n)
    }

    /// Node ids.
    pub fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes.iter().map(|(n, _)| *n)
    }
}

impl Default for Topology {
    fn default() -> Topology {
        Topology::detect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_and_specs_parse() {
        assert_eq!(
            parse_cpulist("0-2,5,7-8\n").unwrap(),
            vec![0, 1, 2, 5, 7, 8]
        );
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("x").is_err());
        let t = Topology::parse("0:0-1;1:2-3").unwrap();
        assert_eq!(t.numa_of(1), Some(0));
        assert_eq!(t.numa_of(3), Some(1));
        assert_eq!(t.numa_of(9), None);
        assert_eq!(t.nodes().collect::<Vec<_>>(), vec![0, 1]);
        assert!(Topology::parse("").is_err());
        assert!(Topology::parse("a:1").is_err());
    }

    #[test]
    fn sysfs_layout_is_read() {
        let dir = std::env::temp_dir().join(format!("vireo-topo-{}", std::process::id()));
        for (n, l) in [(0, "0-1"), (1, "2-3")] {
            std::fs::create_dir_all(dir.join(format!("node{n}"))).unwrap();
            std::fs::write(dir.join(format!("node{n}/cpulist")), l).unwrap();
        }
        std::fs::create_dir_all(dir.join("power")).unwrap();
        let t = Topology::from_sysfs(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t, Topology::parse("0:0-1;1:2-3").unwrap());
        // The real machine has at least one node that knows core 0.
        assert!(Topology::detect().nodes().count() >= 1);
    }
}
