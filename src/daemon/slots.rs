//! This node's cap on runs at once (`[daemon] max_running`, guarantee 11):
//! a slot is taken before a claim is sent and held until the run is over
//! and released, so the node never runs more than the cap; at the cap it
//! claims nothing and the next node in line takes the occurrence.
//!
//! Failure model: in memory only (a restart starts with none running: the
//! runs of the old process are gone with it). A reload changes the cap for
//! the claims after it; runs in progress keep their slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The runs in progress (and claims in flight) and the cap.
#[derive(Debug, Default)]
pub struct Slots {
    taken: Arc<AtomicUsize>,
    /// 0: no cap.
    cap: AtomicUsize,
}

/// One taken slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    taken: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.taken.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slots {
    /// Sets the cap (`None`: no cap), at start and at each reload.
    pub fn set_cap(&self, cap: Option<u32>) {
        let cap = cap.map_or(0, |cap| usize::try_from(cap).unwrap_or(usize::MAX));
        self.cap.store(cap, Ordering::SeqCst);
    }

    /// The cap, if any.
    pub fn cap(&self) -> Option<usize> {
        Some(self.cap.load(Ordering::SeqCst)).filter(|cap| *cap > 0)
    }

    /// Takes a slot, or `None` at the cap.
    pub fn take(&self) -> Option<Slot> {
        let cap = self.cap();
        self.taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                cap.is_none_or(|cap| taken < cap).then_some(taken + 1)
            })
            .ok()
            .map(|_| Slot {
                taken: Arc::clone(&self.taken),
            })
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_no_slot_and_a_dropped_slot_frees_one() {
        let slots = Slots::default();
        let many: Vec<Slot> = (0..100).filter_map(|_| slots.take()).collect();
        assert_eq!(many.len(), 100, "no cap");
        drop(many);
        slots.set_cap(Some(2));
        let (a, b) = (slots.take(), slots.take());
        assert!(a.is_some() && b.is_some());
        assert!(slots.take().is_none(), "at the cap");
        assert_eq!(slots.taken(), 2);
        drop(a);
        assert!(slots.take().is_some(), "one given back");
        slots.set_cap(None);
        assert!(slots.take().is_some(), "cap lifted by a reload");
    }
}
