//! Frame books handed over by an upgrade's old vireod (`FramePool::with_free`), as arbitrary
//! bytes: a list of frame numbers is accepted only if every one lies in the pool and none
//! repeats; an accepted pool holds exactly those frames and the kernel the rest, and the
//! kernel's frames then come back (completions) once each, the others never.
#![no_main]
use libfuzzer_sys::fuzz_target;
use xsk::FramePool;

const FS: u32 = 4096;
const FIRST: u32 = 8;
const COUNT: u32 = 16;

fuzz_target!(|data: &[u8]| {
    let free: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()) % 64)
        .collect();
    let valid = free.iter().all(|&f| (FIRST..FIRST + COUNT).contains(&f))
        && free.iter().collect::<std::collections::BTreeSet<_>>().len() == free.len();
    match FramePool::with_free(FS, FIRST, COUNT, &free) {
        Err(_) => assert!(!valid, "refused valid books {free:?}"),
        Ok(mut p) => {
            assert!(valid, "accepted bad books {free:?}");
            assert_eq!(p.free_count(), free.len());
            assert_eq!(p.in_kernel(), COUNT as usize - free.len());
            for f in FIRST..FIRST + COUNT {
                let addr = u64::from(f) * u64::from(FS);
                assert_eq!(p.take_completion(addr).is_ok(), !free.contains(&f));
                assert!(p.take_completion(addr).is_err());
            }
            assert_eq!(p.free_count(), COUNT as usize);
        }
    }
});
