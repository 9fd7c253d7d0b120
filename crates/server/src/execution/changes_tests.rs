//! Tests: every text, meta and binary command variant, parsed from a real
//! request, is classified as the durability log's refusal needs. The
//! variant names come from matches without a wildcard, and the tests
//! check that their tables hold a request of every name: a variant added
//! later fails to compile here until it is named, and then fails these
//! tests until a request of it is classified.
//!
//! The debug commands exist only with `test-hooks`, which every test
//! build of this crate has (its dev-dependency on itself turns it on).

use std::collections::BTreeSet;

use strata_protocol::binary::{self, opcode::*};
use strata_protocol::text::{self, Command};

/// Names the variants of an enum; `$all` lists every name, from the same
/// arms as the match.
macro_rules! names {
    ($name:ident, $all:ident, $ty:ty, { $($pat:pat => $n:literal,)* }) => {
        const $all: &[&str] = &[$($n),*];
        fn $name(c: &$ty) -> &'static str {
            match c {
                $($pat => $n,)*
            }
        }
    };
}

names!(text_name, TEXT_NAMES, Command<'_>, {
    Command::Get { .. } => "Get",
    Command::Store(_) => "Store",
    Command::TooLarge { .. } => "TooLarge",
    Command::Delete(_) => "Delete",
    Command::Arith(_) => "Arith",
    Command::Touch(_) => "Touch",
    Command::FlushAll { .. } => "FlushAll",
    Command::Version => "Version",
    Command::Verbosity { .. } => "Verbosity",
    Command::CacheMemlimit { .. } => "CacheMemlimit",
    Command::Metadump { .. } => "Metadump",
    Command::Tune(_) => "Tune",
    Command::Quit => "Quit",
    Command::Shutdown { .. } => "Shutdown",
    Command::Stats { .. } => "Stats",
    Command::RefreshCerts => "RefreshCerts",
    Command::Watch { .. } => "Watch",
    Command::Snapshot => "Snapshot",
    Command::DebugAdvanceClock { .. } => "DebugAdvanceClock",
    Command::DebugPanic => "DebugPanic",
    Command::MetaGet { .. } => "MetaGet",
    Command::MetaSet { .. } => "MetaSet",
    Command::MetaTooLarge { .. } => "MetaTooLarge",
    Command::MetaDelete { .. } => "MetaDelete",
    Command::MetaArith { .. } => "MetaArith",
    Command::MetaNoop => "MetaNoop",
    Command::MetaDebug { .. } => "MetaDebug",
    Command::Error(_) => "Error",
    Command::Swallow { .. } => "Swallow",
});

names!(binary_name, BINARY_NAMES, binary::Command<'_>, {
    binary::Command::Get { .. } => "Get",
    binary::Command::Touch(_) => "Touch",
    binary::Command::Store(_) => "Store",
    binary::Command::TooLarge { .. } => "TooLarge",
    binary::Command::Delete(_) => "Delete",
    binary::Command::Arith(_) => "Arith",
    binary::Command::Quit => "Quit",
    binary::Command::Flush { .. } => "Flush",
    binary::Command::Noop => "Noop",
    binary::Command::Version => "Version",
    binary::Command::Stat { .. } => "Stat",
    binary::Command::SaslListMechs => "SaslListMechs",
    binary::Command::SaslAuth { .. } => "SaslAuth",
    binary::Command::SaslStep { .. } => "SaslStep",
    binary::Command::Unknown { .. } => "Unknown",
    binary::Command::Reject { .. } => "Reject",
    binary::Command::Malformed => "Malformed",
    binary::Command::Invalid => "Invalid",
});

/// Items over 1 KiB are too large, so that the tests can send one.
fn config() -> text::Config {
    text::Config { item_size_max: 1024, item_overhead: 0, max_get_line: 1 << 20, debug_clock: true }
}

/// Every text and meta request that changes the cache (true) or not.
const TEXT: &[(&[u8], bool)] = &[
    (b"get k\r\n", false),
    (b"gets k j\r\n", false),
    (b"bget k\r\n", false),
    (b"gat 10 k\r\n", true),
    (b"gats 10 k j\r\n", true),
    (b"set k 0 0 1\r\nx\r\n", true),
    (b"set k 0 0 1 noreply\r\nx\r\n", true),
    (b"add k 0 0 1\r\nx\r\n", true),
    (b"replace k 0 0 1\r\nx\r\n", true),
    (b"append k 0 0 1\r\nx\r\n", true),
    (b"prepend k 0 0 1\r\nx\r\n", true),
    (b"cas k 0 0 1 5\r\nx\r\n", true),
    // Too large: a set drops the old value, the others change nothing.
    (b"set k 0 0 2000\r\n", true),
    (b"set k 0 0 2000 noreply\r\n", true),
    (b"cas k 0 0 2000 5\r\n", false),
    (b"add k 0 0 2000\r\n", false),
    (b"append k 0 0 2000\r\n", false),
    (b"delete k\r\n", true),
    (b"delete k noreply\r\n", true),
    (b"incr k 1\r\n", true),
    (b"decr k 1 noreply\r\n", true),
    (b"touch k 10\r\n", true),
    (b"flush_all\r\n", true),
    (b"flush_all 10\r\n", true),
    (b"flush_all noreply\r\n", true),
    (b"flush_all 10 noreply\r\n", true),
    (b"version\r\n", false),
    (b"verbosity 1\r\n", false),
    (b"cache_memlimit 100\r\n", false),
    (b"lru_crawler metadump all\r\n", false),
    (b"lru_crawler mgdump all\r\n", false),
    (b"lru_crawler crawl all\r\n", false),
    (b"slabs automove 1\r\n", false),
    (b"quit\r\n", false),
    (b"shutdown\r\n", false),
    (b"stats\r\n", false),
    (b"stats cachedump 1 1\r\n", false),
    (b"refresh_certs\r\n", false),
    (b"watch mutations\r\n", false),
    (b"snapshot\r\n", false),
    (b"debug_advance_clock 5\r\n", false),
    (b"debug_panic\r\n", false),
    // mg: reading flags change nothing; T and N do. R and a stale item's
    // token depend on the item: the store refuses those reads.
    (b"mg k\r\n", false),
    (b"mg k v k c f s t h l O123 q u\r\n", false),
    (b"mg k v R30\r\n", false),
    (b"mg k v E77\r\n", false),
    (b"mg k v T30\r\n", true),
    (b"mg k v N30\r\n", true),
    (b"mg k v N30 E77\r\n", true),
    (b"ms k 1\r\nx\r\n", true),
    (b"ms k 1 MS I C5 E6 T30 F1 q\r\nx\r\n", true),
    (b"ms k 1 MA N30\r\nx\r\n", true),
    (b"ms k 1 MP\r\nx\r\n", true),
    (b"ms k 1 ME\r\nx\r\n", true),
    (b"ms k 1 MR\r\nx\r\n", true),
    (b"ms k 2000\r\n", true),
    (b"md k\r\n", true),
    (b"md k q\r\n", true),
    (b"md k I T30\r\n", true),
    (b"md k x F5\r\n", true),
    (b"md k C5\r\n", true),
    (b"ma k\r\n", true),
    (b"ma k MD D5\r\n", true),
    (b"ma k N30 J5 q\r\n", true),
    (b"mn\r\n", false),
    (b"me k\r\n", false),
    (b"bogus\r\n", false),
    (b"ms k 1 MZ\r\nx\r\n", false),
];

#[test]
fn every_text_and_meta_command_is_classified() {
    let mut seen = BTreeSet::new();
    for &(req, changes) in TEXT {
        let text::Parse::Done { request, .. } = text::parse(req, &config()) else {
            panic!("{:?} does not parse", String::from_utf8_lossy(req))
        };
        seen.insert(text_name(&request.command));
        assert_eq!(super::text(&request.command), changes, "{:?}", String::from_utf8_lossy(req));
    }
    let all: BTreeSet<&str> = TEXT_NAMES.iter().copied().collect();
    assert_eq!(seen, all, "every variant has a request in the table");
}

/// A binary request packet.
fn packet(op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = vec![binary::REQUEST_MAGIC, op];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

#[test]
fn every_binary_command_is_classified() {
    let store = [0u8; 8];
    let arith = [0u8; 20];
    let exptime = 10u32.to_be_bytes();
    let big = vec![b'v'; 2000];
    let mut cases: Vec<(Vec<u8>, bool)> = Vec::new();
    for op in [GET, GETQ, GETK, GETKQ] {
        cases.push((packet(op, b"", b"k", b"", 0), false));
    }
    for op in [GAT, GATQ, GATK, GATKQ, TOUCH] {
        cases.push((packet(op, &exptime, b"k", b"", 0), true));
    }
    for op in [SET, SETQ, ADD, ADDQ, REPLACE, REPLACEQ] {
        cases.push((packet(op, &store, b"k", b"v", 0), true));
        cases.push((packet(op, &store, b"k", b"v", 5), true));
    }
    for op in [APPEND, APPENDQ, PREPEND, PREPENDQ] {
        cases.push((packet(op, b"", b"k", b"v", 0), true));
    }
    // Too large: SET drops the old value (with a CAS too), the others not.
    for (op, drops) in [(SET, true), (SETQ, true), (ADD, false), (REPLACEQ, false), (APPEND, false)] {
        let extras: &[u8] = if matches!(op, APPEND) { b"" } else { &store };
        cases.push((packet(op, extras, b"k", &big, 5), drops));
    }
    for op in [DELETE, DELETEQ] {
        cases.push((packet(op, b"", b"k", b"", 0), true));
    }
    for op in [INCREMENT, INCREMENTQ, DECREMENT, DECREMENTQ] {
        cases.push((packet(op, &arith, b"k", b"", 0), true));
    }
    for op in [FLUSH, FLUSHQ] {
        cases.push((packet(op, b"", b"", b"", 0), true));
        cases.push((packet(op, &exptime, b"", b"", 0), true));
    }
    for op in [QUIT, QUITQ, NOOP, VERSION, SASL_LIST_MECHS] {
        cases.push((packet(op, b"", b"", b"", 0), false));
    }
    cases.push((packet(STAT, b"", b"items", b"", 0), false));
    cases.push((packet(SASL_AUTH, b"", b"PLAIN", b"\0u\0p", 0), false));
    cases.push((packet(SASL_STEP, b"", b"PLAIN", b"\0u\0p", 0), false));
    cases.push((packet(SASL_AUTH, b"", &[b'M'; 40], b"", 0), false));
    cases.push((packet(VERBOSITY, &[0; 4], b"", b"", 0), false));
    cases.push((packet(GET, &exptime, b"k", b"", 0), false));
    let mut malformed = packet(GET, b"", b"k", b"", 0);
    malformed[11] = 0;
    cases.push((malformed, false));
    let mut seen = BTreeSet::new();
    for (req, changes) in &cases {
        let binary::Parse::Done { request, .. } = binary::parse(req, &config()) else {
            panic!("{req:02x?} does not parse")
        };
        seen.insert(binary_name(&request.command));
        assert_eq!(super::binary(&request.command), *changes, "opcode {:#04x}: {:?}", req[1], request.command);
    }
    let all: BTreeSet<&str> = BINARY_NAMES.iter().copied().collect();
    assert_eq!(seen, all, "every variant has a request in the table");
}
