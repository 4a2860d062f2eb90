//! Where a notifier's delivery progress lives: records in the membership bucket itself (`jaque_membership` on
//! NATS, the `MemStore` in memory), so they are written at revisions of the same sequence as the member keys
//! (the core decides that a claimer is gone by comparing the two; see `jaque_core::notifier`).
//!
//! Keys: `notify.<endpoint>.<object>` for the `{done, claim}` record of an object at an endpoint (the endpoint
//! as 16 hex digits, the object id in unpadded base64url, since ids may hold `:` and `@`, which KV keys cannot),
//! and `notify.start.<endpoint>` for where that endpoint's notifications begin. They have several subject tokens,
//! so the membership watch (which takes one-token keys only) never sees them. Every write is a compare-and-set.

use crate::coord::{Coordination, MemStore};
use crate::metrics;
use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use futures_util::{stream, StreamExt, TryStreamExt};
use jaque_core::notifier::{DeliveryRecord, EndpointId, Stored};
use jaque_core::{IoError, ObjectId};
use std::sync::Arc;

/// Records read at once, per progress query.
const READ_CONCURRENCY: usize = 64;

pub fn record_key(endpoint: EndpointId, object: &ObjectId) -> String {
    format!("notify.{endpoint}.{}", URL_SAFE_NO_PAD.encode(object.as_str()))
}

pub fn start_key(endpoint: EndpointId) -> String {
    format!("notify.start.{endpoint}")
}

/// The object id a record key names, if it is one (the inverse of `record_key`).
#[cfg(test)]
pub fn object_of(key: &str) -> Option<(EndpointId, ObjectId)> {
    let rest = key.strip_prefix("notify.")?;
    let (ep, obj) = rest.split_once('.')?;
    let ep = u64::from_str_radix(ep, 16).ok().filter(|_| ep.len() == 16)?;
    let id = String::from_utf8(URL_SAFE_NO_PAD.decode(obj).ok()?).ok()?;
    Some((EndpointId(ep), ObjectId::new(id).ok()?))
}

/// The progress records of a notifier's endpoints, where they live.
#[derive(Clone)]
pub enum Records {
    Memory(Arc<MemStore>),
    Nats(Box<kv::Store>),
}

impl Records {
    pub fn of(coord: &Coordination) -> Records {
        match coord {
            Coordination::Memory(m) => Records::Memory(m.clone()),
            Coordination::Nats(n) => Records::Nats(Box::new(n.kv().clone())),
        }
    }

    /// One record, if there is one. A record that does not decode is counted and read as empty at its
    /// revision, so the next compare-and-set replaces it.
    async fn get(&self, key: &str) -> Result<Option<Stored>, IoError> {
        let found = match self {
            Records::Memory(m) => m.record(key),
            Records::Nats(kv) => {
                match kv.entry(key).await.map_err(|e| IoError::unavailable(format!("reading {key}: {e}")))? {
                    Some(e) if e.operation == Operation::Put => Some((e.value.to_vec(), e.revision)),
                    _ => None,
                }
            }
        };
        Ok(found.map(|(bytes, rev)| {
            let record = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(key, error = %e, "a progress record that does not decode is read as empty");
                metrics::wire_error("notifier progress record");
                DeliveryRecord::default()
            });
            Stored { record, rev }
        }))
    }

    /// The records of `objects` at `endpoints` that exist.
    pub async fn read(
        &self,
        objects: Vec<ObjectId>,
        endpoints: Vec<EndpointId>,
    ) -> Result<Vec<(ObjectId, EndpointId, Stored)>, IoError> {
        // Only the records found are kept, and the first error ends the read (as the answer would be that error
        // anyway): a resume asks for every object it takes on, a million at start, most with no record.
        let n = endpoints.len();
        let keys = (0..objects.len() * n).map(move |k| (objects[k / n].clone(), endpoints[k % n]));
        stream::iter(keys)
            .map(|(o, e)| async move { Ok(self.get(&record_key(e, &o)).await?.map(|s| (o, e, s))) })
            .buffer_unordered(READ_CONCURRENCY)
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await
    }

    /// Writes the record only if it is at revision `expect` (`None`: only if there is none). `Ok(None)`: it
    /// was not (another notifier wrote it).
    pub async fn write(
        &self,
        object: &ObjectId,
        endpoint: EndpointId,
        record: &DeliveryRecord,
        expect: Option<u64>,
    ) -> Result<Option<u64>, IoError> {
        let key = record_key(endpoint, object);
        let value = serde_json::to_vec(record).expect("a record always serializes");
        match self {
            Records::Memory(m) => m.write_record(&key, value, expect).await.map_err(IoError::Unavailable),
            Records::Nats(kv) => match expect {
                Some(rev) => match kv.update(&key, value.into(), rev).await {
                    Ok(rev) => Ok(Some(rev)),
                    Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(None),
                    Err(e) => Err(IoError::unavailable(format!("writing {key}: {e}"))),
                },
                None => match kv.create(&key, value.into()).await {
                    Ok(rev) => Ok(Some(rev)),
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(None),
                    Err(e) => Err(IoError::unavailable(format!("creating {key}: {e}"))),
                },
            },
        }
    }

    /// For each endpoint: creates its start record at `propose` if it has none, and answers what it holds.
    pub async fn starts(&self, endpoints: &[EndpointId], propose: u64) -> Result<Vec<(EndpointId, u64)>, IoError> {
        let mut out = Vec::new();
        for ep in endpoints {
            let key = start_key(*ep);
            let value = propose.to_string().into_bytes();
            let created = match self {
                Records::Memory(m) => m.write_record(&key, value, None).await.map_err(IoError::Unavailable)?.is_some(),
                Records::Nats(kv) => match kv.create(&key, value.into()).await {
                    Ok(_) => true,
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => false,
                    Err(e) => return Err(IoError::unavailable(format!("creating {key}: {e}"))),
                },
            };
            if created {
                tracing::info!(endpoint = %ep, from = propose, "notifications to this endpoint begin after this log position");
                out.push((*ep, propose));
                continue;
            }
            let bytes = match self {
                Records::Memory(m) => m.record(&key).map(|(v, _)| v),
                Records::Nats(kv) => kv
                    .get(&key)
                    .await
                    .map_err(|e| IoError::unavailable(format!("reading {key}: {e}")))?
                    .map(|b| b.to_vec()),
            };
            let start = bytes
                .as_deref()
                .and_then(|b| std::str::from_utf8(b).ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    metrics::wire_error("notifier start record");
                    IoError::refused(format!(
                        "the start record {key} is missing or not a log position; delete it to start again"
                    ))
                })?;
            out.push((*ep, start));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_valid_kv_keys_of_several_tokens_and_name_their_object() {
        let ep = EndpointId(0x0123_4567_89ab_cdef);
        for id in ["web", "a.b:c@d-e_f", &"x".repeat(200)] {
            let object = ObjectId::new(id).unwrap();
            let key = record_key(ep, &object);
            assert!(key.starts_with("notify.0123456789abcdef."), "{key}");
            assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=".contains(c)), "{key}");
            assert!(key.split('.').count() >= 3, "not a one-token member key: {key}");
            assert_eq!(object_of(&key), Some((ep, object)));
        }
        assert_eq!(start_key(ep), "notify.start.0123456789abcdef");
        assert_eq!(object_of("notify.start.0123456789abcdef"), None);
        assert_eq!(object_of("membership/e1"), None);
    }
}
