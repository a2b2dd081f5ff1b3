//! A TCP proxy on a free loopback port in front of Redis, to cut one node's
//! network: [`Mode::Pass`] forwards, [`Mode::Stall`] stops forwarding in
//! both directions but keeps every socket open (a black-holed link),
//! [`Mode::Drop`] closes all connections and refuses new ones (closed at
//! once after accept), [`Mode::Slow`] forwards Redis's answers [`SLOW`]
//! after they came (requests at once: Redis reads its clock for `TIME` as
//! soon as asked, and the answer reaches the node [`SLOW`] later). Plain
//! threads, 50 ms read timeouts so a mode change takes effect promptly;
//! everything stops when the proxy is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Pass = 0,
    Stall = 1,
    Drop = 2,
    Slow = 3,
}

/// How long [`Mode::Slow`] holds each answer (a delay line: answers read
/// one after another are not held one after another).
pub const SLOW: Duration = Duration::from_millis(150);

/// How often an idle acceptor, or a pump held by [`Mode::Stall`], looks
/// again at the proxy's mode.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

struct State {
    mode: AtomicU8,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

impl State {
    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            0 => Mode::Pass,
            1 => Mode::Stall,
            2 => Mode::Drop,
            _ => Mode::Slow,
        }
    }

    fn closing(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.mode() == Mode::Drop
    }

    fn close_all(&self) {
        for conn in self.conns.lock().expect("proxy lock").drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

/// A running proxy; see the module doc.
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            mode: AtomicU8::new(Mode::Pass as u8),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let state = Arc::clone(&state);
            thread::spawn(move || accept_loop(listener, upstream, &state))
        };
        Proxy {
            port,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Switches the mode; `Drop` closes every open connection at once.
    pub fn set(&self, mode: Mode) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
        if mode == Mode::Drop {
            self.state.close_all();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.close_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, upstream: u16, state: &Arc<State>) {
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) if state.mode() == Mode::Drop => drop(client),
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) {
                    connect_pair(client, server, state);
                }
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => {
                thread::sleep(LOOK_AGAIN);
            }
            Err(_) => thread::sleep(LOOK_AGAIN),
        }
    }
}

fn connect_pair(client: TcpStream, server: TcpStream, state: &Arc<State>) {
    let clones = (client.try_clone(), server.try_clone());
    let (Ok(client2), Ok(server2)) = clones else {
        return;
    };
    {
        let mut conns = state.conns.lock().expect("proxy lock");
        for conn in [&client, &server] {
            if let Ok(conn) = conn.try_clone() {
                conns.push(conn);
            }
        }
    }
    {
        let state = Arc::clone(state);
        thread::spawn(move || pump(client, server2, &state));
    }
    let (chunks, delayed) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    let mut client2 = client2;
    let writer_state = Arc::clone(state);
    thread::spawn(move || {
        for (due, chunk) in delayed {
            // The fault itself: hold the answer until its due time (SLOW later).
            thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            if writer_state.closing() || client2.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = client2.shutdown(Shutdown::Both);
    });
    let state = Arc::clone(state);
    thread::spawn(move || pump(server, DelayLine(chunks, state.clone()), &state));
}

/// The answer side of a connection: chunks go to a writer thread that
/// forwards each at its due time ([`SLOW`] after it came in
/// [`Mode::Slow`], at once otherwise).
struct DelayLine(
    std::sync::mpsc::Sender<(std::time::Instant, Vec<u8>)>,
    Arc<State>,
);

impl Write for DelayLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let delay = if self.1.mode() == Mode::Slow {
            SLOW
        } else {
            Duration::ZERO
        };
        self.0
            .send((std::time::Instant::now() + delay, buf.to_vec()))
            .map_err(|_| std::io::Error::from(ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

trait Closable: Write {
    fn close(&mut self);
}

impl Closable for TcpStream {
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

impl Closable for DelayLine {
    /// Dropping the sender ends the writer thread, which closes the socket.
    fn close(&mut self) {}
}

/// Copies `from` to `to` until either closes or the proxy drops connections;
/// holds everything (reads nothing) while stalled.
fn pump(mut from: TcpStream, mut to: impl Closable, state: &State) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 16 * 1024];
    loop {
        while state.mode() == Mode::Stall && !state.stop.load(Ordering::SeqCst) {
            thread::sleep(LOOK_AGAIN);
        }
        if state.closing() {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Data read just as a stall began is held until it ends.
                while state.mode() == Mode::Stall && !state.stop.load(Ordering::SeqCst) {
                    thread::sleep(LOOK_AGAIN);
                }
                if state.closing() || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    to.close();
}
