//! Lanes artifact store: an attempt's files kept in object storage, so the evidence behind a
//! score outlives the host that ran it.
//!
//! - [`ArtifactStore`] is opened from a URL (`s3://bucket/prefix`, `gs://…`, `az://…` or
//!   `file:///path`); credentials and endpoints come from each cloud's standard environment
//!   variables, read by the worker and the coordinator only.
//! - An attempt goes to `<prefix>/<campaign>/<trial_id>/a<attempt>/`: its files, then a
//!   [`Manifest`] (`manifest.json`) with every file's size and SHA-256. The manifest is
//!   written last, so its presence says the upload is whole.
//! - Errors say whether trying again can help ([`StoreError::Unavailable`]) or not
//!   ([`StoreError::Refused`]: a wrong bucket, no permission, a file over the size limit).

mod error;
mod location;
mod manifest;
mod read;
mod upload;

pub use error::StoreError;
pub use location::{ArtifactStore, Location, StoreOptions};
pub use manifest::{MANIFEST, Manifest, ManifestFile};
pub use upload::Uploaded;
