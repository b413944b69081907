//! A point of a broker's version axis (a broker from one Debian release), and the
//! macro each broker's module writes its axis with.

/// One point of a broker's version axis: a broker from one Debian release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisPoint {
    /// The broker as `scripts/images.sh` names it (`redis`, `valkey`, ...).
    pub broker: &'static str,
    /// The Debian release it comes from.
    pub release: &'static str,
    /// The version the package mirror served when the axis was written (the image
    /// records the exact version it got, which is the one reported).
    pub known_version: &'static str,
}

impl AxisPoint {
    /// The image `scripts/images.sh <broker>@<release>` builds.
    pub fn image(&self) -> String {
        format!("pcs/{}:{}", self.broker, self.release)
    }
}

/// A versions axis as a broker's module writes it: each broker (as `scripts/images.sh`
/// names it) with its points, oldest first, as the Debian release and the version it
/// carried, e.g. `"redis": bullseye "6.0.16", bookworm "7.0.15"; "valkey": trixie "8.1.1"`.
macro_rules! points {
    ($($broker:literal: $($release:ident $version:literal),+);+ $(;)?) => {
        &[$($($crate::provision::axis::AxisPoint {
            broker: $broker,
            release: stringify!($release),
            known_version: $version,
        }),+),+]
    };
}
pub(crate) use points;
