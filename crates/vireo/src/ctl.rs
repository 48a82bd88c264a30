//! `vireoctl`: parses the command line, sends one request, prints the answer.
//!
//! Depends only on the control protocol ([`crate::proto`]); every command's meaning and
//! validation lives in the daemon, so a script speaking the protocol gets the same behaviour.
use crate::proto::{self, Request};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const USAGE: &str = "usage: vireoctl [--run-dir DIR] [--json] [--timeout SECS] COMMAND [ARG...]

bridges and ports:
  add-br BR [internal=false] | del-br BR | list-br
  add-port BR PORT [type=T] [key=value ...] | del-port BR PORT | list-ports BR
  set-port PORT key=value ...
  show | port-stats [PORT]
datapath:
  pmd-stats-show | pmd-stats-clear | pmd-rxq-show | dump-megaflows | dump-macs BR
  set-pmd-cores LIST | set-pmd-rxq-assign roundrobin|cycles|group | set-pmd-auto-lb off|PCT
  set-mac-numa MAC NODE | del-mac-numa MAC | dump-mac-numa   (af-xdp xdp-steering=on)
conntrack (one table per datapath; zones tell bridges and tenants apart):
  dump-conntrack [zone=N] | flush-conntrack [zone=N] [TUPLE] | ct-stats
  set-ct-limit [zone=N] LIMIT
OpenFlow:
  add-flow BR FLOW | add-flows BR FILE | mod-flows [--strict] BR FLOW
  del-flows [--strict] BR [MATCH] | dump-flows BR [MATCH]
  add-meter BR SPEC | mod-meter BR SPEC | del-meter BR [meter=N] | dump-meters BR
  set-controller BR TARGET... | del-controller BR | set-fail-mode BR standalone|secure
  set-bridge BR protocols=OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15
tunnel underlay (native tunneling; routes and neighbours are not persisted):
  route/add PREFIX DEV [GW] | route/del PREFIX | route/show   (DEV: an internal port;
      PREFIX IPv4 or IPv6, e.g. 192.0.2.0/24 or 2001:db8::/64; GW of the same family)
  tnl/neigh/show | tnl/neigh/flush   (ARP and ND neighbours, how each was learned, counters)
daemon:
  upgrade [--binary PATH]   replace vireod with no outage (default: the binary it started from)
testing (dummy ports):
  inject PORT HEX | capture PORT
  version";

/// What the process should print and exit with.
pub struct Outcome {
    /// Exit status.
    pub code: i32,
    /// Text for stdout.
    pub stdout: String,
    /// Text for stderr.
    pub stderr: String,
}

fn fail(msg: impl Into<String>) -> Outcome {
    Outcome {
        code: 1,
        stdout: String::new(),
        stderr: format!("vireoctl: {}\n", msg.into()),
    }
}

/// Runs vireoctl with `args` (without the program name).
pub fn run(args: &[String]) -> Outcome {
    let mut run_dir: Option<PathBuf> = None;
    let mut json = false;
    let mut timeout = Duration::from_secs(30);
    let mut i = 0;
    while i < args.len() && args[i].starts_with("--") {
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (args[i].as_str(), None),
        };
        let mut value = || -> Result<String, Outcome> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| fail(format!("{flag} needs a value")))
        };
        match flag {
            "--json" => json = true,
            "--help" => {
                return Outcome {
                    code: 0,
                    stdout: format!("{USAGE}\n"),
                    stderr: String::new(),
                }
            }
            "--run-dir" => match value() {
                Ok(v) => run_dir = Some(v.into()),
                Err(o) => return o,
            },
            "--timeout" => match value().map(|v| v.parse::<u64>()) {
                Ok(Ok(s)) if s > 0 => timeout = Duration::from_secs(s),
                Ok(_) => return fail("--timeout needs a positive number of seconds"),
                Err(o) => return o,
            },
            other => return fail(format!("unknown option {other} (see --help)")),
        }
        i += 1;
    }
    let Some(command) = args.get(i) else {
        return fail("no command given (see --help)");
    };
    let mut cmd_args: Vec<String> = args[i + 1..].to_vec();
    if command == "add-flows" && cmd_args.len() == 2 {
        // The file is read here so the daemon needs no access to the caller's files.
        match read_flow_file(&cmd_args[1]) {
            Ok(text) => cmd_args[1] = text,
            Err(e) => return fail(e),
        }
        cmd_args.insert(1, "--inline".into());
    }
    let run_dir = proto::default_run_dir(run_dir.as_deref());
    let req = Request {
        command: command.clone(),
        args: cmd_args,
    };
    match proto::call(&run_dir, &req, timeout) {
        Err(e) => fail(e),
        Ok(resp) if !resp.ok => fail(resp.error),
        Ok(resp) => {
            let mut stdout = if json {
                serde_json::to_string_pretty(&resp.data).unwrap_or_default() + "\n"
            } else {
                resp.text
            };
            if command == "version" && !json {
                stdout = format!("vireoctl {}\n{stdout}", env!("CARGO_PKG_VERSION"));
            }
            if !stdout.is_empty() && !stdout.ends_with('\n') {
                stdout.push('\n');
            }
            Outcome {
                code: 0,
                stdout,
                stderr: String::new(),
            }
        }
    }
}

fn read_flow_file(path: &str) -> Result<String, String> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("reading flows from stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read flow file {path}: {e}"))
}

/// Entry point for the binary.
pub fn main() -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = run(&args);
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    std::process::exit(out.code)
}
