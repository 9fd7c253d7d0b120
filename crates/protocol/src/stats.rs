//! `stats` as data: a snapshot is a list of [`Stat`]s (name, kind, help,
//! value) that the server fills in once and every wire renders its own way
//! — `STAT <name> <value>` lines for the text protocol, one packet per stat
//! for the binary one, and Prometheus text with the help and kind
//! ([`Exposition`], under the names the server maps the stats to). No
//! renderer parses another's output.

use crate::binary::{response, Header, Status};

/// What a stat measures, for renderers that care (Prometheus' `TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows (until `stats reset`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A setting or label: not a number to plot.
    Info,
}

/// A stat's value, rendered as memcached prints it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    /// Printed with six decimals (memcached's `rusage_*`).
    Seconds(f64),
    /// Printed with two decimals (a ratio).
    Fixed2(f64),
    Text(String),
    Str(&'static str),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U64(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::U64(u64::from(v))
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::U64(v as u64)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I64(v)
    }
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Value {
        Value::Str(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::Seconds(v) => write!(f, "{v:.6}"),
            Value::Fixed2(v) => write!(f, "{v:.2}"),
            Value::Text(v) => f.write_str(v),
            Value::Str(v) => f.write_str(v),
        }
    }
}

/// One stat.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    /// memcached's name (per-connection and per-class stats carry their
    /// prefix, e.g. `12:addr`, `items:1:number`).
    pub name: String,
    pub kind: Kind,
    /// One line saying what it counts.
    pub help: &'static str,
    pub value: Value,
}

/// A `stats` group as the server filled it in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub stats: Vec<Stat>,
}

impl Snapshot {
    fn push(&mut self, name: impl Into<String>, kind: Kind, help: &'static str, value: impl Into<Value>) {
        self.stats.push(Stat { name: name.into(), kind, help, value: value.into() });
    }

    pub fn counter(&mut self, name: impl Into<String>, help: &'static str, value: impl Into<Value>) {
        self.push(name, Kind::Counter, help, value);
    }

    pub fn gauge(&mut self, name: impl Into<String>, help: &'static str, value: impl Into<Value>) {
        self.push(name, Kind::Gauge, help, value);
    }

    pub fn info(&mut self, name: impl Into<String>, help: &'static str, value: impl Into<Value>) {
        self.push(name, Kind::Info, help, value);
    }

    /// The value of the stat called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.stats.iter().find(|s| s.name == name).map(|s| &s.value)
    }
}

/// What a `stats` command answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Stats(Snapshot),
    /// STAT lines with no `END` after them, as memcached answers `stats
    /// sizes_enable` and `sizes_disable` in text (binary: as [`Reply::Stats`]).
    Unterminated(Snapshot),
    /// `stats reset` did its work.
    Reset,
    /// An unknown group (text `ERROR`).
    Unknown,
    /// A known group used wrongly: the text protocol's `CLIENT_ERROR` line.
    Usage(&'static [u8]),
    /// A setting changed (`stats detail on|off`): text `OK`.
    Done,
    /// A report in lines of its own, `END` included (`stats detail dump`):
    /// as it is in text, one packet under this key in binary.
    Lines(&'static str, Vec<u8>),
}

/// Renders for the text protocol: `STAT <name> <value>` lines and `END`.
pub fn text(out: &mut Vec<u8>, reply: &Reply) {
    use std::io::Write;
    match reply {
        Reply::Stats(s) | Reply::Unterminated(s) => {
            for st in &s.stats {
                // Writing into a Vec cannot fail.
                let _ = write!(out, "STAT {} {}\r\n", st.name, st.value);
            }
            if matches!(reply, Reply::Stats(_)) {
                out.extend_from_slice(crate::reply::text::END);
            }
        }
        Reply::Reset => out.extend_from_slice(crate::reply::text::RESET),
        Reply::Unknown => out.extend_from_slice(crate::reply::text::ERROR),
        Reply::Usage(line) => out.extend_from_slice(line),
        Reply::Done => out.extend_from_slice(crate::reply::text::OK),
        Reply::Lines(_, lines) => out.extend_from_slice(lines),
    }
}

/// Renders for the binary protocol: one packet per stat (the name as the
/// key, the value as the value), then an empty packet; a group memcached
/// does not answer is `KeyNotFound`.
pub fn binary(out: &mut Vec<u8>, req: &Header, reply: &Reply) {
    let mut value = String::new();
    match reply {
        Reply::Stats(s) | Reply::Unterminated(s) => {
            for st in &s.stats {
                use std::fmt::Write;
                value.clear();
                // Writing into a String cannot fail.
                let _ = write!(value, "{}", st.value);
                let body = response::Body { key: st.name.as_bytes(), value: value.as_bytes(), ..Default::default() };
                response::packet(out, req, Status::Success, 0, body);
            }
        }
        Reply::Reset | Reply::Done => {}
        Reply::Lines(key, lines) => {
            let body = response::Body { key: key.as_bytes(), value: lines, ..Default::default() };
            response::packet(out, req, Status::Success, 0, body);
        }
        Reply::Unknown | Reply::Usage(_) => return response::error(out, req, Status::KeyNotFound),
    }
    response::packet(out, req, Status::Success, 0, response::Body::default());
}

/// Prometheus' text exposition format (0.0.4), built sample by sample and
/// written family by family: the text format wants every sample of a
/// family together under its one `# HELP` and `# TYPE`, while callers
/// meet the samples of a family (`memcached_commands_total` by command
/// and status) in whatever order their stats come. Families keep the
/// order they were first named in.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
    by_name: std::collections::HashMap<String, usize>,
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    /// Rendered label sets (`{a="b"}` or empty) and values.
    samples: Vec<(String, f64)>,
}

impl Exposition {
    /// Adds a sample. The first sample of a family sets its help and kind
    /// (`Kind::Info` is written as a gauge); a second sample with the same
    /// labels is dropped, so where two stats say the same thing (`stats`'
    /// `max_connections`, `stats settings`' `maxconns`) the first wins. A
    /// name or label name Prometheus does not allow drops the sample.
    pub fn sample(&mut self, name: &str, help: &str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        if !metric_name(name) || !labels.iter().all(|(k, _)| metric_name(k)) {
            return;
        }
        let mut rendered = String::new();
        for (i, (k, v)) in labels.iter().enumerate() {
            let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            use std::fmt::Write;
            // Writing into a String cannot fail.
            let _ = write!(rendered, "{}{k}=\"{v}\"", if i == 0 { "{" } else { "," });
        }
        if !rendered.is_empty() {
            rendered.push('}');
        }
        let i = match self.by_name.get(name) {
            Some(&i) => i,
            None => {
                let help = help.replace('\\', "\\\\").replace('\n', "\\n");
                self.families.push(Family { name: name.to_string(), help, kind, samples: Vec::new() });
                self.by_name.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let samples = &mut self.families[i].samples;
        if !samples.iter().any(|(l, _)| *l == rendered) {
            samples.push((rendered, value));
        }
    }

    /// Whether a family of this name has been started.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Writes every family: `# HELP`, `# TYPE`, then its samples.
    pub fn render(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        for f in &self.families {
            let kind = if f.kind == Kind::Counter { "counter" } else { "gauge" };
            // Writing into a Vec cannot fail.
            let _ = write!(out, "# HELP {} {}\n# TYPE {} {kind}\n", f.name, f.help, f.name);
            for (labels, value) in &f.samples {
                let _ = writeln!(out, "{}{labels} {}", f.name, number(*value));
            }
        }
    }
}

/// A sample value as the text format spells it (`+Inf`, not Rust's `inf`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

impl Value {
    /// The value as a number, if it is one (text values are not).
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            Value::Seconds(v) | Value::Fixed2(v) => Some(*v),
            Value::Text(_) | Value::Str(_) => None,
        }
    }
}

/// Whether `name` is a valid Prometheus metric (and label) name.
pub fn metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{opcode, HEADER_LEN};

    #[test]
    fn exposition_groups_families_and_escapes() {
        let mut e = Exposition::default();
        e.sample("m_commands_total", "commands", Kind::Counter, &[("command", "get"), ("status", "hit")], 1.0);
        e.sample("m_items", "items\nstored", Kind::Gauge, &[], 3.0);
        e.sample("m_commands_total", "ignored", Kind::Gauge, &[("command", "get"), ("status", "miss")], 2.0);
        // The same labels again: the first sample stays.
        e.sample("m_commands_total", "ignored", Kind::Counter, &[("command", "get"), ("status", "hit")], 9.0);
        e.sample("m_info", "labels", Kind::Info, &[("inter", "a \"b\"\\c")], 1.0);
        e.sample("m_ratio", "a ratio", Kind::Gauge, &[], 0.5);
        e.sample("items:1:number", "refused name", Kind::Gauge, &[], 1.0);
        e.sample("m_x", "refused label", Kind::Gauge, &[("1:a", "b")], 1.0);
        assert!(e.has("m_items") && !e.has("m_x"));
        let mut out = Vec::new();
        e.render(&mut out);
        let text = String::from_utf8(out).unwrap_or_default();
        assert_eq!(
            text,
            "# HELP m_commands_total commands\n# TYPE m_commands_total counter\n\
             m_commands_total{command=\"get\",status=\"hit\"} 1\n\
             m_commands_total{command=\"get\",status=\"miss\"} 2\n\
             # HELP m_items items\\nstored\n# TYPE m_items gauge\nm_items 3\n\
             # HELP m_info labels\n# TYPE m_info gauge\nm_info{inter=\"a \\\"b\\\"\\\\c\"} 1\n\
             # HELP m_ratio a ratio\n# TYPE m_ratio gauge\nm_ratio 0.5\n"
        );
        assert_eq!((number(f64::INFINITY), number(f64::NAN)), ("+Inf".to_string(), "NaN".to_string()));
        assert_eq!(Value::Seconds(0.25).number(), Some(0.25));
        assert_eq!(Value::Str("x").number(), None);
    }

    fn snapshot() -> Snapshot {
        let mut s = Snapshot::default();
        s.counter("cmd_get", "get commands", 12u64);
        s.gauge("curr_items", "items stored", 3usize);
        s.info("version", "server version", "1.6.38");
        s.info("rusage_user", "user CPU seconds", Value::Seconds(0.5));
        s
    }

    fn status() -> Snapshot {
        let mut s = Snapshot::default();
        s.info("sizes_status", "whether sizes are counted", "enabled");
        s
    }

    #[test]
    fn text_lines_then_end() {
        let mut out = Vec::new();
        text(&mut out, &Reply::Stats(snapshot()));
        assert_eq!(
            out,
            b"STAT cmd_get 12\r\nSTAT curr_items 3\r\nSTAT version 1.6.38\r\nSTAT rusage_user 0.500000\r\nEND\r\n"
        );
        for (r, want) in [
            (Reply::Reset, &b"RESET\r\n"[..]),
            (Reply::Unknown, b"ERROR\r\n"),
            (Reply::Usage(b"CLIENT_ERROR x\r\n"), b"CLIENT_ERROR x\r\n"),
            (Reply::Done, b"OK\r\n"),
            (Reply::Unterminated(status()), b"STAT sizes_status enabled\r\n"),
            (
                Reply::Lines("detailed", b"PREFIX a get 1 hit 1 set 0 del 0\r\nEND\r\n".to_vec()),
                b"PREFIX a get 1 hit 1 set 0 del 0\r\nEND\r\n",
            ),
        ] {
            out.clear();
            text(&mut out, &r);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn binary_packet_per_stat_then_an_empty_one() {
        let h = Header { opcode: opcode::STAT, keylen: 0, extlen: 0, bodylen: 0, opaque: 5, cas: 0 };
        let mut out = Vec::new();
        binary(&mut out, &h, &Reply::Stats(snapshot()));
        let first = [&out[..HEADER_LEN + 9]];
        assert_eq!(&first[0][HEADER_LEN..], b"cmd_get12");
        assert_eq!(u16::from_be_bytes([out[2], out[3]]), 7, "key length");
        // Four stats, each header + name + value, and the terminator.
        let lens: usize =
            ["cmd_get12", "curr_items3", "version1.6.38", "rusage_user0.500000"].iter().map(|s| s.len()).sum();
        assert_eq!(out.len(), 5 * HEADER_LEN + lens);
        assert!(out[out.len() - HEADER_LEN..][8..12].iter().all(|&b| b == 0), "empty terminator");
        out.clear();
        binary(&mut out, &h, &Reply::Unknown);
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), Status::KeyNotFound as u16);
        out.clear();
        binary(&mut out, &h, &Reply::Reset);
        assert_eq!(out.len(), HEADER_LEN);
        out.clear();
        binary(&mut out, &h, &Reply::Done);
        assert_eq!(out.len(), HEADER_LEN);
        out.clear();
        binary(&mut out, &h, &Reply::Lines("detailed", b"END\r\n".to_vec()));
        assert_eq!(&out[HEADER_LEN..HEADER_LEN + 13], b"detailedEND\r\n");
        assert_eq!(out.len(), 2 * HEADER_LEN + 13);
    }
}
