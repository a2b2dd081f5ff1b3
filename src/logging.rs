//! Where log lines go, and why writing one never stops a run (guarantee 10,
//! docs/guarantees.md).
//!
//! Every event is formatted on the thread that logs it and handed to one
//! writer thread through a bounded queue; the writer thread does the only
//! blocking `write` to stderr. So a closed pipe (`solocron run | head`), a
//! full disk or a reader that stopped reading costs log lines, never a run:
//! the logging thread only ever does a non-blocking `try_send`. A line that
//! finds the queue full, or that the writer cannot write, is dropped and
//! counted (`solocron_log_lines_lost_total`, [`lines_lost`]). Nothing here
//! prints with `println!`/`eprintln!`, which panic on a closed stream.
//!
//! Why not `tracing-appender`'s non-blocking writer: its guard prints with
//! `println!` when the queue is still full at exit (a stuck stderr), which
//! panics when stdout is closed too, and its writer thread counts no write
//! errors; the queue and thread here are fifty lines.
//!
//! Text lines name a run's numbers the way people read them (`exit=0
//! duration=41.2s`); JSON lines carry the same fields as numbers
//! (`exit_code`, `duration_ms`), matching the history (docs/operations.md).
//!
//! Under systemd the daemon logs to journald natively instead, with every
//! field a journal field ([`journal`]): the entries go through the same
//! queue and writer thread, and an entry journald does not take is counted
//! the same way. [`init`] picks the format: `--log-format` if given, else
//! `journal` when stderr is the journal (`JOURNAL_STREAM`), else text; a
//! journal socket that cannot be reached at start means text on stderr.
//!
//! Text lines escape control characters in every field and message (`\u{1b}`,
//! `\r`, `\n`): a job's output line, logged as a field, can neither forge a
//! log line nor colour the terminal or the journal. With `--log-format
//! json` everything on stderr is JSON, also what a command says for people
//! ([`tell`], [`to_stderr`]).
//!
//! The filter ([`filter_directives`]): a bare level in `SOLOCRON_LOG`
//! (`debug`) applies to solocron's own events only; other crates (the
//! HTTP client, Redis) stay at `warn` unless a directive names them
//! (`SOLOCRON_LOG=debug,reqwest=debug`): their debug lines print host
//! names and addresses, which may hold an interpolated `${SECRET}`. The
//! redis crate is off unless named: its Cluster client logged two to six
//! lines for every command while the cluster was down, some 300 a second
//! for one job, beside the one outage line solocron writes.

pub mod journal;

use std::fmt;
use std::io::{IsTerminal as _, Write as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use tracing::Level;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatFields, Writer};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use journal::{Journal, JournalLayer};

/// Lines waiting for the writer before new ones are dropped: a few seconds
/// of a busy node's output, at most a few MB.
const QUEUE_LINES: usize = 8192;
/// How long [`Logging::finish`] waits for queued lines to be written.
const FINISH_WAIT: Duration = Duration::from_secs(1);

/// Lines dropped (queue full) or not written (stderr or the journal
/// failed) so far.
static LOST: AtomicU64 = AtomicU64::new(0);

/// `--log-format json`: what goes to stderr for people is JSON too.
static STDERR_JSON: AtomicBool = AtomicBool::new(false);
/// The log is text on stderr: an echo of a job's line there (`trigger`)
/// already is what its `job output` event would say.
static LOG_IS_STDERR_TEXT: AtomicBool = AtomicBool::new(false);

/// The crate's own target prefix: a bare level in `SOLOCRON_LOG` applies to it.
const OWN_TARGET: &str = "solocron";
/// The redis crate's log target (off unless a directive names it).
const REDIS_TARGET: &str = "redis";

/// Log lines lost since start: dropped because the writer fell behind, or
/// not written because stderr failed (closed pipe, full disk) or journald
/// did not take the entry (gone, or its socket full for a second).
pub fn lines_lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// Told the new total at each lost line, once the metrics are served
/// ([`on_line_lost`]).
static LOST_HOOK: OnceLock<fn(u64)> = OnceLock::new();

/// Has `hook` told the total of lost lines at each line lost from now on
/// (the metrics endpoint's counter). Only the first hook set is kept.
pub fn on_line_lost(hook: fn(u64)) {
    let _ = LOST_HOOK.set(hook);
}

fn lose_line() {
    let total = LOST.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(hook) = LOST_HOOK.get() {
        hook(total);
    }
}

/// The log format: `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event on stderr, for people.
    Text,
    /// One JSON object per line on stderr.
    Json,
    /// Native entries to journald, every field a journal field.
    Journal,
}

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it was handled.
    Flush(SyncSender<()>),
}

/// The logging set-up of the process; [`Logging::finish`] before exit.
pub struct Logging {
    queue: SyncSender<Message>,
    format: LogFormat,
}

/// Starts logging in `requested` (`None`: journal when stderr is the
/// journal, else text), filtered by `SOLOCRON_LOG` (else `default_filter`).
/// Call once, first thing in `main`.
pub fn init(requested: Option<LogFormat>, default_filter: &str) -> Logging {
    let (queue, lines) = sync_channel(QUEUE_LINES);
    let wants_journal = match requested {
        Some(format) => format == LogFormat::Journal,
        None => journal::stderr_is_journal(),
    };
    let mut unreachable = None;
    let (format, sink) = if wants_journal {
        let path = journal::socket_path();
        match Journal::open(&path) {
            Ok(journal) => (
                LogFormat::Journal,
                Sink::Journal {
                    journal,
                    failing: None,
                },
            ),
            Err(err) => {
                unreachable = Some((path, err));
                (LogFormat::Text, Sink::Stderr)
            }
        }
    } else {
        (requested.unwrap_or(LogFormat::Text), Sink::Stderr)
    };
    // Without its thread the queue fills and every line is counted lost:
    // logging degrades, the daemon goes on.
    let _ = std::thread::Builder::new()
        .name("solocron-log".to_string())
        .spawn(move || write_lines(&lines, sink));
    STDERR_JSON.store(format == LogFormat::Json, Ordering::Relaxed);
    LOG_IS_STDERR_TEXT.store(format == LogFormat::Text, Ordering::Relaxed);
    let spec = std::env::var("SOLOCRON_LOG").ok();
    let filter = || {
        EnvFilter::try_new(filter_directives(spec.as_deref(), default_filter))
            .unwrap_or_else(|_| EnvFilter::new(filter_directives(None, default_filter)))
    };
    let writer = QueueWriter(queue.clone());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .with_writer(move || writer.clone());
    // Err: a subscriber is already set (a test set one); keep it.
    let _ = match format {
        LogFormat::Text => builder.fmt_fields(TextFields).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Journal => tracing_subscriber::registry()
            .with(filter())
            .with(JournalLayer {
                queue: queue.clone(),
            })
            .try_init()
            .map_err(Into::into),
    };
    if let Some((path, err)) = unreachable {
        tracing::warn!(socket = %path.display(), error = %err,
            "cannot reach the journal socket: logging to stderr instead");
    }
    Logging { queue, format }
}

impl Logging {
    /// The format chosen at start.
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// A fatal error, for the person at the terminal or the journal: in
    /// text, `error: …` as written (a config error's snippet keeps its
    /// lines); in JSON, one `ERROR` object with the text in `error`; in the
    /// journal, one entry at priority 3 with the text in `SOLOCRON_ERROR`.
    pub fn fatal(&self, err: &anyhow::Error) {
        let text = format!("{err:#}");
        match self.format {
            LogFormat::Json | LogFormat::Journal => {
                tracing::error!(error = %text, "fatal error, solocron stops")
            }
            LogFormat::Text => {
                let _ = self
                    .queue
                    .try_send(Message::Line(format!("error: {text}\n").into_bytes()));
            }
        }
    }

    /// Waits (at most a second) until the lines logged so far are written
    /// or given up on.
    pub fn finish(&self) {
        let (done, wait) = sync_channel(1);
        if self.queue.try_send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(FINISH_WAIT);
        }
    }
}

/// The filter directives for `SOLOCRON_LOG` = `spec` (`None`: unset, then
/// `default_level`). A bare level (`debug`) is solocron's own
/// (`solocron=debug`); every other crate gets the same level but at most
/// `warn`, and the redis crate none (`redis=off`: solocron says what
/// Redis does in its own outage lines, once); directives that name a
/// target (`reqwest=debug`, `redis=warn`, `solocron::lock=trace`) are kept
/// as written, so third-party output is there only when asked for by name.
pub fn filter_directives(spec: Option<&str>, default_level: &str) -> String {
    let mut own = None;
    let mut named = Vec::new();
    for directive in spec
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty())
    {
        match directive.parse::<LevelFilter>() {
            Ok(level) => own = Some(level),
            Err(_) => named.push(directive),
        }
    }
    let own = own
        .or_else(|| default_level.parse().ok())
        .unwrap_or(LevelFilter::INFO);
    let others = own.min(LevelFilter::WARN);
    let mut directives = format!("{others},{OWN_TARGET}={own}");
    // The redis crate logs every failed reconnect of a Cluster client at
    // warn and error, hundreds of lines a second while the cluster is down
    // (or not a cluster), whatever the outage lines already said once.
    let redis_named = named.iter().any(|directive| {
        let target = directive.split('=').next().unwrap_or_default().trim();
        target == REDIS_TARGET || target.starts_with("redis::")
    });
    if !redis_named {
        directives.push_str(&format!(",{REDIS_TARGET}=off"));
    }
    for directive in named {
        directives.push(',');
        directives.push_str(directive);
    }
    directives
}

/// Whether stderr carries JSON (`--log-format json`).
pub fn stderr_is_json() -> bool {
    STDERR_JSON.load(Ordering::Relaxed)
}

/// Whether the log is text on stderr (not JSON, not the journal).
pub fn log_is_stderr_text() -> bool {
    LOG_IS_STDERR_TEXT.load(Ordering::Relaxed)
}

/// Tells a person `text` on stderr (`trigger`'s report, notes of the
/// commands): as written, or with `--log-format json` as one JSON object
/// in the log's shape (`timestamp`, `level`, `message`: `text` without its
/// trailing newline, then `fields`). A closed or full stderr loses it,
/// nothing else.
pub fn tell(level: Level, text: &str, fields: &[(&str, serde_json::Value)]) {
    if stderr_is_json() {
        write_stderr(&json_line(level, text.trim_end(), fields));
    } else {
        write_stderr(text);
    }
}

/// [`tell`] at INFO without fields.
pub fn to_stderr(text: &str) {
    tell(Level::INFO, text, &[]);
}

/// One JSON log line (with its newline): `timestamp`, `level`, `message`,
/// then `fields`, as the JSON log format writes an event.
pub fn json_line(level: Level, message: &str, fields: &[(&str, serde_json::Value)]) -> String {
    let mut object = serde_json::Map::new();
    object.insert(
        "timestamp".to_string(),
        chrono::Utc::now()
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            .into(),
    );
    object.insert("level".to_string(), level.as_str().into());
    object.insert("message".to_string(), message.into());
    for (name, value) in fields {
        object.insert((*name).to_string(), value.clone());
    }
    let mut line = serde_json::Value::Object(object).to_string();
    line.push('\n');
    line
}

fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// Where the writer thread puts what it is handed.
enum Sink {
    /// Each message is a line (or several) of text or JSON.
    Stderr,
    /// Each message is one native-protocol entry. `failing`: the lost-line
    /// count when the current run of failed sends began.
    Journal {
        journal: Journal,
        failing: Option<u64>,
    },
}

impl Sink {
    /// Writes one message; `false` if it was lost.
    fn write(&mut self, bytes: &[u8]) -> bool {
        match self {
            Sink::Stderr => std::io::stderr().write_all(bytes).is_ok(),
            Sink::Journal { journal, failing } => match journal.send(bytes) {
                Ok(()) => {
                    if let Some(since) = failing.take() {
                        note(&format!(
                            "solocron: the journal socket {} answers again; {} log lines were lost\n",
                            journal.path().display(),
                            lines_lost().saturating_sub(since)
                        ));
                    }
                    true
                }
                Err(err) => {
                    if failing.is_none() {
                        *failing = Some(lines_lost());
                        note(&format!(
                            "solocron: cannot send to the journal socket {}: {err}; log lines are \
                             lost (counted in solocron_log_lines_lost_total) until it answers\n",
                            journal.path().display()
                        ));
                    }
                    false
                }
            },
        }
    }
}

/// A line on stderr about the journal itself (under systemd, stderr is the
/// journal's stream socket, a second way in); lost if stderr fails too.
fn note(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

fn write_lines(lines: &Receiver<Message>, mut sink: Sink) {
    while let Ok(message) = lines.recv() {
        match message {
            Message::Line(line) => {
                if !sink.write(&line) {
                    lose_line();
                }
            }
            Message::Flush(done) => {
                let _ = done.try_send(());
            }
        }
    }
}

/// Hands `bytes` to the writer thread without blocking; a full queue (or a
/// writer thread that is gone) loses them, counted.
fn queue_line(queue: &SyncSender<Message>, bytes: Vec<u8>) {
    match queue.try_send(Message::Line(bytes)) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => lose_line(),
    }
}

/// The per-event writer: one `write` per formatted event, never blocking.
#[derive(Clone)]
struct QueueWriter(SyncSender<Message>);

impl std::io::Write for QueueWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        queue_line(&self.0, buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Text fields as the default formatter writes them (`key=value`, the
/// message first), except `exit_code=N` reads `exit=N` and `duration_ms=N`
/// reads `duration=41.2s`.
struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl TextVisitor<'_> {
    fn field(&mut self, name: &str, value: &dyn fmt::Display) {
        if self.result.is_err() {
            return;
        }
        let pad = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        let value = Escaped(value);
        self.result = if name == "message" {
            write!(self.writer, "{pad}{value}")
        } else {
            write!(self.writer, "{pad}{name}={value}")
        };
    }

    fn number(&mut self, field: &Field, value: i128) {
        match field.name() {
            "duration_ms" => self.field("duration", &seconds(value)),
            "exit_code" => self.field("exit", &value),
            name => self.field(name, &value),
        }
    }
}

/// A value with its control characters escaped (`\u{1b}`, `\r`, `\n`,
/// `\t`), so a text line stays one line and shows no job's colours.
struct Escaped<'a>(&'a dyn fmt::Display);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        struct Escaping<'a, 'b>(&'a mut fmt::Formatter<'b>);
        impl fmt::Write for Escaping<'_, '_> {
            fn write_str(&mut self, text: &str) -> fmt::Result {
                for part in text.split_inclusive(char::is_control) {
                    match part.chars().last() {
                        Some(last) if last.is_control() => {
                            self.0.write_str(&part[..part.len() - last.len_utf8()])?;
                            write!(self.0, "{}", last.escape_default())?;
                        }
                        _ => self.0.write_str(part)?,
                    }
                }
                Ok(())
            }
        }
        write!(Escaping(f), "{}", self.0)
    }
}

/// `41.2s` for 41,200 ms, `850ms` below a second.
fn seconds(ms: i128) -> String {
    if ms.abs() < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

impl Visit for TextVisitor<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.field("message", &value);
        } else {
            self.field(field.name(), &format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field.name(), &format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(seconds(41_200), "41.2s");
        assert_eq!(seconds(850), "850ms");
        assert_eq!(seconds(0), "0ms");
    }

    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut lines) = self.0.lock() {
                lines.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes through the text format's fields, without time,
    /// level or target.
    fn text_of(log: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_level(false)
            .with_target(false)
            .fmt_fields(TextFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        String::from_utf8(captured.0.lock().expect("lines").clone()).expect("utf-8")
    }

    #[test]
    fn text_fields_rename_exit_code_and_duration_ms() {
        let text = text_of(|| {
            tracing::info!(job = %"report", stream = "stdout", exit_code = 0, duration_ms = 41_200_u64,
                "run finished");
        });
        assert_eq!(
            text.trim(),
            "run finished job=report stream=\"stdout\" exit=0 duration=41.2s"
        );
    }

    #[test]
    fn text_fields_escape_control_characters() {
        let forged = "ok\u{1b}[31m red\rINFO run finished\nINFO claim won\t.";
        let text = text_of(|| {
            tracing::info!(line = %forged, quoted = forged, "job output\u{7}");
        });
        assert_eq!(
            text,
            "job output\\u{7} line=ok\\u{1b}[31m red\\rINFO run finished\\nINFO claim won\\t. \
             quoted=\"ok\\u{1b}[31m red\\rINFO run finished\\nINFO claim won\\t.\"\n"
        );
    }

    #[test]
    fn a_bare_level_is_solocrons_own_and_other_crates_stay_at_warn() {
        assert_eq!(
            filter_directives(None, "info"),
            "warn,solocron=info,redis=off"
        );
        assert_eq!(
            filter_directives(None, "warn"),
            "warn,solocron=warn,redis=off"
        );
        assert_eq!(
            filter_directives(Some("debug"), "info"),
            "warn,solocron=debug,redis=off"
        );
        assert_eq!(
            filter_directives(Some("error"), "info"),
            "error,solocron=error,redis=off"
        );
        assert_eq!(
            filter_directives(Some("off"), "info"),
            "off,solocron=off,redis=off"
        );
        assert_eq!(
            filter_directives(Some(" trace , reqwest=debug,hyper_util=trace"), "info"),
            "warn,solocron=trace,redis=off,reqwest=debug,hyper_util=trace"
        );
        assert_eq!(
            filter_directives(Some("solocron::lock=trace"), "warn"),
            "warn,solocron=warn,redis=off,solocron::lock=trace"
        );
        assert_eq!(
            filter_directives(Some("redis=warn"), "info"),
            "warn,solocron=info,redis=warn"
        );
        assert_eq!(
            filter_directives(Some("redis::cluster_handling=debug"), "info"),
            "warn,solocron=info,redis::cluster_handling=debug"
        );
        assert_eq!(
            filter_directives(Some("redis_helper=debug"), "info"),
            "warn,solocron=info,redis=off,redis_helper=debug"
        );
        for spec in ["debug", "reqwest=debug", "debug,reqwest=trace"] {
            let directives = filter_directives(Some(spec), "info");
            assert!(EnvFilter::try_new(&directives).is_ok(), "{directives}");
        }
    }

    #[test]
    fn a_json_line_has_the_log_events_shape() {
        let line = json_line(Level::WARN, "job output", &[("line", "a\u{1b}b".into())]);
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line}"
        );
        let value: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(value["level"], "WARN");
        assert_eq!(value["message"], "job output");
        assert_eq!(value["line"], "a\u{1b}b");
        assert!(
            value["timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
    }

    #[test]
    fn a_closed_stderr_costs_counted_lines_not_a_panic() {
        // The queue of a logging set-up whose writer thread is gone: every
        // line is lost and counted, and writing returns at once.
        let (queue, lines) = sync_channel(1);
        drop(lines);
        let mut writer = QueueWriter(queue);
        let before = lines_lost();
        for _ in 0..3 {
            writer.write_all(b"a line\n").expect("never an error");
        }
        assert!(lines_lost() >= before + 3);
    }
}
