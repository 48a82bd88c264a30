//! 200 open/close cycles of an AF_XDP device on a real veth, each closed with frames in flight,
//! leave no fd, no mapping (UMEM or ring) and no XDP program behind. Its own test binary: it
//! counts this process's fds and maps.
use testkit::veth::{have_ip, NsVeth};
use xsk::{Device, DeviceConfig, ModeRequest};

fn count(path: &str) -> usize {
    match path {
        "fd" => std::fs::read_dir("/proc/self/fd").unwrap().count(),
        _ => std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .count(),
    }
}

#[test]
fn open_and_close_200_times_leaks_nothing() {
    if !have_ip() {
        return;
    }
    let net = NsVeth::new("vxk-l1", "vxkl1h", "vxkl1n", "10.77.9.1/24", 2);
    let cfg = |mode| DeviceConfig {
        ifname: net.host_if.clone(),
        queues: 2,
        mode,
        steer_targets: 0,
        marks: false,
    };
    // Warm up (first-use allocations of the allocator and the test harness).
    drop(Device::open(&cfg(ModeRequest::Generic)).unwrap());
    let (fds, maps) = (count("fd"), count("maps"));
    for i in 0..200 {
        let mode = if i % 2 == 0 {
            ModeRequest::Generic
        } else {
            ModeRequest::Native
        };
        let mut d = Device::open(&cfg(mode)).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        let open_fds = count("fd");
        // 2 sockets, map, program, link at least.
        assert!(
            open_fds >= fds + 5,
            "cycle {i}: {open_fds} fds open vs {fds} before"
        );
        // Close with frames in flight: every fill ring is full, and a burst just went to
        // each tx ring.
        let mut queues = d.take_queues();
        let frame = [0xffu8; 60];
        for (_, tx) in queues.iter_mut() {
            let b = tx.send(std::iter::repeat_n(&frame[..], 32));
            assert_eq!(b.packets, 32, "cycle {i}");
        }
        drop(queues);
        drop(d);
    }
    assert_eq!(count("fd"), fds, "fds leaked over 200 cycles");
    assert_eq!(count("maps"), maps, "mappings leaked over 200 cycles");
    assert!(!net.host_link().contains("xdp"), "{}", net.host_link());
}
