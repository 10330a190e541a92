//! Simulated time: milliseconds since the scenario's start.

pub const SECOND: u64 = 1000;
pub const MINUTE: u64 = 60 * SECOND;
pub const HOUR: u64 = 60 * MINUTE;
pub const DAY: u64 = 24 * HOUR;

/// A scenario's duration on the simulated clock.
pub fn ms(d: ballast_core::units::HumanDuration) -> u64 {
    d.0.as_millis() as u64
}
