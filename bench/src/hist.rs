//! Latency histograms (HdrHistogram, in microseconds) and how durations print.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Longest latency kept exactly; longer ones are clamped to it.
const MAX_MICROS: u64 = 120_000_000;

/// A latency distribution with three significant digits.
#[derive(Clone)]
pub struct Latency(Histogram<u64>);

impl Latency {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self(Histogram::new_with_bounds(1, MAX_MICROS, 3)?))
    }

    pub fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(MAX_MICROS);
        self.0.saturating_record(micros.clamp(1, MAX_MICROS));
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.0.value_at_quantile(q))
    }

    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    pub fn p999(&self) -> Duration {
        self.quantile(0.999)
    }

    pub fn max(&self) -> Duration {
        Duration::from_micros(self.0.max())
    }

    /// `p50 … p99 … p99.9 … max … n` as table cells (p99.9 is `-` under 1,000 samples).
    pub fn cells(&self) -> Vec<String> {
        if self.len() == 0 {
            return vec!["-".into(), "-".into(), "-".into(), "-".into(), "0".into()];
        }
        let p999 = if self.len() >= 1000 {
            micros(self.p999())
        } else {
            "-".into()
        };
        vec![
            micros(self.p50()),
            micros(self.p99()),
            p999,
            micros(self.max()),
            count(self.len()),
        ]
    }
}

/// `612 µs`, `1.93 ms`, `12.4 ms`, `3.20 s`.
pub fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else if us < 1_000_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// `12,345`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.9 MiB`, `312 KiB`.
pub fn bytes(b: f64) -> String {
    if b.abs() >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(999), "999");
        assert_eq!(micros(Duration::from_micros(612)), "612 µs");
        assert_eq!(micros(Duration::from_micros(1930)), "1.93 ms");
        assert_eq!(bytes(3.5 * 1024.0 * 1024.0), "3.50 MiB");
    }

    #[test]
    fn quantiles() {
        let mut h = Latency::new().unwrap();
        for us in 1..=1000 {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.len(), 1000);
        assert!((495..=505).contains(&h.p50().as_micros()));
        assert!(h.p99() >= Duration::from_micros(985));
    }
}
