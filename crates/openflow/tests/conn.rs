//! Connection-layer tests over real sockets: malformed input gets the right error replies
//! while another connection stays served, slow peers are dropped without blocking others,
//! echo keepalive, reconnect backoff, roles, and many concurrent TCP connections.

mod common;

use std::net::{Shutdown, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::client::Client;
use openflow::conn::{ConnConfig, OfSwitch, Stream};
use openflow::msg::*;
use openflow::oxm::{Match, OxmField};
use openflow::{errors, OfError, Protocols};

fn with_len(mut v: Vec<u8>) -> Vec<u8> {
    let l = v.len() as u16;
    v[2..4].copy_from_slice(&l.to_be_bytes());
    v
}

fn flow_mod_raw(xid: u32, fields: Vec<OxmField>) -> Vec<u8> {
    Message::FlowMod(FlowMod::add(1, Match::new(fields), Vec::new()))
        .encode(xid)
        .unwrap()
}

fn assert_error(e: &ErrorMsg, want: OfError, raw: &[u8]) {
    assert_eq!(e.error(), want);
    assert_eq!(
        e.data,
        raw[..raw.len().min(64)].to_vec(),
        "error data is the request's first 64 bytes"
    );
}

/// Raw malformed messages, each with the error it must draw. All keep the connection up.
fn malformed() -> Vec<(Vec<u8>, OfError)> {
    let mut oversize = flow_mod_raw(13, vec![OxmField::InPort(1)]);
    oversize[48 + 4 + 3] = 40; // in_port TLV claims 40 bytes, past the end of the match
    let mut unknown_inst = flow_mod_raw(16, vec![]);
    unknown_inst.extend_from_slice(&[0, 9, 0, 8, 0, 0, 0, 0]);
    let mut unknown_action = flow_mod_raw(17, vec![]);
    unknown_action.extend_from_slice(&[0, 4, 0, 16, 0, 0, 0, 0, 0, 99, 0, 8, 0, 0, 0, 0]);
    let mut exp_action = flow_mod_raw(18, vec![]);
    exp_action.extend_from_slice(&[0, 4, 0, 24, 0, 0, 0, 0, 0xff, 0xff, 0, 16, 0, 0, 0x23, 0x21]); // not Nicira
    exp_action.extend_from_slice(&[0; 8]);
    let mut unknown_field = flow_mod_raw(19, vec![OxmField::InPort(1)]);
    unknown_field[48 + 4 + 2] = 100 << 1;
    vec![
        (
            vec![1, 20, 0, 8, 0, 0, 0, 11],
            errors::BAD_REQUEST_BAD_VERSION,
        ),
        (vec![4, 99, 0, 8, 0, 0, 0, 12], errors::BAD_REQUEST_BAD_TYPE),
        (oversize, errors::BAD_MATCH_BAD_LEN),
        (
            flow_mod_raw(14, vec![OxmField::InPort(1), OxmField::InPort(2)]),
            errors::BAD_MATCH_DUP_FIELD,
        ),
        (
            flow_mod_raw(15, vec![OxmField::TcpDst(80)]),
            errors::BAD_MATCH_BAD_PREREQ,
        ),
        (with_len(unknown_inst), errors::BAD_INSTRUCTION_UNKNOWN_INST),
        (with_len(unknown_action), errors::BAD_ACTION_BAD_TYPE),
        (with_len(exp_action), errors::BAD_ACTION_BAD_EXPERIMENTER),
        (unknown_field, errors::BAD_MATCH_BAD_FIELD),
        (
            vec![4, 20, 0, 9, 0, 0, 0, 20, 0],
            errors::BAD_REQUEST_BAD_LEN,
        ),
        (
            vec![4, 18, 0, 16, 0, 0, 0, 21, 0, 99, 0, 0, 0, 0, 0, 0],
            errors::BAD_REQUEST_BAD_MULTIPART,
        ),
    ]
}

#[test]
fn malformed_input_gets_spec_errors_and_other_connections_stay_served() {
    let h = common::start();
    let mut good = Client::connected(&h.sock);
    let mut bad = Client::connected(&h.sock);
    for (i, (raw, want)) in malformed().into_iter().enumerate() {
        let xid = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]);
        let e = bad.expect_error(&raw, xid);
        assert_error(&e, want, &raw);
        bad.ping(100 + i as u32);
        good.ping(200 + i as u32);
    }
    assert!(
        h.sw.flow_mods().is_empty(),
        "no malformed FLOW_MOD reached the handler"
    );

    // Length below 8: error, then the stream is closed (it cannot be resynchronised).
    let raw = [4, 20, 0, 4, 0, 0, 0, 77];
    let e = bad.expect_error(&raw, 77);
    assert_eq!(e.error(), errors::BAD_REQUEST_BAD_LEN);
    assert!(bad.closed_within(Duration::from_secs(2)));
    good.ping(300);

    // Truncated header, then EOF.
    let mut trunc = Client::unix(&h.sock);
    trunc.send_raw(&[4, 0, 0]);
    if let Stream::Unix(s) = &trunc.stream {
        s.shutdown(Shutdown::Write).unwrap();
    }
    assert!(trunc.closed_within(Duration::from_secs(2)));
    good.ping(301);

    // Truncated body (length says 100), then EOF.
    let mut short = Client::connected(&h.sock);
    short.send_raw(&[4, 2, 0, 100, 0, 0, 0, 1, 1, 2, 3]);
    if let Stream::Unix(s) = &short.stream {
        s.shutdown(Shutdown::Write).unwrap();
    }
    assert!(short.closed_within(Duration::from_secs(2)));
    good.ping(302);
}

#[test]
fn version_negotiation_failures_close_with_hello_failed() {
    let h = common::start();
    // A 1.1-only peer (no bitmap, header version 2): Vireo speaks 1.0, 1.3, 1.4, 1.5.
    let mut old = Client::unix(&h.sock);
    old.send_raw(&[2, 0, 0, 8, 0, 0, 0, 5]);
    assert!(matches!(old.recv(), Some((_, Message::Hello(_)))));
    match old.recv() {
        Some((5, Message::Error(e))) => {
            assert_eq!(e.error(), errors::HELLO_FAILED_INCOMPATIBLE);
            let text = String::from_utf8_lossy(&e.data).to_string();
            assert!(
                text.contains("OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(old.closed_within(Duration::from_secs(2)));
    // A bitmap with only 1.1 and 1.2, header version 3.
    let mut bm = Client::unix(&h.sock);
    bm.version = 3;
    let hello = Message::Hello(Hello {
        version: 3,
        bitmap: Some(vec![(1 << 2) | (1 << 3)]),
    });
    bm.send(6, &hello);
    assert!(matches!(bm.recv(), Some((_, Message::Hello(_)))));
    assert!(
        matches!(bm.recv(), Some((6, Message::Error(e))) if e.error() == errors::HELLO_FAILED_INCOMPATIBLE)
    );
    assert!(bm.closed_within(Duration::from_secs(2)));
    // Anything before HELLO.
    let mut rude = Client::unix(&h.sock);
    rude.send(7, &Message::BarrierRequest);
    assert!(matches!(rude.recv(), Some((_, Message::Hello(_)))));
    assert!(
        matches!(rude.recv(), Some((7, Message::Error(e))) if e.error() == errors::HELLO_FAILED_INCOMPATIBLE)
    );
    assert!(rude.closed_within(Duration::from_secs(2)));
    // A newer peer whose bitmap has 1.3 and 1.5 gets 1.5, the highest common version.
    let mut new = Client::unix(&h.sock);
    new.send(
        8,
        &Message::Hello(Hello {
            version: 6,
            bitmap: Some(vec![(1 << 4) | (1 << 6)]),
        }),
    );
    match new.recv() {
        Some((_, Message::Hello(ours))) => {
            assert_eq!(ours.version, 6);
            assert_eq!(ours.bitmap, Some(vec![0b111_0010]));
        }
        other => panic!("{other:?}"),
    }
    new.version = 6;
    new.ping(9);
    assert_eq!(new.last_version, 6);
    assert_eq!(h.of.connections().last().map(|c| c.version), Some(6));
    // A 1.3 message on a 1.5 connection: BAD_VERSION, and the connection stays up.
    new.version = 4;
    new.send(10, &Message::EchoRequest(vec![]));
    assert!(
        matches!(new.recv(), Some((10, Message::Error(e))) if e.error() == errors::BAD_REQUEST_BAD_VERSION)
    );
    new.version = 6;
    new.ping(11);
}

#[test]
fn protocols_setting_limits_negotiation() {
    let h = common::start();
    // ovs-ofctl's default HELLO: version 1.0, no bitmap.
    let mut of10 = Client::unix(&h.sock);
    of10.version = 1;
    of10.send_raw(&[1, 0, 0, 8, 0, 0, 0, 1]);
    match of10.recv() {
        Some((_, Message::Hello(ours))) => assert_eq!(ours.version, 6),
        other => panic!("{other:?}"),
    }
    of10.ping(2);
    assert_eq!(of10.last_version, 1);
    // 1.0's BARRIER is type 18; a 1.3 BARRIER (type 20) is 1.0's queue request, which has a
    // 4-byte body: BAD_LEN.
    of10.send_raw(&[1, 18, 0, 8, 0, 0, 0, 3]);
    assert!(matches!(of10.recv(), Some((3, Message::BarrierReply))));
    let e = of10.expect_error(&[1, 20, 0, 8, 0, 0, 0, 4], 4);
    assert_eq!(e.error(), errors::BAD_REQUEST_BAD_LEN);
    // Limited to 1.3: the 1.0 peer is refused naming what is allowed; 1.3 still works.
    h.of.set_protocols(Protocols::parse("OpenFlow13").unwrap());
    assert_eq!(h.of.protocols().to_string(), "OpenFlow13");
    let mut refused = Client::unix(&h.sock);
    refused.send_raw(&[1, 0, 0, 8, 0, 0, 0, 5]);
    match refused.recv() {
        Some((_, Message::Hello(ours))) => {
            assert_eq!(ours.version, 4);
            assert_eq!(ours.bitmap, Some(vec![1 << 4]));
        }
        other => panic!("{other:?}"),
    }
    match refused.recv() {
        Some((5, Message::Error(e))) => {
            assert_eq!(e.error(), errors::HELLO_FAILED_INCOMPATIBLE);
            assert_eq!(refused.last_version, 1, "refusal in the peer's version");
            let text = String::from_utf8_lossy(&e.data).to_string();
            assert!(text.contains("we support OpenFlow13"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(refused.closed_within(Duration::from_secs(2)));
    let mut c13 = Client::connected(&h.sock);
    c13.ping(6);
    // The live 1.0 session keeps its version.
    of10.ping(7);
    assert_eq!(of10.last_version, 1);
}

#[test]
fn slow_peer_is_dropped_and_never_blocks_others() {
    let cfg = ConnConfig {
        tx_queue_len: 64,
        inactivity_probe: None,
        ..Default::default()
    };
    let h = common::start_with(cfg);
    let mut slow = Client::connected(&h.sock);
    let mut fast = Client::connected(&h.sock);
    while h.of.connections().iter().filter(|c| c.ready).count() < 2 {
        thread::sleep(Duration::from_millis(10));
    }
    let got = Arc::new(AtomicUsize::new(0));
    let got2 = got.clone();
    let reader = thread::spawn(move || {
        while let Some((_, m)) = fast.recv() {
            if matches!(m, Message::PacketIn(_)) && got2.fetch_add(1, Ordering::SeqCst) + 1 == 400 {
                break;
            }
        }
        fast
    });
    let pi = Message::PacketIn(PacketIn {
        buffer_id: NO_BUFFER,
        total_len: 8000,
        reason: 0,
        table_id: 0,
        cookie: 0,
        matches: Match::new(vec![OxmField::InPort(1)]),
        data: vec![0xab; 8000],
    });
    let mut slowest = Duration::ZERO;
    for i in 0..400 {
        while got.load(Ordering::SeqCst) + 32 < i {
            thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        h.of.broadcast(&pi);
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(500),
        "broadcast blocked for {slowest:?}"
    );
    let mut fast = reader.join().unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 400);
    assert_eq!(h.of.connections().len(), 1, "the slow peer was dropped");
    assert!(slow.closed_within(Duration::from_secs(5)));
    fast.ping(1);
}

#[test]
fn echo_keepalive_probes_and_drops_silent_peers() {
    let cfg = ConnConfig {
        inactivity_probe: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let h = common::start_with(cfg);
    let mut silent = Client::connected(&h.sock);
    let mut alive = Client::connected(&h.sock);
    let answering = thread::spawn(move || {
        let until = Instant::now() + Duration::from_millis(2000);
        let mut probes = 0;
        while Instant::now() < until {
            if let Some((xid, Message::EchoRequest(d))) =
                alive.recv_within(Duration::from_millis(50))
            {
                probes += 1;
                alive.send(xid, &Message::EchoReply(d));
            }
        }
        alive.ping(5);
        (probes, alive)
    });
    match silent.recv_within(Duration::from_secs(2)) {
        Some((_, Message::EchoRequest(_))) => {}
        other => panic!("expected an echo probe, got {other:?}"),
    }
    assert!(
        silent.closed_within(Duration::from_secs(2)),
        "no echo reply: dropped"
    );
    let (probes, _alive) = answering.join().unwrap();
    assert!(probes >= 2, "probes: {probes}");
    assert_eq!(h.of.connections().len(), 1);
}

/// Accepts one switch connection as a controller and completes HELLO.
fn accept_switch(l: &TcpListener) -> Client {
    let (s, _) = l.accept().unwrap();
    let mut c = Client::from(Stream::Tcp(s));
    c.hello();
    c
}

#[test]
fn connector_reaches_controller_and_reconnects() {
    let ctl = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ctl.local_addr().unwrap();
    let sw = common::TestSwitch::new();
    let cfg = ConnConfig {
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
        ..Default::default()
    };
    let of = OfSwitch::new(sw, cfg);
    let conn = of.connect(&format!("tcp:{addr}")).unwrap();
    let mut c = accept_switch(&ctl);
    c.send(3, &Message::FeaturesRequest);
    assert!(matches!(c.recv(), Some((3, Message::FeaturesReply(f))) if f.datapath_id == 0xab));
    // An async push reaches the controller.
    let ps = Message::PortStatus(PortStatus {
        reason: 0,
        desc: common::ports()[0].clone(),
    });
    while of.broadcast(&ps) == 0 {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(c.recv(), Some((0, Message::PortStatus(_)))));
    drop(c);
    let t = Instant::now();
    let mut c = accept_switch(&ctl);
    assert!(t.elapsed() < Duration::from_secs(3));
    c.ping(4);
    drop(conn);
    assert!(
        c.closed_within(Duration::from_secs(2)),
        "dropping the connector closes it"
    );
}

#[test]
fn connector_backs_off_exponentially_to_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let sw = common::TestSwitch::new();
    let cfg = ConnConfig {
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
        ..Default::default()
    };
    let of = OfSwitch::new(sw, cfg);
    let conn = of
        .connect(&format!("unix:{}", dir.path().join("none.sock").display()))
        .unwrap();
    // Attempts at 0, 0.1, 0.3, 0.7, 1.1, 1.5, 1.9, 2.3 s: eight within 2.5 s (25 without
    // backoff, 5 if the delay kept doubling past the cap); slack for a loaded machine.
    thread::sleep(Duration::from_millis(2500));
    let n = conn.attempts();
    assert!((7..=9).contains(&n), "attempts: {n}");
}

#[test]
fn default_backoff_is_one_to_eight_seconds() {
    let c = ConnConfig::default();
    assert_eq!(
        (c.backoff_initial, c.backoff_max),
        (Duration::from_secs(1), Duration::from_secs(8))
    );
}

#[test]
fn roles_master_slave_and_async_filtering() {
    let h = common::start();
    let mut a = Client::connected(&h.sock);
    let mut b = Client::connected(&h.sock);
    let role = |r, g| {
        Message::RoleRequest(RoleMsg {
            role: r,
            generation_id: g,
        })
    };
    a.send(1, &role(Role::Master, 1));
    assert!(matches!(a.recv(), Some((1, Message::RoleReply(r))) if r.role == Role::Master));
    b.send(2, &role(Role::Master, 2));
    assert!(
        matches!(b.recv(), Some((2, Message::RoleReply(r))) if r.role == Role::Master && r.generation_id == 2)
    );
    a.send(3, &role(Role::NoChange, 0));
    assert!(matches!(a.recv(), Some((3, Message::RoleReply(r))) if r.role == Role::Slave));
    // Stale generation id.
    let raw = role(Role::Master, 1).encode(4).unwrap();
    assert_error(
        &a.expect_error(&raw, 4),
        errors::ROLE_REQUEST_FAILED_STALE,
        &raw,
    );
    // A slave may not modify state.
    let raw = flow_mod_raw(5, vec![]);
    assert_error(&a.expect_error(&raw, 5), errors::BAD_REQUEST_IS_SLAVE, &raw);
    // Slaves get PORT_STATUS but not PACKET_IN.
    let pi = Message::PacketIn(PacketIn {
        buffer_id: NO_BUFFER,
        total_len: 1,
        reason: 0,
        table_id: 0,
        cookie: 0,
        matches: Match::default(),
        data: vec![1],
    });
    assert_eq!(h.of.broadcast(&pi), 1);
    let ps = Message::PortStatus(PortStatus {
        reason: 2,
        desc: common::ports()[1].clone(),
    });
    assert_eq!(h.of.broadcast(&ps), 2);
    assert!(matches!(b.recv(), Some((0, Message::PacketIn(_)))));
    assert!(matches!(b.recv(), Some((0, Message::PortStatus(_)))));
    assert!(matches!(a.recv(), Some((0, Message::PortStatus(_)))));
    // Equal again: state changes allowed.
    a.send(6, &role(Role::Equal, 0));
    assert!(matches!(a.recv(), Some((6, Message::RoleReply(r))) if r.role == Role::Equal));
    a.send_raw(&flow_mod_raw(7, vec![]));
    a.send(8, &Message::BarrierRequest);
    assert!(matches!(a.recv(), Some((8, Message::BarrierReply))));
    assert_eq!(h.sw.flow_mods().len(), 1);
}

#[test]
fn get_set_async_per_connection_filters_by_role() {
    let h = common::start();
    let mut a = Client::connected(&h.sock);
    let mut b = Client::connected(&h.sock);
    // The switch's HELLO comes before it has read ours: an echo makes sure b is ready
    // before anything is broadcast (a is, once it answers GET_ASYNC).
    b.ping(100);
    // Defaults at connect.
    a.send(1, &Message::GetAsyncRequest);
    assert_eq!(
        a.recv(),
        Some((1, Message::GetAsyncReply(AsyncConfig::default())))
    );
    let pi = |reason| {
        Message::PacketIn(PacketIn {
            buffer_id: NO_BUFFER,
            total_len: 1,
            reason,
            table_id: 0,
            cookie: 0,
            matches: Match::default(),
            data: vec![1],
        })
    };
    // Default: invalid-TTL packet-ins go to nobody, action packet-ins to both equals.
    assert_eq!(h.of.broadcast(&pi(2)), 0);
    assert_eq!(h.of.broadcast(&pi(1)), 2);
    assert!(matches!(a.recv(), Some((0, Message::PacketIn(p))) if p.reason == 1));
    assert!(matches!(b.recv(), Some((0, Message::PacketIn(p))) if p.reason == 1));
    // a: slave, but asks for no-match packet-ins as slave and no port status as master.
    let cfg = AsyncConfig {
        packet_in: [0, 0b001],
        port_status: [0, 0b111],
        flow_removed: [0, 0],
        ..AsyncConfig::default()
    };
    a.send(2, &Message::SetAsync(cfg));
    a.send(3, &Message::GetAsyncRequest);
    assert_eq!(
        a.recv(),
        Some((3, Message::GetAsyncReply(cfg))),
        "no reply to SET_ASYNC"
    );
    b.send(
        4,
        &Message::RoleRequest(RoleMsg {
            role: Role::Slave,
            generation_id: 1,
        }),
    );
    assert!(matches!(b.recv(), Some((4, Message::RoleReply(_)))));
    // a is equal: master/equal masks apply (nothing); b is slave with defaults (nothing).
    assert_eq!(h.of.broadcast(&pi(0)), 0);
    let ps = Message::PortStatus(PortStatus {
        reason: 2,
        desc: common::ports()[1].clone(),
    });
    assert_eq!(
        h.of.broadcast(&ps),
        1,
        "only b (slave default) wants port status"
    );
    assert!(matches!(b.recv(), Some((0, Message::PortStatus(_)))));
    // SET_ASYNC is allowed from a slave; a turns slave: its slave masks apply.
    a.send(
        5,
        &Message::RoleRequest(RoleMsg {
            role: Role::Slave,
            generation_id: 2,
        }),
    );
    assert!(matches!(a.recv(), Some((5, Message::RoleReply(_)))));
    assert_eq!(h.of.broadcast(&pi(0)), 1);
    assert!(matches!(a.recv(), Some((0, Message::PacketIn(p))) if p.reason == 0));
    b.send(6, &Message::SetAsync(cfg));
    b.send(7, &Message::BarrierRequest);
    assert_eq!(
        b.recv(),
        Some((7, Message::BarrierReply)),
        "slave's SET_ASYNC not refused"
    );
    assert_eq!(h.of.broadcast(&pi(0)), 2);
    // Per connection: a fresh connection still has the defaults.
    let mut c = Client::connected(&h.sock);
    c.send(8, &Message::GetAsyncRequest);
    assert_eq!(
        c.recv(),
        Some((8, Message::GetAsyncReply(AsyncConfig::default())))
    );
    // Malformed SET_ASYNC: BAD_LEN, connection stays up.
    let raw = with_len(vec![4, 28, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1]);
    assert_error(&c.expect_error(&raw, 9), errors::BAD_REQUEST_BAD_LEN, &raw);
    c.ping(10);
}

#[test]
fn ptcp_serves_many_connections_at_once() {
    let sw = common::TestSwitch::new();
    let of = OfSwitch::new(sw, ConnConfig::default());
    let l = of.listen("ptcp:0:127.0.0.1").unwrap();
    let addr = l.local_addr().unwrap();
    let workers: Vec<_> = (0..16)
        .map(|i| {
            thread::spawn(move || {
                let mut c = Client::tcp(addr);
                c.hello();
                c.send(i, &Message::FeaturesRequest);
                assert!(matches!(c.recv(), Some((x, Message::FeaturesReply(_))) if x == i));
                let req = Message::MultipartRequest(MultipartRequest::new(
                    MultipartRequestBody::PortDesc,
                ));
                c.send(i + 100, &req);
                match c.recv() {
                    Some((x, Message::MultipartReply(r))) => {
                        assert_eq!(x, i + 100);
                        assert!(matches!(r.body, MultipartReplyBody::PortDesc(p) if p.len() == 2));
                    }
                    other => panic!("{other:?}"),
                }
                c
            })
        })
        .collect();
    let clients: Vec<Client> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(of.connections().len(), 16);
    drop(clients);
    let t = Instant::now();
    while !of.connections().is_empty() && t.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(of.connections().is_empty());
}

#[test]
fn unix_listener_replaces_stale_sockets_only() {
    let dir = tempfile::tempdir().unwrap();
    let of = OfSwitch::new(common::TestSwitch::new(), ConnConfig::default());
    let path = dir.path().join("br0.mgmt");
    let target = format!("unix:{}", path.display());
    let l = of.listen(&target).unwrap();
    assert!(of.listen(&target).is_err(), "a live socket is not stolen");
    drop(l);
    assert!(!path.exists(), "dropping the listener removes its socket");
    // A stale socket file (bound, never listened on) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let l = of.listen(&target).unwrap();
    Client::connected(&path).ping(1);
    drop(l);
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(of.listen(&format!("unix:{}", file.display())).is_err());
    assert!(file.exists(), "a regular file is never removed");
}

#[test]
fn connector_never_waits_on_a_controller_that_does_not_accept() {
    use nix::sys::socket::UnixAddr;
    use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctrl.sock");
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .unwrap();
    bind(fd.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
    listen(&fd, Backlog::new(0).unwrap()).unwrap();
    // Fill the accept queue so that a blocking connect would wait for ever.
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let p = path.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(std::os::unix::net::UnixStream::connect(p));
        });
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(s) => fillers.push(s),
            Err(_) => break,
        }
    }
    let cfg = ConnConfig {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(20),
        ..ConnConfig::default()
    };
    let of = OfSwitch::new(common::TestSwitch::new(), cfg);
    let c = of.connect(&format!("unix:{}", path.display())).unwrap();
    // Each attempt fails at once (EAGAIN) and the next follows the backoff: none blocks.
    let t = Instant::now();
    while c.attempts() < 3 && t.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        c.attempts() >= 3,
        "connect blocked: {} attempts",
        c.attempts()
    );
    let t = Instant::now();
    drop(c);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "dropping the connector took {:?}",
        t.elapsed()
    );
    assert!(of.connections().is_empty());
}

/// Nicira's flow format is per 1.0 connection: after `NXT_SET_FLOW_FORMAT` (NXM) a removed
/// rule reaches that connection as `NXT_FLOW_REMOVED` with its register match, while another
/// 1.0 connection still gets `OFPT_FLOW_REMOVED`; a flow statistics request sent as
/// `NXST_FLOW` is answered as `NXST_FLOW`; an unknown format is `OFPBRC_EPERM`; switching
/// back to the standard format restores `OFPT_FLOW_REMOVED`.
#[test]
fn nxm_flow_format_is_per_connection() {
    use openflow::msg::v10::nicira;
    use openflow::msg::{FlowRemoved, MultipartRequest, MultipartRequestBody};
    let h = common::start();
    let open10 = || {
        let mut c = Client::unix(&h.sock);
        c.version = 1;
        c.send_raw(&[1, 0, 0, 8, 0, 0, 0, 1]);
        assert!(matches!(c.recv(), Some((_, Message::Hello(_)))));
        c.ping(2);
        c
    };
    let (mut nxm, mut std10) = (open10(), open10());
    nxm.send_raw(&nicira::encode_set_flow_format(3, true));
    nxm.ping(4);
    let fr = FlowRemoved {
        cookie: 9,
        priority: 5,
        reason: 2,
        table_id: 1,
        duration_sec: 1,
        duration_nsec: 0,
        idle_timeout: 0,
        hard_timeout: 0,
        packet_count: 3,
        byte_count: 180,
        matches: openflow::Match::new(vec![OxmField::Nx(openflow::nx::NxmField::reg(0, 5, None))]),
    };
    assert_eq!(h.of.broadcast(&Message::FlowRemoved(fr.clone())), 2);
    let f = nxm.recv_frame().unwrap();
    assert_eq!((f[0], f[1]), (1, 4), "a vendor message");
    assert_eq!(
        f[8..16],
        [0, 0, 0x23, 0x20, 0, 0, 0, 14],
        "NXT_FLOW_REMOVED"
    );
    assert_eq!(f, nicira::encode_flow_removed(0, &fr).unwrap());
    let g = std10.recv_frame().unwrap();
    assert_eq!(
        (g[0], g[1]),
        (1, 11),
        "the other 1.0 session: OFPT_FLOW_REMOVED"
    );

    // NXST_FLOW in, NXST_FLOW out.
    let req = MultipartRequest::new(MultipartRequestBody::Flow(Default::default()));
    nxm.send_raw(&nicira::encode_stats_request(7, &req).unwrap());
    let r = nxm.recv_frame().unwrap();
    let (xid, reply) = nicira::decode_stats_reply(&r).expect("an NXST_FLOW reply");
    assert_eq!(xid, 7);
    assert!(matches!(
        reply.body,
        openflow::msg::MultipartReplyBody::Flow(_)
    ));

    // Format 1 does not exist.
    let mut bad = nicira::encode_set_flow_format(8, true);
    bad[19] = 1;
    let e = nxm.expect_error(&bad, 8);
    assert_eq!((e.etype, e.code), (1, 5), "OFPBRC_EPERM in 1.0");
    // Back to the standard match.
    nxm.send_raw(&nicira::encode_set_flow_format(9, false));
    nxm.ping(10);
    h.of.broadcast(&Message::FlowRemoved(fr));
    let f = nxm.recv_frame().unwrap();
    assert_eq!((f[0], f[1]), (1, 11));
}
