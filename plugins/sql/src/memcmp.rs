//! Checks the component's own `memcmp` and `memcpy` (`c/memcmp.c`) against Rust's byte
//! ordering and copying. In the component those functions *are* `memcmp` and `memcpy`;
//! natively they are compiled under their own names so these tests exercise the same code.

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
    // Every length from 0 to 40 (covering the 1-3, 4-7, 8-16 and word-loop paths), with the
    // first difference at every position, in both directions, and with bytes whose high bit is set
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

unsafe extern "C" {
    fn cordon_memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8;
}

#[test]
fn memcpy_copies_exactly_the_bytes_asked_for_at_every_length_and_offset() {
    // Every length across the byte, 4-byte, 8-byte and word-loop paths (and past the
    // bulk-copy threshold), from and to unaligned addresses; the bytes around the destination
    // must stay untouched.
    let source: Vec<u8> = (0..400usize).map(|i| (i * 61 % 253) as u8 + 1).collect();
    for len in 0..=300usize {
        for src_offset in [0usize, 1, 3, 7] {
            for dest_offset in [0usize, 1, 5] {
                let mut dest = vec![0u8; len + 16];
                let src = &source[src_offset..src_offset + len];
                // SAFETY: `dest` has room for `len` bytes after `dest_offset`; the two do not
                // overlap.
                let returned =
                    unsafe { cordon_memcpy(dest.as_mut_ptr().add(dest_offset), src.as_ptr(), len) };
                assert_eq!(returned, dest.as_mut_ptr().wrapping_add(dest_offset));
                assert_eq!(&dest[dest_offset..dest_offset + len], src, "len {len}");
                assert!(dest[..dest_offset].iter().all(|&b| b == 0), "len {len}");
                assert!(
                    dest[dest_offset + len..].iter().all(|&b| b == 0),
                    "len {len} wrote past the end"
                );
            }
        }
    }
}
