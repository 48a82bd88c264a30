//! Fuzz target: the skip check of XDP-marked packets (`dp::flow::SkipCheck`) against
//! extraction. Input: an edit count `n` (0-3), `n` (offset, value) byte edits, a truncation
//! byte, then a frame F. A flow is made from F's key with every bit a skip check can vouch for
//! in its mask; G is F with the edits applied and cut to the truncation length. Whenever the
//! check admits G (never reading past it), G's key must equal F's implied key on every such
//! bit, and the flow must cover it: a frame that passes the check cannot be sent where its
//! own key would not go.
#![no_main]
use dp::flow::{undetermined, Megaflow, SkipCheck, Tuple5};
use dp::Action;
use libfuzzer_sys::fuzz_target;
use wire::FlowKey;

fn not(m: &FlowKey) -> FlowKey {
    let mut o = FlowKey::ZERO;
    for i in 0..o.w.len() {
        o.w[i] = !m.w[i];
    }
    o
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 4);
    if rest.len() < 2 * n + 1 {
        return;
    }
    let (edits, rest) = rest.split_at(2 * n);
    let (cut, frame) = (rest[0], &rest[1..]);
    let key = wire::extract(frame, 5);
    let Some(t) = Tuple5::of(&key) else {
        return;
    };
    let det = not(&undetermined(t.proto));
    let flow = Megaflow::new(&key, &det, vec![Action::Output(1)].into());
    let Some(check) = SkipCheck::new(&flow, &t) else {
        return;
    };
    let mut g = frame.to_vec();
    for e in edits.chunks(2) {
        if let Some(b) = g.get_mut(usize::from(e[0])) {
            *b = e[1];
        }
    }
    if cut != 0xff {
        g.truncate(usize::from(cut));
    }
    for port in [5, 6] {
        if check.admits(&g, port) {
            assert_eq!(port, 5, "another port admitted");
            let k = wire::extract(&g, port);
            assert_eq!(k.masked(&det), t.implied_key(5).masked(&det), "{g:02x?}");
            assert!(flow.covers(&k));
        }
    }
});
