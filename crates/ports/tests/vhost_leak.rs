//! 1,000 connect/disconnect cycles against a server port leave no fds or mappings behind.
//! (Own test binary: nothing else runs in the process while it counts.)
use ports::vhost_user::VhostUserPort;
use ports::{Link, Port};
use std::time::{Duration, Instant};
use vhost::frontend::MockGuest;

fn count_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn count_maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

fn cycle(port: &VhostUserPort) {
    let g = MockGuest::connect(port.path(), 1, 64, u64::MAX).expect("handshake");
    assert_eq!(port.link(), Link::Up);
    drop(g);
    let end = Instant::now() + Duration::from_secs(5);
    while port.link() == Link::Up || port.status()["state"] != "listening" {
        assert!(Instant::now() < end, "port never noticed the disconnect");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn thousand_connect_disconnect_cycles_leak_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("leak.sock"), 2).unwrap();
    for _ in 0..10 {
        cycle(&port);
    }
    let (fds0, maps0) = (count_fds(), count_maps());
    for _ in 0..1000 {
        cycle(&port);
    }
    let (fds1, maps1) = (count_fds(), count_maps());
    eprintln!("fds {fds0} -> {fds1}, maps {maps0} -> {maps1}");
    assert_eq!(fds1, fds0, "fd leak");
    // The allocator may add an arena or two; 1,000 leaked guest mappings would show as 1,000.
    assert!(maps1 <= maps0 + 4, "mapping leak: {maps0} -> {maps1}");
    assert!(port.status()["connections"].as_u64().unwrap() >= 1010);
    assert_eq!(port.status()["protocol_errors"], 0);
}
