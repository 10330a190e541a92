use chrono::{TimeZone, Weekday};
use proptest::prelude::*;

use super::correction::{CORRECTION_RANGE, MAX_HOUR_WINDOWS};
use super::held::MAX_HELD;
use super::lead::{LEAD_SAMPLES, MAX_LAUNCHING};
use super::reaction::MAX_ARRIVALS;
use super::seasonal::MAX_RECENT;
use super::*;
use crate::observe::{ActivityStatus, AsgInstance, LifecycleState, Market, NodeState, ObservedAsg, ScalingActivity};

/// Monday 2026-11-02 00:00 UTC.
fn monday() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap()
}

fn empty_pool() -> ObservedPool {
    ObservedPool { spot: vec![], on_demand: None, nodes: vec![], headroom_replicas: None, demand: None }
}

fn demand_at(cpu_millis: u64, at: DateTime<Utc>) -> Demand {
    Demand { cpu_millis, memory_bytes: cpu_millis << 20, pods: 1, observed_at: at }
}

/// The forwarder's five-minute window ending `m` minutes after Monday 00:00: `pods`
/// started, the p95 (and the longest) wait `p95_ms`.
fn five_minutes_to(m: i64, pods: u32, p95_ms: u64) -> WaitsSeen {
    let end = monday() + Duration::minutes(m);
    WaitsSeen { over: None, window_start: end - Duration::minutes(5), window_end: end, pods, p95_ms, max_ms: p95_ms }
}

/// Observes the pool each minute from `from` for `minutes`, demand given by `cpu_at`.
fn watch(h: &mut History, from: DateTime<Utc>, minutes: i64, days: usize, cpu_at: impl Fn(DateTime<Utc>) -> u64) {
    for m in 0..minutes {
        let now = from + Duration::minutes(m);
        h.observe(&empty_pool(), Some(demand_at(cpu_at(now), now)), now, days);
    }
}

/// 10 CPU, rising to 40 CPU over 09:00–09:05 (on the days `ramps` allows), back at 17:00.
fn ramp_at_nine(ramps: impl Fn(Weekday) -> bool) -> impl Fn(DateTime<Utc>) -> u64 {
    move |t| {
        let minutes = i64::from(t.hour() * 60 + t.minute());
        if !ramps(t.weekday()) || !(9 * 60..17 * 60).contains(&minutes) {
            return 10_000;
        }
        10_000 + 6_000 * (minutes - 9 * 60 + 1).min(5) as u64
    }
}

use chrono::Datelike;

#[test]
fn a_rise_within_one_lead_time_goes_into_its_slot() {
    let mut h = History::default();
    let t0 = monday() + Duration::hours(9);
    for (minute, cpu) in [(0, 10_000), (1, 14_000), (2, 20_000), (10, 20_000)] {
        let now = t0 + Duration::minutes(minute);
        h.observe(&empty_pool(), Some(demand_at(cpu, now)), now, 14);
    }
    let day = &h.seasonal.days[0];
    // 09:00–09:15: 10 CPU more within the assumed 180 s lead time; 10 minutes later
    // nothing rose, which does not lower the slot's largest rise.
    assert_eq!(day.cpu_millis[36], Some(10_000));
    assert_eq!(day.memory_mib[36], Some(10_000));
    assert_eq!(day.cpu_millis[35], None, "nothing observed in 08:45–09:00");
    // A rise spread over more than one lead time counts only the part within one.
    let mut slow = History::default();
    watch(&mut slow, t0, 20, 14, |t| 10_000 + 1_000 * (t - t0).num_minutes() as u64);
    assert_eq!(
        slow.seasonal.days[0].cpu_millis[36],
        Some(4_000),
        "1 CPU a minute over 180 s of lead and 10 s of CA, from the sample before"
    );
}

#[test]
fn a_daily_ramp_is_met_with_room_placed_before_it() {
    let mut h = History::default();
    let days = 14;
    watch(&mut h, monday(), 2 * 24 * 60 + 8 * 60 + 55, days, ramp_at_nine(|_| true));
    // Wednesday 08:55: the 09:00 ramp of Monday and Tuesday is ahead (within 2 lead times).
    let now = monday() + Duration::days(2) + Duration::minutes(8 * 60 + 55);
    let p = h.predict(now, days);
    let (rise, basis) = p.seasonal.expect("two days watched");
    assert_eq!(basis, Basis::TimeOfDay { days: 2 });
    assert_eq!(
        rise.cpu_millis, 24_000,
        "four minutes of a 6 CPU/min ramp: the 190 s span reaches back to the sample before it"
    );
    assert!(!p.lead_observed);
    assert_eq!(p.room().0, 24_000.0);
    // 03:00: nothing rises then.
    let night = monday() + Duration::days(2) + Duration::hours(3);
    let mut at_night = History::default();
    watch(&mut at_night, monday(), 2 * 24 * 60 + 3 * 60, days, ramp_at_nine(|_| true));
    let (rise, basis) = at_night.predict(night, days).seasonal.unwrap();
    assert_eq!((rise.cpu_millis, basis), (0, Basis::TimeOfDay { days: 2 }));
}

#[test]
fn a_longer_allowed_wait_needs_less_room_and_none_once_a_node_comes_within_it() {
    let ramp = ramp_at_nine(|_| true);
    for (allowed_ms, expected) in [(0, 24_000), (70_000, 12_000), (130_000, 6_000), (190_000, 0), (600_000, 0)] {
        let mut h = History { allowed_wait_ms: allowed_ms, ..Default::default() };
        watch(&mut h, monday() + Duration::hours(8), 70, 14, &ramp);
        let rise = h.seasonal.days[0].cpu_millis[36];
        assert_eq!(rise, Some(expected), "allowed {allowed_ms} ms: span {}", h.absorb_span());
    }
}

#[test]
fn a_weekly_ramp_is_learned_by_time_of_week_once_two_weeks_show_it() {
    let mut h = History::default();
    let days = 14;
    let mondays = ramp_at_nine(|d| d == Weekday::Mon);
    // Two weeks and a day: Tuesday 2026-11-17, 08:55.
    let watched = (15 * 24 + 8) * 60 + 55;
    watch(&mut h, monday(), watched, days, &mondays);
    let tuesday = monday() + Duration::minutes(watched);
    let (rise, basis) = h.predict(tuesday, days).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (Basis::TimeOfWeek { weeks: 2 }, 0), "Tuesdays are quiet");
    // The Monday before: the ramp is ahead.
    let mut m = History::default();
    let watched = (14 * 24 + 8) * 60 + 55;
    watch(&mut m, monday(), watched, days, &mondays);
    let (rise, basis) = m.predict(monday() + Duration::minutes(watched), days).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (Basis::TimeOfWeek { weeks: 2 }, 24_000));
    // One week of history: by time of day, the Monday ramp is one day in seven, above the
    // 5 % the target leaves: Tuesday keeps room for it.
    let mut one = History::default();
    let watched = (8 * 24 + 8) * 60 + 55;
    watch(&mut one, monday(), watched, 7, &mondays);
    let (rise, basis) = one.predict(monday() + Duration::minutes(watched), 7).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (Basis::TimeOfDay { days: 7 }, 24_000));
}

#[test]
fn the_first_day_has_no_seasonal_rise_but_sees_what_rises_now() {
    let mut h = History::default();
    watch(&mut h, monday() + Duration::hours(9), 60, 14, |t| 10_000 + 500 * u64::from(t.minute()));
    let p = h.predict(monday() + Duration::minutes(9 * 60 + 59), 14);
    assert_eq!(p.seasonal, None, "no past day: too little history");
    assert_eq!(p.recent.cpu_millis, 2_000, "0.5 CPU a minute over the 190 s span, from the sample before it");
    watch(&mut h, monday() + Duration::minutes(10 * 60), 3, 14, |_| 60_000);
    let jumped = h.predict(monday() + Duration::minutes(10 * 60 + 2), 14);
    assert_eq!(jumped.recent.cpu_millis, 21_000, "at 10:02 the span starts at 09:58:50, at 39 CPU: the jump is in it");
    watch(&mut h, monday() + Duration::minutes(10 * 60 + 3), 2, 14, |_| 60_000);
    let later = h.predict(monday() + Duration::minutes(10 * 60 + 4), 14);
    assert_eq!(later.recent, Rise::default(), "at 10:04 the jump is older than the span: its nodes have come");
}

/// A scale-up reconciles every few seconds (each launch, state change and node Ready is an
/// event): the span's low must survive however many samples follow it.
#[test]
fn the_rise_is_taken_from_the_spans_low_however_often_demand_is_sampled() {
    let mut h = History::default();
    let start = monday() + Duration::hours(9);
    // 190 s span (assumed lead 180 s + 10 s, no wait allowed); a sample every 2 s, the
    // demand rising 100 m each time for a minute, then flat: 95 samples in one span.
    for i in 0..95 {
        let now = start + Duration::seconds(2 * i);
        let cpu = 10_000 + 100 * (i.min(30) as u64);
        h.observe(&empty_pool(), Some(demand_at(cpu, now)), now, 14);
    }
    let now = start + Duration::seconds(188);
    assert_eq!(h.predict(now, 14).recent.cpu_millis, 3_000, "from the 10 CPU low at 09:00:00");
    assert!(h.seasonal.recent.len() <= 64, "bounded: {}", h.seasonal.recent.len());
    // A steady ramp keeps every sample a low: thinned, the rise still starts at the low.
    let mut ramp = History::default();
    for i in 0..200 {
        let now = start + Duration::seconds(i);
        ramp.observe(&empty_pool(), Some(demand_at(10_000 + 10 * i as u64, now)), now, 14);
    }
    let now = start + Duration::seconds(199);
    let rise = ramp.predict(now, 14).recent.cpu_millis;
    assert!((1_900..=1_990).contains(&rise), "10 m a second over the 190 s span, or from a little before it: {rise}");
    assert!(ramp.seasonal.recent.len() <= 64);
}

/// A pool of launching instances: `(id, None)` has no node yet, `(id, Some(ready))` has one.
fn launching_pool(ready: &[(&str, Option<bool>)]) -> ObservedPool {
    let instances = ready
        .iter()
        .map(|(id, _)| AsgInstance {
            id: id.to_string(),
            lifecycle_state: LifecycleState::Pending,
            availability_zone: String::new(),
            instance_type: String::new(),
            market: Market::Spot,
        })
        .collect();
    ObservedPool {
        spot: vec![ObservedAsg {
            name: "spot".into(),
            tags: Default::default(),
            desired: ready.len() as u32,
            min: 0,
            max: 10,
            instances,
            activities: vec![],
        }],
        nodes: ready
            .iter()
            .filter_map(|(id, r)| {
                Some(NodeState {
                    name: format!("n-{id}"),
                    instance_id: id.to_string(),
                    ready: (*r)?,
                    unschedulable: false,
                })
            })
            .collect(),
        ..empty_pool()
    }
}

#[test]
fn the_lead_time_is_launch_to_ready_as_observed() {
    let mut h = History::default();
    let t0 = monday();
    // At the first look, i-old is already launching: when it launched is unknown. i-node
    // has a node that is not Ready: a known node (a kubelet restart), not a launch.
    h.observe(&launching_pool(&[("i-old", None), ("i-node", Some(false))]), None, t0, 14);
    let both = [("i-old", None), ("i-node", Some(false)), ("i-new", None)];
    h.observe(&launching_pool(&both), None, t0 + Duration::seconds(30), 14);
    let ready = [("i-old", Some(true)), ("i-node", Some(true)), ("i-new", Some(true))];
    h.observe(&launching_pool(&ready), None, t0 + Duration::seconds(160), 14);
    assert_eq!(h.lead.lead_secs, vec![130], "i-new only");
    assert_eq!(h.lead(), (Duration::seconds(130), true));
    assert!(h.lead.launching.is_empty());
    // A launch that leaves the ASG before Ready is forgotten, not counted.
    h.observe(&launching_pool(&[("i-gone", None)]), None, t0 + Duration::seconds(200), 14);
    h.observe(&empty_pool(), None, t0 + Duration::seconds(260), 14);
    assert!(h.lead.launching.is_empty());
    assert_eq!(h.lead.lead_secs, vec![130]);
    // A launch whose Ready is seen only after a long gap between looks (Ballast stopped)
    // is not timed: it became Ready any time in the gap.
    h.observe(&launching_pool(&[("i-late", None)]), None, t0 + Duration::seconds(300), 14);
    h.observe(&launching_pool(&[("i-late", Some(true))]), None, t0 + Duration::hours(3), 14);
    assert_eq!(h.lead.lead_secs, vec![130]);
    // While fewer than five were timed, one odd launch is not the lead time.
    h.lead.lead_secs = vec![100, 110, 900];
    assert_eq!(h.lead().0, Duration::seconds(110));
    // The 95th percentile of what was seen: one slow launch in twenty is the 5 % the
    // target leaves out; two are not.
    h.lead.lead_secs = (0..19).map(|_| 100).chain([300]).collect();
    assert_eq!(h.lead().0, Duration::seconds(100));
    h.lead.lead_secs = (0..18).map(|_| 100).chain([300, 300]).collect();
    assert_eq!(h.lead().0, Duration::seconds(300));
}

/// Auto Scaling's scaling activities date a launch as its Launch Successful event would,
/// where that event was lost: i-old, first seen at the first look (its start unknown), is
/// timed from its activity's start; a launch activity of an instance whose node is known
/// (a kubelet restart) or gone, a failed launch and another activity time nothing.
#[test]
fn scaling_activities_date_a_launch_whose_event_was_lost() {
    let mut h = History::default();
    let t0 = monday();
    let activity = |id: &str, status, description: &str, start| ScalingActivity {
        id: id.into(),
        status,
        description: description.into(),
        status_message: String::new(),
        cause: String::new(),
        start,
        end: None,
    };
    let with_activities = |ready: &[(&str, Option<bool>)]| {
        let mut pool = launching_pool(ready);
        pool.spot[0].activities = vec![
            activity(
                "a1",
                ActivityStatus::InProgress,
                "Launching a new EC2 instance: i-old",
                t0 - Duration::seconds(40),
            ),
            activity(
                "a2",
                ActivityStatus::Successful,
                "Launching a new EC2 instance: i-node",
                t0 - Duration::seconds(50),
            ),
            activity(
                "a3",
                ActivityStatus::Failed,
                "Launching a new EC2 instance: i-bad.  Status Reason: Instance became unhealthy",
                t0 - Duration::seconds(45),
            ),
            activity("a4", ActivityStatus::Successful, "Terminating EC2 instance: i-new", t0 - Duration::seconds(30)),
        ];
        pool
    };
    h.observe(&with_activities(&[("i-old", None), ("i-node", Some(false)), ("i-bad", None)]), None, t0, 14);
    assert_eq!(h.lead.launching["i-old"], Launch { seen: t0 - Duration::seconds(40), timed: true });
    assert!(!h.lead.launching.contains_key("i-node"));
    assert!(!h.lead.launching["i-bad"].timed, "a failed launch's activity dates nothing");
    let ready = [("i-old", Some(true)), ("i-node", Some(true)), ("i-bad", Some(true))];
    h.observe(&with_activities(&ready), None, t0 + Duration::seconds(60), 14);
    assert_eq!(h.lead.lead_secs, vec![100], "i-old, 40 s before the first look to Ready a minute after");
}

#[test]
fn auto_scalings_launch_descriptions_name_the_instance() {
    let said = |description: &str| {
        ScalingActivity {
            id: "a".into(),
            status: ActivityStatus::Successful,
            description: description.into(),
            status_message: String::new(),
            cause: String::new(),
            start: monday(),
            end: None,
        }
        .launched_instance()
        .map(str::to_string)
    };
    // As AWS writes them (DescribeScalingActivities, the docs' examples).
    assert_eq!(said("Launching a new EC2 instance: i-0598c7d356eba48d7").as_deref(), Some("i-0598c7d356eba48d7"));
    assert_eq!(
        said("Launching a new EC2 instance: i-1234abcd1234abcd1.  Status Reason: Instance became unhealthy while waiting for instance to be in InService state.").as_deref(),
        Some("i-1234abcd1234abcd1")
    );
    assert_eq!(
        said("Launching a new EC2 instance: i-075fa0ad6a018cdfc Duration: 243s").as_deref(),
        Some("i-075fa0ad6a018cdfc")
    );
    for other in [
        "Launching a new EC2 instance.  Status Reason: Could not launch Spot Instances. UnfulfillableCapacity",
        "Launching a new EC2 instance into warm pool: i-0598c7d356eba48d7",
        "Terminating EC2 instance: i-0598c7d356eba48d7",
        "Launching a new EC2 instance: ",
        "",
    ] {
        assert_eq!(said(other), None, "{other:?}");
    }
}

#[test]
fn measured_waits_correct_up_quickly_and_down_slowly() {
    let mut h = History::default();
    let end = |m: i64| monday() + Duration::minutes(m);
    let waits = five_minutes_to;
    assert!(h.measured(waits(5, 30, 25_000), 10_000));
    assert_eq!(h.correction(), 1.5, "missed: half as much room again");
    assert!(!h.measured(waits(5, 30, 1_000), 10_000), "the same window twice counts once");
    assert!(!h.measured(waits(4, 30, 1_000), 10_000), "an older window is ignored");
    assert!(h.measured(waits(10, 30, 4_000), 10_000));
    assert_eq!(h.correction(), 1.47);
    assert!(h.measured(waits(15, 3, 4_000), 10_000));
    assert_eq!(h.correction(), 1.47, "three pods are no evidence to shrink on");
    h.measured(waits(18, 2, 60_000), 10_000);
    assert_eq!(h.correction(), 1.47, "two pods that waited are no evidence to grow on");
    for m in 0..20 {
        h.measured(waits(20 + 5 * m, 5, 60_000), 10_000);
    }
    assert_eq!(h.correction(), 4.0, "bounded above");
    for m in 0..400 {
        h.measured(waits(200 + 5 * m, 50, 0), 10_000);
    }
    assert_eq!(h.correction(), 1.0, "never below the rise itself");
    // A miss while headroom.max held the pods down: more room was not to be had.
    let before = h.correction();
    h.held(end(2990), Rise::default(), true, DecidedBy::Percent, None);
    h.measured(waits(3000, 50, 60_000), 10_000);
    assert_eq!(h.correction(), before);
}

/// The plan's reasons quote the last hour's waits: no window's p95 above the bound, so
/// at most 5 % of all their pods waited longer; older windows drop out.
#[test]
fn the_last_hours_waits_are_bounded_by_their_windows_p95() {
    let at = |m: i64| monday() + Duration::minutes(m);
    let window = five_minutes_to;
    let mut h = History::default();
    h.measured(window(5, 12, 9_000), 10_000);
    h.measured(window(50, 20, 4_000), 10_000);
    h.measured(window(60, 8, 6_000), 10_000);
    assert_eq!(h.waits_last_hour(at(62)), Some((9_000, 40, 3, at(60))));
    h.measured(window(70, 10, 1_000), 10_000);
    assert_eq!(h.waits_last_hour(at(70)), Some((6_000, 38, 3, at(70))), "the 00:05 window is over an hour old");
    assert_eq!(h.waits_last_hour(at(200)), None, "nothing within the hour");
    assert!(h.correction.last_hour.len() <= 3);
}

/// An override's room meeting the target says nothing of the learned room: the
/// correction stays; `max` holding the pods down and the target met all the same is
/// evidence the learned room asked too much: it shrinks.
#[test]
fn windows_met_under_an_override_leave_the_correction_alone() {
    let at = |m: i64| monday() + Duration::minutes(m);
    let met = |m: i64| WaitsSeen { max_ms: 2_000, ..five_minutes_to(m, 30, 1_000) };
    let mut h =
        History { correction: Correction { correction_permille: 2_000, ..Default::default() }, ..Default::default() };
    let room = Rise { cpu_millis: 100_000, memory_bytes: 200 << 30 };
    h.held(at(0), room, false, DecidedBy::Override, None);
    for m in 1..=24 {
        h.measured(met(5 * m), 10_000);
    }
    assert_eq!(h.correction(), 2.0, "two hours of an override's windows");
    h.held(at(125), room, true, DecidedBy::Seasonal, None);
    h.measured(met(135), 10_000);
    assert_eq!(h.correction(), 1.96, "met under max: the learned room was more than needed");
}

/// Pooled windows of few pods span up to an hour: what decided the room at their
/// start is still known when they are judged.
#[test]
fn pooled_windows_are_judged_against_the_room_held_over_their_whole_span() {
    let at = |m: i64| monday() + Duration::minutes(m);
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    watch(&mut h, at(0), 70, 14, |_| 10_000);
    // An override decides the room for the first ten minutes, the percent after.
    h.held(at(0), Rise::default(), false, DecidedBy::Override, None);
    for m in 10..70 {
        h.held(at(m), Rise { cpu_millis: 1_000 * m as u64, memory_bytes: 0 }, false, DecidedBy::Percent, None);
    }
    // Windows of one pod each 5 minutes from 00:05, two of them missed (the first under
    // the override): judged together once they hold 10 pods, at 00:50.
    for (i, m) in (5..=60).step_by(5).enumerate() {
        let missed = m == 5 || m == 30;
        let waits = WaitsSeen {
            over: None,
            window_start: at(m - 5),
            window_end: at(m),
            pods: 1,
            p95_ms: if missed { 60_000 } else { 1_000 },
            max_ms: if missed { 60_000 } else { 1_000 },
        };
        h.measured(waits, 10_000);
        assert_eq!(h.correction.few.pods == 0, i == 9, "judged at the tenth window");
    }
    assert_eq!(h.correction(), 1.0, "the override at the span's start: nothing the learning decided");
    // The same with a decision every 20 s (a scale-up): more than the record keeps, yet
    // the override at its start is still known.
    let mut busy = History { allowed_wait_ms: 10_000, ..Default::default() };
    watch(&mut busy, at(0), 70, 14, |_| 10_000);
    busy.held(at(0), Rise::default(), false, DecidedBy::Override, None);
    for k in 30..210u64 {
        let room = Rise { cpu_millis: 1_000 * (k % 7 + 1), memory_bytes: 0 };
        busy.held(at(0) + Duration::seconds(20 * k as i64), room, false, DecidedBy::Percent, None);
    }
    assert!(busy.held.decisions.len() <= 96, "bounded: {}", busy.held.decisions.len());
    assert!(busy.held.decisions[0].overridden && busy.held.decisions[0].at == at(0), "{:?}", busy.held.decisions[0]);
    for (i, m) in (5..=50).step_by(5).enumerate() {
        let p95_ms = if m == 5 || m == 30 { 60_000 } else { 1_000 };
        busy.measured(
            WaitsSeen { over: None, window_start: at(m - 5), window_end: at(m), pods: 1, p95_ms, max_ms: p95_ms },
            10_000,
        );
        assert_eq!(busy.correction.few.pods == 0, i == 9);
    }
    assert_eq!(busy.correction(), 1.0);
}

/// Flat at 90 CPU, then 20 CPU of jobs at 09:00:30 on `day`, with 5 CPU of room held
/// (decided `by`) from 08:50; and the 09:00–09:05 window, whose pods waited 90 s.
fn burst_at_nine(day: DateTime<Utc>, by: DecidedBy) -> (History, DateTime<Utc>, WaitsSeen) {
    let mut h = History::default();
    let t0 = day + Duration::hours(9);
    watch(&mut h, t0 - Duration::minutes(30), 31, 14, |t| if t > t0 { 110_000 } else { 90_000 });
    watch(&mut h, t0 + Duration::minutes(1), 10, 14, |_| 110_000);
    h.held(t0 - Duration::minutes(10), Rise { cpu_millis: 5_000, memory_bytes: 10 << 30 }, false, by, None);
    let window = WaitsSeen {
        over: None,
        window_start: t0,
        window_end: t0 + Duration::minutes(5),
        pods: 20,
        p95_ms: 90_000,
        max_ms: 95_000,
    };
    (h, t0, window)
}

#[test]
fn a_burst_larger_than_the_room_is_kept_and_fades_and_a_miss_with_room_raises_the_correction() {
    let (mut h, t0, window) = burst_at_nine(monday(), DecidedBy::Percent);
    h.measured(window, 10_000);
    assert_eq!(
        (h.correction.missed.cpu_millis, h.correction()),
        (20_000, 1.0),
        "a burst above the room: kept, not a correction"
    );
    let p = h.predict(t0 + Duration::minutes(5), 14);
    assert_eq!(p.missed.cpu_millis, 20_000);
    // Halved every 12 hours unless renewed.
    assert_eq!(h.predict(t0 + Duration::minutes(5) + Duration::hours(12), 14).missed.cpu_millis, 10_000);
    assert_eq!(h.predict(t0 + Duration::minutes(5) + Duration::hours(24), 14).missed.cpu_millis, 5_000);
    // Room as large as the burst and pods still waited: the rise understates the need.
    h.held(
        t0 + Duration::minutes(1),
        Rise { cpu_millis: 20_000, memory_bytes: 40 << 30 },
        false,
        DecidedBy::Percent,
        None,
    );
    let again = WaitsSeen {
        over: None,
        window_start: t0 + Duration::minutes(5),
        window_end: t0 + Duration::minutes(10),
        pods: 20,
        p95_ms: 30_000,
        max_ms: 40_000,
    };
    h.measured(again, 10_000);
    assert_eq!(h.correction(), 1.5);
}

/// A slow ramp starts a pod or two per window: alone each says little, pooled they are
/// as much evidence as one busy window.
#[test]
fn windows_of_a_few_pods_are_judged_together() {
    let mut h = History::default();
    let at = |m: i64| monday() + Duration::hours(8) + Duration::minutes(m);
    let waits = |m: i64, pods: u32, p95_ms: u64| WaitsSeen {
        over: None,
        window_start: at(m - 5),
        window_end: at(m),
        pods,
        p95_ms,
        max_ms: p95_ms,
    };
    h.held(at(-30), Rise { cpu_millis: 3_000, memory_bytes: 12 << 30 }, false, DecidedBy::Seasonal, None);
    for (k, wait_ms) in [20_000, 1_000, 22_000, 1_000].into_iter().enumerate() {
        h.measured(waits(5 * (k as i64 + 1), 2, wait_ms), 10_000);
        assert_eq!(h.correction(), 1.0, "{} pods pooled: not judged yet", 2 * (k + 1));
    }
    h.measured(waits(25, 2, 1_000), 10_000);
    assert_eq!(h.correction(), 1.5, "10 pods, 2 windows missed: judged as one missed window");
    assert_eq!(h.correction.few, FewPods::default(), "judged: the pool starts again");
    assert_eq!(
        h.correction.missed_waits_secs,
        [22],
        "the longest wait of the windows that missed, not the last window's"
    );
    // One odd pod among ten is no pattern; ten that all met are evidence to shrink.
    for k in 0..5 {
        h.measured(waits(30 + 5 * k, 2, if k == 0 { 60_000 } else { 1_000 }), 10_000);
    }
    assert_eq!(h.correction(), 1.5);
    for k in 0..5 {
        h.measured(waits(60 + 5 * k, 2, 1_000), 10_000);
    }
    assert_eq!(h.correction(), 1.47);
    // Pods an hour apart are no ramp: an old pool is dropped, not judged with new windows.
    h.measured(waits(100, 2, 60_000), 10_000);
    h.measured(waits(105, 2, 60_000), 10_000);
    h.measured(waits(200, 2, 1_000), 10_000);
    assert_eq!((h.correction.few.pods, h.correction.few.missed_windows), (2, 0), "{:?}", h.correction.few);
}

/// A pool whose day before Monday counted `pods` first starts, `over` of them past the
/// target, at most 2 in a window.
fn with_budget(pods: u32, over: u32) -> History {
    let sunday = (monday() - Duration::days(1)).date_naive();
    let day = DayRises { date: sunday, cpu_millis: vec![], memory_mib: vec![], pods, pods_over: over, most_pods: 2 };
    // The first day counted is long gone from the ring: every day kept counts whole.
    let first_counted = Some((monday() - Duration::days(30)).date_naive());
    History {
        lead: Lead { lead_secs: vec![180], ..Default::default() },
        seasonal: Seasonal { days: vec![day], ..Default::default() },
        correction: Correction { first_counted, ..Default::default() },
        ..Default::default()
    }
}

/// A window at 09:00 + `m` minutes on Monday, with the forwarder's count over the target.
fn counted(m: i64, pods: u32, p95_ms: u64, over: u32) -> WaitsSeen {
    WaitsSeen { over: Some(over), ..five_minutes_to(9 * 60 + m, pods, p95_ms) }
}

/// The target is a p95: 5 pods in 100 may wait longer. A miss the days kept can afford
/// (up to 3 %, the rest kept as margin) is spent, not answered with more room.
#[test]
fn a_miss_the_wait_budget_affords_adds_no_room() {
    let room = Rise { cpu_millis: 20_000, memory_bytes: 40 << 30 };
    let miss = counted(10, 30, 60_000, 3);
    let mut h = with_budget(1_000, 10);
    h.held(miss.window_start - Duration::minutes(10), room, false, DecidedBy::Seasonal, None);
    h.measured(counted(5, 60, 2_000, 0), 10_000);
    let mut spent = h.clone();
    spent.seasonal.days[0].pods_over = 30;
    h.measured(miss, 10_000);
    assert_eq!((h.correction(), h.budget()), (1.0, (1_090, 13)), "13 of 1,090 over, 3 of 90 today: within");
    spent.measured(miss, 10_000);
    assert_eq!(spent.correction(), 1.5, "33 of 1,090 over: past 3 %, the miss is answered");
    // An older forwarder counts nothing over the target: no budget to spend.
    let mut unknown = with_budget(0, 0);
    unknown.held(miss.window_start - Duration::minutes(10), room, false, DecidedBy::Seasonal, None);
    unknown.measured(WaitsSeen { over: None, ..miss }, 10_000);
    assert_eq!((unknown.correction(), unknown.budget()), (1.5, (0, 0)));
}

/// Within the budget the room shrinks below the rise, a window met at a time, down to
/// none; once the days kept show more pods over than it allows, the whole rise is held
/// again at once.
#[test]
fn windows_met_within_the_wait_budget_shrink_the_room_below_the_rise() {
    let mut h = with_budget(1_000, 0);
    let rise = |h: &History| {
        Prediction {
            seasonal: Some((Rise { cpu_millis: 10_000, memory_bytes: 0 }, Basis::TimeOfDay { days: 1 })),
            ..h.predict(monday(), 14)
        }
        .room()
        .0
    };
    assert_eq!(rise(&h), 10_000.0);
    for k in 1..=10 {
        h.measured(counted(5 * k, 1, 2_000, 0), 10_000);
    }
    assert_eq!((h.budget_share(), rise(&h)), (0.5, 5_000.0), "a window of one pod counts: the budget weighs pods");
    for k in 11..=30 {
        h.measured(counted(5 * k, 2, 2_000, 0), 10_000);
    }
    assert_eq!(rise(&h), 0.0, "never below none");
    // 40 of 1,090 first starts over the target: 3.7 %, past what is spent on purpose.
    // The miss is what holding less let wait: answered by the whole rise, not by more.
    h.measured(counted(155, 40, 90_000, 40), 10_000);
    assert_eq!((h.budget_share(), h.correction(), rise(&h)), (1.0, 1.0, 10_000.0));
    // Between 1.5 % and 3 % spent, windows met hold the room where it is.
    let mut between = with_budget(1_000, 20);
    between.correction.budget_share_permille = Some(500);
    between.measured(counted(5, 10, 2_000, 0), 10_000);
    assert_eq!(between.budget_share(), 0.5);
}

/// Too few first starts say nothing of a share: 99 met pods leave the room whole. Nor
/// does a first day alone (a pool filling up, its first burst).
#[test]
fn the_wait_budget_needs_a_hundred_first_starts_over_two_days() {
    let mut h = with_budget(50, 0);
    for k in 1..=49 {
        h.measured(counted(5 * k, 1, 2_000, 0), 10_000);
    }
    assert_eq!((h.budget(), h.budget_share()), ((99, 0), 1.0));
    h.measured(counted(250, 1, 2_000, 0), 10_000);
    assert_eq!(h.budget_share(), 0.95, "the hundredth");
    let mut first_day = with_budget(0, 0);
    first_day.measured(counted(5, 150, 2_000, 0), 10_000);
    first_day.measured(counted(10, 1, 2_000, 0), 10_000);
    assert_eq!((first_day.budget(), first_day.budget_share()), ((151, 0), 1.0));
}

/// The room shrinks only while what is left of the budget could take the largest window
/// of the days kept waiting whole: one ramp met without room must not spend more than
/// the days allow.
#[test]
fn the_room_shrinks_only_while_the_budget_left_takes_the_largest_window() {
    let quiet_then_ramp = |pods: u32| {
        let mut h = with_budget(pods, 0);
        h.seasonal.days[0].most_pods = 60;
        // A day before it, the first counted: its largest window (the pool filling up)
        // does not count.
        let saturday = (monday() - Duration::days(2)).date_naive();
        h.correction.first_counted = Some(saturday);
        h.seasonal.days.insert(
            0,
            DayRises { date: saturday, cpu_millis: vec![], memory_mib: vec![], pods: 1, pods_over: 0, most_pods: 500 },
        );
        for k in 1..=20 {
            h.measured(counted(5 * k, 1, 2_000, 0), 10_000);
        }
        h
    };
    assert_eq!(quiet_then_ramp(1_000).budget_share(), 1.0, "30 pods left of 3 % of 1,021: not a 60-pod ramp");
    let mut h = quiet_then_ramp(2_500);
    assert_eq!(h.budget_share(), 0.0, "75 left: it may");
    // The ramp comes and all of it waits: 60 of 2,581 is 2.3 %, within what the days
    // kept allow, but not within the day's own 5 %: the whole rise is held again.
    h.measured(counted(105, 60, 90_000, 60), 10_000);
    assert_eq!((h.budget(), h.budget_share()), ((2_581, 60), 1.0));
}

/// Days of met waits do not pay for a day of misses: each day keeps to its own 5 %.
#[test]
fn a_day_of_misses_is_answered_however_many_days_were_met() {
    let mut h = with_budget(28_000, 0);
    h.measured(counted(5, 30, 90_000, 30), 10_000);
    assert_eq!(h.correction(), 1.5, "30 of 30 today over: answered at once");
}

/// A dry run's waits measure the room the cluster runs, not what was decided: they do
/// not shrink it. Nor do an override's.
#[test]
fn windows_met_under_a_dry_run_or_an_override_do_not_shrink_the_room() {
    let room = Rise { cpu_millis: 40_000, memory_bytes: 80 << 30 };
    for (by, decided) in [(DecidedBy::Seasonal, Some(Rise::default())), (DecidedBy::Override, None)] {
        let mut h = with_budget(1_000, 0);
        h.held(monday() + Duration::hours(8), room, false, by, decided);
        for k in 1..=20 {
            h.measured(counted(5 * k, 1, 2_000, 0), 10_000);
        }
        assert_eq!(h.budget_share(), 1.0, "{by:?}");
    }
}

/// A window whose p95 missed had more than 5 % of its pods over, whatever its buckets.
#[test]
fn a_missed_p95_counts_its_pods_over_even_if_the_buckets_say_none() {
    let mut h = with_budget(1_000, 0);
    h.measured(counted(5, 20, 30_000, 0), 10_000);
    assert_eq!(h.budget(), (1_020, 2), "the 19th of 20 waited past 10 s: the 19th and 20th");
    // Redelivered after its record was written (the run died before marking it seen):
    // counted once.
    assert!(!h.measured(counted(5, 20, 30_000, 0), 10_000));
    assert_eq!(h.budget(), (1_020, 2));
}

/// A burst the room falls short of makes every window miss until the nodes come: one
/// shortfall, one raise (not one per window, compounding).
#[test]
fn one_shortfall_raises_the_correction_once() {
    let mut h = History { lead: Lead { lead_secs: vec![180], ..Default::default() }, ..Default::default() };
    let at = |m: i64| monday() + Duration::hours(9) + Duration::minutes(m);
    h.held(at(-10), Rise { cpu_millis: 20_000, memory_bytes: 40 << 30 }, false, DecidedBy::Seasonal, None);
    let miss = |m: i64| WaitsSeen { max_ms: 90_000, ..five_minutes_to(9 * 60 + m, 30, 60_000) };
    for m in [5, 10] {
        h.measured(miss(m), 10_000);
    }
    assert_eq!(h.correction(), 1.5, "the 09:05–09:10 window began before the raised room was in place");
    h.measured(miss(15), 10_000);
    assert_eq!(h.correction(), 2.25, "09:10–09:15 began a lead time after: still short");
}

/// Under the seasonal prediction a burst above the room is the prediction falling short:
/// every window gets more room, not only the rest of the day.
#[test]
fn a_miss_under_the_seasonal_prediction_raises_the_correction() {
    let (mut h, t0, window) = burst_at_nine(monday() + Duration::days(1), DecidedBy::Seasonal);
    h.measured(window, 10_000);
    assert_eq!((h.correction.missed.cpu_millis, h.correction()), (0, 1.5));
    // A span the percent decided in part is the percent's: the burst is kept instead.
    let mut h2 = History { held: HeldRoom::default(), ..h.clone() };
    h2.correction.correction_permille = 0;
    h2.correction.waits = None;
    h2.held(
        t0 - Duration::minutes(10),
        Rise { cpu_millis: 5_000, memory_bytes: 10 << 30 },
        false,
        DecidedBy::Seasonal,
        None,
    );
    h2.held(
        t0 - Duration::minutes(1),
        Rise { cpu_millis: 6_000, memory_bytes: 12 << 30 },
        false,
        DecidedBy::Percent,
        None,
    );
    h2.measured(window, 10_000);
    assert_eq!((h2.correction.missed.cpu_millis, h2.correction()), (20_000, 1.0));
}

#[test]
fn pods_that_waited_for_a_node_longer_than_the_lead_time_lengthen_the_span() {
    let mut h = History {
        allowed_wait_ms: 70_000,
        lead: Lead { lead_secs: vec![60], ..Default::default() },
        ..Default::default()
    };
    assert_eq!(
        (h.node_wait(), h.absorb_span()),
        (Duration::seconds(70), Duration::zero()),
        "60 s launch + 10 s CA: no room"
    );
    let end = monday() + Duration::hours(2);
    for (i, max_ms) in [98_000, 101_000, 104_000].into_iter().enumerate() {
        let at = end + Duration::minutes(5 * i as i64);
        h.measured(
            WaitsSeen {
                over: None,
                window_start: at - Duration::minutes(5),
                window_end: at,
                pods: 20,
                p95_ms: 95_000,
                max_ms,
            },
            70_000,
        );
    }
    assert_eq!(h.node_wait(), Duration::seconds(101), "the median of what pods waited");
    assert_eq!(h.absorb_span(), Duration::seconds(31));
}

/// Cluster-autoscaler's reaction: from pods arriving unschedulable to the earliest launch
/// started after them (within two minutes), whatever order the launches are reported in
/// and however often; taken once every such launch has been reported (five minutes on);
/// the median of those taken, so a launch another writer started moves it by no more than
/// one sample; kept across a new target, as the lead times are.
#[test]
fn cluster_autoscalers_reaction_is_timed_to_the_earliest_launch_after_the_pods() {
    let mut h = History {
        allowed_wait_ms: 10_000,
        lead: Lead { lead_secs: vec![120], ..Default::default() },
        ..Default::default()
    };
    assert_eq!((h.reaction(), h.node_wait()), ((CA_REACTION, false), Duration::seconds(130)));
    let t0 = monday() + Duration::hours(9);
    // Five arrivals ten minutes apart; each one's launches reported latest first, twice.
    for (k, secs) in [6, 50, 8, 7, 9].into_iter().enumerate() {
        let since = t0 + Duration::minutes(10 * k as i64);
        h.pods_unschedulable(since);
        h.pods_unschedulable(since); // delivered twice
        assert_eq!(h.reaction.arrivals.len(), 1);
        for started in [since + Duration::seconds(secs + 20), since + Duration::seconds(secs)] {
            h.launch_started(&format!("i-{k}-{started}"), started);
            h.launch_started(&format!("i-{k}-{started}"), started);
        }
        h.observe(&empty_pool(), None, since + Duration::minutes(5) - Duration::seconds(1), 14);
        assert_eq!(h.reaction.reaction_secs.len(), k, "not taken before every launch for them can be in");
        h.observe(&empty_pool(), None, since + Duration::minutes(5), 14);
    }
    assert_eq!(h.reaction.reaction_secs, [6, 50, 8, 7, 9]);
    assert_eq!((h.reaction(), h.node_wait()), ((Duration::seconds(8), true), Duration::seconds(128)));
    // A late copy of an arrival already timed, and a launch that started before the
    // pods: nothing.
    let t1 = t0 + Duration::hours(2);
    h.pods_unschedulable(t0);
    assert!(h.reaction.arrivals.is_empty());
    h.pods_unschedulable(t1);
    h.launch_started("i-before", t1 - Duration::seconds(1));
    // Nor one 121 s after them.
    h.launch_started("i-late", t1 + Duration::seconds(121));
    h.observe(&empty_pool(), None, t1 + Duration::minutes(5), 14);
    assert_eq!(h.reaction.reaction_secs.len(), 5);
    assert!(h.reaction.arrivals.is_empty());
    // Two arrivals before one launch: cluster-autoscaler's scan answered both.
    let t2 = t1 + Duration::hours(1);
    h.pods_unschedulable(t2);
    h.pods_unschedulable(t2 + Duration::seconds(30));
    h.launch_started("i-a", t2 + Duration::seconds(40));
    h.observe(&empty_pool(), None, t2 + Duration::minutes(6), 14);
    assert_eq!(h.reaction.reaction_secs[5..], [40, 10]);
    // A slow cluster-autoscaler (a large cluster): 90 s is its reaction.
    let t3 = t2 + Duration::hours(1);
    h.pods_unschedulable(t3);
    h.launch_started("i-slow", t3 + Duration::seconds(90));
    // A launch reported before the pods' report (retried, or in a later batch): still theirs.
    let t4 = t3 + Duration::hours(1);
    h.launch_started("i-early-news", t4 + Duration::seconds(20));
    h.pods_unschedulable(t4);
    h.observe(&empty_pool(), None, t4 + Duration::minutes(5), 14);
    assert_eq!(h.reaction.reaction_secs[7..], [90, 20]);
    h.retarget(30_000, "");
    assert_eq!((h.reaction.reaction_secs.len(), h.allowed_wait_ms), (9, 30_000));
    // A record from before reactions were kept reads as none seen.
    let old: History = serde_json::from_str(r#"{"lead_secs":[120]}"#).unwrap();
    assert_eq!(old.reaction(), (CA_REACTION, false));
}

/// Arrivals are bounded: the oldest beyond the bound is taken at once.
#[test]
fn arrivals_of_unschedulable_pods_stay_bounded() {
    let mut h = History::default();
    let t0 = monday();
    for k in 0..(MAX_ARRIVALS as i64 + 12) {
        let since = t0 + Duration::seconds(5 * k);
        h.pods_unschedulable(since);
        h.launch_started(&format!("i-{k}"), since + Duration::seconds(3));
    }
    assert_eq!(h.reaction.arrivals.len(), MAX_ARRIVALS);
    assert_eq!(h.reaction.reaction_secs, [3; 12]);
}

#[test]
fn windows_at_the_ends_of_time_do_not_panic() {
    let mut h = History::default();
    watch(&mut h, monday(), 10, 14, |_| 10_000);
    h.held(monday(), Rise::default(), false, DecidedBy::Percent, None);
    let start = DateTime::<Utc>::MIN_UTC;
    let window = WaitsSeen {
        over: None,
        window_start: start,
        window_end: start + Duration::minutes(5),
        pods: 20,
        p95_ms: 60_000,
        max_ms: 60_000,
    };
    assert!(h.measured(window, 10_000));
    let end = DateTime::<Utc>::MAX_UTC;
    let later = WaitsSeen {
        over: None,
        window_start: end - Duration::minutes(5),
        window_end: end,
        pods: 20,
        p95_ms: 60_000,
        max_ms: 60_000,
    };
    assert!(h.measured(later, 10_000));
    let _ = h.predict(monday() + Duration::minutes(10), 14);
}

/// Every record at its bound, every slot of 29 days filled with the largest values: the
/// history stays a small part of DynamoDB's 400 KB item even as uncompressed JSON (the
/// proptest below seldom fills a slot of every day).
#[test]
fn a_history_full_at_every_bound_fits_the_state_record() {
    let at = monday();
    let rise = Rise { cpu_millis: u64::from(u32::MAX), memory_bytes: u64::from(u32::MAX) << 20 };
    let waits = WaitsSeen {
        window_start: at,
        window_end: at,
        pods: u32::MAX,
        p95_ms: u64::MAX,
        max_ms: u64::MAX,
        over: Some(u32::MAX),
    };
    let h = History {
        seasonal: Seasonal {
            days: (0..29)
                .map(|d| DayRises {
                    date: at.date_naive() + Duration::days(d),
                    cpu_millis: vec![Some(u32::MAX); SLOTS_PER_DAY],
                    memory_mib: vec![Some(u32::MAX); SLOTS_PER_DAY],
                    pods: u32::MAX,
                    pods_over: u32::MAX,
                    most_pods: u32::MAX,
                })
                .collect(),
            recent: vec![
                DemandSample { at, cpu_millis: u64::MAX, memory_bytes: u64::MAX, since: Some(at) };
                MAX_RECENT
            ],
        },
        reaction: Reaction {
            reaction_secs: vec![u32::MAX; LEAD_SAMPLES],
            arrivals: vec![Arrival { since: at, launch: Some(at) }; MAX_ARRIVALS],
            last_arrival: Some(at),
        },
        lead: Lead {
            lead_secs: vec![u32::MAX; LEAD_SAMPLES],
            launching: (0..MAX_LAUNCHING).map(|i| (format!("i-{i:017x}"), Launch { seen: at, timed: true })).collect(),
            last_look: None,
        },
        held: HeldRoom {
            decisions: vec![
                Held { at, room: rise, at_max: true, overridden: true, seasonal: true, decided: Some(rise) };
                MAX_HELD
            ],
        },
        correction: Correction {
            missed_waits_secs: vec![u32::MAX; LEAD_SAMPLES],
            last_hour: vec![waits; MAX_HOUR_WINDOWS],
            waits: Some(waits),
            ..Correction::default()
        },
        time_zone: "America/Argentina/ComodRivadavia".into(),
        ..History::default()
    };
    let json = serde_json::to_vec(&h).unwrap().len();
    println!("a history full at every bound: {json} bytes of JSON");
    assert!(json < 160 * 1024, "{json} bytes of JSON");
    let back: History = serde_json::from_slice(&serde_json::to_vec(&h).unwrap()).unwrap();
    assert_eq!(back, h);
}

proptest! {
    /// Whatever is observed, for however long, the learner's memory stays within its
    /// bounds (the state record it lives in is read and written each reconcile).
    #[test]
    fn the_history_stays_bounded(
        steps in proptest::collection::vec((1i64..240, 0u64..2_000_000, 0u8..4), 1..400),
        days in 1usize..=28,
    ) {
        let mut h = History::default();
        let mut now = monday();
        let ids: Vec<String> = (0..300).map(|i| format!("i-{i:08x}")).collect();
        for (gap_minutes, cpu, nodes) in steps {
            now += Duration::minutes(gap_minutes * 7);
            let ready = |i: usize| match (i + usize::from(nodes)) % 3 {
                0 => Some(true),
                1 => Some(false),
                _ => None,
            };
            let pool = launching_pool(&ids.iter().enumerate().map(|(i, id)| (id.as_str(), ready(i))).collect::<Vec<_>>());
            h.observe(&pool, Some(demand_at(cpu, now)), now, days);
            let window = WaitsSeen { over: None, window_start: now - Duration::minutes(5), window_end: now, pods: u32::from(nodes) * 5, p95_ms: cpu % 30_000, max_ms: cpu % 90_000 };
            h.measured(window, 10_000);
            prop_assert!(h.seasonal.days.len() <= days + 1);
            prop_assert!(h.seasonal.recent.len() <= MAX_RECENT);
            prop_assert!(h.lead.lead_secs.len() <= LEAD_SAMPLES && h.correction.missed_waits_secs.len() <= LEAD_SAMPLES);
            prop_assert!(h.held.decisions.len() <= MAX_HELD);
            prop_assert!(h.lead.launching.len() <= MAX_LAUNCHING);
            let (lo, hi) = CORRECTION_RANGE;
            prop_assert!((lo..=hi).contains(&h.correction.correction_permille) || h.correction.correction_permille == 0);
            let p = h.predict(now, days);
            prop_assert!(p.seasonal.is_none_or(|(r, _)| r.cpu_millis <= 2_000_000));
            prop_assert!(p.missed.cpu_millis <= 2_000_000 && p.recent.cpu_millis <= 2_000_000);
        }
        let size = serde_json::to_vec(&h).unwrap().len();
        prop_assert!(size < 48 * 1024, "{size} bytes");
    }

    /// Reconciles seconds apart (a scale-up's events), CPU and memory moving apart: the
    /// bounded records never say less than the full ones would. The rise now is at least
    /// the rise over the span from every sample; the room held over a span is at most
    /// the least held, with `max` or an override noted if any decision had them.
    #[test]
    fn the_bounded_records_never_understate_the_full_ones(
        steps in proptest::collection::vec((1i64..40, 0u64..64, 0u64..64, 0u64..8, 0u8..4), 1..600),
    ) {
        let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
        let span = h.absorb_span();
        let mut now = monday();
        let mut samples: Vec<(DateTime<Utc>, u64, u64)> = Vec::new();
        let mut decisions: Vec<Held> = Vec::new();
        for (gap_seconds, cpu, mem, room, flags) in steps {
            now += Duration::seconds(gap_seconds);
            let (cpu, mem) = (cpu * 1_000, mem << 30);
            h.observe(&empty_pool(), Some(Demand { cpu_millis: cpu, memory_bytes: mem, pods: 1, observed_at: now }), now, 14);
            samples.push((now, cpu, mem));
            let start = now - span;
            let from = samples.iter().rposition(|(at, ..)| *at <= start).unwrap_or(0);
            let low = |f: fn(&(DateTime<Utc>, u64, u64)) -> u64| samples[from..].iter().map(f).min().unwrap();
            let rise = h.predict(now, 14).recent;
            prop_assert!(rise.cpu_millis >= cpu - low(|s| s.1), "cpu {} < {}", rise.cpu_millis, cpu - low(|s| s.1));
            prop_assert!(rise.memory_bytes >= mem - low(|s| s.2));
            prop_assert!(h.seasonal.recent.windows(2).all(|w| w[0].since() <= w[1].since() && w[0].at < w[1].at));
            prop_assert!(h.seasonal.recent.len() <= MAX_RECENT);

            let room = Rise { cpu_millis: room * 1_000, memory_bytes: 0 };
            let by = [DecidedBy::Percent, DecidedBy::Seasonal, DecidedBy::Override, DecidedBy::Seasonal][usize::from(flags)];
            h.held(now, room, flags == 3, by, None);
            decisions.push(Held { at: now, room, at_max: flags == 3, overridden: flags == 2, seasonal: flags != 0 && flags != 2, decided: None });
            prop_assert!(h.held.decisions.len() <= MAX_HELD);
            let from = now - Duration::minutes(30);
            let full_start = decisions.iter().rposition(|d| d.at <= from).unwrap_or(0);
            let full: Vec<&Held> = decisions[full_start..].iter().collect();
            let kept = h.held.over(from, now);
            prop_assert!(kept.least.cpu_millis <= full.iter().map(|d| d.room.cpu_millis).min().unwrap());
            prop_assert!(kept.not_ours || !full.iter().any(|d| d.at_max || d.overridden));
            prop_assert!(kept.overridden || !full.iter().any(|d| d.overridden));
            prop_assert!(!kept.seasonal || full.iter().all(|d| d.seasonal));
        }
    }
}

/// Days and slots are the pool's local ones: a ramp at 09:00 in Paris is at 07:00 UTC in
/// summer time and 08:00 UTC after the change (Sunday 2026-10-25), on weekdays. Counted in Paris time it keeps
/// its slot, and the morning after the change still has room placed before it; counted in
/// UTC the room would come an hour early.
#[test]
fn a_local_ramp_keeps_its_slot_across_a_daylight_saving_change() {
    let paris: Tz = "Europe/Paris".parse().unwrap();
    let ramp_at_nine_paris = move |t: DateTime<Utc>| {
        let local = t.with_timezone(&paris);
        let minutes = i64::from(local.hour() * 60 + local.minute());
        let weekday = !matches!(local.weekday(), Weekday::Sat | Weekday::Sun);
        if !weekday || !(9 * 60..17 * 60).contains(&minutes) {
            return 10_000;
        }
        10_000 + 6_000 * (minutes - 9 * 60 + 1).min(5) as u64
    };
    let from = Utc.with_ymd_and_hms(2026, 10, 20, 0, 0, 0).unwrap();
    // Monday 26 October, 08:55 in Paris (07:55 UTC): the first weekday after the change.
    let before_ramp = Utc.with_ymd_and_hms(2026, 10, 26, 7, 55, 0).unwrap();
    let minutes = (before_ramp - from).num_minutes();
    let learned = |zone: &str| {
        let mut h = History { allowed_wait_ms: 10_000, time_zone: zone.into(), ..Default::default() };
        watch(&mut h, from, minutes, 14, ramp_at_nine_paris);
        h.predict(before_ramp, 14)
    };
    let local = learned("Europe/Paris");
    assert!(local.seasonal.unwrap().0.cpu_millis >= 18_000, "{local:?}");
    let utc = learned("");
    assert_eq!(utc.seasonal.unwrap().0.cpu_millis, 0, "in UTC the past ramps were at 07:00, an hour before: {utc:?}");
}

/// A record written before the budget reads back with none counted, and a new target
/// starts the count again (pods over 10 s say nothing of 30 s).
#[test]
fn the_wait_budget_is_read_from_old_records_and_cleared_by_a_new_target() {
    let old = r#"{"days":[{"date":"2026-11-01","cpu_millis":[1000],"memory_mib":[1]}],"correction_permille":1500}"#;
    let h: History = serde_json::from_str(old).unwrap();
    assert_eq!((h.budget(), h.budget_share(), h.correction()), ((0, 0), 1.0, 1.5));
    let mut h = with_budget(2_000, 10);
    h.correction.budget_share_permille = Some(400);
    h.retarget(30_000, "");
    assert_eq!((h.budget(), h.budget_share()), ((0, 0), 1.0));
}

/// Once the ring has moved past the first day counted, its oldest day is a day like any
/// other: a fortnightly ramp there still keeps the room from shrinking.
#[test]
fn the_oldest_day_kept_counts_once_the_first_is_gone() {
    let mut h = with_budget(1_000, 0);
    h.seasonal.days[0].most_pods = 400;
    for k in 1..=20 {
        h.measured(counted(5 * k, 1, 2_000, 0), 10_000);
    }
    assert_eq!(h.budget_share(), 1.0, "30 left of 3 %: not a 400-pod ramp");
    h.correction.first_counted = h.seasonal.days.first().map(|d| d.date);
    h.measured(counted(105, 1, 2_000, 0), 10_000);
    assert_eq!(h.budget_share(), 0.95, "the same day as the first counted is the pool filling up");
}

/// A pool record written before the learners were split (by f924d6c, every field of the
/// record and of its history set) reads back, and writes back byte for byte: the state
/// store's records are unchanged by the split.
#[test]
fn a_record_written_before_the_split_reads_and_writes_back_the_same() {
    let written = include_str!("../../fixtures/pool-record.json");
    let record: crate::record::PoolRecord = serde_json::from_str(written).unwrap();
    let history = record.learned.as_ref().unwrap();
    assert!(!history.seasonal.days.is_empty() && !history.lead.lead_secs.is_empty());
    assert!(!history.reaction.arrivals.is_empty() && !history.held.decisions.is_empty());
    assert!(history.correction.waits.is_some() && history.unmet_reported_at.is_some());
    assert_eq!(serde_json::to_string_pretty(&record).unwrap() + "\n", written);
    let compact: serde_json::Value = serde_json::from_str(written).unwrap();
    assert_eq!(serde_json::to_string(&record).unwrap(), serde_json::to_string(&compact).unwrap());
}
