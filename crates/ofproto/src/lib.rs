//! ofproto (being written)
