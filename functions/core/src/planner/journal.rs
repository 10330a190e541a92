//! What the last plan's capacity calls did, judged against what is observed now.
//!
//! Apply stops at the first failure and marks each call done as it succeeds, so of
//! the calls not marked done only the first may have been carried out (its answer was
//! lost, or the run died right after), and only if apply had reached it (`attempted`).
//! That one is judged, each doubt settled toward surplus rather than lost capacity
//! (the ASG's size cannot always tell our call from another writer's since): a raise
//! is taken as not landed and made again; a lower is finished if the ASG is still at
//! the size read before it, and otherwise taken as landed; what either may leave over
//! is left to cluster-autoscaler by a note. A termination landed if the instance is no
//! longer live. A call known to have landed is never repeated.

use super::{is_live, Work};
use crate::record::{CapacityCall, Journal, Move, OwedLower, SurgeMove};

impl Work<'_> {
    /// Settles the last plans' journals, oldest first: a surge made ahead of the full
    /// plan stacks its own on one whose calls all landed (`PoolRecord::surged_over`).
    /// That one's settling reads the ASG raised since by the surge; it only judges sizes
    /// against Ballast's own calls (a kept raise's, a waiting surge's), and the surge's
    /// journal, settled next, moves those on by what it did, as a later plan's would.
    pub(super) fn settle_journal(&mut self) {
        if let Some(earlier) = self.record.surged_over.take() {
            self.settle(earlier);
        }
        if let Some(journal) = self.record.journal.take() {
            self.settle(journal);
        }
    }

    fn settle(&mut self, journal: Journal) {
        let mut first_open = true;
        let mut raise_missed = false;
        // Lowers still to make, with the raises they answer (empty: this plan's own).
        let mut lowers_left: Vec<OwedLower> = Vec::new();
        let owed = |asg: &str, by: u32| {
            journal.owed.iter().filter(|f| f.asg == asg).fold((0u32, Vec::new()), |(n, mut raised), f| {
                raised.extend(f.raised.iter().cloned());
                ((n + f.by).min(by), raised)
            })
        };
        // Raises of that plan that were made: (ASG, size before, size after).
        let mut raised: Vec<(String, u32, u32)> = Vec::new();
        for (index, call) in journal.calls.iter().enumerate() {
            if call.done() {
                if let CapacityCall::SetDesired { asg, from, to, .. } = call {
                    if to > from {
                        raised.push((asg.clone(), *from, *to));
                    }
                }
                if let CapacityCall::Terminate { instance_id, decrement: false, .. } = call {
                    // Terminated without decrement (the ASG was at its minimum by then):
                    // the ASG replaces it, so a surge made for it is surplus.
                    self.surge_orphaned_by(instance_id);
                }
                continue;
            }
            let may_have_landed = std::mem::replace(&mut first_open, false) && index < journal.attempted;
            match call {
                CapacityCall::SetDesired { asg, from, to, .. } => {
                    let Some(observed) = self.observed.asg(asg) else {
                        // The ASG left the pool (taken out of the config): a raise on it
                        // is as good as never landed, so the lowers it answered are not
                        // finished as if it had. If it did land, what it added stays there,
                        // no longer Ballast's to withdraw: named.
                        if to > from {
                            raise_missed = true;
                            if may_have_landed {
                                let why = format!(
                                    "{asg} {from}->{to} (planned {}) may have landed though its answer was lost, and \
                                     {asg} has left the pool's config since",
                                    journal.planned_at.to_rfc3339()
                                );
                                self.leave_surplus(asg, to - from, &why);
                            }
                            self.raise_never_landed(asg, *from, *to, &journal);
                        }
                        continue;
                    };
                    let raise = to > from;
                    // Each doubt errs toward surplus, never loss: the ASG's size cannot
                    // always tell our call from another writer's since (cluster-autoscaler
                    // scaling up or in meanwhile). A raise whose answer was lost is taken
                    // as not landed and made again (taking cluster-autoscaler's raise for
                    // ours would consume it). A lower is finished only if the ASG is where
                    // it was before the call (a run that died before it: the common case);
                    // elsewhere another writer may have moved it since, and lowering again
                    // could take the slots it asked for: taken as landed, and the slots it
                    // would have removed are named as possible surplus. A raise is named
                    // as possible surplus only if the ASG moved since the size read before
                    // it: still there, it did not land (a throttled call, the common
                    // case), unless another writer took back exactly as much meanwhile.
                    if raise {
                        raise_missed = true;
                        // Lowers owed on this ASG were netted into its raise (a withdrawal
                        // and a move's receipt in one call): they are owed whatever the
                        // raise did, so a raise not landed carries them on.
                        let (by_owed, answers) = owed(asg, u32::MAX);
                        if may_have_landed && observed.desired != *from {
                            // Landed, the lowers netted into it landed too and its gross
                            // raise is made again; not landed, those lowers are not made:
                            // at most the two together are left over.
                            let why = format!(
                                "{asg} {from}->{to} (planned {}) may have landed though its answer was lost \
                                 (the ASG is at {} now); taken as not landed and made again",
                                journal.planned_at.to_rfc3339(),
                                observed.desired
                            );
                            self.leave_surplus(asg, (to - from) + by_owed, &why);
                        } else if by_owed > 0 {
                            lowers_left.push(OwedLower { asg: asg.clone(), by: by_owed, raised: answers });
                        }
                        self.raise_never_landed(asg, *from, *to, &journal);
                    } else if may_have_landed && observed.desired != *from {
                        let why = format!(
                            "{asg} {from}->{to} (planned {}) may have landed though its answer was lost \
                             (the ASG is at {} now): not repeated",
                            journal.planned_at.to_rfc3339(),
                            observed.desired
                        );
                        // If it did not land (another writer moved the ASG meanwhile,
                        // by any amount), its slots stay and fill once spot is back.
                        self.leave_surplus(asg, from - to, &why);
                    } else if !raise_missed {
                        lowers_left.push(OwedLower { asg: asg.clone(), by: from - to, raised: Vec::new() });
                    } else {
                        // This plan's own moves are re-planned, but for the receivers
                        // whose raise landed (a move split over several ASGs); what
                        // finishes an earlier move, whose raise landed, is still owed.
                        let (by_owed, mut answers) = owed(asg, from - to);
                        let landed: Vec<&Move> = journal
                            .moves
                            .iter()
                            .filter(|m| &m.from == asg && raised.iter().any(|(r, ..)| *r == m.to))
                            .collect();
                        let by_moves: u32 = landed.iter().map(|m| m.n).sum();
                        answers.extend(raised.iter().filter(|(r, ..)| landed.iter().any(|m| m.to == *r)).cloned());
                        let by = (by_owed + by_moves).min(from - to);
                        if by > 0 {
                            lowers_left.push(OwedLower { asg: asg.clone(), by, raised: answers });
                        }
                    }
                }
                CapacityCall::Terminate { asg, instance_id, decrement, withdraws, .. } => {
                    if !may_have_landed || is_live(self.observed, instance_id) {
                        if *withdraws {
                            // The replacement it withdrew is still surplus: withdrawn again.
                            let why = format!(
                                "the withdrawal of {instance_id} planned {} was not made",
                                journal.planned_at.to_rfc3339()
                            );
                            let left = self.withdraw(asg, 1, 0, &why);
                            self.leave_surplus(asg, left, &why);
                        } else {
                            self.termination_never_made(instance_id);
                        }
                        continue;
                    }
                    // Gone: our terminate-with-decrement, or another's removal before it
                    // (AWS reclaiming it, cluster-autoscaler scaling it in), which the
                    // ASG cannot tell apart. Taken as ours (withdrawing the surge could
                    // take cluster-autoscaler's slots); the surge it may leave over is said.
                    if *withdraws {
                        let why = format!(
                            "{instance_id} is gone, perhaps removed by another before Ballast's withdrawal \
                             (whose answer was lost): the replacement it withdrew may be surplus"
                        );
                        self.leave_surplus(asg, 1, &why);
                        continue;
                    }
                    if !*decrement {
                        // Gone as a terminate without decrement leaves it: taken as landed,
                        // as when its answer came (the ASG replaces it; its surge is surplus).
                        self.surge_orphaned_by(instance_id);
                        continue;
                    }
                    let surge = self.record.interruptions.iter().find(|i| &i.instance_id == instance_id);
                    if let (true, Some(surge)) = (*decrement, surge.and_then(|i| i.surge.clone())) {
                        let why = format!(
                            "{instance_id} is gone, perhaps removed by another before Ballast's terminate-with-decrement \
                             (whose answer was lost): its replacement may be surplus"
                        );
                        self.leave_surplus(&surge.asg, 1, &why);
                    }
                }
            }
        }
        // Finish the lowers owed (a move is raise, then lower), within what no instance
        // fills, so a lower never kills a live node; what cannot be lowered any more
        // (the giving ASG filled its slots meanwhile) is withdrawn from the raise.
        for OwedLower { asg: asg_name, by, raised: mut answers } in lowers_left {
            let Some(asg) = self.observed.asg(&asg_name) else { continue };
            if answers.is_empty() {
                answers = owed(&asg_name, by).1;
                answers.extend(raised.iter().cloned());
            }
            let n = by.min(self.unfilled(asg)).min(self.room_down(asg));
            if n > 0 {
                self.adjust(
                    &asg_name,
                    -i64::from(n),
                    format!("finish the lower planned {}", journal.planned_at.to_rfc3339()),
                );
                self.owed.push(OwedLower { asg: asg_name.clone(), by: n, raised: answers.clone() });
            }
            if n < by {
                self.note(format!(
                    "{} of the lower of {asg_name} planned {} no longer needed: its slots filled meanwhile",
                    by - n,
                    journal.planned_at.to_rfc3339()
                ));
                self.withdraw_unmatched_raises(&asg_name, by - n, &answers, &journal);
            }
        }
        self.keep_own_raises(&journal);
        self.surges_taken_since(&journal);
    }

    /// The surges waiting for their instance's terminate, judged against what the last
    /// plan's landed calls left their ASGs at. Each keeps the size Ballast's own calls
    /// leave its ASG at (`holds_at`: set from the plan whose raise made it, moved on by
    /// every later plan's calls there); an ASG now below it was lowered by another writer.
    /// Cluster-autoscaler does that to slots spot cannot fill: it deletes a failed
    /// scale-up's placeholders by setting the ASG to the instances it has, whoever asked
    /// for them. Up to that many surges there (the newest first: the likeliest unfilled)
    /// are re-planned as never made, so the next rules put them where capacity is now
    /// rather than their instances going with decrement and taking their own slots too;
    /// what they leave over if they were still there is named. (At apply time
    /// `raise_undone` judges the same against the calls made since.)
    fn surges_taken_since(&mut self, journal: &Journal) {
        let by_plan = |plan: u64, at| if journal.seq != 0 { plan == journal.seq } else { at == journal.planned_at };
        let mut asgs: Vec<String> = Vec::new();
        for interruption in self.record.interruptions.iter_mut().filter(|i| !i.terminated) {
            let Some(surge) = interruption.surge.as_mut() else { continue };
            let raised_by_that_plan =
                surge.moved.as_ref().map_or(by_plan(surge.plan, surge.planned_at), |m| m.plan == journal.seq);
            // A surge of a later plan (one made ahead, stacked on this journal) read its
            // ASG's size after this journal's calls: they do not move it on.
            let later = journal.seq != 0 && surge.moved.as_ref().map_or(surge.plan, |m| m.plan) > journal.seq;
            if let Some((left_at, change)) = journal.landed_on(&surge.asg).filter(|_| !later) {
                surge.holds_at = match (raised_by_that_plan, surge.holds_at, left_at) {
                    // What that plan's calls, rebased on the size read before them, left.
                    (true, _, Some(left_at)) => Some(left_at),
                    (_, Some(at), _) => u32::try_from((i64::from(at) + change).max(0)).ok(),
                    (_, None, _) => None,
                };
            }
            if surge.holds_at.is_some() && !asgs.contains(&surge.asg) {
                asgs.push(surge.asg.clone());
            }
        }
        for asg in asgs {
            let Some(desired) = self.observed.asg(&asg).map(|a| a.desired) else { continue };
            let waiting = |i: &crate::record::Interruption| {
                !i.terminated && i.surge.as_ref().is_some_and(|s| s.asg == asg && s.holds_at.is_some())
            };
            let holds_at = self
                .record
                .interruptions
                .iter()
                .filter(|i| waiting(i))
                .filter_map(|i| i.surge.as_ref()?.holds_at)
                .max();
            let Some(holds_at) = holds_at else { continue };
            let mut taken = holds_at.saturating_sub(desired);
            for index in (0..self.record.interruptions.len()).rev() {
                if !waiting(&self.record.interruptions[index]) {
                    continue;
                }
                if taken == 0 {
                    // The rest hold at most at what is there now.
                    if let Some(surge) = self.record.interruptions[index].surge.as_mut() {
                        surge.holds_at = surge.holds_at.map(|h| h.min(desired));
                    }
                    continue;
                }
                taken -= 1;
                *self.surges_replanned.entry(asg.clone()).or_default() += 1;
                let instance_id = self.record.interruptions[index].instance_id.clone();
                let why = format!(
                    "{asg} is at {desired}, below the {holds_at} Ballast's own calls left it at while {instance_id}'s \
                     surge there waited (its unfilled slots deleted by another writer, cluster-autoscaler's failed \
                     scale-up say): the surge is made again rather than {instance_id} going with decrement; if the \
                     first was still there"
                );
                self.leave_surplus(&asg, 1, &why);
                let interruption = &mut self.record.interruptions[index];
                interruption.surge = None;
                interruption.planned_at = None;
                // A fallback unit only if it replaced a spot instance on on-demand.
                let own_asg_on_demand = self.observed.is_on_demand(&interruption.asg);
                if self.observed.is_on_demand(&asg) && !own_asg_on_demand {
                    self.give_back_fallback_units(1);
                }
            }
        }
    }

    /// A move whose lower could not be finished (the giving ASG filled its slots
    /// meanwhile, e.g. spot capacity came back) leaves its raise as surplus: withdrawn
    /// from the receiving ASGs, never below their size before the raise, and what is
    /// a Ready node left to cluster-autoscaler. On-demand taken back is no fallback.
    fn withdraw_unmatched_raises(
        &mut self,
        giver: &str,
        mut surplus: u32,
        raised: &[(String, u32, u32)],
        journal: &Journal,
    ) {
        for (asg, from, to) in raised {
            if surplus == 0 {
                break;
            }
            let count = surplus.min(to - from);
            surplus -= count;
            // The giving ASG kept those slots: surges moved with them are there again.
            self.unmove_surges(asg, count, |m| m.from == giver);
            let why = format!("the move planned {} was not finished", journal.planned_at.to_rfc3339());
            // Below the raise's start the ASG has nothing of it left to withdraw: another
            // writer removed it, or a later move of Ballast's carried it on to another
            // ASG. The latter leaves it over there, so it is named either way.
            let floor = (*from).max(self.observed.asg(asg).map_or(0, |a| a.min));
            let gone = count.saturating_sub(self.after(asg).saturating_sub(floor));
            let left = self.withdraw(asg, count, *from, &why);
            self.leave_surplus(asg, left + gone, &why);
            if self.observed.is_on_demand(asg) {
                // `fallback_since` follows in `reconcile_fallback_units`.
                self.record.fallback_units = self.record.fallback_units.saturating_sub(count);
            }
        }
    }

    /// A raise that never landed: take back what the plan built on it, so the rules
    /// below decide afresh (a surge is made again, a fallback moved again).
    fn raise_never_landed(&mut self, asg: &str, from: u32, to: u32, journal: &Journal) {
        self.note(format!(
            "{asg} {from}->{to} (planned {}) did not land: re-planned from what is observed",
            journal.planned_at.to_rfc3339()
        ));
        // Promised by that plan: by its number (several plans may share an instant),
        // by its time in records kept before plans were numbered.
        let by_plan = |plan: u64, at| if journal.seq != 0 { plan == journal.seq } else { at == journal.planned_at };
        // Surges that plan moved here with a fallback's slots are still where they were.
        self.unmove_surges(asg, u32::MAX, |m| m.plan == journal.seq);
        for interruption in &mut self.record.interruptions {
            if interruption.surge.as_ref().is_some_and(|s| s.asg == asg && by_plan(s.plan, s.planned_at)) {
                interruption.surge = None;
                interruption.planned_at = None;
                interruption.terminated = false;
            }
        }
        if self.observed.is_on_demand(asg) {
            self.give_back_fallback_units(journal.units_added);
        }
        if self.record.failback.as_ref().is_some_and(|f| f.spot_asg == asg && by_plan(f.plan, f.started_at)) {
            self.record.failback = None;
        }
    }

    /// Surges moved into `asg` by a fallback whose move did not happen (`which`): back
    /// where they were, at most `count` of them.
    fn unmove_surges(&mut self, asg: &str, count: u32, which: impl Fn(&SurgeMove) -> bool) {
        let mut left = count;
        for interruption in &mut self.record.interruptions {
            if left == 0 {
                break;
            }
            let Some(surge) = interruption.surge.as_mut().filter(|s| s.asg == asg) else { continue };
            let Some(moved) = surge.moved.take_if(|m| which(m)) else { continue };
            surge.asg = moved.from;
            surge.holds_at = moved.holds_at;
            // Back in the spot ASG it was moved out of.
            surge.fallback_unit = false;
            left -= 1;
        }
    }

    /// A termination never made: whoever planned it plans it again.
    fn termination_never_made(&mut self, instance_id: &str) {
        if let Some(i) = self.record.interruptions.iter_mut().find(|i| i.instance_id == instance_id) {
            i.planned_at = None;
            i.terminated = false;
        }
    }

    fn surge_orphaned_by(&mut self, instance_id: &str) {
        if let Some(i) = self.record.interruptions.iter_mut().find(|i| i.instance_id == instance_id) {
            i.terminated = false;
        }
    }

    /// An interrupted instance that left (AWS reclaimed it, cluster-autoscaler scaled
    /// it in) before Ballast terminated it with decrement: its ASG replaces it or no
    /// longer wants it, so one instance is too many. The slot its own ASG reopened goes
    /// first (it may be unfilled: spot is often gone when instances are reclaimed, and a
    /// booting surge elsewhere is then worth keeping); else the surge where it now is;
    /// on-demand only within the fallback units it holds (cluster-autoscaler's own
    /// on-demand instances are never Ballast's to remove). What cannot be taken back
    /// without removing a Ready node is named.
    pub(super) fn withdraw_orphaned_surges(&mut self) {
        let od = self.observed.on_demand.as_ref().map(|od| od.name.clone());
        let is_od = |asg: &str| od.as_deref() == Some(asg);
        for index in 0..self.record.interruptions.len() {
            let interruption = self.record.interruptions[index].clone();
            if interruption.terminated || is_live(self.observed, &interruption.instance_id) {
                continue;
            }
            let Some(surge) = interruption.surge else { continue };
            let reason =
                format!("{} left before Ballast removed it; its replacement is surplus", interruption.instance_id);
            let own = interruption.asg.clone();
            let surge_on_od = is_od(&surge.asg) && !is_od(&own);
            let from = if self.withdraw_one(&own, &reason) {
                Some(own.clone())
            } else if surge.asg != own
                && (!surge_on_od || self.record.fallback_units > 0)
                && self.withdraw_one(&surge.asg, &reason)
            {
                Some(surge.asg.clone())
            } else {
                None
            };
            match from {
                // The surge on on-demand was a fallback unit; it is gone now.
                Some(asg) if is_od(&asg) && !is_od(&own) => {
                    self.record.fallback_units = self.record.fallback_units.saturating_sub(1);
                }
                Some(_) => {}
                None => {
                    let at = if surge_on_od && self.record.fallback_units == 0 { &own } else { &surge.asg };
                    self.leave_surplus(at, 1, &format!("{reason}; none of it can go without removing a Ready node"));
                }
            }
            let entry = &mut self.record.interruptions[index];
            entry.surge = None;
            entry.terminated = true;
        }
    }

    /// Takes one instance back from `asg` if that removes no Ready node and keeps it at
    /// or above its minimum (this plan's decrements counted).
    fn withdraw_one(&mut self, asg: &str, reason: &str) -> bool {
        let Some(observed) = self.observed.asg(asg) else { return false };
        self.room_down(observed) > 0 && self.withdraw(asg, 1, 0, reason) == 0
    }
}
