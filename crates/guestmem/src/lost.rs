//! Guest memory that shrinks or vanishes under us: a process-wide registry of the live guest
//! mappings and the `SIGBUS` handler that turns a fault inside one of them into a flag.
//!
//! Why: a frontend may `ftruncate` the memfd or hugetlbfs file it shared with `SET_MEM_TABLE`
//! at any moment (any unsealed memfd can be shrunk by its owner; hugetlbfs also faults when huge
//! pages run out). Every later access to a page past the new end raises `SIGBUS` in whichever
//! thread touched it — a PMD copying a packet, the control thread reading a ring index — and the
//! default action kills the switch with every VM on it. Checking the file size before each access
//! cannot work (the frontend shrinks it between the check and the access), and sealing cannot be
//! imposed on a fd someone else created. So we let the fault happen and recover from it.
//!
//! How: every mapping a [`crate::GuestMemory`] makes from fds takes a slot of [`SLOTS`] (a static
//! array of atomics; no allocation, no locks, so the signal handler can read it). The handler,
//! installed once (`std::sync::Once`) when the first slot is taken, looks the fault address up:
//! - inside a live slot: it maps fresh private anonymous zero pages over that whole mapping
//!   (`mmap(MAP_FIXED)`, a plain system call), marks the slot poisoned and returns; the faulting
//!   copy is restarted by the CPU and completes on zero pages. The table is now "lost": its users
//!   check [`crate::GuestMemory::poisoned`] after they touched it and give the port up.
//! - anywhere else (not ours): the signal goes to the handler that was installed before ours
//!   (Rust's std stack-overflow guard, which resets `SIGBUS` to its default action and returns,
//!   so the fault repeats and kills the process as it always did), or, when there was none,
//!   `SIGBUS` is reset to its default action and the fault repeats. A `SIGBUS` sent with `kill`
//!   (not a fault) is never treated as ours.
//!
//! Why remapping a fault address is safe: a thread only faults inside a guest mapping while it
//! is accessing it through a `GuestMemory` or a `GuestRange`, and both hold the table (an `Arc`),
//! so the mapping cannot be unmapped while that thread is stopped in the handler. Besides, a slot
//! moves LIVE → REMAP (by the handler, with a compare-exchange) and LIVE → DYING (by the mapping's
//! drop, before `munmap`) — never both: the drop waits while a handler holds REMAP, and the
//! handler ignores a DYING slot. So `MAP_FIXED` only ever replaces pages of a mapping that is
//! ours and alive; it never lands on an address range that was unmapped and reused.
//!
//! A table that cannot get a slot (all [`SLOTS`] taken) is refused with
//! [`crate::MemError::NoGuardSlot`]: no guest mapping ever exists unprotected. Anonymous tables
//! (tests, the mock driver) have no file to shrink and take no slot.
//!
//! Threads: any thread registers (the control thread building a table) and unregisters (the
//! thread dropping the last `Arc`); the handler runs on whichever thread faulted (on its
//! alternate signal stack when it has one). Lock-free throughout.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// How many guest mappings may be live at once in the process (each region of each table is
/// one: 8 regions × 512 tables).
pub const SLOTS: usize = 4096;

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const LIVE: u32 = 2;
const REMAP: u32 = 3;
const DYING: u32 = 4;

struct Slot {
    state: AtomicU32,
    base: AtomicUsize,
    len: AtomicUsize,
    poisoned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    state: AtomicU32::new(FREE),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    poisoned: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

/// Mappings ever replaced by zero pages (0: nothing was ever lost, the fast path of
/// [`is_poisoned`]).
static LOST: AtomicU64 = AtomicU64::new(0);

static INSTALL: Once = Once::new();
/// The `SIGBUS` action in place before ours (set before ours is installed).
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// Whether installing our handler failed (then no slot is handed out).
static INSTALL_FAILED: AtomicBool = AtomicBool::new(false);

/// How many guest mappings the handler has replaced by zero pages since the process started.
pub fn mappings_lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// Takes a slot for the mapping `[base, base + len)` (installing the handler the first time).
/// `None` when every slot is taken or the handler could not be installed.
pub(crate) fn register(base: usize, len: usize) -> Option<usize> {
    INSTALL.call_once(install);
    if INSTALL_FAILED.load(Ordering::Relaxed) {
        return None;
    }
    for (i, s) in TABLE.iter().enumerate() {
        if s.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            s.base.store(base, Ordering::Relaxed);
            s.len.store(len, Ordering::Relaxed);
            s.poisoned.store(false, Ordering::Relaxed);
            // Publishes base, len and the cleared flag to the handler.
            s.state.store(LIVE, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Before the mapping of `slot` is unmapped: takes it away from the handler (waiting out a
/// handler that is replacing it right now, a few microseconds at most).
pub(crate) fn retire(slot: usize) {
    let s = &TABLE[slot];
    loop {
        match s
            .state
            .compare_exchange(LIVE, DYING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return,
            Err(REMAP) => std::hint::spin_loop(),
            Err(_) => return,
        }
    }
}

/// After the mapping of `slot` was unmapped: the slot is free for another mapping.
pub(crate) fn release(slot: usize) {
    TABLE[slot].state.store(FREE, Ordering::Release);
}

/// Whether the mapping in `slot` was replaced by zero pages. One relaxed load of a global
/// counter when nothing was ever lost.
#[inline]
pub(crate) fn is_poisoned(slot: usize) -> bool {
    LOST.load(Ordering::Relaxed) != 0 && TABLE[slot].poisoned.load(Ordering::Acquire)
}

fn install() {
    // SAFETY: a zeroed `sigaction` is a valid value (SIG_DFL, empty mask, no flags).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    // Reading the current action: a null new action changes nothing.
    // SAFETY: `old` is a valid, writable sigaction.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
        INSTALL_FAILED.store(true, Ordering::Relaxed);
        return;
    }
    let _ = PREVIOUS.set(old);
    new.sa_sigaction = on_sigbus as *const () as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `new.sa_mask` is a valid sigset to initialize.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // The handler below only makes async-signal-safe calls and reads static atomics.
    // SAFETY: `new` is a fully initialized action whose handler has the SA_SIGINFO signature.
    if unsafe { libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) } != 0 {
        INSTALL_FAILED.store(true, Ordering::Relaxed);
    }
}

/// The `SIGBUS` handler. Only atomics, `mmap` and `sigaction` (plain system calls); no
/// allocation, no locks, no logging.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's value.
    let errno = unsafe { *libc::__errno_location() };
    // The kernel passes a valid siginfo to an SA_SIGINFO handler; a positive si_code means the
    // kernel raised it for a fault, and then si_addr is the faulting address.
    // SAFETY: `info` is checked for null and then only read.
    let fault = unsafe { info.as_ref() }
        .filter(|i| i.si_code > 0)
        // SAFETY: for a fault-generated SIGBUS the union holds the address field.
        .map(|i| unsafe { i.si_addr() } as usize);
    let ours = fault.is_some_and(replace_if_ours);
    if !ours {
        pass_on(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// If `addr` lies in a live guest mapping, replaces that mapping by zero pages and marks it
/// poisoned. True when the faulting access can be retried.
fn replace_if_ours(addr: usize) -> bool {
    for s in TABLE.iter() {
        let st = s.state.load(Ordering::Acquire);
        if st != LIVE && st != REMAP {
            continue;
        }
        let (base, len) = (
            s.base.load(Ordering::Relaxed),
            s.len.load(Ordering::Relaxed),
        );
        if addr < base || addr - base >= len {
            continue;
        }
        match s
            .state
            .compare_exchange(LIVE, REMAP, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            // Another thread is replacing this very mapping: retry the access (it faults
            // again until that thread is done, then succeeds).
            Err(REMAP) => return true,
            Err(_) => continue,
        }
        // The slot cannot change while we hold REMAP: check it is still the mapping we saw.
        let (base, len) = (
            s.base.load(Ordering::Relaxed),
            s.len.load(Ordering::Relaxed),
        );
        if addr < base || addr - base >= len {
            s.state.store(LIVE, Ordering::Release);
            continue;
        }
        // The mapping is alive (see the module doc: the faulting thread holds its table, and
        // its drop waits while we hold REMAP); MAP_FIXED replaces exactly its pages.
        // Nothing else lives in `[base, base + len)`, and every user reaches it through raw
        // copies, which now read zeros.
        // SAFETY: `[base, base + len)` is one whole live mapping of ours (see above).
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        let ok = p != libc::MAP_FAILED;
        if ok {
            s.poisoned.store(true, Ordering::Release);
            LOST.fetch_add(1, Ordering::Release);
        }
        s.state.store(LIVE, Ordering::Release);
        return ok;
    }
    false
}

/// Not ours: what would have happened without us.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.get().map(|p| (p.sa_sigaction, p.sa_flags));
    match prev {
        Some((h, flags)) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
            if flags & libc::SA_SIGINFO != 0 {
                type Handler3 = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
                // The previous action was installed with SA_SIGINFO; we pass it what we were
                // given.
                // SAFETY: with SA_SIGINFO, `h` is a handler of the three-argument signature.
                let f: Handler3 = unsafe { std::mem::transmute(h) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO, `h` is a one-argument handler.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
                f(sig);
            }
        }
        _ => {
            // Default action (ignoring a fault would only repeat it forever): on return the
            // faulting instruction runs again and the kernel kills the process with SIGBUS.
            // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: `dfl` is a valid action; sigaction is async-signal-safe.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
    }
}
