//! The 1.4/1.5 asynchronous configuration (property-based GET_ASYNC / SET_ASYNC) with a real
//! controller: os-ken (from the venv `scripts/setup.sh` makes) runs the small app below in
//! OpenFlow 1.4 or 1.5 against a `BridgeOf` over a real pipeline. It turns packet-ins off with
//! a SET_ASYNC carrying only the packet-in properties, reads the configuration back with
//! GET_ASYNC (the other properties keep their defaults), and turns packet-ins back on when the
//! test says so. The test checks the reply as os-ken decoded it, that no packet-in arrives
//! while they are off, and that one arrives once they are on. Skipped with a message without
//! the venv (fails under VIREO_REQUIRE_PEERS=1).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use testkit::{free_port, venv_file, Proc};

const T: Duration = Duration::from_secs(30);

const APP: &str = r#"
import os
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_4, ofproto_v1_5

V = os.environ["VIREO_OFP"]
ENABLE = os.environ["VIREO_ENABLE"]
OUT = os.environ["VIREO_OUT"]


def note(line):
    with open(OUT, "a") as f:
        f.write(line + "\n")


class AsyncCfg(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_4.OFP_VERSION if V == "14" else ofproto_v1_5.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def features(self, ev):
        dp = ev.msg.datapath
        o, p = dp.ofproto, dp.ofproto_parser
        to_ctl = [p.OFPActionOutput(o.OFPP_CONTROLLER, 0xffff)]
        inst = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, to_ctl)]
        dp.send_msg(p.OFPFlowMod(datapath=dp, priority=0, match=p.OFPMatch(), instructions=inst))
        self.set_packet_in(dp, 0)
        hub.spawn(self.wait_enable, dp)

    def set_packet_in(self, dp, mask):
        o, p = dp.ofproto, dp.ofproto_parser
        props = [p.OFPAsyncConfigPropReasons(type_=t, mask=mask)
                 for t in (o.OFPACPT_PACKET_IN_MASTER, o.OFPACPT_PACKET_IN_SLAVE)]
        dp.send_msg(p.OFPSetAsync(dp, props))
        dp.send_msg(p.OFPGetAsyncRequest(dp))

    def wait_enable(self, dp):
        while not os.path.exists(ENABLE):
            hub.sleep(0.1)
        o = dp.ofproto
        self.set_packet_in(dp, (1 << o.OFPR_TABLE_MISS) | (1 << o.OFPR_APPLY_ACTION))

    @set_ev_cls(ofp_event.EventOFPGetAsyncReply, MAIN_DISPATCHER)
    def reply(self, ev):
        props = sorted((p.type, p.mask) for p in ev.msg.properties)
        note("ASYNC " + " ".join("%d:%d" % x for x in props))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        note("PACKET_IN reason=%d" % ev.msg.reason)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        note("ERROR type=%d code=%d" % (ev.msg.type, ev.msg.code))
"#;

fn lines(out: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// `type:mask` pairs of one `ASYNC` line.
fn props(line: &str) -> Vec<(u16, u32)> {
    line.trim_start_matches("ASYNC ")
        .split(' ')
        .map(|p| {
            let (t, m) = p.split_once(':').unwrap();
            (t.parse().unwrap(), m.parse().unwrap())
        })
        .collect()
}

/// The two GET_ASYNC replies os-ken decoded, as `type:mask` pairs (None: no venv, skipped).
fn async_config_in(version: &str) -> Option<[Vec<(u16, u32)>; 2]> {
    let bin = venv_file("bin/osken-manager")?;
    let h = start();
    let dir = h.dir.path();
    let (app, out, enable) = (
        dir.join(format!("async{version}.py")),
        dir.join("out.txt"),
        dir.join("enable"),
    );
    std::fs::write(&app, APP).unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.env("VIREO_OFP", version)
        .env("VIREO_OUT", &out)
        .env("VIREO_ENABLE", &enable)
        .args([
            "--ofp-listen-host",
            "127.0.0.1",
            "--ofp-tcp-listen-port",
            &port.to_string(),
            app.to_str().unwrap(),
        ]);
    let ctl = Proc::spawn(cmd, dir.join("osken.log"));
    h.br.set_controllers(&[format!("tcp:127.0.0.1:{port}")])
        .unwrap();
    assert!(
        wait_for(T, || !lines(&out, "ASYNC").is_empty()),
        "v{version}: no GET_ASYNC reply; log:\n{}",
        ctl.log()
    );
    // Packet-ins off for both roles; everything else at the defaults: port status all reasons
    // for both, flow-removed all for master only, role status for both.
    let first = props(&lines(&out, "ASYNC")[0]);
    let get = |ps: &[(u16, u32)], t: u16| ps.iter().find(|p| p.0 == t).map(|p| p.1);
    assert_eq!(first.len(), 12, "every property in a reply: {first:?}");
    assert_eq!((get(&first, 0), get(&first, 1)), (Some(0), Some(0)));
    assert_eq!((get(&first, 2), get(&first, 3)), (Some(7), Some(7)));
    assert_eq!((get(&first, 4), get(&first, 5)), (Some(0), Some(15)));
    assert_eq!((get(&first, 6), get(&first, 7)), (Some(7), Some(7)));

    // A table miss while packet-ins are off: nothing reaches the controller.
    let miss = frame(MAC_A, MAC_B, 0x0800, &[0x45; 46]);
    assert!(wait_for(T, || has_table_miss(&h)));
    inject(&h, 1, &miss);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        lines(&out, "PACKET_IN").is_empty(),
        "v{version}: packet-in despite SET_ASYNC: {:?}",
        std::fs::read_to_string(&out)
    );

    // Back on (table-miss and apply-action): the next miss is a packet-in.
    std::fs::write(&enable, b"").unwrap();
    assert!(wait_for(T, || lines(&out, "ASYNC").len() >= 2));
    let second = props(&lines(&out, "ASYNC")[1]);
    assert_eq!((get(&second, 0), get(&second, 1)), (Some(3), Some(3)));
    assert_eq!(
        get(&second, 3),
        Some(7),
        "untouched properties keep their values"
    );
    inject(&h, 1, &miss);
    assert!(
        wait_for(T, || !lines(&out, "PACKET_IN").is_empty()),
        "v{version}: no packet-in after re-enabling; log:\n{}",
        ctl.log()
    );
    assert!(
        lines(&out, "ERROR").is_empty(),
        "v{version}: errors: {:?}",
        lines(&out, "ERROR")
    );
    Some([first, second])
}

fn has_table_miss(h: &Harness) -> bool {
    h.pl.dump_flows_text("br0", None)
        .unwrap()
        .iter()
        .any(|l| l.contains("priority=0 actions=CONTROLLER"))
}

#[test]
fn os_ken_sets_and_gets_async_config_over_openflow_1_4() {
    if let Some([off, on]) = async_config_in("14") {
        assert!(
            off.contains(&(1, 0)) && on.contains(&(1, 3)),
            "{off:?} {on:?}"
        );
    }
}

#[test]
fn os_ken_sets_and_gets_async_config_over_openflow_1_5() {
    if let Some([off, on]) = async_config_in("15") {
        assert!(
            off.contains(&(1, 0)) && on.contains(&(1, 3)),
            "{off:?} {on:?}"
        );
    }
}
