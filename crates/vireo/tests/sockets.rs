//! Sockets only for whom they are meant: the run directory is 0750, `vireod.ctl` and `BR.mgmt`
//! 0660 with the group of `--socket-group`, vhost-user sockets 0660 or their port's
//! `socket-mode`/`socket-group` (kept across a restart); a user outside the group cannot
//! connect and one inside can (checked as user `nobody` with `setpriv`); a symlink or a
//! regular file where a socket should go is refused and left untouched.
mod common;

use common::Daemon;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// `daemon` is a system group on every Debian system.
const GROUP: &str = "daemon";

fn gid_of(name: &str) -> u32 {
    nix::unistd::Group::from_name(name)
        .unwrap()
        .unwrap_or_else(|| panic!("group {name} missing"))
        .gid
        .as_raw()
}

fn mode_gid(p: &Path) -> (u32, u32) {
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (md.mode() & 0o7777, md.gid())
}

/// Runs vireoctl as user nobody with `groups` as its supplementary groups.
fn ctl_as_nobody(run: &Path, groups: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup"])
        .arg(if groups.is_empty() {
            "--clear-groups".to_string()
        } else {
            format!("--groups={groups}")
        })
        .arg(common::VIREOCTL)
        .arg("--run-dir")
        .arg(run)
        .args(args)
        .output()
        .expect("run setpriv");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

#[test]
fn modes_groups_and_who_can_connect() {
    let gid = gid_of(GROUP);
    let dir = tempfile::tempdir().unwrap();
    // Let other users walk to the run directory (tempdir makes 0700).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--socket-group", GROUP]);
    assert_eq!(mode_gid(&run), (0o750, gid));
    assert_eq!(mode_gid(&run.join("vireod.ctl")), (0o660, gid));
    d.ok(&["add-br", "br0", "internal=false"]);
    assert_eq!(mode_gid(&run.join("br0.mgmt")), (0o660, gid));
    // Default vhost-user socket: 0660, the daemon's own group.
    d.ok(&["add-port", "br0", "v0", "type=vhost-user"]);
    let own_gid = nix::unistd::getegid().as_raw();
    assert_eq!(mode_gid(&run.join("v0.sock")), (0o660, own_gid));
    // Mode and group per port.
    d.ok(&[
        "add-port",
        "br0",
        "v1",
        "type=vhost-user",
        &format!("socket-group={GROUP}"),
        "socket-mode=0640",
    ]);
    assert_eq!(mode_gid(&run.join("v1.sock")), (0o640, gid));
    d.ok(&["set-port", "v1", "socket-mode=0600"]);
    assert_eq!(mode_gid(&run.join("v1.sock")), (0o600, gid));

    // Bad values: one line, exit 1, nothing changed.
    for (opt, want) in [
        ("socket-mode=0999", "octal mode"),
        ("socket-mode=rw", "octal mode"),
        ("socket-group=no-such-group-vireo", "no group named"),
    ] {
        let o = d.ctl(&["add-port", "br0", "bad", "type=vhost-user", opt]);
        assert_eq!(o.code, 1, "{opt}");
        assert!(o.stderr.contains(want), "{opt}: {}", o.stderr);
        assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
        assert!(!run.join("bad.sock").exists());
    }
    let o = d.ctl(&[
        "add-port",
        "br0",
        "c1",
        "type=vhost-user-client",
        "path=/nonexistent/x.sock",
        "socket-mode=0660",
    ]);
    assert_eq!(o.code, 1, "client ports do not own their socket");

    // Who can connect.
    if testkit::require_peer("setpriv", "util-linux") {
        let (ok, out) = ctl_as_nobody(&run, "", &["list-br"]);
        assert!(!ok, "nobody outside the group reached the daemon: {out}");
        assert!(out.to_lowercase().contains("permission denied"), "{out}");
        let (ok, out) = ctl_as_nobody(&run, GROUP, &["list-br"]);
        assert!(
            ok && out.contains("br0"),
            "a member of {GROUP} could not: {out}"
        );
    }

    // Persisted: after a restart the sockets come back with the same modes and groups.
    assert_eq!(d.stop(), Some(0));
    assert!(!run.join("v1.sock").exists() && !run.join("vireod.ctl").exists());
    let d = Daemon::start_with(&run, &["--socket-group", GROUP]);
    assert_eq!(mode_gid(&run.join("v1.sock")), (0o600, gid));
    assert_eq!(mode_gid(&run.join("v0.sock")), (0o660, own_gid));
    assert_eq!(mode_gid(&run.join("br0.mgmt")), (0o660, gid));
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn symlinks_and_files_at_socket_paths_are_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    let target = dir.path().join("precious");
    std::fs::write(&target, b"keep me").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let untouched = |what: &str| {
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me", "{what}");
        assert_eq!(mode_gid(&target).0, 0o644, "{what}");
    };

    // A symlink where a port's default socket goes.
    let link = run.join("evil.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = d.ctl(&["add-port", "br0", "evil", "type=vhost-user"]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("symlink"), "{}", o.stderr);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    untouched("symlink at a vhost-user path");
    // A regular file at a port's path=.
    let o = d.ctl(&[
        "add-port",
        "br0",
        "file",
        "type=vhost-user",
        &format!("path={}", target.display()),
    ]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("not a socket"), "{}", o.stderr);
    untouched("regular file at path=");
    // A symlink where a bridge's BR.mgmt goes.
    std::os::unix::fs::symlink(&target, run.join("br1.mgmt")).unwrap();
    let o = d.ctl(&["add-br", "br1", "internal=false"]);
    assert_eq!(o.code, 1, "{}", o.stdout);
    untouched("symlink at BR.mgmt");
    assert!(!d.ok(&["list-br"]).contains("br1"));
    assert_eq!(d.stop(), Some(0));
    // The symlinks are still there after the daemon stopped.
    assert!(link.is_symlink() && run.join("br1.mgmt").is_symlink());
    untouched("after stop");

    // A symlink at vireod.ctl: the daemon refuses to start.
    let run2 = dir.path().join("run2");
    std::fs::create_dir(&run2).unwrap();
    std::os::unix::fs::symlink(&target, run2.join("vireod.ctl")).unwrap();
    let out = Command::new(common::VIREOD)
        .arg("--run-dir")
        .arg(&run2)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symlink"), "{err}");
    untouched("symlink at vireod.ctl");
}
