//! Seasonal rises: how much demand rose within one absorb span, kept per 15-minute slot
//! of each day in a ring of at most `target.history` days, and the rise under way now.

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::{day_slot, merge_shortest, mib, Basis, Pick, Rise};

/// The length of a slot, in minutes.
pub const SLOT_MINUTES: i64 = 15;
/// Slots in a day: 96.
pub const SLOTS_PER_DAY: usize = (24 * 60 / SLOT_MINUTES) as usize;
/// Demand samples kept for the rise within the absorb span (lows only; over the bound,
/// neighbours merge).
pub(super) const MAX_RECENT: usize = 64;
/// Samples further apart than this (and than the absorb span) span a gap in Ballast's
/// looks (stopped, throttled, its events lost), not a slow schedule: a deployment looks
/// every minute by default and may be set to look every few; a change between two looks
/// counts whole, as a step.
const GAP_AFTER: Duration = Duration::minutes(10);

/// The seasonal learner's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seasonal {
    /// Largest rise within the absorb span (see `History::absorb_span`) ending in each
    /// slot, per day (in the history's time zone), oldest first.
    pub days: Vec<DayRises>,
    /// Demand samples of the last absorb span and the last one before it: only the lows
    /// (see `Seasonal::sample`), at most 64.
    pub recent: Vec<DemandSample>,
    /// The lowest demand since the newest sample's slot began (see [`DayRises::whole`]).
    pub slot_low: Option<SlotLow>,
}

/// What one slot of one day rose.
#[derive(Debug, Clone, Copy)]
struct SlotRise {
    /// Its largest rise within a span, CPU millicores and memory MiB.
    within_span: (u32, u32),
    /// Its whole rise, CPU millicores and memory MiB (`None`: not kept).
    whole: Option<(u64, u64)>,
}

/// The lowest demand since a slot began: what the slot's whole rise is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotLow {
    /// The slot's day, in the history's time zone.
    pub date: NaiveDate,
    /// The slot.
    pub slot: u8,
    /// CPU requests, in millicores.
    pub cpu_millis: u64,
    /// Memory requests, in bytes.
    pub memory_bytes: u64,
}

/// One day's largest rises per slot, and the first starts counted that day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayRises {
    /// The day, in the history's time zone.
    pub date: NaiveDate,
    /// Per slot, `None` where nothing was observed.
    pub cpu_millis: Vec<Option<u32>>,
    /// Per slot, the largest rise in memory requests, in MiB (rounded up); `None` where
    /// nothing was observed.
    pub memory_mib: Vec<Option<u32>>,
    /// First starts measured in windows ending this day, counted with how many waited
    /// longer than the target (only windows whose forwarder counts them).
    #[serde(default)]
    pub pods: u32,
    /// Of `pods`, how many waited longer than the target.
    #[serde(default)]
    pub pods_over: u32,
    /// The most first starts one window of the day counted.
    #[serde(default)]
    pub most_pods: u32,
    /// The absorb span the day's rises were taken over, in seconds (0: not recorded, as
    /// before spans were kept): a rise is scaled to the span it is used for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub span_secs: u32,
    /// Per slot, how much of its largest rise came between two looks, in tenths, one
    /// character a slot (`0`-`9`, `X` for all of it, `.` none seen): what rose at once,
    /// which no shorter span makes smaller (a burst of jobs), so a rise is never scaled
    /// below it. A character a slot keeps the record small. Empty in records from before
    /// spans were kept (taken as none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at_once: String,
    /// Per slot, its whole rise (from the lowest demand since it began to the highest
    /// after) as a multiple of its largest rise within a span, in halves, one base-36
    /// character a slot (`2`: the same, `4`: twice, `z`: 17.5 times or more, `.`: none
    /// seen): a slot whose jobs come in two bursts a few minutes apart still needs room
    /// after the first has come. Empty in records from before it was kept (a rise seen
    /// today then leaves the slot's room whole).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub whole: String,
}

impl DayRises {
    /// The percent of slot `slot`'s rise that came at once (0 when unknown).
    fn at_once_percent(&self, slot: usize) -> u8 {
        match self.at_once.as_bytes().get(slot) {
            Some(b'X') => 100,
            Some(c @ b'0'..=b'9') => (c - b'0') * 10,
            _ => 0,
        }
    }

    fn set_at_once(&mut self, slot: usize, percent: u8) {
        let mut bytes = std::mem::take(&mut self.at_once).into_bytes();
        bytes.resize(SLOTS_PER_DAY, b'.');
        if let Some(c) = bytes.get_mut(slot) {
            // Rounded to the nearest tenth: a part kept through several rescalings
            // drifts neither way.
            *c = if percent >= 95 { b'X' } else { b'0' + ((u16::from(percent) + 5) / 10) as u8 };
        }
        self.at_once = String::from_utf8(bytes).unwrap_or_default();
    }

    fn has_at_once(&self, slot: usize) -> bool {
        self.at_once.as_bytes().get(slot).is_some_and(|c| *c != b'.')
    }

    /// Slot `slot`'s whole rise in halves of its largest rise within a span (`None`:
    /// not kept).
    pub(super) fn whole_halves(&self, slot: usize) -> Option<u32> {
        self.whole.as_bytes().get(slot).and_then(|c| char::from(*c).to_digit(36))
    }

    fn set_whole(&mut self, slot: usize, halves: u32) {
        let mut bytes = std::mem::take(&mut self.whole).into_bytes();
        bytes.resize(SLOTS_PER_DAY, b'.');
        if let (Some(c), Some(digit)) = (bytes.get_mut(slot), char::from_digit(halves.min(35), 36)) {
            *c = digit as u8;
        }
        self.whole = String::from_utf8(bytes).unwrap_or_default();
    }

    /// Slot `slot`'s whole rise, CPU and memory, taken as its largest rise within a span
    /// (as recorded, `span`) times the multiple kept; `None` where none is kept.
    fn whole_rise(&self, slot: usize, (cpu, mib): (u32, u32)) -> Option<(u64, u64)> {
        let halves = u64::from(self.whole_halves(slot)?);
        Some((u64::from(cpu) * halves / 2, u64::from(mib) * halves / 2))
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `value` taken over `from_secs`, as over `to_secs`: what rose at once (`jump`) rises
/// within any span; the rest is taken to arrive evenly within one (a ramp's rise over 48
/// minutes is not one within 150 s).
fn rescaled(value: u64, at_once_percent: u8, from_secs: u32, to_secs: u32) -> u64 {
    if from_secs == 0 || from_secs == to_secs {
        return value;
    }
    // What came at once stays what it is; only the ramp's part scales with the span.
    let at_once = u128::from(value) * u128::from(at_once_percent.min(100)) / 100;
    let ramp = (u128::from(value) - at_once) * u128::from(to_secs) / u128::from(from_secs);
    u64::try_from(at_once + ramp).unwrap_or(u64::MAX)
}

/// The percent of a rise that came at once (`jump` of `rise`, in the dimension that
/// rose; CPU first).
fn at_once_of((rise_cpu, rise_mem): (u64, u64), (jump_cpu, jump_mem): (u64, u64)) -> u8 {
    let (jump, rise) = if rise_cpu > 0 { (jump_cpu, rise_cpu) } else { (jump_mem, rise_mem) };
    if rise == 0 {
        return 100;
    }
    u8::try_from(u128::from(jump.min(rise)) * 100 / u128::from(rise)).unwrap_or(100)
}

fn span_secs(span: Duration) -> u32 {
    u32::try_from(span.num_seconds().max(0)).unwrap_or(u32::MAX)
}

/// The pool's demand at one time, kept for the rise under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandSample {
    /// When the demand was observed.
    pub at: DateTime<Utc>,
    /// CPU requests, in millicores.
    pub cpu_millis: u64,
    /// Memory requests, in bytes.
    pub memory_bytes: u64,
    /// The earliest time it stands for, when earlier samples it undercut were dropped
    /// (see `Seasonal::sample`); `at` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
}

impl DemandSample {
    pub(super) fn since(&self) -> DateTime<Utc> {
        self.since.unwrap_or(self.at)
    }
}

/// The same local time `days` days before `at` in `tz` (the later instant where that
/// local time is skipped or repeated by a daylight saving change).
fn days_before(at: DateTime<Utc>, days: i64, tz: Tz) -> Option<DateTime<Utc>> {
    let local = at.with_timezone(&tz).naive_local().checked_sub_signed(Duration::days(days))?;
    let found = tz.from_local_datetime(&local);
    let found = found.latest().or_else(|| tz.from_local_datetime(&(local + Duration::hours(1))).latest())?;
    Some(found.with_timezone(&Utc))
}

impl Seasonal {
    /// A demand sample: the rise since the lowest demand within the span its day keeps
    /// goes into the sample's slot (the absorb span `absorb` until the day has one), so
    /// that a day's rises are all taken over one span, whatever the lead time does
    /// meanwhile (a few fast launches leave no span; a ramp seen then is still one).
    pub(super) fn sample(&mut self, s: DemandSample, absorb: Duration, tz: Tz) {
        if self.recent.last().is_some_and(|last| last.at >= s.at) {
            return;
        }
        let day_span = self
            .days
            .iter()
            .find(|d| d.date == day_slot(s.at, tz).0)
            .map(|d| Duration::seconds(i64::from(d.span_secs)))
            .filter(|span| !span.is_zero());
        let over = day_span.unwrap_or(absorb);
        if let Some(last) = self.recent.last().copied().filter(|l| s.at - l.at > over.max(absorb).max(GAP_AFTER)) {
            self.after_gap(last, s, over, tz);
            return;
        }
        // What rose since the look before: at once, as far as any span can tell, so it
        // rises within any span. Kept even with no span (a new node comes within the
        // allowed wait): the lead time learned later may leave a span, and a burst
        // recorded as nothing would then be held as nothing.
        let jump = self.recent.last().map_or((0, 0), |b| {
            (s.cpu_millis.saturating_sub(b.cpu_millis), s.memory_bytes.saturating_sub(b.memory_bytes))
        });
        // The last sample standing for a time at or before a window's start is the
        // demand at its start. Kept: the window the rise is taken over, and the absorb
        // span's for the rise under way (`rise_now`).
        let kept_from = s.at - over.max(absorb);
        let before = self.recent.iter().rposition(|r| r.since() <= kept_from).unwrap_or(0);
        self.recent.drain(..before);
        let start = s.at - over;
        let from = self.recent.iter().rposition(|r| r.since() <= start).unwrap_or(0);
        let within = if start < s.at { &self.recent[from..] } else { &[] };
        let floor = |f: fn(&DemandSample) -> u64| within.iter().map(f).min().unwrap_or(f(&s)).min(f(&s));
        let rise_cpu = (s.cpu_millis - floor(|r| r.cpu_millis)).max(jump.0);
        let rise_mem = (s.memory_bytes - floor(|r| r.memory_bytes)).max(jump.1);
        let whole = self.whole_rise(&s, tz);
        // The samples just before this one that it undercuts in CPU and memory are no
        // window's low any more (a window holding them holds it): it stands for their time
        // instead. So reconciles every few seconds at a flat demand keep one sample, and
        // the span's start is not pushed out by their number.
        let mut s = s;
        while let Some(last) =
            self.recent.last().filter(|l| l.cpu_millis >= s.cpu_millis && l.memory_bytes >= s.memory_bytes)
        {
            s.since = Some(last.since());
            self.recent.pop();
        }
        self.recent.push(s);
        // Still too many (a steady ramp: each sample a low): the two neighbours standing
        // for the shortest time become one, at the lower of the two from the earlier time,
        // so a span may start a little lower (more room), never with its low dropped.
        merge_shortest(&mut self.recent, MAX_RECENT, DemandSample::since, |first, second| DemandSample {
            at: second.at,
            cpu_millis: first.cpu_millis.min(second.cpu_millis),
            memory_bytes: first.memory_bytes.min(second.memory_bytes),
            since: Some(first.since()),
        });
        self.rose(s.at, (rise_cpu, rise_mem), jump, whole, over, tz);
    }

    /// What rose since `s`'s slot began, from the lowest demand since: the demand as it
    /// began is the sample before the first of the slot's.
    fn whole_rise(&mut self, s: &DemandSample, tz: Tz) -> (u64, u64) {
        let (date, slot) = day_slot(s.at, tz);
        let slot = u8::try_from(slot).unwrap_or(u8::MAX);
        let began = self.slot_low.filter(|l| l.date == date && l.slot == slot).or_else(|| {
            let before = self.recent.last()?;
            Some(SlotLow { date, slot, cpu_millis: before.cpu_millis, memory_bytes: before.memory_bytes })
        });
        let low = match began {
            Some(l) => SlotLow {
                cpu_millis: l.cpu_millis.min(s.cpu_millis),
                memory_bytes: l.memory_bytes.min(s.memory_bytes),
                ..l
            },
            None => SlotLow { date, slot, cpu_millis: s.cpu_millis, memory_bytes: s.memory_bytes },
        };
        self.slot_low = Some(low);
        (s.cpu_millis - low.cpu_millis, s.memory_bytes - low.memory_bytes)
    }

    /// A sample after a gap in reconciles (Ballast stopped, throttled, its events lost):
    /// what changed across the gap came at some time within it, which nothing tells. It
    /// is spread evenly over the gap, so the slot takes the share of one absorb span (none
    /// when nothing needs room), not the whole gap's change as if it rose at once; the samples
    /// before the gap are no span's low any more.
    fn after_gap(&mut self, last: DemandSample, s: DemandSample, absorb: Duration, tz: Tz) {
        let (gap, within) = ((s.at - last.at).num_milliseconds(), absorb.num_milliseconds());
        let share = |now: u64, then: u64| {
            let spread = u128::from(now.saturating_sub(then)) * within.max(0) as u128 / gap.max(1) as u128;
            u64::try_from(spread).unwrap_or(u64::MAX)
        };
        let (rise_cpu, rise_mem) = (share(s.cpu_millis, last.cpu_millis), share(s.memory_bytes, last.memory_bytes));
        self.recent = vec![s];
        // Nor when in its slot: the slot's whole rise is taken from here.
        let (date, slot) = day_slot(s.at, tz);
        let slot = u8::try_from(slot).unwrap_or(u8::MAX);
        self.slot_low = Some(SlotLow { date, slot, cpu_millis: s.cpu_millis, memory_bytes: s.memory_bytes });
        // Nothing tells what rose at once across a gap: all of it may have.
        self.rose(s.at, (rise_cpu, rise_mem), (rise_cpu, rise_mem), (rise_cpu, rise_mem), absorb, tz);
    }

    /// Keeps a rise ending at `at`, taken over `span`, in its slot, if larger than the
    /// slot's. A day keeps the span its first rise was taken over, and a rise taken over
    /// another (the lead time moves with each launch) is brought to it on the way in: the
    /// day's values are never rescaled, so a span that comes and goes (a few fast or
    /// slow launches) takes nothing from them.
    fn rose(
        &mut self,
        at: DateTime<Utc>,
        (rise_cpu, rise_mem): (u64, u64),
        (jump_cpu, jump_mem): (u64, u64),
        (whole_cpu, whole_mem): (u64, u64),
        span: Duration,
        tz: Tz,
    ) {
        let (date, slot) = day_slot(at, tz);
        let day = self.day_mut(date);
        let taken = span_secs(span);
        if day.span_secs == 0 {
            // No span yet, or none recorded (older records): what the day holds came at
            // once, the same over any span.
            day.span_secs = taken;
        }
        let (jump_cpu, jump_mem) = (jump_cpu.min(rise_cpu), jump_mem.min(rise_mem));
        let share = at_once_of((rise_cpu, rise_mem), (jump_cpu, jump_mem));
        // With no span, a look records only what rose at once: nothing to bring over.
        let (rise_cpu, rise_mem) = if taken == 0 {
            (rise_cpu, rise_mem)
        } else {
            (rescaled(rise_cpu, share, taken, day.span_secs), rescaled(rise_mem, share, taken, day.span_secs))
        };
        // The slot's largest jump between two looks, as a part of its largest rise (the
        // one kept): a burst stays a burst whatever ramp follows it in the slot.
        let old = day.cpu_millis[slot].map_or(0, u64::from);
        let old_at_once = old * u64::from(day.at_once_percent(slot)) / 100;
        let rise = old.max(rise_cpu);
        let jump = old_at_once.max(jump_cpu.min(rise_cpu));
        if rise > 0 || !day.has_at_once(slot) {
            day.set_at_once(slot, at_once_of((rise, rise_mem), (jump, jump_mem)));
        }
        let cpu = u32::try_from(rise_cpu).unwrap_or(u32::MAX);
        let before = day.cpu_millis[slot].zip(day.memory_mib[slot]);
        let old_whole = before.and_then(|recorded| day.whole_rise(slot, recorded)).unwrap_or_default();
        day.cpu_millis[slot] = Some(day.cpu_millis[slot].map_or(cpu, |old| old.max(cpu)));
        day.memory_mib[slot] = Some(day.memory_mib[slot].map_or(mib(rise_mem), |old| old.max(mib(rise_mem))));
        // The slot's whole rise, as a multiple of its largest within a span (in the
        // dimension that rose, CPU first), to the nearest half.
        let whole = (old_whole.0.max(whole_cpu), old_whole.1.max(u64::from(mib(whole_mem))));
        let (largest, whole) = match day.cpu_millis[slot].unwrap_or(0) {
            0 => (u64::from(day.memory_mib[slot].unwrap_or(0)), whole.1),
            c => (u64::from(c), whole.0),
        };
        let halves = match largest {
            0 if whole == 0 => 2,
            0 => 35,
            l => u32::try_from((u128::from(whole) * 4 + u128::from(l)) / (2 * u128::from(l))).unwrap_or(35),
        };
        day.set_whole(slot, halves.max(2));
    }

    /// Drops the days older than `history_days` before `now`'s.
    pub(super) fn forget(&mut self, now: DateTime<Utc>, history_days: usize, tz: Tz) {
        let keep_from = day_slot(now, tz).0 - Duration::days(history_days as i64);
        self.days.retain(|d| d.date >= keep_from);
    }

    /// The record of `date`, made if none.
    pub(super) fn day_mut(&mut self, date: NaiveDate) -> &mut DayRises {
        let day = match self.days.iter().position(|d| d.date == date) {
            Some(i) => &mut self.days[i],
            None => {
                let fresh = DayRises {
                    date,
                    cpu_millis: vec![None; SLOTS_PER_DAY],
                    memory_mib: vec![None; SLOTS_PER_DAY],
                    pods: 0,
                    pods_over: 0,
                    most_pods: 0,
                    span_secs: 0,
                    at_once: String::new(),
                    whole: String::new(),
                };
                let at = self.days.partition_point(|d| d.date < date);
                self.days.insert(at, fresh);
                &mut self.days[at]
            }
        };
        // A record of another shape (read back from the store) is brought to this one.
        day.cpu_millis.resize(SLOTS_PER_DAY, None);
        day.memory_mib.resize(SLOTS_PER_DAY, None);

        day
    }

    /// The newest demand sample, if newer than the absorb span `span`, and the lowest
    /// demand within the span up to it.
    fn span_low(&self, now: DateTime<Utc>, span: Duration) -> Option<(&DemandSample, Rise)> {
        let last = self.recent.last().filter(|l| now - l.at < span)?;
        let start = last.at - span;
        let from = self.recent.iter().rposition(|r| r.since() <= start).unwrap_or(0);
        let low = |f: fn(&DemandSample) -> u64| self.recent[from..].iter().map(f).min().unwrap_or(0);
        Some((last, Rise { cpu_millis: low(|r| r.cpu_millis), memory_bytes: low(|r| r.memory_bytes) }))
    }

    /// What rose within the absorb span `span` up to the newest demand sample (none if
    /// that is older than the span): a ramp under way goes on, and a rise longer ago than
    /// that has the nodes it made cluster-autoscaler launch.
    pub(super) fn rise_now(&self, now: DateTime<Utc>, span: Duration) -> Rise {
        self.span_low(now, span).map_or(Rise::default(), |(last, low)| {
            Rise { cpu_millis: last.cpu_millis, memory_bytes: last.memory_bytes }.less(low)
        })
    }

    /// How far the newest sample's slot had risen, from its low, by the lowest demand
    /// within the absorb span `span` up to that sample: what of the slot's rise came
    /// before the span began, so is no part of [`Seasonal::rise_now`] (none when the
    /// newest sample is older than the span, or its slot's low is not kept).
    pub(super) fn slot_rise_before_span(&self, now: DateTime<Utc>, span: Duration, tz: Tz) -> Rise {
        let Some((last, span_low)) = self.span_low(now, span) else { return Rise::default() };
        let (date, slot) = day_slot(last.at, tz);
        self.slot_low
            .filter(|l| l.date == date && usize::from(l.slot) == slot)
            .map_or(Rise::default(), |l| span_low.less(Rise { cpu_millis: l.cpu_millis, memory_bytes: l.memory_bytes }))
    }

    /// The largest rise recorded in the slots covering `[from, to]`, if any slot has data,
    /// scaled to `span` (as taken when `None`).
    pub(super) fn largest_rise(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        span: Option<Duration>,
        tz: Tz,
    ) -> Option<(u32, u32)> {
        self.slot_rises(from, to, span, tz)
            .into_iter()
            .flatten()
            .map(|r| r.within_span)
            .reduce(|(c, m), (fc, fm)| (c.max(fc), m.max(fm)))
    }

    /// The rises recorded in each slot covering `[from, to]`, in order (`None` where
    /// nothing was observed): the largest within a span scaled to `span` (as taken when
    /// `None`), and the whole.
    fn slot_rises(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        span: Option<Duration>,
        tz: Tz,
    ) -> Vec<Option<SlotRise>> {
        let mut found = Vec::new();
        let mut at = from;
        loop {
            let (date, slot) = day_slot(at, tz);
            let day = self.days.iter().find(|d| d.date == date);
            found.push(day.and_then(|day| {
                let (Some(Some(c)), Some(Some(m))) = (day.cpu_millis.get(slot), day.memory_mib.get(slot)) else {
                    return None;
                };
                let share = day.at_once_percent(slot);
                // No span: a new node comes within the allowed wait, nothing needs room.
                let to_span = |v: u32| match span {
                    None => v,
                    Some(s) if s.is_zero() => 0,
                    Some(s) => {
                        let scaled = rescaled(u64::from(v), share, day.span_secs, span_secs(s));
                        u32::try_from(scaled).unwrap_or(u32::MAX)
                    }
                };
                Some(SlotRise { within_span: (to_span(*c), to_span(*m)), whole: day.whole_rise(slot, (*c, *m)) })
            }));
            if at >= to {
                break;
            }
            let Some(next) = at.checked_add_signed(Duration::minutes(SLOT_MINUTES)) else { break };
            at = next.min(to);
        }
        found
    }

    /// The rise past days show for `[from, to]`, from the largest rise in the window's
    /// slots of each: by time of week once two weeks show it, else by time of day; the
    /// value taken as [`Pick`] says for their number. `None` while no past day shows it.
    /// Less what today already showed rising in the window's slots: that has come. A
    /// burst at 10:00 is not room still to hold at 10:05 because its slot runs to 10:15
    /// (the pause pods it took would be made again, and nodes launched for them). With
    /// it, what today already brought: the room held for the window that its pods took.
    pub(super) fn rise_for(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        span: Duration,
        history_days: usize,
        tz: Tz,
    ) -> Option<(Rise, Basis, Rise)> {
        let (left, basis) = self.picked(from, to, span, history_days, tz, true)?;
        let whole = self.picked(from, to, span, history_days, tz, false).map_or(left, |(whole, _)| whole);
        let came = Rise {
            cpu_millis: whole.cpu_millis.saturating_sub(left.cpu_millis),
            memory_bytes: whole.memory_bytes.saturating_sub(left.memory_bytes),
        };
        Some((left, basis, came))
    }

    fn picked(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        span: Duration,
        history_days: usize,
        tz: Tz,
        less_today: bool,
    ) -> Option<(Rise, Basis)> {
        // Today's slots: what rose in each since it began.
        let today: Vec<(u64, u64)> = if less_today {
            self.slot_rises(from, to, Some(span), tz)
                .into_iter()
                .map(|r| r.and_then(|r| r.whole).unwrap_or_default())
                .collect()
        } else {
            Vec::new()
        };
        // The same local times k days before (a daylight saving change between moves them
        // an hour in UTC, not in the pool's day), scaled to the span they are used for,
        // less what today showed in each.
        let past = |k: i64| {
            let then = self.slot_rises(days_before(from, k, tz)?, days_before(to, k, tz)?, Some(span), tz);
            then.into_iter()
                .zip(today.iter().copied().chain(std::iter::repeat((0, 0))))
                .filter_map(|(then, today)| {
                    let SlotRise { within_span: (c, m), whole } = then?;
                    // Nothing rose today yet, or that day kept no whole rise: all of it.
                    let Some((whole_c, whole_m)) = whole.filter(|_| today != (0, 0)) else { return Some((c, m)) };
                    let left = |within: u32, whole: u64, came: u64| {
                        u32::try_from(u64::from(within).min(whole.saturating_sub(came))).unwrap_or(within)
                    };
                    Some((left(c, whole_c, today.0), left(m, whole_m, today.1)))
                })
                .reduce(|(c, m), (fc, fm)| (c.max(fc), m.max(fm)))
        };
        let weeks: Vec<(u32, u32)> = (1..=history_days as i64 / 7).filter_map(|w| past(7 * w)).collect();
        let days: Vec<(u32, u32)> = (1..=history_days as i64).filter_map(past).collect();
        // Two weeks are enough: their largest but one is a rise both show.
        let (values, basis) = if weeks.len() >= 2 {
            (weeks.as_slice(), Basis::TimeOfWeek { weeks: weeks.len(), pick: Pick::for_count(weeks.len()) })
        } else {
            (days.as_slice(), Basis::TimeOfDay { days: days.len(), pick: Pick::for_count(days.len()) })
        };
        let (Basis::TimeOfWeek { pick, .. } | Basis::TimeOfDay { pick, .. }) = basis;
        (!values.is_empty()).then(|| {
            let q = |f: fn(&(u32, u32)) -> u32| pick.of(values.iter().map(f).collect());
            (Rise::of((q(|v| v.0), q(|v| v.1))), basis)
        })
    }
}
