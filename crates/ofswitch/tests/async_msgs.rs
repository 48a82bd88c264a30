//! Asynchronous messages and buffers, seen by a minimal controller written with the
//! `openflow` codec over a real TCP connection (`ptcp:` controller target): PACKET_IN cut to
//! max_len with a buffer id, PACKET_OUT and FLOW_MOD naming that buffer, FLOW_REMOVED,
//! PORT_STATUS, and OpenFlow errors for bad requests.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use openflow::msg::*;
use openflow::oxm::OxmField;
use openflow::{Action, Instruction};

struct Client {
    s: TcpStream,
    xid: u32,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Client { s, xid: 100 };
        c.send(&Message::Hello(Hello::default()));
        c
    }

    fn send(&mut self, m: &Message) -> u32 {
        self.xid += 1;
        self.s.write_all(&m.encode(self.xid).unwrap()).unwrap();
        self.xid
    }

    fn recv(&mut self) -> (u32, Message) {
        let mut h = [0u8; 8];
        self.s.read_exact(&mut h).unwrap();
        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let mut buf = h.to_vec();
        buf.resize(len, 0);
        self.s.read_exact(&mut buf[8..]).unwrap();
        openflow::decode(&buf).unwrap()
    }

    /// The next message `f` accepts (others, e.g. echo requests, are skipped).
    fn expect<T>(&mut self, mut f: impl FnMut(u32, Message) -> Option<T>) -> T {
        for _ in 0..100 {
            let (xid, m) = self.recv();
            if let Some(t) = f(xid, m) {
                return t;
            }
        }
        panic!("expected message never came");
    }

    fn barrier(&mut self) {
        let x = self.send(&Message::BarrierRequest);
        self.expect(|xid, m| (xid == x && m == Message::BarrierReply).then_some(()));
    }
}

fn table_miss(max_len: u16) -> FlowMod {
    let mut fm = FlowMod::add(
        0,
        openflow::Match::default(),
        vec![Instruction::ApplyActions(vec![Action::Output {
            port: port_no::CONTROLLER,
            max_len,
        }])],
    );
    fm.flags = flow_mod_flags::SEND_FLOW_REM;
    fm.cookie = 0xabc;
    fm
}

#[test]
fn packet_in_buffers_flow_removed_port_status_and_errors() {
    let h = start();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    h.br.set_controllers(&[format!("ptcp:{port}:127.0.0.1")])
        .unwrap();
    let mut c = Client::connect(port);
    c.expect(|_, m| matches!(m, Message::Hello(_)).then_some(()));
    c.send(&Message::FlowMod(table_miss(64)));
    c.barrier();
    assert!(wait_for(Duration::from_secs(5), || h.br.controllers()[0].connected));

    // A 100-byte frame: the controller gets 64 bytes and a buffer id.
    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45; 86]);
    assert_eq!(f.len(), 100);
    inject(&h, 1, &f);
    let pin = c.expect(|_, m| match m {
        Message::PacketIn(p) => Some(p),
        _ => None,
    });
    assert_ne!(pin.buffer_id, NO_BUFFER);
    assert_eq!((pin.total_len, pin.data.len()), (100, 64));
    assert_eq!((pin.reason, pin.table_id, pin.cookie), (0, 0, 0xabc));
    assert_eq!(pin.matches.fields, vec![OxmField::InPort(1)]);
    assert_eq!(pin.data[..], f[..64]);

    // PACKET_OUT naming the buffer sends the whole frame.
    let po = PacketOut {
        buffer_id: pin.buffer_id,
        in_port: 1,
        actions: vec![Action::Output {
            port: 2,
            max_len: 0,
        }],
        data: vec![],
    };
    c.send(&Message::PacketOut(po.clone()));
    c.barrier();
    let sent = h.hooks.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].frame, f);
    assert_eq!(sent[0].actions, vec![dpif::Action::Output(12)]);
    // A buffer is used once.
    let x = c.send(&Message::PacketOut(po));
    let err = c.expect(|xid, m| match m {
        Message::Error(e) if xid == x => Some(e),
        _ => None,
    });
    assert_eq!(err.error(), openflow::errors::BAD_REQUEST_BUFFER_EMPTY);

    // A FLOW_MOD with a buffer id applies the rule, then runs the packet through the tables.
    inject(&h, 3, &f);
    let pin = c.expect(|_, m| match m {
        Message::PacketIn(p) => Some(p),
        _ => None,
    });
    let mut fm = FlowMod::add(
        10,
        openflow::Match::new(vec![OxmField::InPort(3)]),
        vec![Instruction::ApplyActions(vec![Action::Output {
            port: 4,
            max_len: 0,
        }])],
    );
    fm.buffer_id = pin.buffer_id;
    c.send(&Message::FlowMod(fm));
    c.barrier();
    let sent = h.hooks.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].in_port, &sent[0].actions),
        (Some(13), &vec![dpif::Action::Output(14)])
    );

    // Deleting the table-miss rule sends FLOW_REMOVED (it has SEND_FLOW_REM).
    let mut del = FlowMod::add(0, openflow::Match::default(), vec![]);
    del.command = FlowModCommand::DeleteStrict;
    c.send(&Message::FlowMod(del));
    let fr = c.expect(|_, m| match m {
        Message::FlowRemoved(r) => Some(r),
        _ => None,
    });
    assert_eq!((fr.cookie, fr.reason, fr.priority), (0xabc, 2, 0));
    assert_eq!(fr.packet_count, 2);

    // PORT_STATUS.
    h.br.port_status(
        ofswitch::PortReason::Modify,
        &ofswitch::PortReport {
            link_up: false,
            ..ofswitch::PortReport::new(2, "p2", 12)
        },
    );
    let ps = c.expect(|_, m| match m {
        Message::PortStatus(p) => Some(p),
        _ => None,
    });
    assert_eq!((ps.reason, ps.desc.port_no, ps.desc.state), (2, 2, 1));
    assert!(!h.pl.port_live("br0", 2));

    // Bad requests get the OpenFlow error, and the connection stays up.
    let bad = FlowMod::add(
        1,
        openflow::Match::new(vec![OxmField::EthType(0x8847), OxmField::MplsLabel(5)]),
        vec![],
    );
    let x = c.send(&Message::FlowMod(bad));
    let err = c.expect(|xid, m| match m {
        Message::Error(e) if xid == x => Some(e),
        _ => None,
    });
    assert_eq!(err.error(), openflow::errors::BAD_MATCH_BAD_FIELD);
    let x = c.send(&Message::PacketOut(PacketOut {
        buffer_id: 0x1234_5678,
        in_port: 1,
        actions: vec![],
        data: vec![],
    }));
    let err = c.expect(|xid, m| match m {
        Message::Error(e) if xid == x => Some(e),
        _ => None,
    });
    assert_eq!(err.error(), openflow::errors::BAD_REQUEST_BUFFER_UNKNOWN);
    let x = c.send(&Message::PortMod(PortMod {
        port_no: 77,
        ..Default::default()
    }));
    let err = c.expect(|xid, m| match m {
        Message::Error(e) if xid == x => Some(e),
        _ => None,
    });
    assert_eq!(err.error(), openflow::errors::PORT_MOD_FAILED_BAD_PORT);
    let x = c.send(&Message::GetConfigRequest);
    let cfg = c.expect(|xid, m| match m {
        Message::GetConfigReply(r) if xid == x => Some(r),
        _ => None,
    });
    assert_eq!(cfg.miss_send_len, 128);
}

/// Every message the codec's example set holds (requests, replies, async messages, FLOW_MODs
/// and GROUP_MODs of every shape) sent by a client: each gets its answer or an OpenFlow error,
/// the handler never panics, and the switch still answers and forwards afterwards.
#[test]
fn every_example_message_is_answered_without_harm() {
    let h = start();
    let s = std::os::unix::net::UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = s;
    w.write_all(&Message::Hello(Hello::default()).encode(1).unwrap())
        .unwrap();
    let examples = openflow::msg::examples();
    let mut xid = 1000;
    for m in &examples {
        if matches!(m, Message::Hello(_)) {
            continue;
        }
        xid += 1;
        // A 1.4-only example (the partial SET_ASYNC) has no 1.3 form.
        let Ok(b) = m.encode(xid) else { continue };
        w.write_all(&b).unwrap();
    }
    let last = xid + 1;
    w.write_all(&Message::BarrierRequest.encode(last).unwrap())
        .unwrap();
    let mut answered = std::collections::HashSet::new();
    loop {
        let mut hd = [0u8; 8];
        r.read_exact(&mut hd).unwrap();
        let len = usize::from(u16::from_be_bytes([hd[2], hd[3]]));
        let mut buf = hd.to_vec();
        buf.resize(len, 0);
        r.read_exact(&mut buf[8..]).unwrap();
        let (x, m) = openflow::decode(&buf).unwrap();
        if x == last {
            assert_eq!(m, Message::BarrierReply);
            break;
        }
        answered.insert(x);
    }
    assert!(
        answered.len() > examples.len() / 2,
        "{} answers",
        answered.len()
    );
    // The example PORT_MOD took port 1 administratively down (applied, shown in the
    // pipeline); bring it back up.
    assert_eq!(
        h.pl.port_of_config("br0", 1),
        ofproto::bridge::port_config::PORT_DOWN
    );
    h.pl.set_port_of_config("br0", 1, 0, ofproto::bridge::port_config::ALL)
        .unwrap();
    // Still a working switch with a consistent pipeline.
    h.pl.del_flows("br0", None, false).unwrap();
    h.pl.add_flow("br0", "in_port=1,actions=output:2").unwrap();
    let (_, sent) = inject(&h, 1, &frame(MAC_A, MAC_B, 0x0800, &[0x45]));
    assert_eq!(sent.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![12]);
}

/// `dec_ttl` (OFPAT_DEC_NW_TTL, as ovs-ofctl writes it) on a TTL-1 packet: a packet-in with
/// reason invalid_ttl (2), sent only to a controller whose async config asks for it (the
/// default, as OVS's, leaves it out); a TTL-64 packet leaves with TTL 63.
#[test]
fn dec_ttl_sends_invalid_ttl_packet_ins_when_asked() {
    let h = start();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    h.br.set_controllers(&[format!("ptcp:{port}:127.0.0.1")])
        .unwrap();
    let mut c = Client::connect(port);
    c.expect(|_, m| matches!(m, Message::Hello(_)).then_some(()));
    let mut fm = FlowMod::add(
        10,
        openflow::Match::new(vec![OxmField::EthType(0x0800)]),
        vec![Instruction::ApplyActions(vec![
            Action::DecNwTtl,
            Action::Output {
                port: 2,
                max_len: 0,
            },
        ])],
    );
    fm.cookie = 0x77;
    c.send(&Message::FlowMod(fm));
    c.barrier();
    assert!(wait_for(Duration::from_secs(5), || h.br.controllers()[0].connected));
    let ip = |ttl: u8| {
        let mut b = vec![
            0x45, 0, 0, 20, 0, 0, 0, 0, ttl, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = wire::checksum::compute(&b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        frame(MAC_A, MAC_B, 0x0800, &b)
    };
    let (t, sent) = inject(&h, 1, &ip(64));
    assert_eq!(
        t.actions,
        vec![dpif::Action::SetIpTtl(63), dpif::Action::Output(12)]
    );
    assert_eq!(sent[0].1[22], 63);

    // Default async config: no invalid-TTL packet-in (anything queued before the barrier
    // reply would come first).
    let (t, sent) = inject(&h, 1, &ip(1));
    assert!(sent.is_empty(), "nothing leaves: {:?}", t.actions);
    let x = c.send(&Message::BarrierRequest);
    c.expect(|xid, m| match m {
        Message::PacketIn(p) => panic!("unasked invalid-TTL packet-in: {p:?}"),
        Message::BarrierReply if xid == x => Some(()),
        _ => None,
    });
    // Ask for reason 2 as master.
    c.send(&Message::SetAsync(AsyncConfig {
        packet_in: [0b111, 0],
        ..AsyncConfig::default()
    }));
    c.barrier();
    inject(&h, 1, &ip(1));
    let pin = c.expect(|_, m| match m {
        Message::PacketIn(p) => Some(p),
        _ => None,
    });
    assert_eq!((pin.reason, pin.cookie), (2, 0x77));
    assert_eq!(pin.data[22], 1, "the packet as it came");
}
