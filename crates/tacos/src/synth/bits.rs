//! Rows of bit tables, read a word at a time.

/// Bits `64 w..64 w + 64` of the `len`-bit row that starts at bit `start` of `table`
/// (rows need not start on a word), zeros past the row's end.
#[inline]
pub(super) fn row_word(table: &[u64], start: usize, len: usize, w: usize) -> u64 {
    let from = start + 64 * w;
    let (i, shift) = (from / 64, from % 64);
    let mut word = table[i] >> shift;
    if shift != 0 {
        if let Some(&next) = table.get(i + 1) {
            word |= next << (64 - shift);
        }
    }
    let left = len - 64 * w;
    if left < 64 {
        word &= (1u64 << left) - 1;
    }
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_word_holds_the_rows_bits_wherever_the_row_starts() {
        // A table of 3 words with bit b set where b % 3 == 0; each row's words, read
        // bit by bit, must agree with the table.
        let mut table = vec![0u64; 3];
        for b in (0..192).step_by(3) {
            table[b / 64] |= 1 << (b % 64);
        }
        for start in [0, 1, 37, 63, 64, 100] {
            let len: usize = 192 - start;
            for w in 0..len.div_ceil(64) {
                let word = row_word(&table, start, len, w);
                for k in 0..64 {
                    let bit = 64 * w + k;
                    let expected = bit < len && (start + bit) % 3 == 0;
                    assert_eq!(word >> k & 1 == 1, expected, "start {start}, bit {bit}");
                }
            }
        }
    }
}
