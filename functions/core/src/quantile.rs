//! The nearest-rank quantile: the one definition of "p95" that the forwarder publishes,
//! the learner reads and the simulator reports, so that their figures agree.

/// The nearest-rank `q`-quantile of `sorted` (ascending): the value at rank ⌈q·n⌉
/// (at least the first); `None` when there is none.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    sorted.get(rank(sorted.len(), q) - 1).copied()
}

/// The rank, from 1, of the nearest-rank `q`-quantile of `len` values: ⌈q·len⌉, at
/// least one. Fewer than this many values lie below the quantile; `len + 1 - rank` are
/// at or above it.
pub fn rank(len: usize, q: f64) -> usize {
    ((q * len as f64).ceil() as usize).clamp(1, len.max(1))
}

#[cfg(test)]
mod tests {
    use super::nearest_rank;

    #[test]
    fn the_p95_of_twenty_is_the_nineteenth_and_of_one_is_itself() {
        let twenty: Vec<u32> = (1..=20).collect();
        assert_eq!(nearest_rank(&twenty, 0.95), Some(19));
        assert_eq!(nearest_rank(&twenty, 0.5), Some(10));
        assert_eq!(nearest_rank(&[7u32], 0.95), Some(7));
        assert_eq!(nearest_rank(&[0.5, 2.0], 0.95), Some(2.0));
        assert_eq!(nearest_rank::<u64>(&[], 0.95), None);
    }
}
