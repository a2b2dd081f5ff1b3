//! Native logging to journald: the `journal` log format.
//!
//! Under systemd the daemon's stderr is already a stream to journald, but a
//! stream carries flat text: `journalctl` can select by unit and priority,
//! not by job or outcome. The native protocol sends one datagram per entry
//! with one field per line, so every field of a log event becomes a journal
//! field (`journalctl -u solocron SOLOCRON_JOB=nightly-report
//! SOLOCRON_OUTCOME=failed`). The protocol is described at
//! <https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>; what this module uses of it:
//!
//! - an `AF_UNIX` datagram per entry, sent to `/run/systemd/journal/socket`
//!   (or [`SOCKET_ENV`]);
//! - a field is `NAME=value\n`; a value that holds a newline is `NAME\n`, its
//!   length as a little-endian `u64`, the bytes, `\n`;
//! - names are `A`–`Z`, `0`–`9` and `_`, at most 64 characters, not
//!   starting with `_` (those are journald's trusted fields);
//! - an entry too large for one datagram would go through a sealed memfd
//!   passed as a file descriptor. Not implemented: every value is cut at
//!   [`VALUE_CAP`] bytes, so an entry (a dozen fields; the longest value is a
//!   job's output line, at most 4 KiB) stays far below the datagram limit
//!   (the socket's send buffer, about 200 KiB by default). A datagram the
//!   kernel refuses anyway is a lost line like any other.
//!
//! An entry: `MESSAGE` is the line the text format prints, without its time
//! and level (`run finished job=… outcome=failed exit=3 duration=41.2s`), so
//! `journalctl -u solocron` reads like the text logs; `PRIORITY` comes from
//! the level (ERROR 3, WARN 4, INFO 6, DEBUG and TRACE 7, syslog's meaning,
//! so `journalctl -p info` hides debug lines); `SYSLOG_IDENTIFIER=solocron`;
//! `CODE_FILE` and `CODE_LINE`; the event's message alone in
//! `SOLOCRON_EVENT`; and each field as `SOLOCRON_` and its name in upper
//! case, numbers as written in JSON (`SOLOCRON_EXIT_CODE=3`,
//! `SOLOCRON_DURATION_MS=41200`).
//!
//! Sending goes through the same bounded queue and writer thread as stderr
//! lines ([`super`]): the thread that logs only encodes the entry and does a
//! non-blocking `try_send`. The writer thread's socket has a send timeout
//! ([`SEND_TIMEOUT`]), so a journald that stopped reading (a full socket)
//! holds it for at most that long per entry; a send that fails (journald
//! gone: no socket, connection refused; the timeout; a refused datagram)
//! loses that entry and counts it in `solocron_log_lines_lost_total`. The
//! socket is not connected: each entry is sent to the path, so a restarted
//! journald (a new socket at the same path) gets the next one.
//!
//! When: `--log-format journal`, or no `--log-format` and stderr is the
//! journal. systemd sets `JOURNAL_STREAM` to `DEVICE:INODE` of the stream it
//! gave the service (systemd.exec(5)); stderr is the journal if its own
//! device and inode are those, which a process that inherited the variable
//! but not the stream (a daemon started from a job, a shell with stderr
//! redirected) does not match. At start the socket is checked with a
//! `connect` (nothing is sent); if that fails, the daemon logs text to
//! stderr instead and says so in its first line.
//!
//! Why not the `tracing-journald` crate (0.3): it sends to a fixed path
//! (tests cannot give it a socket of their own), with a blocking socket on
//! the thread that logs (a journald that stops reading would stop the tokio
//! workers, and so the runs), and it drops send errors without a trace, so
//! lost lines could not be counted. Its encoding is the part worth sharing,
//! and it is forty lines here.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatFields as _, Writer};
use tracing_subscriber::layer::{Context, Layer};

use super::{Message, TextFields, queue_line};

/// journald's socket for the native protocol.
pub const DEFAULT_SOCKET: &str = "/run/systemd/journal/socket";

/// Environment variable naming another socket (tests, a journal namespace:
/// `/run/systemd/journal.NAMESPACE/socket`).
pub const SOCKET_ENV: &str = "SOLOCRON_JOURNAL_SOCKET";

/// Set by systemd to `DEVICE:INODE` of the service's journal stream.
pub const STREAM_ENV: &str = "JOURNAL_STREAM";

/// Longest value sent, in bytes; a longer one is cut and ends in `…`.
pub const VALUE_CAP: usize = 8 * 1024;

/// Longest field name journald accepts.
const NAME_CAP: usize = 64;

/// How long the writer thread waits for room in journald's socket before
/// the entry is given up (and counted lost).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The socket to send to: [`SOCKET_ENV`] if set and not empty, else
/// [`DEFAULT_SOCKET`].
pub fn socket_path() -> PathBuf {
    match std::env::var_os(SOCKET_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// Whether stderr is the journal stream systemd named in `JOURNAL_STREAM`.
pub fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os(STREAM_ENV) else {
        return false;
    };
    let Some(stream) = stream.to_str() else {
        return false;
    };
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|file| file.metadata());
    match stderr {
        Ok(meta) => stream_matches(stream, meta.dev(), meta.ino()),
        Err(_) => false,
    }
}

/// Whether a `JOURNAL_STREAM` value (`DEVICE:INODE`, both decimal) names
/// the file with device `dev` and inode `ino`.
pub fn stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let Some((device, inode)) = value.trim().split_once(':') else {
        return false;
    };
    device.parse() == Ok(dev) && inode.parse() == Ok(ino)
}

/// The writer thread's end: an unconnected datagram socket and the path
/// every entry is sent to.
pub(super) struct Journal {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Journal {
    /// Checks that something listens at `path` (a `connect`, which sends
    /// nothing) and makes the socket entries are sent from.
    pub(super) fn open(path: &Path) -> io::Result<Journal> {
        UnixDatagram::unbound()?.connect(path)?;
        let socket = UnixDatagram::unbound()?;
        socket.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Journal {
            socket,
            path: path.to_path_buf(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one entry; blocks for at most [`SEND_TIMEOUT`].
    pub(super) fn send(&self, entry: &[u8]) -> io::Result<()> {
        self.socket.send_to(entry, &self.path).map(|_| ())
    }
}

/// The layer that encodes each event as an entry and queues it for the
/// writer thread.
pub(super) struct JournalLayer {
    pub(super) queue: SyncSender<Message>,
}

impl<S: Subscriber> Layer<S> for JournalLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        queue_line(&self.queue, encode(event));
    }
}

/// `PRIORITY` for a level: syslog's numbers.
pub fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        Level::DEBUG | Level::TRACE => "7",
    }
}

/// One event as a native-protocol entry (see the module docs for its fields).
pub(super) fn encode(event: &Event<'_>) -> Vec<u8> {
    let meta = event.metadata();
    let mut message = String::new();
    // Only a field's own `Display`/`Debug` can fail; what was written stays.
    let _ = TextFields.format_fields(Writer::new(&mut message), event);
    let mut entry = Vec::with_capacity(192 + message.len());
    put(&mut entry, "MESSAGE", &message);
    put(&mut entry, "PRIORITY", priority(meta.level()));
    put(&mut entry, "SYSLOG_IDENTIFIER", "solocron");
    if let Some(file) = meta.file() {
        put(&mut entry, "CODE_FILE", file);
    }
    if let Some(line) = meta.line() {
        put(&mut entry, "CODE_LINE", &line.to_string());
    }
    event.record(&mut FieldsVisitor { entry: &mut entry });
    entry
}

struct FieldsVisitor<'a> {
    entry: &'a mut Vec<u8>,
}

impl FieldsVisitor<'_> {
    fn field(&mut self, field: &Field, value: &str) {
        let name = if field.name() == "message" {
            "SOLOCRON_EVENT".to_string()
        } else {
            field_name(field.name())
        };
        put(self.entry, &name, value);
    }
}

impl Visit for FieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` fields arrive here and print with `Display`; numbers
        // and booleans print as in JSON.
        self.field(field, &format!("{value:?}"));
    }
}

/// `SOLOCRON_` and the field's name in upper case, anything but a letter,
/// digit or `_` replaced by `_`, cut at 64 characters.
pub fn field_name(name: &str) -> String {
    let mut out = String::from("SOLOCRON_");
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    out.truncate(NAME_CAP);
    out
}

/// Appends one field: `NAME=value\n`, or the length-prefixed form when the
/// value holds a newline. `name` must already be a valid field name.
pub fn put(entry: &mut Vec<u8>, name: &str, value: &str) {
    let value = capped(value);
    entry.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        entry.push(b'\n');
        entry.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        entry.push(b'=');
    }
    entry.extend_from_slice(value.as_bytes());
    entry.push(b'\n');
}

/// `value`, or its first [`VALUE_CAP`] bytes (at a character boundary)
/// and `…`.
fn capped(value: &str) -> Cow<'_, str> {
    if value.len() <= VALUE_CAP {
        return Cow::Borrowed(value);
    }
    let mut end = VALUE_CAP - '…'.len_utf8();
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &value[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Decodes an entry as journald does (fields in order).
    fn decode(mut entry: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        while !entry.is_empty() {
            let end = entry
                .iter()
                .position(|&b| b == b'\n')
                .expect("a field ends in a newline");
            let line = &entry[..end];
            if let Some(eq) = line.iter().position(|&b| b == b'=') {
                fields.push((
                    String::from_utf8(line[..eq].to_vec()).expect("name"),
                    String::from_utf8(line[eq + 1..].to_vec()).expect("value"),
                ));
                entry = &entry[end + 1..];
            } else {
                let name = String::from_utf8(line.to_vec()).expect("name");
                let rest = &entry[end + 1..];
                let len = u64::from_le_bytes(rest[..8].try_into().expect("length")) as usize;
                let value = String::from_utf8(rest[8..8 + len].to_vec()).expect("value");
                assert_eq!(rest[8 + len], b'\n', "a binary value ends in a newline");
                fields.push((name, value));
                entry = &rest[8 + len + 1..];
            }
        }
        fields
    }

    fn get<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    #[test]
    fn plain_and_multi_line_values_round_trip() {
        let mut entry = Vec::new();
        put(&mut entry, "MESSAGE", "run finished");
        put(&mut entry, "SOLOCRON_ERROR", "line one\nline two\n");
        put(&mut entry, "SOLOCRON_EMPTY", "");
        assert!(entry.starts_with(b"MESSAGE=run finished\nSOLOCRON_ERROR\n"));
        assert_eq!(
            decode(&entry),
            [
                ("MESSAGE".to_string(), "run finished".to_string()),
                (
                    "SOLOCRON_ERROR".to_string(),
                    "line one\nline two\n".to_string()
                ),
                ("SOLOCRON_EMPTY".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn field_names_follow_journald_rules() {
        assert_eq!(field_name("exit_code"), "SOLOCRON_EXIT_CODE");
        assert_eq!(field_name("a.b-c"), "SOLOCRON_A_B_C");
        assert_eq!(field_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        let long = "é".repeat(VALUE_CAP);
        let mut entry = Vec::new();
        put(&mut entry, "MESSAGE", &long);
        let fields = decode(&entry);
        let value = get(&fields, "MESSAGE").expect("MESSAGE");
        assert!(value.len() <= VALUE_CAP, "{}", value.len());
        assert!(value.ends_with('…'));
    }

    #[test]
    fn journal_stream_names_a_device_and_an_inode() {
        assert!(stream_matches("2049:1234", 2049, 1234));
        assert!(stream_matches("2049:1234\n", 2049, 1234));
        assert!(!stream_matches("2049:1235", 2049, 1234));
        assert!(!stream_matches("2049", 2049, 1234));
        assert!(!stream_matches("", 2049, 1234));
        assert!(!stream_matches("x:1234", 2049, 1234));
    }

    #[test]
    fn an_event_becomes_an_entry_with_every_field() {
        let (queue, entries) = sync_channel(4);
        let subscriber = tracing_subscriber::registry().with(JournalLayer { queue });
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(job = %"nightly-report", occurrence = %"2026-11-29T21:00:00Z",
                node = %"web-2", fence = 17_u64, outcome = %"failed", exit_code = 3,
                duration_ms = 41_200_u64, error = %"exit status 3\nsecond line", "run finished");
        });
        let Ok(Message::Line(entry)) = entries.try_recv() else {
            panic!("one entry queued");
        };
        let fields = decode(&entry);
        let field = |name| get(&fields, name).unwrap_or_else(|| panic!("{name} in {fields:?}"));
        assert!(
            field("MESSAGE").starts_with(
                "run finished job=nightly-report occurrence=2026-11-29T21:00:00Z node=web-2 \
                 fence=17 outcome=failed exit=3 duration=41.2s"
            ),
            "{fields:?}"
        );
        assert_eq!(field("PRIORITY"), "4");
        assert_eq!(field("SYSLOG_IDENTIFIER"), "solocron");
        assert_eq!(field("SOLOCRON_EVENT"), "run finished");
        assert_eq!(field("SOLOCRON_JOB"), "nightly-report");
        assert_eq!(field("SOLOCRON_OCCURRENCE"), "2026-11-29T21:00:00Z");
        assert_eq!(field("SOLOCRON_NODE"), "web-2");
        assert_eq!(field("SOLOCRON_FENCE"), "17");
        assert_eq!(field("SOLOCRON_OUTCOME"), "failed");
        assert_eq!(field("SOLOCRON_EXIT_CODE"), "3");
        assert_eq!(field("SOLOCRON_DURATION_MS"), "41200");
        assert_eq!(field("SOLOCRON_ERROR"), "exit status 3\nsecond line");
        assert!(field("CODE_FILE").ends_with("journal.rs"));
        assert!(field("CODE_LINE").parse::<u32>().is_ok());
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(&Level::ERROR), "3");
        assert_eq!(priority(&Level::WARN), "4");
        assert_eq!(priority(&Level::INFO), "6");
        assert_eq!(priority(&Level::DEBUG), "7");
        assert_eq!(priority(&Level::TRACE), "7");
    }

    #[test]
    fn a_missing_or_removed_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("socket");
        assert!(Journal::open(&path).is_err(), "nothing listens yet");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let journal = Journal::open(&path).expect("open");
        journal.send(b"MESSAGE=one\n").expect("send");
        let mut buf = [0u8; 64];
        let len = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..len], b"MESSAGE=one\n");
        drop(listener);
        std::fs::remove_file(&path).expect("remove the socket");
        assert!(journal.send(b"MESSAGE=two\n").is_err());
    }
}
