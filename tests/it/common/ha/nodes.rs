//! What a Redis Cluster node reports about the cluster, parsed: `CLUSTER
//! NODES` lines as [`ClusterNode`]s and the questions asked of them (who
//! serves a slot, who replicates whom), plus the key-slot function
//! (CRC16/XMODEM of the hash tag, modulo 16384), which the self-test checks
//! against `CLUSTER KEYSLOT`.

use std::collections::BTreeMap;

/// One line of `CLUSTER NODES`, as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, …
    pub flags: Vec<String>,
    /// The master's node id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges it serves (inclusive), migrating ones left out.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    pub fn is_master(&self) -> bool {
        self.flags.iter().any(|flag| flag == "master")
    }

    /// `fail` or `fail?` in its flags.
    pub fn is_failing(&self) -> bool {
        self.flags.iter().any(|flag| flag.starts_with("fail"))
    }
}

/// `id ip:port@bus[,host] flags master ping pong epoch link slot…`.
pub fn parse_node_line(line: &str) -> Option<ClusterNode> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return None;
    }
    let port = fields[1]
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    let slots = fields[8..]
        .iter()
        .filter(|slot| !slot.starts_with('['))
        .filter_map(|slot| match slot.split_once('-') {
            Some((from, to)) => Some((from.parse().ok()?, to.parse().ok()?)),
            None => slot.parse().ok().map(|s| (s, s)),
        })
        .collect();
    Some(ClusterNode {
        id: fields[0].to_string(),
        port,
        flags: fields[2].split(',').map(str::to_string).collect(),
        master_id: (fields[3] != "-").then(|| fields[3].to_string()),
        slots,
    })
}

/// Whether `view` shows at least `want` healthy replicas of each of `masters`.
pub fn shows_replicas(view: &[ClusterNode], masters: &[u16], want: usize) -> bool {
    masters.iter().all(|&port| {
        let Some(master) = view.iter().find(|node| node.port == port) else {
            return false;
        };
        let replicas = view.iter().filter(|node| {
            node.master_id.as_deref() == Some(master.id.as_str()) && !node.is_failing()
        });
        replicas.count() >= want
    })
}

/// Slot range start → (range end, serving master's port), for healthy masters.
pub fn slot_map(view: &[ClusterNode]) -> BTreeMap<u16, (u16, u16)> {
    view.iter()
        .filter(|node| node.is_master() && !node.is_failing())
        .flat_map(|node| node.slots.iter().map(|&(from, to)| (from, (to, node.port))))
        .collect()
}

pub fn slot_owner(view: &[ClusterNode], slot: u16) -> Option<u16> {
    view.iter()
        .filter(|node| node.is_master() && !node.is_failing())
        .find(|node| {
            node.slots
                .iter()
                .any(|&(from, to)| from <= slot && slot <= to)
        })
        .map(|node| node.port)
}

/// Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag (the text
/// between the first `{` and the next `}`, if not empty) or of the key,
/// modulo 16384.
pub fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16(hashed) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}
