//! Why the flags give no configuration: the one error type the flag
//! parsing (`cli.rs`) and the flash tier's opening (`ext.rs`) both return.

/// Why the flags give no configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Invalid or conflicting flags, or a path that cannot be used.
    #[error("{0}")]
    Usage(String),
    /// A file the flags name is another running server's (its flash
    /// file): refused as a snapshot another server holds is.
    #[error("{0}")]
    InUse(String),
}

impl From<String> for ConfigError {
    fn from(msg: String) -> ConfigError {
        ConfigError::Usage(msg)
    }
}

impl From<&str> for ConfigError {
    fn from(msg: &str) -> ConfigError {
        ConfigError::Usage(msg.to_string())
    }
}
