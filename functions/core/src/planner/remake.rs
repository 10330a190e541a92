//! Ballast's own raises undone by another writer, made again once.
//!
//! Cluster-autoscaler's AWS provider writes absolute sizes from its ASG cache:
//! `IncreaseSize(delta)` and `DecreaseTargetSize(delta)` call
//! `SetDesiredCapacity(curSize + delta)`, where `curSize` is refreshed from AWS at most
//! once a minute (`refreshInterval`) and otherwise moved only by its own writes. So for
//! up to a minute after a raise of Ballast's (a surge, a fallback move onto on-demand, a
//! failback step), cluster-autoscaler may set the ASG from the size before it, taking
//! the raise back without removing an instance.
//!
//! Each raise that landed is kept (`PoolRecord::raised`) with the ASG's instances live
//! when it was planned. A later look that finds the ASG below it by more than the
//! instances gone since (a terminate-with-decrement, or the ASG killing one to meet a
//! lower, explains a lower of one) takes the rest as undone and raises it again, once:
//! undone again, it is left (a writer that keeps winning is not fought), said in a note.
//! A lower of Ballast's raised again is not lowered again: the raise may be
//! cluster-autoscaler's for pending pods, and an unfillable slot it deletes itself.

use chrono::Duration;

use super::{is_live, Work};
use crate::record::{CapacityCall, Journal, OwnRaise};

/// How long after a raise another writer's undoing of it is looked for: twice
/// cluster-autoscaler's cache refresh (one missed refresh) and a scan, rounded up. Beyond
/// it a lower is another writer's own decision (a scale-in, deleting unfillable slots).
pub const STALE_WRITE_WINDOW: Duration = Duration::minutes(3);

impl Work<'_> {
    /// The raises of the last plan that landed join those kept; a landed lower ends
    /// what was kept for its ASG.
    pub(super) fn keep_own_raises(&mut self, journal: &Journal) {
        // Per ASG: its last landed write (from, to), what the decrements of ours landed
        // after it left the ASG at, and the instances those took (not counted as gone).
        let mut last: Vec<(&str, u32, u32, u32, Vec<&str>)> = Vec::new();
        for call in journal.calls.iter().filter(|c| c.done()) {
            match call {
                CapacityCall::SetDesired { asg, from, to, .. } => {
                    last.retain(|(a, ..)| a != asg);
                    last.push((asg, *from, *to, *to, Vec::new()));
                }
                CapacityCall::Terminate { asg, instance_id, decrement: true, .. } => {
                    if let Some((_, _, _, left_at, taken)) = last.iter_mut().find(|(a, ..)| a == asg) {
                        *left_at = left_at.saturating_sub(1);
                        taken.push(instance_id);
                    }
                }
                CapacityCall::Terminate { .. } => {}
            }
        }
        // Decrements of ours on an ASG this journal did not write: a raise kept there
        // holds one less (its instance then, or one launched into its slots since).
        for call in journal.calls.iter().filter(|c| c.done()) {
            if let CapacityCall::Terminate { asg, instance_id, decrement: true, .. } = call {
                if last.iter().any(|(a, ..)| a == asg) {
                    continue;
                }
                if let Some(kept) = self.record.raised.get_mut(asg) {
                    kept.to = kept.to.saturating_sub(1);
                    kept.live.retain(|id| id != instance_id);
                }
            }
        }
        for (asg, from, to, left_at, taken) in last {
            // A raise kept from before, undone before this write read the ASG (a stale
            // write between a look and the call, which apply rebased onto): still owed.
            // (Not if this write is the one that makes it again.)
            let remakes = journal.remakes.iter().any(|a| a == asg);
            let owed = match self.record.raised.get(asg) {
                Some(kept) if !kept.remade && !remakes => self.expected(asg, kept).saturating_sub(from).min(kept.by),
                _ => 0,
            };
            if to > from || owed > 0 {
                // A surge made ahead of the full plan was journaled without the ASG's
                // instances: they are taken from this look (its own launch among them,
                // whose going would explain a lower: erring toward not making it again).
                let live: Vec<String> = match journal.live.get(asg) {
                    Some(live) => live.clone(),
                    None => self.observed.asg(asg).map_or_else(Vec::new, |a| {
                        a.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.clone()).collect()
                    }),
                };
                let raise = OwnRaise {
                    to: left_at + owed,
                    by: to.saturating_sub(from) + owed,
                    at: journal.planned_at,
                    live: live.into_iter().filter(|id| !taken.contains(&id.as_str())).collect(),
                    remade: journal.remakes.iter().any(|a| a == asg),
                };
                self.record.raised.insert(asg.to_string(), raise);
            } else {
                self.record.raised.remove(asg);
            }
        }
    }

    /// What a kept raise leaves the ASG at now, less the instances gone since (each
    /// explains a lower of one), or launched since and already leaving.
    fn expected(&self, name: &str, raise: &OwnRaise) -> u32 {
        let Some(asg) = self.observed.asg(name) else { return 0 };
        let gone = raise.live.iter().filter(|id| !is_live(self.observed, id)).count()
            + asg.instances.iter().filter(|i| !i.lifecycle_state.is_live() && !raise.live.contains(&i.id)).count();
        raise.to.saturating_sub(gone as u32)
    }

    /// Makes again, once, each kept raise another writer undid without removing an
    /// instance; forgets those found standing once the window is past.
    pub(super) fn remake_undone_raises(&mut self) {
        let kept = std::mem::take(&mut self.record.raised);
        for (name, raise) in kept {
            let Some(asg) = self.observed.asg(&name) else { continue };
            let expected = self.expected(&name, &raise);
            let gone = raise.to - expected;
            // Surges re-planned for the same missing slots are made again by the rules.
            let replanned = self.surges_replanned.get(&name).copied().unwrap_or(0);
            let undone = expected.saturating_sub(asg.desired).min(raise.by).saturating_sub(replanned);
            let planned = raise.at.to_rfc3339();
            if undone == 0 {
                if self.now < raise.at + STALE_WRITE_WINDOW {
                    self.record.raised.insert(name, raise);
                }
                continue;
            }
            let what = format!(
                "{name} is at {}, {undone} below the {} Ballast's raise planned {planned} left it at (less {gone} \
                 instance(s) gone since): undone by another writer (cluster-autoscaler writing from a size it read \
                 before the raise)",
                asg.desired, raise.to
            );
            if raise.remade {
                self.note(format!("{what}, after it was made again once: not made a third time"));
                continue;
            }
            let n = undone.min(self.room_up(asg));
            if n == 0 {
                self.note(format!("{what}: not made again, {name} is at its maximum"));
                continue;
            }
            // On a spot ASG kept off, the slots made again move on with its other missing
            // ones (`fall_back`), as the raise's would have.
            self.note(format!("{what}: made again, once ({n})"));
            self.adjust(
                &name,
                i64::from(n),
                format!("make again {n} of the raise planned {planned}, undone by another writer"),
            );
            *self.remade.entry(name.clone()).or_default() += n;
            // Kept as it is until this write lands (then the write is kept, as made again).
            self.record.raised.insert(name, raise);
        }
    }
}
