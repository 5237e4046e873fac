//! Attribution of IP fragments to flows.
//!
//! Only the first fragment of a datagram carries the transport ports. The table remembers them,
//! keyed by (addresses, IP id, protocol, VLAN), so later fragments count towards the same flow.
//! It is bounded: a direct-mapped array where a colliding insert overwrites the older entry, and
//! entries older than [`FragmentTable::MAX_AGE_NS`] are ignored. A flood of fragments therefore
//! costs a fixed amount of memory; a fragment that finds no entry is still counted, with ports 0.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FragKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub id: u32,
    pub proto: u8,
    pub vlan: u16,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    key: FragKey,
    sport: u16,
    dport: u16,
    ts_ns: u64,
    used: bool,
}

pub struct FragmentTable {
    slots: Vec<Slot>,
    mask: usize,
}

impl FragmentTable {
    pub const DEFAULT_CAPACITY: usize = 4096;
    /// Linux's ipfrag_time is 30 s; a later fragment older than that would not be reassembled.
    pub const MAX_AGE_NS: u64 = 30_000_000_000;

    pub fn new(capacity: usize) -> FragmentTable {
        let cap = capacity.max(16).next_power_of_two();
        // Allocated lazily: most traffic has no fragments at all.
        FragmentTable {
            slots: Vec::new(),
            mask: cap - 1,
        }
    }

    fn index(&self, k: &FragKey) -> usize {
        let mut h: u64 = 0x9E37_79B9_7F4A_7C15
            ^ k.id as u64
            ^ ((k.proto as u64) << 32)
            ^ ((k.vlan as u64) << 40);
        for chunk in k.src.chunks_exact(8).chain(k.dst.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 29;
        }
        (h as usize) & self.mask
    }

    pub fn insert(&mut self, key: FragKey, sport: u16, dport: u16, ts_ns: u64) {
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); self.mask + 1];
        }
        let i = self.index(&key);
        self.slots[i] = Slot {
            key,
            sport,
            dport,
            ts_ns,
            used: true,
        };
    }

    /// Forgets the datagram `key` (a new first fragment with the same key that carries no
    /// usable ports: its later fragments must not inherit an older datagram's).
    pub fn remove(&mut self, key: &FragKey) {
        if self.slots.is_empty() {
            return;
        }
        let i = self.index(key);
        if self.slots[i].key == *key {
            self.slots[i].used = false;
        }
    }

    pub fn lookup(&self, key: &FragKey, ts_ns: u64) -> Option<(u16, u16)> {
        if self.slots.is_empty() {
            return None;
        }
        let s = &self.slots[self.index(key)];
        if s.used && s.key == *key && ts_ns.saturating_sub(s.ts_ns) <= Self::MAX_AGE_NS {
            Some((s.sport, s.dport))
        } else {
            None
        }
    }
}
