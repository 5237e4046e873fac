//! Open-addressing index from a 32-bit hash to a slab slot.
//!
//! Each slot is one `u64`: the key's 32-bit hash tag in the high half and `slot + 1` in the low
//! half (0 means empty). Linear probing at a load of at most 1/2 keeps probes short and lets the
//! engine prefetch a packet's home slot a batch ahead. The tag filters almost every mismatch
//! before the (cold) entry is touched. Deletion shifts later entries back (no tombstones), so
//! lookups never slow down after churn.

pub const EMPTY: u64 = 0;

pub struct Index {
    slots: Vec<u64>,
    mask: u32,
    len: usize,
    max_slots: usize,
}

impl Index {
    /// An index able to hold `max_entries` at a load of at most 1/2. It starts small and
    /// doubles as it fills: a small table stays in cache (and in the TLB) however large the cap.
    pub fn with_max_entries(max_entries: usize) -> Index {
        let max_slots = (max_entries.max(8) * 2).next_power_of_two();
        assert!(max_slots <= 1 << 31, "index too large");
        let n = max_slots.min(1024);
        Index {
            slots: vec![EMPTY; n],
            mask: (n - 1) as u32,
            len: 0,
            max_slots,
        }
    }

    /// Makes sure `more` inserts keep the load at most 1/2 (growing if allowed). Call before
    /// [`Index::find`] whose position will be used for an insert.
    #[inline]
    pub fn reserve(&mut self, more: usize) {
        if (self.len + more) * 2 > self.slots.len() && self.slots.len() < self.max_slots {
            self.grow(self.len + more);
        }
    }

    #[cold]
    fn grow(&mut self, want: usize) {
        let n = (want * 2)
            .next_power_of_two()
            .clamp(self.slots.len() * 2, self.max_slots);
        // A zeroed allocation this large is fresh pages from the kernel, not yet touched: the
        // advice applies before the first fault.
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        advise_huge_pages(&self.slots);
        self.mask = (n - 1) as u32;
        for s in old.into_iter().filter(|&s| s != EMPTY) {
            // Positions come from the stored tag: entries are not touched to rehash.
            let mut i = self.home((s >> 32) as u32);
            while self.slots[i] != EMPTY {
                i = (i + 1) & self.mask as usize;
            }
            self.slots[i] = s;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn home(&self, tag: u32) -> usize {
        (tag & self.mask) as usize
    }

    /// Hints the CPU to load the home slot of `tag`.
    #[inline(always)]
    pub fn prefetch(&self, tag: u32) {
        prefetch_read(self.slots.as_ptr().wrapping_add(self.home(tag)));
    }

    /// Finds the slab slot for `tag` whose entry satisfies `is_match`. Returns `Ok(slot)` on a
    /// hit or `Err(position)` with the empty position where the key would be inserted.
    #[inline(always)]
    pub fn find(&self, tag: u32, mut is_match: impl FnMut(u32) -> bool) -> Result<u32, usize> {
        let mut i = self.home(tag);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return Err(i);
            }
            if (s >> 32) as u32 == tag {
                let slot = (s as u32) - 1;
                if is_match(slot) {
                    return Ok(slot);
                }
            }
            i = (i + 1) & self.mask as usize;
        }
    }

    /// Fills the empty `position` returned by [`Index::find`].
    #[inline(always)]
    pub fn insert_at(&mut self, position: usize, tag: u32, slot: u32) {
        debug_assert_eq!(self.slots[position], EMPTY);
        self.slots[position] = ((tag as u64) << 32) | (slot as u64 + 1);
        self.len += 1;
    }

    /// Removes the entry pointing at `slot` (whose key hashed to `tag`).
    pub fn remove(&mut self, tag: u32, slot: u32) {
        let mask = self.mask as usize;
        let want = ((tag as u64) << 32) | (slot as u64 + 1);
        let mut i = self.home(tag);
        while self.slots[i] != want {
            if self.slots[i] == EMPTY {
                debug_assert!(false, "removing an entry that is not in the index");
                return;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: move later entries of the cluster into the hole when their
        // home position is at or before the hole (cyclically).
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = self.home((s >> 32) as u32);
            let dist_home_to_j = j.wrapping_sub(home) & mask;
            let dist_hole_to_j = j.wrapping_sub(hole) & mask;
            if dist_home_to_j >= dist_hole_to_j {
                self.slots[hole] = s;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * 8
    }
}

/// Asks the kernel to back a large index with 2 MiB pages (transparent huge pages: Linux's
/// default `madvise` mode gives them only to memory that asks). Look-ups land at random
/// places of an index of tens or hundreds of MiB, and each 4 KiB page would cost a TLB miss.
/// A hint only; where it is refused nothing changes. (The flow and host slabs are filled in
/// order and are not advised: on the benchmark VM their huge-page faults cost more system
/// time than the TLB saved; see BENCHMARKS.md, section 5.)
fn advise_huge_pages(v: &Vec<u64>) {
    const MIN: usize = 4 << 20;
    const PAGE: usize = 4096;
    let bytes = v.capacity() * std::mem::size_of::<u64>();
    if bytes < MIN {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = v.as_ptr() as usize;
        let aligned = (start + PAGE - 1) & !(PAGE - 1);
        let len = (start + bytes - aligned) & !(PAGE - 1);
        // SAFETY: the range lies inside the Vec's own allocation; MADV_HUGEPAGE changes how
        // the kernel backs it, never its contents.
        unsafe {
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
}

/// Prefetch a cache line for reading; a no-op on targets without a prefetch instruction.
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, even for an invalid address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removes with colliding tags agree with a HashMap model.
    #[test]
    fn matches_model_under_churn() {
        let mut idx = Index::with_max_entries(64);
        let mut keys: Vec<Option<u64>> = Vec::new(); // slot -> key
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut seed = 42u64;
        for _ in 0..20_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (seed >> 33) % 200;
            let tag = (key % 37) as u32 * 3; // many collisions on purpose
            idx.reserve(1);
            let found = idx.find(tag, |s| keys[s as usize] == Some(key));
            match (found, model.get(&key).copied()) {
                (Ok(slot), Some(m)) => {
                    assert_eq!(slot, m);
                    idx.remove(tag, slot);
                    keys[slot as usize] = None;
                    model.remove(&key);
                }
                (Err(pos), None) => {
                    if model.len() < 64 {
                        let slot = keys.iter().position(|k| k.is_none()).unwrap_or(keys.len());
                        if slot == keys.len() {
                            keys.push(None);
                        }
                        keys[slot] = Some(key);
                        idx.insert_at(pos, tag, slot as u32);
                        model.insert(key, slot as u32);
                    }
                }
                (a, b) => panic!("index and model disagree: {a:?} vs {b:?}"),
            }
        }
        for (k, s) in &model {
            let tag = (k % 37) as u32 * 3;
            assert_eq!(idx.find(tag, |x| keys[x as usize] == Some(*k)), Ok(*s));
        }
    }
}
