//! The control server: accepts connections on `RUN_DIR/vireod.ctl`, reads one JSON request per
//! line, runs it on the [`Switch`] and writes one JSON response per line.
//!
//! Threads: the accept loop runs on the daemon's main thread; each connection gets a thread of
//! its own that takes the `Switch` mutex for one command at a time. Lock order: `Switch` only.
use super::switch::Switch;
use crate::proto::{Request, Response, MAX_REQUEST};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Serves until `stop` is set (the signal thread sets it and connects once to wake us).
pub fn serve(listener: UnixListener, switch: Arc<Mutex<Switch>>, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match conn {
            Ok(stream) => {
                let sw = switch.clone();
                let spawned = std::thread::Builder::new()
                    .name("ctl-conn".into())
                    .spawn(move || handle(stream, sw));
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start a control connection thread");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn handle(stream: UnixStream, switch: Arc<Mutex<Switch>>) {
    // An idle client is dropped after a while so threads don't pile up.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let mut reader = BufReader::new(&stream).take(MAX_REQUEST as u64 + 1);
    let mut line = String::new();
    loop {
        line.clear();
        reader.set_limit(MAX_REQUEST as u64 + 1);
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let resp = if line.len() > MAX_REQUEST {
            Response::err(format!("request longer than {MAX_REQUEST} bytes"))
        } else {
            match serde_json::from_str::<Request>(&line) {
                Ok(req) => {
                    let mut sw = switch.lock().unwrap_or_else(|e| e.into_inner());
                    sw.execute(&req.command, &req.args)
                }
                Err(e) => Response::err(format!("malformed request: {e}")),
            }
        };
        let mut out = serde_json::to_vec(&resp).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        out.push(b'\n');
        if (&stream).write_all(&out).is_err() || line.len() > MAX_REQUEST {
            return;
        }
    }
}
