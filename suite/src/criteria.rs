//! What a recorded history is judged against: the delivery guarantee, the ordering
//! scope and the due-time tolerances a case expects (saved with the history, so that
//! it can be judged again offline).

use pubsub_components::{DeliveryGuarantee, OrderingScope};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// What the history is judged against (saved with the history, so that it can be
/// judged again offline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Criteria {
    pub guarantee: DeliveryGuarantee,
    /// The ordering scope to check, if any.
    pub ordering: Option<OrderingScope>,
    /// Keys left out of the ordering check (e.g. retried on purpose).
    pub unordered_keys: BTreeSet<String>,
    /// Due-time checks for delayed messages.
    pub timing: Option<Timing>,
    /// Whether a failed publish that was delivered anyway is only a warning (bulk
    /// over-reported failures) rather than nothing worth noting.
    pub note_over_reported: bool,
}

/// Tolerances of the due-time check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// How early a delivery may be (declared clock tolerance).
    pub early_tolerance: Duration,
    /// How late a delivery may be (declared delay precision).
    pub late_precision: Duration,
}

impl Criteria {
    /// Delivery only: nothing lost, nothing unexpected, duplicates per the guarantee.
    pub fn delivery(guarantee: DeliveryGuarantee) -> Self {
        Criteria {
            guarantee,
            ordering: None,
            unordered_keys: BTreeSet::new(),
            timing: None,
            note_over_reported: true,
        }
    }
}
