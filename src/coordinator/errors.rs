//! What a Redis error means for us, whatever the mode: a refusal of this
//! node (credentials, ACL), a rejected write (out of memory, read-only,
//! failed save), a mistake of the config found at start, or else an outage
//! that time may cure. Callers decide what each kind does; nothing here
//! logs or retries.

/// Whether Redis refused us (wrong password, no such user, a command the
/// ACL user may not run) rather than being away.
///
/// A command refused inside a script comes without a code on Redis 7.0
/// (`ERR The user executing the script can't run this command or
/// subcommand`, `… can't access at least one of the keys …`): it is a
/// refusal too, not an outage.
pub fn is_refusal(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
    {
        return true;
    }
    is_refusal_text(&err.to_string())
}

/// The signs of a refusal in an error's text, for errors that reach us as
/// text only (a Redlock vote's first error, the fleet controls read of
/// several members): the codes (`WRONGPASS`, `NOAUTH`, `NOPERM`), redis-rs's
/// "authentication" failure, and Redis 7.0's code-less script refusals.
pub fn is_refusal_text(text: &str) -> bool {
    [
        "WRONGPASS",
        "NOAUTH",
        "NOPERM",
        "no permissions",
        "authentication",
        "can't run this command",
        "can't access at least one of the keys",
    ]
    .iter()
    .any(|sign| text.contains(sign))
}

/// Whether Redis answered but refused to write: out of memory, a
/// read-only replica, a failed save. Not an outage (it answers), not a
/// refusal of this node (time, or an operator, can cure it).
pub fn is_rejection(err: &redis::RedisError) -> bool {
    if matches!(err.code(), Some("OOM" | "READONLY" | "MISCONF")) {
        return true;
    }
    let text = err.to_string();
    ["OOM command not allowed", "READONLY", "MISCONF"]
        .iter()
        .any(|sign| text.contains(sign))
}

/// Whether `err` at start is a mistake of the config that no retry cures:
/// a database number the server does not have, a `cluster` seed that is
/// not a cluster node, sentinels that all answer but none of which
/// monitors the master's name (or none of which is a sentinel).
pub fn is_fatal_at_start(err: &redis::RedisError) -> bool {
    is_refusal(err)
        || is_untrusted_certificate(err)
        || err.to_string().contains("refused to switch database")
        || super::cluster::is_not_a_cluster(err)
        || super::sentinel::is_misconfigured(err)
}

/// Whether `err` is this node not trusting the server's TLS certificate
/// (rustls's "invalid peer certificate": an unknown CA, a name the
/// certificate is not valid for, an expired one). At start no retry cures
/// it ([`is_fatal_at_start`]); once running, a server that comes back with
/// such a certificate is an outage like any other (fail closed, retried).
pub fn is_untrusted_certificate(err: &redis::RedisError) -> bool {
    err.to_string().contains("invalid peer certificate")
}

/// The error of a command that got no answer within its bound.
pub fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no answer to {what} in time (redis does not answer, or a TLS handshake never completes: a `rediss://` url for a server without TLS?)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::is_refusal_text;

    /// The texts Redis 7.0 and redis-rs give for a refusal, as they reach
    /// the Redlock vote and the controls read; and outages that are not.
    #[test]
    fn refusals_are_told_from_outages_by_their_text() {
        for refusal in [
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOAUTH Authentication required.",
            "NOPERM this user has no permissions to run the 'hset' command",
            "NOPERM this user has no permissions to access one of the keys used as arguments",
            "ERR The user executing the script can't run this command or subcommand script: 1",
            "ERR The user executing the script can't access at least one of the keys mentioned",
            "AuthenticationFailed: authentication failed",
        ] {
            assert!(is_refusal_text(refusal), "{refusal}");
        }
        for outage in [
            "Connection refused (os error 111)",
            "timed out",
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
        ] {
            assert!(!is_refusal_text(outage), "{outage}");
        }
    }
}
