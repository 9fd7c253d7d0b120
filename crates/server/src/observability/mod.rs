//! What the server tells about itself: `stats` groups, Prometheus metrics,
//! latency histograms, `watch` streams, `stats detail` and the `-vv` log
//! lines.

pub(crate) mod counters;
pub(crate) mod detail;
pub(crate) mod latency;
pub(crate) mod metrics;
pub(crate) mod settings;
pub(crate) mod stats;
pub(crate) mod verbose;
pub(crate) mod watch;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counts one: a counter only its own thread writes (readers take any
/// recent value), so no atomic read-modify-write.
pub(crate) fn inc(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

/// Bytes memcached's metadump leaves as they are in a key: RFC 3986's
/// unreserved characters.
pub(crate) const KEY_ESCAPE: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A key as memcached's logs and dumps show it: URI-escaped.
pub(crate) fn uri(key: &[u8]) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::percent_encode(key, KEY_ESCAPE)
}
