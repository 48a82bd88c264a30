//! Active OpenFlow endpoint: keeps one connection to a controller (`tcp:IP:PORT` or
//! `unix:PATH`), reconnecting with exponential backoff (initial → doubled per failure →
//! capped, reset after a session that negotiated). Runs on its own thread (`of-connect`),
//! which also serves as the connection's reader thread. Dropping the [`Connector`] closes the
//! connection and waits for the thread at most [`JOIN_WAIT`]: one still inside a TCP connect
//! (up to `connect_timeout`) is left to see the stop flag and end by itself, so the caller
//! (the daemon's control thread, holding its lock) never waits on an unresponsive controller.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::session;
use super::stream::{Stream, Target};
use super::Shared;

/// How long dropping a [`Connector`] waits for its thread.
pub const JOIN_WAIT: Duration = Duration::from_millis(200);

#[derive(Default)]
struct Ctl {
    stop: bool,
    /// The live stream, so that drop can close it.
    current: Option<Stream>,
    attempts: u64,
}

/// Keeps reconnecting to one controller until dropped.
pub struct Connector {
    target: Target,
    ctl: Arc<(Mutex<Ctl>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

type CtlRef = Arc<(Mutex<Ctl>, Condvar)>;

fn lock(ctl: &CtlRef) -> std::sync::MutexGuard<'_, Ctl> {
    ctl.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connector {
    pub(crate) fn start(shared: Arc<Shared>, target: Target) -> Connector {
        let ctl: CtlRef = Arc::new((Mutex::new(Ctl::default()), Condvar::new()));
        let (c2, t2) = (ctl.clone(), target.clone());
        let thread = thread::Builder::new()
            .name("of-connect".into())
            .spawn(move || connect_loop(shared, t2, c2))
            .ok();
        Connector {
            target,
            ctl,
            thread,
        }
    }

    /// The controller address.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Connection attempts made so far.
    pub fn attempts(&self) -> u64 {
        lock(&self.ctl).attempts
    }
}

/// Sleeps `d` unless stopped first; returns whether to go on.
fn pause(ctl: &CtlRef, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    let mut g = lock(ctl);
    while !g.stop {
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        g = ctl
            .1
            .wait_timeout(g, deadline - now)
            .map_or_else(|p| p.into_inner().0, |r| r.0);
    }
    false
}

fn connect_loop(shared: Arc<Shared>, target: Target, ctl: CtlRef) {
    let cfg = shared.config.clone();
    let mut backoff = cfg.backoff_initial;
    loop {
        if lock(&ctl).stop {
            return;
        }
        lock(&ctl).attempts += 1;
        match Stream::connect(&target, cfg.connect_timeout) {
            Ok(stream) => {
                info!(?target, "connected to OpenFlow controller");
                {
                    let mut g = lock(&ctl);
                    if g.stop {
                        return;
                    }
                    g.current = stream.try_clone().ok();
                }
                let negotiated = session::run(shared.clone(), stream);
                lock(&ctl).current = None;
                if negotiated {
                    backoff = cfg.backoff_initial;
                }
            }
            Err(e) => debug!(?target, error = %e, "OpenFlow connect failed"),
        }
        if !pause(&ctl, backoff) {
            return;
        }
        backoff = (backoff * 2).min(cfg.backoff_max);
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        {
            let mut g = lock(&self.ctl);
            g.stop = true;
            if let Some(s) = &g.current {
                s.close();
            }
        }
        self.ctl.1.notify_all();
        if let Some(t) = self.thread.take() {
            let end = Instant::now() + JOIN_WAIT;
            while !t.is_finished() && Instant::now() < end {
                thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                debug!("OpenFlow connector still connecting; it ends on its own");
            }
        }
    }
}
