//! A job's stdout and stderr, line by line, into the log, and the tail
//! that goes with the history entry.
//!
//! Each line becomes one `job output` event with the job's fields and
//! `stream`; stdout at INFO, stderr at WARN. A notifier's lines are
//! `notifier output` events instead, with the same fields (`job` names the
//! job it reports on), so they are never taken for the job's own output.
//! With an echo (`trigger`) each line is written to this process's stdout
//! or stderr instead: with a text log it is not logged as well (the
//! terminal would show it twice), with `--log-format json` a stderr line's
//! echo is its JSON event, and only the journal gets both. Memory per
//! stream is bounded:
//! a line is kept up to [`LINE_CAP`] bytes and the rest of it is counted and
//! thrown away as it arrives, so a job printing a gigabyte without a newline
//! costs 4 KiB plus one read buffer. (`LinesCodec` with a max length would
//! also discard, but it hides how; this is short enough to own.) Bytes that
//! are not UTF-8 are replaced, a trailing `\r` is dropped.
//!
//! The log gets at most `output_log_max` bytes of a run's lines (both
//! streams together, [`RunOutput`]); the lines past it are counted and
//! summed up in one line when the run ends, so a job printing 100 MB costs
//! the journal one line, not 675,000, and journald's rate limit never
//! swallows the `claim won` / `run finished` lines of other runs. The last
//! [`TAIL_CAP`] bytes of what the run printed, whatever the budget, are
//! kept for the history entry (`output_tail`).
//!
//! What the run printed is masked before it goes anywhere (log, echo,
//! tail, and so a notifier's `SOLOCRON_OUTPUT_TAIL`): every value of
//! [`OutputMask`] (the `[daemon] env_file` values and what `${VAR}`s were
//! filled with) becomes `***`. A value split across two reads is masked
//! whole: each stream holds back the end of a read that could be the
//! start of a value ([`Masking`]), so memory stays at the longest value.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use std::io::Write as _;

use aho_corasick::{AhoCorasick, MatchKind};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest line logged, in bytes; the rest of a longer line is dropped.
pub(super) const LINE_CAP: usize = 4096;

/// Bytes read from the pipe at a time.
const READ_CHUNK: usize = 8192;

/// Bytes of a run's last output kept for its history entry.
pub(super) const TAIL_CAP: usize = 4096;

/// Shortest value [`OutputMask`] masks: a shorter one is no secret (a
/// `PORT=80`, a `DEBUG=1`), and masking every `80` or `1` would garble
/// the output.
pub const MASK_MIN: usize = 4;

/// What stands for a masked value.
const MASKED: &[u8] = b"***";

/// The values a run's output must not show: each value (and each line of
/// a value of several lines) of at least [`MASK_MIN`] bytes. No `Debug`
/// of the values: they are secrets.
#[derive(Default)]
pub struct OutputMask {
    /// Finds the values, the longest at a place first; `None` when there
    /// is nothing to mask.
    finder: Option<AhoCorasick>,
    /// Longest first, none empty.
    values: Vec<Vec<u8>>,
}

impl fmt::Debug for OutputMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutputMask({} values)", self.values.len())
    }
}

impl OutputMask {
    /// The mask of the runs of `config`'s jobs (and notifiers): every
    /// value of its `[daemon] env_file` (each job has them in its
    /// environment) and every value a `${VAR}` of the file was filled
    /// with.
    pub fn of(config: &crate::config::Config) -> OutputMask {
        let env_file = config.env.values().map(String::as_str);
        OutputMask::new(env_file.chain(config.filled.iter().map(String::as_str)))
    }

    /// A mask of `values`.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> OutputMask {
        let mut kept: Vec<Vec<u8>> = Vec::new();
        for value in values {
            let lines = value.lines().filter(|line| *line != value);
            for part in std::iter::once(value).chain(lines) {
                if part.len() >= MASK_MIN {
                    kept.push(part.as_bytes().to_vec());
                }
            }
        }
        kept.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        kept.dedup();
        // Built from at most a few thousand short values: cannot fail
        // (the automaton's limits are far above); without it nothing
        // could be masked, so the values are dropped rather than shown.
        let finder = match AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&kept)
        {
            Ok(finder) if !kept.is_empty() => Some(finder),
            _ => None,
        };
        OutputMask {
            finder,
            values: kept,
        }
    }

    /// Appends `bytes` to `out` with every value replaced by `***`.
    fn replace(&self, bytes: &[u8], out: &mut Vec<u8>) {
        let Some(finder) = &self.finder else {
            out.extend_from_slice(bytes);
            return;
        };
        let mut at = 0;
        for found in finder.find_iter(bytes) {
            out.extend_from_slice(&bytes[at..found.start()]);
            out.extend_from_slice(MASKED);
            at = found.end();
        }
        out.extend_from_slice(&bytes[at..]);
    }

    /// Where the longest end of `bytes` that could be the start of a value
    /// begins (`bytes.len()` when none could).
    fn held_back(&self, bytes: &[u8]) -> usize {
        let mut cut = bytes.len();
        for value in &self.values {
            // Each value looks at its own length of the end only: the cost
            // is the sum of the values' lengths, whatever was read.
            let from = bytes.len() - value.len().saturating_sub(1).min(bytes.len());
            if let Some(start) = (from..cut)
                .find(|&start| bytes[start] == value[0] && value.starts_with(&bytes[start..]))
            {
                cut = start;
            }
        }
        cut
    }
}

/// One stream's bytes on their way through an [`OutputMask`]: what may
/// be the start of a value waits for the next read.
#[derive(Debug, Default)]
struct Masking {
    pending: Vec<u8>,
}

impl Masking {
    /// `chunk` after what was held back, masked, except an end that may
    /// be the start of a value (held back for the next call).
    fn feed(&mut self, mask: &OutputMask, chunk: &[u8]) -> Vec<u8> {
        let Some(finder) = &mask.finder else {
            return chunk.to_vec();
        };
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(chunk);
        let mut cut = mask.held_back(&bytes);
        // A whole value running past the cut waits too, whole: a longer
        // value may start the same way.
        if let Some(found) = finder
            .find_iter(&bytes)
            .find(|found| found.start() < cut && found.end() > cut)
        {
            cut = found.start();
        }
        let mut out = Vec::with_capacity(cut);
        mask.replace(&bytes[..cut], &mut out);
        self.pending = bytes.split_off(cut);
        out
    }

    /// What was held back, masked: the stream ended.
    fn finish(&mut self, mask: &OutputMask) -> Vec<u8> {
        let mut out = Vec::new();
        mask.replace(&std::mem::take(&mut self.pending), &mut out);
        out
    }
}

/// What one run printed: the log budget left and the tail; shared by the
/// stdout and stderr readers.
#[derive(Debug)]
pub(super) struct RunOutput {
    state: Mutex<OutputState>,
}

#[derive(Debug)]
struct OutputState {
    /// Bytes of lines the log may still take.
    budget: u64,
    /// Lines (and their bytes) not logged once the budget was spent.
    unlogged_lines: u64,
    unlogged_bytes: u64,
    tail: VecDeque<u8>,
}

/// What was not logged, and the tail; see [`RunOutput::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OutputSummary {
    pub(super) unlogged_lines: u64,
    pub(super) unlogged_bytes: u64,
    /// The last bytes printed, as text; `None` if the run printed nothing.
    pub(super) tail: Option<String>,
}

impl RunOutput {
    /// A run whose lines may take `log_max` bytes of the log.
    pub(super) fn new(log_max: u64) -> Arc<RunOutput> {
        Arc::new(RunOutput {
            state: Mutex::new(OutputState {
                budget: log_max,
                unlogged_lines: 0,
                unlogged_bytes: 0,
                tail: VecDeque::with_capacity(TAIL_CAP),
            }),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut OutputState) -> T) -> T {
        // A poisoned lock only means a reader panicked mid-update; the
        // counts are still good enough for a summary line.
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut state)
    }

    /// Keeps the last [`TAIL_CAP`] bytes of everything read.
    fn keep_tail(&self, bytes: &[u8]) {
        self.with(|state| {
            let bytes = &bytes[bytes.len().saturating_sub(TAIL_CAP)..];
            let over = (state.tail.len() + bytes.len()).saturating_sub(TAIL_CAP);
            state.tail.drain(..over);
            state.tail.extend(bytes);
        });
    }

    /// Whether a line of `len` bytes may still be logged; counts it if not.
    fn admit(&self, len: usize) -> bool {
        let cost = len as u64 + 1;
        self.with(|state| {
            if state.unlogged_lines == 0 && cost <= state.budget {
                state.budget -= cost;
                true
            } else {
                state.budget = 0;
                state.unlogged_lines += 1;
                state.unlogged_bytes += cost;
                false
            }
        })
    }

    /// What was not logged and the tail, once the readers are done.
    pub(super) fn finish(&self) -> OutputSummary {
        self.with(|state| {
            let bytes: Vec<u8> = state.tail.iter().copied().collect();
            OutputSummary {
                unlogged_lines: state.unlogged_lines,
                unlogged_bytes: state.unlogged_bytes,
                tail: (!bytes.is_empty()).then(|| tail_text(&bytes)),
            }
        })
    }
}

/// The tail as text: a character cut at the front is dropped, other
/// invalid bytes are replaced.
fn tail_text(bytes: &[u8]) -> String {
    let start = bytes
        .iter()
        .take(4)
        .position(|byte| (byte & 0xC0) != 0x80)
        .unwrap_or(0);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The fields every output line of one run is logged with.
#[derive(Debug, Clone)]
pub(super) struct LineFields {
    pub(super) job: String,
    pub(super) occurrence: String,
    pub(super) node: String,
    pub(super) fence: u64,
    /// The run is a notifier (`on_failure` / `on_success`) of the job.
    pub(super) notifier: bool,
    /// Also write each line to this process's stdout / stderr.
    pub(super) echo: bool,
    /// The run's log budget and tail.
    pub(super) output: Arc<RunOutput>,
    /// What the run's output must not show.
    pub(super) mask: Arc<OutputMask>,
}

/// Reads `pipe` to EOF (or until a read fails), logging each line.
pub(super) async fn log_lines(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    fields: LineFields,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut line = LineBuffer::default();
    let mut masking = Masking::default();
    let mut emit = |text: String| emit_line(&fields, stream, &text);
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let masked = masking.feed(&fields.mask, &buf[..n]);
                fields.output.keep_tail(&masked);
                line.push(&masked, &mut emit);
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(job = %fields.job, stream = %stream.as_str(), error = %err,
                    "cannot read job output");
                break;
            }
        }
    }
    let rest = masking.finish(&fields.mask);
    fields.output.keep_tail(&rest);
    line.push(&rest, &mut emit);
    line.finish(&mut emit);
}

fn emit_line(fields: &LineFields, stream: Stream, line: &str) {
    let LineFields {
        job,
        occurrence,
        node,
        fence,
        notifier,
        echo,
        output,
        mask: _,
    } = fields;
    if *echo {
        // Best effort: a closed terminal must not stop the job.
        let _ = match stream {
            Stream::Stdout => writeln!(std::io::stdout().lock(), "{line}"),
            // With `--log-format json` stderr carries only JSON: the line
            // is echoed as the `job output` event itself, which is then not
            // logged a second time.
            Stream::Stderr if crate::logging::stderr_is_json() => {
                crate::logging::tell(
                    tracing::Level::WARN,
                    "job output",
                    &[
                        ("job", job.as_str().into()),
                        ("occurrence", occurrence.as_str().into()),
                        ("node", node.as_str().into()),
                        ("fence", (*fence).into()),
                        ("stream", stream.as_str().into()),
                        ("line", line.into()),
                    ],
                );
                return;
            }
            Stream::Stderr => writeln!(std::io::stderr().lock(), "{line}"),
        };
        // A text log on the same terminal would show the line a second
        // time as its `job output` event; the journal keeps its event.
        if crate::logging::log_is_stderr_text() {
            return;
        }
    }
    if !output.admit(line.len()) {
        return;
    }
    match (stream, *notifier) {
        (Stream::Stdout, false) => {
            tracing::info!(%job, %occurrence, %node, fence, stream = %"stdout",
            line = %line, "job output")
        }
        (Stream::Stderr, false) => {
            tracing::warn!(%job, %occurrence, %node, fence, stream = %"stderr",
            line = %line, "job output")
        }
        (Stream::Stdout, true) => {
            tracing::info!(%job, %occurrence, %node, fence, stream = %"stdout",
            line = %line, "notifier output")
        }
        (Stream::Stderr, true) => {
            tracing::warn!(%job, %occurrence, %node, fence, stream = %"stderr",
            line = %line, "notifier output")
        }
    }
}

/// The line being assembled: at most [`LINE_CAP`] bytes kept, the rest counted.
#[derive(Debug, Default)]
struct LineBuffer {
    kept: Vec<u8>,
    cut: u64,
}

impl LineBuffer {
    /// Adds `chunk`, calling `emit` for every line it completes.
    fn push(&mut self, mut chunk: &[u8], emit: &mut impl FnMut(String)) {
        while !chunk.is_empty() {
            let (segment, complete) = match chunk.iter().position(|&b| b == b'\n') {
                Some(newline) => (&chunk[..newline], Some(newline + 1)),
                None => (chunk, None),
            };
            let room = LINE_CAP.saturating_sub(self.kept.len());
            let keep = room.min(segment.len());
            self.kept.extend_from_slice(&segment[..keep]);
            self.cut += (segment.len() - keep) as u64;
            match complete {
                Some(next) => {
                    emit(self.take());
                    chunk = &chunk[next..];
                }
                None => break,
            }
        }
    }

    /// Emits the last line if the output did not end with a newline.
    fn finish(&mut self, emit: &mut impl FnMut(String)) {
        if !self.kept.is_empty() || self.cut > 0 {
            emit(self.take());
        }
    }

    fn take(&mut self) -> String {
        if self.cut == 0 && self.kept.last() == Some(&b'\r') {
            self.kept.pop();
        }
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        if self.cut > 0 {
            text.push_str(&format!(" …[cut {} bytes]", self.cut));
        }
        self.kept.clear();
        self.cut = 0;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut line = LineBuffer::default();
        for chunk in chunks {
            line.push(chunk, &mut |text| out.push(text));
        }
        line.finish(&mut |text| out.push(text));
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        assert_eq!(lines_of(&[b"a\nb", b"c\r\n", b"\nd"]), ["a", "bc", "", "d"]);
    }

    #[test]
    fn cuts_long_lines_and_counts_the_rest() {
        let long = vec![b'x'; LINE_CAP + 10];
        let out = lines_of(&[&long[..100], &long[100..], b"\nnext\n"]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], format!("{} …[cut 10 bytes]", "x".repeat(LINE_CAP)));
        assert_eq!(out[1], "next");
    }

    #[test]
    fn memory_stays_at_the_cap() {
        let mut line = LineBuffer::default();
        let chunk = vec![b'y'; READ_CHUNK];
        for _ in 0..1000 {
            line.push(&chunk, &mut |_| panic!("no newline yet"));
        }
        assert_eq!(line.kept.len(), LINE_CAP);
        assert!(line.kept.capacity() < 2 * LINE_CAP);
        assert_eq!(line.cut, (1000 * READ_CHUNK - LINE_CAP) as u64);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(
            lines_of(&[b"ok \xff\xfe end\n"]),
            ["ok \u{fffd}\u{fffd} end"]
        );
    }

    #[test]
    fn empty_output_logs_nothing() {
        assert!(lines_of(&[]).is_empty());
        assert_eq!(RunOutput::new(10).finish().tail, None);
    }

    #[test]
    fn the_budget_logs_whole_lines_then_counts_the_rest() {
        let output = RunOutput::new(10);
        assert!(output.admit(4)); // 5 with its newline
        assert!(output.admit(4)); // 10: the budget is spent exactly
        assert!(!output.admit(0));
        assert!(!output.admit(99));
        let summary = output.finish();
        assert_eq!((summary.unlogged_lines, summary.unlogged_bytes), (2, 101));
        // Once over, nothing more is logged, however short.
        let output = RunOutput::new(3);
        assert!(!output.admit(7));
        assert!(!output.admit(0));
    }

    /// `chunks` through a [`Masking`] of `values`, joined.
    fn masked(values: &[&str], chunks: &[&[u8]]) -> String {
        let mask = OutputMask::new(values.iter().copied());
        let mut masking = Masking::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(masking.feed(&mask, chunk));
            let longest = mask.values.first().map_or(0, Vec::len);
            assert!(
                masking.pending.len() <= longest,
                "held back at most a value"
            );
        }
        out.extend(masking.finish(&mask));
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn values_are_masked_whole_also_across_reads() {
        let secret = "s3cr3t-T0KEN";
        assert_eq!(
            masked(&[secret], &[b"token=s3cr3t-T0KEN ok\n"]),
            "token=*** ok\n"
        );
        // Split at every byte, and byte by byte.
        let text = format!("a {secret} b {secret}\n");
        for at in 0..text.len() {
            let (one, two) = text.as_bytes().split_at(at);
            assert_eq!(masked(&[secret], &[one, two]), "a *** b ***\n", "{at}");
        }
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(masked(&[secret], &bytes), "a *** b ***\n");
        // The start of a value that never comes is shown at the end.
        assert_eq!(masked(&[secret], &[b"s3cr3t", b"-T0"]), "s3cr3t-T0");
        // A value holding another is masked whole; short values are not.
        assert_eq!(
            masked(&["abcd", "abcdef", "80"], &[b"abc", b"def 80 abcd."]),
            "*** 80 ***."
        );
        // Each line of a value of several lines, too.
        assert_eq!(
            masked(
                &["line-one\nline-two"],
                &[b"x line-two y\nline-one\nline-two\n"]
            ),
            "x *** y\n***\n"
        );
        // Nothing to mask: passed as read.
        assert_eq!(masked(&[], &[b"s3cr3t", b"\n"]), "s3cr3t\n");
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_of_both_streams() {
        let output = RunOutput::new(0);
        output.keep_tail(b"first\n");
        output.keep_tail(&vec![b'x'; TAIL_CAP]);
        output.keep_tail(b"last\n");
        let tail = output.finish().tail.expect("a tail");
        assert_eq!(tail.len(), TAIL_CAP);
        assert!(tail.ends_with("xlast\n"));
        // A multi-byte character cut at the front is dropped, not mangled.
        assert_eq!(tail_text("é!".as_bytes()[1..].as_ref()), "!");
        assert_eq!(tail_text("é!".as_bytes()), "é!");
    }
}
