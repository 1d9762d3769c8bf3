//! The error every component's settings return when they cannot work.

/// A setting that cannot work (a zero batch size, a zero interval, ...).
/// Every `Config::validate` in jobwire returns this, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {setting}: {reason}")]
pub struct InvalidSetting {
    /// The setting, as `component.field` (e.g. `sweeper.batch_size`).
    pub setting: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

impl InvalidSetting {
    /// `setting` is invalid because of `reason`.
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        InvalidSetting {
            setting,
            reason: reason.into(),
        }
    }

    /// Fails unless `value` is at least 1.
    pub fn require_positive(setting: &'static str, value: usize) -> Result<(), InvalidSetting> {
        if value == 0 {
            return Err(InvalidSetting::new(setting, "must be at least 1"));
        }
        Ok(())
    }

    /// Fails unless `value` is longer than zero.
    pub fn require_nonzero(
        setting: &'static str,
        value: std::time::Duration,
    ) -> Result<(), InvalidSetting> {
        if value.is_zero() {
            return Err(InvalidSetting::new(setting, "must be longer than zero"));
        }
        Ok(())
    }
}
