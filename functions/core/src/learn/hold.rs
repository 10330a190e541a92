//! The hold on a wait target's decision: the pause pods it asked for stay at least one
//! lead time, so that the room does not swing down and back up while a burst it was
//! placed for can still come (a rise leaving the span just before its window is judged).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::Rise;

/// The last count a wait target asked for that the pods did not fall from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The pause pods asked for.
    pub replicas: u32,
    /// When they were last asked for (or more).
    pub at: DateTime<Utc>,
    /// The pool's CPU requests then, in millicores.
    pub demand_cpu_millis: u64,
    /// The pool's memory requests then, in bytes (`None` in records from before it was
    /// kept: a rise in memory is then not seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demand_memory_bytes: Option<u64>,
}

/// The pool's demand as a decision sees it (see [`Hold::keep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandSeen {
    /// The pool's requests.
    pub requests: Rise,
    /// Pods of the window's predicted rise came today (see `Prediction::rise_came`).
    pub rise_came: bool,
    /// Waits spend little of the target's 5 % (see `History::within_budget`).
    pub may_wait: bool,
}

impl Hold {
    /// What runs when `wanted` pause pods are asked for at `now`: a rise at once; a fall
    /// only one `lead` time after the count held was last asked for, or at once when
    /// demand fell by more than the room the fall gives back (`pod` the requests of one:
    /// the pods it was for are gone). When demand rose as the predicted rise came, the
    /// pause pods its pods preempted (in CPU or memory, the more) are let go at once,
    /// down to `wanted` (the pods still running stay held). Held, they would stay pending
    /// and have cluster-autoscaler launch nodes for them: only waste when the rise fit in
    /// the room held; when it did not, those nodes are Ready beside the ones launched for
    /// its waiting pods, which take the first Ready, so they are let go only while waits
    /// spend little of the target's 5 % (`seen.may_wait`). Returns the count and, while
    /// held, until when. Any other rise in demand keeps the hold: the room is there for it.
    pub fn keep(
        hold: &mut Option<Hold>,
        wanted: u32,
        now: DateTime<Utc>,
        seen: DemandSeen,
        pod: Rise,
        lead: Duration,
    ) -> (u32, Option<DateTime<Utc>>) {
        let (demand_cpu_millis, demand_memory_bytes) = (seen.requests.cpu_millis, Some(seen.requests.memory_bytes));
        let (pod_cpu_millis, pod_memory_bytes) = (pod.cpu_millis, pod.memory_bytes);
        if let Some(h) = *hold {
            let until = h.at + lead;
            let given_back = u64::from(h.replicas.saturating_sub(wanted)).saturating_mul(pod_cpu_millis);
            let fell = h.demand_cpu_millis.saturating_sub(demand_cpu_millis);
            // The pause pods the rise preempted, CPU's and memory's (none in memory
            // against a record that did not keep it).
            let rose = demand_cpu_millis.saturating_sub(h.demand_cpu_millis);
            let rose_memory = h.demand_memory_bytes.map_or(0, |then| seen.requests.memory_bytes.saturating_sub(then));
            let pods = |rose: u64, pod: u64| u32::try_from(rose.div_ceil(pod.max(1))).unwrap_or(u32::MAX);
            let took = pods(rose, pod_cpu_millis).max(pods(rose_memory, pod_memory_bytes));
            let preempted = if seen.rise_came && (took <= h.replicas || seen.may_wait) { took } else { 0 };
            if wanted < h.replicas && now < until && now >= h.at && fell <= given_back {
                // The pause pods the rise's pods preempted are not held; those still
                // running are (room held beyond the rise, a correction's, stays its lead
                // time). Kept as the count held, so that pods leaving do not bring them back.
                let kept = h.replicas.saturating_sub(preempted);
                if kept > wanted {
                    if preempted > 0 {
                        *hold = Some(Hold { replicas: kept, demand_cpu_millis, demand_memory_bytes, ..h });
                    }
                    return (kept, Some(until));
                }
            }
        }
        *hold = Some(Hold { replicas: wanted, at: now, demand_cpu_millis, demand_memory_bytes });
        (wanted, None)
    }
}
