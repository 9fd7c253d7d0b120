//! Credentials for SASL PLAIN (binary protocol, `-S`) and memcached's ASCII
//! authentication (`-Y`). Both read `user:password` lines, as memcached's
//! `sasl_pwdb` and auth files do.

use std::collections::HashMap;
use std::path::Path;

/// Why a credentials file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}: expected user:password")]
    Syntax { path: String, line: usize },
    #[error("{path}: no users")]
    Empty { path: String },
}

/// Users and their passwords.
#[derive(Clone, Default)]
pub struct Credentials {
    users: HashMap<Vec<u8>, Vec<u8>>,
    /// The file they came from (`stats settings` shows it for `-Y`).
    pub source: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} users)", self.users.len())
    }
}

impl Credentials {
    /// Reads `user:password` lines (blank lines ignored; the password is
    /// everything after the first colon, up to the line end).
    pub fn load(path: &Path) -> Result<Credentials, AuthError> {
        let name = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| AuthError::Read { path: name.clone(), source })?;
        let mut c = Credentials::parse(&text).map_err(|line| match line {
            0 => AuthError::Empty { path: name.clone() },
            line => AuthError::Syntax { path: name.clone(), line },
        })?;
        c.source = name;
        Ok(c)
    }

    /// Parses the file's contents; `Err(line)` names the first bad line, or 0
    /// for a file without users.
    fn parse(text: &[u8]) -> Result<Credentials, usize> {
        let mut users = HashMap::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let colon = line.iter().position(|&b| b == b':').ok_or(i + 1)?;
            if colon == 0 {
                return Err(i + 1);
            }
            users.insert(line[..colon].to_vec(), line[colon + 1..].to_vec());
        }
        match users.is_empty() {
            true => Err(0),
            false => Ok(Credentials { users, source: String::new() }),
        }
    }

    /// Whether `user` exists with `password`. The comparison takes the same
    /// time wherever the first differing byte is.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let Some(want) = self.users.get(user) else { return false };
        want.len() == password.len() && want.iter().zip(password).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// A SASL PLAIN message: `[authzid] NUL authcid NUL passwd` (RFC 4616).
    /// Acting for another identity is refused: the authzid must be empty or
    /// the user itself, as with memcached's Cyrus SASL.
    pub fn check_plain(&self, message: &[u8]) -> bool {
        let mut parts = message.splitn(3, |&b| b == 0);
        let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        (authzid.is_empty() || authzid == user) && self.check(user, password)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_plain_messages() {
        let c = Credentials::parse(b"alice:s3cret\r\n\nbob:pa:ss\n").unwrap_or_default();
        assert!(c.check(b"alice", b"s3cret"));
        assert!(c.check(b"bob", b"pa:ss"));
        assert!(!c.check(b"alice", b"s3cre"));
        assert!(!c.check(b"carol", b""));
        assert!(c.check_plain(b"\0alice\0s3cret"));
        assert!(c.check_plain(b"alice\0alice\0s3cret"));
        assert!(!c.check_plain(b"\0alice\0wrong"));
        assert!(!c.check_plain(b"alice s3cret"));
        assert!(!c.check_plain(b"bob\0alice\0s3cret"));
        assert_eq!(Credentials::parse(b"nocolon\n").err(), Some(1));
        assert_eq!(Credentials::parse(b"a:b\n:x\n").err(), Some(2));
        assert_eq!(Credentials::parse(b"\n").err(), Some(0));
    }
}
