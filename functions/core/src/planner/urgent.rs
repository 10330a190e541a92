//! A spot warning's surge made before the pool is observed.
//!
//! The full plan reads the whole pool first, and a pool's description lists every
//! instance of its ASGs: at a thousand instances that read is most of the time from the
//! warning to the replacement's request. When nothing in the record or the ASG's size
//! could make the full plan decide otherwise, the surge it would plan (the warned
//! instance's own ASG raised by one per warning) is planned from the ASG's size alone
//! and made at once; the full plan that follows in the same run finds it journaled and
//! done, and cordons, drains and terminates with decrement as for any surge. Whatever
//! the gate cannot rule out without the full read (another writer's stale size, a
//! capacity error in the scaling activities) the full plan settles as it settles any
//! earlier plan's surge.
//!
//! In a storm each batch's full plan leaves a journal the next look settles; a surge
//! made ahead stacks its own on it when every call of it landed, so the next batch's
//! replacements are asked for before its read as well. An ASG kept off by its
//! interruption rate still launches (a storm's warnings keep it off within a minute):
//! its replacements go where the full plan puts them, on-demand as fallback units while
//! it has room for the whole batch under the cap, else the ASG itself.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use crate::config::{check_one_role, AsgRef, AsgSelector, Config, PoolConfig};
use crate::event::InstanceAction;
use crate::observe::AsgSize;
use crate::record::{CapacityCall, Interruption, InterruptionCause, Journal, KeptOffBy, PoolRecord, Surge};

/// A spot warning older than its two minutes' notice may name an instance already
/// gone: planned in full, not ahead.
const WARNING_FRESH_FOR: Duration = Duration::minutes(2);

/// A spot warning for an instance of the pool, with the ASG it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warned {
    /// The EC2 instance id the warning names.
    pub instance_id: String,
    /// The ASG that holds the instance.
    pub asg: String,
    /// What EC2 will do to the instance: terminate, stop or hibernate it.
    pub action: InstanceAction,
    /// The warning's time (not ahead of now).
    pub at: DateTime<Utc>,
}

/// The record to save before the surge: the journal holds the one raise, and each warned
/// instance its interruption with the surge, not yet planned for its drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrgentSurge {
    /// The warned instances' ASG, raised by one per warning.
    pub asg: String,
    /// Its desired capacity as read.
    pub from: u32,
    /// The desired capacity to set.
    pub to: u32,
    /// The record with the surge journaled and each warned instance's interruption.
    pub record: PoolRecord,
}

/// The surge for `warned` (all in `size`'s ASG) planned from the record and that ASG's
/// size, or why it waits for the full plan. `tags`: the ASG's tags, when read (tag
/// selectors need them). `other_signals`: the batch's signals for the pool that are not
/// spot warnings (a capacity error, an instance lost), which the full plan may judge the
/// ASG by.
#[allow(clippy::too_many_arguments)]
pub fn urgent_surge(
    config: &Config,
    pool: &PoolConfig,
    record: &PoolRecord,
    warned: &[Warned],
    tags: Option<&BTreeMap<String, String>>,
    other_signals: usize,
    size: &AsgSize,
    on_demand: Option<&AsgSize>,
    now: DateTime<Utc>,
) -> Result<UrgentSurge, String> {
    let Some(asg) = warned.first().map(|w| w.asg.clone()) else { return Err("no spot warning".into()) };
    if config.dry_run || !pool.interruption.surge {
        return Err("dry run, or interruption.surge is off".into());
    }
    if other_signals > 0 {
        return Err(format!("the batch has {other_signals} other signal(s) for the pool"));
    }
    if warned.iter().any(|w| w.asg != asg) {
        return Err("the warnings are for instances of more than one ASG".into());
    }
    // One of this pool's spot ASGs and nothing else: another role taking it refuses the
    // pool when it is read. Tag selectors need the ASG's tags to rule that out.
    let by_tags = config
        .pools
        .iter()
        .any(|p| p.spot_asgs.iter().chain(&p.on_demand_asg).any(|s| matches!(s, AsgSelector::Tags(_))));
    let no_tags = BTreeMap::new();
    let tags = match tags {
        Some(tags) => tags,
        None if !by_tags => &no_tags,
        None => return Err(format!("{asg}'s tags were not read and a pool selects ASGs by tags")),
    };
    let spot = pool.spot_asgs.iter().any(|s| s.matches(&asg, tags));
    let on_demand_role = pool.on_demand_asg.as_ref().is_some_and(|s| s.matches(&asg, tags));
    let other_pool = check_one_role(pool, &config.pools, [AsgRef { name: &asg, tags }]).is_err();
    if !spot || on_demand_role || other_pool {
        return Err(format!("{asg} is not one of the pool's spot ASGs alone"));
    }
    if warned.iter().any(|w| now - w.at >= WARNING_FRESH_FOR) {
        return Err("a warning is older than its two minutes' notice".into());
    }
    // Settling a journal needs the pool read; one whose calls all landed is settled
    // first and this surge's after it (`PoolRecord::surged_over`). A call that may not
    // have landed is judged by the full plan before anything is stacked on it.
    if record.surged_over.is_some() {
        return Err("two plans' journals wait to be settled already".into());
    }
    if record.journal.as_ref().is_some_and(|j| !j.calls.iter().all(CapacityCall::done)) {
        return Err("a call of the last plan may not have landed: the full plan judges it first".into());
    }
    if record.failback.is_some() || record.short_since.contains_key(&asg) {
        return Err(format!("{asg} is short of instances, or a failback step is in progress"));
    }
    // Instances planned for already (a redelivered warning, a terminate lifecycle action)
    // get nothing more; the rest of the batch goes ahead.
    let known = |id: &str| {
        record.interruptions.iter().any(|i| i.instance_id == id)
            || record.lifecycle_actions.iter().any(|l| l.instance_id == id)
    };
    let mut ids: Vec<&str> = warned.iter().map(|w| w.instance_id.as_str()).filter(|id| !known(id)).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Err("every warned instance is planned for already".into());
    }
    let k = ids.len() as u32;
    let rate = pool.fallback.interruption_rate;
    let kept_off = match record.unavailable.get(&asg).filter(|u| u.until > now) {
        Some(u) if u.by == KeptOffBy::Capacity => {
            return Err(format!("{asg} is kept off by a capacity error: a raise there fills nothing"));
        }
        Some(_) => true,
        None => record.disruptions_since(&asg, now - rate.window.as_chrono()) + k >= rate.count,
    };
    let target = if kept_off { kept_off_target(pool, record, &asg, on_demand, k, now)? } else { Target::Own };
    // The decrements that follow must leave it above its minimum, and the raise fit:
    // here, or (a replacement elsewhere) on on-demand, the ASG above its minimum after
    // every decrement (else it would replace the instances too).
    let (surge_asg, from, fallback_unit) = match target {
        Target::Own => {
            if size.desired <= size.min || size.desired.saturating_add(k) > size.max {
                return Err(format!(
                    "{asg} is at {} (min {}, max {}): no room for {k} surge(s)",
                    size.desired, size.min, size.max
                ));
            }
            (asg.clone(), size.desired, false)
        }
        Target::OnDemand { name, desired } => {
            if size.desired < size.min.saturating_add(k) {
                return Err(format!(
                    "{asg} is at {} (min {}): {k} replacement(s) on on-demand would be second ones",
                    size.desired, size.min
                ));
            }
            (name, desired, true)
        }
    };
    let seq = record.plans + 1;
    let to = from + k;
    let mut next = record.clone();
    next.plans = seq;
    next.surged_over = next.journal.take();
    let units_added = if fallback_unit { k } else { 0 };
    if fallback_unit {
        next.fallback_units += k;
        next.fallback_since.get_or_insert(now);
    }
    next.journal = Some(Journal {
        planned_at: now,
        seq,
        units_added,
        calls: vec![CapacityCall::SetDesired { asg: surge_asg.clone(), from, to, planned_lower: 0, done: false }],
        // Made at once, after this record is saved.
        attempted: 1,
        owed: Vec::new(),
        moves: Vec::new(),
        // Unknown without the instances: the full plan that settles the call takes them
        // from its own look (`keep_own_raises`).
        live: Default::default(),
        looked_at: Default::default(),
        remakes: Vec::new(),
    });
    for w in warned {
        if !ids.contains(&w.instance_id.as_str()) || next.interruptions.iter().any(|i| i.instance_id == w.instance_id) {
            continue;
        }
        next.interruptions.push(Interruption {
            instance_id: w.instance_id.clone(),
            asg: asg.clone(),
            cause: InterruptionCause::SpotWarning { action: w.action },
            noticed_at: w.at,
            // Left for the full plan: it cordons, drains and terminates (a planned time
            // would hold those back for the drain's length).
            planned_at: None,
            surge: Some(Surge {
                asg: surge_asg.clone(),
                planned_at: now,
                plan: seq,
                moved: None,
                holds_at: Some(from),
                fallback_unit,
            }),
            terminated: false,
        });
    }
    Ok(UrgentSurge { asg: surge_asg, from, to, record: next })
}

/// Where the replacements for a spot ASG kept off go.
enum Target {
    /// The ASG itself: nowhere else can take them.
    Own,
    /// The pool's on-demand ASG, within the fallback cap: fallback units.
    OnDemand { name: String, desired: u32 },
}

/// Where the replacements for `k` warnings in an ASG kept off by its interruption rate
/// (or reaching it with them) go, as the full plan places them: another spot ASG not
/// kept off first (left to the full plan, which knows its room), then on-demand within
/// the fallback cap, else the ASG itself. Told from the record, and from the on-demand
/// ASG's size (`on_demand`, when read).
fn kept_off_target(
    pool: &PoolConfig,
    record: &PoolRecord,
    asg: &str,
    on_demand: Option<&AsgSize>,
    k: u32,
    now: DateTime<Utc>,
) -> Result<Target, String> {
    for selector in &pool.spot_asgs {
        match selector {
            AsgSelector::Name(name) if name == asg => {}
            AsgSelector::Name(name) if record.unavailable.get(name).is_some_and(|u| u.until > now) => {}
            AsgSelector::Name(name) => {
                return Err(format!("{asg} is kept off by its interruption rate and {name} may take the replacement"));
            }
            AsgSelector::Tags(_) => {
                return Err(format!(
                    "{asg} is kept off by its interruption rate and the pool selects other spot ASGs by tags"
                ));
            }
        }
    }
    let name = match &pool.on_demand_asg {
        None => return Ok(Target::Own),
        Some(AsgSelector::Name(name)) => name,
        Some(AsgSelector::Tags(_)) => {
            return Err(format!("{asg} is kept off by its interruption rate and on-demand is selected by tags"))
        }
    };
    let Some(od) = on_demand else {
        return Err(format!("{asg} is kept off by its interruption rate and on-demand's size was not read"));
    };
    let units_left = pool.fallback.max_on_demand.saturating_sub(record.fallback_units);
    let room = od.max.saturating_sub(od.desired);
    match units_left.min(room) {
        0 => Ok(Target::Own),
        n if n >= k => Ok(Target::OnDemand { name: name.clone(), desired: od.desired }),
        n => Err(format!(
            "{asg} is kept off by its interruption rate and on-demand takes {n} of {k} replacement(s): the full plan \
             splits them"
        )),
    }
}
