//! Which Redis server each Redlock master (or the `url`) really is.
//!
//! The config check refuses a master listed twice by the same host and
//! port, but it cannot know that `127.0.0.1` and `localhost`, or a host
//! name and its address, reach one server. Such a server would count twice
//! towards the majority: with `redlock = [A, A', B]` a claim "wins" 2 of 3
//! on A alone, A down stops every job although the operator believes one
//! master of three is down, and A restarted without its data forgets a
//! majority's grants. So the daemon asks each master for its `run_id`
//! (`INFO server`, unique per server process) and stops, naming both URLs,
//! when two masters answer the same one. The same answer's mode
//! (`redis_mode`, Valkey's `server_mode`) tells a node of a Redis Cluster written as `url` (or as a Redlock
//! master): it would answer `MOVED` for the jobs whose slots live on the
//! other nodes, which looked like an outage that never ends.
//!
//! Failure model: a master that does not answer, or whose user may not run
//! `INFO`, cannot be compared; it is asked again at the next check (the
//! caller keeps asking until every master answered once).
//!
//! A new `run_id` is a restart, not a loss of data: a server restarted
//! from its RDB or AOF keeps the fleet's keys. Whether the data is still
//! there is told by a marker ([`markers`]): a key holding a random token,
//! written by the first node that finds it missing and read by every node
//! at each check. A node that saw one token and then finds none, or
//! another, knows that the keys it saw (history, decisions, pauses,
//! drains) are gone. Each plain server (the `url`, every Redlock master,
//! the Sentinel master) has its own; with a Cluster the marker lives on the
//! shard of the fleet's keys (`{PREFIX}`: pauses, drains, the registry),
//! and the other shards are not watched.

use std::time::Duration;

use super::{Conn, Coordinator};

/// Longest wait for one master's `INFO server`.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the servers said of themselves.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Identities {
    /// The first two masters (redacted URLs, in config order) that are
    /// the same server, with its `run_id`.
    pub same: Option<(String, String, String)>,
    /// A server named as a plain server (`url`, a Redlock master) that is
    /// a node of a Redis Cluster or a Sentinel: its redacted URL and its
    /// `redis_mode`, or Valkey's `server_mode`.
    pub wrong_kind: Option<(String, String)>,
    /// Whether every server answered.
    pub complete: bool,
}

/// One server's `INFO server`: its `run_id` and mode.
#[derive(Debug, PartialEq, Eq)]
struct Info {
    run_id: String,
    mode: String,
}

/// Asks every plain server of `coordinator` (a `url` or the Redlock
/// masters; a Sentinel master or a Cluster is not asked) what it is, and
/// finds one that is not a plain server, or two that are one server.
pub async fn identities(coordinator: &Coordinator) -> Identities {
    let members = coordinator.members();
    let answers = futures_util::future::join_all(members.iter().map(|member| async move {
        let Conn::Single(conn) = &member.conn else {
            return Some(None);
        };
        let mut conn = conn.clone();
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        match tokio::time::timeout(ASK_TIMEOUT, cmd.query_async::<String>(&mut conn)).await {
            Ok(Ok(text)) => Some(info(&text)),
            _ => None,
        }
    }))
    .await;
    let mut found = Identities {
        complete: answers.iter().all(Option::is_some),
        ..Identities::default()
    };
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (index, answer) in answers.iter().enumerate() {
        let Some(Some(info)) = answer else {
            continue;
        };
        if info.mode != "standalone" && found.wrong_kind.is_none() {
            found.wrong_kind = Some((members[index].shown.clone(), info.mode.clone()));
        }
        if let Some((_, first)) = seen.iter().find(|(other, _)| *other == info.run_id) {
            found.same.get_or_insert_with(|| {
                (
                    members[*first].shown.clone(),
                    members[index].shown.clone(),
                    info.run_id.clone(),
                )
            });
        }
        seen.push((&info.run_id, index));
    }
    found
}

/// What one member holds of the fleet's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The token in the marker: the one this check wrote if there was none.
    pub token: String,
    /// The server's `run_id`, if it told (not asked of a Cluster, whose
    /// commands go to one of several servers).
    pub run_id: Option<String>,
}

/// Reads the marker `key` of every member, writing `token` where it is
/// missing (`SET key token NX GET`, one atomic command), and asks each
/// member that is one server (not a Cluster) its `run_id`. In member
/// order; `None` for a member that did not answer (or refused the write:
/// out of memory, a read-only replica).
pub async fn markers(coordinator: &Coordinator, key: &str, token: &str) -> Vec<Option<Marker>> {
    let asks = coordinator.members().iter().map(|member| async move {
        let mut conn = member.conn.clone();
        let mut set = redis::cmd("SET");
        set.arg(key).arg(token).arg("NX").arg("GET");
        let found = tokio::time::timeout(ASK_TIMEOUT, set.query_async::<Option<String>>(&mut conn))
            .await
            .ok()?
            .ok()?;
        let run_id = match member.conn {
            Conn::Cluster(_) => None,
            Conn::Single(_) | Conn::Sentinel(_) => {
                let mut cmd = redis::cmd("INFO");
                cmd.arg("server");
                match tokio::time::timeout(ASK_TIMEOUT, cmd.query_async::<String>(&mut conn)).await
                {
                    Ok(Ok(text)) => info(&text).map(|info| info.run_id),
                    _ => None,
                }
            }
        };
        Some(Marker {
            token: found.unwrap_or_else(|| token.to_string()),
            run_id,
        })
    });
    futures_util::future::join_all(asks).await
}

/// The `run_id` and mode of an `INFO server` text (a server too old to
/// say its mode is taken as standalone).
fn info(text: &str) -> Option<Info> {
    Some(Info {
        run_id: info_field(text, "run_id")?.to_string(),
        mode: server_mode(text).unwrap_or("standalone").to_string(),
    })
}

/// The server's mode (`standalone`, `cluster`, `sentinel`) in an `INFO
/// server` text: `redis_mode` on Redis, `server_mode` on Valkey 9.
pub(super) fn server_mode(text: &str) -> Option<&str> {
    info_field(text, "redis_mode").or_else(|| info_field(text, "server_mode"))
}

/// The value of `name` in an `INFO` text, if not empty.
fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{Info, info};

    #[test]
    fn run_id_and_mode_are_read_from_info_server() {
        let text = "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\nrun_id:0f3a9c\r\n";
        let expected = Info {
            run_id: "0f3a9c".to_string(),
            mode: "cluster".to_string(),
        };
        assert_eq!(info(text), Some(expected));
        assert_eq!(info("# Server\r\nredis_version:7.0.15\r\n"), None);
        assert_eq!(info("run_id:\r\n"), None);
        assert_eq!(
            info("run_id:ab\r\n").map(|i| i.mode).as_deref(),
            Some("standalone")
        );
        // Valkey 9 says `server_mode`.
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                      server_mode:cluster\r\nrun_id:77ab\r\n";
        assert_eq!(info(valkey).map(|i| i.mode).as_deref(), Some("cluster"));
    }
}
