//! Seasonal rises: per slot, by time of day and of week, and the rise under way.

use super::*;

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
    assert_eq!(basis, Basis::TimeOfDay { days: 2, pick: Pick::SecondLargest });
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
    assert_eq!((rise.cpu_millis, basis), (0, Basis::TimeOfDay { days: 2, pick: Pick::SecondLargest }));
}

#[test]
fn a_longer_allowed_wait_needs_less_room_and_none_once_a_node_comes_within_it() {
    let ramp = ramp_at_nine(|_| true);
    // With no span left, the record still keeps what rose between two looks (a minute
    // of the ramp): a lead time learned later may leave a span, and then the ramp's
    // minute steps need room. No room is held for them while there is none.
    let cases = [
        (0, 24_000, 24_000),
        (70_000, 12_000, 12_000),
        (130_000, 6_000, 6_000),
        (190_000, 6_000, 0),
        (600_000, 6_000, 0),
    ];
    for (allowed_ms, recorded, held) in cases {
        let mut h = History { allowed_wait_ms: allowed_ms, ..Default::default() };
        watch(&mut h, monday() + Duration::hours(8), 70, 14, &ramp);
        let span = h.absorb_span();
        assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(recorded), "allowed {allowed_ms} ms: span {span}");
        let nine = monday() + Duration::hours(9);
        let room = h.seasonal.largest_rise(nine, nine, Some(span), h.tz()).map(|r| r.0);
        assert_eq!(room, Some(held), "allowed {allowed_ms} ms: span {span}");
    }
}

/// A burst of jobs seen while a node came within the allowed wait (the lead time from a
/// few fast launches) is kept whole: once slower launches leave a span, the next day
/// holds room for all of it, not for nothing.
#[test]
fn a_burst_seen_with_no_span_is_held_whole_once_a_span_is_learned() {
    let mut h = History { allowed_wait_ms: 60_000, ..Default::default() };
    h.lead.lead_secs = vec![45, 50, 55];
    h.reaction.reaction_secs = vec![5];
    assert_eq!(h.absorb_span(), Duration::zero());
    let tz = h.tz();
    let at = monday() + Duration::hours(9);
    let none = h.absorb_span();
    look(&mut h, at - Duration::minutes(1), 90_000, none);
    look(&mut h, at, 90_000, none);
    look(&mut h, at + Duration::seconds(2), 110_000, none);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(20_000));
    assert_eq!(h.seasonal.days[0].span_secs, 0, "no span yet");
    h.lead.lead_secs = vec![90, 100, 105, 110];
    let span = h.absorb_span();
    assert!(span > Duration::seconds(30), "{span}");
    let tomorrow = at + Duration::days(1);
    let (rise, _, _) = h.seasonal.rise_for(tomorrow, tomorrow, span, 14, tz).expect("a past day");
    assert_eq!(rise.cpu_millis, 20_000);
}

#[test]
fn a_weekly_ramp_is_learned_by_time_of_week_once_two_weeks_show_it() {
    let mondays = ramp_at_nine(|d| d == Weekday::Mon);
    let by_week = |weeks| Basis::TimeOfWeek { weeks, pick: Pick::SecondLargest };
    // Three weeks: Monday 2026-11-23, 08:55: the ramp of the three Mondays before is ahead.
    let mut h = History::default();
    let days = 28;
    let watched = (21 * 24 + 8) * 60 + 55;
    watch(&mut h, monday(), watched, days, &mondays);
    let (rise, basis) = h.predict(monday() + Duration::minutes(watched), days).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (by_week(3), 24_000));
    // The Tuesday after: Tuesdays are quiet.
    watch(&mut h, monday() + Duration::minutes(watched), 24 * 60, days, &mondays);
    let tuesday = monday() + Duration::minutes(watched) + Duration::days(1);
    let (rise, basis) = h.predict(tuesday, days).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (by_week(3), 0), "Tuesdays are quiet");
    // Two weeks (the default history): the largest but one of two Mondays is a ramp both
    // show; Tuesday, quiet both weeks, holds nothing for it (by time of day it would).
    let mut two = History::default();
    let watched = (14 * 24 + 8) * 60 + 55;
    watch(&mut two, monday(), watched, 14, &mondays);
    let (rise, basis) = two.predict(monday() + Duration::minutes(watched), 14).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (by_week(2), 24_000));
    watch(&mut two, monday() + Duration::minutes(watched), 24 * 60, 14, &mondays);
    let (rise, basis) = two.predict(monday() + Duration::minutes(watched) + Duration::days(1), 14).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (by_week(2), 0), "Tuesdays are quiet");
    // One week of history: the Monday ramp is one day in seven, which no day tells from
    // an odd one: no room for it (a miss raises the correction instead).
    let mut one = History::default();
    let watched = (8 * 24 + 8) * 60 + 55;
    watch(&mut one, monday(), watched, 7, &mondays);
    let (rise, basis) = one.predict(monday() + Duration::minutes(watched), 7).seasonal.unwrap();
    assert_eq!((basis, rise.cpu_millis), (Basis::TimeOfDay { days: 7, pick: Pick::SecondLargest }, 0));
}

/// One day whose slot rose (a load test, a one-off backfill) does not hold room in that
/// slot on the days after; a second day that shows it makes it the pool's.
#[test]
fn one_odd_day_does_not_hold_its_slot() {
    let odd = |days: &'static [u32]| {
        move |t: DateTime<Utc>| {
            let minutes = t.hour() * 60 + t.minute();
            if days.contains(&t.day()) && (9 * 60..10 * 60).contains(&minutes) {
                50_000
            } else {
                10_000
            }
        }
    };
    // Tuesday 10 November jumps by 40 CPU at 09:00; Wednesday 11th, 08:55.
    let mut h = History::default();
    let watched = (9 * 24 + 8) * 60 + 55;
    watch(&mut h, monday(), watched, 14, odd(&[10]));
    assert_eq!(h.seasonal.days[8].cpu_millis[36], Some(40_000));
    let (rise, basis) = h.predict(monday() + Duration::minutes(watched), 14).seasonal.unwrap();
    assert_eq!((rise.cpu_millis, basis), (0, Basis::TimeOfDay { days: 9, pick: Pick::SecondLargest }));
    // Wednesday jumps too: Thursday keeps room for it.
    let mut twice = History::default();
    let watched = (10 * 24 + 8) * 60 + 55;
    watch(&mut twice, monday(), watched, 14, odd(&[10, 11]));
    let (rise, basis) = twice.predict(monday() + Duration::minutes(watched), 14).seasonal.unwrap();
    assert_eq!((rise.cpu_millis, basis), (40_000, Basis::TimeOfDay { days: 10, pick: Pick::SecondLargest }));
    // One or two past days: the largest (nothing yet tells an odd day from the pool's).
    let mut first = History::default();
    let watched = (24 + 8) * 60 + 55;
    watch(&mut first, monday() + Duration::days(8), watched, 14, odd(&[10]));
    let (rise, basis) = first.predict(monday() + Duration::days(8) + Duration::minutes(watched), 14).seasonal.unwrap();
    assert_eq!((rise.cpu_millis, basis), (40_000, Basis::TimeOfDay { days: 1, pick: Pick::Largest }));
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

/// Reconciles stop for two hours (a throttled schedule, an outage) while demand goes from
/// 10 to 40 CPU: the 30 CPU came at some time in the gap, not within one span. Spread
/// evenly, the slot keeps the span's share (30 CPU × 180 s / 2 h = 0.75 CPU), and the
/// samples before the gap are no span's low after it.
#[test]
fn a_gap_in_reconciles_is_no_rise() {
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    let eight = monday() + Duration::hours(8);
    watch(&mut h, eight, 121, 14, |_| 10_000);
    let noon = monday() + Duration::hours(12);
    watch(&mut h, noon, 1, 14, |_| 40_000);
    assert_eq!(h.absorb_span(), Duration::seconds(180));
    assert_eq!(h.seasonal.days[0].cpu_millis[48], Some(750), "30 CPU over 7200 s, 180 s of it");
    assert_eq!(h.seasonal.days[0].memory_mib[48], Some(750));
    assert_eq!(h.predict(noon, 14).recent, Rise::default(), "nothing rises now: the gap's change is no ramp");
    // A minute later, 1 CPU more: the rise is from the sample after the gap.
    watch(&mut h, noon + Duration::minutes(1), 1, 14, |_| 41_000);
    assert_eq!(h.predict(noon + Duration::minutes(1), 14).recent.cpu_millis, 1_000);
    assert_eq!(h.seasonal.days[0].cpu_millis[48], Some(1_000));
    // Looks a minute apart, or within the span, are no gap: a step counts whole.
    let mut step = History { allowed_wait_ms: 10_000, ..Default::default() };
    watch(&mut step, eight, 60, 14, |_| 10_000);
    watch(&mut step, eight + Duration::minutes(62), 1, 14, |_| 40_000);
    assert_eq!(step.seasonal.days[0].cpu_millis[36], Some(30_000), "two minutes since the last look, within 180 s");
    // A schedule looking every five minutes is no gap either: a Job burst between two
    // looks counts whole.
    let mut slow = History { allowed_wait_ms: 10_000, ..Default::default() };
    for k in 0..12 {
        let at = eight + Duration::minutes(5 * k);
        slow.observe(&empty_pool(), Some(demand_at(if k < 11 { 10_000 } else { 70_000 }, at)), at, 14);
    }
    assert_eq!(
        slow.seasonal.days[0].cpu_millis[35],
        Some(60_000),
        "a 60 CPU burst seen five minutes after the last look"
    );
    // When a node comes within the allowed wait nothing needs room, gap or not.
    let mut generous = History { allowed_wait_ms: 600_000, ..Default::default() };
    watch(&mut generous, eight, 121, 14, |_| 10_000);
    watch(&mut generous, noon, 1, 14, |_| 40_000);
    assert_eq!(generous.absorb_span(), Duration::zero());
    assert_eq!(generous.seasonal.days[0].cpu_millis[48], Some(0));
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

/// A rise is kept with the span it was taken over and scaled to the span it is used
/// for: rises taken while one slow launch made the lead 48 minutes are not held as
/// rises within the 148 s the launches take once it is gone.
#[test]
fn a_rise_is_scaled_from_the_span_it_was_taken_over_to_the_one_it_is_used_for() {
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    h.lead.lead_secs = vec![2880];
    // 30 CPU over 40 minutes from 09:00 (0.75 CPU a minute), all within the 48-minute span.
    let t0 = monday() + Duration::hours(8);
    let ramp = |t: DateTime<Utc>| {
        let m = (t - (monday() + Duration::hours(9))).num_minutes().clamp(0, 40);
        10_000 + 750 * m as u64
    };
    watch(&mut h, t0, 4 * 60, 14, ramp);
    let day = &h.seasonal.days[0];
    assert_eq!(day.span_secs, 2880, "taken over the lead then: 2880 s + 10 s of CA − 10 s allowed");
    let kept = day.cpu_millis[38].expect("09:30–09:45");
    assert!(kept >= 29_000, "the whole ramp within 48 minutes: {kept}");
    // The slow launch is outnumbered: launches take 150 s, the span is 148 s.
    h.lead.lead_secs = vec![150; 20];
    h.reaction.reaction_secs = vec![8];
    assert_eq!(h.absorb_span().num_seconds(), 148);
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(9 * 60 + 30), 14);
    let (rise, _) = p.seasonal.expect("yesterday shows 09:00");
    assert!(
        (1_400..=1_900).contains(&rise.cpu_millis),
        "0.75 CPU a minute over 148 s is 1.85 CPU; scaled, ~1.54 CPU; not 30: {}",
        rise.cpu_millis
    );
    // New rises on a day taken over another span are brought to the day's: its older
    // ones stay as they were taken, and lose nothing to a span that comes and goes.
    watch(&mut h, monday() + Duration::hours(13), 10, 14, |_| 10_000);
    let day = &h.seasonal.days[0];
    assert_eq!(day.span_secs, 2880);
    assert_eq!(day.cpu_millis[38], Some(kept));
}

/// What rose at once (a burst of jobs between two looks) rises within any span: scaling
/// a day's rises to a shorter span never takes it below that, only the ramp's part.
#[test]
fn a_burst_that_rose_at_once_is_not_scaled_below_itself() {
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    // 20 CPU between two looks at 09:00, while launches were assumed to take 180 s.
    let t0 = monday() + Duration::hours(8);
    let burst = |t: DateTime<Utc>| if t >= monday() + Duration::hours(9) { 30_000 } else { 10_000 };
    watch(&mut h, t0, 2 * 60, 14, burst);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(20_000));
    assert_eq!(&h.seasonal.days[0].at_once[36..37], "X");
    // Launches turn out to take 45 s: the span is a quarter of what it was.
    h.lead.lead_secs = vec![45; 20];
    h.reaction.reaction_secs = vec![8];
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
    assert_eq!(p.seasonal.expect("yesterday shows 09:00").0.cpu_millis, 20_000, "the burst, whole");
}

/// 20 CPU between two looks at 09:00 on Monday, launches taking 45 s.
fn burst_at_nine_with_launches_of_45_s() -> History {
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    h.lead.lead_secs = vec![45; 20];
    h.reaction.reaction_secs = vec![8];
    let burst = |t: DateTime<Utc>| if t >= monday() + Duration::hours(9) { 30_000 } else { 10_000 };
    watch(&mut h, monday() + Duration::hours(8), 2 * 60, 14, burst);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(20_000));
    h
}

/// A burst that rose at once is as large over a longer span as over a short one: 20 CPU
/// at once, taken while launches took 45 s, stays 20 CPU once they take 600 s.
#[test]
fn a_burst_is_not_scaled_up_when_the_span_grows() {
    let mut h = burst_at_nine_with_launches_of_45_s();
    assert_eq!(&h.seasonal.days[0].at_once[36..37], "X", "all of it between two looks");
    // Launches now take 600 s (a slow-capacity episode).
    h.lead.lead_secs = vec![600; 20];
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
    let rise = p.seasonal.expect("yesterday shows 09:00").0.cpu_millis;
    assert_eq!(rise, 20_000, "a burst of 20 CPU is 20 CPU over any span longer than a look");
}

/// A slow-launch episode in the afternoon rescales the day's rises to its span: the
/// morning's burst stays what it was, then and once launches are fast again.
#[test]
fn an_afternoon_slow_launch_does_not_inflate_the_morning_burst_for_good() {
    let mut h = burst_at_nine_with_launches_of_45_s();
    // 14:00: launches take 48 minutes for an hour; demand flat.
    h.lead.lead_secs = vec![2880; 20];
    watch(&mut h, monday() + Duration::hours(14), 10, 14, |_| 30_000);
    // Back to 45 s launches the next day.
    h.lead.lead_secs = vec![45; 20];
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
    let rise = p.seasonal.expect("yesterday shows 09:00").0.cpu_millis;
    assert_eq!(rise, 20_000, "the morning's burst, whole and no more: {:?}", h.seasonal.days[0].cpu_millis[36]);
}

/// A burst of 10 CPU at 09:00 followed by a ramp of 1 CPU a minute in the same slot:
/// once the span shrinks, the slot still predicts at least the 10 CPU that rose at once.
#[test]
fn a_burst_followed_by_a_ramp_in_the_same_slot_keeps_its_burst() {
    let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
    h.lead.lead_secs = vec![1200; 20];
    h.reaction.reaction_secs = vec![10];
    let nine = monday() + Duration::hours(9);
    let load = move |t: DateTime<Utc>| {
        if t < nine {
            10_000
        } else {
            20_000 + 1_000 * (t - nine).num_minutes().min(10) as u64
        }
    };
    watch(&mut h, monday() + Duration::hours(8), 2 * 60, 14, load);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(20_000), "10 at once, 10 ramped, within 20 minutes");
    // Launches take 45 s from now on.
    h.lead.lead_secs = vec![45; 20];
    h.reaction.reaction_secs = vec![8];
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
    let rise = p.seasonal.expect("yesterday shows 09:00").0.cpu_millis;
    assert!(rise >= 10_000, "10 CPU rose between two looks at 09:00: never scaled below it; got {rise}");
}

/// A day whose span shrinks 1200 s → 150 s in three steps predicts what one step gives,
/// within the tenths the part that came at once is kept in.
#[test]
fn a_day_rescaled_in_steps_says_what_one_step_says() {
    let nine = monday() + Duration::hours(9);
    // +5 CPU at 09:00, +5 CPU at 09:01: the slot's largest rise, 10 CPU, half of it at once.
    let load = move |t: DateTime<Utc>| match (t - nine).num_minutes() {
        m if m < 0 => 10_000,
        0 => 15_000,
        _ => 20_000,
    };
    let recorded = || {
        let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
        h.lead.lead_secs = vec![1200; 20];
        h.reaction.reaction_secs = vec![10];
        watch(&mut h, monday() + Duration::hours(8), 2 * 60, 14, load);
        assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(10_000));
        assert_eq!(&h.seasonal.days[0].at_once[36..37], "5");
        h
    };
    let predicted = |h: &mut History| {
        h.lead.lead_secs = vec![150; 20];
        let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
        p.seasonal.expect("yesterday shows 09:00").0.cpu_millis
    };
    let mut direct = recorded();
    let one_step = predicted(&mut direct);
    let mut stepped = recorded();
    for (hour, lead) in [(12, 600), (13, 300), (14, 150)] {
        stepped.lead.lead_secs = vec![lead; 20];
        watch(&mut stepped, monday() + Duration::hours(hour), 3, 14, |_| 20_000);
    }
    let three_steps = predicted(&mut stepped);
    // The part that came at once is kept in tenths: steps may move it by a few percent,
    // never compound it away.
    let drift = three_steps.abs_diff(one_step) as f64 / one_step as f64;
    assert!(drift <= 0.05, "1200 s → 150 s at once: {one_step}; in three steps: {three_steps}");
}

/// A span that drops to none for a while (a few fast launches) keeps the day's ramps as
/// they were taken: with no span only jumps are recorded, and they are the same over any
/// span, so nothing is rescaled to nothing.
#[test]
fn a_span_gone_for_a_while_leaves_the_day_s_ramps_as_they_were() {
    let mut h = History { allowed_wait_ms: 60_000, ..Default::default() };
    h.lead.lead_secs = vec![150, 150, 150];
    h.reaction.reaction_secs = vec![10];
    let span = h.absorb_span();
    assert_eq!(span, Duration::seconds(100));
    let at = monday() + Duration::hours(9);
    // A ramp of 1 CPU a minute: 2 CPU within 100 s (from the sample before the span).
    for m in 0..5 {
        look(&mut h, at + Duration::minutes(m), 10_000 + 1_000 * m as u64, span);
    }
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(2_000));
    // Then no span for a look: the ramp's minute step is kept, the day's span too.
    look(&mut h, at + Duration::minutes(5), 15_000, Duration::zero());
    assert_eq!(h.seasonal.days[0].span_secs, 100);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(2_000));
}

/// As with no span, so with one of a few seconds (a lead time just over the allowed
/// wait for a look, as the lead time moves with each launch): the day keeps its span
/// and the look's rise is taken over it, so the day's ramps are never scaled down and
/// back up.
#[test]
fn a_span_that_nearly_vanishes_for_a_look_leaves_the_day_s_ramps_as_they_were() {
    let mut h = History { allowed_wait_ms: 60_000, ..Default::default() };
    let tz = h.tz();
    let span = Duration::seconds(100);
    let at = monday() + Duration::hours(9);
    // A ramp of 1 CPU a minute: 2 CPU within 100 s, half of it between two looks.
    for m in 0..5 {
        look(&mut h, at + Duration::minutes(m), 10_000 + 1_000 * m as u64, span);
    }
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(2_000));
    // One look with a span of 5 s (node wait 65 s, 60 s allowed), then 100 s again.
    look(&mut h, at + Duration::minutes(5), 15_000, Duration::seconds(5));
    look(&mut h, at + Duration::minutes(6), 15_000, span);
    let rise = h.seasonal.largest_rise(at, at, Some(span), tz).map(|r| r.0);
    assert!(
        rise.is_some_and(|r| r.abs_diff(2_000) <= 100),
        "the 09:00 ramp within 100 s is 2 CPU, as before the 5 s look: {rise:?}"
    );
}

/// Slow launches for a while (a throttled bootstrap, nodes that took 49 minutes) make
/// the lead time, and the span with it, until fast launches outnumber them again: the
/// day's rises taken before come back as they were, not scaled up and back down.
#[test]
fn a_slow_launch_episode_leaves_the_day_s_rises_as_they_were() {
    let mut h = History { allowed_wait_ms: 60_000, ..Default::default() };
    h.lead.lead_secs = vec![150, 150, 150];
    h.reaction.reaction_secs = vec![10];
    let nine = monday() + Duration::hours(9);
    // +1 CPU at 09:00, +1 CPU at 09:01: 2 CPU within the 100 s span, half of it at once.
    let load = move |t: DateTime<Utc>| match (t - nine).num_minutes() {
        m if m < 0 => 10_000,
        0 => 11_000,
        _ => 12_000,
    };
    watch(&mut h, monday() + Duration::hours(8), 2 * 60, 14, load);
    assert_eq!(h.seasonal.days[0].cpu_millis[36], Some(2_000));
    // 14:00: two launches of 49 minutes; 18:00: six fast ones set them aside again.
    h.lead.lead_secs = vec![2_940; 3];
    assert_eq!(h.lead().duration, Duration::seconds(2_940));
    watch(&mut h, monday() + Duration::hours(14), 3, 14, |_| 12_000);
    h.lead.lead_secs = vec![150; 9];
    assert_eq!(h.lead().duration, Duration::seconds(150));
    watch(&mut h, monday() + Duration::hours(18), 3, 14, |_| 12_000);
    let p = h.predict(monday() + Duration::days(1) + Duration::minutes(8 * 60 + 59), 14);
    let rise = p.seasonal.expect("yesterday shows 09:00").0.cpu_millis;
    assert!(rise.abs_diff(2_000) <= 100, "the 09:00 rise within 100 s is 2 CPU, as it was taken: {rise}");
}

/// A look with no span keeps the day's span (so its rises are over that span), but what
/// it records is only the step since the look before: the same over any span for a
/// burst, not for a ramp. A 13:00 ramp of 1 CPU a minute seen while a node came within
/// the allowed wait is held the next day as one minute's step, half of what rises within
/// the day's 100 s span.
#[test]
fn a_ramp_seen_with_no_span_is_held_over_the_day_s_span() {
    let mut h = History { allowed_wait_ms: 60_000, ..Default::default() };
    let tz = h.tz();
    let span = Duration::seconds(100);
    let nine = monday() + Duration::hours(9);
    for m in 0..5 {
        look(&mut h, nine + Duration::minutes(m), 10_000, span);
    }
    // 13:00, the span gone (fast launches for a while): a ramp of 1 CPU a minute.
    let one = monday() + Duration::hours(13);
    for m in 0..10 {
        look(&mut h, one + Duration::minutes(m), 10_000 + 1_000 * m.min(5) as u64, Duration::zero());
    }
    assert_eq!(h.seasonal.days[0].span_secs, 100, "the day keeps its span");
    // The next day, launches as in the morning: 2 CPU rise within 100 s of that ramp
    // (as a look with the span records it, from the sample before).
    let tomorrow = one + Duration::days(1);
    let (rise, _, _) = h.seasonal.rise_for(tomorrow, tomorrow, span, 14, tz).expect("a past day");
    assert_eq!(rise.cpu_millis, 2_000, "the ramp within the day's span");
}

/// One look at the demand (`cpu` millicores, as many MiB) at `t`, over `span`.
fn look(h: &mut History, t: DateTime<Utc>, cpu: u64, span: Duration) {
    let tz = h.tz();
    h.seasonal.sample(DemandSample { at: t, cpu_millis: cpu, memory_bytes: cpu << 20, since: None }, span, tz)
}

/// A burst of jobs at 10:00 yesterday is room ahead of 10:00 today; once today's burst
/// has come, the rest of its 15-minute slot holds no room for it again (the pause pods
/// it took would be made again, and nodes launched for them, for a burst already
/// started). Half a burst leaves room for the other half.
#[test]
fn a_burst_that_came_today_is_not_room_for_the_rest_of_its_slot() {
    let ten = monday() + Duration::days(1) + Duration::hours(10);
    let ahead = |h: &History, at: DateTime<Utc>| h.predict(at, 14).seasonal.map_or(0, |(r, _)| r.cpu_millis);
    for (today, left) in [(64_000, 0), (32_000, 32_000), (0, 64_000)] {
        // 10 CPU, and from 10:00 to 11:00 the jobs: 64 CPU on Monday, `today` on Tuesday.
        let demand = |t: DateTime<Utc>| {
            let jobs = if t.weekday() == Weekday::Mon { 64_000 } else { today };
            if t.hour() == 10 {
                10_000 + jobs
            } else {
                10_000
            }
        };
        let mut h = History::default();
        watch(&mut h, monday(), 24 * 60 + 10 * 60 - 2, 14, demand);
        assert_eq!(ahead(&h, ten - Duration::minutes(2)), 64_000, "before the burst");
        watch(&mut h, ten - Duration::minutes(2), 8, 14, demand);
        assert_eq!(ahead(&h, ten + Duration::minutes(5)), left, "{today} of 64 CPU came at 10:00");
    }
}

/// Jobs in two bursts a few minutes apart, in one slot: the slot's largest rise within a
/// span is one burst, but it rises by both. After today's first burst the second still
/// has its room (before slots kept their whole rise, none was left, and every day the
/// second burst waited for a node).
#[test]
fn a_slot_rising_in_two_bursts_keeps_room_for_the_second_after_the_first() {
    let ten = monday() + Duration::days(1) + Duration::hours(10);
    let demand = |t: DateTime<Utc>| {
        let minutes = t.hour() * 60 + t.minute();
        let bursts = [10 * 60 + 1, 10 * 60 + 8].iter().filter(|m| (**m..11 * 60).contains(&minutes)).count();
        10_000 + 64_000 * bursts as u64
    };
    let mut h = History::default();
    watch(&mut h, monday(), 24 * 60 + 10 * 60 + 3, 14, demand);
    assert_eq!(h.seasonal.days[0].whole_halves(40), Some(4), "Monday's 10:00 slot rose by twice its largest");
    let left = h.predict(ten + Duration::minutes(3), 14).seasonal.map(|(r, _)| r.cpu_millis);
    assert_eq!(left, Some(64_000), "the second burst is still to come");
    watch(&mut h, ten + Duration::minutes(3), 7, 14, demand);
    let left = h.predict(ten + Duration::minutes(10), 14).seasonal.map(|(r, _)| r.cpu_millis);
    assert_eq!(left, Some(0), "both came");
}

/// What came today is taken off slot by slot, not off the whole window: a burst that
/// came at 10:05 leaves the 64 CPU Monday showed at 10:20 (the next slot) ahead at 10:10;
/// and a window past midnight holds room for a burst just after it (today shows nothing
/// in tomorrow's slots).
#[test]
fn what_came_today_is_taken_off_its_own_slot_only() {
    let at =
        |day: i64, h: u32, m: i64| monday() + Duration::days(day) + Duration::hours(h.into()) + Duration::minutes(m);
    let demand = move |t: DateTime<Utc>| {
        let from = if t.weekday() == Weekday::Mon { at(0, 10, 20) } else { at(1, 10, 5) };
        if t >= from && t.hour() < 17 {
            74_000
        } else {
            10_000
        }
    };
    let mut h = History::default();
    watch(&mut h, monday(), 24 * 60 + 10 * 60 + 10, 14, demand);
    let p = h.predict(at(1, 10, 10), 14);
    assert_eq!((p.seasonal.map(|(r, _)| r.cpu_millis), p.came.cpu_millis), (Some(64_000), 0), "10:20 is ahead");
    // Midnight: 64 CPU at 00:00 on Monday and Tuesday (watched from Sunday 23:00);
    // Tuesday 23:58, none yet today.
    let midnight = |t: DateTime<Utc>| if t.hour() == 0 { 74_000 } else { 10_000 };
    let mut h = History::default();
    watch(&mut h, monday() - Duration::hours(1), 2 * 24 * 60 + 58, 14, midnight);
    let p = h.predict(at(1, 23, 58), 14);
    assert_eq!((p.seasonal.map(|(r, _)| r.cpu_millis), p.came.cpu_millis), (Some(64_000), 0));
    // Wednesday 00:05, it came: nothing left to hold for it, all of it came.
    watch(&mut h, at(1, 23, 58), 8, 14, midnight);
    let p = h.predict(at(2, 0, 5), 14);
    assert_eq!((p.seasonal.map(|(r, _)| r.cpu_millis), p.came.cpu_millis), (Some(0), 64_000));
}

/// A slot's record is its largest rise within one span, not all that rose in it: on
/// Monday 32 CPU of jobs came at 10:00 and 32 more at 10:08, both in the 10:00 slot,
/// which records 32. On Tuesday, once the first 32 have come, the 32 still to come at
/// 10:08 need the room as much as on Monday (when the pause pods the first part took
/// were made again for it).
#[test]
fn a_rise_in_two_parts_keeps_room_for_the_second_once_the_first_came() {
    let ten = monday() + Duration::days(1) + Duration::hours(10);
    let demand = |t: DateTime<Utc>| {
        let m = t.minute();
        let parts = match t.hour() {
            10 if m >= 8 => 2,
            10 => 1,
            h if h > 10 => 2,
            _ => 0,
        };
        10_000 + 32_000 * parts
    };
    let mut h = History::default();
    watch(&mut h, monday(), 24 * 60 + 10 * 60 + 5, 14, demand);
    let monday_slot = h.seasonal.days[0].cpu_millis[40];
    assert_eq!(monday_slot, Some(32_000), "two parts of 32, more than a span apart");
    let p = h.predict(ten + Duration::minutes(5), 14);
    assert_eq!(p.recent.cpu_millis, 0, "the first part is older than the span");
    assert_eq!(p.room().0, 32_000.0, "room for the part still to come at 10:08");
}
