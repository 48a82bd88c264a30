//! Unix socket files: creating a listening socket at a path with a chosen mode and group and
//! no moment where anyone else can connect to it, replacing only a stale socket (never a
//! symlink, a regular file or a socket someone still listens on), and removing on shutdown only
//! the socket file we created.
//!
//! Threads: whoever creates or removes an endpoint (the daemon's control thread). No state.
//!
//! How the window is closed: the socket's inode mode is set to 0600 with `fchmod` on the
//! unbound socket, and Linux creates the file with that mode (masked by the umask) at `bind`,
//! so until the final mode is applied only our own user can connect (connecting needs write
//! permission on the socket file). The final group and mode are then applied through an
//! `O_PATH | O_NOFOLLOW` descriptor of the file we just created (checked to be a socket), so a
//! symlink put in its place is never followed.
use rustix::fs::{fstat, open, FileType, Mode, OFlags};
use rustix::net::{
    bind, listen, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Who may connect to a socket file: its permission bits and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Permission bits (e.g. 0o660). Only 0o777 bits are used.
    pub mode: u32,
    /// Group to give the file; `None` keeps the creator's group.
    pub gid: Option<u32>,
}

impl Default for Access {
    /// Owner and group may connect (0660), group unchanged.
    fn default() -> Access {
        Access {
            mode: 0o660,
            gid: None,
        }
    }
}

/// Identity of a file we created (device, inode and change time after we set its mode: an
/// inode number alone is reused at once), to remove it only if it is still ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

fn refuse(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// Makes `path` free for a new socket: nothing there is fine; a socket nobody listens on is
/// removed; anything else (a symlink, a regular file, a directory, a live socket) is refused
/// and left untouched.
pub fn clear_stale(path: &Path) -> io::Result<()> {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if md.file_type().is_symlink() {
        return Err(refuse(
            io::ErrorKind::AlreadyExists,
            format!("{} is a symlink; refusing to use it", path.display()),
        ));
    }
    if !md.file_type().is_socket() {
        return Err(refuse(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(refuse(
            io::ErrorKind::AddrInUse,
            format!("{} is in use by another listener", path.display()),
        ));
    }
    std::fs::remove_file(path)
}

/// Creates a listening unix socket at `path` (replacing only a stale socket) with `access`.
/// The listener is blocking.
pub fn bind_listener(path: &Path, access: Access) -> io::Result<(UnixListener, FileId)> {
    clear_stale(path)?;
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // The file bind creates takes this mode (minus the umask): owner only until `apply`.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
    let addr = SocketAddrUnix::new(path)?;
    // bind creates the file and fails (EADDRINUSE) if anything, even a symlink, is at the
    // path: it never follows one.
    bind(&fd, &addr)?;
    let l = UnixListener::from(fd);
    let id = match apply(path, access) {
        Ok(id) => id,
        Err(e) => {
            let _ = remove_if_ours(path, None);
            return Err(e);
        }
    };
    listen(&l, 128)?;
    Ok((l, id))
}

/// Gives the socket file at `path` its group and mode, without following a symlink; fails
/// if the file is not a socket. Returns its identity.
pub fn apply(path: &Path, access: Access) -> io::Result<FileId> {
    let f = open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&f)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(refuse(
            io::ErrorKind::InvalidInput,
            format!("{} is not a socket", path.display()),
        ));
    }
    // The descriptor's /proc link names exactly the inode we opened, whatever the path
    // holds by now.
    let via = format!("/proc/self/fd/{}", f.as_raw_fd());
    if let Some(gid) = access.gid {
        std::os::unix::fs::chown(&via, None, Some(gid)).map_err(|e| {
            refuse(
                e.kind(),
                format!("cannot give {} group {gid}: {e}", path.display()),
            )
        })?;
    }
    std::fs::set_permissions(&via, std::fs::Permissions::from_mode(access.mode & 0o777))
        .map_err(|e| refuse(e.kind(), format!("cannot chmod {}: {e}", path.display())))?;
    let st = fstat(&f)?;
    Ok(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
    })
}

/// The identity of the socket file at `path` as it is now (a socket handed over by another
/// process, to be removed later only if still that one). Fails if it is not a socket.
pub fn identity(path: &Path) -> io::Result<FileId> {
    let md = std::fs::symlink_metadata(path)?;
    if !md.file_type().is_socket() {
        return Err(refuse(
            io::ErrorKind::InvalidInput,
            format!("{} is not a socket", path.display()),
        ));
    }
    Ok(FileId {
        dev: md.dev(),
        ino: md.ino(),
        ctime: (md.ctime(), md.ctime_nsec()),
    })
}

/// Removes the socket file at `path` if it is a socket and (when `id` is given) still the one
/// we created; anything else is left alone.
pub fn remove_if_ours(path: &Path, id: Option<FileId>) -> bool {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let same = id.is_none_or(|id| {
        (id.dev, id.ino, id.ctime) == (md.dev(), md.ino(), (md.ctime(), md.ctime_nsec()))
    });
    if md.file_type().is_socket() && same {
        std::fs::remove_file(path).is_ok()
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn mode_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let (l, id) = bind_listener(&p, Access::default()).unwrap();
        let md = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o660);
        // A live socket is not replaced.
        let e = bind_listener(&p, Access::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(l);
        // A stale one is.
        let (_l2, id2) = bind_listener(
            &p,
            Access {
                mode: 0o600,
                gid: None,
            },
        )
        .unwrap();
        assert_eq!(
            std::fs::symlink_metadata(&p).unwrap().mode() & 0o7777,
            0o600
        );
        // The first identity is not ours any more: not removed.
        assert!(!remove_if_ours(&p, Some(id)));
        assert!(p.exists());
        assert!(remove_if_ours(&p, Some(id2)));
        assert!(!p.exists());

        // A symlink to a file and a regular file are refused and untouched.
        let target = dir.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("link.sock");
        symlink(&target, &link).unwrap();
        let e = bind_listener(&link, Access::default()).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(!remove_if_ours(&link, None));
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o644);
        let e = bind_listener(&target, Access::default()).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert!(!remove_if_ours(&target, None));
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // apply() never follows the symlink either.
        assert!(apply(&link, Access::default()).is_err());
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o644);
    }
}
