//! The history as the state store keeps it: one flat JSON object, its fields in the
//! order records have always been written. The learners' fields interleave in that
//! order, so `#[serde(flatten)]` of each learner would reorder them: the stored form
//! is spelled here once instead, and converted to and from [`History`].

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::correction::{Correction, FewPods, Unanswerable, WaitsSeen};
use super::held::{Held, HeldRoom};
use super::hold::Hold;
use super::lead::{Launch, Lead};
use super::reaction::{Arrival, Reaction};
use super::seasonal::{DayRises, DemandSample, Seasonal, SlotLow};
use super::{History, Rise};

/// See the learners' fields of the same names.
#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
pub(super) struct Stored {
    days: Vec<DayRises>,
    recent: Vec<DemandSample>,
    lead_secs: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    reaction_secs: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    arrivals: Vec<Arrival>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_arrival: Option<DateTime<Utc>>,
    missed_waits_secs: Vec<u32>,
    launching: BTreeMap<String, Launch>,
    last_look: Option<DateTime<Utc>>,
    correction_permille: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget_share_permille: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_counted: Option<NaiveDate>,
    waits: Option<WaitsSeen>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    last_hour: Vec<WaitsSeen>,
    unmet_reported_at: Option<DateTime<Utc>>,
    missed: Rise,
    missed_at: Option<DateTime<Utc>>,
    held: Vec<Held>,
    allowed_wait_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    time_zone: String,
    few: FewPods,
    raised_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    correction_set_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hold: Option<Hold>,
    #[serde(default, skip_serializing_if = "is_zero")]
    raised_without_effect: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    without_effect_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unanswerable: Option<Unanswerable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot_low: Option<SlotLow>,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl From<Stored> for History {
    fn from(s: Stored) -> History {
        History {
            seasonal: Seasonal { days: s.days, recent: s.recent, slot_low: s.slot_low },
            lead: Lead { lead_secs: s.lead_secs, launching: s.launching, last_look: s.last_look },
            reaction: Reaction { reaction_secs: s.reaction_secs, arrivals: s.arrivals, last_arrival: s.last_arrival },
            correction: Correction {
                missed_waits_secs: s.missed_waits_secs,
                correction_permille: s.correction_permille,
                budget_share_permille: s.budget_share_permille,
                first_counted: s.first_counted,
                waits: s.waits,
                last_hour: s.last_hour,
                missed: s.missed,
                missed_at: s.missed_at,
                few: s.few,
                raised_at: s.raised_at,
                correction_set_at: s.correction_set_at,
                raised_without_effect: s.raised_without_effect,
                without_effect_at: s.without_effect_at,
                unanswerable: s.unanswerable,
            },
            held: HeldRoom { decisions: s.held },
            allowed_wait_ms: s.allowed_wait_ms,
            time_zone: s.time_zone,
            unmet_reported_at: s.unmet_reported_at,
            hold: s.hold,
        }
    }
}

impl From<History> for Stored {
    fn from(h: History) -> Stored {
        let History { seasonal, lead, reaction, correction, held, allowed_wait_ms, time_zone, unmet_reported_at, hold } =
            h;
        Stored {
            days: seasonal.days,
            recent: seasonal.recent,
            lead_secs: lead.lead_secs,
            reaction_secs: reaction.reaction_secs,
            arrivals: reaction.arrivals,
            last_arrival: reaction.last_arrival,
            missed_waits_secs: correction.missed_waits_secs,
            launching: lead.launching,
            last_look: lead.last_look,
            correction_permille: correction.correction_permille,
            budget_share_permille: correction.budget_share_permille,
            first_counted: correction.first_counted,
            waits: correction.waits,
            last_hour: correction.last_hour,
            unmet_reported_at,
            missed: correction.missed,
            missed_at: correction.missed_at,
            held: held.decisions,
            allowed_wait_ms,
            time_zone,
            few: correction.few,
            raised_at: correction.raised_at,
            correction_set_at: correction.correction_set_at,
            raised_without_effect: correction.raised_without_effect,
            without_effect_at: correction.without_effect_at,
            unanswerable: correction.unanswerable,
            hold,
            slot_low: seasonal.slot_low,
        }
    }
}
