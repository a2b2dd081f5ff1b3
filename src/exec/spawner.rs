//! Starts job processes on dedicated threads, never on the runtime's
//! workers.
//!
//! Starting a process blocks the calling thread until the child has called
//! `execve` (`launch.rs`), a fraction of a millisecond, more while many jobs
//! start at once. On a runtime worker a burst of starts would leave the
//! Redis replies other jobs' claims wait for unread. Here a few threads
//! take the spawns, so the runtime goes on claiming, releasing and reading
//! output.
//!
//! The parent-death signal is tied to the thread that started the child:
//! these threads never exit while a [`Spawner`] (and so a job it started)
//! is alive.

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::launch::{self, Launch, Launched};

type Request = (Launch, oneshot::Sender<io::Result<Launched>>);

/// Hands commands to the spawning threads; cheap to clone.
#[derive(Clone)]
pub struct Spawner {
    requests: mpsc::Sender<Request>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spawner")
    }
}

impl Spawner {
    /// Starts `threads` spawning threads. They stop once every clone of the
    /// spawner is dropped.
    pub fn start(threads: usize) -> io::Result<Spawner> {
        let (requests, queue) = mpsc::channel::<Request>();
        let queue = Arc::new(Mutex::new(queue));
        for index in 0..threads.max(1) {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name(format!("solocron-spawn-{index}"))
                .spawn(move || {
                    loop {
                        let next = match queue.lock() {
                            Ok(queue) => queue.recv(),
                            Err(poisoned) => poisoned.into_inner().recv(),
                        };
                        let Ok((launch, reply)) = next else {
                            return;
                        };
                        // A run abandoned meanwhile must not leave its job
                        // running unsupervised: kill the new group, reap it.
                        if let Err(Ok(launched)) = reply.send(launch.start()) {
                            let _ = killpg(Pid::from_raw(launched.pid), Signal::SIGKILL);
                            launch::reap(launched.pid);
                        }
                    }
                })?;
        }
        Ok(Spawner { requests })
    }

    /// Starts `launch` on a spawning thread.
    pub async fn spawn(&self, launch: Launch) -> io::Result<Launched> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send((launch, reply))
            .map_err(|_| io::Error::other("the job spawning threads have stopped"))?;
        answer
            .await
            .map_err(|_| io::Error::other("a job spawning thread stopped"))?
    }
}
