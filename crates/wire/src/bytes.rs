//! Bounds-checked big-endian reads. Every accessor returns `Option`, so a short buffer becomes a
//! decode error at the call site instead of a panic.

#[inline(always)]
pub fn u8_at(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}

#[inline(always)]
pub fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline(always)]
pub fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

#[inline(always)]
pub fn le32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Copies `N` bytes starting at `off`, or `None` if the buffer is too short.
#[inline(always)]
pub fn array<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
    let s = b.get(off..off.checked_add(N)?)?;
    let mut out = [0u8; N];
    out.copy_from_slice(s);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_checked() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(be16(&b, 0), Some(0x0102));
        assert_eq!(be16(&b, 4), None);
        assert_eq!(be32(&b, 1), Some(0x02030405));
        assert_eq!(be32(&b, 2), None);
        assert_eq!(be32(&b, usize::MAX), None);
        assert_eq!(array::<2>(&b, 3), Some([4, 5]));
        assert_eq!(array::<2>(&b, 4), None);
    }
}
