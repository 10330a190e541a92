//! Cluster-autoscaler's moves as its AWS provider makes them (cloudprovider/aws): sizes
//! written from its ASG cache, not from the ASG.
//! - `IncreaseSize(delta)` sets `curSize + delta` (refused past max), `curSize` being the
//!   cache's, refreshed from AWS at most once a minute (`refreshInterval`) and otherwise
//!   moved only by its own writes (`setAsgSizeNoLock`, `DeleteInstances`' `curSize--`);
//!   so within a minute of a refresh it can set an ASG from a size read before another
//!   writer's change, and undo it;
//! - `DeleteNodes`: TerminateInstanceInAutoScalingGroup with decrement (AWS decrements
//!   the live size), and the next loop refreshes the cache;
//! - a failed scale-up's placeholders: the ASG read afresh and set to the instances it
//!   has, whoever asked for the unfilled slots.
//!
//! Each move returns what it did to the pool's capacity beyond its own intent: the slots
//! of others it deleted (`taken`), which the pool-capacity invariant holds Ballast to.

use std::collections::{BTreeMap, BTreeSet};

use ballast_core::observe::LifecycleState;
use ballast_core::testing::World;
use chrono::{DateTime, Duration, Utc};

use super::{CaMove, OD, SPOT};

/// The AWS provider's `refreshInterval`.
const REFRESH: i64 = 60;

/// The AWS provider's ASG cache.
#[derive(Debug, Default)]
pub struct Cache {
    /// `curSize` per ASG.
    cur: BTreeMap<String, u32>,
    /// When it last refreshed (`None`: at the next loop, as after `DeleteInstances`).
    refreshed: Option<DateTime<Utc>>,
}

/// What a move did.
#[derive(Debug, Default)]
pub struct Done {
    /// The ASG it wrote, and by how much the write raised or lowered it.
    pub changed: Option<(String, i64)>,
    /// Instances it scaled in (each may have been a surplus Ballast left it).
    pub scaled_in: u32,
    /// Slots another writer asked for that the move deleted: a write from a stale size
    /// that lands below the ASG's, or unfulfillable slots of Ballast's removed with its own.
    pub taken: u32,
}

impl Cache {
    /// `Refresh`, called before every loop: a no-op within a minute of the last one.
    fn refresh(&mut self, world: &World, now: DateTime<Utc>) {
        if self.refreshed.is_some_and(|at| now < at + Duration::seconds(REFRESH)) {
            return;
        }
        self.cur = world.asgs.iter().map(|a| (a.name.clone(), a.desired)).collect();
        self.refreshed = Some(now);
    }

    /// Carries out the move at `now`. `ballast_unfilled`: slots per ASG a raise of
    /// Ballast's asked for that no instance fills yet (what an unfulfillable-slot deletion
    /// takes of Ballast's).
    pub fn act(
        &mut self,
        world: &mut World,
        m: CaMove,
        backed_off: &BTreeSet<String>,
        ballast_unfilled: &BTreeMap<String, u32>,
        now: DateTime<Utc>,
    ) -> Done {
        self.refresh(world, now);
        let names: Vec<&str> = SPOT.iter().copied().chain([OD]).collect();
        let mut done = Done::default();
        match m {
            CaMove::None => {}
            CaMove::ScaleOut { asg, by } => {
                let name = names[asg % names.len()];
                let Some(a) = world.asg_mut(name).filter(|_| !backed_off.contains(name)) else { return done };
                let cur = self.cur.get(name).copied().unwrap_or(a.desired);
                if cur + by > a.max {
                    // "size increase too large": nothing written.
                    return done;
                }
                let to = cur + by;
                // Another writer's raise since the cache read is undone as far as the write
                // lands below the ASG (CA's own request absorbed in it, it makes again
                // after its next refresh, the pods still pending).
                done.taken = a.desired.saturating_sub(to);
                done.changed = Some((name.to_string(), i64::from(to) - i64::from(a.desired)));
                a.desired = to;
                self.cur.insert(name.to_string(), to);
            }
            CaMove::ScaleIn { asg, pick } => done.scaled_in = self.scale_in(world, names[asg % names.len()], pick),
            CaMove::RemoveIdleOnDemand { pick } => done.scaled_in = self.scale_in(world, OD, pick),
            CaMove::DeleteUnfulfillable { asg } => {
                let name = names[asg % names.len()];
                let Some(a) = world.asg_mut(name).filter(|_| backed_off.contains(name)) else { return done };
                let instances = (a.instances.len() as u32).max(a.min);
                let deleted = a.desired.saturating_sub(instances);
                a.desired -= deleted;
                done.scaled_in = deleted;
                done.taken = deleted.min(ballast_unfilled.get(name).copied().unwrap_or(0));
                done.changed = Some((name.to_string(), -i64::from(deleted)));
                self.cur.insert(name.to_string(), a.desired);
                self.refreshed = None;
            }
        }
        done
    }

    /// `DeleteNodes`: terminate with decrement; `curSize--`; a refresh next loop.
    fn scale_in(&mut self, world: &mut World, asg: &str, pick: usize) -> u32 {
        let Some(a) = world.asg_mut(asg) else { return 0 };
        let live: Vec<usize> =
            (0..a.instances.len()).filter(|i| a.instances[*i].lifecycle_state == LifecycleState::InService).collect();
        let cur = self.cur.get(asg).copied().unwrap_or(a.desired);
        // `DeleteNodes` refuses at the cached minimum; AWS at the live one.
        if live.is_empty() || cur <= a.min || a.desired <= a.min {
            return 0;
        }
        let i = live[pick % live.len()];
        a.instances[i].lifecycle_state = LifecycleState::Terminating;
        a.desired -= 1;
        self.cur.insert(asg.to_string(), cur - 1);
        self.refreshed = None;
        1
    }
}
