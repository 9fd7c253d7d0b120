//! The process's side facing the operating system once the ports are open:
//! the pid file (`-P`) and dropping root's privileges (`-u`), in the order
//! memcached uses (both after binding, so a pid file under `/run` and a
//! port below 1024 still work for a server started as root), and telling
//! systemd it is ready (`Type=notify`).

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

/// A pid file that is removed when this is dropped (a clean exit).
#[derive(Debug)]
pub(crate) struct PidFile(PathBuf);

impl PidFile {
    /// Writes this process's id to `path`, replacing the file. Written
    /// beside it and renamed into place, so that whoever reads the file as
    /// soon as it appears (a supervisor, a script after `-d`) never finds
    /// it empty — `test_d_runs_in_the_background` did, once in a while. A
    /// directory that allows no new file there still gets it written in place.
    pub fn create(path: &Path) -> io::Result<PidFile> {
        let contents = format!("{}\n", std::process::id());
        let name = path.file_name().map_or_else(|| "pid".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        if std::fs::write(&tmp, &contents).and_then(|()| std::fs::rename(&tmp, path)).is_err() {
            let _ = std::fs::remove_file(&tmp);
            std::fs::write(path, contents)?;
        }
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // After dropping privileges the directory may not let us: as
        // memcached, the file then stays (the init system cleans up).
        if let Err(e) = std::fs::remove_file(&self.0) {
            tracing::warn!(path = %self.0.display(), error = %e, "could not remove the pid file");
        }
    }
}

/// Why `-u` could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("can't find the user {0} to switch to")]
    NoSuchUser(String),
    #[error("failed to assume the identity of user {user}: {source}")]
    Switch { user: String, source: io::Error },
}

/// As memcached: started as root, switches to `user` (its groups, then
/// its group and user ids); started as another user, `-u` changes nothing.
/// Started as root without `-u`, memcached refuses to run; strata warns
/// and goes on, so `cargo run --release` in a root container still works.
pub(crate) fn drop_privileges(user: Option<&str>) -> Result<(), PrivilegeError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let Some(user) = user else {
        tracing::warn!("running as root without -u: memcached would refuse to; consider -u USER");
        return Ok(());
    };
    let no_user = || PrivilegeError::NoSuchUser(user.to_string());
    let name = CString::new(user).map_err(|_| no_user())?;
    // SAFETY: `passwd` is plain data; all-zero is a valid value to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live memory of the stated length; the
    // strings `pwd` points at live in `buf`, which outlives their use here.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(no_user());
    }
    let fail = |source| PrivilegeError::Switch { user: user.to_string(), source };
    // SAFETY: plain system calls on ids read above; groups first, since
    // they can no longer be changed once the user id is not root.
    unsafe {
        if libc::initgroups(name.as_ptr(), pwd.pw_gid) != 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        if libc::setgid(pwd.pw_gid) != 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        if libc::setuid(pwd.pw_uid) != 0 {
            return Err(fail(io::Error::last_os_error()));
        }
    }
    tracing::info!(user, "switched to user");
    Ok(())
}

/// Tells the service manager how the server stands (`READY=1` once it
/// serves, `STOPPING=1` when it stops): systemd's `sd_notify` protocol, a
/// datagram to the unix socket `$NOTIFY_SOCKET` names (`@` for Linux's
/// abstract namespace). Without the variable, nothing is sent; a failure is
/// logged, never fatal.
pub(crate) fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let send = || -> io::Result<()> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let sock = UnixDatagram::unbound()?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(&path)?,
        };
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    };
    if let Err(e) = send() {
        tracing::warn!(error = %e, "could not notify the service manager ($NOTIFY_SOCKET)");
    }
}

/// How much more time each `EXTEND_TIMEOUT_USEC` asks for, and how often
/// it is asked again: a third of it, so that one late wake-up of the
/// thread (a loaded machine) does not let the time run out.
const EXTEND_BY: std::time::Duration = std::time::Duration::from_secs(30);
const EXTEND_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// While this lives, systemd is told every 10 seconds that the start (or
/// stop) is still going: `EXTEND_TIMEOUT_USEC`, which moves the unit's
/// `TimeoutStartSec`/`TimeoutStopSec` out by 30 seconds each time. Loading
/// a large snapshot and replaying its log, or saving it at shutdown, can
/// take longer than any fixed timeout a unit file could name, and systemd
/// kills a start that runs past it — losing the cache the load was for.
/// Without `$NOTIFY_SOCKET` it does nothing.
pub struct ExtendTimeout {
    // Dropping the sender wakes the thread at once and ends it.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExtendTimeout {
    /// Starts asking; `what` names the work in the log should the thread
    /// not start (then the unit's own timeout is all there is).
    pub fn start(what: &str) -> ExtendTimeout {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return ExtendTimeout { stop: None, thread: None };
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let msg = format!("EXTEND_TIMEOUT_USEC={}", EXTEND_BY.as_micros());
        let spawned = std::thread::Builder::new().name("sd-extend".into()).spawn(move || loop {
            notify(&msg);
            match rx.recv_timeout(EXTEND_EVERY) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                _ => break,
            }
        });
        match spawned {
            Ok(t) => ExtendTimeout { stop: Some(tx), thread: Some(t) },
            Err(e) => {
                tracing::warn!(error = %e, "{what}: systemd's timeout cannot be extended");
                ExtendTimeout { stop: None, thread: None }
            }
        }
    }
}

impl Drop for ExtendTimeout {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_holds_the_pid_and_goes_with_its_owner() {
        let dir = std::env::temp_dir().join(format!("strata-pid-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("strata.pid");
        let pid = PidFile::create(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        drop(pid);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn an_unknown_user_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(drop_privileges(Some("no-such-user-strata")).is_ok(), "-u is ignored when not root");
            return;
        }
        assert!(matches!(drop_privileges(Some("no-such-user-strata")), Err(PrivilegeError::NoSuchUser(_))));
    }
}
