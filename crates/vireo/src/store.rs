//! The persistent configuration store: bridges, ports (type, options, OpenFlow port number),
//! PMD cores and controllers, in one JSON document.
//!
//! Durability: every change is written to `FILE.tmp`, fsynced, renamed over `FILE`, and the
//! directory is fsynced, before the command that made it returns. A rename is atomic, so after a
//! crash (even `kill -9` mid-write) the file holds either the old or the new document, never a
//! torn one. We chose this over an embedded database because the configuration is small (a few
//! KB even with hundreds of ports), is written only by operator commands, and a plain JSON file
//! can be read and repaired by an operator with a text editor; it costs no dependency.
//!
//! A file that fails to load (not JSON, wrong format tag, unsupported version, inconsistent
//! content) is an error naming the file and the problem; the store never overwrites it.
//!
//! Threads: owned by the daemon's control thread (behind the switch mutex); nothing else writes.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Value of the `format` field; anything else is not ours.
pub const FORMAT: &str = "vireo-conf";
/// The schema version this build reads and writes.
pub const VERSION: u32 = 1;

/// One port's saved configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortConfig {
    /// Port type (`dummy`, `vhost-user`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// OpenFlow port number, stable across restarts.
    pub ofport: u32,
    /// Options as given (`key=value`), validated when set.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// One bridge's saved configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeConfig {
    /// Ports by name.
    #[serde(default)]
    pub ports: BTreeMap<String, PortConfig>,
    /// OpenFlow controller targets (`tcp:IP:PORT`, `unix:PATH`, `ptcp:PORT`).
    #[serde(default)]
    pub controllers: Vec<String>,
    /// `standalone` or `secure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_mode: Option<String>,
    /// Allowed OpenFlow versions (`OpenFlow10,OpenFlow13,...`); absent = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<String>,
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Always [`FORMAT`].
    pub format: String,
    /// Schema version.
    pub version: u32,
    /// Bridges by name.
    #[serde(default)]
    pub bridges: BTreeMap<String, BridgeConfig>,
    /// PMD cores as the user wrote them (`0,2-3`), if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_cores: Option<String>,
    /// Rx queue assignment: `roundrobin`, `cycles` (default) or `group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_rxq_assign: Option<String>,
    /// Auto load-balance improvement threshold in percent; absent = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_auto_lb: Option<u32>,
    /// XDP steering entries set by the operator (`set-mac-numa`): MAC → NUMA node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mac_numa: BTreeMap<String, usize>,
    /// Connection tracking's global limit (`set-ct-limit N`); absent = the built-in default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ct_limit: Option<u32>,
    /// Per-zone connection limits (`set-ct-limit zone=Z N`; 0 removes a zone's limit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ct_zone_limits: BTreeMap<u16, u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            format: FORMAT.into(),
            version: VERSION,
            bridges: BTreeMap::new(),
            pmd_cores: None,
            pmd_rxq_assign: None,
            pmd_auto_lb: None,
            mac_numa: BTreeMap::new(),
            ct_limit: None,
            ct_zone_limits: BTreeMap::new(),
        }
    }
}

impl Config {
    /// The bridge holding port `name`, if any (port names are unique across bridges).
    pub fn bridge_of_port(&self, name: &str) -> Option<&str> {
        self.bridges
            .iter()
            .find(|(_, b)| b.ports.contains_key(name))
            .map(|(n, _)| n.as_str())
    }

    /// Checks what JSON cannot: names unique across bridges, OpenFlow numbers unique per bridge.
    fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!("not a Vireo store (format {:?})", self.format));
        }
        if self.version != VERSION {
            return Err(format!(
                "store version {} is not supported (this build reads version {VERSION})",
                self.version
            ));
        }
        let mut seen = BTreeMap::new();
        for (br, b) in &self.bridges {
            if seen.insert(br.clone(), br.clone()).is_some() {
                return Err(format!("name {br:?} is used twice"));
            }
            let mut ofports = BTreeMap::new();
            for (p, pc) in &b.ports {
                // A bridge's internal port carries the bridge's name.
                if p == br && pc.kind == "internal" {
                    if ofports.insert(pc.ofport, p.clone()).is_some() {
                        return Err(format!("bridge {br:?}: OpenFlow number used twice"));
                    }
                    continue;
                }
                if let Some(other) = seen.insert(p.clone(), br.clone()) {
                    return Err(format!(
                        "port {p:?} appears in bridges {other:?} and {br:?}"
                    ));
                }
                if pc.ofport == 0 {
                    return Err(format!("port {p:?} has OpenFlow port number 0"));
                }
                if let Some(q) = ofports.insert(pc.ofport, p.clone()) {
                    return Err(format!(
                        "ports {q:?} and {p:?} share OpenFlow port number {}",
                        pc.ofport
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why the store could not be loaded or saved.
#[derive(Debug)]
pub struct StoreError {
    /// The file concerned.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "config store {}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for StoreError {}

/// The store: the file path and the configuration last written to it.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    config: Config,
}

impl Store {
    /// Loads `path`, or starts empty if it does not exist. Never writes.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let err = |problem: String| StoreError {
            path: path.to_path_buf(),
            problem,
        };
        let config = match fs::read(path) {
            Ok(bytes) => parse(&bytes).map_err(err)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(err(format!("cannot read: {e}"))),
        };
        Ok(Store {
            path: path.to_path_buf(),
            config,
        })
    }

    /// The current configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies `change` to a copy of the configuration and makes it durable. On any error
    /// (from `change` or from the disk) the stored and in-memory configuration stay as they were.
    pub fn update<T, E: From<StoreError>>(
        &mut self,
        change: impl FnOnce(&mut Config) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut next = self.config.clone();
        let out = change(&mut next)?;
        if next != self.config {
            next.check().map_err(|problem| StoreError {
                path: self.path.clone(),
                problem,
            })?;
            write_atomically(&self.path, &next).map_err(|e| StoreError {
                path: self.path.clone(),
                problem: format!("cannot write: {e}"),
            })?;
            self.config = next;
        }
        Ok(out)
    }
}

/// Parses and checks a stored document.
pub fn parse(bytes: &[u8]) -> Result<Config, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    match v.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        Some(other) => return Err(format!("not a Vireo store (format {other:?})")),
        None => return Err("not a Vireo store (no \"format\" field)".into()),
    }
    match v.get("version").and_then(|f| f.as_u64()) {
        Some(n) if n == u64::from(VERSION) => {}
        Some(n) => {
            return Err(format!(
                "store version {n} is not supported (this build reads version {VERSION})"
            ))
        }
        None => return Err("no \"version\" field".into()),
    }
    let c: Config = serde_json::from_value(v).map_err(|e| format!("bad content: {e}"))?;
    c.check()?;
    Ok(c)
}

fn write_atomically(path: &Path, config: &Config) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = path.with_extension("tmp");
    let mut bytes = serde_json::to_vec_pretty(config).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(&dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(ofport: u32) -> PortConfig {
        PortConfig {
            kind: "dummy".into(),
            ofport,
            options: BTreeMap::new(),
        }
    }

    #[test]
    fn round_trip_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf.db");
        let mut s = Store::open(&path).unwrap();
        s.update(|c| {
            let b = c.bridges.entry("br0".into()).or_default();
            b.ports.insert("p1".into(), port(1));
            Ok::<_, StoreError>(())
        })
        .unwrap();
        let again = Store::open(&path).unwrap();
        assert_eq!(again.config(), s.config());
        assert_eq!(again.config().bridge_of_port("p1"), Some("br0"));
    }

    #[test]
    fn failed_change_leaves_everything_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf.db");
        let mut s = Store::open(&path).unwrap();
        s.update(|c| {
            c.bridges.insert("br0".into(), BridgeConfig::default());
            Ok::<_, StoreError>(())
        })
        .unwrap();
        let before = fs::read(&path).unwrap();
        // Two ports with the same OpenFlow number are refused by the consistency check.
        let r = s.update(|c| {
            let b = c.bridges.get_mut("br0").unwrap();
            b.ports.insert("a".into(), port(1));
            b.ports.insert("b".into(), port(1));
            Ok::<_, StoreError>(())
        });
        assert!(r
            .unwrap_err()
            .problem
            .contains("share OpenFlow port number 1"));
        assert_eq!(fs::read(&path).unwrap(), before);
        assert!(s.config().bridges["br0"].ports.is_empty());
    }

    #[test]
    fn corrupt_wrong_format_and_wrong_version_are_named() {
        assert!(parse(b"{not json").unwrap_err().contains("not valid JSON"));
        assert!(parse(br#"{"format":"x","version":1}"#)
            .unwrap_err()
            .contains("not a Vireo store"));
        assert!(parse(br#"{"format":"vireo-conf","version":99}"#)
            .unwrap_err()
            .contains("version 99 is not supported"));
        let dup = br#"{"format":"vireo-conf","version":1,"bridges":{
            "a":{"ports":{"p":{"type":"dummy","ofport":1}}},
            "b":{"ports":{"p":{"type":"dummy","ofport":1}}}}}"#;
        assert!(parse(dup).unwrap_err().contains("appears in bridges"));
    }
}
