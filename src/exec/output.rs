//! A job's stdout and stderr, line by line, into the log.
//!
//! Each line becomes one `job output` event with the job's fields and
//! `stream`; stdout at INFO, stderr at WARN. Memory per stream is bounded:
//! a line is kept up to [`LINE_CAP`] bytes and the rest of it is counted and
//! thrown away as it arrives, so a job printing a gigabyte without a newline
//! costs 4 KiB plus one read buffer. (`LinesCodec` with a max length would
//! also discard, but it hides how; this is short enough to own.) Bytes that
//! are not UTF-8 are replaced, a trailing `\r` is dropped.

use std::io::Write;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest line logged, in bytes; the rest of a longer line is dropped.
pub(super) const LINE_CAP: usize = 4096;

/// Bytes read from the pipe at a time.
const READ_CHUNK: usize = 8192;

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
    /// Also write each line to this process's stdout / stderr.
    pub(super) echo: bool,
}

/// Reads `pipe` to EOF (or until a read fails), logging each line.
pub(super) async fn log_lines(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    fields: LineFields,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut line = LineBuffer::default();
    let mut emit = |text: String| emit_line(&fields, stream, &text);
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => line.push(&buf[..n], &mut emit),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(job = %fields.job, stream = %stream.as_str(), error = %err,
                    "cannot read job output");
                break;
            }
        }
    }
    line.finish(&mut emit);
}

fn emit_line(fields: &LineFields, stream: Stream, line: &str) {
    let LineFields {
        job,
        occurrence,
        node,
        fence,
        echo,
    } = fields;
    match stream {
        Stream::Stdout => tracing::info!(%job, %occurrence, %node, fence, stream = %"stdout",
            line = %line, "job output"),
        Stream::Stderr => tracing::warn!(%job, %occurrence, %node, fence, stream = %"stderr",
            line = %line, "job output"),
    }
    if *echo {
        // Best effort: a closed terminal must not stop the job.
        let _ = match stream {
            Stream::Stdout => writeln!(std::io::stdout().lock(), "{line}"),
            Stream::Stderr => writeln!(std::io::stderr().lock(), "{line}"),
        };
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
    }
}
