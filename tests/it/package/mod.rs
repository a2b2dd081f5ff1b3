//! The Debian package and the systemd unit it ships.

mod deb;
mod systemd_unit;
