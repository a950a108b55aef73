//! The sim driver's plan of an attempt: a seeded splitmix64 stream drawn in a fixed order
//! against the campaign's [`SimConfig`] knobs, so the same attempt gives the same outcome in
//! any process (see the parent module's docs for the seed).

use lanes_common::spec::{SimConfig, SimFault};

/// The splitmix64 finalizer.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a.
pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The PRNG seed of one attempt, as the `sim` module docs give it. Stable across processes
/// and releases.
pub(super) fn attempt_seed(seed: u64, arm: &str, attempt: u32) -> u64 {
    let s = mix(seed ^ 0x6c61_6e65_732d_7369);
    let s = mix(s ^ fnv1a64(arm.as_bytes()));
    mix(s ^ u64::from(attempt))
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for fault dice.
pub(super) struct SplitMix64(u64);

impl SplitMix64 {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub(super) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi]` (`lo` when the range is empty or reversed).
    fn range_f64(&mut self, [lo, hi]: [f64; 2]) -> f64 {
        let u = self.next_f64();
        if hi > lo { lo + (hi - lo) * u } else { lo }
    }

    /// Uniform over the integers `lo..=hi` (`lo` when the range is empty or reversed).
    fn range_u32(&mut self, [lo, hi]: [u32; 2]) -> u32 {
        let u = self.next_f64();
        if hi <= lo {
            return lo;
        }
        let span = u64::from(hi - lo);
        let k = ((u * (span + 1) as f64) as u64).min(span);
        lo + k as u32
    }
}

/// Everything one attempt draws, before the lane's limits (`max_turns`) are applied.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    pub(super) fault: Option<SimFault>,
    pub(super) agent_s: f64,
    pub(super) turns: u32,
    pub(super) cost_usd: f64,
    pub(super) passed: bool,
}

impl Plan {
    /// Draw an attempt's plan, in the fixed order fault, agent duration, turns, cost, pass.
    pub(super) fn draw(cfg: &SimConfig, seed: u64, arm: &str, attempt: u32) -> Self {
        let mut rng = SplitMix64::new(attempt_seed(seed, arm, attempt));
        let u = rng.next_f64();
        let mut acc = 0.0;
        let mut fault = None;
        for (f, p) in &cfg.faults {
            acc += p;
            if u < acc {
                fault = Some(*f);
                break;
            }
        }
        let agent_s = rng.range_f64(cfg.agent_s);
        let turns = rng.range_u32(cfg.turns);
        let cost_usd = rng.range_f64(cfg.cost_usd);
        let pass_rate = cfg
            .pass_rate
            .get(arm)
            .copied()
            .unwrap_or(cfg.default_pass_rate);
        let passed = rng.next_f64() < pass_rate;
        Self {
            fault,
            agent_s,
            turns,
            cost_usd,
            passed,
        }
    }
}
