//! The local HTTP sink for hook jobs: a separate process (the bench binary
//! re-run as `bench __sink`, so its CPU can be sampled on its own) serving
//! keep-alive HTTP/1.1 on a loopback port with a small tokio responder. For
//! every request it records the arrival time (CLOCK_REALTIME, read once the
//! head is parsed) with the `Solocron-Job` and `Solocron-Occurrence`
//! headers, answers `200` with an empty body, and hands the records over on
//! `GET /dump` (which also clears them).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{
    AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader as TokioBufReader,
};

/// One request that reached the sink.
#[derive(Debug, Clone)]
pub struct Hit {
    pub job: String,
    pub occurrence: String,
    pub arrival_ns: i128,
}

/// The sink process, killed on drop.
pub struct Sink {
    child: Child,
    pub port: u16,
}

impl Sink {
    /// Starts `bench __sink` and waits for the port it prints.
    pub fn start() -> Sink {
        let exe = std::env::current_exe().expect("bench executable");
        let mut child = Command::new(exe)
            .arg("__sink")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the HTTP sink");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("sink stdout"))
            .read_line(&mut line)
            .expect("read the sink's port");
        let port = line.trim().parse().expect("the sink prints its port");
        Sink { child, port }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// Takes every hit recorded so far.
    pub fn dump(&self) -> Vec<Hit> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the sink");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream
            .write_all(b"GET /dump HTTP/1.1\r\nHost: sink\r\nConnection: close\r\n\r\n")
            .expect("ask the sink");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read the dump");
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        body.lines()
            .filter_map(|line| {
                let mut parts = line.split(' ');
                Some(Hit {
                    job: parts.next()?.to_string(),
                    occurrence: parts.next()?.to_string(),
                    arrival_ns: parts.next()?.parse().ok()?,
                })
            })
            .collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Records = Arc<Mutex<Vec<(String, String, i128)>>>;

/// The sink process's main: prints its port, serves until killed.
pub fn serve() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the sink");
        println!("{}", listener.local_addr().expect("addr").port());
        let _ = std::io::stdout().flush();
        let records: Records = Arc::new(Mutex::new(Vec::new()));
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let records = Arc::clone(&records);
            tokio::spawn(async move {
                let _ = connection(socket, records).await;
            });
        }
    });
}

async fn connection(socket: tokio::net::TcpStream, records: Records) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut reader = TokioBufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let (mut job, mut occurrence) = (String::from("-"), String::from("-"));
        let (mut length, mut chunked, mut close) = (0usize, false, false);
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "solocron-job" => job = value.to_string(),
                "solocron-occurrence" => occurrence = value.to_string(),
                "content-length" => length = value.parse().unwrap_or(0),
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let arrival_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        if chunked {
            skip_chunked(&mut reader).await?;
        } else if length > 0 {
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).await?;
        }
        if path == "/dump" {
            let taken = std::mem::take(&mut *records.lock().expect("records"));
            let mut body = String::with_capacity(taken.len() * 64);
            for (job, occurrence, ns) in taken {
                body.push_str(&format!("{job} {occurrence} {ns}\n"));
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(body.as_bytes()).await?;
            return Ok(());
        }
        records
            .lock()
            .expect("records")
            .push((job, occurrence, arrival_ns));
        write
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await?;
        if close {
            return Ok(());
        }
    }
}

async fn skip_chunked<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await?;
        let size =
            usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line).await? == 0 || line.trim().is_empty() {
                    return Ok(());
                }
            }
        }
        let mut chunk = vec![0u8; size + 2];
        reader.read_exact(&mut chunk).await?;
    }
}
