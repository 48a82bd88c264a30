//! Revalidation of the datapath's megaflows after the pipeline changed: per flow (by
//! dependency tag, or by re-translating each megaflow off the PMDs) or, for tests and tools, a
//! full flush. See `docs/architecture.md`, *Revalidation*.
//!
//! Threads: control threads, under the datapath's control mutex; each PMD's registry lock is
//! held only to snapshot it, and the PMD's mailbox lock only to post to it.
use super::Datapath;
use crate::config::DpError;
use crate::flow::Megaflow;
use crate::worker::Revalidation;
use std::sync::atomic::Ordering::SeqCst;

impl Datapath {
    /// Full flush: returns once every PMD has dropped all its cached decisions, so no packet
    /// follows an old decision afterwards. [`Datapath::revalidate_tags`] and
    /// [`Datapath::revalidate_all`] remove only what a change affects. Errors are logged; see
    /// [`Datapath::try_revalidate`].
    pub fn revalidate(&self) {
        if let Err(e) = self.try_revalidate() {
            tracing::error!(%e, "revalidate");
        }
    }

    /// [`Datapath::revalidate`] with the error returned. Must not be called from an upcall,
    /// nor while holding a lock that [`crate::Upcall::upcall`] takes (the PMD would never answer).
    pub fn try_revalidate(&self) -> Result<(), DpError> {
        let ctl = self.inner.control()?;
        self.inner.sync.reval.fetch_add(1, SeqCst);
        self.inner
            .bump_and_wait_filtered(&ctl.pmds, self.inner.tuning.ack_timeout, true)
    }

    /// Per-flow revalidation after learned state changed: removes, on every PMD, only the
    /// megaflows whose dependencies include one of `changed` (tags as the pipeline names them
    /// in [`crate::UpcallResult::deps`]), plus flows installed during the scan that were
    /// translated before pipeline version `version`. Returns once every PMD holding decisions
    /// has done it; the result is how many megaflows the scan found stale.
    pub fn revalidate_tags(&self, version: u64, changed: &[u64]) -> Result<usize, DpError> {
        let mut changed = changed.to_vec();
        changed.sort_unstable();
        changed.dedup();
        self.revalidate_where(version, &|f| f.deps.touches(&changed))
    }

    /// Per-flow revalidation after rules, groups or ports changed: re-translates every
    /// megaflow on this (control) thread with [`crate::Upcall::still_valid`] and removes only
    /// those whose translation changed. Same guarantee as [`Datapath::revalidate_tags`].
    pub fn revalidate_all(&self, version: u64) -> Result<usize, DpError> {
        let up = self.inner.upcall.clone();
        self.revalidate_flows(version, &|f| !up.still_valid(f))
    }

    /// Per-flow revalidation by a predicate: removes the megaflows `stale` names (judged on
    /// this thread, outside every PMD lock), plus, as above, flows installed during the scan
    /// that were translated before `version`. What the pipeline calls after rule changes it
    /// can narrow down (`ofproto::Pipeline::revalidate_datapath`).
    pub fn revalidate_flows(
        &self,
        version: u64,
        stale: &dyn Fn(&crate::FlowRef<'_>) -> bool,
    ) -> Result<usize, DpError> {
        self.revalidate_where(version, &|f| {
            stale(&crate::FlowRef {
                key: &f.key,
                mask: &f.mask,
                actions: &f.actions,
                deps: &f.deps,
            })
        })
    }

    fn revalidate_where(
        &self,
        version: u64,
        stale: &dyn Fn(&Megaflow) -> bool,
    ) -> Result<usize, DpError> {
        let ctl = self.inner.control()?;
        let mut found = 0;
        let mut posted = Vec::with_capacity(ctl.pmds.len());
        for h in &ctl.pmds {
            // Read before the snapshot: if no upcall is under way now (after the change), every
            // flow translated before the change is already in the registry the snapshot reads.
            let busy = h.shared.activity.in_upcall.load(SeqCst);
            let (since_epoch, flows) = {
                let mut r = h.shared.registry.lock().unwrap_or_else(|e| e.into_inner());
                r.snapshot()
            };
            // Judged outside the registry lock: the PMD may install flows meanwhile.
            let kills: Vec<_> = flows.into_iter().filter(|(_, f)| stale(f)).collect();
            found += kills.len();
            // Nothing stale and no upcall was under way: every flow this PMD installs from
            // here on was translated after the change; nothing to do, nothing to wait for.
            let idle = kills.is_empty() && !busy;
            posted.push(!idle);
            if !idle {
                h.shared.post_revalidation(Revalidation {
                    kills,
                    since_epoch,
                    version,
                });
            }
        }
        if posted.iter().any(|&p| p) {
            let pmds = &ctl.pmds;
            self.inner
                .bump_and_wait_for(pmds, self.inner.tuning.ack_timeout, |h| {
                    let i = pmds.iter().position(|x| std::ptr::eq(x, h));
                    i.is_some_and(|i| posted[i]) && h.shared.activity.may_hold_decisions()
                })?;
        }
        Ok(found)
    }
}

impl crate::Revalidate for Datapath {
    type Error = DpError;
    fn revalidate_tags(&self, version: u64, changed: &[u64]) -> Result<usize, DpError> {
        Datapath::revalidate_tags(self, version, changed)
    }
    fn revalidate_all(&self, version: u64) -> Result<usize, DpError> {
        Datapath::revalidate_all(self, version)
    }
    fn revalidate_where(
        &self,
        version: u64,
        stale: &dyn Fn(&crate::FlowRef<'_>) -> bool,
    ) -> Result<usize, DpError> {
        self.revalidate_flows(version, stale)
    }
}
