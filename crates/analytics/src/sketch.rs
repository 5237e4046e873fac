//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005), weighted: the heavy hitters of a stream
//! in a fixed number of counters, whatever the number of distinct keys.
//!
//! Why: a flood of random source addresses would make any exact per-key table grow with the
//! flood (Ourmon's Slammer case). With `capacity` counters and total weight `W`:
//!
//! * every key whose true weight is above `W / capacity` is in the sketch;
//! * a key's `weight` never underestimates its true weight, and overestimates it by at most its
//!   `error` (itself at most `W / capacity`), so `weight - error` is a guaranteed lower bound;
//! * while fewer than `capacity` distinct keys were seen, nothing was evicted and every count is
//!   exact ([`SpaceSaving::is_exact`]).
//!
//! Each counter carries a payload `V` (more counters about the key) that starts at its default
//! when the key takes over an evicted counter: the payload is exact from the moment the key
//! entered. Updates and evictions are O(log capacity): a binary min-heap over the weights.

use hashbrown::HashMap;
use std::hash::Hash;

#[derive(Clone, Debug)]
pub struct Counter<K, V> {
    pub key: K,
    /// Upper bound of the key's weight.
    pub weight: u64,
    /// How much of `weight` may belong to keys this counter held before (evicted ones).
    pub error: u64,
    pub value: V,
}

#[derive(Clone, Debug)]
pub struct SpaceSaving<K, V> {
    capacity: usize,
    pub(crate) index: HashMap<K, u32>,
    pub(crate) counters: Vec<Counter<K, V>>,
    /// Min-heap of counter positions, by weight.
    pub(crate) heap: Vec<u32>,
    /// Where each counter is in `heap`.
    at: Vec<u32>,
    pub(crate) total: u64,
    evictions: u64,
}

impl<K: Hash + Eq + Copy + Ord, V: Default> SpaceSaving<K, V> {
    pub fn new(capacity: usize) -> SpaceSaving<K, V> {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            index: HashMap::new(),
            counters: Vec::new(),
            heap: Vec::new(),
            at: Vec::new(),
            total: 0,
            evictions: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.counters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// Sum of all weights added (W in the bound).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Keys that lost their counter to a new key.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// No key was ever evicted: every weight is exact.
    pub fn is_exact(&self) -> bool {
        self.evictions == 0
    }

    /// The smallest weight held once a key was evicted (a key not in it weighs at most
    /// this); 0 while nothing was (a key not in it was never seen).
    pub fn floor(&self) -> u64 {
        if self.evictions == 0 {
            0
        } else {
            self.heap
                .first()
                .map_or(0, |&i| self.counters[i as usize].weight)
        }
    }

    /// Adds `w` to `key` (taking over the smallest counter when the key is new and the sketch
    /// is full), then lets `f` update its payload.
    #[inline]
    pub fn add(&mut self, key: K, w: u64, f: impl FnOnce(&mut V)) {
        self.total = self.total.saturating_add(w);
        if let Some(&i) = self.index.get(&key) {
            let c = &mut self.counters[i as usize];
            c.weight = c.weight.saturating_add(w);
            f(&mut c.value);
            self.sift_down(self.at[i as usize] as usize);
            return;
        }
        self.insert(key, w, f);
    }

    #[cold]
    fn insert(&mut self, key: K, w: u64, f: impl FnOnce(&mut V)) {
        if self.counters.len() < self.capacity {
            let i = self.counters.len() as u32;
            let mut value = V::default();
            f(&mut value);
            self.counters.push(Counter {
                key,
                weight: w,
                error: 0,
                value,
            });
            self.index.insert(key, i);
            self.at.push(self.heap.len() as u32);
            self.heap.push(i);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // Full: the key takes over the counter with the smallest weight.
        let i = self.heap[0];
        let c = &mut self.counters[i as usize];
        self.index.remove(&c.key);
        self.evictions += 1;
        let floor = c.weight;
        c.key = key;
        c.error = floor;
        c.weight = floor.saturating_add(w);
        c.value = V::default();
        f(&mut c.value);
        self.index.insert(key, i);
        self.sift_down(0);
    }

    /// The payload of `key` when it holds a counter (no weight added, nothing evicted).
    #[inline]
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let i = *self.index.get(key)?;
        Some(&mut self.counters[i as usize].value)
    }

    pub fn get(&self, key: &K) -> Option<&Counter<K, V>> {
        let i = *self.index.get(key)?;
        Some(&self.counters[i as usize])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Counter<K, V>> {
        self.counters.iter()
    }

    /// The counters, heaviest first, and the sketch emptied for the next interval (its memory
    /// kept).
    pub fn take_sorted(&mut self) -> Vec<Counter<K, V>> {
        let mut out: Vec<Counter<K, V>> = std::mem::take(&mut self.counters);
        // Ties in key order: the same input lists the same way.
        out.sort_unstable_by_key(|c| (std::cmp::Reverse(c.weight), c.key));
        self.clear();
        out
    }

    pub fn clear(&mut self) {
        self.index.clear();
        self.counters.clear();
        self.heap.clear();
        self.at.clear();
        self.total = 0;
        self.evictions = 0;
    }

    fn weight_at(&self, h: usize) -> u64 {
        self.counters[self.heap[h] as usize].weight
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.at[self.heap[a] as usize] = a as u32;
        self.at[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut h: usize) {
        while h > 0 {
            let parent = (h - 1) / 2;
            if self.weight_at(parent) <= self.weight_at(h) {
                break;
            }
            self.swap(parent, h);
            h = parent;
        }
    }

    fn sift_down(&mut self, mut h: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * h + 1, 2 * h + 2);
            let mut smallest = h;
            if l < n && self.weight_at(l) < self.weight_at(smallest) {
                smallest = l;
            }
            if r < n && self.weight_at(r) < self.weight_at(smallest) {
                smallest = r;
            }
            if smallest == h {
                break;
            }
            self.swap(h, smallest);
            h = smallest;
        }
    }
}

/// Heavy hitters under a flood of new keys: a Count-Min sketch (Cormode and Muthukrishnan)
/// in front of a [`SpaceSaving`]. Space-Saving alone pays an eviction (hash removal,
/// insertion, heap sift) for every new key, which is every update when a flood brings a new
/// random address per packet; here a new key only costs `ROWS` counter increments until its
/// Count-Min estimate passes the smallest weight the Space-Saving keeps, and only then takes a
/// counter (with the estimate as its weight, so weights stay upper bounds).
///
/// Bounds, with `W` the total weight: a Count-Min estimate exceeds the true weight by at most
/// `2W / width` with probability at least `1 - 2^-ROWS` (Markov per row, independent rows);
/// the Space-Saving part keeps its own `W / capacity`. While the Space-Saving has room every
/// key is admitted and counted exactly.
#[derive(Clone, Debug)]
pub struct HeavyHitters<K, V> {
    cms: Vec<u32>,
    width: usize,
    pub top: SpaceSaving<K, V>,
}

const ROWS: usize = 4;

impl<K: Hash + Eq + Copy + Ord, V: Default> HeavyHitters<K, V> {
    /// `capacity` counters, behind a Count-Min sketch `width` wide (rounded to a power of
    /// two) and [`ROWS`] deep.
    pub fn new(capacity: usize, width: usize) -> HeavyHitters<K, V> {
        let width = width.next_power_of_two().max(64);
        HeavyHitters {
            cms: vec![0; width * ROWS],
            width,
            top: SpaceSaving::new(capacity),
        }
    }

    #[inline]
    fn estimate_add(&mut self, key: &K, w: u64) -> u64 {
        use std::hash::BuildHasher;
        let x = self.top.index.hasher().hash_one(key);
        let w32 = w.min(u32::MAX as u64) as u32;
        let mut est = u32::MAX;
        for r in 0..ROWS {
            // Four row indices from one 64-bit hash (Kirsch and Mitzenmacher).
            let i =
                (x.wrapping_add((r as u64).wrapping_mul(x >> 32 | 1)) as usize) & (self.width - 1);
            let c = &mut self.cms[r * self.width + i];
            *c = c.saturating_add(w32);
            est = est.min(*c);
        }
        est as u64
    }

    /// Adds `w` to `key`; its payload is updated by `f` when it holds a counter.
    #[inline]
    pub fn add(&mut self, key: K, w: u64, f: impl FnOnce(&mut V)) {
        let est = self.estimate_add(&key, w);
        if self.top.index.contains_key(&key) || self.top.len() < self.top.capacity() {
            self.top.add(key, w, f);
            return;
        }
        let floor = self
            .top
            .heap
            .first()
            .map_or(0, |&i| self.top.counters[i as usize].weight);
        if est > floor {
            self.top.add(key, w, f);
            // Weight: what Count-Min says, never less (the key may have had weight before).
            if let Some(&i) = self.top.index.get(&key) {
                let c = &mut self.top.counters[i as usize];
                if c.weight < est {
                    c.error += est - c.weight;
                    c.weight = est;
                }
            }
        } else {
            self.top.total = self.top.total.saturating_add(w);
        }
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.top.get_mut(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Counter<K, V>> {
        self.top.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.top.is_empty()
    }

    /// The Space-Saving part as a [`Part`], and everything emptied for the next interval. A
    /// key never admitted weighs at most the floor (or its Count-Min estimate, below it).
    pub fn take_part(&mut self) -> Part<K, V> {
        let rejected = self.top.total > self.top.iter().map(|c| c.weight - c.error).sum::<u64>();
        let mut p = self.top.take_part();
        if rejected && p.floor == 0 {
            // Keys were refused at the door: a missing key may have had up to the floor.
            p.floor = p.counters.last().map_or(0, |c| c.weight);
        }
        self.cms.iter_mut().for_each(|c| *c = 0);
        p
    }

    pub fn take_sorted(&mut self) -> Vec<Counter<K, V>> {
        self.take_part().counters
    }
}

/// Values that can be added up when the same key comes from several shards or intervals.
pub trait Merge {
    fn merge(&mut self, other: &Self);
}

impl Merge for () {
    fn merge(&mut self, _: &()) {}
}

/// One shard's sketch as handed to a merger: its counters, and the weight a key it does not
/// list may have had there (its floor, 0 when it never evicted).
#[derive(Clone, Debug)]
pub struct Part<K, V> {
    pub counters: Vec<Counter<K, V>>,
    pub floor: u64,
}

impl<K, V> Default for Part<K, V> {
    fn default() -> Self {
        Part {
            counters: Vec::new(),
            floor: 0,
        }
    }
}

impl<K: Hash + Eq + Copy + Ord, V: Default> SpaceSaving<K, V> {
    /// The sketch as a part for [`merge_parts`], emptied.
    pub fn take_part(&mut self) -> Part<K, V> {
        let floor = self.floor();
        Part {
            counters: self.take_sorted(),
            floor,
        }
    }
}

/// Adds up several shards' sketches of the same interval (Agarwal et al., "Mergeable
/// summaries"): weights and errors add; a key missing from a full part may have had up to that
/// part's floor there, which is added to its error (not its weight), so `weight - error` stays
/// a lower bound and `weight` an upper bound... of what the listing parts saw plus the floors.
/// Heaviest first.
pub fn merge_parts<K: Hash + Eq + Copy + Ord, V: Default + Merge + Clone>(
    parts: &[Part<K, V>],
) -> Vec<Counter<K, V>> {
    let mut all: HashMap<K, (Counter<K, V>, u64)> = HashMap::new();
    let floors: u64 = parts.iter().map(|p| p.floor).sum();
    for p in parts {
        for c in &p.counters {
            let e = all.entry(c.key).or_insert_with(|| {
                (
                    Counter {
                        key: c.key,
                        weight: 0,
                        error: 0,
                        value: V::default(),
                    },
                    0,
                )
            });
            e.0.weight = e.0.weight.saturating_add(c.weight);
            e.0.error = e.0.error.saturating_add(c.error);
            e.0.value.merge(&c.value);
            // Floors of the parts that list this key do not apply to it.
            e.1 += p.floor;
        }
    }
    let mut out: Vec<Counter<K, V>> = all
        .into_values()
        .map(|(mut c, listed_floors)| {
            let unlisted = floors - listed_floors;
            c.weight = c.weight.saturating_add(unlisted);
            c.error = c.error.saturating_add(unlisted);
            c
        })
        .collect();
    // Ties in key order: the same input lists the same way.
    out.sort_unstable_by_key(|c| (std::cmp::Reverse(c.weight), c.key));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_while_it_has_room() {
        let mut s: SpaceSaving<u32, u64> = SpaceSaving::new(8);
        for k in 0..8u32 {
            for _ in 0..=k {
                s.add(k, 10, |v| *v += 1);
            }
        }
        assert!(s.is_exact());
        let top = s.take_sorted();
        assert_eq!(top[0].key, 7);
        assert_eq!(top[0].weight, 80);
        assert_eq!(top[0].value, 8);
        assert_eq!(top[7].weight, 10);
        assert!(s.is_empty());
    }

    /// A flood of keys seen once each, with a few heavy keys mixed in: the heavy keys stay
    /// first and within the bound, and the memory stays at `capacity` counters.
    #[test]
    fn heavy_hitters_survive_a_flood() {
        let cap = 64;
        let mut s: SpaceSaving<u64, ()> = SpaceSaving::new(cap);
        let heavy = [1u64, 2, 3];
        let mut truth = [0u64; 3];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..200_000u64 {
            if i % 10 == 0 {
                let h = (i / 10 % 3) as usize;
                s.add(heavy[h], 1, |_| {});
                truth[h] += 1;
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.add(1000 + (x % 1_000_000_000), 1, |_| {});
            }
        }
        assert_eq!(s.len(), cap);
        let bound = s.total() / cap as u64;
        let top = s.take_sorted();
        for (h, &t) in heavy.iter().zip(&truth) {
            let c = top
                .iter()
                .position(|c| c.key == *h)
                .expect("heavy key kept");
            assert!(c < 3, "heavy key {h} ranked {c}");
            let c = &top[c];
            assert!(c.weight >= t && c.weight - c.error <= t, "{c:?} vs {t}");
            assert!(c.weight - t <= bound);
        }
    }

    /// The same flood through the Count-Min door: heavy keys first, within the bounds, and
    /// far fewer evictions (each costs a hash removal and insertion).
    #[test]
    fn count_min_door_keeps_heavy_hitters() {
        let mut s: HeavyHitters<u64, u64> = HeavyHitters::new(64, 4096);
        let heavy = [1u64, 2, 3];
        let mut truth = [0u64; 3];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..200_000u64 {
            if i % 10 == 0 {
                let h = (i / 10 % 3) as usize;
                s.add(heavy[h], 1, |v| *v += 1);
                truth[h] += 1;
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.add(1000 + (x % 1_000_000_000), 1, |v| *v += 1);
            }
        }
        // Space-Saving alone evicts for almost every one of the 180k new keys.
        assert!(s.top.evictions() < 4000, "{} evictions", s.top.evictions());
        let total = s.top.total();
        assert_eq!(total, 200_000);
        let top = s.take_sorted();
        for (h, &t) in heavy.iter().zip(&truth) {
            let c = top
                .iter()
                .position(|c| c.key == *h)
                .expect("heavy key kept");
            assert!(c < 3, "heavy key {h} ranked {c}");
            let c = &top[c];
            assert!(c.weight >= t && c.weight - c.error <= t, "{c:?} vs {t}");
            // Counted exactly from the moment it took its counter (at its first update here).
            assert_eq!(c.value, t);
        }
    }

    #[test]
    fn merging_parts_keeps_bounds() {
        let mut a: SpaceSaving<u32, ()> = SpaceSaving::new(2);
        let mut b: SpaceSaving<u32, ()> = SpaceSaving::new(2);
        a.add(1, 100, |_| {});
        a.add(2, 5, |_| {});
        a.add(3, 7, |_| {}); // evicts 2 (5): 3 gets weight 12, error 5
        b.add(1, 50, |_| {});
        b.add(4, 9, |_| {});
        let parts = [a.take_part(), b.take_part()];
        assert_eq!(parts[0].floor, 12);
        assert_eq!(parts[1].floor, 0, "b never evicted a key");
        let m = merge_parts(&parts);
        assert_eq!(m[0].key, 1);
        assert_eq!((m[0].weight, m[0].error), (150, 0));
        let k4 = m.iter().find(|c| c.key == 4).unwrap();
        // 4 is missing from a, which was full with floor 12: it may have had up to 12 there.
        assert_eq!((k4.weight, k4.error), (21, 12));
    }
}
