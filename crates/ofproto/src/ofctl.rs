//! `ovs-ofctl`-style commands on a [`Pipeline`]: `add-flow`, `add-flows`, `mod-flows`,
//! `del-flows`, `dump-flows`, taking and giving text.
//!
//! Threads: the control thread. Text is parsed against a snapshot of the bridge's ports before
//! the table write lock is taken; dumps snapshot rules under the read lock and format after.

use crate::format::FlowStats;
use crate::parse::parse_flow;
use crate::pipeline::Pipeline;
use crate::types::{FlowMod, FlowModCommand, OfPort, RemovedFlow};
use crate::{Error, ParseError};

impl Pipeline {
    fn parse_on(&self, bridge: &str, text: &str, cmd: FlowModCommand) -> Result<FlowMod, Error> {
        let br = self.bridge(bridge)?;
        let resolve = |n: &str| br.ports.resolve(n);
        let tlv = self.tlv(bridge)?;
        Ok(crate::nx::with_tlv(&tlv, || {
            parse_flow(text, cmd, &resolve)
        })?)
    }

    /// `add-flow BR FLOW`.
    pub fn add_flow(&self, bridge: &str, flow: &str) -> Result<(), Error> {
        let fm = self.parse_on(bridge, flow, FlowModCommand::Add)?;
        self.flow_mod(bridge, fm).map(|_| ())
    }

    /// `add-flows BR FILE`: one flow per line; blank lines and `#` comments skipped. Every line
    /// is parsed before any is applied; a parse error names its line.
    pub fn add_flows(&self, bridge: &str, text: &str) -> Result<usize, Error> {
        let br = self.bridge(bridge)?;
        let resolve = |n: &str| br.ports.resolve(n);
        let mut fms = Vec::new();
        let tlv = self.tlv(bridge)?;
        crate::nx::with_tlv(&tlv, || {
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let fm =
                    parse_flow(line, FlowModCommand::Add, &resolve).map_err(|e| ParseError {
                        token: e.token,
                        msg: format!("{} (line {})", e.msg, i + 1),
                    })?;
                fms.push(fm);
            }
            Ok::<_, ParseError>(())
        })?;
        let n = fms.len();
        self.flow_mods(bridge, fms)?;
        Ok(n)
    }

    /// `mod-flows BR FLOW` (`strict` = `--strict`); without `table=` it works on table 0.
    pub fn mod_flows(&self, bridge: &str, flow: &str, strict: bool) -> Result<(), Error> {
        let cmd = if strict {
            FlowModCommand::ModifyStrict
        } else {
            FlowModCommand::Modify
        };
        let fm = self.parse_on(bridge, flow, cmd)?;
        self.flow_mod(bridge, fm).map(|_| ())
    }

    /// `del-flows BR [MATCH]` (`strict` = `--strict`). Without `table=` every table is searched.
    pub fn del_flows(
        &self,
        bridge: &str,
        filter: Option<&str>,
        strict: bool,
    ) -> Result<Vec<RemovedFlow>, Error> {
        let cmd = if strict {
            FlowModCommand::DeleteStrict
        } else {
            FlowModCommand::Delete
        };
        let fm = self.parse_on(bridge, filter.unwrap_or(""), cmd)?;
        self.flow_mod(bridge, fm)
    }

    /// `dump-flows BR [MATCH]`: rules ordered by table, then priority (highest first).
    pub fn dump_flows(&self, bridge: &str, filter: Option<&str>) -> Result<Vec<FlowStats>, Error> {
        let fm = self.parse_on(bridge, filter.unwrap_or(""), FlowModCommand::Delete)?;
        self.flow_stats(bridge, &fm)
    }

    /// `dump-flows` as text lines, port names resolved.
    pub fn dump_flows_text(
        &self,
        bridge: &str,
        filter: Option<&str>,
    ) -> Result<Vec<String>, Error> {
        let flows = self.dump_flows(bridge, filter)?;
        let br = self.bridge(bridge)?;
        let name_of = |p: OfPort| br.ports.name_of(p).map(str::to_string);
        let tlv = self.tlv(bridge)?;
        Ok(crate::nx::with_tlv(&tlv, || {
            flows.iter().map(|f| f.to_ofctl(&name_of)).collect()
        }))
    }
}
