//! A headroom schedule's cron: five fields, parsed by croner. A cron it refuses is told in
//! the text as written (which field, what it takes, the name meant), not in the parser's
//! words, which name its own types and rewrite the field (`MON-FRY` as `1-FRY`).

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use super::walk;

/// A schedule's cron text that is not a five-field cron expression.
#[derive(Debug, thiserror::Error)]
#[error("`{text}`: {why}")]
pub struct CronError {
    /// The text as written.
    pub text: String,
    /// What is wrong, in the text's own terms.
    pub why: String,
    /// The cron parser's reason, kept for a program that wants it.
    #[source]
    pub source: croner::errors::CronError,
}

/// Standard five-field cron (minute hour day-of-month month day-of-week).
pub fn parse_cron(text: &str) -> Result<Cron, CronError> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|source| CronError { text: text.to_string(), why: mistake(text), source })
}

/// One of the five fields: what it counts and the values it takes.
struct Field {
    name: &'static str,
    /// What one value is (`a day`), for a word that is none.
    one: &'static str,
    min: u32,
    max: u32,
    /// The names it takes, by value from `min` (months from 1, days from 0).
    names: &'static [&'static str],
    takes: &'static str,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [Field; 5] = [
    Field { name: "minute", one: "a minute", min: 0, max: 59, names: &[], takes: "0-59" },
    Field { name: "hour", one: "an hour", min: 0, max: 23, names: &[], takes: "0-23" },
    Field { name: "day-of-month", one: "a day of the month", min: 1, max: 31, names: &[], takes: "1-31" },
    Field { name: "month", one: "a month", min: 1, max: 12, names: &MONTHS, takes: "1-12 or the names JAN-DEC" },
    Field {
        name: "day-of-week",
        one: "a day",
        min: 0,
        max: 7,
        names: &DAYS,
        takes: "0-7 (0 and 7 are Sunday) or the names SUN-SAT",
    },
];

const ORDINALS: [&str; 5] = ["first", "second", "third", "fourth", "fifth"];

/// What a cron the parser refused gets wrong: the field count, or the first field with a
/// value it does not take. A form this does not judge (croner's `L`, `W`, `#`) gets the
/// general shape of a cron.
fn mistake(text: &str) -> String {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        let seconds = if fields.len() > FIELDS.len() { "; seconds and years are not taken" } else { "" };
        return format!(
            "{} field(s), not the five a cron has (minute hour day-of-month month day-of-week, e.g. `0 7 * * MON-FRI`){seconds}",
            fields.len()
        );
    }
    for ((written, field), nth) in fields.iter().zip(&FIELDS).zip(ORDINALS) {
        if let Some(why) = field.mistake(written) {
            return format!("its {} field (the {nth}), `{written}`: {why}", field.name);
        }
    }
    "not a cron expression: five fields, minute hour day-of-month month day-of-week (e.g. `0 7 * * MON-FRI`), each \
     `*`, a value, a range `a-b` or a list `a,b`, with an optional step `/n`"
        .to_string()
}

impl Field {
    /// Why `written` is not a value of this field, if it is not.
    fn mistake(&self, written: &str) -> Option<String> {
        for item in written.split(',') {
            let (base, step) = match item.split_once('/') {
                Some((base, step)) => (base, Some(step)),
                None => (item, None),
            };
            if let Some(step) = step {
                if !step.parse::<u32>().is_ok_and(|n| n >= 1) {
                    return Some(format!("`/{step}`: a step is a whole number, 1 or more"));
                }
            }
            if base == "*" || base == "?" {
                continue;
            }
            let upper = base.to_ascii_uppercase();
            if upper.contains(['L', 'W', '#']) && !self.names.iter().any(|n| upper.contains(n)) {
                return None; // croner's extensions: not judged here
            }
            let (low, high) = match base.split_once('-') {
                Some((low, high)) => (low, Some(high)),
                None => (base, None),
            };
            let low = match self.value(low) {
                Ok(v) => v,
                Err(why) => return Some(why),
            };
            if let Some(high) = high {
                match self.value(high) {
                    Err(why) => return Some(why),
                    Ok(high) if high < low => {
                        return Some(format!(
                            "`{base}` runs backwards: a range goes from the lower value to the higher; to wrap \
                             around, list the values (`a,b`)"
                        ))
                    }
                    Ok(_) => {}
                }
            }
        }
        None
    }

    /// The value `word` names, or why it names none.
    fn value(&self, word: &str) -> Result<u32, String> {
        if word.is_empty() {
            return Err(format!("a value is missing; {} takes {}", self.name, self.takes));
        }
        if word.bytes().all(|b| b.is_ascii_digit()) {
            return match word.parse::<u32>() {
                Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
                _ => Err(format!("{word} is outside {}; {} takes {}", self.range(), self.name, self.takes)),
            };
        }
        let upper = word.to_ascii_uppercase();
        if let Some(index) = self.names.iter().position(|n| *n == upper) {
            return Ok(self.min + index as u32);
        }
        // `FRIDAY` for `FRI`, or a typo of one (`FRY`).
        let meant = self
            .names
            .iter()
            .find(|n| upper.starts_with(*n))
            .copied()
            .or_else(|| walk::nearest_within(&upper, self.names, 1))
            .map(|n| format!("; did you mean `{n}`?"))
            .unwrap_or_default();
        Err(format!("`{word}` is not {}; {} takes {}{meant}", self.one, self.name, self.takes))
    }

    fn range(&self) -> String {
        format!("{}-{}", self.min, self.max)
    }
}
