//! Checks the component's word-at-a-time `memcmp` (`c/memcmp.c`) against Rust's own byte
//! ordering. In the component that function *is* `memcmp`; natively it is compiled under its
//! own name so these tests exercise the same code.

unsafe extern "C" {
    fn cordon_memcmp(left: *const u8, right: *const u8, n: usize) -> i32;
}

fn compare(left: &[u8], right: &[u8]) -> std::cmp::Ordering {
    assert_eq!(left.len(), right.len());
    // SAFETY: both slices are valid for `len` bytes.
    unsafe { cordon_memcmp(left.as_ptr(), right.as_ptr(), left.len()) }.cmp(&0)
}

#[test]
fn agrees_with_slice_ordering_for_every_length_and_difference_position() {
    // Every length from 0 to 40 (covering the 8-byte, 4-byte and byte tails), with the first
    // difference at every position, in both directions, and with bytes whose high bit is set
    // (memcmp compares unsigned bytes).
    for len in 0..=40usize {
        let base: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
        assert_eq!(
            compare(&base, &base),
            std::cmp::Ordering::Equal,
            "len {len}"
        );
        for pos in 0..len {
            for delta in [1u8, 0x80, 0xff] {
                let mut other = base.clone();
                other[pos] = other[pos].wrapping_add(delta);
                // A later byte that orders the other way must not matter.
                if pos + 1 < len {
                    other[pos + 1] = base[pos + 1].wrapping_sub(1);
                }
                assert_eq!(
                    compare(&base, &other),
                    base.cmp(&other),
                    "len {len} pos {pos}"
                );
                assert_eq!(
                    compare(&other, &base),
                    other.cmp(&base),
                    "len {len} pos {pos}"
                );
            }
        }
    }
}

#[test]
fn unaligned_starts_compare_the_same() {
    let left: Vec<u8> = (0..64u8).collect();
    let mut right = left.clone();
    right[45] = 200;
    for offset in 0..8 {
        assert_eq!(
            compare(&left[offset..], &right[offset..]),
            left[offset..].cmp(&right[offset..]),
            "offset {offset}"
        );
        assert_eq!(
            compare(&left[offset..45], &right[offset..45]),
            std::cmp::Ordering::Equal
        );
    }
}
