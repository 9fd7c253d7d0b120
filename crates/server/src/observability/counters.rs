//! Each worker's counters ([`WorkerStats`]): what the request path and the
//! event loops count, one relaxed store each, and the table `stats` and
//! `/metrics` read them by ([`WORKER_FIELDS`]). Below every layer that
//! counts; the reports that read them are `stats.rs` and `metrics.rs`.

use std::sync::atomic::AtomicU64;

/// A worker counter's name, help, whether the general `stats` lists it
/// in the run of [`WORKER_FIELDS`] (the others it shows in their own
/// places, in memcached's order), and its place in [`WorkerStats`].
pub(crate) type Field = (&'static str, &'static str, bool, fn(&WorkerStats) -> &AtomicU64);

/// Declares each worker counter once: its field in [`WorkerStats`], and
/// its entry in [`WORKER_FIELDS`], which `stats` shows and `stats reset`
/// zeroes. Written in the order `stats` lists them.
macro_rules! worker_counters {
    ($( $(#[$attr:meta])* $field:ident: $name:literal, $listed:literal, $help:literal; )*) => {
        /// One worker's request counters. Only its worker writes them (plain load
        /// and store, no locked instructions); `stats` reads them from any thread.
        #[derive(Debug, Default)]
        pub(crate) struct WorkerStats {
            /// The last snapshot seal request this worker carried out.
            pub sealed: AtomicU64,
            $( $(#[$attr])* pub $field: AtomicU64, )*
            /// Request latency by command family (with `--metrics-listen`).
            pub latency: crate::observability::latency::Latency,
        }

        /// Every worker counter, summed over the workers for `stats` and
        /// zeroed by `stats reset`.
        pub(crate) const WORKER_FIELDS: &[Field] = &[ $( ($name, $help, $listed, |w| &w.$field), )* ];
    };
}

worker_counters! {
    cmd_get: "cmd_get", true, "Reads (each key of a multi-get, and mg, counts once).";
    cmd_set: "cmd_set", true, "Storage commands (set, add, replace, append, prepend, cas, ms).";
    cmd_flush: "cmd_flush", true, "flush_all commands.";
    cmd_touch: "cmd_touch", true, "Touching reads (touch, gat, gats, mg T).";
    // memcached 1.6.18 counts only `me` here; mg, ms, md and ma count as
    // gets, sets, deletes and incr/decr.
    cmd_meta: "cmd_meta", true, "Meta debug commands (me).";
    get_hits: "get_hits", true, "Reads that found the key.";
    get_misses: "get_misses", true, "Reads that did not find the key.";
    delete_misses: "delete_misses", true, "Deletes of keys that were not there.";
    delete_hits: "delete_hits", true, "Deletes that removed an item.";
    incr_misses: "incr_misses", true, "incr of keys that were not there.";
    incr_hits: "incr_hits", true, "incr that changed a value.";
    decr_misses: "decr_misses", true, "decr of keys that were not there.";
    decr_hits: "decr_hits", true, "decr that changed a value.";
    cas_misses: "cas_misses", true, "cas on keys that were not there.";
    cas_hits: "cas_hits", true, "cas that stored.";
    cas_badval: "cas_badval", true, "cas refused because the item had changed.";
    touch_hits: "touch_hits", true, "Touching reads that found the key.";
    touch_misses: "touch_misses", true, "Touching reads that did not find the key.";
    store_too_large: "store_too_large", true, "Writes refused for exceeding the item size limit (-I).";
    store_no_memory: "store_no_memory", true, "Writes refused because no memory could be freed.";
    auth_cmds: "auth_cmds", true, "Authentication attempts (SASL and ASCII).";
    auth_errors: "auth_errors", true, "Failed authentication attempts.";
    bytes_read: "bytes_read", true, "Bytes read from clients.";
    bytes_written: "bytes_written", true, "Bytes written to clients.";
    /// Turns a connection ended at `-R` requests with more to do.
    conn_yields: "conn_yields", false, "Times a connection gave up its turn at -R requests with more to do.";
    /// Operations that lost the race for an item to concurrent writers
    /// [`strata_store::MAX_RETRIES`] times in a row.
    store_contended: "strata_store_contended", false, "Operations that lost the race for an item too often.";
    /// Connections closed for [`crate::execution::ctx::MAX_AUTH_FAILURES`] failed
    /// attempts in a row.
    auth_closed: "strata_auth_closed", false, "Connections closed after repeated failed authentication attempts.";
    /// Connections closed by `-o idle_timeout` (memcached's `idle_kicks`).
    idle_kicks: "idle_kicks", false, "Connections closed for going -o idle_timeout seconds without a request.";
    /// Connections closed because serving them panicked.
    panics: "strata_worker_panics", false, "Connections closed because serving them panicked (a bug: the log has it).";
}
