//! [`Hint`]: the connection one `ct` pass found for a packet, carried by the datapath to the
//! same packet's next `ct` pass (after `ct(table=N)` recirculated it), so that pass neither
//! hashes the packet's key nor probes the table again.
//!
//! Threads: plain data owned by one PMD thread (its per-packet slots); filled and read by
//! [`crate::Conntrack::execute_hinted`] on that thread.

use std::sync::Arc;

use crate::table::Conn;

/// The connection a `ct` pass found for (or committed from) a packet, if any.
///
/// The next pass parses the frame again and uses the connection only if the packet's key (its
/// zone and tuple) is one of the connection's two keys and the connection is alive: exactly
/// when the table lookup would have returned it. So a hint never changes a verdict, whatever
/// happened to the frame or the table in between (a rewrite, NAT, another zone, a flush, an
/// expiry); it only skips the hash and the probe. The datapath still clears it when an action
/// rewrites the frame, which saves the comparison.
#[derive(Default)]
pub struct Hint(pub(crate) Option<Arc<Conn>>);

impl Hint {
    /// True if it holds a connection.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Forgets it.
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

impl std::fmt::Debug for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Hint(none)"),
            Some(c) => write!(f, "Hint(zone {}, {:?})", c.zone, c.orig),
        }
    }
}
