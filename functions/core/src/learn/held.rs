//! Room held: what the pause pods held at each recent decision, and what decided it,
//! so that a window's measured waits are judged against the room that was in place.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::correction::FEW_POOLED_OVER;
use super::{merge_shortest, DecidedBy, Rise};

/// Decisions of room held kept (one per change; over the bound, neighbours merge).
pub(super) const MAX_HELD: usize = 96;

/// The held-room learner's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldRoom {
    /// The room the pause pods held at each recent decision (over the last lead time, an
    /// hour of pooled windows and a window), and whether `headroom.max` held them below
    /// what was asked.
    pub decisions: Vec<Held>,
}

/// The room the pause pods held from one decision on. Stored as `HeldRecord`: what
/// decided it is kept as the two flags records have always had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "HeldRecord", into = "HeldRecord")]
pub struct Held {
    /// When the decision was made.
    pub at: DateTime<Utc>,
    /// The CPU and memory the pause pods held (replicas times the pod's requests).
    pub room: Rise,
    /// `headroom.max` held the pods below what was asked.
    pub at_max: bool,
    /// What decided it: under an override, what waits then measure says nothing of the
    /// learning; under the seasonal prediction, a miss means the prediction was short.
    pub by: DecidedBy,
    /// In a dry run, the room decided but not applied (`room` is what the cluster runs).
    pub decided: Option<Rise>,
    /// Decided after pods of the window's predicted rise came today and took room held
    /// for it: what is left says nothing of the room that rise met (see `HeldRoom::over`).
    pub after_rise: bool,
}

/// [`Held`] as stored.
#[derive(Serialize, Deserialize)]
struct HeldRecord {
    at: DateTime<Utc>,
    room: Rise,
    at_max: bool,
    /// An override decided it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    overridden: bool,
    /// The seasonal prediction decided it (not the percent, while history was short).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    seasonal: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decided: Option<Rise>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    after_rise: bool,
}

impl From<HeldRecord> for Held {
    fn from(r: HeldRecord) -> Held {
        // Ballast never writes both flags; an override is the stronger if a record has.
        let by = match (r.overridden, r.seasonal) {
            (true, _) => DecidedBy::Override,
            (false, true) => DecidedBy::Seasonal,
            (false, false) => DecidedBy::Percent,
        };
        Held { at: r.at, room: r.room, at_max: r.at_max, by, decided: r.decided, after_rise: r.after_rise }
    }
}

impl From<Held> for HeldRecord {
    fn from(h: Held) -> HeldRecord {
        HeldRecord {
            at: h.at,
            room: h.room,
            at_max: h.at_max,
            overridden: h.by == DecidedBy::Override,
            seasonal: h.by == DecidedBy::Seasonal,
            decided: h.decided,
            after_rise: h.after_rise,
        }
    }
}

/// The room held over a span, as [`HeldRoom::over`] sums it up.
pub(super) struct HeldOver {
    pub(super) least: Rise,
    pub(super) decided: Rise,
    /// `max` held the pods down or an override decided them at some point.
    pub(super) not_ours: bool,
    /// An override decided them at some point.
    pub(super) overridden: bool,
    pub(super) seasonal: bool,
    /// A dry run decided them at some point: the cluster ran other room.
    pub(super) dry_run: bool,
}

impl HeldRoom {
    /// What the pause pods hold from `next.at`, kept over the longest span a measurement
    /// covers given the lead time `lead`.
    pub(super) fn hold(&mut self, next: Held, lead: Duration) {
        let at = next.at;
        if self.decisions.last().is_some_and(|h| Held { at, ..*h } == next) {
            return;
        }
        // Kept over the longest span a measurement covers (pooled windows of few pods).
        let keep_from = at - lead - FEW_POOLED_OVER - Duration::minutes(15);
        let first_kept = self.decisions.iter().rposition(|h| h.at <= keep_from).unwrap_or(0);
        self.decisions.drain(..first_kept);
        self.decisions.push(next);
        // Over the bound (decisions changing every few seconds in a scale-up), the two
        // neighbours holding for the shortest time become one that says the least of both:
        // the lower room, `max` or an override if either, seasonal only if both. The span
        // stays covered; what it is judged against errs towards not raising on a miss.
        merge_shortest(
            &mut self.decisions,
            MAX_HELD,
            |h| h.at,
            |first, second| Held {
                at: first.at,
                room: first.room.min(second.room),
                at_max: first.at_max || second.at_max,
                by: match (first.by, second.by) {
                    (DecidedBy::Override, _) | (_, DecidedBy::Override) => DecidedBy::Override,
                    (DecidedBy::Seasonal, DecidedBy::Seasonal) => DecidedBy::Seasonal,
                    _ => DecidedBy::Percent,
                },
                decided: match (first.decided, second.decided) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(first.room).min(b.unwrap_or(second.room))),
                },
                // The lower room counts: after a rise only if both were.
                after_rise: first.after_rise && second.after_rise,
            },
        );
    }

    /// The least room held over `[from, to]` (nothing recorded over the span, no
    /// decision yet, is no room) and the least decided (the same but in a dry run),
    /// whether at some point of it `max` held the pods down or an override decided them,
    /// and whether the seasonal prediction decided all of it. Decisions made after the
    /// predicted rise came count only when all of the span's were: a window the rise
    /// came in is judged against the room it met, not what it left; one after it
    /// against what was left.
    pub(super) fn over(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> HeldOver {
        let start = self.decisions.iter().rposition(|h| h.at <= from).unwrap_or(0);
        let span = || self.decisions[start..].iter().filter(|h| h.at <= to);
        let all_after_rise = span().all(|h| h.after_rise);
        let mut during = span().filter(|h| all_after_rise || !h.after_rise).peekable();
        if during.peek().is_none() {
            return HeldOver {
                least: Rise::default(),
                decided: Rise::default(),
                not_ours: false,
                overridden: false,
                seasonal: false,
                dry_run: false,
            };
        }
        let most = Rise { cpu_millis: u64::MAX, memory_bytes: u64::MAX };
        let start =
            HeldOver { least: most, decided: most, not_ours: false, overridden: false, seasonal: true, dry_run: false };
        during.fold(start, |over, h| HeldOver {
            least: over.least.min(h.room),
            decided: over.decided.min(h.decided.unwrap_or(h.room)),
            not_ours: over.not_ours || h.at_max || h.by == DecidedBy::Override,
            overridden: over.overridden || h.by == DecidedBy::Override,
            seasonal: over.seasonal && h.by == DecidedBy::Seasonal,
            dry_run: over.dry_run || h.decided.is_some(),
        })
    }
}
