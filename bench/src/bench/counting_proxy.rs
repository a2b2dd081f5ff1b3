//! A TCP proxy on a free loopback port that records every command its
//! clients send, for servers that have no `MONITOR`: a Redis Sentinel
//! refuses it (`ERR unknown command`) and has no `INFO commandstats`
//! either, so the bench puts one of these in front of each sentinel and
//! gives the daemons the proxies' URLs. The sentinels themselves talk to
//! each other and to the data nodes directly, so only the daemons' traffic
//! passes here; a sentinel's answer names the real master, which the
//! daemons then reach without a proxy.
//!
//! Each command becomes a [`MonLine`] stamped with the proxy's clock
//! (CLOCK_REALTIME, when its last byte arrived) and the client's
//! `IP:PORT`, so the same analysis reads these and `MONITOR` lines. The
//! client-to-server direction is parsed as RESP (arrays of bulk strings,
//! inline commands too); replies are copied through unread. Plain threads;
//! everything stops when the proxy is dropped.
//!
//! Failure model: only the set-up panics (no free port). A client whose
//! upstream cannot be reached is disconnected; an end or an I/O error on
//! one side shuts down writing to the other, as a dropped link would; a
//! command split over several reads is counted once it is complete, and
//! bytes that are not RESP stop the counting of that connection (they are
//! still forwarded).

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::monitor::MonLine;

/// A running proxy; see the module doc.
pub struct CountingProxy {
    pub port: u16,
    lines: Arc<Mutex<Vec<MonLine>>>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl CountingProxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the counting proxy");
        let port = listener.local_addr().expect("proxy address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking proxy listener");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (lines, stop, streams) =
                (Arc::clone(&lines), Arc::clone(&stop), Arc::clone(&streams));
            thread::spawn(move || accept_loop(listener, upstream, lines, stop, streams))
        };
        CountingProxy {
            port,
            lines,
            stop,
            streams,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Every command recorded so far.
    pub fn lines(&self) -> Vec<MonLine> {
        self.lines.lock().expect("proxy lines").clone()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().expect("proxy streams").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: u16,
    lines: Arc<Mutex<Vec<MonLine>>>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(_) => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let _ = client.set_nonblocking(false);
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        let peer = client
            .peer_addr()
            .map(|addr| addr.to_string())
            .unwrap_or_default();
        let (Ok(client_read), Ok(server_write), Ok(server_read), Ok(client_write)) = (
            client.try_clone(),
            server.try_clone(),
            server.try_clone(),
            client.try_clone(),
        ) else {
            continue;
        };
        {
            let mut list = streams.lock().expect("proxy streams");
            list.push(client);
            list.push(server);
        }
        let lines = Arc::clone(&lines);
        thread::spawn(move || requests(client_read, server_write, &peer, &lines));
        thread::spawn(move || replies(server_read, client_write));
    }
}

/// Client to server: forwards every byte and records each complete command.
fn requests(mut client: TcpStream, mut server: TcpStream, peer: &str, lines: &Mutex<Vec<MonLine>>) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        let ts = crate::common::audit::now_ns() as f64 / 1e9;
        let mut consumed = 0;
        while let Some((used, words)) = parse_command(&pending[consumed..]) {
            consumed += used;
            let mut words = words.into_iter();
            if let Some(cmd) = words.next() {
                lines.lock().expect("proxy lines").push(MonLine {
                    ts,
                    client: peer.to_string(),
                    cmd: cmd.to_ascii_uppercase(),
                    args: words.take(8).collect(),
                });
            }
        }
        pending.drain(..consumed);
    }
    let _ = server.shutdown(Shutdown::Write);
}

/// Server to client: copied through.
fn replies(mut server: TcpStream, mut client: TcpStream) {
    let _ = std::io::copy(&mut server, &mut client);
    let _ = client.shutdown(Shutdown::Write);
}

/// One complete command at the start of `bytes`: (bytes used, its words),
/// or `None` until the rest has arrived.
fn parse_command(bytes: &[u8]) -> Option<(usize, Vec<String>)> {
    let line_end = |from: usize| {
        bytes[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|at| from + at)
    };
    if bytes.first() != Some(&b'*') {
        // An inline command: one line of words.
        let end = line_end(0)?;
        let text = String::from_utf8_lossy(&bytes[..end]);
        return Some((
            end + 2,
            text.split_whitespace().map(str::to_string).collect(),
        ));
    }
    let end = line_end(0)?;
    let count: usize = std::str::from_utf8(&bytes[1..end]).ok()?.parse().ok()?;
    let mut at = end + 2;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        if bytes.get(at) != Some(&b'$') {
            return None;
        }
        let end = line_end(at)?;
        let len: usize = std::str::from_utf8(&bytes[at + 1..end])
            .ok()?
            .parse()
            .ok()?;
        let start = end + 2;
        if bytes.len() < start + len + 2 {
            return None;
        }
        words.push(String::from_utf8_lossy(&bytes[start..start + len]).into_owned());
        at = start + len + 2;
    }
    Some((at, words))
}
