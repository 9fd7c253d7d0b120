//! Tests of the report: the table, medians and ranges, size bands, charts.

use super::svg::fmt_num;
use super::*;
use crate::driver::band_of;

#[test]
fn numbers_are_compact() {
    assert_eq!(fmt_num(1_234_567.0), "1.23M");
    assert_eq!(fmt_num(45_678.0), "46k");
    assert_eq!(fmt_num(2.5), "2.50");
}

fn workload() -> Workload {
    let s: crate::config::Scenario = toml::from_str("name = \"t\"\n[[run]]\nname = \"w\"\n").unwrap();
    s.workloads().unwrap().remove(0)
}

fn run(server: &str, round: u32, cpu: f64, p99: f64) -> RunResult {
    RunResult {
        workload: workload(),
        server: server.into(),
        version: String::new(),
        command: String::new(),
        protocol: Protocol::Text,
        elapsed_secs: 1.0,
        requests: 0,
        sets: 0,
        gets: 0,
        keys: 0,
        hits: 0,
        misses: 0,
        errors: 0,
        requests_per_sec: 0.0,
        ops_per_sec: 0.0,
        latency_us: Percentiles { p99, ..Percentiles::default() },
        server_cpu_secs: None,
        server_cpu_us_per_op: Some(cpu),
        server_cpu_us_per_request: None,
        server_system_share: None,
        client_cpu_us_per_op: None,
        server_rss_bytes: None,
        hit_ratio: None,
        byte_hit_ratio: None,
        requested_bytes: 0,
        hit_bytes: 0,
        size_bands: Vec::new(),
        write_amplification: None,
        capacity: None,
        round,
    }
}

#[test]
fn medians_and_spreads() {
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(spread(&[], 2), "–");
    assert_eq!(spread(&[1.5], 2), "1.50");
    assert_eq!(spread(&[9.0, 8.0, 10.0], 1), "9.0 (8.0–10.0)");
}

#[test]
fn ratios_pair_rounds_not_medians() {
    // strata is 0.8x memcached in every round while both drift; the
    // ratio of medians would be 8/12 = 0.67.
    let runs = [
        run("strata", 0, 8.0, 100.0),
        run("memcached", 0, 10.0, 200.0),
        run("memcached", 1, 15.0, 300.0),
        run("strata", 1, 12.0, 30.0),
        run("memcached", 2, 20.0, 100.0),
        run("strata", 2, 16.0, 200.0),
    ];
    let refs: Vec<&RunResult> = runs.iter().collect();
    let r = paired_ratios(&refs, "strata", |r| r.server_cpu_us_per_op);
    assert_eq!(r.len(), 3);
    assert!(r.iter().all(|x| (x - 0.8).abs() < 1e-9), "{r:?}");
    let p99 = paired_ratios(&refs, "strata", |r| Some(r.latency_us.p99));
    assert_eq!(spread(&p99, 2), "0.50 (0.10–2.00)");
    // A round without memcached pairs with nothing.
    let alone = [run("strata", 0, 8.0, 1.0)];
    assert!(paired_ratios(&alone.iter().collect::<Vec<_>>(), "strata", |r| r.server_cpu_us_per_op).is_empty());
    // The charts show each server's median-CPU run.
    let rep = representatives(&refs);
    let picked: Vec<(&str, u32)> = rep.iter().map(|r| (r.server.as_str(), r.round)).collect();
    assert_eq!(picked, [("strata", 1), ("memcached", 1)]);
}

fn report(repeat: u32, runs: Vec<RunResult>) -> Report {
    Report {
        scenario: "s".into(),
        description: String::new(),
        command_line: "cmd".into(),
        machine: Machine { cpus: 2, cpu_model: "x".into(), kernel: "k".into() },
        memory_mb: 64,
        server_threads: 2,
        redis_io_threads: 1,
        started_unix: 0,
        repeat,
        runs,
    }
}

#[test]
fn write_amplification_column_only_when_reported() {
    let plain = report(1, vec![run("strata", 0, 1.0, 1.0), run("memcached", 0, 1.0, 1.0)]).markdown();
    assert!(!plain.contains("write amp."), "{plain}");
    let mut runs = vec![run("strata", 0, 1.0, 1.0), run("memcached", 0, 1.0, 1.0)];
    runs[0].write_amplification = Some(2.5);
    let md = report(1, runs.clone()).markdown();
    assert!(md.contains("| RSS MB | write amp. |\n|---|"), "{md}");
    assert!(md.contains("| – | – | 2.50 |\n| memcached |"), "{md}");
    assert!(md.ends_with("| – | – | – |\n"), "{md}");
    runs.extend([run("memcached", 1, 1.0, 1.0), run("strata", 1, 1.0, 1.0)]);
    runs[3].write_amplification = Some(3.5);
    let md = report(2, runs).markdown();
    assert!(md.contains("| hit % | write amp. |"), "{md}");
    assert!(md.contains("| – | 3.00 (2.50–3.50) |\n"), "{md}");
}

#[test]
fn repeated_runs_get_a_summary_table() {
    let mut report = report(
        2,
        vec![
            run("strata", 0, 8.0, 100.0),
            run("memcached", 0, 10.0, 200.0),
            run("memcached", 1, 10.0, 100.0),
            run("strata", 1, 9.0, 100.0),
        ],
    );
    report.runs[1].hit_ratio = Some(0.75);
    report.runs[2].hit_ratio = Some(0.77);
    let md = report.markdown();
    assert!(md.contains("| strata (2) | text |"), "{md}");
    assert!(md.contains("Over 2 rounds, median (min–max):"), "{md}");
    assert!(md.contains("| strata | 8.50 (8.00–9.00) | 0.85 (0.80–0.90) | 100 (100–100) | 0.75 (0.50–1.00) |"), "{md}");
    let mc =
        "| memcached | 10.00 (10.00–10.00) | 1.00 (1.00–1.00) | 150 (100–200) | 1.00 (1.00–1.00) | 76.0 (75.0–77.0) |";
    assert!(md.contains(mc), "{md}");
    report.repeat = 1;
    report.runs.truncate(2);
    let md = report.markdown();
    assert!(!md.contains("Over "), "{md}");
    assert!(md.contains("| strata | text |"), "{md}");
}

#[test]
fn size_bands_are_powers_of_four_tops_inclusive() {
    let b = |len| BAND_LABELS[band_of(len)];
    assert_eq!([b(0), b(100), b(1024)], ["≤1 KB"; 3]);
    assert_eq!([b(1025), b(4096), b(4097)], ["1–4 KB", "1–4 KB", "4–16 KB"]);
    assert_eq!([b(65536), b(65537)], ["16–64 KB", "64–256 KB"]);
    assert_eq!([b(600 << 10), b(1 << 20), b((1 << 20) + 1)], ["256 KB–1 MB", "256 KB–1 MB", ">1 MB"]);
    // Only the bands that occurred, with their bounds and ratios.
    let mut t = [Bytes::default(); BANDS];
    t[band_of(500)].count(500, true);
    t[band_of(500)].count(500, false);
    t[band_of(3000)].count(3000, true);
    t[band_of(2000)].count(2000, false);
    t[band_of(2000 << 20)].count(2000 << 20, true);
    let bands = SizeBand::of(&t);
    let got: Vec<(&str, u64, Option<u64>, u64, u64)> =
        bands.iter().map(|b| (b.band.as_str(), b.min_bytes, b.max_bytes, b.gets, b.hits)).collect();
    assert_eq!(
        got,
        [("≤1 KB", 0, Some(1024), 2, 1), ("1–4 KB", 1025, Some(4096), 2, 1), (">1 MB", 1048577, None, 1, 1)]
    );
    assert_eq!((bands[0].hit_ratio, bands[0].byte_hit_ratio), (0.5, Some(0.5)));
    // A miss counts the bytes it would have returned: 3000 of 5000.
    assert_eq!((bands[1].requested_bytes, bands[1].hit_bytes, bands[1].byte_hit_ratio), (5000, 3000, Some(0.6)));
}

/// A hit-ratio run: `hits` of 10 gets per band (≤1 KB, 16–64 KB) and
/// the byte ratio they make.
fn hit_run(server: &str, round: u32, hits: [u64; 2]) -> RunResult {
    let mut r = run(server, round, 1.0, 1.0);
    r.workload.mode = Mode::HitRatio;
    let mut t = [Bytes::default(); BANDS];
    for (len, h) in [(500, hits[0]), (40_000, hits[1])] {
        for i in 0..10 {
            t[band_of(len)].count(len, i < h);
        }
    }
    r.hit_ratio = Some((hits[0] + hits[1]) as f64 / 20.0);
    r.requested_bytes = t.iter().map(|b| b.requested).sum();
    r.hit_bytes = t.iter().map(|b| b.hit).sum();
    r.byte_hit_ratio = Some(r.hit_bytes as f64 / r.requested_bytes as f64);
    r.size_bands = SizeBand::of(&t);
    r
}

#[test]
fn byte_hit_ratio_and_bands_in_the_tables() {
    let md = report(1, vec![hit_run("strata", 0, [10, 5]), hit_run("memcached", 0, [8, 2])]).markdown();
    assert!(md.contains("| max | hit % | byte hit % | server CPU µs/op |"), "{md}");
    assert!(md.contains("|---:|---:|---:|---:|---:|---:|\n| strata"), "{md}");
    // 75% of requests, but (5000 + 200000) / 405000 = 50.6% of bytes.
    assert!(md.contains("| 75.0 | 50.6 | 1.00 |"), "{md}");
    assert!(md.contains("| 50.0 | 20.7 | 1.00 |"), "{md}");
    let bands = "| server | ≤1 KB | 16–64 KB |\n|---|---:|---:|\n| strata | 100.0 | 50.0 |\n\
                 | memcached | 80.0 | 20.0 |\n| share of gets | 50.0% | 50.0% |\n";
    assert!(md.contains(bands), "{md}");
    // Both columns counted from the header match each row.
    for line in md.lines().filter(|l| l.starts_with('|')).take(4) {
        assert_eq!(line.matches('|').count(), 16, "{line}");
    }
    // One band only: no band table; no single-key gets: no byte column.
    let mut one = hit_run("strata", 0, [10, 5]);
    one.size_bands.truncate(1);
    let md = report(1, vec![one]).markdown();
    assert!(md.contains("byte hit %") && !md.contains("share of gets"), "{md}");
    let md = report(1, vec![run("strata", 0, 1.0, 1.0)]).markdown();
    assert!(!md.contains("byte hit %") && !md.contains("share of gets"), "{md}");
    // Rounds: the summary has the byte ratio's median and range, the
    // band table a row per run.
    let runs = vec![hit_run("strata", 0, [10, 5]), hit_run("strata", 1, [10, 7])];
    let md = report(2, runs).markdown();
    assert!(md.contains("| hit % | byte hit % |\n|---|---:|---:|---:|---:|---:|---:|\n"), "{md}");
    assert!(md.contains("| 80.0 (75.0–85.0) | 60.5 (50.6–70.4) |\n"), "{md}");
    assert!(md.contains("| strata (2) | 100.0 | 70.0 |\n"), "{md}");
}

#[test]
fn svg_escapes_and_closes() {
    let p = Panel { title: "t", groups: vec![("a".into(), vec![1.0, 2.0])] };
    let s = svg("x<y", &["s1".into(), "s2".into()], &[p]);
    assert!(s.contains("x&lt;y"));
    assert!(s.ends_with("</svg>\n"));
    assert_eq!(s.matches("<rect").count(), 1 + 2 + 2);
}
