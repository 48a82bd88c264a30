use super::*;
use std::io::Write;
use std::os::fd::AsFd;

fn file(size: u64) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    f.set_len(size).unwrap();
    f.write_all(b"hello").unwrap();
    f
}

fn spec(gpa: u64, size: u64, uva: u64, off: u64) -> RegionSpec {
    RegionSpec {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: uva,
        mmap_offset: off,
    }
}

#[test]
fn maps_fd_regions_and_translates() {
    let f = file(8192);
    let m = GuestMemory::from_fds(&[spec(0x10000, 4096, 0x7000_0000, 0)], &[f.as_fd()]).unwrap();
    let mut b = [0u8; 5];
    m.read(0x10000, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert_eq!(m.uva_to_gpa(0x7000_0010, 16), Some(0x10010));
    assert_eq!(m.uva_to_gpa(0x7000_0ff0, 32), None);
    m.write_obj::<u32>(0x10ffc, 0xdead_beef).unwrap();
    assert_eq!(m.read_obj::<u32>(0x10ffc).unwrap(), 0xdead_beef);
    assert!(m.read_obj::<u32>(0x10ffd).is_err());
    assert!(!m.contains(0xffff, 1));
    // One node on most test machines; never a panic.
    if let Some(n) = m.numa_node() {
        assert!(n < 1024);
    }
}

#[test]
fn mmap_offset_is_honoured_and_checked_against_file_size() {
    let f = file(8192);
    let m = GuestMemory::from_fds(&[spec(0, 4096, 0, 4096)], &[f.as_fd()]).unwrap();
    m.write(0, b"x").unwrap();
    let e = GuestMemory::from_fds(&[spec(0, 4097, 0, 4096)], &[f.as_fd()]).unwrap_err();
    assert_eq!(
        e,
        MemError::BeyondFile {
            need: 8193,
            have: 8192
        }
    );
    let e = GuestMemory::from_fds(&[spec(0, 16, 0, u64::MAX - 4)], &[f.as_fd()]).unwrap_err();
    assert_eq!(e, MemError::Overflow);
}

#[test]
fn rejects_bad_tables() {
    let f = file(4096);
    let fd = f.as_fd();
    assert_eq!(
        GuestMemory::from_fds(&[], &[]).unwrap_err(),
        MemError::BadRegionCount(0)
    );
    let nine: Vec<RegionSpec> = (0..9).map(|i| spec(i * 4096, 4096, i * 4096, 0)).collect();
    assert!(matches!(
        GuestMemory::from_fds(&nine, &[fd; 9]).unwrap_err(),
        MemError::BadRegionCount(9)
    ));
    assert_eq!(
        GuestMemory::from_fds(&[spec(0, 0, 0, 0)], &[fd]).unwrap_err(),
        MemError::ZeroSize
    );
    let overlap = [spec(0, 4096, 0, 0), spec(4095, 1, 8192, 0)];
    assert_eq!(
        GuestMemory::from_fds(&overlap, &[fd, fd]).unwrap_err(),
        MemError::Overlap
    );
    assert_eq!(
        GuestMemory::from_fds(&[spec(u64::MAX, 2, 0, 0)], &[fd]).unwrap_err(),
        MemError::Overflow
    );
    assert!(matches!(
        GuestMemory::from_fds(&[spec(0, 4096, 0, 0)], &[]).unwrap_err(),
        MemError::BadRegionCount(0)
    ));
}

#[test]
fn copies_cross_adjacent_regions_and_fail_atomically() {
    let m = GuestMemory::anonymous(&[(0, 4096), (4096, 4096)]).unwrap();
    let data: Vec<u8> = (0..100).collect();
    m.write(4096 - 50, &data).unwrap();
    let mut back = [0u8; 100];
    m.read(4096 - 50, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    // Runs past the end: refused, nothing written.
    assert!(m.write(8192 - 10, &[7u8; 20]).is_err());
    let mut tail = [1u8; 10];
    m.read(8192 - 10, &mut tail).unwrap();
    assert_eq!(tail, [0u8; 10]);
    assert!(m.read(u64::MAX - 1, &mut [0u8; 4]).is_err());
    m.write2(4096 - 4, b"abcd", b"efgh").unwrap();
    let mut both = [0u8; 8];
    m.read(4096 - 4, &mut both).unwrap();
    assert_eq!(&both, b"abcdefgh");
    assert!(m.write2(8192 - 4, b"abcd", b"e").is_err());
}

#[test]
fn ranges_check_offsets_and_alignment() {
    let m = Arc::new(GuestMemory::anonymous(&[(0x1000, 4096)]).unwrap());
    assert!(m.range(0x1001, 4, 2).is_err());
    assert!(m.range(0x1ff0, 32, 2).is_err());
    let r = m.range(0x1100, 64, 16).unwrap();
    assert!(r.store_u16_release(2, 0xabcd));
    assert_eq!(r.load_u16_acquire(2), Some(0xabcd));
    assert_eq!(m.read_obj::<u16>(0x1102).unwrap(), 0xabcd);
    assert_eq!(r.read_u16(63), None);
    assert_eq!(r.read_u16(64), None);
    assert!(r.write_u32_pair(8, 1, 2));
    assert_eq!(r.read_u64_pair(0).unwrap().1, 1 | (2 << 32));
    assert_eq!(r.read_u64_pair(56), None);
    assert!(!r.write_u32_pair(usize::MAX - 2, 1, 2));
    // The range keeps the table alive after the last other Arc is gone.
    drop(m);
    assert_eq!(r.load_u16_acquire(2), Some(0xabcd));
}

proptest::proptest! {
    #[test]
    fn translation_never_escapes_a_region(gpa in 0u64..0x6000, len in 0u64..0x3000) {
        let m = GuestMemory::anonymous(&[(0x1000, 0x1000), (0x3000, 0x1000)]).unwrap();
        let inside = |a: u64, l: u64| {
            (a >= 0x1000 && a + l <= 0x2000 && a < 0x2000)
                || (a >= 0x3000 && a + l <= 0x4000 && a < 0x4000)
        };
        proptest::prop_assert_eq!(m.contains(gpa, len), inside(gpa, len));
        let mut buf = vec![0u8; len as usize];
        let ok = m.read(gpa, &mut buf).is_ok();
        proptest::prop_assert_eq!(ok, len == 0 || inside(gpa, len));
    }
}

const MIB: u64 = 1 << 20;

/// A 4 MiB file-backed table at gpa 0 whose first bytes are `0x5a`.
fn shrinkable() -> (std::fs::File, GuestMemory) {
    let f = tempfile::tempfile().unwrap();
    f.set_len(4 * MIB).unwrap();
    let m = GuestMemory::from_fds(&[spec(0, 4 * MIB, 0x7000_0000, 0)], &[f.as_fd()]).unwrap();
    m.write(0, &[0x5a; 64]).unwrap();
    m.write(3 * MIB, &[0x5a; 64]).unwrap();
    (f, m)
}

#[test]
fn a_shrunk_file_poisons_the_table_instead_of_killing_the_process() {
    let (f, m) = shrinkable();
    let (_g2, other) = shrinkable();
    assert!(!m.poisoned());
    assert_eq!(m.lost_region(), None);
    // The frontend cuts its file to 1 MiB: pages past it are gone.
    f.set_len(MIB).unwrap();
    let mut b = [0xffu8; 64];
    // Without the handler this read dies with SIGBUS.
    m.read(3 * MIB, &mut b).unwrap();
    assert_eq!(b, [0u8; 64], "lost memory reads as zeros");
    assert!(m.poisoned());
    assert_eq!(m.lost_region(), Some((0, spec(0, 4 * MIB, 0x7000_0000, 0))));
    // The whole mapping was replaced: the part still in the file reads as zeros too, writes
    // land in private pages the frontend never sees, and nothing faults again.
    m.read(0, &mut b).unwrap();
    assert_eq!(b, [0u8; 64]);
    m.write(3 * MIB + 100, &[1, 2, 3]).unwrap();
    m.write_obj::<u64>(4 * MIB - 8, 7).unwrap();
    // Another table is untouched.
    assert!(!other.poisoned());
    let mut c = [0u8; 4];
    other.read(3 * MIB, &mut c).unwrap();
    assert_eq!(c, [0x5a; 4]);
    assert!(lost::mappings_lost() >= 1);
    drop(m);
}

#[test]
fn a_ring_range_in_a_shrunk_file_reads_zero() {
    let (f, m) = shrinkable();
    let m = Arc::new(m);
    let r = m.range(2 * MIB, 64, 16).unwrap();
    assert!(r.store_u16_release(2, 9));
    f.set_len(0).unwrap();
    // Atomic and volatile accesses through a cached range fault and recover the same way.
    assert_eq!(r.load_u16_acquire(2), Some(0));
    assert_eq!(r.read_u64_pair(16), Some((0, 0)));
    assert!(r.write_u32_pair(8, 1, 2));
    assert!(m.poisoned());
    drop(m);
    // The range still holds the table; dropping it last unmaps and frees the slot.
    drop(r);
}

#[test]
fn threads_faulting_on_one_mapping_at_once_all_recover() {
    let (f, m) = shrinkable();
    let m = Arc::new(m);
    f.set_len(4096).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut sum = 0u64;
                for i in 0..64u64 {
                    let mut b = [0u8; 8];
                    m.read(MIB + (t * 64 + i) * 4096, &mut b).unwrap();
                    sum += u64::from_le_bytes(b);
                }
                sum
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 0);
    }
    assert!(m.poisoned());
}

#[test]
fn tables_come_and_go_without_using_up_slots() {
    // Far more tables than slots over time: each drop frees its slot.
    let f = file(8192);
    for _ in 0..(2 * lost::SLOTS) {
        let m = GuestMemory::from_fds(&[spec(0, 4096, 0, 0)], &[f.as_fd()]).unwrap();
        assert!(!m.poisoned());
    }
}

/// Env var under which the test binary re-runs itself as the child of
/// [`a_fault_outside_guest_memory_still_kills_the_process`].
const CHILD: &str = "VIREO_GUESTMEM_FOREIGN_SIGBUS_CHILD";

#[test]
fn a_fault_outside_guest_memory_still_kills_the_process() {
    if std::env::var_os(CHILD).is_some() {
        // Child: a guest table exists (so our handler is installed), then a mapping of our
        // own, not registered, loses its file and is read.
        let (_f, _m) = shrinkable();
        let f = tempfile::tempfile().unwrap();
        f.set_len(MIB).unwrap();
        // A fresh shared mapping of a file we own, at an address the kernel picks.
        // SAFETY: maps new memory; nothing existing is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MIB as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        f.set_len(0).unwrap();
        // The page is past the end of the file now: this read faults with SIGBUS.
        // SAFETY: `p` is a live mapping of MIB bytes (reading it is what we test).
        let v = unsafe { std::ptr::read_volatile(p.cast::<u8>()) };
        // Reached only if the fault was wrongly swallowed.
        println!("survived a foreign SIGBUS, read {v}");
        std::process::exit(0);
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "tests::a_fault_outside_guest_memory_still_kills_the_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A handler that swallowed the fault would make it repeat forever: give it 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child hung on a foreign SIGBUS instead of dying");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGBUS),
        "child should die of SIGBUS: {status:?}\n{stdout}"
    );
}

/// Env var under which the test binary re-runs itself as the child of
/// [`a_table_that_gets_no_slot_is_refused`] (it takes every slot of the process).
const FILL: &str = "VIREO_GUESTMEM_FILL_SLOTS_CHILD";

#[test]
fn a_table_that_gets_no_slot_is_refused() {
    if std::env::var_os(FILL).is_some() {
        let f = file(4096);
        let one = [spec(0, 4096, 0, 0)];
        let mut held = Vec::new();
        let refused = loop {
            match GuestMemory::from_fds(&one, &[f.as_fd()]) {
                Ok(m) => held.push(m),
                Err(e) => break e,
            }
            assert!(held.len() <= lost::SLOTS, "more tables than slots");
        };
        assert_eq!(refused, MemError::NoGuardSlot);
        assert!(refused
            .to_string()
            .contains("too many guest memory regions"));
        assert_eq!(held.len(), lost::SLOTS);
        // Anonymous tables cannot shrink and need no slot.
        assert!(GuestMemory::anonymous(&[(0, 4096)]).is_ok());
        // A slot freed is a slot for the next table.
        held.pop();
        assert!(GuestMemory::from_fds(&one, &[f.as_fd()]).is_ok());
        println!("CHILD-OK");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::a_table_that_gets_no_slot_is_refused",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FILL, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("CHILD-OK"),
        "{:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn copies_between_two_tables_and_within_one() {
    let a = GuestMemory::anonymous(&[(0x1000, 8192)]).unwrap();
    let b = GuestMemory::anonymous(&[(0x4000, 4096)]).unwrap();
    let pat: Vec<u8> = (0..2000u32).map(|i| (i * 7) as u8).collect();
    a.write(0x1100, &pat).unwrap();
    b.copy_from(0x4010, &a, 0x1100, pat.len()).unwrap();
    let mut got = vec![0u8; pat.len()];
    b.read(0x4010, &mut got).unwrap();
    assert_eq!(got, pat);
    // Out of range on either side: refused, nothing written.
    assert!(b.copy_from(0x4f00, &a, 0x1100, 512).is_err());
    assert!(b.copy_from(0x4000, &a, 0x2f00, 512).is_err());
    b.read(0x4f00, &mut got[..256]).unwrap();
    assert!(got[..256].iter().all(|&x| x == 0));
    // Overlapping ranges in one table (a guest's rx buffer over its own tx buffer).
    a.copy_from(0x1180, &a, 0x1100, pat.len()).unwrap();
    let mut moved = vec![0u8; pat.len()];
    a.read(0x1180, &mut moved).unwrap();
    assert_eq!(moved, pat);
}
