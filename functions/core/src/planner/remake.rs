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

use std::collections::BTreeSet;

use super::Work;
use crate::record::{CapacityCall, Journal, OwnRaise};

/// How long after a raise another writer's undoing of it is looked for: twice
/// cluster-autoscaler's cache refresh (one missed refresh) and a scan, rounded up. Beyond
/// it a lower of a filled raise is another writer's own decision (a scale-in).
pub const STALE_WRITE_WINDOW: Duration = Duration::minutes(3);

/// How long a raise no instance has filled yet is watched: cluster-autoscaler deletes a
/// failed scale-up's slots, whoever asked for them, once the ASG reports the launch
/// failed or its `max-node-provision-time` (15 minutes by default) has passed since it
/// first saw them (its next refresh), then a scan. Its deletion takes capacity the
/// raise was made for: it is made again, and on a spot ASG kept off moves on.
pub const UNFILLED_WINDOW: Duration = Duration::minutes(20);

/// An ASG's last landed write in a journal.
struct LastWrite<'a> {
    asg: &'a str,
    /// The size read just before the write, and the size it set.
    from: u32,
    to: u32,
    /// What the decrements of ours landed after it left the ASG at.
    left_at: u32,
    /// The instances those decrements took (not counted as gone).
    taken: Vec<&'a str>,
    /// How much of the lower it meant to make another writer had made before it.
    made_before: u32,
}

impl Work<'_> {
    /// The raises of the last plan that landed join those kept; a landed lower ends
    /// what was kept for its ASG.
    pub(super) fn keep_own_raises(&mut self, journal: &Journal) {
        let mut last: Vec<LastWrite> = Vec::new();
        for call in journal.calls.iter().filter(|c| c.done()) {
            match call {
                CapacityCall::SetDesired { asg, from, to, planned_lower, .. } => {
                    last.retain(|w| w.asg != asg);
                    let made_before = planned_lower.saturating_sub(from.saturating_sub(*to));
                    last.push(LastWrite { asg, from: *from, to: *to, left_at: *to, taken: Vec::new(), made_before });
                }
                CapacityCall::Terminate { asg, instance_id, decrement: true, .. } => {
                    if let Some(write) = last.iter_mut().find(|w| w.asg == asg) {
                        write.left_at = write.left_at.saturating_sub(1);
                        write.taken.push(instance_id);
                    }
                }
                CapacityCall::Terminate { .. } => {}
            }
        }
        // Decrements of ours on an ASG this journal did not write: a raise kept there
        // holds one less (its instance then, or one launched into its slots since).
        for call in journal.calls.iter().filter(|c| c.done()) {
            if let CapacityCall::Terminate { asg, instance_id, decrement: true, .. } = call {
                if last.iter().any(|w| w.asg == asg) {
                    continue;
                }
                if let Some(kept) = self.record.raised.get_mut(asg) {
                    kept.to = kept.to.saturating_sub(1);
                    kept.live.retain(|id| id != instance_id);
                }
            }
        }
        // Slots made again that a rule moved on at once (the ASG kept off, no call on it
        // in this plan): made once the raise they moved onto landed, not to be made
        // again when the ASG is seen short of them.
        let raise_landed = |asg: &str| {
            journal.calls.iter().any(
                |c| matches!(c, CapacityCall::SetDesired { asg: a, from, to, .. } if a == asg && c.done() && to > from),
            )
        };
        for asg in &journal.remakes {
            let written =
                journal.calls.iter().any(|c| matches!(c, CapacityCall::SetDesired { asg: a, .. } if a == asg));
            let moved_on = journal.moves.iter().any(|m| &m.from == asg && raise_landed(&m.to));
            if let Some(kept) = self.record.raised.get_mut(asg).filter(|_| !written && moved_on) {
                kept.remade = true;
            }
        }
        let live_ids = self.observed.live_instance_ids();
        for LastWrite { asg, from, to, left_at, taken, made_before } in last {
            // A raise kept from before, undone before this write read the ASG (a stale
            // write between a look and the call, which apply rebased onto): still owed.
            // (Not if this write is the one that makes it again.)
            // The rest of it still stands under this write: its slots stay watched (a
            // failed scale-up's deletion takes them with this write's).
            let remakes = journal.remakes.iter().any(|a| a == asg);
            let (owed, standing) = match self.record.raised.get(asg) {
                Some(kept) => {
                    // Judged as the write found it: this journal's own decrements came after.
                    let mut then = kept.clone();
                    then.live.retain(|id| !taken.contains(&id.as_str()));
                    // A lower of Ballast's found made (the slots it moved out deleted
                    // first): what it meant to take is no raise undone.
                    let undone = self
                        .expected(asg, &then, &live_ids)
                        .saturating_sub(from)
                        .saturating_sub(made_before)
                        .min(kept.by);
                    // Slots already made again once are not watched again.
                    (if kept.remade || remakes { 0 } else { undone }, if kept.remade { 0 } else { kept.by - undone })
                }
                None => (0, 0),
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
                    by: to.saturating_sub(from) + owed + standing,
                    at: journal.planned_at,
                    live: live.into_iter().filter(|id| !taken.contains(&id.as_str())).collect(),
                    gone_before: journal.looked_at.get(asg).map_or(0, |looked| looked.saturating_sub(from)),
                    seen: Vec::new(),
                    seen_late: Vec::new(),
                    remade: journal.remakes.iter().any(|a| a == asg),
                };
                self.record.raised.insert(asg.to_string(), raise);
            } else {
                self.record.raised.remove(asg);
            }
        }
    }

    /// What a kept raise leaves the ASG at now, less the instances gone since the write
    /// (each explains a lower of one), or launched since and already leaving.
    fn expected(&self, name: &str, raise: &OwnRaise, live_ids: &BTreeSet<&str>) -> u32 {
        let Some(asg) = self.observed.asg(name) else { return 0 };
        let kept: BTreeSet<&str> = raise.live.iter().map(String::as_str).collect();
        let gone = raise
            .live
            .iter()
            .filter(|id| !live_ids.contains(id.as_str()))
            .count()
            .saturating_sub(raise.gone_before as usize)
            + asg.instances.iter().filter(|i| !i.lifecycle_state.is_live() && !kept.contains(i.id.as_str())).count();
        raise.to.saturating_sub(gone as u32)
    }

    /// Makes again, once, each kept raise another writer undid without removing an
    /// instance; forgets those found standing once the window is past (the longer one
    /// while instances have not filled it).
    pub(super) fn remake_undone_raises(&mut self) {
        let kept = std::mem::take(&mut self.record.raised);
        if kept.is_empty() {
            return;
        }
        // Looked up once: a thousand-instance pool asks of each of its raises' instances.
        let observed = self.observed;
        let live_ids = observed.live_instance_ids();
        let is_live = |id: &str| live_ids.contains(id);
        for (name, mut raise) in kept {
            let Some(asg) = self.observed.asg(&name) else { continue };
            // An instance EC2 took (a disruption on record, or the spot market's reclaim
            // EC2 tells of one no event told) left without lowering the ASG, which
            // replaces it: its going explains no lower.
            let disrupted = |id: &String| {
                self.record.disruptions.iter().any(|d| &d.instance_id == id)
                    || self.observed.left.get(id).is_some_and(|l| l.spot_reclaimed)
            };
            raise.live.retain(|id| is_live(id) || !disrupted(id));
            // An instance launched into the raise and gone since (not taken by EC2): seen
            // by a look past the stale-write window, its going explains a lower of one (a
            // scale-in of it); seen only before, it may have been killed to meet a stale
            // write: what it would explain is made again and named possible surplus.
            let past = self.now >= raise.at + STALE_WRITE_WINDOW;
            let gone_since = |ids: &[String]| ids.iter().filter(|id| !is_live(id) && !disrupted(id)).count() as u32;
            let late_gone = gone_since(&raise.seen_late);
            let early_gone = gone_since(&raise.seen).saturating_sub(late_gone);
            let expected = self.expected(&name, &raise, &live_ids).saturating_sub(late_gone);
            let gone = raise.to - expected;
            // Surges re-planned for the same missing slots are made again by the rules.
            let replanned = self.surges_replanned.get(&name).copied().unwrap_or(0);
            let undone = expected.saturating_sub(asg.desired).min(raise.by).saturating_sub(replanned);
            let planned = raise.at.to_rfc3339();
            let live: Vec<&str> =
                asg.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.as_str()).collect();
            let known = |ids: &[String]| -> BTreeSet<String> { raise.live.iter().chain(ids).cloned().collect() };
            let (seen, seen_late) = (known(&raise.seen), known(&raise.seen_late));
            for id in &live {
                if !seen.contains(*id) {
                    raise.seen.push(id.to_string());
                }
                if past && !seen_late.contains(*id) {
                    raise.seen_late.push(id.to_string());
                }
            }
            let live = live.len() as u32;
            if undone == 0 {
                let watched = if live >= expected { STALE_WRITE_WINDOW } else { UNFILLED_WINDOW };
                if self.now < raise.at + watched {
                    self.record.raised.insert(name, raise);
                }
                continue;
            }
            let what = format!(
                "{name} is at {}, {undone} below the {} Ballast's raise planned {planned} left it at (less {gone} \
                 instance(s) gone since): undone by another writer ({})",
                asg.desired,
                raise.to,
                if past {
                    "cluster-autoscaler deleting a failed scale-up's unfilled slots"
                } else {
                    "cluster-autoscaler writing from a size it read before the raise"
                }
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
            let doubtful = early_gone.min(n);
            self.leave_surplus(
                &name,
                doubtful,
                &format!(
                    "if {doubtful} of the instance(s) launched into the raise planned {planned} and gone since was \
                     scaled in rather than killed to meet a stale write"
                ),
            );
            // Kept as it is until this write lands (then the write is kept, as made again).
            self.record.raised.insert(name, raise);
        }
    }
}
