//! Bounds on concurrent `WatchNotification` streams: at most
//! `limits.max_watches_per_caller` per caller and `limits.max_watches` in
//! all, RESOURCE_EXHAUSTED beyond. A stream holds its slot and gives it
//! back when it ends, finished or abandoned by its client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

/// The slots. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WatchSlots {
    counts: Arc<Mutex<Counts>>,
    per_caller: usize,
    total: usize,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_caller: HashMap<String, usize>,
}

/// One stream's slot, given back on drop.
#[derive(Debug)]
pub struct WatchSlot {
    slots: WatchSlots,
    caller: String,
}

impl WatchSlots {
    pub fn new(per_caller: usize, total: usize) -> Self {
        Self {
            counts: Arc::default(),
            per_caller,
            total,
        }
    }

    /// A slot for `caller`'s new stream, or why not.
    pub fn take(&self, caller: &str) -> Result<WatchSlot, Status> {
        let mut counts = self.counts.lock().expect("watch slots lock");
        if counts.total >= self.total {
            return Err(Status::resource_exhausted(format!(
                "{} watch streams open, the most this API serves (limits.max_watches): retry later",
                counts.total
            )));
        }
        let mine = counts.by_caller.entry(caller.to_owned()).or_default();
        if *mine >= self.per_caller {
            return Err(Status::resource_exhausted(format!(
                "{caller} has {mine} watch streams open, the most one caller may (limits.max_watches_per_caller)"
            )));
        }
        *mine += 1;
        counts.total += 1;
        Ok(WatchSlot {
            slots: self.clone(),
            caller: caller.to_owned(),
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.counts.lock().expect("watch slots lock").total
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut counts = self.slots.counts.lock().expect("watch slots lock");
        counts.total -= 1;
        if let Some(mine) = counts.by_caller.get_mut(&self.caller) {
            *mine -= 1;
            if *mine == 0 {
                counts.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_per_caller_and_in_all_and_come_back() {
        let slots = WatchSlots::new(2, 3);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert_eq!(
            slots.take("a").unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
        let b1 = slots.take("b").unwrap();
        let refused = slots.take("c").unwrap_err();
        assert!(
            refused.message().contains("limits.max_watches"),
            "{refused:?}"
        );
        drop(a1);
        drop(b1);
        assert_eq!(slots.open(), 1);
        assert!(slots.take("c").is_ok());
    }
}
