//! The hold on a wait target's decision: the pause pods it asked for stay at least one
//! lead time, so that the room does not swing down and back up while a burst it was
//! placed for can still come (a rise leaving the span just before its window is judged).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// The last count a wait target asked for that the pods did not fall from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The pause pods asked for.
    pub replicas: u32,
    /// When they were last asked for (or more).
    pub at: DateTime<Utc>,
    /// The pool's CPU requests then, in millicores.
    pub demand_cpu_millis: u64,
}

impl Hold {
    /// What runs when `wanted` pause pods are asked for at `now`: a rise at once; a fall
    /// only one `lead` time after the count held was last asked for, or at once when
    /// demand fell by more than the room the fall gives back (`pod_cpu_millis` a pod:
    /// the pods it was for are gone). Returns the count and, while held, until when.
    /// A rise in demand keeps the hold: the room is there for it.
    pub fn keep(
        hold: &mut Option<Hold>,
        wanted: u32,
        now: DateTime<Utc>,
        demand_cpu_millis: u64,
        pod_cpu_millis: u64,
        lead: Duration,
    ) -> (u32, Option<DateTime<Utc>>) {
        if let Some(h) = *hold {
            let until = h.at + lead;
            let given_back = u64::from(h.replicas.saturating_sub(wanted)).saturating_mul(pod_cpu_millis);
            let fell = h.demand_cpu_millis.saturating_sub(demand_cpu_millis);
            if wanted < h.replicas && now < until && now >= h.at && fell <= given_back {
                return (h.replicas, Some(until));
            }
        }
        *hold = Some(Hold { replicas: wanted, at: now, demand_cpu_millis });
        (wanted, None)
    }
}
