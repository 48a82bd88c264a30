//! A real controller speaking OpenFlow 1.0 and 1.5 (os-ken, from the venv `scripts/setup.sh`
//! makes) against a `BridgeOf` over a real pipeline: a small learning-switch app written for
//! this test (below) installs a table-miss rule, gets PACKET_INs in its version, answers with
//! PACKET_OUTs and FLOW_MODs (1.0: fixed match and 1.0 actions; 1.5: OXM and the 1.5
//! packet-out whose input port is a match). Skipped with a message without the venv (fails
//! under VIREO_REQUIRE_PEERS=1).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use dpif::Action;
use testkit::{free_port, venv_file, Proc};

const T: Duration = Duration::from_secs(30);

/// A learning switch for os-ken, in the version `VIREO_OFP` names (10 or 15).
const APP: &str = r#"
import os
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_0, ofproto_v1_5

V = os.environ["VIREO_OFP"]


def mac(b):
    return ":".join("%02x" % x for x in b)


class Learn(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_0.OFP_VERSION if V == "10" else ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.where = {}

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def features(self, ev):
        dp = ev.msg.datapath
        o, p = dp.ofproto, dp.ofproto_parser
        to_ctl = [p.OFPActionOutput(o.OFPP_CONTROLLER, 0xffff)]
        if V == "10":
            dp.send_msg(p.OFPFlowMod(datapath=dp, match=p.OFPMatch(), cookie=0,
                                     command=o.OFPFC_ADD, priority=0, actions=to_ctl))
        else:
            inst = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, to_ctl)]
            dp.send_msg(p.OFPFlowMod(datapath=dp, priority=0, match=p.OFPMatch(),
                                     instructions=inst))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        o, p = dp.ofproto, dp.ofproto_parser
        in_port = msg.in_port if V == "10" else msg.match["in_port"]
        dst, src = msg.data[0:6], msg.data[6:12]
        self.where[src] = in_port
        out = self.where.get(dst, o.OFPP_FLOOD)
        acts = [p.OFPActionOutput(out)]
        if out != o.OFPP_FLOOD:
            if V == "10":
                m = p.OFPMatch(in_port=in_port, dl_src=src, dl_dst=dst)
                dp.send_msg(p.OFPFlowMod(datapath=dp, match=m, cookie=0x77,
                                         command=o.OFPFC_ADD, priority=1, actions=acts))
            else:
                m = p.OFPMatch(in_port=in_port, eth_src=mac(src), eth_dst=mac(dst))
                inst = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, acts)]
                dp.send_msg(p.OFPFlowMod(datapath=dp, cookie=0x77, priority=1, match=m,
                                         instructions=inst))
        data = msg.data if msg.buffer_id == o.OFP_NO_BUFFER else None
        if V == "10":
            po = p.OFPPacketOut(datapath=dp, buffer_id=msg.buffer_id, in_port=in_port,
                                actions=acts, data=data)
        else:
            po = p.OFPPacketOut(datapath=dp, buffer_id=msg.buffer_id,
                                match=p.OFPMatch(in_port=in_port), actions=acts, data=data)
        dp.send_msg(po)
"#;

fn osken(bin: &Path, port: u16, dir: &Path, version: &str) -> Proc {
    let app = dir.join(format!("learn{version}.py"));
    std::fs::write(&app, APP).unwrap();
    let mut cmd = Command::new(bin);
    cmd.env("VIREO_OFP", version).args([
        "--ofp-listen-host",
        "127.0.0.1",
        "--ofp-tcp-listen-port",
        &port.to_string(),
        app.to_str().unwrap(),
    ]);
    Proc::spawn(cmd, dir.join(format!("osken{version}-{port}.log")))
}

/// The learned B -> A translation (None: no venv, skipped).
fn learning_switch_in(version: &str) -> Option<Vec<Action>> {
    let bin = venv_file("bin/osken-manager")?;
    let h = start();
    let port = free_port();
    let ctl = osken(&bin, port, h.dir.path(), version);
    h.br.set_controllers(&[format!("tcp:127.0.0.1:{port}")])
        .unwrap();
    assert!(
        wait_for(T, || has_flow(&h, "priority=0 actions=CONTROLLER:65535")),
        "v{version}: table-miss flow not installed; flows {:?}\nlog:\n{}",
        h.pl.dump_flows_text("br0", None),
        ctl.log()
    );
    let want = if version == "10" {
        "OpenFlow10"
    } else {
        "OpenFlow15"
    };
    let conns = h.br.controllers();
    assert!(conns[0].connected && conns[0].version == want, "{conns:?}");

    // A -> B from p1: table miss -> PACKET_IN -> the controller floods it.
    let ab = frame(MAC_A, MAC_B, 0x0800, &[0x45; 46]);
    let (t, _) = inject(&h, 1, &ab);
    assert!(matches!(t.actions[..], [Action::Userspace(_)]), "{t:?}");
    assert!(
        wait_for(T, || !h.hooks.sent.lock().unwrap().is_empty()),
        "v{version}: no packet-out; log:\n{}",
        ctl.log()
    );
    let sent = h.hooks.sent.lock().unwrap().clone();
    assert_eq!(sent[0].frame, ab, "the whole frame went up and came back");
    assert_eq!(sent[0].in_port, Some(11));
    assert_eq!(packet_out_ports(&h), vec![vec![12, 13, 14]], "flooded");

    // B -> A from p2: learned: a flow and a packet-out to p1.
    let ba = frame(MAC_B, MAC_A, 0x0800, &[0x45; 46]);
    inject(&h, 2, &ba);
    assert!(
        wait_for(T, || has_flow(
            &h,
            "priority=1,in_port=p2,dl_src=00:00:00:00:00:0b,dl_dst=00:00:00:00:00:0a"
        )),
        "v{version}: learned flow missing: {:?}\nlog:\n{}",
        h.pl.dump_flows_text("br0", None),
        ctl.log()
    );
    assert!(wait_for(T, || !h.hooks.sent.lock().unwrap().is_empty()));
    assert_eq!(packet_out_ports(&h), vec![vec![11]]);
    let (t, _) = inject(&h, 2, &ba);
    assert_eq!(t.actions, vec![Action::Output(11)]);
    assert!(
        ctl.log().lines().all(|l| !l.contains("OFPErrorMsg")),
        "v{version}: the controller got errors:\n{}",
        ctl.log()
    );
    Some(t.actions)
}

#[test]
fn os_ken_learning_switch_over_openflow_1_0() {
    if let Some(learned) = learning_switch_in("10") {
        assert_eq!(learned, vec![Action::Output(11)]);
    }
}

#[test]
fn os_ken_learning_switch_over_openflow_1_5() {
    if let Some(learned) = learning_switch_in("15") {
        assert_eq!(learned, vec![Action::Output(11)]);
    }
}
