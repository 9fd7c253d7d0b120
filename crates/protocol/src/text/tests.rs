use super::*;
use crate::ops::{Key, Read, Set};
use proptest::prelude::*;

fn cfg() -> Config {
    Config { item_size_max: 1024, item_overhead: 0, max_get_line: 8192, debug_clock: false }
}

fn cmd(buf: &[u8]) -> (Command<'_>, bool, usize) {
    match parse(buf, &cfg()) {
        Parse::Done { request, consumed } => (request.command, request.noreply, consumed),
        other => panic!("expected a request, got {other:?}"),
    }
}

#[test]
fn set_waits_for_its_data_then_borrows_it() {
    assert_eq!(parse(b"set k 5 0 3\r\nab", &cfg()), Parse::Incomplete { need: 18 });
    let (c, noreply, used) = cmd(b"set k 5 0 3\r\nabc\r\nget k\r\n");
    assert_eq!(c, Command::Store(Set::plain(Mode::Set, Key::Raw(b"k"), 5, 0, b"abc")));
    assert!(!noreply);
    assert_eq!(used, 18);
}

#[test]
fn data_not_followed_by_crlf_is_a_bad_chunk_consuming_the_block() {
    let (c, _, used) = cmd(b"set k 0 0 3\r\nabcde\r\n");
    assert_eq!(c, Command::Error(ClientError::BadDataChunk));
    assert_eq!(used, 18);
}

#[test]
fn too_large_reports_how_much_to_swallow() {
    let (c, _, used) = cmd(b"set k 0 0 2000 noreply\r\n");
    assert_eq!(c, Command::TooLarge { mode: Mode::Set, cas: false, key: b"k", swallow: 2002 });
    assert_eq!(used, 24);
}

#[test]
fn token_count_errors_are_plain_error() {
    assert_eq!(cmd(b"set k 0 0\r\n").0, Command::Error(ClientError::Error));
    assert_eq!(cmd(b"incr k\r\n").0, Command::Error(ClientError::Error));
    assert_eq!(cmd(b"get\r\n").0, Command::Error(ClientError::Error));
    assert_eq!(cmd(b"x\r\n").0, Command::Error(ClientError::Error));
    assert_eq!(cmd(b"\r\n").0, Command::Error(ClientError::Error));
}

#[test]
fn noreply_suppresses_argument_errors_too() {
    let (c, noreply, _) = cmd(b"incr k x noreply\r\n");
    assert_eq!(c, Command::Error(ClientError::InvalidDelta));
    assert!(noreply);
}

#[test]
fn key_length_limit() {
    let long = [b'a'; 251];
    let mut line = b"set ".to_vec();
    line.extend_from_slice(&long);
    line.extend_from_slice(b" 0 0 1\r\nx\r\n");
    assert_eq!(cmd(&line).0, Command::Error(ClientError::BadFormat));
}

#[test]
fn negative_length_is_bad_format() {
    assert_eq!(cmd(b"set k 0 0 -1\r\n").0, Command::Error(ClientError::BadFormat));
}

#[test]
fn cas_parses_its_unique() {
    let (c, _, _) = cmd(b"cas k 0 0 1 99\r\nx\r\n");
    assert_eq!(c, Command::Store(Set { compare: Some(99), ..Set::plain(Mode::Set, Key::Raw(b"k"), 0, 0, b"x") }));
}

#[test]
fn multi_get_keys_are_walked_lazily() {
    let (c, _, _) = cmd(b"gets a  bb ccc\r\n");
    let Command::Get { keys, cas: true, read: Read::GET } = c else { panic!("{c:?}") };
    let got: Vec<_> = keys.iter().collect();
    assert_eq!(got, vec![retrieval::Key::Ok(b"a"), retrieval::Key::Ok(b"bb"), retrieval::Key::Ok(b"ccc")]);
}

#[test]
fn keys_resume_from_a_position() {
    let keys = Keys::new(b" a  bb ccc ");
    let (k1, p1) = keys.next_from(0).unwrap_or_else(|| panic!("first"));
    assert_eq!(k1, retrieval::Key::Ok(b"a"));
    let (k2, p2) = keys.next_from(p1).unwrap_or_else(|| panic!("second"));
    assert_eq!(k2, retrieval::Key::Ok(b"bb"));
    let (k3, p3) = keys.next_from(p2).unwrap_or_else(|| panic!("third"));
    assert_eq!(k3, retrieval::Key::Ok(b"ccc"));
    assert!(keys.next_from(p3).is_none());
}

#[test]
fn gat_takes_exptime_first() {
    let (c, _, _) = cmd(b"gat 10 a b\r\n");
    let Command::Get { keys, cas: false, read } = c else { panic!("{c:?}") };
    assert_eq!(keys.iter().count(), 2);
    assert_eq!(read, Read::get_and_touch(10));
    let (c, _, _) = cmd(b"touch k 10\r\n");
    assert_eq!(c, Command::Touch(ops::Get { key: Key::Raw(b"k"), read: Read::touch(10) }));
    assert_eq!(cmd(b"gat x a\r\n").0, Command::Error(ClientError::InvalidExptime));
}

#[test]
fn delete_accepts_only_zero_hold() {
    assert_eq!(cmd(b"delete k 0\r\n").0, Command::Delete(ops::Delete::plain(Key::Raw(b"k"))));
    assert!(cmd(b"delete k 0 noreply\r\n").1);
    assert_eq!(cmd(b"delete k 5\r\n").0, Command::Error(ClientError::DeleteUsage));
}

#[test]
fn flush_all_forms() {
    assert_eq!(cmd(b"flush_all\r\n").0, Command::FlushAll { delay: 0 });
    assert_eq!(cmd(b"flush_all 10\r\n").0, Command::FlushAll { delay: 10 });
    assert_eq!(cmd(b"flush_all noreply\r\n"), (Command::FlushAll { delay: 0 }, true, 19));
    assert_eq!(cmd(b"flush_all x\r\n").0, Command::Error(ClientError::InvalidExptime));
}

#[test]
fn refresh_certs_forms() {
    assert_eq!(cmd(b"refresh_certs\r\n"), (Command::RefreshCerts, false, 15));
    assert_eq!(cmd(b"refresh_certs noreply\r\n").0, Command::RefreshCerts);
    assert!(cmd(b"refresh_certs noreply\r\n").1);
}

#[test]
fn watch_keeps_its_arguments_for_the_server() {
    match cmd(b"watch fetchers mutations\r\n").0 {
        Command::Watch { args } => {
            assert_eq!(args.iter().collect::<Vec<_>>(), vec![&b"fetchers"[..], b"mutations"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(cmd(b"watch\r\n").0, Command::Watch { args } if args.iter().next().is_none()));
}

#[test]
fn lru_crawler_metadump_forms() {
    assert_eq!(cmd(b"lru_crawler metadump all\r\n").0, Command::Metadump { classes: u64::MAX, mg: false });
    assert_eq!(cmd(b"lru_crawler metadump hash\r\n").0, Command::Metadump { classes: u64::MAX, mg: false });
    assert_eq!(
        cmd(b"lru_crawler metadump 1,2,63\r\n").0,
        Command::Metadump { classes: 1 << 1 | 1 << 2 | 1 << 63, mg: false }
    );
    assert_eq!(cmd(b"lru_crawler mgdump all\r\n").0, Command::Metadump { classes: u64::MAX, mg: true });
    assert_eq!(cmd(b"lru_crawler mgdump 1\r\n").0, Command::Metadump { classes: 1 << 1, mg: true });
    for bad in [&b"0"[..], b"64", b"abc", b"1,", b"1,x"] {
        let line = [&b"lru_crawler metadump "[..], bad, b"\r\n"].concat();
        assert_eq!(cmd(&line).0, Command::Error(ClientError::BadClass), "{bad:?}");
    }
    for bad in [
        &b"lru_crawler\r\n"[..],
        b"lru_crawler metadump\r\n",
        b"lru_crawler metadump all x\r\n",
        b"lru_crawler crawl\r\n",
        b"lru_crawler bogus\r\n",
    ] {
        assert_eq!(cmd(bad).0, Command::Error(ClientError::Error), "{bad:?}");
    }
}

#[test]
fn tuning_commands_parse_as_memcached_checks_them() {
    use crate::text::admin::{AutomoveParam, ExtSetting, Tune};
    let tune = |line: &[u8]| match cmd(line) {
        (Command::Tune(t), noreply, _) => Ok((t, noreply)),
        (Command::Error(e), _, _) => Err(e),
        (other, _, _) => panic!("{other:?}"),
    };
    assert_eq!(tune(b"slabs automove 2\r\n"), Ok((Tune::SlabsAutomove(2), false)));
    assert_eq!(tune(b"slabs automove 1 noreply\r\n"), Ok((Tune::SlabsAutomove(1), true)));
    assert_eq!(tune(b"slabs automove 3\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"slabs automove x\r\n"), Err(ClientError::BadFormat));
    assert_eq!(tune(b"slabs automove ratio 0.5\r\n"), Ok((Tune::SlabsAutomoveParam(AutomoveParam::Ratio, 0.5), false)));
    assert_eq!(tune(b"slabs automove ratio\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"slabs reassign x y\r\n"), Ok((Tune::SlabsReassign(None), false)));
    assert_eq!(tune(b"slabs reassign -1 2\r\n"), Ok((Tune::SlabsReassign(Some((-1, 2))), false)));
    assert_eq!(tune(b"slabs reassign 1\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"slabs\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"lru_crawler crawl all\r\n"), Ok((Tune::Crawl { classes: u64::MAX }, false)));
    assert_eq!(tune(b"lru_crawler crawl 1,3\r\n"), Ok((Tune::Crawl { classes: 0b1010 }, false)));
    assert_eq!(tune(b"lru_crawler crawl 99\r\n"), Err(ClientError::BadClass));
    assert_eq!(tune(b"lru_crawler sleep 1000000\r\n"), Ok((Tune::CrawlerSleep(1_000_000), false)));
    assert_eq!(tune(b"lru_crawler sleep 1000001\r\n"), Err(ClientError::SleepTooLong));
    assert_eq!(tune(b"lru_crawler tocrawl x\r\n"), Err(ClientError::BadFormat));
    assert_eq!(tune(b"lru_crawler disable\r\n"), Ok((Tune::CrawlerEnable(false), false)));
    assert_eq!(tune(b"lru mode flat noreply\r\n"), Ok((Tune::LruSegmented(false), true)));
    assert_eq!(tune(b"lru temp_ttl -1\r\n"), Ok((Tune::LruTempTtl(-1), false)));
    assert_eq!(tune(b"lru tune 50 50 0.2 2\r\n"), Err(ClientError::LruPercents));
    assert_eq!(tune(b"lru tune 10 20 0 2\r\n"), Err(ClientError::LruFactors));
    assert_eq!(tune(b"lru tune 10 20 nan 2\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"lru\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"extstore item_age 10\r\n"), Ok((Tune::Extstore(ExtSetting::ItemAge, 10.0), false)));
    assert_eq!(tune(b"extstore max_frag 0.5\r\n"), Ok((Tune::Extstore(ExtSetting::MaxFrag, 0.5), false)));
    assert_eq!(tune(b"extstore free_memchunks 1\r\n"), Err(ClientError::Error));
    assert_eq!(tune(b"extstore nope 1\r\n"), Err(ClientError::Error));
}

#[test]
fn long_lines_without_newline() {
    let junk = vec![b'x'; MAX_COMMAND_LINE + 1];
    assert_eq!(parse(&junk, &cfg()), Parse::Close);
    let mut get = b"get ".to_vec();
    get.extend(std::iter::repeat_n(b'k', MAX_COMMAND_LINE));
    assert_eq!(parse(&get, &cfg()), Parse::Incomplete { need: 0 });
    get.extend(std::iter::repeat_n(b'k', 8192));
    assert_eq!(parse(&get, &cfg()), Parse::Close);
}

#[test]
fn http_requests_are_dropped() {
    assert_eq!(parse(b"GET / HTTP/1.1\r\n", &cfg()), Parse::Close);
}

#[cfg(feature = "test-hooks")]
#[test]
fn debug_clock_only_when_enabled() {
    assert_eq!(cmd(b"debug_advance_clock 5\r\n").0, Command::Error(ClientError::Error));
    let c = Config { debug_clock: true, ..cfg() };
    assert!(matches!(
        parse(b"debug_advance_clock 5\r\n", &c),
        Parse::Done { request: Request { command: Command::DebugAdvanceClock { seconds: 5 }, .. }, .. }
    ));
    assert_eq!(cmd(b"debug_panic\r\n").0, Command::Error(ClientError::Error));
    assert!(matches!(
        parse(b"debug_panic\r\n", &c),
        Parse::Done { request: Request { command: Command::DebugPanic, .. }, .. }
    ));
}

/// Without the `test-hooks` feature (production builds) the debug commands
/// do not exist, whatever the configuration asks.
#[cfg(not(feature = "test-hooks"))]
#[test]
fn debug_commands_are_unknown_without_the_test_hooks() {
    let c = Config { debug_clock: true, ..cfg() };
    for line in [&b"debug_advance_clock 5\r\n"[..], b"debug_panic\r\n"] {
        assert!(matches!(
            parse(line, &c),
            Parse::Done { request: Request { command: Command::Error(ClientError::Error), .. }, .. }
        ));
    }
}

proptest! {
    /// Whatever arrives, the parser never panics, never claims more bytes than
    /// it was given, and a storage command's data is exactly the declared size.
    #[test]
    fn parse_is_total_and_bounded(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        match parse(&buf, &cfg()) {
            Parse::Done { request, consumed } => {
                prop_assert!(consumed <= buf.len() && consumed > 0);
                if let Command::Store(Set { data, .. }) = request.command {
                    prop_assert!(data.len() < consumed);
                }
            }
            Parse::Incomplete { need } => prop_assert!(need == 0 || need > buf.len()),
            Parse::Close => {}
        }
    }

    #[test]
    fn well_formed_sets_round_trip(key in "[a-z]{1,40}", flags in any::<u32>(), data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = format!("set {key} {flags} 0 {}\r\n", data.len()).into_bytes();
        buf.extend_from_slice(&data);
        buf.extend_from_slice(b"\r\n");
        let (c, _, used) = cmd(&buf);
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(c, Command::Store(Set::plain(Mode::Set, Key::Raw(key.as_bytes()), flags, 0, &data)));
    }
}
