//! A point of a broker's version axis: a broker from one Debian release.

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
    /// `broker release version`, as `brokers/versions.yaml` writes a point.
    pub fn parse(text: &'static str) -> Option<AxisPoint> {
        let mut words = text.split_whitespace();
        let point = AxisPoint {
            broker: words.next()?,
            release: words.next()?,
            known_version: words.next()?,
        };
        words.next().is_none().then_some(point)
    }

    /// The image `scripts/images.sh <broker>@<release>` builds.
    pub fn image(&self) -> String {
        format!("pcs/{}:{}", self.broker, self.release)
    }
}
