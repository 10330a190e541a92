//! When the in-cluster forwarder publishes a pool's demand (`Pool Demand Changed`) and its
//! unschedulable pods (`Pods Unschedulable`). The forwarder and the simulator's stand-in
//! for it both ask here, so the simulated one speaks when the real one would.

use std::time::Duration;

/// A pool's workload requests, as the forwarder totals them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// The sum of the pods' CPU requests, in millicores.
    pub cpu_millis: u64,
    /// The sum of the pods' memory requests, in bytes.
    pub memory_bytes: u64,
    /// How many pods were counted.
    pub pods: u32,
}

/// How often a pool's demand is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandTiming {
    /// At most one demand event per pool within this window.
    pub debounce: Duration,
    /// A demand event per pool at least this often, changed or not.
    pub heartbeat: Duration,
    /// Demand must move by more than this (percent of CPU, memory or pods) to count.
    pub threshold_percent: u32,
}

impl Default for DemandTiming {
    fn default() -> Self {
        DemandTiming { debounce: Duration::from_secs(30), heartbeat: Duration::from_secs(300), threshold_percent: 5 }
    }
}

impl Requests {
    /// Whether these moved from `then` by more than `percent` in CPU, memory or pods.
    pub fn moved_from(&self, then: &Requests, percent: u32) -> bool {
        let beyond = |a: u64, b: u64| a.abs_diff(b).saturating_mul(100) > b.saturating_mul(u64::from(percent));
        beyond(self.cpu_millis, then.cpu_millis)
            || beyond(self.memory_bytes, then.memory_bytes)
            || beyond(u64::from(self.pods), u64::from(then.pods))
    }
}

impl DemandTiming {
    /// Whether `now` is published, given what was published last and how long ago
    /// (`None`: nothing yet, so at once).
    pub fn due(&self, last: Option<(Requests, Duration)>, now: &Requests) -> bool {
        match last {
            None => true,
            Some((then, ago)) => {
                ago >= self.heartbeat || (ago >= self.debounce && now.moved_from(&then, self.threshold_percent))
            }
        }
    }

    /// How long until it is due if nothing changes: a move waits out the debounce, no
    /// move the heartbeat.
    pub fn due_in(&self, last: Option<(Requests, Duration)>, now: &Requests) -> Duration {
        match last {
            None => Duration::ZERO,
            Some((then, ago)) => {
                let wait = if now.moved_from(&then, self.threshold_percent) { self.debounce } else { self.heartbeat };
                wait.saturating_sub(ago)
            }
        }
    }
}

/// How often a pool's unschedulable pods are reported: at once for the first, then for
/// pods newly unschedulable, at most once per `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnschedulableTiming {
    /// At most one report per pool within this window, for pods that became
    /// unschedulable since the last.
    pub every: Duration,
}

impl Default for UnschedulableTiming {
    fn default() -> Self {
        UnschedulableTiming { every: Duration::from_secs(5) }
    }
}

impl UnschedulableTiming {
    /// Whether a report is due: `newest` is when the newest unschedulable pod became so,
    /// `last` the newest already reported and how long ago.
    pub fn due<T: PartialOrd>(&self, last: Option<(T, Duration)>, newest: T) -> bool {
        match last {
            None => true,
            Some((reported, ago)) => newest > reported && ago >= self.every,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_published_on_a_move_past_the_debounce_or_at_the_heartbeat() {
        let timing = DemandTiming::default();
        let then = Requests { cpu_millis: 10_000, memory_bytes: 20 << 30, pods: 10 };
        let up = Requests { cpu_millis: 10_600, ..then };
        let s = Duration::from_secs;
        assert!(timing.due(None, &then), "the first at once");
        assert!(!timing.due(Some((then, s(10))), &up), "within the debounce");
        assert_eq!(timing.due_in(Some((then, s(10))), &up), s(20));
        assert!(timing.due(Some((then, s(30))), &up), "6 % after the debounce");
        let little = Requests { cpu_millis: 10_500, ..then };
        assert!(!timing.due(Some((then, s(100))), &little), "5 % is not more than 5 %");
        assert_eq!(timing.due_in(Some((then, s(100))), &little), s(200));
        assert!(timing.due(Some((then, s(300))), &then), "heartbeat");
        let fewer = Requests { pods: 9, ..then };
        assert!(timing.due(Some((then, s(30))), &fewer), "pods count too: 10 % fewer");
    }

    #[test]
    fn unschedulable_pods_are_reported_when_new_at_most_every_five_seconds() {
        let timing = UnschedulableTiming::default();
        let s = Duration::from_secs;
        assert!(timing.due(None, 100), "the first at once");
        assert!(!timing.due(Some((100, s(60))), 100), "the same pods again: no");
        assert!(!timing.due(Some((100, s(4))), 101), "a new one within 5 s waits");
        assert!(timing.due(Some((100, s(5))), 101));
    }
}
