//! Whether the service user can read the files a `jobs.toml` names.
//!
//! The daemon runs as the service user (`solocron` in the shipped unit) and
//! reads `jobs.toml`, `password_file`, `sentinel.password_file`,
//! `env_file` and the `tls_*_file`s at start and at every reload; one it
//! cannot read stops it with exit 78. `check` run as root reads them all
//! whatever their modes, so it asks this module, for each of them, whether
//! the service user could: every directory on the way must let it in
//! (`x`) and the file must let it read (`r`), judged by the mode bits that
//! apply to it (owner, else one of its groups, else others), as the kernel
//! does. POSIX ACLs are not read: a file shared through an ACL alone gets a
//! warning it does not need.
//!
//! The one recipe for a secret file is owner root, group of the service
//! user, mode 0640: each warning ends with the command that gives the file
//! exactly that, or, when a directory on the way keeps the user out, the
//! command that puts a copy in /etc/solocron.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use super::Config;
use super::warnings::{Spot, Warning};

/// A file the config names, and where it names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    pub(super) spot: Spot,
    /// The path the daemon opens (relative ones resolved against the
    /// config's directory, as the loader does).
    pub path: PathBuf,
}

impl NamedFile {
    pub(super) fn new(spot: Spot, path: PathBuf) -> Self {
        NamedFile { spot, path }
    }
}

/// The user the daemon runs as, with every group it is in.
#[derive(Debug, Clone)]
pub struct ServiceUser {
    name: String,
    uid: Uid,
    /// Its primary group's name (for the `chown` of a fix).
    group: String,
    groups: Vec<Gid>,
}

impl ServiceUser {
    /// The user `name` from the system's user database; `None` when there
    /// is no such user (or the database cannot be read: there is nothing
    /// to warn about then).
    pub fn lookup(name: &str) -> Option<ServiceUser> {
        let user = User::from_name(name).ok().flatten()?;
        let group = Group::from_gid(user.gid)
            .ok()
            .flatten()
            .map_or_else(|| user.gid.to_string(), |group| group.name);
        let mut groups = std::ffi::CString::new(name)
            .ok()
            .and_then(|c_name| nix::unistd::getgrouplist(&c_name, user.gid).ok())
            .unwrap_or_default();
        groups.push(user.gid);
        Some(ServiceUser {
            name: user.name,
            uid: user.uid,
            group,
            groups,
        })
    }

    /// `None` when the user may read `path`, else why not: the path that
    /// keeps it out (the file, or a directory on the way) and its
    /// metadata. A path that cannot be examined is taken as readable (the
    /// loader has read it as this process; nothing sure to say).
    fn blocked_at(&self, path: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
        if self.uid.is_root() {
            return None;
        }
        let full = std::fs::canonicalize(path).ok()?;
        let mut dirs: Vec<&Path> = full.ancestors().skip(1).collect();
        dirs.reverse();
        for dir in dirs {
            let meta = std::fs::metadata(dir).ok()?;
            if !self.allowed(&meta, 0o1) {
                return Some((dir.to_path_buf(), meta));
            }
        }
        let meta = std::fs::metadata(&full).ok()?;
        (!self.allowed(&meta, 0o4)).then_some((full, meta))
    }

    /// Whether `meta`'s mode grants `bit` (4 read, 1 search) to this user:
    /// the owner's bits if it owns the file, else the group's if it is in
    /// the file's group, else the others'.
    fn allowed(&self, meta: &std::fs::Metadata, bit: u32) -> bool {
        let mode = meta.permissions().mode();
        let shift = if meta.uid() == self.uid.as_raw() {
            6
        } else if self.groups.iter().any(|gid| gid.as_raw() == meta.gid()) {
            3
        } else {
            0
        };
        (mode >> shift) & bit != 0
    }

    /// What to say about `path` if this user cannot read it.
    fn warning(&self, path: &Path) -> Option<String> {
        let (blocker, meta) = self.blocked_at(path)?;
        let who = self.name.as_str();
        let shown = path.display();
        let owner_mode = describe(&meta);
        let fix = if blocker.is_dir() {
            let name = path
                .file_name()
                .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
            format!(
                "cannot read `{shown}`: the directory `{}` ({owner_mode}) keeps it out; keep \
                 the file in /etc/solocron instead: `install -m 0640 -o root -g {} {shown} \
                 /etc/solocron/{name}`, then use that path",
                blocker.display(),
                self.group
            )
        } else {
            format!(
                "cannot read `{shown}` ({owner_mode}); fix: `chown root:{group} {shown} && chmod \
                 0640 {shown}`",
                group = self.group
            )
        };
        Some(format!(
            "the service user `{who}` {fix} (as `{who}` the daemon would stop at start with exit \
             78)"
        ))
    }
}

/// `owner NAME, group NAME, mode 0NNN` of `meta` (ids where a name is
/// unknown).
fn describe(meta: &std::fs::Metadata) -> String {
    let owner = User::from_uid(Uid::from_raw(meta.uid()))
        .ok()
        .flatten()
        .map_or_else(|| meta.uid().to_string(), |user| user.name);
    let group = Group::from_gid(Gid::from_raw(meta.gid()))
        .ok()
        .flatten()
        .map_or_else(|| meta.gid().to_string(), |group| group.name);
    format!(
        "owner {owner}, group {group}, mode {:04o}",
        meta.permissions().mode() & 0o7777
    )
}

/// A warning for `jobs.toml` itself and each file it names that `user`
/// cannot read, in file order (`jobs.toml` first).
pub fn unreadable(config: &Config, user: &ServiceUser) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if let Some(message) = user.warning(&config.path) {
        warnings.push(Warning {
            path: config.path.clone(),
            line: 1,
            column: 1,
            key: String::new(),
            message,
        });
    }
    for file in &config.files {
        if let Some(message) = user.warning(&file.path) {
            warnings.push(file.spot.warning(&message));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32, groups: &[u32]) -> ServiceUser {
        ServiceUser {
            name: "svc".into(),
            uid: Uid::from_raw(uid),
            group: "svc".into(),
            groups: groups.iter().copied().map(Gid::from_raw).collect(),
        }
    }

    #[test]
    fn the_bits_that_apply_are_the_owners_else_the_groups_else_the_others() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("f");
        std::fs::write(&file, "x").expect("write");
        let meta = |mode: u32| {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
            std::fs::metadata(&file).expect("stat")
        };
        let (uid, gid) = {
            let m = meta(0o600);
            (m.uid(), m.gid())
        };
        let owner = user(uid, &[]);
        let member = user(uid + 1, &[gid]);
        let stranger = user(uid + 1, &[gid + 1]);
        assert!(owner.allowed(&meta(0o400), 4));
        // The owner's bits alone apply to the owner.
        assert!(!owner.allowed(&meta(0o044), 4));
        assert!(member.allowed(&meta(0o640), 4));
        assert!(!member.allowed(&meta(0o604), 4));
        assert!(stranger.allowed(&meta(0o604), 4));
        assert!(!stranger.allowed(&meta(0o640), 4));
        assert!(member.allowed(&meta(0o710), 1));
    }
}
