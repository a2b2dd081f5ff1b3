//! A real HTTP/1.1 server on 127.0.0.1 for hook tests: it answers every
//! request with one fixed status and headers (or never answers), and hands
//! each request it read, head and body, to the test.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug)]
pub struct Request {
    /// The request line and the headers, `\r\n`-separated.
    pub head: String,
    pub body: String,
}

impl Request {
    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    /// The request line, e.g. `POST /hooks/warm HTTP/1.1`.
    pub fn line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }
}

/// A server on a loopback port; its thread ends with the test process.
pub struct HttpServer {
    pub port: u16,
    requests: mpsc::Receiver<Request>,
}

impl HttpServer {
    /// Answers every request with `status` (no body), or never answers
    /// (keeping the connection open) when `status` is `None`; either way
    /// [`HttpServer::received`] has each request once it came in.
    pub fn start(status: Option<u16>) -> HttpServer {
        match status {
            Some(status) => HttpServer::answering(status, &[]),
            None => HttpServer::spawn(None),
        }
    }

    /// Answers every request with `status` and `headers` (no body), e.g.
    /// `302` with `("Location", "/status/200")`.
    pub fn answering(status: u16, headers: &[(&str, &str)]) -> HttpServer {
        let mut reply = format!("HTTP/1.1 {status} X\r\n");
        for (name, value) in headers {
            reply.push_str(&format!("{name}: {value}\r\n"));
        }
        reply.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
        HttpServer::spawn(Some(reply))
    }

    fn spawn(reply: Option<String>) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the HTTP test server");
        let port = listener.local_addr().expect("addr").port();
        let (tx, requests) = mpsc::channel();
        std::thread::spawn(move || {
            let mut silent = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                match &reply {
                    Some(reply) => {
                        if let Some(request) = read_request(&mut stream) {
                            let _ = stream.write_all(reply.as_bytes());
                            let _ = tx.send(request);
                        }
                    }
                    None => {
                        if let Some(request) = read_request(&mut stream) {
                            let _ = tx.send(request);
                        }
                        silent.push(stream);
                    }
                }
            }
        });
        HttpServer { port, requests }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The next request; panics if none comes within 5 s.
    pub fn received(&self) -> Request {
        self.requests
            .recv_timeout(Duration::from_secs(5))
            .expect("a request")
    }

    /// The next request within `limit`, if one comes.
    pub fn received_within(&self, limit: Duration) -> Option<Request> {
        self.requests.recv_timeout(limit).ok()
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        data.push(byte[0]);
    }
    let head = String::from_utf8(data).ok()?;
    let mut request = Request {
        head,
        body: String::new(),
    };
    let length: usize = request
        .header("content-length")
        .map_or(Some(0), |v| v.parse().ok())?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    request.body = String::from_utf8(body).ok()?;
    Some(request)
}
