//! `--config FILE`: memcached's Debian configuration file
//! (`/etc/memcached.conf`), so a Debian user points strata at the file they
//! have. Its format is what Debian's start script reads: one flag per line
//! as on the command line (`-m 64`, `-l 127.0.0.1`), `#` comments, blank
//! lines, and `logfile PATH` (where the log goes). Other lines are ignored
//! with a warning, as that script ignores them.
//!
//! The file's flags come first and the command line's after them, so a
//! flag given on the command line wins where a flag can be given once
//! (`-o` and `-l` add up, as when given twice).

use std::ffi::OsString;
use std::path::PathBuf;

/// What a configuration file said.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ConfFile {
    /// The flags and their values, in order.
    pub args: Vec<String>,
    /// `logfile PATH`.
    pub logfile: Option<PathBuf>,
    /// Lines ignored (1-based numbers), for a warning once logging is up.
    pub ignored: Vec<usize>,
    /// Each flag line's number (1-based) and how many of `args` it gave,
    /// so an error can name the line it came from.
    pub lines: Vec<(usize, usize)>,
    /// Where it was read from.
    pub path: PathBuf,
}

/// Parses a configuration file's text.
pub fn parse(text: &str) -> ConfFile {
    let mut c = ConfFile::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('-') {
            let before = c.args.len();
            c.args.extend(line.split_whitespace().map(str::to_string));
            c.lines.push((n + 1, c.args.len() - before));
        } else if let Some(path) = line.strip_prefix("logfile").filter(|r| r.starts_with(char::is_whitespace)) {
            c.logfile = Some(PathBuf::from(path.trim()));
        } else {
            c.ignored.push(n + 1);
        }
    }
    c
}

impl ConfFile {
    /// The first line whose flags `parses` refuses when given with those of
    /// the lines before it (each prefix of the file is tried in turn): the
    /// line an error in the file came from. `None` if the file's flags
    /// parse on their own (the error is the command line's).
    pub fn failing_line(&self, parses: impl Fn(&[String]) -> bool) -> Option<usize> {
        let mut end = 0;
        for &(line, n) in &self.lines {
            end += n;
            if !parses(&self.args[..end]) {
                return Some(line);
            }
        }
        None
    }
}

/// The command line with `--config FILE` (or `--config=FILE`) replaced by
/// the file's flags, put right after the program name; the file's
/// contents besides. `Ok(None)` when there is no `--config`.
pub fn expand(argv: Vec<OsString>) -> Result<Option<(Vec<OsString>, ConfFile)>, String> {
    let mut path = None;
    let mut rest = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    rest.extend(it.next());
    while let Some(a) = it.next() {
        if a == "--" {
            rest.push(a);
            rest.extend(it.by_ref());
            break;
        }
        let s = a.to_string_lossy();
        if s == "--config" {
            path = Some(PathBuf::from(it.next().ok_or("--config needs a file")?));
        } else if let Some(p) = s.strip_prefix("--config=") {
            path = Some(PathBuf::from(p));
        } else {
            rest.push(a);
        }
    }
    let Some(path) = path else { return Ok(None) };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let mut conf = parse(&text);
    conf.path = path;
    let mut out: Vec<OsString> = rest.drain(..1).collect();
    out.extend(conf.args.iter().map(OsString::from));
    out.extend(rest);
    Ok(Some((out, conf)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian 12's `/etc/memcached.conf`, as shipped (comments shortened).
    const DEBIAN: &str = "\
# memcached default config file
# 2003 - Jay Bonci <jaybonci@debian.org>
# This configuration file is read by the start-memcached script provided as
# part of the Debian GNU/Linux distribution.

# Run memcached as a daemon. This command is implied, and is not needed for the
# daemon to run. See the README.Debian that comes with this package for more
# information.
-d

# Log memcached's output to /var/log/memcached
logfile /var/log/memcached.log

# Be verbose
# -v

# Start with a cap of 64 megs of memory. It's reasonable, and the daemon default
# Note that the daemon will grow to this size, but does not start out holding this much
# memory
-m 64

# Default connection port is 11211
-p 11211

# Run the daemon as root. The start-memcached will default to running as root if no
# -u command is present in this config file
-u memcache

# Specify which IP address to listen on. The default is to listen on all IP addresses
# This parameter is one of the only security measures that memcached has, so make sure
# it's listening on a firewalled interface.
-l 127.0.0.1

# Limit the number of simultaneous incoming connections. The daemon default is 1024
# -c 1024

# Lock down all paged memory. Consult with the README and homepage before you do this
# -k

# Return error when memory is exhausted (rather than removing items)
# -M

# Maximize core file limit
# -r

# Use a pidfile
-P /var/run/memcached/memcached.pid
";

    #[test]
    fn debians_file_becomes_its_flags() {
        let c = parse(DEBIAN);
        let want = ["-d", "-m", "64", "-p", "11211", "-u", "memcache", "-l", "127.0.0.1", "-P"];
        assert_eq!(&c.args[..want.len()], want);
        assert_eq!(c.args.last().map(String::as_str), Some("/var/run/memcached/memcached.pid"));
        assert_eq!(c.logfile, Some(PathBuf::from("/var/log/memcached.log")));
        assert!(c.ignored.is_empty());
    }

    #[test]
    fn the_failing_line_is_found() {
        let c = parse("# comment\n-m 32\n\n-p 1 -U 2\n-x\n-c 5\n");
        assert_eq!(c.lines, [(2, 2), (4, 4), (5, 1), (6, 2)]);
        assert_eq!(c.failing_line(|a| !a.iter().any(|f| f == "-x")), Some(5));
        assert_eq!(c.failing_line(|_| true), None);
    }

    #[test]
    fn other_lines_are_ignored_and_named() {
        let c = parse("-m 32\nverbose please\n  # indented comment\n-o  hashpower=16,io=epoll \n");
        assert_eq!(c.args, ["-m", "32", "-o", "hashpower=16,io=epoll"]);
        assert_eq!(c.ignored, [2]);
    }

    #[test]
    fn the_command_line_comes_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memcached.conf");
        std::fs::write(&path, "-m 32\n-p 1\n").unwrap();
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let p = path.to_string_lossy().to_string();
        let (out, _) =
            expand(argv(&["strata", "-p", "2", "--config", &p])).unwrap().unwrap_or_else(|| panic!("a config"));
        assert_eq!(out, argv(&["strata", "-m", "32", "-p", "1", "-p", "2"]));
        let (out, _) =
            expand(argv(&["strata", &format!("--config={p}")])).unwrap().unwrap_or_else(|| panic!("a config"));
        assert_eq!(out, argv(&["strata", "-m", "32", "-p", "1"]));
        assert_eq!(expand(argv(&["strata", "-m", "8"])), Ok(None));
        assert!(expand(argv(&["strata", "--config", "/nonexistent/x.conf"])).is_err());
        assert!(expand(argv(&["strata", "--config"])).is_err());
    }
}
