//! Summaries of samples: count, mean, p50, p99 and max (nearest-rank
//! percentiles, no interpolation), in the unit the samples were taken in.

use serde::Serialize;

/// A summary of a set of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// `None` when there are no samples.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let rank = |p: f64| {
            let r = (p * n as f64).ceil() as usize;
            sorted[r.clamp(1, n) - 1]
        };
        Some(Self {
            count: n,
            mean: sorted.iter().sum::<f64>() / n as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: sorted[n - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!((s.p50, s.p99, s.max), (50.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.p50, one.p99, one.max), (3.0, 3.0, 3.0));
        assert!(Summary::of(&[]).is_none());
    }
}
