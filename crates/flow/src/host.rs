//! Per-address host table: bounded, indexed like the flow table, purged when idle and flowless.

use crate::table::{prefetch_read, Index};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HostKey {
    pub addr: [u8; 16],
    pub ip_version: u8,
    pub vlan: u16,
}

impl HostKey {
    #[inline]
    pub fn hash32(&self) -> u32 {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&self.addr[..8]);
        b.copy_from_slice(&self.addr[8..]);
        let x = u64::from_le_bytes(a) ^ 0x9E37_79B9_7F4A_7C15;
        let y = u64::from_le_bytes(b)
            ^ ((self.vlan as u64) << 8 | self.ip_version as u64)
            ^ 0xC2B2_AE3D_27D4_EB4F;
        let r = (x as u128).wrapping_mul(y as u128);
        let h = (r as u64) ^ ((r >> 64) as u64);
        let r = ((h ^ 0x1656_67B1_9E37_79F9) as u128).wrapping_mul(0xff51_afd7_ed55_8ccd);
        ((r as u64) ^ ((r >> 64) as u64)) as u32
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Host {
    pub key: HostKey,
    pub live: bool,
    pub has_mac: bool,
    pub mac: [u8; 6],
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub rcvd_pkts: u64,
    pub rcvd_bytes: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub flows_as_client: u32,
    pub flows_as_server: u32,
    /// Flows in the flow table that point at this host; it is only purged at 0.
    pub active_flows: u32,
    /// TCP segments this host sent again (retransmissions in its flows, as the flow records
    /// count them): a host with a bad path or a struggling stack stands out.
    pub retransmits_sent: u32,
    /// TCP segments its peers sent it again: a host whose incoming path loses packets.
    pub retransmits_rcvd: u32,
    /// In `--local-networks` (`None`: no local networks are set).
    pub local: Option<bool>,
}

pub struct HostTable {
    index: Index,
    hosts: Vec<Host>,
    free: Vec<u32>,
    capacity: usize,
    len: usize,
}

impl HostTable {
    pub fn new(capacity: usize) -> HostTable {
        // Reserved up front like the flow slab: growing by doubling would copy every host
        // into fresh pages each time; untouched capacity costs no memory.
        let hosts = Vec::with_capacity(capacity);
        HostTable {
            index: Index::with_max_entries(capacity),
            hosts,
            free: Vec::new(),
            capacity,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slot of the host for `key`, creating it if needed. `None` when the table is full.
    pub fn get_or_insert(
        &mut self,
        key: &HostKey,
        ts_ns: u64,
        mac: Option<[u8; 6]>,
    ) -> Option<(u32, bool)> {
        let tag = key.hash32();
        if self.len < self.capacity {
            self.index.reserve(1);
        }
        let hosts = &self.hosts;
        match self.index.find(tag, |s| hosts[s as usize].key == *key) {
            Ok(slot) => {
                let h = &mut self.hosts[slot as usize];
                if let Some(m) = mac {
                    if !h.has_mac {
                        h.mac = m;
                        h.has_mac = true;
                    }
                }
                Some((slot, false))
            }
            Err(pos) => {
                if self.len >= self.capacity {
                    return None;
                }
                let host = Host {
                    key: *key,
                    live: true,
                    has_mac: mac.is_some(),
                    mac: mac.unwrap_or_default(),
                    first_ns: ts_ns,
                    last_ns: ts_ns,
                    ..Host::default()
                };
                let slot = match self.free.pop() {
                    Some(s) => {
                        self.hosts[s as usize] = host;
                        s
                    }
                    None => {
                        self.hosts.push(host);
                        (self.hosts.len() - 1) as u32
                    }
                };
                self.index.insert_at(pos, tag, slot);
                self.len += 1;
                Some((slot, true))
            }
        }
    }

    #[inline(always)]
    pub fn get_mut(&mut self, slot: u32) -> &mut Host {
        &mut self.hosts[slot as usize]
    }

    /// Prefetches the index slot where `key` would be found (before a look-up of a new flow).
    #[inline(always)]
    pub fn prefetch_key(&self, key: &HostKey) {
        self.index.prefetch(key.hash32());
    }

    /// Prefetches the entry the index's first slot with `key`'s tag points at (after
    /// [`HostTable::prefetch_key`] brought that slot in): almost always the host itself.
    #[inline(always)]
    pub fn prefetch_entry(&self, key: &HostKey) {
        let mut first = None;
        let _ = self.index.find(key.hash32(), |s| {
            first = Some(s);
            true
        });
        if let Some(s) = first {
            self.prefetch(s);
        }
    }

    #[inline(always)]
    pub fn prefetch(&self, slot: u32) {
        if (slot as usize) < self.hosts.len() {
            prefetch_read(&self.hosts[slot as usize]);
        }
    }

    /// The live host for `key`, if there is one.
    pub fn find_mut(&mut self, key: &HostKey) -> Option<&mut Host> {
        let hosts = &self.hosts;
        let slot = self
            .index
            .find(key.hash32(), |s| hosts[s as usize].key == *key)
            .ok()?;
        self.hosts.get_mut(slot as usize).filter(|h| h.live)
    }

    pub fn get(&self, slot: u32) -> Option<&Host> {
        self.hosts.get(slot as usize).filter(|h| h.live)
    }

    /// Removes hosts that have no flow and were last seen before `idle_before_ns`; with
    /// `out`, their final counters are appended to it (so a host report loses nothing);
    /// `gone` is told each purged host's slot.
    pub fn purge(
        &mut self,
        idle_before_ns: u64,
        mut out: Option<&mut Vec<Host>>,
        mut gone: impl FnMut(u32, &Host),
    ) -> u64 {
        let mut purged = 0;
        for slot in 0..self.hosts.len() {
            let h = self.hosts[slot];
            if h.live && h.active_flows == 0 && h.last_ns < idle_before_ns {
                gone(slot as u32, &h);
                if let Some(out) = out.as_deref_mut() {
                    out.push(Host { live: false, ..h });
                }
                self.index.remove(h.key.hash32(), slot as u32);
                self.hosts[slot].live = false;
                self.free.push(slot as u32);
                self.len -= 1;
                purged += 1;
            }
        }
        purged
    }

    pub fn iter(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter().filter(|h| h.live)
    }

    pub fn memory_bytes(&self) -> usize {
        self.index.memory_bytes()
            + self.hosts.capacity() * std::mem::size_of::<Host>()
            + self.free.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_fits_in_104_bytes() {
        // Millions of them are kept: the sent retransmissions took padding, the received ones
        // 8 bytes (the key's own padding leaves 3 free). Anything more should be weighed.
        assert_eq!(std::mem::size_of::<Host>(), 104);
    }
}
