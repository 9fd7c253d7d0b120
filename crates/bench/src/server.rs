//! The servers under test: starting strata, memcached and redis-server with
//! equal memory and thread settings on a free loopback port, naming their
//! versions, reading their CPU time and RSS from `/proc`, and asking them
//! how many items they hold and have evicted (and strata its write
//! amplification).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::ServerKind;

/// Why a server could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot start {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("{cmd} exited during start-up ({status}): {stderr}")]
    Exited { cmd: String, status: String, stderr: String },
    #[error("{0} did not accept connections within 10 s")]
    NotReady(String),
    #[error("--tls: {0} is not started with TLS here (strata and memcached are)")]
    NoTls(String),
    #[error("asking {addr} for stats: {source}")]
    Stats { addr: SocketAddr, source: std::io::Error },
}

/// Where the server binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub strata: PathBuf,
    pub memcached: PathBuf,
    pub redis: PathBuf,
}

impl Binaries {
    /// strata next to this executable (`target/release/`), the others on PATH.
    pub fn find() -> Binaries {
        let strata = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("strata")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("strata"));
        Binaries { strata, memcached: PathBuf::from("memcached"), redis: PathBuf::from("redis-server") }
    }
}

/// Settings every server gets alike.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Settings {
    pub memory_mb: u64,
    pub threads: usize,
    /// Redis `io-threads`. Redis runs commands on one thread whatever this
    /// says; its I/O threads busy-poll, and its documentation advises them
    /// only from 4 cores up, so the default is 1.
    pub redis_io_threads: usize,
}

/// A server being measured: started here (and stopped on drop) or external.
pub struct Target {
    pub kind: ServerKind,
    pub addr: SocketAddr,
    pub pid: Option<u32>,
    pub version: String,
    pub command: String,
    /// With `--tls`: how the load connections speak to it.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    child: Option<Child>,
}

/// CPU seconds a process has used.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cpu {
    pub user: f64,
    pub system: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu { user: self.user - o.user, system: self.system - o.system }
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn first_line(cmd: &PathBuf, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

impl Target {
    /// Starts `kind` on a free loopback port and waits until it accepts.
    pub fn start(
        kind: ServerKind,
        bins: &Binaries,
        s: Settings,
        tls: Option<&crate::tls::TlsFiles>,
    ) -> Result<Target, ServerError> {
        let port = free_port().map_err(|source| ServerError::Spawn { cmd: kind.to_string(), source })?;
        let (bin, args, version) = match kind {
            ServerKind::Strata | ServerKind::StrataZstd => {
                let mut a: Vec<String> = vec![
                    "-l".into(),
                    "127.0.0.1".into(),
                    "-p".into(),
                    port.to_string(),
                    "-m".into(),
                    s.memory_mb.to_string(),
                    "-t".into(),
                    s.threads.to_string(),
                    "-c".into(),
                    "4096".into(),
                ];
                if kind == ServerKind::StrataZstd {
                    a.extend(["-o".into(), "compression=on".into()]);
                }
                (&bins.strata, a, first_line(&bins.strata, "-V"))
            }
            ServerKind::Memcached => {
                let mut a: Vec<String> = vec![
                    "-l".into(),
                    "127.0.0.1".into(),
                    "-p".into(),
                    port.to_string(),
                    "-U".into(),
                    "0".into(),
                    "-m".into(),
                    s.memory_mb.to_string(),
                    "-t".into(),
                    s.threads.to_string(),
                    "-c".into(),
                    "4096".into(),
                ];
                // memcached refuses to run as root without -u.
                if is_root() {
                    a.extend(["-u".into(), "root".into()]);
                }
                (&bins.memcached, a, first_line(&bins.memcached, "-V"))
            }
            ServerKind::Redis => {
                let mut a: Vec<String> = vec![
                    "--port".into(),
                    port.to_string(),
                    "--bind".into(),
                    "127.0.0.1".into(),
                    "--save".into(),
                    "".into(),
                    "--appendonly".into(),
                    "no".into(),
                    "--maxmemory".into(),
                    format!("{}mb", s.memory_mb),
                    "--maxmemory-policy".into(),
                    "allkeys-lru".into(),
                    "--dir".into(),
                    std::env::temp_dir().display().to_string(),
                    "--dbfilename".into(),
                    format!("strata-bench-{port}.rdb"),
                ];
                if s.redis_io_threads > 1 {
                    a.extend([
                        "--io-threads".into(),
                        s.redis_io_threads.to_string(),
                        "--io-threads-do-reads".into(),
                        "yes".into(),
                    ]);
                }
                (&bins.redis, a, first_line(&bins.redis, "--version"))
            }
        };
        let mut args = args;
        let client_tls = match tls {
            None => None,
            Some(_) if kind == ServerKind::Redis => return Err(ServerError::NoTls(kind.to_string())),
            Some(files) => {
                args.extend(files.server_args());
                let cmd = kind.to_string();
                Some(files.client_config().map_err(|source| ServerError::Spawn { cmd, source })?)
            }
        };
        let command = format!("{} {}", bin.display(), args.join(" "));
        let mut child = Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ServerError::Spawn { cmd: command.clone(), source })?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(ServerError::Exited { cmd: command, status: status.to_string(), stderr });
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ServerError::NotReady(command));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = Some(child.id());
        Ok(Target { kind, addr, pid, version, command, tls: client_tls, child: Some(child) })
    }

    /// A server someone else runs; `pid` (if given) lets CPU and RSS be read.
    pub fn external(kind: ServerKind, addr: SocketAddr, pid: Option<u32>) -> Target {
        Target { kind, addr, pid, version: "external".into(), command: String::new(), tls: None, child: None }
    }

    /// CPU time used so far (all threads), from `/proc/<pid>/stat`.
    pub fn cpu(&self) -> Option<Cpu> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid?)).ok()?;
        // Fields after the parenthesised command name: state is field 3,
        // utime 14 and stime 15 (proc(5)).
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = clock_ticks();
        Some(Cpu { user: f.get(11)?.parse::<f64>().ok()? / tick, system: f.get(12)?.parse::<f64>().ok()? / tick })
    }

    /// Resident set size in bytes.
    pub fn rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
    }

    /// Items held and evictions so far, from `stats` or Redis `INFO`.
    pub fn items(&self) -> Result<Holdings, ServerError> {
        let err = |source| ServerError::Stats { addr: self.addr, source };
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).map_err(err)?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(err)?;
        let mut r = BufReader::new(s.try_clone().map_err(err)?);
        let mut h = Holdings::default();
        let mut line = String::new();
        match self.kind {
            ServerKind::Redis => {
                s.write_all(b"INFO\r\n").map_err(err)?;
                r.read_line(&mut line).map_err(err)?;
                let len: usize = line.trim_start_matches('$').trim().parse().unwrap_or(0);
                let mut body = vec![0; len + 2];
                r.read_exact(&mut body).map_err(err)?;
                for l in String::from_utf8_lossy(&body).lines() {
                    if let Some(v) = l.strip_prefix("evicted_keys:") {
                        h.evictions = v.trim().parse().unwrap_or(0);
                    } else if let Some(v) = l.strip_prefix("db0:keys=") {
                        h.items = v.split(',').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                    }
                }
            }
            _ => {
                s.write_all(b"stats\r\n").map_err(err)?;
                loop {
                    line.clear();
                    if r.read_line(&mut line).map_err(err)? == 0 || line.starts_with("END") {
                        break;
                    }
                    let mut parts = line.split_whitespace().skip(1);
                    match (parts.next(), parts.next()) {
                        (Some("curr_items"), Some(v)) => h.items = v.parse().unwrap_or(h.items),
                        (Some("evictions"), Some(v)) => h.evictions = v.parse().unwrap_or(h.evictions),
                        (Some("strata_write_amplification"), Some(v)) => h.write_amplification = v.parse().ok(),
                        (Some("strata_compression_ratio"), Some(v)) => h.compression_ratio = v.parse().ok(),
                        _ => {}
                    }
                }
            }
        }
        Ok(h)
    }
}

/// What [`Target::items`] reports.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Holdings {
    pub items: u64,
    pub evictions: u64,
    /// `strata_write_amplification`: bytes written to segments per byte of
    /// items stored, cumulative since the server started. None from servers
    /// that do not report it (memcached, Redis).
    pub write_amplification: Option<f64>,
    /// `strata_compression_ratio`, with compression on.
    pub compression_ratio: Option<f64>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Kernel clock ticks per second (USER_HZ), for `/proc` CPU times.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
