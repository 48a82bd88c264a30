//! Thin wrappers over the system calls the crate needs: `mmap`/`munmap` (owned mappings),
//! `bpf()`, socket options, interface index and MTU. Called from the control thread (set-up,
//! tear-down) and from PMDs (the `MSG_DONTWAIT` kicks in `socket.rs`).
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// The mapping is plain memory owned by this value; access to its bytes is governed by the
// ring and frame ownership rules of the types that hold it (see the crate's SAFETY argument),
// not by which thread holds the `Mmap`.
// SAFETY: no thread-local state is tied to a mapping.
unsafe impl Send for Mmap {}
// SAFETY: as above; `&Mmap` only hands out the base pointer and length.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Private anonymous memory of `len` bytes, zero-filled (tests that play the kernel).
    #[cfg(test)]
    pub(crate) fn anon(len: usize) -> io::Result<Mmap> {
        // A fresh anonymous mapping at an address the kernel picks.
        // SAFETY: no existing memory is affected (no MAP_FIXED).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Self::from_raw(p, len)
    }

    /// `len` bytes of a new memfd (the UMEM), mapped shared and zero-filled: another process
    /// given the memfd (an upgrade's new vireod) maps the very same frames.
    pub(crate) fn memfd(len: usize) -> io::Result<(OwnedFd, Mmap)> {
        let name = c"vireo-umem";
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the fd is new and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain ftruncate(2) on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let m = Mmap::shared(fd.as_raw_fd(), len, 0)?;
        Ok((fd, m))
    }

    /// A shared mapping of `len` bytes of `fd` at `offset` (an AF_XDP ring, a UMEM memfd).
    pub(crate) fn shared(fd: RawFd, len: usize, offset: u64) -> io::Result<Mmap> {
        // Maps kernel ring memory of the socket `fd` at an address the kernel picks.
        // SAFETY: no existing memory is affected (no MAP_FIXED).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset as libc::off_t,
            )
        };
        Self::from_raw(p, len)
    }

    fn from_raw(p: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Mmap { ptr, len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // Every pointer derived from the mapping lives in the struct that owns this value.
        // SAFETY: `ptr`/`len` are exactly what mmap returned and nothing else unmaps them.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A `bpf()` attribute block: the union is given to the kernel as 128 zeroed bytes with the
/// fields of one command written at their offsets (from `linux/bpf.h`).
pub(crate) struct Attr([u8; 128]);

impl Attr {
    pub(crate) fn new() -> Attr {
        Attr([0; 128])
    }

    pub(crate) fn u32(mut self, off: usize, v: u32) -> Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    pub(crate) fn u64(mut self, off: usize, v: u64) -> Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    pub(crate) fn bytes(mut self, off: usize, v: &[u8]) -> Attr {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }

    pub(crate) fn get_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.0[off..off + 4]);
        u32::from_ne_bytes(b)
    }
}

/// `bpf(cmd, attr)`: the non-negative return value (an fd for commands that make one).
pub(crate) fn bpf(cmd: u32, attr: &mut Attr) -> io::Result<i32> {
    // Every pointer field in `attr` was set by the caller to a buffer that outlives the call.
    // SAFETY: `attr` is a 128-byte buffer that lives across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr.0.as_mut_ptr(),
            attr.0.len() as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// `bpf()` for a command that returns a new fd.
pub(crate) fn bpf_fd(cmd: u32, attr: &mut Attr) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new AF_XDP socket.
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is new and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, SOL_XDP, opt, &v)`.
pub(crate) fn set_xdp_opt<T>(fd: &OwnedFd, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live `T` of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `getsockopt(fd, SOL_XDP, opt)` into a zeroed `T`; fails if the kernel fills fewer bytes.
pub(crate) fn get_xdp_opt<T: Copy>(fd: RawFd, opt: i32, zero: T) -> io::Result<T> {
    let mut v = zero;
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    let p = (&mut v as *mut T).cast();
    // SAFETY: `p` is a live `T` and `len` its size; the kernel writes at most `len` bytes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, p, &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<T>() {
        return Err(io::Error::other(format!(
            "kernel returned {len} bytes for option {opt}, expected {}",
            std::mem::size_of::<T>()
        )));
    }
    Ok(v)
}

/// Binds an AF_XDP socket to `(ifindex, queue)` with `flags`.
pub(crate) fn bind_xdp(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `sa` is a live sockaddr_xdp and the length is its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Binds a second AF_XDP socket to `(ifindex, queue)` sharing the UMEM and buffer pool of
/// `primary_fd` (already bound to the same queue): `XDP_SHARED_UMEM`, no other flag (the
/// kernel takes the copy mode and need-wakeup from the pool).
pub(crate) fn bind_xdp_shared(
    fd: &OwnedFd,
    ifindex: u32,
    queue: u32,
    primary_fd: RawFd,
) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: libc::XDP_SHARED_UMEM,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: primary_fd as u32,
    };
    // SAFETY: `sa` is a live sockaddr_xdp and the length is its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Kicks the kernel to process the tx ring (`sendto(fd, NULL, 0, MSG_DONTWAIT)`).
pub(crate) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Kicks the kernel to refill from the fill ring (`recvfrom(fd, NULL, 0, MSG_DONTWAIT)`).
pub(crate) fn kick_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length receive with no buffer and no address.
    let r = unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The index of interface `name` (in this process's network namespace).
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// The MTU of interface `name` (`SIOCGIFMTU`).
pub(crate) fn mtu(name: &str) -> io::Result<u32> {
    ifreq_get(name, libc::SIOCGIFMTU, |r| {
        // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
        let m = unsafe { r.ifr_ifru.ifru_mtu };
        m.max(0) as u32
    })
}

/// The flags of interface `name` (`SIOCGIFFLAGS`).
pub(crate) fn if_flags(name: &str) -> io::Result<u32> {
    ifreq_get(name, libc::SIOCGIFFLAGS, |r| {
        // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
        let f = unsafe { r.ifr_ifru.ifru_flags };
        u32::from(f as u16)
    })
}

/// Runs an `ifreq` "get" ioctl on interface `name` and reads the answer with `read`.
fn ifreq_get<T>(
    name: &str,
    req_no: libc::c_ulong,
    read: impl FnOnce(&libc::ifreq) -> T,
) -> io::Result<T> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: plain socket(2) call; the fd is wrapped at once.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` is a new fd owned by nobody else.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq with a NUL-terminated name (checked length above).
    let r = unsafe { libc::ioctl(s.as_raw_fd(), req_no, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(read(&req))
}

/// The size of a memfd, or an error if `fd` is not one (`F_GET_SEALS` answers only for
/// memfds and other shmem files).
pub(crate) fn memfd_len(fd: RawFd) -> io::Result<u64> {
    // SAFETY: fcntl(2) with an int-only command.
    if unsafe { libc::fcntl(fd, libc::F_GET_SEALS) } < 0 {
        return Err(io::Error::other("not a memfd"));
    }
    // SAFETY: stat is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// The address family of socket `fd` (`SO_DOMAIN`).
pub(crate) fn socket_domain(fd: RawFd) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` is a live int and `len` its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}
