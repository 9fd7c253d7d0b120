//! What the server tells about itself: `stats` groups, Prometheus metrics,
//! latency histograms, `watch` streams, `stats detail` and the `-vv` log
//! lines.

pub(crate) mod detail;
pub(crate) mod latency;
pub(crate) mod metrics;
pub(crate) mod settings;
pub(crate) mod stats;
pub(crate) mod verbose;
pub(crate) mod watch;
