//! Commands on the datapath and the OpenFlow pipeline: flows (`add-flow`, `add-flows`,
//! `mod-flows`, `del-flows`, `dump-flows`), meters (`add-meter`, `mod-meter`, `del-meter(s)`,
//! `dump-meters`; like flows, not stored), the MAC table, megaflows, PMD statistics and rx
//! queue placement, and controllers. Control thread, with the `Switch` mutex held.
//!
//! Flows are not stored in the config store: as with OVS, a restart starts every bridge with
//! its default NORMAL rule, and controllers (re)install theirs when they connect.
use super::switch::{CmdError, CmdResult, Switch};
use crate::proto::Response;
use serde_json::json;

fn strict_flag(args: &[String]) -> (bool, Vec<&str>) {
    let strict = args.iter().any(|a| a == "--strict");
    (
        strict,
        args.iter()
            .filter(|a| *a != "--strict")
            .map(String::as_str)
            .collect(),
    )
}

impl Switch {
    fn need_bridge(&self, br: &str) -> Result<(), CmdError> {
        if self.config().bridges.contains_key(br) {
            Ok(())
        } else {
            Err(CmdError(format!("no bridge named {br}")))
        }
    }

    pub(super) fn dispatch_dp(&mut self, command: &str, args: &[String]) -> CmdResult {
        let usage = |u: &str| CmdError(format!("usage: {command} {u}"));
        let (strict, rest) = strict_flag(args);
        let pl = self.rt.pipeline.clone();
        match (command, rest.as_slice()) {
            ("add-flow", [br, flow]) => {
                self.need_bridge(br)?;
                pl.add_flow(br, flow).map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate_if_changed();
                Ok(Response::ok("", json!(null)))
            }
            ("add-flow", _) => Err(usage("BR FLOW")),
            ("add-flows", [br, "--inline", text]) => {
                self.need_bridge(br)?;
                let n = pl
                    .add_flows(br, text)
                    .map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate_if_changed();
                Ok(Response::ok("", json!({ "added": n })))
            }
            ("add-flows", _) => Err(usage("BR FILE")),
            ("mod-flows", [br, flow]) => {
                self.need_bridge(br)?;
                pl.mod_flows(br, flow, strict)
                    .map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate_if_changed();
                Ok(Response::ok("", json!(null)))
            }
            ("mod-flows", _) => Err(usage("[--strict] BR FLOW")),
            ("del-flows", [br, filter @ ..]) if filter.len() <= 1 => {
                self.need_bridge(br)?;
                let removed = pl
                    .del_flows(br, filter.first().copied(), strict)
                    .map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate_if_changed();
                self.rt.flows_removed(&removed);
                Ok(Response::ok("", json!({ "deleted": removed.len() })))
            }
            ("del-flows", _) => Err(usage("[--strict] BR [MATCH]")),
            ("dump-flows", [br, filter @ ..]) if filter.len() <= 1 => {
                self.need_bridge(br)?;
                let lines = pl
                    .dump_flows_text(br, filter.first().copied())
                    .map_err(|e| CmdError(e.to_string()))?;
                let text: String = lines.iter().map(|l| format!(" {l}\n")).collect();
                Ok(Response::ok(text, json!(lines)))
            }
            ("dump-flows", _) => Err(usage("BR [MATCH]")),
            ("add-meter" | "mod-meter", [br, spec]) => {
                use ofproto::meter::{parse_meter, MeterCommand};
                self.need_bridge(br)?;
                let cmd = if command == "add-meter" {
                    MeterCommand::Add
                } else {
                    MeterCommand::Modify
                };
                let mm = parse_meter(cmd, spec).map_err(CmdError)?;
                pl.meter_mod(br, mm).map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate();
                Ok(Response::ok("", json!(null)))
            }
            ("add-meter" | "mod-meter", _) => {
                Err(usage("BR meter=N,kbps|pktps,bands=type=drop,rate=R"))
            }
            ("del-meter" | "del-meters", [br, spec @ ..]) if spec.len() <= 1 => {
                use ofproto::meter::{parse_meter, MeterCommand};
                self.need_bridge(br)?;
                let mm = parse_meter(MeterCommand::Delete, spec.first().copied().unwrap_or(""))
                    .map_err(CmdError)?;
                let removed = pl.meter_mod(br, mm).map_err(|e| CmdError(e.to_string()))?;
                self.rt.revalidate();
                self.rt.flows_removed(&removed);
                Ok(Response::ok("", json!({ "flows_deleted": removed.len() })))
            }
            ("del-meter" | "del-meters", _) => Err(usage("BR [meter=N]")),
            ("dump-meters", [br]) => {
                self.need_bridge(br)?;
                let lines = pl
                    .dump_meters_text(br)
                    .map_err(|e| CmdError(e.to_string()))?;
                let text: String = lines.iter().map(|l| format!(" {l}\n")).collect();
                Ok(Response::ok(text, json!(lines)))
            }
            ("dump-meters", _) => Err(usage("BR")),
            ("dump-macs", [br]) => {
                self.need_bridge(br)?;
                let macs = pl.mac_entries(br).map_err(|e| CmdError(e.to_string()))?;
                Ok(super::format::macs(&macs))
            }
            ("dump-macs", _) => Err(usage("BR")),
            ("dump-megaflows", []) => {
                let mut flows = self.rt.dp.megaflows();
                // Geneve option values, named by the TLV map of the in_port's bridge.
                for f in &mut flows {
                    let Some((in_port, key, mask)) = f.tun_md else {
                        continue;
                    };
                    let tlv = self
                        .rt
                        .pipeline
                        .port_by_dp(in_port)
                        .and_then(|(br, _)| self.rt.pipeline.tlv(&br).ok())
                        .unwrap_or_default();
                    let named = wire::tunmd::format(&key, &mask, &tlv);
                    let named = if named.is_empty() {
                        vec!["tun_metadata(unmapped)".to_string()]
                    } else {
                        named
                    };
                    if f.match_ == "*" {
                        f.match_ = named.join(",");
                    } else {
                        f.match_ = format!("{},{}", f.match_, named.join(","));
                    }
                }
                Ok(super::format::megaflows(&flows))
            }
            ("pmd-stats-show", []) => Ok(super::format::pmd_stats(&self.rt.dp.pmd_stats())),
            ("pmd-stats-clear", []) => {
                self.rt.dp.clear_pmd_stats();
                Ok(Response::ok("", json!(null)))
            }
            ("pmd-rxq-show", []) => Ok(super::format::rxq_show(&self.rt.dp.rxq_show())),
            ("dump-megaflows" | "pmd-stats-show" | "pmd-stats-clear" | "pmd-rxq-show", _) => {
                Err(usage(""))
            }
            ("set-controller", [br, targets @ ..]) => self.set_controllers(br, targets),
            ("del-controller", [br]) => self.set_controllers(br, &[]),
            ("set-fail-mode", [br, mode]) => self.set_fail_mode(br, mode),
            ("set-bridge", [br, kvs @ ..]) if !kvs.is_empty() => self.set_bridge(br, kvs),
            ("set-bridge", _) => Err(usage("BR protocols=OpenFlow10,OpenFlow13,...")),
            ("set-controller", _) => Err(usage("BR TARGET...")),
            ("del-controller", _) => Err(usage("BR")),
            _ => Err(usage("BR standalone|secure")),
        }
    }

    fn set_controllers(&mut self, br: &str, targets: &[&str]) -> CmdResult {
        self.need_bridge(br)?;
        let targets: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
        for t in &targets {
            check_target(t)?;
        }
        self.rt.set_controllers(br, &targets)?;
        self.store.update(|c| {
            c.bridges.get_mut(br).expect("checked").controllers = targets.clone();
            Ok::<_, CmdError>(())
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `set-bridge BR protocols=LIST`: the OpenFlow versions the bridge negotiates.
    fn set_bridge(&mut self, br: &str, kvs: &[&str]) -> CmdResult {
        self.need_bridge(br)?;
        let mut protocols = None;
        for kv in kvs {
            match kv.split_once('=') {
                Some(("protocols", v)) => {
                    let p = ofswitch::Protocols::parse(v)
                        .map_err(|e| CmdError(format!("protocols: {e}")))?;
                    protocols = Some(p);
                }
                _ => {
                    return Err(CmdError(format!(
                        "set-bridge: unknown setting {kv:?} (supported: protocols=LIST)"
                    )))
                }
            }
        }
        if let Some(p) = protocols {
            self.rt.set_protocols(br, p)?;
            self.store.update(|c| {
                c.bridges.get_mut(br).expect("checked").protocols = Some(p.to_string());
                Ok::<_, CmdError>(())
            })?;
        }
        Ok(Response::ok("", json!(null)))
    }

    fn set_fail_mode(&mut self, br: &str, mode: &str) -> CmdResult {
        self.need_bridge(br)?;
        if mode != "standalone" && mode != "secure" {
            return Err(CmdError(format!(
                "fail mode {mode:?} is not standalone or secure"
            )));
        }
        self.rt.set_fail_mode(br, mode)?;
        self.store.update(|c| {
            c.bridges.get_mut(br).expect("checked").fail_mode = Some(mode.to_string());
            Ok::<_, CmdError>(())
        })?;
        Ok(Response::ok("", json!(null)))
    }
}

/// `tcp:IP:PORT`, `unix:PATH`, `ptcp:PORT[:IP]`.
pub fn check_target(t: &str) -> Result<(), CmdError> {
    let bad = || {
        CmdError(format!(
            "bad controller target {t:?}: use tcp:IP:PORT, unix:PATH or ptcp:PORT[:IP]"
        ))
    };
    let (kind, rest) = t.split_once(':').ok_or_else(bad)?;
    match kind {
        "tcp" => {
            let (ip, port) = rest.rsplit_once(':').ok_or_else(bad)?;
            ip.parse::<std::net::IpAddr>().map_err(|_| bad())?;
            port.parse::<u16>().map_err(|_| bad())?;
        }
        "ptcp" => {
            let (port, ip) = rest.split_once(':').unwrap_or((rest, "0.0.0.0"));
            port.parse::<u16>().map_err(|_| bad())?;
            ip.parse::<std::net::IpAddr>().map_err(|_| bad())?;
        }
        "unix" if !rest.is_empty() => {}
        _ => return Err(bad()),
    }
    Ok(())
}
