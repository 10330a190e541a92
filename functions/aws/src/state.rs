//! The state store over one DynamoDB table (partition key `pk`, TTL on `expires_at`):
//! `pool#NAME` holds the pool record and its version, `lease#NAME` the lease (and an
//! urgent run's claim on its next turn),
//! `event#ID` a handled event id. The record is stored deflated (`record_z`, binary):
//! 5,000 interruptions in flight take ~170 KB instead of ~2.5 MB of JSON, within
//! DynamoDB's 400 KB item limit. A record written as JSON text (`record`) still reads.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, PutRequest, WriteRequest};
use ballast_core::ports::{
    ConfigVersions, ErrorKind, PortError, StateStore, Urgency, VersionNote, Versioned, LEASE_CLAIM_FOR,
};
use ballast_core::record::PoolRecord;
use chrono::{DateTime, Utc};

use crate::classify;

/// The table's partition key: `pool#NAME`, `lease#NAME`, `event#ID` or `config-version#PART`.
pub const KEY: &str = "pk";
/// A stored record never inflates past this (a corrupt or hostile item).
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// The pool record as stored: deflated JSON.
pub fn encode_record(record: &PoolRecord) -> Result<Vec<u8>, serde_json::Error> {
    use std::io::Write;
    let json = serde_json::to_vec(record)?;
    let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(&json);
    Ok(encoder.finish().unwrap_or_default())
}

/// A stored pool record read back: inflated (at most 64 MiB) and parsed, or why not.
pub fn decode_record(bytes: &[u8]) -> Result<PoolRecord, String> {
    use std::io::Read;
    let mut json = Vec::new();
    flate2::read::DeflateDecoder::new(bytes)
        .take(MAX_RECORD_BYTES)
        .read_to_end(&mut json)
        .map_err(|e| format!("not deflated data: {e}"))?;
    serde_json::from_slice(&json).map_err(|e| format!("not a pool record: {e}"))
}
/// The attribute DynamoDB's TTL sweeps items by (epoch seconds).
pub const TTL_ATTRIBUTE: &str = "expires_at";
/// On a lease item: until when an urgent run claims the next turn (epoch seconds).
const CLAIM_ATTRIBUTE: &str = "claimed_until";
/// Unprocessed batch items are retried this many times before the call fails (retryable).
const BATCH_ROUNDS: usize = 5;

/// The [`StateStore`] port over one DynamoDB table: pool records, leases and handled events.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn key(kind: &str, name: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([(KEY.to_string(), s(format!("{kind}#{name}")))])
}

/// How long a part's version note is kept: one not renewed in that time is of a part
/// that no longer runs.
const VERSION_NOTE_KEPT: chrono::Duration = chrono::Duration::days(30);

impl DynamoStore {
    /// A client made from the shared SDK config, on `table`.
    pub fn new(conf: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        DynamoStore { client: aws_sdk_dynamodb::Client::new(conf), table: table.into() }
    }

    /// The config version each of `parts` last noted, where one did.
    pub async fn config_versions(&self, parts: &[&str]) -> Result<Vec<VersionNote>, PortError> {
        let mut notes = Vec::new();
        for part in parts {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key("config-version", part)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| classify("GetItem", e))?;
            let Some(item) = out.item() else { continue };
            let number = |name: &str| item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
            if let (Some(version), Some(at)) =
                (number("version"), number("at").and_then(|t| DateTime::from_timestamp(t, 0)))
            {
                notes.push(VersionNote { part: part.to_string(), version, at });
            }
        }
        Ok(notes)
    }

    /// Over a client of the caller's making (tests point it at moto).
    pub fn from_client(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        DynamoStore { client, table: table.into() }
    }

    fn bad_item(&self, what: &str, why: String) -> PortError {
        PortError::new(ErrorKind::Permanent, "GetItem", format!("table {}: {what}: {why}", self.table))
    }

    /// An urgent run refused the lease claims the next turn (renewed at each of its tries).
    async fn claim_next_turn(&self, pool: &str, now: DateTime<Utc>) -> Result<(), PortError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key("lease", pool)))
            // The lease may have been let go meanwhile (a previous release deletes the
            // item): a claim alone still makes an item any release can take, expired.
            .update_expression("SET #claim = :claimed, #expires = if_not_exists(#expires, :released)")
            .expression_attribute_names("#claim", CLAIM_ATTRIBUTE)
            .expression_attribute_names("#expires", TTL_ATTRIBUTE)
            .expression_attribute_values(":claimed", n((now + LEASE_CLAIM_FOR).timestamp()))
            .expression_attribute_values(":released", n(0))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("UpdateItem", e))
    }
}

#[async_trait]
impl StateStore for DynamoStore {
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key("pool", pool)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        let Some(item) = out.item() else { return Ok(Versioned { value: PoolRecord::default(), version: 0 }) };
        let version = match item.get("version") {
            Some(AttributeValue::N(v)) => {
                v.parse::<u64>().map_err(|e| self.bad_item(&format!("pool#{pool}.version"), e.to_string()))?
            }
            _ => return Err(self.bad_item(&format!("pool#{pool}.version"), "missing or not a number".into())),
        };
        let record = match (item.get("record_z"), item.get("record")) {
            (Some(AttributeValue::B(blob)), _) => {
                decode_record(blob.as_ref()).map_err(|e| self.bad_item(&format!("pool#{pool}.record_z"), e))?
            }
            (None, Some(AttributeValue::S(json))) => serde_json::from_str(json)
                .map_err(|e| self.bad_item(&format!("pool#{pool}.record"), format!("not a pool record: {e}")))?,
            _ => return Err(self.bad_item(&format!("pool#{pool}.record_z"), "missing or not binary".into())),
        };
        Ok(Versioned { value: record, version })
    }

    async fn save(&self, pool: &str, record: &PoolRecord, expected: u64) -> Result<u64, PortError> {
        let blob = encode_record(record)
            .map_err(|e| PortError::new(ErrorKind::Permanent, "PutItem", format!("pool record of {pool}: {e}")))?;
        let next = expected + 1;
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(key("pool", pool)))
            .item("record_z", AttributeValue::B(aws_smithy_types::Blob::new(blob)))
            .item("version", n(next))
            .item("updated_at", s(Utc::now().to_rfc3339()));
        request = if expected == 0 {
            request.condition_expression("attribute_not_exists(pk)")
        } else {
            request.condition_expression("version = :expected").expression_attribute_values(":expected", n(expected))
        };
        match request.send().await {
            Ok(_) => Ok(next),
            Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => {
                Err(PortError::new(
                    ErrorKind::Conflict,
                    "PutItem",
                    format!("pool {pool}: the record is no longer at version {expected}"),
                )
                .with_source(e))
            }
            Err(e) => Err(classify("PutItem", e)),
        }
    }

    async fn acquire_lease(
        &self,
        pool: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
        urgency: Urgency,
    ) -> Result<bool, PortError> {
        let until = now.timestamp() + i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2);
        // An update, not a put: a renewal keeps an urgent run's claim on the next turn.
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key("lease", pool)))
            .update_expression("SET #owner = :owner, #expires = :until")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#expires", TTL_ATTRIBUTE);
        // DynamoDB refuses a name the expressions do not use: #claim only where read.
        let request = match urgency {
            Urgency::CannotWait => {
                request.condition_expression("#owner = :owner OR attribute_not_exists(#owner) OR #expires < :now")
            }
            Urgency::CanWait => request
                .condition_expression(
                    "#owner = :owner OR ((attribute_not_exists(#owner) OR #expires < :now) \
                     AND (attribute_not_exists(#claim) OR #claim < :now))",
                )
                .expression_attribute_names("#claim", CLAIM_ATTRIBUTE),
        };
        let result = request
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now.timestamp()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => {
                if urgency == Urgency::CannotWait {
                    self.claim_next_turn(pool, now).await?;
                }
                Ok(false)
            }
            Err(e) => Err(classify("UpdateItem", e)),
        }
    }

    async fn release_lease(&self, pool: &str, owner: &str) -> Result<(), PortError> {
        // Expired rather than deleted: an urgent run's claim on the lease item stays. At
        // 0, not now: the callers' clock is not read here (and DynamoDB's TTL leaves an item
        // expired over five years ago, so the claim is not swept with it).
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key("lease", pool)))
            .update_expression("SET #expires = :released REMOVE #owner")
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#expires", TTL_ATTRIBUTE)
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":released", n(0))
            .send()
            .await;
        match result {
            // Someone else's lease (ours expired and was taken): leave it.
            Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => Ok(()),
            Err(e) => Err(classify("UpdateItem", e)),
            Ok(_) => Ok(()),
        }
    }

    async fn seen(&self, event_ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        let mut seen = BTreeSet::new();
        let unique: BTreeSet<&String> = event_ids.iter().collect();
        let unique: Vec<&String> = unique.into_iter().collect();
        for chunk in unique.chunks(100) {
            let mut keys: Vec<HashMap<String, AttributeValue>> = chunk.iter().map(|id| key("event", id)).collect();
            for _ in 0..BATCH_ROUNDS {
                if keys.is_empty() {
                    break;
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| PortError::new(ErrorKind::Permanent, "BatchGetItem", e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| classify("BatchGetItem", e))?;
                for item in out.responses().and_then(|r| r.get(&self.table)).into_iter().flatten() {
                    if let Some(AttributeValue::S(pk)) = item.get(KEY) {
                        if let Some(id) = pk.strip_prefix("event#") {
                            seen.insert(id.to_string());
                        }
                    }
                }
                keys = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
            if !keys.is_empty() {
                return Err(PortError::new(ErrorKind::Retryable, "BatchGetItem", "unprocessed keys after retries"));
            }
        }
        Ok(seen)
    }

    async fn mark_seen(&self, event_ids: &[String], expires_at: DateTime<Utc>) -> Result<(), PortError> {
        let unique: BTreeSet<&String> = event_ids.iter().collect();
        let unique: Vec<&String> = unique.into_iter().collect();
        for chunk in unique.chunks(25) {
            let mut writes = Vec::new();
            for id in chunk {
                let mut item = key("event", id);
                item.insert(TTL_ATTRIBUTE.into(), n(expires_at.timestamp()));
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| PortError::new(ErrorKind::Permanent, "BatchWriteItem", e.to_string()))?;
                writes.push(WriteRequest::builder().put_request(put).build());
            }
            for _ in 0..BATCH_ROUNDS {
                if writes.is_empty() {
                    break;
                }
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, std::mem::take(&mut writes))
                    .send()
                    .await
                    .map_err(|e| classify("BatchWriteItem", e))?;
                writes = out.unprocessed_items().and_then(|u| u.get(&self.table)).cloned().unwrap_or_default();
            }
            if !writes.is_empty() {
                return Err(PortError::new(ErrorKind::Retryable, "BatchWriteItem", "unprocessed items after retries"));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ConfigVersions for DynamoStore {
    async fn note(&self, note: &VersionNote) -> Result<(), PortError> {
        let mut item = key("config-version", &note.part);
        item.insert("version".into(), n(note.version));
        item.insert("at".into(), n(note.at.timestamp()));
        item.insert(TTL_ATTRIBUTE.into(), n((note.at + VERSION_NOTE_KEPT).timestamp()));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| classify("PutItem", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::event::InstanceAction;
    use ballast_core::record::{
        CapacityCall, Disruption, DisruptionKind, Interruption, InterruptionCause, Journal, Surge,
    };

    /// Instance ids as random as AWS's.
    fn instance_ids() -> impl FnMut() -> String {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            format!("i-0{:016x}", seed)
        }
    }

    const SPOT: &str = "eks-general-spot-m6-20261120abcdef";

    fn at() -> DateTime<Utc> {
        "2026-11-20T09:00:00Z".parse().unwrap()
    }

    /// A record of `ids` interrupted at once: each surged, disrupted and to be terminated.
    fn a_storm_of(ids: &[String]) -> PoolRecord {
        let at = at();
        PoolRecord {
            interruptions: ids
                .iter()
                .map(|i| Interruption {
                    instance_id: i.clone(),
                    asg: SPOT.into(),
                    cause: InterruptionCause::SpotWarning { action: InstanceAction::Terminate },
                    noticed_at: at,
                    planned_at: Some(at),
                    surge: Some(Surge {
                        asg: SPOT.into(),
                        planned_at: at,
                        plan: 1,
                        moved: None,
                        holds_at: Some(400),
                        fallback_unit: true,
                    }),
                    terminated: true,
                })
                .collect(),
            disruptions: ids
                .iter()
                .map(|i| Disruption {
                    instance_id: i.clone(),
                    asg: SPOT.into(),
                    at,
                    kind: DisruptionKind::InterruptionWarning,
                })
                .collect(),
            journal: Some(Journal {
                planned_at: at,
                seq: 1,
                units_added: 0,
                attempted: 0,
                owed: Vec::new(),
                moves: Vec::new(),
                live: Default::default(),
                looked_at: Default::default(),
                remakes: Vec::new(),
                calls: ids
                    .iter()
                    .map(|i| CapacityCall::Terminate {
                        withdraws: false,
                        asg: SPOT.into(),
                        instance_id: i.clone(),
                        decrement: true,
                        done: false,
                    })
                    .collect(),
            }),
            ..PoolRecord::default()
        }
    }

    /// 5,000 interruptions in flight: the stored item stays well within DynamoDB's
    /// 400 KB, and reads back whole.
    #[test]
    fn a_record_of_5000_interruptions_fits_an_item_and_reads_back() {
        let mut id = instance_ids();
        let ids: Vec<String> = (0..5000).map(|_| id()).collect();
        let record = a_storm_of(&ids);
        let json = serde_json::to_vec(&record).unwrap().len();
        let stored = encode_record(&record).unwrap();
        assert!(stored.len() < 300 * 1024, "{} bytes stored ({json} as JSON)", stored.len());
        assert_eq!(decode_record(&stored).unwrap(), record);
        assert!(decode_record(b"not deflate").is_err());
    }

    /// A failback step keeps the spot ASG's instance ids: up to a 10,000-instance ASG, beside
    /// the 5,000 interruptions docs/src/safety.md ("Bounded") bounds the record for, it still fits.
    #[test]
    fn a_failback_step_of_a_10000_instance_asg_beside_5000_interruptions_fits() {
        use ballast_core::record::FailbackStep;
        let mut id = instance_ids();
        let storm = a_storm_of(&(0..5000).map(|_| id()).collect::<Vec<_>>());
        let mut sizes = Vec::new();
        for n in [0usize, 1000, 5000, 10000] {
            let mut record = storm.clone();
            record.failback = Some(FailbackStep {
                spot_asg: SPOT.into(),
                count: 10,
                started_at: at(),
                plan: 1,
                desired_before: n as u32,
                raised_to: n as u32 + 10,
                ready_before: n as u32,
                instances_before: Some((0..n).map(|_| id()).collect()),
                unfilled_before: 0,
                victims: Vec::new(),
                victims_since: None,
                over_before: 0,
                asked: 0,
                seen_new: Vec::new(),
                floor_lowered_for: Vec::new(),
            });
            let stored = encode_record(&record).unwrap().len();
            sizes.push((n, stored));
        }
        assert!(sizes.iter().all(|(_, stored)| *stored < 300 * 1024), "instances_before, stored bytes: {sizes:?}");
    }
}
