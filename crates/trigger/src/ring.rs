//! [`PacketRing`]: the last few seconds of a shard's packets, in one byte buffer.
//!
//! Each packet is a record `[ts_ns: u64][orig_len: u32][cap_len: u32][cap_len bytes]` written
//! at the tail; the oldest records are dropped from the head when the buffer is full or when
//! they are older than the ring's age bound (measured from the newest packet). A record never
//! straddles the end of the buffer: when it does not fit there, the tail wraps to 0 and the
//! end of the data is remembered (`wrap_at`). Pushing is a bounds check, a few evictions at
//! most (each record is evicted once) and one copy: no allocation.

/// Bytes of a record's header.
pub const RECORD_HEADER: usize = 16;

/// A packet read back from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingPacket<'a> {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
}

pub struct PacketRing {
    buf: Box<[u8]>,
    /// Offset of the oldest record.
    head: usize,
    /// Where the next record goes.
    tail: usize,
    /// With `wrapped`: the data is `[head, wrap_at)` then `[0, tail)`; without: `[head, tail)`.
    wrap_at: usize,
    wrapped: bool,
    count: usize,
    keep_ns: u64,
    /// Packets too large for the whole buffer (never stored).
    pub too_large: u64,
}

impl PacketRing {
    /// A ring of `bytes` bytes (allocated zeroed, so the pages are only touched as it fills)
    /// keeping packets at most `keep_ns` older than the newest.
    pub fn new(bytes: usize, keep_ns: u64) -> PacketRing {
        PacketRing {
            buf: vec![0u8; bytes.max(RECORD_HEADER)].into_boxed_slice(),
            head: 0,
            tail: 0,
            wrap_at: 0,
            wrapped: false,
            count: 0,
            keep_ns,
            too_large: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the held records take (headers included).
    pub fn used(&self) -> usize {
        if self.wrapped {
            self.wrap_at - self.head + self.tail
        } else {
            self.tail - self.head
        }
    }

    #[inline]
    fn ts_at(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buf[off..off + 8]);
        u64::from_le_bytes(b)
    }

    #[inline]
    fn len_at(&self, off: usize) -> usize {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buf[off + 12..off + 16]);
        RECORD_HEADER + u32::from_le_bytes(b) as usize
    }

    /// Drops the oldest record.
    fn pop(&mut self) {
        if self.count == 0 {
            return;
        }
        self.head += self.len_at(self.head);
        self.count -= 1;
        if self.count == 0 {
            self.clear();
        } else if self.wrapped && self.head >= self.wrap_at {
            self.head = 0;
            self.wrapped = false;
        }
    }

    pub fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.wrap_at = 0;
        self.wrapped = false;
        self.count = 0;
    }

    /// Stores a packet, dropping the oldest ones as needed.
    #[inline]
    pub fn push(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) {
        let rec = RECORD_HEADER + data.len();
        if rec > self.buf.len() {
            self.too_large += 1;
            return;
        }
        // Age: everything older than the newest packet's time minus the bound.
        let oldest_kept = ts_ns.saturating_sub(self.keep_ns);
        while self.count > 0 && self.ts_at(self.head) < oldest_kept {
            self.pop();
        }
        // Room at the tail.
        loop {
            if self.count == 0 {
                self.clear();
            }
            if !self.wrapped {
                if self.buf.len() - self.tail >= rec {
                    break;
                }
                // Wrap: the data now ends at `wrap_at`, new records go from 0 up to `head`.
                self.wrap_at = self.tail;
                self.tail = 0;
                self.wrapped = true;
            }
            if self.head - self.tail >= rec {
                break;
            }
            self.pop();
        }
        let t = self.tail;
        self.buf[t..t + 8].copy_from_slice(&ts_ns.to_le_bytes());
        self.buf[t + 8..t + 12].copy_from_slice(&orig_len.to_le_bytes());
        self.buf[t + 12..t + 16].copy_from_slice(&(data.len() as u32).to_le_bytes());
        self.buf[t + 16..t + rec].copy_from_slice(data);
        self.tail = t + rec;
        self.count += 1;
    }

    /// The packets held, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = RingPacket<'_>> + '_ {
        let mut off = self.head;
        let mut wrapped = self.wrapped;
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            if wrapped && off >= self.wrap_at {
                off = 0;
                wrapped = false;
            }
            let len = self.len_at(off);
            let mut b = [0u8; 4];
            b.copy_from_slice(&self.buf[off + 8..off + 12]);
            let p = RingPacket {
                ts_ns: self.ts_at(off),
                orig_len: u32::from_le_bytes(b),
                data: &self.buf[off + RECORD_HEADER..off + len],
            };
            off += len;
            left -= 1;
            Some(p)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn pkt(i: u32, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i as usize + j) as u8).collect()
    }

    fn held(r: &PacketRing) -> Vec<(u64, u32, Vec<u8>)> {
        r.iter()
            .map(|p| (p.ts_ns, p.orig_len, p.data.to_vec()))
            .collect()
    }

    #[test]
    fn keeps_everything_that_fits() {
        let mut r = PacketRing::new(1 << 16, 5 * S);
        for i in 0..10 {
            r.push(u64::from(i) * 1000, 1500, &pkt(i, 60));
        }
        let h = held(&r);
        assert_eq!(h.len(), 10);
        for (i, (ts, orig, data)) in h.into_iter().enumerate() {
            assert_eq!(ts, i as u64 * 1000);
            assert_eq!(orig, 1500);
            assert_eq!(data, pkt(i as u32, 60));
        }
        assert_eq!(r.used(), 10 * (RECORD_HEADER + 60));
    }

    #[test]
    fn bounded_by_bytes_keeps_the_newest() {
        // Room for 10 records of 100 bytes (116 with the header), not 11.
        let mut r = PacketRing::new(10 * 116 + 50, 1000 * S);
        for i in 0..1000u32 {
            r.push(u64::from(i), 100, &pkt(i, 100));
            assert!(r.used() <= r.capacity());
            assert!(r.len() <= 10);
            // Always the newest, in order, without a gap.
            let h = held(&r);
            let first = i + 1 - h.len() as u32;
            for (k, (ts, _, data)) in h.iter().enumerate() {
                assert_eq!(*ts, u64::from(first + k as u32));
                assert_eq!(*data, pkt(first + k as u32, 100));
            }
        }
        assert!(r.len() >= 9, "{}", r.len());
    }

    #[test]
    fn wraps_around_with_mixed_sizes() {
        let mut r = PacketRing::new(4096, 1000 * S);
        let mut all = Vec::new();
        for i in 0..5000u32 {
            let len = (i as usize * 37) % 700;
            r.push(u64::from(i), len as u32 + 4, &pkt(i, len));
            all.push((u64::from(i), len as u32 + 4, pkt(i, len)));
            let h = held(&r);
            assert_eq!(h[..], all[all.len() - h.len()..], "after packet {i}");
            assert!(r.used() <= 4096);
            assert!(!h.is_empty());
        }
    }

    #[test]
    fn bounded_by_age() {
        let mut r = PacketRing::new(1 << 20, 5 * S);
        for i in 0..100u64 {
            // 10 packets a second.
            r.push(i * S / 10, 60, &pkt(i as u32, 60));
        }
        let h = held(&r);
        let newest = 99 * S / 10;
        assert!(h.iter().all(|p| p.0 >= newest - 5 * S));
        assert_eq!(h.first().map(|p| p.0), Some(newest - 5 * S));
        assert_eq!(h.len(), 51);
        // A gap longer than the bound empties it but for the new packet.
        r.push(newest + 60 * S, 60, &pkt(1, 60));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_packet_larger_than_the_ring_is_counted_not_stored() {
        let mut r = PacketRing::new(256, S);
        r.push(1, 10, &pkt(0, 10));
        r.push(2, 1000, &pkt(0, 1000));
        assert_eq!(r.too_large, 1);
        assert_eq!(r.len(), 1);
        // Exactly the ring's size fits, alone.
        r.push(3, 240, &pkt(0, 240));
        assert_eq!(held(&r), vec![(3, 240, pkt(0, 240))]);
    }
}
