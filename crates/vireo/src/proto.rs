//! The control protocol between `vireoctl` (or any script) and `vireod`, over the unix socket
//! `RUN_DIR/vireod.ctl`. Documented for users in `docs/control-protocol.md`.
//!
//! One request per line, one response per line, both JSON objects:
//! `{"command": "add-br", "args": ["br0"]}` → `{"ok": true, "text": "...", "data": ...}` or
//! `{"ok": false, "error": "bridge br0 already exists"}`. A connection may carry many requests.
//!
//! Threads: the client functions run on the caller's thread; the daemon side lives in
//! `daemon::control`.
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Name of the control socket inside the run directory.
pub const CTL_SOCKET: &str = "vireod.ctl";
/// Longest request line the daemon accepts.
pub const MAX_REQUEST: usize = 1 << 20;

/// A request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Command name as typed on the `vireoctl` command line.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
}

/// A response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Whether the command succeeded.
    pub ok: bool,
    /// Human-readable answer (what `vireoctl` prints without `--json`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Machine-readable answer (what `vireoctl --json` prints).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
    /// One-line error naming what is wrong, when `ok` is false.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl Response {
    /// Success with text and data.
    pub fn ok(text: impl Into<String>, data: serde_json::Value) -> Response {
        Response {
            ok: true,
            text: text.into(),
            data,
            error: String::new(),
        }
    }

    /// Failure.
    pub fn err(error: impl Into<String>) -> Response {
        Response {
            ok: false,
            text: String::new(),
            data: serde_json::Value::Null,
            error: error.into(),
        }
    }
}

/// Sends one request to the daemon whose run directory is `run_dir` and waits for the answer.
pub fn call(run_dir: &Path, req: &Request, timeout: Duration) -> Result<Response, String> {
    let path = run_dir.join(CTL_SOCKET);
    let stream = UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach vireod at {}: {e}", path.display()))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("socket: {e}"))?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    (&stream)
        .write_all(&line)
        .map_err(|e| format!("sending to vireod: {e}"))?;
    let mut reader = BufReader::new(&stream);
    let mut answer = String::new();
    reader
        .read_line(&mut answer)
        .map_err(|e| format!("reading from vireod: {e}"))?;
    if answer.is_empty() {
        return Err("vireod closed the connection without answering".into());
    }
    // Say we are done and wait for vireod to close its end: when this returns, the daemon
    // holds no socket of this request any more (scripts and tests that count vireod's fds
    // see a settled set). Best effort: an error here changes nothing about the answer.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(timeout.min(Duration::from_secs(2))));
    let _ = std::io::copy(&mut reader, &mut std::io::sink());
    serde_json::from_str(&answer).map_err(|e| format!("bad answer from vireod: {e}"))
}

/// The run directory: the flag if given, else `$VIREO_RUN_DIR`, else `/run/vireo` for root,
/// else `./run`.
pub fn default_run_dir(flag: Option<&Path>) -> std::path::PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("VIREO_RUN_DIR") {
        if !p.is_empty() {
            return p.into();
        }
    }
    if nix::unistd::Uid::effective().is_root() {
        "/run/vireo".into()
    } else {
        "./run".into()
    }
}
