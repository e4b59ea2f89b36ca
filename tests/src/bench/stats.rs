//! Order statistics of a sample of nanosecond timings. Nearest-rank percentiles: every figure
//! reported is a value that was actually measured, never an interpolation.

/// Summary of one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Smallest value.
    pub min: u64,
    /// 50th percentile.
    pub median: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest value.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// Nearest-rank percentile `p` (0..=100) of an ascending slice; 0 for an empty one.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts `values` in place and summarises them.
pub fn summarize(values: &mut [u64]) -> Summary {
    values.sort_unstable();
    if values.is_empty() {
        return Summary::default();
    }
    let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
    Summary {
        n: values.len(),
        min: values[0],
        median: percentile(values, 50.0),
        p90: percentile(values, 90.0),
        p99: percentile(values, 99.0),
        max: values[values.len() - 1],
        mean: sum as f64 / values.len() as f64,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = summarize(&mut v);
        assert_eq!((s.min, s.median, s.p90, s.p99, s.max), (1, 50, 90, 99, 100));
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
