//! `strata`: the server binary. Parses memcached's command-line flags, sets
//! up logging, builds the store and runs the server until a signal or
//! `shutdown`. Owns no protocol or storage logic.

mod cli;
mod conffile;
mod error;
mod ext;
#[cfg(feature = "test-hooks")]
mod hooks;
mod options;
mod tls;
mod tuning;
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

/// memcached's `-k`: every page locked in RAM as it is touched. With
/// `MCL_ONFAULT`, so the item memory reserved up front is not all faulted
/// in at once.
fn lock_memory() {
    // SAFETY: mlockall takes flags only.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) };
    if rc != 0 {
        // memcached goes on too.
        tracing::warn!(error = %std::io::Error::last_os_error(), "-k: could not lock memory (mlockall)");
    }
}

/// memcached's `-r`: the core file size limit raised to its hard maximum,
/// so that a crash leaves a core dump to debug.
fn enable_coredumps() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the one struct given.
    let rc = unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_CORE, &lim)
        } else {
            -1
        }
    };
    if rc != 0 {
        // memcached exits here; a server that runs without core dumps is
        // more use than one that does not start.
        tracing::warn!(error = %std::io::Error::last_os_error(), "-r: could not raise the core file size limit");
    }
}

/// `strata -i`: the license, as memcached prints its own.
const LICENSE: &str = include_str!("../../../LICENSE");

/// memcached's `-d`: into the background, detached from the terminal, its
/// standard streams on /dev/null (the log then goes nowhere unless the
/// configuration file names a `logfile`). Unlike memcached, the working
/// directory is kept, so relative paths in the flags still mean the same.
/// Runs before any thread is started: only the calling thread survives a
/// fork.
fn daemonize() -> std::io::Result<()> {
    // SAFETY: no other thread exists yet (see above).
    if unsafe { libc::daemon(1, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The log filter `-v` (or `verbosity N`) counts to, after memcached's
/// levels: `-v` errors and warnings (strata's DEBUG lines: a failed TLS
/// handshake, a failed metrics request), `-vv` each command and reply
/// (TRACE, `verbose.rs`), `-vvv` internal state as well (a connection
/// accepted, with its peer; the libraries' own debug lines, such as
/// rustls' handshakes). Below `-vv` a connection gets a line only if it
/// fails.
fn level_of(verbose: u32) -> &'static str {
    match verbose {
        0 => "info",
        1 => "info,strata=debug",
        2 => "info,strata=trace",
        _ => "debug,strata=trace",
    }
}

fn main() -> ExitCode {
    let mut conf = None;
    let args = match conffile::expand(std::env::args_os().collect()) {
        Ok(Some((argv, c))) => match cli::Args::try_parse_from(argv) {
            Ok(a) => {
                conf = Some(c);
                a
            }
            Err(e) => return config_error(&c, e),
        },
        Ok(None) => cli::Args::parse(),
        Err(msg) => {
            eprintln!("strata: {msg}");
            return ExitCode::from(64);
        }
    };
    if args.license {
        print!("{LICENSE}");
        return ExitCode::SUCCESS;
    }
    let logfile = conf.as_ref().and_then(|c| c.logfile.as_ref());
    if let Err(code) = init_logging(u32::from(args.verbose), logfile) {
        return code;
    }
    if let Some(c) = conf.as_ref().filter(|c| !c.ignored.is_empty()) {
        tracing::warn!(lines = ?c.ignored, "--config: lines that are neither a flag nor `logfile` were ignored");
    }
    if args.enable_coredumps {
        enable_coredumps();
    }
    let (daemon, lock, huge) = (args.daemon, args.lock_memory, args.large_pages);
    let (store_cfg, mut server_cfg) = match configs(args, conf.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Under systemd (a `Type=notify` unit) the process it started must stay
    // the service's main process: Debian's memcached.conf has -d.
    let under_systemd = std::env::var_os("NOTIFY_SOCKET").is_some();
    if daemon && under_systemd {
        tracing::info!("-d ignored: started by systemd ($NOTIFY_SOCKET), strata stays in the foreground");
    }
    if daemon && !under_systemd {
        if let Err(e) = daemonize() {
            eprintln!("strata: -d: {e}");
            return ExitCode::from(71);
        }
    }
    if lock {
        lock_memory();
    }
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
        Err(e @ (warm::StartError::Durability(_) | warm::StartError::Locked(_) | warm::StartError::Dir(_))) => {
            eprintln!("strata: {e}");
            return ExitCode::from(73);
        }
    };
    if huge {
        if let Err(e) = store.advise_huge_pages() {
            tracing::warn!(error = %e, "-L: no transparent huge pages for item memory");
        }
    }
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

/// Logging to stderr or `--config`'s logfile at `-v`'s level, which a
/// client's `verbosity` changes later; the exit code if the file cannot
/// be opened.
fn init_logging(verbose: u32, logfile: Option<&std::path::PathBuf>) -> Result<(), ExitCode> {
    let level = level_of(verbose);
    let log: Box<dyn Fn() -> Box<dyn std::io::Write> + Send + Sync> = match logfile {
        None => Box::new(|| Box::new(std::io::stderr())),
        Some(path) => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => {
                let f = std::sync::Arc::new(f);
                Box::new(move || Box::new(LogFile(f.clone())))
            }
            Err(e) => {
                eprintln!("strata: logfile {}: {e}", path.display());
                return Err(ExitCode::from(73));
            }
        },
    };
    {
        use tracing_subscriber::prelude::*;
        use tracing_subscriber::{fmt, reload, EnvFilter};
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into());
        let (filter, handle) = reload::Layer::new(filter);
        let ansi = logfile.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
        tracing_subscriber::registry()
            .with(filter)
            .with(fmt::layer().with_writer(log).with_target(false).with_ansi(ansi))
            .init();
        // `verbosity N` from a client sets the level as -v would.
        strata_server::on_verbosity(Box::new(move |v| {
            let _ = handle.reload(EnvFilter::new(level_of(v)));
        }));
    }
    Ok(())
}

/// The store's and the server's configuration from the flags; on a
/// usage error, the message (naming `--config`'s line when its flags are
/// at fault) is printed and the exit code returned.
fn configs(
    args: cli::Args,
    conf: Option<&conffile::ConfFile>,
) -> Result<(strata_store::Config, strata_server::ServerConfig), ExitCode> {
    match args.into_configs() {
        Ok(c) => Ok(c),
        Err(cli::ConfigError::Usage(msg)) => {
            // The file's line, if its flags alone (up to that line) fail
            // the same way.
            let same = |flags: &[String]| {
                let argv = std::iter::once("strata").chain(flags.iter().map(String::as_str));
                match cli::Args::try_parse_from(argv).map(cli::Args::into_configs) {
                    Ok(Err(cli::ConfigError::Usage(m))) => m != msg,
                    _ => true,
                }
            };
            match conf.and_then(|c| Some((c, c.failing_line(same)?))) {
                Some((c, line)) => eprintln!("strata: {}:{line}: {msg}", c.path.display()),
                None => eprintln!("strata: {msg}"),
            }
            Err(ExitCode::from(64))
        }
        // EX_CANTCREAT, as for a snapshot another server holds.
        Err(cli::ConfigError::InUse(msg)) => {
            eprintln!("strata: {msg}");
            Err(ExitCode::from(73))
        }
    }
}

/// A command line with `--config` that does not parse: if the file's own
/// flags are at fault, the error names the file and the line (a tuned
/// memcached.conf with a flag strata refused would otherwise fail with a
/// message about the command line, under systemd over and over).
fn config_error(conf: &conffile::ConfFile, e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    let parses = |flags: &[String]| {
        cli::Args::try_parse_from(std::iter::once("strata").chain(flags.iter().map(String::as_str))).is_ok()
    };
    match conf.failing_line(parses) {
        Some(line) => {
            let msg = e.kind().as_str().map_or_else(|| e.to_string(), str::to_string);
            let detail = e.to_string();
            let first = detail.lines().next().unwrap_or(&msg).trim_start_matches("error: ");
            eprintln!("strata: {}:{line}: {first}", conf.path.display());
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
        None => e.exit(),
    }
}

/// The configuration file's `logfile`, shared by every thread's writer.
struct LogFile(std::sync::Arc<std::fs::File>);

impl std::io::Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}
