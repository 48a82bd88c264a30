//! The CLI contract of INTERFACE.md against a real vireod: commands, JSON output, and every
//! error case (one line on stderr naming the culprit, exit status 1, nothing changed).
mod common;
use common::Daemon;

fn setup() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("run"));
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "p1", "type=dummy"]);
    d.ok(&["add-port", "br0", "p2", "type=dummy", "tag=100"]);
    (dir, d)
}

#[test]
fn bridges_and_ports_round_trip() {
    let (_dir, d) = setup();
    d.ok(&["add-br", "br1", "internal=false"]);
    assert_eq!(d.ok(&["list-br"]), "br0\nbr1\n");
    assert_eq!(d.json(&["list-br"]), serde_json::json!(["br0", "br1"]));
    assert_eq!(d.ok(&["list-ports", "br0"]), "p1\np2\n");
    d.ok(&["set-port", "p1", "trunks=10,20"]);
    let show = d.json(&["show"]);
    let ports = &show["bridges"][0]["ports"];
    assert_eq!(ports[0]["name"], "p1");
    assert_eq!(ports[0]["ofport"], 1);
    assert_eq!(ports[0]["options"]["trunks"], "10,20");
    assert_eq!(ports[1]["options"]["tag"], "100");
    assert_eq!(ports[1]["link"], "up");
    let text = d.ok(&["show"]);
    assert!(
        text.contains("Bridge br0") && text.contains("Port p2") && text.contains("type: dummy")
    );
    // Clearing an option with an empty value.
    d.ok(&["set-port", "p2", "tag="]);
    assert!(d.json(&["show"])["bridges"][0]["ports"][1]["options"]
        .get("tag")
        .is_none());
    d.ok(&["del-port", "br0", "p1"]);
    assert_eq!(d.ok(&["list-ports", "br0"]), "p2\n");
    // A freed OpenFlow number is reused by the next port.
    d.ok(&["add-port", "br0", "p3", "type=dummy"]);
    assert_eq!(d.json(&["show"])["bridges"][0]["ports"][1]["ofport"], 1);
    d.ok(&["del-br", "br0"]);
    assert_eq!(d.ok(&["list-br"]), "br1\n");
    // Port names are free again after their bridge is gone.
    d.ok(&["add-port", "br1", "p2", "type=dummy"]);
    assert!(d.ok(&["version"]).contains("vireod "));
    let stats = d.json(&["port-stats", "p2"]);
    assert_eq!(stats[0]["port"], "p2");
    assert_eq!(stats[0]["rx_packets"], 0);
}

#[test]
fn every_error_is_one_line_exit_1_and_changes_nothing() {
    let (_dir, d) = setup();
    let before = d.json(&["show"]);
    let cases: &[(&[&str], &str)] = &[
        (&["add-br", "br0"], "br0 already exists"),
        (&["add-br", "p1"], "p1 already exists"),
        (&["add-br", "bad/name"], "invalid bridge name"),
        (&["del-br", "nope"], "no bridge named nope"),
        (
            &["add-port", "nope", "x", "type=dummy"],
            "no bridge named nope",
        ),
        (
            &["add-port", "br0", "p1", "type=dummy"],
            "p1 already exists",
        ),
        (
            &["add-port", "br0", "x", "type=warp"],
            "unknown port type \"warp\"",
        ),
        (
            &["add-port", "br0", "x", "type=af-xdp"],
            "needs ifname=INTERFACE",
        ),
        (
            &["add-port", "br0", "x", "type=dummy", "colour=red"],
            "unknown option \"colour\"",
        ),
        (
            &["add-port", "br0", "x", "type=dummy", "tagless"],
            "malformed option \"tagless\"",
        ),
        (
            &["add-port", "br0", "x", "type=dummy", "=3"],
            "malformed option \"=3\"",
        ),
        (
            &["add-port", "br0", "x", "type=dummy", "tag=1", "tag=2"],
            "\"tag\" given twice",
        ),
        (
            &["add-port", "br0", "x", "type=dummy", "tag=5000"],
            "bad value for tag",
        ),
        (&["del-port", "br0", "nope"], "no port named nope"),
        (&["list-ports", "nope"], "no bridge named nope"),
        (&["set-port", "nope", "tag=1"], "no port named nope"),
        (
            &["set-port", "p1", "colour=red"],
            "unknown option \"colour\"",
        ),
        (&["set-port", "p1", "tag"], "malformed option \"tag\""),
        (&["set-port", "p1", "type=vhost-user"], "cannot be changed"),
        (&["port-stats", "nope"], "no port named nope"),
        (&["set-pmd-cores", "1-0"], "not a core or core range"),
        (
            &["set-pmd-rxq-assign", "random"],
            "not roundrobin, cycles or group",
        ),
        (&["set-pmd-auto-lb", "250"], "not off or a threshold"),
        (
            &["set-fail-mode", "br0", "open"],
            "not standalone or secure",
        ),
        (
            &["set-controller", "br0", "tcp:nowhere"],
            "bad controller target",
        ),
        (
            &["add-flow", "br0", "in_port=p1,actions=output:nowhere"],
            "nowhere",
        ),
        (&["dump-flows", "nope"], "no bridge named nope"),
        (&["frobnicate"], "unknown command \"frobnicate\""),
        (&["add-br"], "usage: add-br BR"),
        (&["inject", "p1", "zz"], "bad hex"),
    ];
    for (args, want) in cases {
        let o = d.ctl(args);
        assert_eq!(o.code, 1, "{args:?} should fail: {o:?}");
        assert_eq!(o.stdout, "", "{args:?} printed to stdout");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {:?}", o.stderr);
        assert!(
            o.stderr.contains(want),
            "{args:?}: {:?} lacks {want:?}",
            o.stderr
        );
        assert_eq!(d.json(&["show"]), before, "{args:?} changed the switch");
    }
}

#[test]
fn cli_reports_an_absent_daemon_and_bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::ctl(dir.path(), &["show"]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("cannot reach vireod"), "{}", o.stderr);
    let o = common::ctl(dir.path(), &["--bogus", "show"]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("unknown option --bogus"));
}

#[test]
fn dummy_ports_take_injected_frames() {
    let (_dir, d) = setup();
    let frame = "ffffffffffff0001020304050806".to_string() + &"00".repeat(46);
    d.ok(&["inject", "p1", &frame]);
    // Too short to be Ethernet.
    let o = d.ctl(&["inject", "p1", "0102"]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("must be 14 to"));
    let o = d.ctl(&["capture", "br0"]);
    assert!(o.stderr.contains("no port named br0"));
}
