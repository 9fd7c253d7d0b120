//! `strata`: the server binary. Parses memcached's command-line flags, sets
//! up logging, builds the store and runs the server until a signal or
//! `shutdown`. Owns no protocol or storage logic.

mod cli;
mod ext;
mod warm;

use std::process::ExitCode;

use clap::Parser;

/// A dictionary training allocates ~8 MB in zstd's trainer and frees it.
/// glibc's default thresholds adapt to that: once a freed block was 4 MB,
/// blocks under 4 MB come from the heap and up to 8 MB of free heap top is
/// kept, so the trainer thread's heap would keep ~7 MB of RSS that no item
/// can use. Fixed thresholds give it back: blocks of 4 MiB and more are
/// mapped and unmapped, and a free heap top over 2 MiB is trimmed. Values
/// (at most `-I`, 1 MiB by default) still come from the heap, so requests
/// do not map memory.
fn fixed_malloc_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation thresholds; it is
    // called before the server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 2 << 20);
    }
}

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (store_cfg, mut server_cfg) = match args.into_configs() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("strata: {msg}");
            return ExitCode::from(64);
        }
    };
    let threads = server_cfg.threads;
    let store = match warm::start(store_cfg, server_cfg.snapshot.as_mut(), threads) {
        Ok(s) => s,
        Err(warm::StartError::Config(e)) => {
            eprintln!("strata: {e}");
            return ExitCode::from(64);
        }
        Err(warm::StartError::Snapshot(e)) => {
            eprintln!("strata: {e} (--snapshot-strict)");
            return ExitCode::from(65);
        }
        Err(e @ (warm::StartError::Durability(_) | warm::StartError::Locked(_))) => {
            eprintln!("strata: {e}");
            return ExitCode::from(73);
        }
    };
    if let Some(codec) = store.codec() {
        fixed_malloc_thresholds();
        // Dictionaries are trained off the request path; without the
        // thread values are still compressed, with plain zstd.
        if let Err(e) = codec.spawn_trainer() {
            tracing::warn!("compression: no dictionary trainer thread: {e}");
        }
    }
    match strata_server::run(server_cfg, store) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: {e}");
            ExitCode::from(71)
        }
    }
}
